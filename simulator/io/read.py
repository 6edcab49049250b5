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

Every frame is checked before it is handed on (:func:`check_values`, the one check every
format goes through): values no scanner records (a damaged file, a sentinel such as 1e30,
bytes that are not the format its name says) are refused, one line naming the file, each bad
field, how many points hold it and an example value, never drawn or compared as figures:

- ``xyz``: finite and within :data:`COORDINATE_LIMIT_M` of the origin on every axis;
- ``range_m``: finite, 0 to :data:`RANGE_LIMIT_M`;
- ``intensity``: finite, 0 to the format's ``meta["intensity_max"]`` (LAS 65535, KITTI and
  nuScenes 255, Ouster 255), else to :data:`INTENSITY_LIMIT`;
- ``time_s``: finite;
- ``ring``: 0 to ``RING_LIMIT - 1``;
- ``label``: a SemanticKITTI id (:data:`~simulator.labels.SEMANTIC_KITTI`), except a LAS
  file's classification (ASPRS classes, taken as the label when the file has no ``label``
  dimension).
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import InputError
from ..labels import SEMANTIC_KITTI
from ..pointcloud import PointCloud
from .drivers import cloud_from_fields
from .kitti import read_kitti
from .labels import unpack_labels
from .las_read import read_las
from .npz import read_npz
from .pcd_ply import read_pcd, read_ply

__all__ = [
    "COORDINATE_LIMIT_M",
    "INTENSITY_LIMIT",
    "RANGE_LIMIT_M",
    "READ_FORMATS",
    "RING_LIMIT",
    "ReadOptions",
    "check_values",
    "read",
    "read_frames",
]

#: What :func:`read` takes, for messages.
READ_FORMATS = (
    ".npz .pcd .ply .las .laz .bin (KITTI) .pcd.bin (nuScenes) .pcap or .osf (Ouster) "
    "or a ROS 2 bag folder"
)

#: A coordinate beyond this, in metres, is no point of any frame (UTM northings reach 1e7 m,
#: Earth-centred coordinates 6.4e6 m): the file is damaged or holds a sentinel such as 1e30.
COORDINATE_LIMIT_M = 1e8
#: A range beyond this, in metres, is no LiDAR measurement: the longest ``range_max_m`` a
#: scanner of this simulator takes (:class:`~simulator.config.scanner.ScannerConfig`).
RANGE_LIMIT_M = 1e5
#: The largest intensity of a format that declares no ``intensity_max``: 16-bit readings,
#: the largest ``intensity_max`` a scanner takes.
INTENSITY_LIMIT = 65535.0
#: Rings run from 0 to ``RING_LIMIT - 1``: the largest grid a scanner of this simulator has
#: (a raster of 4096 rows; spinning units have up to 128 channels).
RING_LIMIT = 4096

_SEMANTIC_KITTI_IDS = np.array(sorted(SEMANTIC_KITTI.values()), dtype=np.uint16)


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


def _npz_arrays(path: Path) -> None:
    """Refuse an ``.npz`` whose arrays claim more bytes than its members hold (numpy would
    allocate what the header claims before reading a compressed member)."""
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    fmt = np.lib.format
                    header = (
                        fmt.read_array_header_1_0
                        if version == (1, 0)
                        else fmt.read_array_header_2_0
                    )
                    shape, _, dtype = header(member, max_header_size=10_000)
                    need = math.prod(shape) * dtype.itemsize
                    if need > info.file_size:
                        raise InputError(
                            path,
                            f"array {info.filename!r} claims shape {shape} of {dtype} "
                            f"({need:,} bytes); its member holds {info.file_size:,} "
                            "(a damaged file)",
                        )
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError) as exc:
        raise InputError(path, f"not a readable .npz point cloud ({exc})") from None


