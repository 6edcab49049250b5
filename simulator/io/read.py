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
import re
import struct
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
from .npz import read_npz

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


#: A field name of a PCD or PLY header (PCL pads with fields named ``_``).
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: LZF (PCD ``binary_compressed``) expands its input at most this many times: its longest
#: back-reference, 264 bytes, takes 3.
_LZF_MAX_RATIO = 88


@dataclass(frozen=True)
class PcdLayout:
    """What a PCD header declares, checked against itself and against the file's size.

    Attributes
    ----------
    fields : list of str
        The field names.
    row_bytes : int
        Bytes of one point (binary): the sum of SIZE x COUNT.
    values : int
        Numbers of one point (ASCII): the sum of COUNT.
    width, height, points : int
        The header's WIDTH, HEIGHT and POINTS (POINTS = WIDTH x HEIGHT).
    data : str
        ``ascii``, ``binary`` or ``binary_compressed``.
    offset : int
        Where the data starts, in bytes.
    """

    fields: list[str]
    row_bytes: int
    values: int
    width: int
    height: int
    points: int
    data: str
    offset: int


def _header_int(path: Path, key: str, word: str, low: int = 0) -> int:
    """A whole number of a header (``WIDTH 1024``), or a clear error."""
    if not re.fullmatch(r"[0-9]+", word) or int(word) < low:
        raise InputError(path, f"PCD header {key} {word!r}; expected a whole number >= {low}")
    return int(word)


def _pcd_header(path: Path) -> PcdLayout:
    """The layout a PCD file's header declares, checked: a header that cannot be, or that
    declares more points than the file holds, is refused before any point is read (nothing
    is allocated from what the header claims)."""
    header: dict[str, list[str]] = {}
    offset = 0
    with open(path, "rb") as f:
        for _ in range(64):
            line = f.readline(4096)
            if not line:
                break
            text = line.decode("ascii", "replace").strip()
            if not text or text.startswith("#"):
                continue
            key, *words = text.split()
            header[key.upper()] = words
            if key.upper() == "DATA":
                offset = f.tell()
                break
    needed = ("FIELDS", "SIZE", "TYPE", "WIDTH", "HEIGHT", "POINTS", "DATA")
    missing = [k for k in needed if k not in header]
    if missing:
        raise InputError(
            path,
            f"not a PCD file: its header has no {', '.join(missing)} "
            "(expected PCD v0.7: FIELDS SIZE TYPE COUNT WIDTH HEIGHT POINTS DATA)",
        )
    names = header["FIELDS"]
    n = len(names)
    counts = header.get("COUNT", ["1"] * n)
    if not n or len(header["SIZE"]) != n or len(header["TYPE"]) != n or len(counts) != n:
        raise InputError(path, "PCD header: FIELDS, SIZE, TYPE and COUNT differ in length")
    for name in names:
        if not _FIELD_NAME.fullmatch(name):
            raise InputError(path, f"PCD field name {name!r}; expected letters, digits and _")
    twice = sorted({name for name in names if names.count(name) > 1 and name != "_"})
    if twice:
        raise InputError(path, f"PCD field {twice[0]!r} is named twice")
    row, values = 0, 0
    for name, t, size, count in zip(names, header["TYPE"], header["SIZE"], counts, strict=True):
        if not size.isdigit() or (t.upper(), int(size)) not in _PCD_TYPES:
            raise InputError(
                path, f"PCD field {name!r} has TYPE {t} SIZE {size}; expected F 4/8, U or I 1/2/4/8"
            )
        c = _header_int(path, f"COUNT of {name!r}", count, low=1)
        row, values = row + int(size) * c, values + c
    types = dict(zip(names, header["TYPE"], strict=True))
    for axis in "xyz":
        if axis in types and types[axis].upper() != "F":
            raise InputError(
                path, f"field {axis!r} is of PCD TYPE {types[axis]}; expected a float (TYPE F)"
            )
    data = header["DATA"][0].lower() if header["DATA"] else ""
    if data not in ("ascii", "binary", "binary_compressed"):
        raise InputError(
            path, f"PCD DATA {data or '(none)'}; expected ascii, binary or binary_compressed"
        )
    width = _header_int(path, "WIDTH", (header["WIDTH"] or [""])[0])
    height = _header_int(path, "HEIGHT", (header["HEIGHT"] or [""])[0])
    points = _header_int(path, "POINTS", (header["POINTS"] or [""])[0])
    if width * height != points:
        raise InputError(
            path,
            f"PCD header: WIDTH x HEIGHT is {width:,} x {height:,}, POINTS {points:,}; "
            "expected POINTS = WIDTH x HEIGHT (a header that lies about its size)",
        )
    layout = PcdLayout(list(names), row, values, width, height, points, data, offset)
    _check_pcd_size(path, layout)
    return layout


