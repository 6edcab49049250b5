"""PCD and PLY through Open3D's tensor API, which keeps every field with its dtype.

Field names follow PCL's usual ones: ``x y z intensity ring time`` (``time`` is
float64 seconds from the survey start), then ``range``, ``return_number``,
``num_returns``, ``label``, ``instance`` and any diagnostics under their own names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..pointcloud import PointCloud
from .atomic import atomic_path

__all__ = ["PCL_NAMES", "write_open3d"]

#: Record field -> attribute name in PCD/PLY files.
PCL_NAMES = {"time_s": "time", "range_m": "range"}

#: Dtypes Open3D's PLY writer accepts; others (the uint64 ``pulse_id``) are stored as
#: float64, which is exact below 2^53.
_PLY_DTYPES = {np.dtype(t) for t in (np.uint8, np.uint16, np.int32, np.float32, np.float64)}


_PCD_TYPES = {"f": "F", "u": "U", "i": "I"}
_PLY_TYPES = {"u1": "uchar", "u2": "uint16", "i4": "int32", "f4": "float", "f8": "double"}


def _empty_header(cloud: PointCloud, ply: bool) -> bytes:
    """Header of a file with no points (Open3D refuses to write one)."""
    columns = [
        ("x", np.dtype(np.float32)),
        ("y", np.dtype(np.float32)),
        ("z", np.dtype(np.float32)),
    ]
    for name, values in cloud.fields.items():
        if name != "xyz":
            dtype = values.dtype
            if ply and dtype not in _PLY_DTYPES:
                dtype = np.dtype(np.float64)
            columns.append((PCL_NAMES.get(name, name), dtype))
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


def write_open3d(cloud: PointCloud, path: Path) -> list[Path]:
    """Write ``cloud`` as binary PCD or PLY (by ``path``'s extension)."""
    import open3d as o3d

    ply = path.suffix.lower() == ".ply"
    if len(cloud) == 0:
        with atomic_path(path) as tmp:
            tmp.write_bytes(_empty_header(cloud, ply))
        return [path]
    pc = o3d.t.geometry.PointCloud()
    pc.point.positions = o3d.core.Tensor(np.ascontiguousarray(cloud["xyz"]))
    for name, values in cloud.fields.items():
        if name == "xyz":
            continue
        attr = PCL_NAMES.get(name, name)
        if ply and values.dtype not in _PLY_DTYPES:
            values = values.astype(np.float64)
        pc.point[attr] = o3d.core.Tensor(np.ascontiguousarray(values.reshape(len(values), 1)))
    with atomic_path(path) as tmp:
        try:
            ok = o3d.t.io.write_point_cloud(str(tmp), pc, write_ascii=False, compressed=False)
        except RuntimeError as exc:
            raise OutputError(f"{path}: Open3D could not write the file ({exc})") from None
        if not ok:
            raise OutputError(f"{path}: Open3D could not write the file")
    return [path]
