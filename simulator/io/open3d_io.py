"""PCD and PLY through Open3D's tensor API, which keeps every field with its dtype.

Chunks are spooled to disk during the scan; at the end Open3D writes the file from
memory maps of the spool (PCD and PLY need the point count before the data, and
Open3D's writer cannot append).

Field names follow PCL's usual ones: ``x y z intensity ring time`` (``time`` is
float64 seconds from the survey start), then ``range``, ``return_number``,
``num_returns``, ``label``, ``instance`` and any diagnostics under their own names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OutputError
from ..pointcloud import FieldSpec
from .atomic import atomic_path
from .spool import SpooledWriter

__all__ = ["PCL_NAMES", "Open3DWriter"]

#: Record field -> attribute name in PCD/PLY files.
PCL_NAMES = {"time_s": "time", "range_m": "range"}

#: Dtypes Open3D's PLY writer accepts; others (the uint64 ``pulse_id``) are stored as
#: float64, which is exact below 2^53.
_PLY_DTYPES = {np.dtype(t) for t in (np.uint8, np.uint16, np.int32, np.float32, np.float64)}


_PCD_TYPES = {"f": "F", "u": "U", "i": "I"}
_PLY_TYPES = {"u1": "uchar", "u2": "uint16", "i4": "int32", "f4": "float", "f8": "double"}


def _columns(spec: FieldSpec, ply: bool) -> list[tuple[str, str, np.dtype]]:
    """(record field, file attribute, stored dtype) of every non-position field."""
    out = []
    for name, (dtype, _shape) in spec.items():
        if name == "xyz":
            continue
        stored = np.dtype(np.float64) if ply and dtype not in _PLY_DTYPES else np.dtype(dtype)
        out.append((name, PCL_NAMES.get(name, name), stored))
    return out


def _empty_header(spec: FieldSpec, ply: bool) -> bytes:
    """Header of a file with no points (Open3D refuses to write one)."""
    f4 = np.dtype(np.float32)
    columns = [("x", f4), ("y", f4), ("z", f4)] + [(a, d) for _, a, d in _columns(spec, ply)]
    if ply:
        props = "".join(f"property {_PLY_TYPES[d.str[1:]]} {n}\n" for n, d in columns)
        text = f"ply\nformat binary_little_endian 1.0\nelement vertex 0\n{props}end_header\n"
    else:
        text = (
            "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\n"
            f"FIELDS {' '.join(n for n, _ in columns)}\n"
            f"SIZE {' '.join(str(d.itemsize) for _, d in columns)}\n"
            f"TYPE {' '.join(_PCD_TYPES[d.kind] for _, d in columns)}\n"
            f"COUNT {' '.join('1' for _ in columns)}\n"
            "WIDTH 0\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS 0\nDATA binary\n"
        )
    return text.encode("ascii")


class Open3DWriter(SpooledWriter):
    """Chunked writer of binary PCD or PLY (by the path's extension) through Open3D."""

    def __init__(self, path: Path, spec: FieldSpec, meta: dict[str, Any]) -> None:
        super().__init__(path, spec, meta)
        self.ply = path.suffix.lower() == ".ply"

    def close(self) -> list[Path]:
        """Write the file with Open3D and rename it into place."""
        import open3d as o3d

        spool = self.spool
        spool.flush()
        try:
            with atomic_path(self.path) as tmp:
                if spool.count == 0:
                    tmp.write_bytes(_empty_header(spool.dtypes, self.ply))
                    return [self.path]
                pc = o3d.t.geometry.PointCloud()
                pc.point.positions = o3d.core.Tensor(spool.array("xyz"))
                for name, attr, stored in _columns(spool.dtypes, self.ply):
                    values = spool.array(name).reshape(spool.count, 1)
                    pc.point[attr] = o3d.core.Tensor(np.asarray(values, dtype=stored))
                try:
                    ok = o3d.t.io.write_point_cloud(
                        str(tmp), pc, write_ascii=False, compressed=False
                    )
                except RuntimeError as exc:
                    raise OutputError(f"{self.path}: Open3D could not write it ({exc})") from None
                if not ok:
                    raise OutputError(f"{self.path}: Open3D could not write the file")
        finally:
            spool.remove()
        return [self.path]
