"""LAS 1.4 point format 6 (and LAZ, compressed with lazrs) through laspy, chunk by chunk.

Standard fields: coordinates (0.1 mm scale), ``intensity`` (the reflectivity,
rounded), ``return_number``, ``number_of_returns``, ``gps_time`` (seconds from the
survey start) and ``classification`` (the SemanticKITTI id where it fits in a byte,
else 0; the exact id is always in the ``label`` extra dimension). Extra bytes:
``ring``, ``label``, ``instance`` (uint16) and ``range`` (float32, m).

The coordinate offset is the floor of the first non-empty chunk's minimum, so map
coordinates (UTM) keep the 0.1 mm resolution within +-214 km of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import laspy
import numpy as np

from ..backend import Backend, select_backend
from ..pointcloud import FieldSpec, PointCloud
from .atomic import atomic_path

__all__ = ["LasWriter"]

_SCALE_M = 1e-4
_EXTRA = {"ring": np.uint16, "label": np.uint16, "instance": np.uint16, "range": np.float32}


def _header(offset_m: np.ndarray) -> laspy.LasHeader:
    header = laspy.LasHeader(point_format=6, version="1.4")
    header.add_extra_dims([laspy.ExtraBytesParams(name=k, type=t) for k, t in _EXTRA.items()])
    header.offsets = offset_m
    header.scales = np.full(3, _SCALE_M)
    return header


def _records(
    chunk: PointCloud, header: laspy.LasHeader, backend: Backend
) -> laspy.PackedPointRecord:
    """The chunk packed straight into the point format's record layout (no per-field copies
    through laspy's accessors), by the backend's ``pack_las``."""
    fmt = header.point_format
    data = np.zeros(len(chunk), dtype=fmt.dtype())
    backend.pack_las(chunk.fields, header.offsets, header.scales, data)
    return laspy.PackedPointRecord(data, fmt)


class LasWriter:
    """Chunked writer of LAS, or LAZ when the path ends in ``.laz``."""

    def __init__(
        self, path: Path, spec: FieldSpec, meta: dict[str, Any], backend: Backend | None = None
    ) -> None:
        del spec, meta
        self.path = path
        #: Packs the records (the numba kernel when there is numba).
        self.backend = backend if backend is not None else select_backend()
        self.compress = path.suffix.lower() == ".laz"
        self._atomic = atomic_path(path)
        self._tmp = self._atomic.__enter__()
        self._writer: laspy.LasWriter | None = None

    def _open(self, offset_m: np.ndarray) -> laspy.LasWriter:
        return laspy.open(
            str(self._tmp), mode="w", header=_header(offset_m), do_compress=self.compress
        )

    def write(self, chunk: PointCloud) -> None:
        """Append a chunk."""
        if len(chunk) == 0:
            return
        if self._writer is None:
            self._writer = self._open(np.floor(chunk["xyz"].min(axis=0).astype(np.float64)))
        self._writer.write_points(_records(chunk, self._writer.header, self.backend))

    def close(self) -> list[Path]:
        """Finish the header and rename the file into place."""
        try:
            if self._writer is None:  # no points at all: a valid empty file
                self._writer = self._open(np.zeros(3))
            self._writer.close()
        except BaseException as exc:
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._atomic.__exit__(None, None, None)
        return [self.path]

    def abort(self) -> None:
        """Drop everything written so far."""
        if self._writer is not None:
            self._writer.close()
        err = RuntimeError("aborted")
        self._atomic.__exit__(RuntimeError, err, None)
