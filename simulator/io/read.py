"""The one reader of point clouds: the simulator's own outputs and real sensors' captures.

Every command that takes a cloud (``compare``, ``calibrate``, ``render``, ``view``,
``rangeimage``, ``report``) reads it here, and the cloud keeps what the file has: ring
(channel), per-point time, intensity or reflectivity, return number, and, where the format
records it, the beams that returned nothing (an Ouster frame, an organised PCD or
PointCloud2: ``column`` and ``meta["beam_grid"]``). What each format gives:

- ``.npz`` (this simulator's): every field.
- ``.pcd`` (ASCII, binary or binary_compressed) and ``.ply``: every field, the drivers'
  names mapped onto the record (:mod:`simulator.io.drivers`: ``intensity``/``reflectivity``,
  ``ring``/``channel``, ``t``/``time``/``timestamp``/``time_stamp``, ``return_type``,
  ``distance``; ``azimuth`` and ``elevation`` kept as the file has them).
- ``.las`` / ``.laz``: coordinates, intensity (``meta["intensity_max"]`` 65535), return
  numbers, ``gps_time`` as ``time_s``, the label (the ``label`` extra dimension, else the
  classification) and every extra dimension (``ring``, ``range`` and any other by its name).
- ``*.pcd.bin`` (nuScenes sweeps): float32 ``x y z intensity ring``, intensity 0-255.
- ``.bin`` (KITTI): float32 ``x y z reflectance``, reflectance 0-1 read as 0-255; labels
  from the SemanticKITTI ``.label`` file beside it.
- ``.pcap`` (Ouster) with its metadata JSON (:mod:`simulator.io.ouster`), ``frame`` picks
  the frame.
- ``.osf`` (Ouster's own recording format, its metadata inside it; :mod:`simulator.io.ouster`):
  the same fields as a pcap's frames, ``frame`` picks the frame.
- a ROS 2 bag folder (:mod:`simulator.io.rosbag`): the ``PointCloud2`` messages of
  ``topic``, ``frame`` picks the message.

Bad input (a file that is none of these, a pcap without metadata, a truncated OSF, a topic or
frame that is not there, a field of the wrong type) raises
:class:`~simulator.errors.InputError`, one line naming the file and what was expected.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..pointcloud import PointCloud
from .drivers import cloud_from_fields
from .kitti import read_kitti
from .labels import unpack_labels
from .npz import read_npz

__all__ = ["READ_FORMATS", "ReadOptions", "read", "read_frames"]

#: What :func:`read` takes, for messages.
READ_FORMATS = (
    ".npz .pcd .ply .las .laz .bin (KITTI) .pcd.bin (nuScenes) .pcap or .osf (Ouster) "
    "or a ROS 2 bag folder"
)

_PCD_TYPES = {
    ("F", 4): "f4",
    ("F", 8): "f8",
    ("U", 1): "u1",
    ("U", 2): "u2",
    ("U", 4): "u4",
    ("U", 8): "u8",
    ("I", 1): "i1",
    ("I", 2): "i2",
    ("I", 4): "i4",
    ("I", 8): "i8",
}


@dataclass(frozen=True)
class ReadOptions:
    """How to read a multi-frame capture.

    Attributes
    ----------
    frame : int
        Which frame of a pcap, an OSF or a bag topic (0: the first).
    topic : str, optional
        The bag's PointCloud2 topic (needed when it has several).
    meta : Path, optional
        An Ouster pcap's metadata JSON (found beside the pcap when not given).
    """

    frame: int = 0
    topic: str | None = None
    meta: Path | None = None


def _pcd_header(path: Path) -> dict[str, list[str]]:
    """The header of a PCD file (key -> its words), checked."""
    header: dict[str, list[str]] = {}
    with open(path, "rb") as f:
        for _ in range(64):
            line = f.readline()
            if not line:
                break
            text = line.decode("ascii", "replace").strip()
            if not text or text.startswith("#"):
                continue
            key, *words = text.split()
            header[key.upper()] = words
            if key.upper() == "DATA":
                break
    needed = ("FIELDS", "SIZE", "TYPE", "WIDTH", "HEIGHT", "POINTS", "DATA")
    missing = [k for k in needed if k not in header]
    if missing:
        raise InputError(
            path,
            f"not a PCD file: its header has no {', '.join(missing)} "
            "(expected PCD v0.7: FIELDS SIZE TYPE COUNT WIDTH HEIGHT POINTS DATA)",
        )
    n = len(header["FIELDS"])
    if len(header["SIZE"]) != n or len(header["TYPE"]) != n:
        raise InputError(path, "PCD header: FIELDS, SIZE and TYPE differ in length")
    for name, t, size in zip(header["FIELDS"], header["TYPE"], header["SIZE"], strict=True):
        if (t.upper(), int(size)) not in _PCD_TYPES:
            raise InputError(
                path, f"PCD field {name!r} has TYPE {t} SIZE {size}; expected F 4/8, U or I 1/2/4/8"
            )
    types = dict(zip(header["FIELDS"], header["TYPE"], strict=True))
    for axis in "xyz":
        if axis in types and types[axis].upper() != "F":
            raise InputError(
                path, f"field {axis!r} is of PCD TYPE {types[axis]}; expected a float (TYPE F)"
            )
    if header["DATA"][0].lower() not in ("ascii", "binary", "binary_compressed"):
        raise InputError(
            path, f"PCD DATA {header['DATA'][0]}; expected ascii, binary or binary_compressed"
        )
    return header


def _open3d_fields(pc: Any) -> dict[str, Any]:
    """An Open3D tensor cloud's attributes by name: ``x y z`` from its positions, and each
    other attribute's (first) column."""
    xyz = pc.point.positions.numpy()
    fields: dict[str, Any] = {"x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2]}
    for attr in pc.point:
        if attr != "positions":
            values = pc.point[attr].numpy()
            fields[attr] = values.reshape(len(xyz), -1)[:, 0] if values.ndim > 1 else values
    return fields


def _read_pcd(path: Path) -> PointCloud:
    """A PCD file through Open3D's tensor reader (every field, dtypes kept)."""
    import open3d as o3d

    header = _pcd_header(path)
    width, height = int(header["WIDTH"][0]), int(header["HEIGHT"][0])
    points = int(header["POINTS"][0])
    if points == 0:
        return PointCloud.empty()
    pc = o3d.t.io.read_point_cloud(str(path), remove_nan_points=False)
    if "positions" not in pc.point or len(pc.point.positions) != points:
        got = len(pc.point.positions) if "positions" in pc.point else 0
        raise InputError(
            path,
            f"the header says {points} points, {got} could be read "
            "(a truncated file, or fields Open3D cannot read)",
        )
    grid = (height, width) if height > 1 and height * width == points else None
    return cloud_from_fields(_open3d_fields(pc), path, grid)


def _read_ply(path: Path) -> PointCloud:
    import open3d as o3d

    pc = o3d.t.io.read_point_cloud(str(path))
    if "positions" not in pc.point:
        return PointCloud.empty()
    return cloud_from_fields(_open3d_fields(pc), path)


def _read_las(path: Path) -> PointCloud:
    import laspy

    try:
        las = laspy.read(str(path))
    except Exception as exc:  # laspy's own errors: not a LAS file, a broken header
        raise InputError(path, f"not a readable LAS/LAZ file ({exc})") from None
    fields: dict[str, Any] = {
        "x": np.asarray(las.x),
        "y": np.asarray(las.y),
        "z": np.asarray(las.z),
        "intensity": np.asarray(las.intensity),
        "return_number": np.asarray(las.return_number),
        "num_returns": np.asarray(las.number_of_returns),
    }
    if "gps_time" in las.point_format.dimension_names:
        fields["time_s"] = np.asarray(las.gps_time)
    for name in las.point_format.extra_dimension_names:
        fields[name] = np.asarray(las[name])
    if "label" not in fields:
        fields["label"] = np.asarray(las.classification)
    if "range" in fields:
        fields["range_m"] = fields.pop("range")
    return cloud_from_fields(fields, path, meta={"intensity_max": 65535.0})


def _read_bin(path: Path) -> PointCloud:
    size = path.stat().st_size
    if path.name.lower().endswith(".pcd.bin"):
        if size % 20:
            raise InputError(
                path,
                f"{size} bytes is not a whole number of nuScenes points "
                "(float32 x y z intensity ring: 20 bytes each)",
            )
        raw = np.fromfile(path, dtype="<f4").reshape(-1, 5)
        fields = {
            "x": raw[:, 0],
            "y": raw[:, 1],
            "z": raw[:, 2],
            "intensity": raw[:, 3],
            "ring": raw[:, 4],
        }
        return cloud_from_fields(fields, path, meta={"intensity_max": 255.0})
    if size % 16:
        hint = " (a nuScenes sweep? name it *.pcd.bin)" if size % 20 == 0 else ""
        raise InputError(
            path,
            f"{size} bytes is not a whole number of KITTI points "
            f"(float32 x y z reflectance: 16 bytes each){hint}",
        )
    points, labels = read_kitti(path)
    fields = {
        "x": points[:, 0],
        "y": points[:, 1],
        "z": points[:, 2],
        "intensity": points[:, 3] * np.float32(255.0),
    }
    cloud = cloud_from_fields(fields, path, meta={"intensity_max": 255.0})
    cloud.fields["range_m"] = np.linalg.norm(cloud["xyz"], axis=1).astype(np.float32)
    if labels is not None:
        if len(labels) != len(cloud):
            raise InputError(
                path.with_suffix(".label"), f"{len(labels)} labels for {len(cloud)} points"
            )
        label, instance = unpack_labels(labels)
        cloud.fields["label"] = label.astype(np.uint16)
        cloud.fields["instance"] = instance.astype(np.uint16)
    return cloud


def read_frames(path: str | Path, options: ReadOptions | None = None) -> Iterator[PointCloud]:
    """Every frame of a capture, in order (a single-frame file yields one).

    Parameters
    ----------
    path : str or Path
        A file of a format :func:`read` takes, or a ROS 2 bag folder.
    options : ReadOptions, optional
        ``topic`` of a bag, ``meta`` of a pcap (``frame`` is not used here).
    """
    path = Path(path)
    options = options or ReadOptions()
    if path.is_dir():
        if not (path / "metadata.yaml").is_file():
            raise InputError(
                path, f"a folder, but not a ROS 2 bag (no metadata.yaml); expected {READ_FORMATS}"
            )
        from .rosbag import read_bag_frames

        yield from read_bag_frames(path, options.topic)
        return
    if not path.is_file():
        raise InputError(path, "file not found")
    ext = path.suffix.lower()
    if ext == ".pcap":
        from .ouster import read_pcap_frames

        yield from read_pcap_frames(path, options.meta)
        return
    if ext == ".osf":
        from .ouster import read_osf_frames

        yield from read_osf_frames(path)
        return
    readers = {
        ".npz": read_npz,
        ".pcd": _read_pcd,
        ".ply": _read_ply,
        ".las": _read_las,
        ".laz": _read_las,
        ".bin": _read_bin,
    }
    reader = readers.get(ext)
    if reader is None:
        raise InputError(
            path, f"cannot read {ext or 'a file without extension'!r}; expected {READ_FORMATS}"
        )
    if ext == ".npz":
        try:
            yield read_npz(path)
        except (ValueError, OSError) as exc:
            raise InputError(path, f"not a readable .npz point cloud ({exc})") from None
        return
    yield reader(path)


def read(path: str | Path, options: ReadOptions | None = None) -> PointCloud:
    """Read one frame of a point cloud file, a capture or a bag (see the module).

    Parameters
    ----------
    path : str or Path
        The file, or a ROS 2 bag folder.
    options : ReadOptions, optional
        Which frame (pcap, OSF, bag), the bag's topic, the pcap's metadata.

    Returns
    -------
    PointCloud
    """
    options = options or ReadOptions()
    if options.frame < 0:
        raise InputError(path, f"frame {options.frame}; expected 0 or more")
    count = 0
    for index, cloud in enumerate(read_frames(path, options)):
        if index == options.frame:
            return cloud
        count = index + 1
    raise InputError(
        path, f"has {count} frame(s); frame {options.frame} is not there (frames count from 0)"
    )
