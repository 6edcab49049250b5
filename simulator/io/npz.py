"""NumPy ``.npz``: every field stored under its own name (see DESIGN.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..pointcloud import PointCloud
from .atomic import atomic_path

__all__ = ["read_npz", "write_npz"]


def write_npz(cloud: PointCloud, path: Path) -> list[Path]:
    """Write all fields of ``cloud`` to an uncompressed ``.npz``."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **cloud.fields)
    return [path]


def read_npz(path: str | Path) -> PointCloud:
    """Read a cloud written by :func:`write_npz`."""
    with np.load(path) as data:
        return PointCloud({k: data[k] for k in data.files})