def _bad_values(cloud: PointCloud) -> Iterator[tuple[str, NDArray[np.bool_], Any, str]]:
    """Per checked field the cloud has: its name, the (N,) mask of the points whose value no
    scanner records, the value at the first of them, and the rule they break."""
    xyz = np.asarray(cloud["xyz"], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        off = ~(np.abs(xyz) <= COORDINATE_LIMIT_M)  # NaN fails every comparison
    bad = off.any(axis=1)
    first = xyz[bad][0, np.argmax(off[bad][0])] if bad.any() else None
    yield "xyz", bad, first, f"non-finite or beyond {COORDINATE_LIMIT_M:g} m"

    def outside(name: str, low: float, high: float, rule: str) -> Iterator[Any]:
        if name in cloud:
            v = np.asarray(cloud[name])
            with np.errstate(invalid="ignore"):
                bad = ~(np.isfinite(v) & (v >= low) & (v <= high))
            yield name, bad, v[bad][0] if bad.any() else None, rule

    yield from outside(
        "range_m", 0.0, RANGE_LIMIT_M, f"negative, non-finite or beyond {RANGE_LIMIT_M:g} m"
    )
    declared = "intensity_max" in cloud.meta
    top = float(cloud.meta.get("intensity_max", INTENSITY_LIMIT))
    said = " (the format's intensity_max)" if declared else ""
    yield from outside("intensity", 0.0, top, f"negative, non-finite or above {top:g}{said}")
    yield from outside("time_s", -np.inf, np.inf, "non-finite")
    yield from outside("ring", 0, RING_LIMIT - 1, f"above {RING_LIMIT - 1}")
    if "label" in cloud and cloud.meta.get("label_field") != "classification":
        label = np.asarray(cloud["label"])
        bad = ~np.isin(label, _SEMANTIC_KITTI_IDS)
        yield "label", bad, label[bad][0] if bad.any() else None, "not SemanticKITTI ids"


def check_values(cloud: PointCloud, source: str | Path, frame: int | None = None) -> PointCloud:
    """Refuse a cloud that holds values no scanner records (the rules: see the module).

    Every reader's frames go through this one check (:func:`read_frames`, :func:`read`).

    Parameters
    ----------
    cloud : PointCloud
        A frame as a reader made it.
    source : str or Path
        The file, for the message.
    frame : int, optional
        The frame's index in a multi-frame capture, for the message.

    Returns
    -------
    PointCloud
        ``cloud``, unchanged.

    Raises
    ------
    InputError
        One line: the file (and frame), then each bad field with how many points hold a bad
        value and the first of them, e.g. ``ring: 120 of 41,142 points above 4095 (e.g.
        48906)``.
    """
    if "xyz" not in cloud:
        raise InputError(
            source, f"no xyz field; expected x y z coordinates (it has {', '.join(cloud.names)})"
        )
    n = len(cloud)
    problems = []
    for name, bad, example, rule in _bad_values(cloud):
        count = int(np.count_nonzero(bad))
        if count:
            value = f"{float(example):g}" if np.asarray(example).dtype.kind == "f" else example
            problems.append(f"{name}: {count:,} of {n:,} points {rule} (e.g. {value})")
    if problems:
        where = f"frame {frame}: " if frame is not None else ""
        raise InputError(
            source,
            f"{where}values no scanner records (a damaged file, or not the format its name "
            f"says): {'; '.join(problems)}",
        )
    return cloud


def _multi_frame(path: Path) -> bool:
    """Whether ``path`` is a capture of several frames (a bag folder, a pcap, an OSF)."""
    return path.is_dir() or path.suffix.lower() in (".pcap", ".osf")


def read_frames(path: str | Path, options: ReadOptions | None = None) -> Iterator[PointCloud]:
    """Every frame of a capture, in order (a single-frame file yields one), each checked
    (:func:`check_values`).

    Parameters
    ----------
    path : str or Path
        A file of a format :func:`read` takes, or a ROS 2 bag folder.
    options : ReadOptions, optional
        ``topic`` of a bag, ``meta`` of a pcap (``frame`` is not used here).

    Raises
    ------
    InputError
        If the file cannot be read, or a frame holds values no scanner records (raised when
        that frame is reached).
    """
    path = Path(path)
    multi = _multi_frame(path)
    for index, cloud in enumerate(_frames(path, options or ReadOptions())):
        yield check_values(cloud, path, index if multi else None)


def _frames(path: Path, options: ReadOptions) -> Iterator[PointCloud]:
    """Every frame of a capture as its reader makes it (not checked)."""
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
        ".pcd": read_pcd,
        ".ply": read_ply,
        ".las": read_las,
        ".laz": read_las,
        ".bin": _read_bin,
    }
    reader = readers.get(ext)
    if reader is None:
        raise InputError(
            path, f"cannot read {ext or 'a file without extension'!r}; expected {READ_FORMATS}"
        )
    if ext == ".npz":
        _npz_arrays(path)
        try:
            cloud = read_npz(path)
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise InputError(path, f"not a readable .npz point cloud ({exc})") from None
        yield cloud
        return
    yield reader(path)


def read(path: str | Path, options: ReadOptions | None = None) -> PointCloud:
    """Read one frame of a point cloud file, a capture or a bag (see the module), checked
    (:func:`check_values`; the frames before it are not).

    Parameters
    ----------
    path : str or Path
        The file, or a ROS 2 bag folder.
    options : ReadOptions, optional
        Which frame (pcap, OSF, bag), the bag's topic, the pcap's metadata.

    Returns
    -------
    PointCloud

    Raises
    ------
    InputError
        If the file cannot be read, the frame is not there, or it holds values no scanner
        records.
    """
    options = options or ReadOptions()
    if options.frame < 0:
        raise InputError(path, f"frame {options.frame}; expected 0 or more")
    path = Path(path)
    count = 0
    for index, cloud in enumerate(_frames(path, options)):
        if index == options.frame:
            return check_values(cloud, path, index if _multi_frame(path) else None)
        count = index + 1
    raise InputError(
        path, f"has {count} frame(s); frame {options.frame} is not there (frames count from 0)"
    )