def _check_pcd_size(path: Path, layout: PcdLayout) -> None:
    """Refuse a PCD whose data cannot hold the points its header declares."""
    have = path.stat().st_size - layout.offset
    points = layout.points
    lie = "(a truncated file, or a header that lies about its size)"
    if layout.data == "binary":
        need = points * layout.row_bytes
        if have != need:
            raise InputError(
                path,
                f"the header says {points:,} points of {layout.row_bytes} bytes ({need:,} "
                f"bytes), the file holds {have:,} bytes of data {lie}",
            )
    elif layout.data == "binary_compressed":
        if points == 0:
            return
        with open(path, "rb") as f:
            f.seek(layout.offset)
            sizes = f.read(8)
        if len(sizes) < 8:
            raise InputError(path, f"binary_compressed data without its two sizes {lie}")
        packed, unpacked = struct.unpack("<II", sizes)
        need = points * layout.row_bytes
        if unpacked != need or packed > have - 8 or unpacked > _LZF_MAX_RATIO * packed + 8:
            raise InputError(
                path,
                f"the header says {points:,} points of {layout.row_bytes} bytes ({need:,} "
                f"bytes); its compressed data says {packed:,} bytes unpacking to "
                f"{unpacked:,}, and the file holds {have - 8:,} {lie}",
            )
    elif points * 2 * layout.values > have:  # ASCII: a digit and a space a number at least
        raise InputError(
            path,
            f"the header says {points:,} points of {layout.values} numbers; the file's "
            f"{have:,} bytes of text cannot hold them {lie}",
        )


def _check_pcd_lines(path: Path, layout: PcdLayout) -> None:
    """Refuse an ASCII PCD whose lines are not its points: as many lines as POINTS, each
    with every number (Open3D would read a short line as zeros)."""
    with open(path, "rb") as f:
        f.seek(layout.offset)
        lines = [line for line in f.read().splitlines() if line.strip()]
    short = next((i for i, line in enumerate(lines) if len(line.split()) != layout.values), None)
    if len(lines) != layout.points or short is not None:
        where = (
            f"line {short + 1} of the data has {len(lines[short].split())} numbers"
            if short is not None
            else f"the data has {len(lines):,} lines"
        )
        raise InputError(
            path,
            f"the header says {layout.points:,} points of {layout.values} numbers; {where} "
            "(a truncated or damaged file)",
        )


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


def _open3d_read(path: Path, **kwargs: Any) -> Any:
    """Open3D's tensor reader, its warnings left out and its errors one line."""
    import open3d as o3d

    with o3d.utility.VerbosityContextManager(o3d.utility.VerbosityLevel.Error):
        try:
            return o3d.t.io.read_point_cloud(str(path), **kwargs)
        except RuntimeError as exc:  # Open3D's own errors (a damaged compressed block ...)
            text = re.sub(r"\x1b\[[0-9;]*m|\[Open3D Error\] \([^)]*\)[^:]*:\d+: ", "", str(exc))
            raise InputError(path, f"Open3D cannot read it: {text}") from None


def _read_pcd(path: Path) -> PointCloud:
    """A PCD file through Open3D's tensor reader (every field, dtypes kept), its header
    checked first (:func:`_pcd_header`)."""
    layout = _pcd_header(path)
    if layout.points == 0:
        return PointCloud.empty()
    if layout.data == "ascii":
        _check_pcd_lines(path, layout)
    pc = _open3d_read(path, remove_nan_points=False)
    points = layout.points
    if "positions" not in pc.point or len(pc.point.positions) != points:
        got = len(pc.point.positions) if "positions" in pc.point else 0
        raise InputError(
            path,
            f"the header says {points} points, {got} could be read "
            "(a truncated file, or fields Open3D cannot read)",
        )
    grid = (layout.height, layout.width) if layout.height > 1 else None
    return cloud_from_fields(_open3d_fields(pc), path, grid)


_PLY_SIZES = {"char": 1, "uchar": 1, "int8": 1, "uint8": 1, "short": 2, "ushort": 2,
              "int16": 2, "uint16": 2, "int": 4, "uint": 4, "int32": 4, "uint32": 4,
              "float": 4, "float32": 4, "double": 8, "float64": 8}  # fmt: skip


