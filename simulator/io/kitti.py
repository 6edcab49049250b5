"""KITTI ``.bin`` (float32 x, y, z, reflectance 0-1) with a SemanticKITTI ``.label`` beside it.

The reflectance column is the intensity divided by the scanner's ``intensity_max``.
The ``.label`` file holds one uint32 per point: the semantic id in the low 16 bits
and the instance id in the high 16 bits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..pointcloud import PointCloud
from .atomic import atomic_path

__all__ = ["read_kitti", "write_kitti"]


def write_kitti(cloud: PointCloud, path: Path) -> list[Path]:
    """Write ``path`` (``.bin``) and ``path.with_suffix('.label')``."""
    scale = float(cloud.meta.get("intensity_max", 255.0))
    data = np.zeros((len(cloud), 4), dtype="<f4")
    data[:, :3] = cloud["xyz"]
    data[:, 3] = cloud["intensity"] / scale
    labels = cloud["label"].astype("<u4") | (cloud["instance"].astype("<u4") << np.uint32(16))
    label_path = path.with_suffix(".label")
    with atomic_path(path) as tmp_bin, atomic_path(label_path) as tmp_label:
        data.tofile(tmp_bin)
        labels.tofile(tmp_label)
    return [path, label_path]


def read_kitti(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Read a KITTI ``.bin`` as (N, 4) float32 and its ``.label`` as (N,) uint32 if present."""
    path = Path(path)
    points = np.fromfile(path, dtype="<f4").reshape(-1, 4)
    label_path = path.with_suffix(".label")
    labels = np.fromfile(label_path, dtype="<u4") if label_path.exists() else None
    return points, labels
