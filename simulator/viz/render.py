"""Headless renders of a cloud with Open3D's offscreen renderer (software Vulkan works).

Two default cameras: ``sensor``, a chase view from behind and above the sensor looking
forward (the cloud's frame origin is taken as the sensor), and ``bev``, a bird's-eye
view from straight above that fits the central 95 % of the points. A legend (SemanticKITTI
classes present, or a colour bar) is drawn beside the picture with matplotlib.

The engine's logs (Open3D's and Filament's: the window system, the Vulkan device, the
engine's set-up, 9 lines a render) are left out unless ``LIDAR_SIM_VERBOSE=1`` is set
(:func:`engine_logs_silenced`).
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..labels import label_name
from ..pointcloud import PointCloud
from ..world.boxes import Boxes
from .colors import SEMANTIC_KITTI_RGB, colors_for

__all__ = ["VERBOSE_VARIABLE", "box_corners", "engine_logs_silenced", "render", "render_array"]


#: The 12 edges of a box by corner index (corner k has signs (x, y, z) from its bits).
_EDGES = [(0, 1), (2, 3), (4, 5), (6, 7), (0, 2), (1, 3), (4, 6), (5, 7),
          (0, 4), (1, 5), (2, 6), (3, 7)]  # fmt: skip


#: Set to 1 to see the renderer's engine logs.
VERBOSE_VARIABLE = "LIDAR_SIM_VERBOSE"


@contextmanager
def engine_logs_silenced() -> Iterator[None]:
    """Leave out what the renderer's engine prints while inside: Open3D's log (its verbosity
    set to errors) and Filament's native lines (file descriptors 1 and 2 sent to
    ``os.devnull``, the C library's buffers flushed before they are given back), unless
    ``LIDAR_SIM_VERBOSE=1``. Python's own ``sys.stdout`` and ``sys.stderr`` are flushed first,
    so nothing of the command's is lost."""
    import open3d as o3d

    if os.environ.get(VERBOSE_VARIABLE, "") == "1":
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    libc = ctypes.CDLL(None)
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no descriptor 1 or 2 to silence (a daemon's)
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        with o3d.utility.VerbosityContextManager(o3d.utility.VerbosityLevel.Error):
            os.dup2(null, 1)
            os.dup2(null, 2)
            try:
                yield
            finally:
                libc.fflush(None)
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in (*saved, null):
            os.close(fd)


def box_corners(boxes: Boxes) -> NDArray[np.float64]:
    """(B, 8, 3) corners of the boxes; corner ``k`` is at ``+-size/2`` by the bits of k
    (bit 2: x, bit 1: y, bit 0: z)."""
    signs = np.array([[(k >> 2) & 1, (k >> 1) & 1, k & 1] for k in range(8)]) * 2.0 - 1.0
    local = signs[None] * boxes.size_m[:, None] / 2  # (B, 8, 3)
    return np.einsum("bij,bkj->bki", boxes.rotation, local) + boxes.centre_m[:, None]


def render_array(
    cloud: PointCloud,
    color_by: str = "intensity",
    view: str = "sensor",
    width: int = 1280,
    height: int = 720,
    point_size: float = 2.0,
    boxes: Boxes | None = None,
) -> NDArray[np.uint8]:
    """Render a cloud to an (height, width, 3) uint8 image (white background), with the
    edges of ``boxes`` (in the cloud's frame) in their class colours."""
    import open3d as o3d
    import open3d.visualization.rendering as rendering

    with engine_logs_silenced():
        renderer = rendering.OffscreenRenderer(width, height)
    pcd = o3d.geometry.PointCloud()
    xyz = cloud["xyz"].astype(np.float64)
    pcd.points = o3d.utility.Vector3dVector(xyz)
    pcd.colors = o3d.utility.Vector3dVector(colors_for(cloud, color_by))
    material = rendering.MaterialRecord()
    material.shader = "defaultUnlit"
    material.point_size = float(point_size)
    renderer.scene.add_geometry("cloud", pcd, material)
    if boxes is not None and len(boxes):
        corners = box_corners(boxes).reshape(-1, 3)
        lines = np.array([(8 * b + i, 8 * b + j) for b in range(len(boxes)) for i, j in _EDGES])
        rgb = np.array([SEMANTIC_KITTI_RGB.get(int(v), (0, 0, 0)) for v in boxes.label]) / 255.0
        lineset = o3d.geometry.LineSet(
            o3d.utility.Vector3dVector(corners), o3d.utility.Vector2iVector(lines)
        )
        lineset.colors = o3d.utility.Vector3dVector(np.repeat(rgb * 0.8, len(_EDGES), axis=0))
        line_material = rendering.MaterialRecord()
        line_material.shader = "unlitLine"
        line_material.line_width = 2.0
        renderer.scene.add_geometry("boxes", lineset, line_material)
    renderer.scene.set_background([1.0, 1.0, 1.0, 1.0])
    renderer.scene.view.set_post_processing(False)  # exact colours, no tone mapping
    if view == "bev":
        extent = float(np.percentile(np.abs(xyz[:, :2]), 95)) if len(xyz) else 10.0
        centre = np.array([0.0, 0.0, 0.0])
        eye = np.array([0.0, 0.0, 1.1 * extent / np.tan(np.radians(30.0))])
        renderer.setup_camera(60.0, centre, eye, [1.0, 0.0, 0.0])
    elif view == "sensor":
        renderer.setup_camera(70.0, [12.0, 0.0, 0.0], [-14.0, 0.0, 9.0], [0.0, 0.0, 1.0])
    else:
        raise ValueError(f"unknown view {view!r}; expected sensor or bev")
    image = np.asarray(renderer.render_to_image())[:, :, :3].copy()
    # Free the scene's geometry before the renderer goes: left to the interpreter's exit,
    # Filament may destroy a material while a renderable still uses it and abort the
    # process (utils::PreconditionPanic, "destroying MaterialInstance ... still in use").
    renderer.scene.clear_geometry()
    del renderer
    return image


def render(
    cloud: PointCloud,
    path: str | Path,
    color_by: str = "intensity",
    view: str = "sensor",
    width: int = 1280,
    height: int = 720,
    point_size: float = 2.0,
    title: str = "",
    boxes: Boxes | None = None,
) -> Path:
    """Render a cloud (and ``boxes``, see :func:`render_array`) to a PNG with a legend;
    returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    image = render_array(cloud, color_by, view, width, height, point_size, boxes)
    dpi = 100
    fig = plt.figure(figsize=(width / dpi + 2.4, height / dpi), dpi=dpi)
    ax = fig.add_axes((0.0, 0.0, width / (width + 240.0), 1.0))
    ax.imshow(image)
    ax.set_axis_off()
    legend_ax = fig.add_axes((width / (width + 240.0), 0.02, 240.0 / (width + 240.0), 0.82))
    legend_ax.set_axis_off()
    shown = f"\n{len(boxes)} boxes" if boxes is not None else ""
    legend_ax.set_title(f"{title}\n{len(cloud):,} points{shown}\ncolour: {color_by}", fontsize=9)
    if color_by == "label" and len(cloud):
        ids, counts = np.unique(cloud["label"], return_counts=True)
        order = np.argsort(-counts)
        handles = [
            Patch(color=np.array(SEMANTIC_KITTI_RGB.get(int(ids[i]), (128, 128, 128))) / 255.0,
                  label=f"{label_name(int(ids[i]))} ({counts[i]:,})")
            for i in order
        ]  # fmt: skip
        legend_ax.legend(handles=handles, loc="upper left", fontsize=8, frameon=False)
    else:
        from matplotlib import colormaps
        from matplotlib.colors import Normalize

        cmap = {"intensity": "viridis", "range": "turbo", "ring": "tab20", "return": "plasma"}
        lo, hi = {"intensity": (0, 100), "ring": (0, 19), "return": (1, 4)}.get(color_by, (0, 1))
        if color_by == "range" and len(cloud):
            lo, hi = np.percentile(cloud["range_m"], [2, 98])
        bar_ax = fig.add_axes((width / (width + 240.0) + 0.02, 0.1, 0.02, 0.6))
        mappable = plt.cm.ScalarMappable(
            Normalize(lo, hi), colormaps[cmap.get(color_by, "viridis")]
        )
        fig.colorbar(mappable, cax=bar_ax)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    tmp.replace(path)
    return path
