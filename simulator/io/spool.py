"""A spool of record fields on disk: one raw file per field, appended chunk by chunk.

Formats that store a field's values together (npz) or that need the point count
before the data (PCD, PLY) spool the chunks here and assemble the file at the end,
so memory stays bounded by one chunk during the scan.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import FieldSpec, PointCloud

__all__ = ["FieldSpool", "SpooledWriter", "bytes_view"]


def bytes_view(array: NDArray) -> memoryview:
    """The bytes of an array without a copy (for a file write, which releases the GIL)."""
    return memoryview(np.ascontiguousarray(array).reshape(-1)).cast("B")


class FieldSpool:
    """Raw per-field files in a temporary folder beside ``target``.

    Parameters
    ----------
    target : Path
        The final output; the spool lives in its folder (same file system).
    spec : FieldSpec
        The fields every chunk carries.
    """

    def __init__(self, target: Path, spec: FieldSpec) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.spool-", dir=target.parent))
        self.count = 0
        self.dtypes = dict(spec)
        self._files = {k: open(self.folder / k, "wb") for k in spec}  # noqa: SIM115

    def append(self, chunk: PointCloud) -> None:
        """Append a chunk's fields."""
        if chunk.spec != self.dtypes:
            raise ValueError(f"chunk fields {chunk.spec} differ from the spool's {self.dtypes}")
        for name, fh in self._files.items():
            # A buffer write releases the GIL and copies nothing.
            fh.write(bytes_view(chunk.fields[name]))
        self.count += len(chunk)

    def flush(self) -> None:
        """Close the field files (after the last chunk)."""
        for fh in self._files.values():
            fh.close()

    def path(self, name: str) -> Path:
        """Raw file of a field."""
        return self.folder / name

    def array(self, name: str) -> NDArray:
        """A field as a read-only memory map (no copy into memory)."""
        dtype, shape = self.dtypes[name]
        if self.count == 0:
            return np.zeros((0, *shape), dtype=dtype)
        return np.memmap(self.path(name), dtype=dtype, mode="r", shape=(self.count, *shape))

    def remove(self) -> None:
        """Delete the spool."""
        self.flush()
        shutil.rmtree(self.folder, ignore_errors=True)


class SpooledWriter:
    """Base of the writers that spool chunks and assemble the file when closed."""

    def __init__(self, path: Path, spec: FieldSpec, meta: dict) -> None:
        del meta
        self.path = path
        self.spool = FieldSpool(path, spec)

    def write(self, chunk: PointCloud) -> None:
        """Append a chunk."""
        self.spool.append(chunk)

    def abort(self) -> None:
        """Drop everything written so far."""
        self.spool.remove()
