"""An Open3D window on a cloud (and optionally its scene), with keys to change colouring.

Keys: ``I`` intensity, ``L`` label, ``R`` ring, ``D`` range (distance), ``N`` return
number, ``M`` show or hide the scene mesh, ``S`` save a screenshot, ``Q``/``Esc`` quit.

Without a display a window cannot open (Open3D would draw into an invisible offscreen
context and wait forever for a key), so :func:`view` refuses at once
(:func:`display_problem`); a screenshot needs no display.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..errors import SimulatorError
from ..pointcloud import PointCloud
from ..world.scene import Scene
from .colors import colors_for

__all__ = ["KEYS", "display_problem", "require_display", "view"]

#: What to do instead of opening a window where none can open.
_NO_DISPLAY_HINT = (
    "draw a picture instead (lidar-sim view ... --screenshot out/view.png, or lidar-sim "
    "render ... -o out/view.png), or run it on a virtual display: xvfb-run lidar-sim view ..."
)

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


def _x11_answers(display: str) -> bool:
    """Whether the X server ``display`` names accepts a connection (Xlib's XOpenDisplay,
    which Open3D's window library calls too)."""
    import ctypes

    try:
        xlib = ctypes.CDLL("libX11.so.6")
    except OSError:
        return False  # no Xlib: Open3D cannot use X either
    xlib.XOpenDisplay.argtypes = [ctypes.c_char_p]
    xlib.XOpenDisplay.restype = ctypes.c_void_p
    xlib.XCloseDisplay.argtypes = [ctypes.c_void_p]
    handle = xlib.XOpenDisplay(display.encode())
    if not handle:
        return False
    xlib.XCloseDisplay(handle)
    return True


def _wayland_answers(display: str) -> bool:
    """Whether the Wayland compositor socket ``display`` names accepts a connection."""
    path = Path(display)
    if not path.is_absolute():
        path = Path(os.environ.get("XDG_RUNTIME_DIR", "/nonexistent")) / display
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def display_problem() -> str | None:
    """Why no window can open here (on Linux: neither ``DISPLAY`` nor ``WAYLAND_DISPLAY``
    set, or the display they name does not answer), or None when one can."""
    if not sys.platform.startswith("linux"):
        return None  # macOS and Windows always have their own window system
    x11, wayland = os.environ.get("DISPLAY", ""), os.environ.get("WAYLAND_DISPLAY", "")
    if not x11 and not wayland:
        return "no display to open a window on (DISPLAY and WAYLAND_DISPLAY are not set)"
    if (wayland and _wayland_answers(wayland)) or (x11 and _x11_answers(x11)):
        return None
    named = " or ".join(repr(d) for d in (x11, wayland) if d)
    return f"no display to open a window on ({named} does not answer)"


def require_display() -> None:
    """Raise :class:`~simulator.errors.SimulatorError` (what is wrong and what to do
    instead) when no window can open here (:func:`display_problem`)."""
    problem = display_problem()
    if problem is not None:
        raise SimulatorError(f"{problem}; {_NO_DISPLAY_HINT}")


@contextmanager
def _runtime_dir() -> Iterator[None]:
    """``XDG_RUNTIME_DIR`` set to a private temporary folder while Open3D makes its window
    when it is not set: libwayland, which Open3D's window library probes, would print
    ``error: XDG_RUNTIME_DIR is invalid or not set``, a line that reads as ours."""
    current = os.environ.get("XDG_RUNTIME_DIR", "")
    if current and Path(current).is_dir():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="lidar-sim-runtime-") as private:  # mode 0700
        os.environ["XDG_RUNTIME_DIR"] = private
        try:
            yield
        finally:
            if current:
                os.environ["XDG_RUNTIME_DIR"] = current
            else:
                del os.environ["XDG_RUNTIME_DIR"]


def view(
    cloud: PointCloud,
    color_by: str = "intensity",
    scene: Scene | None = None,
    screenshot: str | Path | None = None,
    width: int = 1280,
    height: int = 800,
) -> Path | None:
    """Open the viewer. With ``screenshot``, draw once, save the picture and close.

    Raises
    ------
    SimulatorError
        Without ``screenshot``, when no window can open (:func:`display_problem`); with
        or without, when Open3D cannot make its window.
    """
    if screenshot is None:
        require_display()
    with _runtime_dir():
        return _show(cloud, color_by, scene, screenshot, width, height)


def _show(
    cloud: PointCloud,
    color_by: str,
    scene: Scene | None,
    screenshot: str | Path | None,
    width: int,
    height: int,
) -> Path | None:
    """The window of :func:`view`, on a display it has checked."""
    import open3d as o3d

    vis = o3d.visualization.VisualizerWithKeyCallback()
    if not vis.create_window("lidar-sim", width, height, visible=screenshot is None):
        raise SimulatorError(f"Open3D could not open a window; {_NO_DISPLAY_HINT}")
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
