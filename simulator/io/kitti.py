"""KITTI ``.bin`` (float32 x, y, z, reflectance 0-1) with a SemanticKITTI ``.label`` beside it.

The reflectance column is the intensity divided by the scanner's ``intensity_max``.
The ``.label`` file holds one uint32 per point: the semantic id in the low 16 bits
and the instance id in the high 16 bits. Both files are appended chunk by chunk.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from ..pointcloud import FieldSpec, PointCloud
from .atomic import atomic_path
from .labels import pack_labels
from .spool import bytes_view

__all__ = ["KittiWriter", "read_kitti"]


class KittiWriter:
    """Chunked writer of ``path`` (``.bin``) and ``path.with_suffix('.label')``."""

    def __init__(self, path: Path, spec: FieldSpec, meta: dict[str, Any]) -> None:
        del spec
        self.path = path
        self.label_path = path.with_suffix(".label")
        self.intensity_max = float(meta.get("intensity_max", 255.0))
        self._stack = ExitStack()
        tmp_bin = self._stack.enter_context(atomic_path(path))
        tmp_label = self._stack.enter_context(atomic_path(self.label_path))
        self._bin = self._stack.enter_context(open(tmp_bin, "wb"))  # noqa: SIM115
        self._label = self._stack.enter_context(open(tmp_label, "wb"))  # noqa: SIM115

    def write(self, chunk: PointCloud) -> None:
        """Append a chunk."""
        data = np.zeros((len(chunk), 4), dtype="<f4")
        data[:, :3] = chunk["xyz"]
        data[:, 3] = chunk["intensity"] / self.intensity_max
        self._bin.write(bytes_view(data))
        self._label.write(bytes_view(pack_labels(chunk["label"], chunk["instance"])))

    def close(self) -> list[Path]:
        """Rename both files into place."""
        self._stack.close()
        return [self.path, self.label_path]

    def abort(self) -> None:
        """Drop everything written so far."""
        err = RuntimeError("aborted")
        self._stack.__exit__(RuntimeError, err, None)


def read_kitti(path: str | Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Read a KITTI ``.bin`` as (N, 4) float32 and its ``.label`` as (N,) uint32 if present
    (beside it, or in ``../labels/`` for a ``velodyne/`` folder of the SemanticKITTI layout)."""
    path = Path(path)
    points = np.fromfile(path, dtype="<f4").reshape(-1, 4)
    label_path = path.with_suffix(".label")
    if not label_path.exists() and path.parent.name == "velodyne":  # SemanticKITTI's layout
        label_path = path.parent.parent / "labels" / f"{path.stem}.label"
    labels = np.fromfile(label_path, dtype="<u4") if label_path.exists() else None
    return points, labels
