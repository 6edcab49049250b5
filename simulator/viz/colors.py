"""Colours of points by field: intensity, label (SemanticKITTI's map), ring, range, return."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..errors import ConfigError
from ..pointcloud import PointCloud

__all__ = [
    "COLOR_FIELDS",
    "COLOR_SOURCES",
    "SEMANTIC_KITTI_RGB",
    "check_color_field",
    "colors_for",
    "label_colors",
]

# semantic-kitti.yaml's color_map, which is BGR.
_BGR: dict[int, tuple[int, int, int]] = {
    0: (0, 0, 0), 1: (0, 0, 255), 10: (245, 150, 100), 11: (245, 230, 100),
    13: (250, 80, 100), 15: (150, 60, 30), 16: (255, 0, 0), 18: (180, 30, 80),
    20: (255, 0, 0), 30: (30, 30, 255), 31: (200, 40, 255), 32: (90, 30, 150),
    40: (255, 0, 255), 44: (255, 150, 255), 48: (75, 0, 75), 49: (75, 0, 175),
    50: (0, 200, 255), 51: (50, 120, 255), 52: (0, 150, 255), 60: (170, 255, 150),
    70: (0, 175, 0), 71: (0, 60, 135), 72: (80, 240, 150), 80: (150, 240, 255),
    81: (0, 0, 255), 99: (255, 255, 50), 252: (245, 150, 100), 253: (200, 40, 255),
    254: (30, 30, 255), 255: (90, 30, 150), 256: (255, 0, 0), 257: (250, 80, 100),
    258: (180, 30, 80), 259: (255, 0, 0),
    # WADS' winter classes: falling snow in cyan, accumulated snow in white.
    110: (255, 255, 0), 111: (255, 255, 255),
}  # fmt: skip

#: SemanticKITTI's colour map as RGB, by id.
SEMANTIC_KITTI_RGB: dict[int, tuple[int, int, int]] = {
    k: (r, g, b) for k, (b, g, r) in _BGR.items()
}

#: Fields a cloud can be coloured by, in the order the viewer's keys cycle them.
COLOR_FIELDS = ("intensity", "label", "ring", "range", "return")
#: The point field each colouring needs (``range`` falls back to the coordinates).
COLOR_SOURCES = {"intensity": "intensity", "label": "label", "ring": "ring",
                 "return": "return_number"}  # fmt: skip


def check_color_field(cloud: PointCloud, color: str, source: str | Path) -> None:
    """Refuse to colour ``cloud`` (read from ``source``) by a field it does not hold: a
    :class:`~simulator.errors.ConfigError` naming the source, ``--color`` and the fields."""
    needed = COLOR_SOURCES.get(color)
    if needed is not None and needed not in cloud.names:
        raise ConfigError(source, "--color", f"{color}: the cloud has no {needed} "
                          f"field (it has {', '.join(cloud.names)})")  # fmt: skip


def label_colors(label: NDArray) -> NDArray[np.float64]:
    """(N, 3) RGB in [0, 1] of SemanticKITTI ids (unknown ids grey)."""
    lut = np.full((65536, 3), 128, dtype=np.uint8)
    for k, rgb in SEMANTIC_KITTI_RGB.items():
        lut[k] = rgb
    return lut[np.asarray(label, dtype=np.int64)] / 255.0


def _ramp(values: NDArray, lo: float, hi: float, cmap: str = "viridis") -> NDArray[np.float64]:
    from matplotlib import colormaps

    scaled = np.clip((np.asarray(values, dtype=np.float64) - lo) / max(hi - lo, 1e-12), 0, 1)
    return colormaps[cmap](scaled)[:, :3]


def colors_for(cloud: PointCloud, field: str) -> NDArray[np.float64]:
    """(N, 3) RGB in [0, 1] of a cloud coloured by ``field`` (one of :data:`COLOR_FIELDS`).

    Intensity uses 0-100 (the diffuse range; retroreflectors saturate), range the 2nd to
    98th percentile, ring and return number a qualitative map.
    """
    n = len(cloud)
    if n == 0:
        return np.zeros((0, 3))
    if field == "label" and "label" in cloud:
        return label_colors(cloud["label"])
    if field == "intensity" and "intensity" in cloud:
        return _ramp(cloud["intensity"], 0.0, 100.0, "viridis")
    if field == "ring" and "ring" in cloud:
        return _ramp(cloud["ring"] % 20, 0, 19, "tab20")
    if field == "return" and "return_number" in cloud:
        return _ramp(cloud["return_number"], 1, 4, "plasma")
    if field == "range":
        r = cloud["range_m"] if "range_m" in cloud else np.linalg.norm(cloud["xyz"], axis=1)
        lo, hi = np.percentile(r, [2, 98])
        return _ramp(r, float(lo), float(hi), "turbo")
    raise ValueError(f"cannot colour by {field!r}; the cloud has {', '.join(cloud.names)}")
