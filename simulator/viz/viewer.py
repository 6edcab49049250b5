"""An Open3D window on a cloud (and optionally its scene), with keys to change colouring.

Keys: ``I`` intensity, ``L`` label, ``R`` ring, ``D`` range (distance), ``N`` return
number, ``M`` show or hide the scene mesh, ``S`` save a screenshot, ``Q``/``Esc`` quit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..pointcloud import PointCloud
from ..scene import Scene
from .colors import colors_for

__all__ = ["KEYS", "view"]

#: Key -> what it does (printed when the window opens).
KEYS = {
    "I": "colour by intensity",
    "L": "colour by label (SemanticKITTI colours)",
    "R": "colour by ring",
    "D": "colour by range",
    "N": "colour by return number",
    "M": "show / hide the scene mesh",
    "S": "save a screenshot (lidar-sim-view.png)",
    "Q": "quit",
}
_FIELD_OF_KEY = {"I": "intensity", "L": "label", "R": "ring", "D": "range", "N": "return"}


def _scene_mesh(scene: Scene):  # type: ignore[no-untyped-def]
    import open3d as o3d

    static = [o for o in scene.objects if not o.moving]
    offsets = np.cumsum([0] + [len(o.vertices_m) for o in static[:-1]])
    mesh = o3d.geometry.TriangleMesh(
        o3d.utility.Vector3dVector(np.concatenate([o.vertices_m for o in static])),
        o3d.utility.Vector3iVector(
            np.concatenate([o.faces + k for o, k in zip(static, offsets, strict=True)])
        ),
    )
    mesh.compute_vertex_normals()
    mesh.paint_uniform_color([0.75, 0.75, 0.78])
    return mesh


def view(
    cloud: PointCloud,
    color_by: str = "intensity",
    scene: Scene | None = None,
    screenshot: str | Path | None = None,
    width: int = 1280,
    height: int = 800,
) -> Path | None:
    """Open the viewer. With ``screenshot``, draw once, save the picture and close."""
    import open3d as o3d

    vis = o3d.visualization.VisualizerWithKeyCallback()
    if not vis.create_window("lidar-sim", width, height, visible=screenshot is None):
        raise RuntimeError("Open3D could not open a window (no display? try xvfb-run)")
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(cloud["xyz"].astype(np.float64)))
    pcd.colors = o3d.utility.Vector3dVector(colors_for(cloud, color_by))
    vis.add_geometry(pcd)
    mesh = _scene_mesh(scene) if scene is not None else None
    shown = {"mesh": False}
    opt = vis.get_render_option()
    opt.point_size = 2.0
    opt.background_color = np.array([1.0, 1.0, 1.0])

    def recolour(field: str):  # type: ignore[no-untyped-def]
        def callback(v):  # type: ignore[no-untyped-def]
            pcd.colors = o3d.utility.Vector3dVector(colors_for(cloud, field))
            v.update_geometry(pcd)
            print(f"colour: {field}")
            return True

        return callback

    def toggle_mesh(v):  # type: ignore[no-untyped-def]
        if mesh is None:
            print("no scene to show (view a survey to see its mesh)")
            return False
        if shown["mesh"]:
            v.remove_geometry(mesh, reset_bounding_box=False)
        else:
            v.add_geometry(mesh, reset_bounding_box=False)
        shown["mesh"] = not shown["mesh"]
        return True

    def save(v):  # type: ignore[no-untyped-def]
        v.capture_screen_image("lidar-sim-view.png", do_render=True)
        print("saved lidar-sim-view.png")
        return False

    for key, field in _FIELD_OF_KEY.items():
        vis.register_key_callback(ord(key), recolour(field))
    vis.register_key_callback(ord("M"), toggle_mesh)
    vis.register_key_callback(ord("S"), save)
    if screenshot is not None:
        for _ in range(3):
            vis.poll_events()
            vis.update_renderer()
        path = Path(screenshot)
        path.parent.mkdir(parents=True, exist_ok=True)
        vis.capture_screen_image(str(path), do_render=True)
        vis.destroy_window()
        return path
    print("lidar-sim view: " + ", ".join(f"{k} {v}" for k, v in KEYS.items()))
    vis.run()
    vis.destroy_window()
    return None
