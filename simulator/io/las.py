"""LAS 1.4 point format 6 (and LAZ, compressed with lazrs) through laspy, chunk by chunk.

Standard fields: coordinates (0.1 mm scale), ``intensity`` (the reflectivity,
rounded), ``return_number``, ``number_of_returns``, ``gps_time`` (seconds from the
survey start) and ``classification`` (the SemanticKITTI id where it fits in a byte,
else 0; the exact id is always in the ``label`` extra dimension). Extra bytes:
``ring``, ``label``, ``instance`` (uint16) and ``range`` (float32, m).

The coordinate offset is chosen before any point is written, so the file's bytes do not
depend on how the scan was cut into chunks: 0 in the sensor's frames, and the floor of the
sensor's first position in the world frame (``meta["sensor_position_m"]``), so map
coordinates (UTM) keep the 0.1 mm resolution within +-214 km of where the survey starts. A
cloud without those facts (one read from elsewhere) takes the floor of its first chunk's
minimum.
"""

from __future__ import annotations

from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backend import Backend, select_backend
from ..pointcloud import FieldSpec, PointCloud
from .atomic import atomic_path
from .stamp import source_date_epoch

if TYPE_CHECKING:  # (laspy, and the requests it imports, load when a LAS file is written)
    import laspy

__all__ = ["LasWriter"]

_SCALE_M = 1e-4
_EXTRA = {"ring": np.uint16, "label": np.uint16, "instance": np.uint16, "range": np.float32}


def _generator() -> str:
    """The header's generating software (32 characters at most): this package and its
    version, not the library that writes the bytes."""
    try:
        return f"lidar-sim {metadata.version('lidar-sim')}"[:32]
    except metadata.PackageNotFoundError:  # (a source tree that is not installed)
        return "lidar-sim"


_GENERATOR = _generator()


def las_header(offset_m: np.ndarray) -> laspy.LasHeader:
    """The header of a scan's LAS file: point format 6 with the extra dimensions, the
    coordinates' ``offset_m`` ((3,) float64, m) and scale."""
    import laspy

    header = laspy.LasHeader(point_format=6, version="1.4")
    header.add_extra_dims([laspy.ExtraBytesParams(name=k, type=t) for k, t in _EXTRA.items()])
    header.offsets = offset_m
    header.scales = np.full(3, _SCALE_M)
    header.generating_software = _GENERATOR
    epoch = source_date_epoch()
    if epoch is not None:  # the creation day of a reproducible build (else today)
        header.creation_date = datetime.fromtimestamp(epoch, tz=timezone.utc).date()
    return header


def packed_records(
    chunk: PointCloud, header: laspy.LasHeader, backend: Backend
) -> laspy.PackedPointRecord:
    """The chunk packed straight into the point format's record layout (no per-field copies
    through laspy's accessors), by the backend's ``pack_las``."""
    import laspy

    fmt = header.point_format
    data = np.zeros(len(chunk), dtype=fmt.dtype())
    backend.pack_las(chunk.fields, header.offsets, header.scales, data)
    return laspy.PackedPointRecord(data, fmt)


def _offset_from(meta: dict[str, Any]) -> np.ndarray | None:
    """The offset a scan's facts fix: (3,) float64, m; None when they fix none."""
    frame = meta.get("frame")
    if frame in ("sensor", "sensor_compensated"):
        return np.zeros(3)
    if frame == "world" and meta.get("sensor_position_m") is not None:
        return np.floor(np.asarray(meta["sensor_position_m"], dtype=np.float64))
    return None


class LasWriter:
    """Chunked writer of LAS, or LAZ when the path ends in ``.laz``."""

    def __init__(
        self, path: Path, spec: FieldSpec, meta: dict[str, Any], backend: Backend | None = None
    ) -> None:
        del spec
        self.path = path
        #: The coordinate offset, m, when the scan's facts fix it (else the first chunk's).
        self.offset_m = _offset_from(meta)
        #: Packs the records (the numba kernel when there is numba).
        self.backend = backend if backend is not None else select_backend()
        self.compress = path.suffix.lower() == ".laz"
        self._atomic = atomic_path(path)
        self._tmp = self._atomic.__enter__()
        self._writer: laspy.LasWriter | None = None
        #: Per extra dimension, the least and greatest value written so far.
        self._extra_range: dict[str, tuple[Any, Any]] = {}

    def _open(self, offset_m: np.ndarray) -> laspy.LasWriter:
        import laspy

        return laspy.open(
            str(self._tmp), mode="w", header=las_header(offset_m), do_compress=self.compress
        )

    def write(self, chunk: PointCloud) -> None:
        """Append a chunk."""
        if len(chunk) == 0:
            return
        if self._writer is None:
            offset = self.offset_m
            if offset is None:
                offset = np.floor(chunk["xyz"].min(axis=0).astype(np.float64))
            self._writer = self._open(offset)
        records = packed_records(chunk, self._writer.header, self.backend)
        for name in _EXTRA:
            values = records.array[name]
            lo, hi = values.min(), values.max()
            old = self._extra_range.get(name)
            self._extra_range[name] = (
                (lo, hi) if old is None else (min(old[0], lo), max(old[1], hi))
            )
        self._writer.write_points(records)

    def _state_extra_ranges(self) -> None:
        """The extra dimensions' minimum and maximum over every point written, in their
        descriptors (laspy's own running statistics of them are not those of all points)."""
        assert self._writer is not None
        for vlr in self._writer.header.vlrs.get("ExtraBytesVlr"):
            for struct in vlr.extra_bytes_structs:
                name = struct.name.rstrip(b"\0").decode()
                if name in self._extra_range:
                    lo, hi = self._extra_range[name]
                    struct._raw_min()[:] = lo
                    struct._raw_max()[:] = hi

    def close(self) -> list[Path]:
        """Finish the header and rename the file into place."""
        try:
            if self._writer is None:  # no points at all: a valid empty file
                self._writer = self._open(np.zeros(3))
            self._state_extra_ranges()
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
