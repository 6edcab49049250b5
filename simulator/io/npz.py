"""NumPy ``.npz``: every field stored under its own name (see DESIGN.md).

Written chunk by chunk: the fields are spooled to raw files, and at the end each is
streamed into the (uncompressed, zip64) archive behind its ``.npy`` header, so a
survey of any length is written with the memory of one chunk.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from ..pointcloud import PointCloud
from .atomic import atomic_path
from .spool import SpooledWriter

__all__ = ["NpzWriter", "read_npz"]

_BLOCK = 16 * 2**20


class NpzWriter(SpooledWriter):
    """Chunked writer of ``.npz`` files."""

    def close(self) -> list[Path]:
        """Assemble the archive and rename it into place."""
        spool = self.spool
        spool.flush()
        try:
            with atomic_path(self.path) as tmp, zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
                for name, (dtype, shape) in spool.dtypes.items():
                    header = {
                        "descr": np.lib.format.dtype_to_descr(dtype),
                        "fortran_order": False,
                        "shape": (spool.count, *shape),
                    }
                    with zf.open(f"{name}.npy", "w", force_zip64=True) as out:
                        np.lib.format.write_array_header_2_0(out, header)
                        with open(spool.path(name), "rb") as raw:
                            while block := raw.read(_BLOCK):
                                out.write(block)
        finally:
            spool.remove()
        return [self.path]


def read_npz(path: str | Path) -> PointCloud:
    """Read a cloud written by :class:`NpzWriter`."""
    with np.load(path) as data:
        return PointCloud({k: data[k] for k in data.files})
