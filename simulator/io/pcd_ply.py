"""PCD and PLY files, read through Open3D's tensor reader (every field, its dtype kept),
each header checked first against itself and the file's size, so that a damaged or lying
file is refused in one line (:class:`~simulator.errors.InputError`) before Open3D reads it.

Part of :mod:`simulator.io.read`, the one reader, which checks every frame's values after.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..pointcloud import PointCloud
from .drivers import cloud_from_fields

__all__ = ["PcdLayout", "read_pcd", "read_ply"]

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


def read_pcd(path: Path) -> PointCloud:
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


def read_ply(path: Path) -> PointCloud:
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