def _ply_vertices(path: Path) -> int:
    """The vertex count a PLY file's header declares, checked: no element may claim more
    entries than the file has bytes, and a binary file must hold every vertex its header
    declares (Open3D reads a cut one without failing)."""
    with open(path, "rb") as f:
        lines = []
        for _ in range(256):
            lines.append(f.readline(4096).decode("ascii", "replace").strip())
            if lines[-1] == "end_header":
                break
        header_bytes = f.tell()
    if lines[0] != "ply" or lines[-1] != "end_header":
        raise InputError(path, "not a PLY file (expected 'ply' ... 'end_header')")
    binary = any(line.startswith("format binary") for line in lines)
    size = path.stat().st_size
    elements: list[str] = []
    vertices = 0
    row: int | None = 0  # bytes of a binary vertex; None with a list property
    for words in (line.split() for line in lines):
        if words[:1] == ["element"]:
            if len(words) != 3 or not words[2].isdigit() or not _FIELD_NAME.fullmatch(words[1]):
                raise InputError(path, f"PLY header {' '.join(words)!r}; expected element NAME N")
            if int(words[2]) > size:
                raise InputError(
                    path,
                    f"the header says {int(words[2]):,} {words[1]} entries; the file holds "
                    f"{size:,} bytes (a header that lies about its size)",
                )
            elements.append(words[1])
            if words[1] == "vertex":
                vertices = int(words[2])
        elif words[:1] == ["property"]:
            if len(words) < 3 or not _FIELD_NAME.fullmatch(words[-1]):
                raise InputError(
                    path, f"PLY header {' '.join(words)!r}; expected property TYPE NAME"
                )
            if elements[-1:] == ["vertex"] and row is not None:
                width = _PLY_SIZES.get(words[1])
                row = None if width is None else row + width
    if binary and elements[:1] == ["vertex"] and row and size < header_bytes + vertices * row:
        raise InputError(
            path,
            f"the header says {vertices} vertices of {row} bytes, the file holds "
            f"{(size - header_bytes) // row} (a truncated file)",
        )
    return vertices


def _read_ply(path: Path) -> PointCloud:
    vertices = _ply_vertices(path)
    pc = _open3d_read(path)
    got = len(pc.point.positions) if "positions" in pc.point else 0
    if got != vertices:
        raise InputError(
            path,
            f"the header says {vertices} vertices, {got} could be read "
            "(a truncated file, or properties Open3D cannot read)",
        )
    if vertices == 0:
        return PointCloud.empty()
    return cloud_from_fields(_open3d_fields(pc), path)


#: Bytes of a LAS point record of each point data format (ASPRS LAS 1.4 R15, table 7 ff.).
_LAS_RECORD_BYTES = (20, 28, 26, 34, 57, 63, 30, 36, 38, 59, 67)
#: Points a byte of LASzip data can hold at most: far above the best it reaches (about 140
#: points a byte on a cloud of identical points), so no real file is refused, and a header
#: claiming 10^12 points in a small file is.
_LAZ_MAX_POINTS_PER_BYTE = 1000


