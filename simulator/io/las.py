"""LAS 1.4 point format 6 (and LAZ, compressed with lazrs) through laspy.

Standard fields: coordinates (0.1 mm scale), ``intensity`` (the reflectivity,
rounded), ``return_number``, ``number_of_returns``, ``gps_time`` (seconds from the
survey start) and ``classification`` (the SemanticKITTI id where it fits in a byte,
else 0; the exact id is always in the ``label`` extra dimension). Extra bytes:
``ring``, ``label``, ``instance`` (uint16) and ``range`` (float32, m).
"""

from __future__ import annotations

from pathlib import Path

import laspy
import numpy as np

from ..pointcloud import PointCloud
from .atomic import atomic_path

__all__ = ["write_las"]

_SCALE_M = 1e-4
_EXTRA = {"ring": np.uint16, "label": np.uint16, "instance": np.uint16, "range": np.float32}


def write_las(cloud: PointCloud, path: Path) -> list[Path]:
    """Write ``cloud`` as LAS, or LAZ when ``path`` ends in ``.laz``."""
    header = laspy.LasHeader(point_format=6, version="1.4")
    header.add_extra_dims([laspy.ExtraBytesParams(name=k, type=t) for k, t in _EXTRA.items()])
    xyz = cloud["xyz"].astype(np.float64)
    header.offsets = np.floor(xyz.min(axis=0)) if len(xyz) else np.zeros(3)
    header.scales = np.full(3, _SCALE_M)
    data = laspy.LasData(header)
    data.x, data.y, data.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    data.intensity = np.clip(np.round(cloud["intensity"]), 0, 65535).astype(np.uint16)
    data.return_number = cloud["return_number"]
    data.number_of_returns = cloud["num_returns"]
    data.gps_time = cloud["time_s"]
    label = cloud["label"]
    data.classification = np.where(label < 256, label, 0).astype(np.uint8)
    data.ring = cloud["ring"]
    data.label = label
    data.instance = cloud["instance"]
    data.range = cloud["range_m"]
    with atomic_path(path) as tmp:
        data.write(str(tmp), do_compress=path.suffix.lower() == ".laz")
    return [path]
