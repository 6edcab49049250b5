"""Read any format the writers produce back into a :class:`PointCloud`.

Each format keeps what it stores: ``.npz`` every field; PCD/PLY every field (under
their PCL names); LAS/LAZ coordinates, intensity, return numbers, ``gps_time``, and the
extra dimensions; KITTI ``.bin`` coordinates and reflectance (scaled back by 255) with
label and instance from the ``.label`` file beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import OutputError
from ..pointcloud import DIAGNOSTIC_FIELDS, FIELDS, PointCloud
from .kitti import read_kitti
from .labels import unpack_labels
from .npz import read_npz
from .open3d_io import PCL_NAMES

__all__ = ["read"]


def _typed(fields: dict[str, np.ndarray]) -> PointCloud:
    spec = {**FIELDS, **DIAGNOSTIC_FIELDS}
    out = {}
    for name, values in fields.items():
        if name in spec:
            dtype, shape = spec[name]
            out[name] = np.asarray(values).astype(dtype).reshape(len(values), *shape)
    return PointCloud(out)


def read(path: str | Path) -> PointCloud:
    """Read a point cloud file (``.npz``, ``.pcd``, ``.ply``, ``.las``, ``.laz``, ``.bin``)."""
    path = Path(path)
    if not path.is_file():
        raise OutputError(f"{path}: file not found")
    ext = path.suffix.lower()
    if ext == ".npz":
        return read_npz(path)
    if ext in (".pcd", ".ply"):
        import open3d as o3d

        pc = o3d.t.io.read_point_cloud(str(path))
        if "positions" not in pc.point:
            return PointCloud.empty()
        names = {v: k for k, v in PCL_NAMES.items()}
        fields = {"xyz": pc.point.positions.numpy()}
        for attr in pc.point:
            if attr != "positions":
                fields[names.get(attr, attr)] = pc.point[attr].numpy().reshape(-1)
        return _typed(fields)
    if ext in (".las", ".laz"):
        import laspy

        las = laspy.read(str(path))
        fields = {
            "xyz": np.stack([las.x, las.y, las.z], axis=1),
            "intensity": np.asarray(las.intensity),
            "time_s": np.asarray(las.gps_time),
            "return_number": np.asarray(las.return_number),
            "num_returns": np.asarray(las.number_of_returns),
        }
        dims = set(las.point_format.extra_dimension_names)
        for name, field in (("ring", "ring"), ("label", "label"), ("instance", "instance"),
                            ("range", "range_m")):  # fmt: skip
            if name in dims:
                fields[field] = np.asarray(las[name])
        if "label" not in fields:
            fields["label"] = np.asarray(las.classification)
        return _typed(fields)
    if ext == ".bin":
        points, labels = read_kitti(path)
        fields = {"xyz": points[:, :3], "intensity": points[:, 3] * 255.0}
        fields["range_m"] = np.linalg.norm(points[:, :3], axis=1)
        if labels is not None:
            fields["label"], fields["instance"] = unpack_labels(labels)
        return _typed(fields)
    raise OutputError(f"{path}: cannot read {ext!r} files; expected .npz .pcd .ply .las .laz .bin")