def _las_header(path: Path) -> None:
    """Refuse a LAS/LAZ file whose public header block cannot be (ASPRS LAS 1.0-1.4), or
    claims more points than the file can hold, before laspy reads (and allocates) them."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(375)
    if len(head) < 227 or head[:4] != b"LASF":
        raise InputError(
            path, "not a LAS/LAZ file (expected the LASF signature and a 227-byte header)"
        )
    major, minor = head[24], head[25]
    header_size, offset, vlrs = struct.unpack_from("<HII", head, 94)
    fmt_id, record = struct.unpack_from("<BH", head, 104)
    (legacy,) = struct.unpack_from("<I", head, 107)
    scales = struct.unpack_from("<3d", head, 131)
    problem = None
    fmt = fmt_id & 0x3F  # LAZ sets bits 7 (and 6) of the point format
    compressed = bool(fmt_id & 0x80)
    count = legacy
    if major != 1 or minor > 4:
        problem = f"LAS version {major}.{minor}; expected 1.0 to 1.4"
    elif not 227 <= header_size <= offset <= size or header_size > 375 + 1024:
        problem = (
            f"header size {header_size} and point data offset {offset:,} do not fit a "
            f"{size:,}-byte file"
        )
    elif vlrs * 54 > offset - header_size:
        problem = (
            f"the header says {vlrs:,} variable length records; the {offset - header_size:,} "
            "bytes before the points hold at most "
            f"{(offset - header_size) // 54:,} (a header that lies about its size)"
        )
    elif fmt >= len(_LAS_RECORD_BYTES) or record < _LAS_RECORD_BYTES[fmt]:
        problem = f"point format {fmt} with {record}-byte records; expected formats 0 to 10"
    elif not all(np.isfinite(scales)) or 0.0 in scales:
        problem = f"scale factors {scales}; expected finite, non-zero numbers"
    if problem is None and minor >= 4 and header_size >= 255:
        (count,) = struct.unpack_from("<Q", head, 247)
        if legacy not in (0, count):
            problem = (
                f"its two point counts differ (legacy {legacy:,}, 64-bit {count:,}); "
                "expected the legacy one 0 or the same"
            )
    if problem is None:
        have = size - offset
        if not compressed and count * record > have:
            problem = (
                f"the header says {count:,} points of {record} bytes; the file holds "
                f"{have // record:,} (a truncated file, or a header that lies about its size)"
            )
        elif compressed and count > _LAZ_MAX_POINTS_PER_BYTE * have:
            problem = (
                f"the header says {count:,} points; {have:,} bytes of compressed points cannot "
                "hold them (a truncated file, or a header that lies about its size)"
            )
    if problem is not None:
        raise InputError(path, problem)


#: Points a LAS/LAZ file is read in at a time.
_LAS_CHUNK_POINTS = 1_000_000
#: The largest LASzip chunk taken, in points: lazrs allocates a whole chunk before decoding
#: it (LASzip writes 50,000; a damaged chunk size of 755 million once made it allocate 22 GB
#: and abort the process).
_LAZ_MAX_CHUNK_POINTS = 5_000_000


def _laszip_chunk(path: Path, header: Any) -> None:
    """Refuse a LAZ whose LASzip record or chunk table cannot be those of its points: a
    chunk larger than :data:`_LAZ_MAX_CHUNK_POINTS` (or than the file's count), a chunk
    table outside the points, or more chunks than the points fill (lazrs allocates the
    chunk and the table as declared, and aborts the process when it cannot)."""
    count = int(header.point_count)
    for vlr in header.vlrs:
        data = vlr.record_data_bytes() if getattr(vlr, "record_id", None) == 22204 else b""
        if len(data) < 16:  # not the LASzip VLR (its chunk size is the u32 at byte 12)
            continue
        (chunk,) = struct.unpack_from("<I", data, 12)
        variable = chunk == 0xFFFFFFFF
        if not variable and chunk > max(count, _LAZ_MAX_CHUNK_POINTS):
            raise InputError(
                path,
                f"its LASzip record declares chunks of {chunk:,} points for a file of "
                f"{count:,}; expected at most {_LAZ_MAX_CHUNK_POINTS:,} (a damaged file)",
            )
        start, size = int(header.offset_to_point_data), path.stat().st_size
        with open(path, "rb") as f:
            f.seek(start)
            head = f.read(8)
            (table,) = struct.unpack("<q", head) if len(head) == 8 else (-1,)
            if table == -1:
                return  # no chunk table (a stream that was not finished): lazrs judges
            f.seek(max(0, min(table, size)))
            entry = f.read(8)
        if start + 8 <= size - 8 < table:
            raise InputError(
                path,
                f"truncated: its LASzip chunk table is at byte {table:,}, the file has "
                f"{size:,} bytes (a copy cut short, or a damaged file)",
            )
        if not start + 8 <= table <= size - 8 or len(entry) < 8:
            raise InputError(
                path,
                f"its LASzip chunk table is at byte {table:,}; expected inside the points "
                f"(bytes {start + 8:,} to {size - 8:,}; a damaged file)",
            )
        version, chunks = struct.unpack("<II", entry)
        most = table - start - 8 if variable else -(-count // max(chunk, 1)) + 1
        if version != 0 or chunks > most:
            raise InputError(
                path,
                f"its LASzip chunk table (version {version}) declares {chunks:,} chunks; "
                f"{count:,} points hold at most {most:,} (a damaged file)",
            )


def _read_las(path: Path) -> PointCloud:
    import laspy

    _las_header(path)
    try:
        with laspy.open(str(path)) as reader:
            header = reader.header
            _laszip_chunk(path, header)
            # In pieces: what is held grows with the points decoded, not with the count a
            # header claims (laspy would allocate all of them first).
            arrays = [chunk.array for chunk in reader.chunk_iterator(_LAS_CHUNK_POINTS)]
        array = np.concatenate(arrays) if arrays else np.zeros(0, header.point_format.dtype())
        record = laspy.ScaleAwarePointRecord(
            array, header.point_format, header.scales, header.offsets
        )
        las = laspy.LasData(header, points=record)
    except InputError:
        raise
    except Exception as exc:  # laspy's own errors: not a LAS file, a broken header
        text = str(exc) or type(exc).__name__
        raise InputError(path, f"not a readable LAS/LAZ file ({text})") from None
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
        values = np.asarray(las[name])
        if values.ndim == 1:
            fields[name] = values
        else:  # an array dimension (e.g. 3 floats a point): one field a column
            for k, column in enumerate(values.reshape(len(values), -1).T):
                fields[f"{name}_{k}"] = column
    meta: dict[str, Any] = {"intensity_max": 65535.0}
    if "label" not in fields:  # ASPRS classes, not SemanticKITTI ids: said in meta
        fields["label"] = np.asarray(las.classification)
        meta["label_field"] = "classification"
    if "range" in fields:
        fields["range_m"] = fields.pop("range")
    return cloud_from_fields(fields, path, meta=meta)


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
