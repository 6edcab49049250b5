"""A seeded corpus of damaged captures, made from the shared real ones at run time.

Nothing here is data: every mutant is a recipe (a source, a kind of damage and a seed) that
:func:`make` writes into a temporary folder, from the real captures in ``../shared/realdata``
(:data:`REALDATA`), and the same recipe gives the same bytes on every run. The sources are
the real captures as they are (four nebula PCDs, the Ouster pcap with its metadata, the OSF)
and the VLP-16 frame written by the test in the other formats the reader takes
(:func:`derived_sources`: a compressed PCD, LAS, LAZ, PLY, KITTI and nuScenes ``.bin``, a
ROS 2 bag), so each reader meets a real frame.

The damage (:data:`KINDS`):

- ``truncate``: the file cut at a random offset;
- ``flip``: 1 to 8 random bytes flipped (half of them in the first 512 bytes, where headers
  are);
- ``lie``: a header that lies about the size (PCD ``POINTS``/``WIDTH``/``HEIGHT``, LAS point
  counts and record lengths, a pcap record's length, an OSF's declared length, a
  PointCloud2's ``width``/``height``/``row_step``), from :data:`LIES`;
- ``type``: fields of the wrong type or size (PCD ``TYPE``/``SIZE``/``COUNT``, LAS point
  format, PointField datatypes and offsets), from :data:`TYPES`;
- ``swap``: an Ouster pcap read with another unit's metadata (the OSF's OS0-8, or the
  OS1-128's own JSON with another mode, rows, profile or column count; :data:`SWAPS`) or a
  damaged JSON.

A mutant's ``refuse`` says whether its damage can only be refused (a cut that leaves no whole
record, a lie, a foreign metadata); the others (a flipped byte inside a coordinate) may read
as another valid cloud.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.io.read import ReadOptions

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
NEBULA = REALDATA / "nebula"
OUSTER = REALDATA / "ouster"
PCAP = OUSTER / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"
PCAP_META = OUSTER / "OS-1-128_v2.3.0_1024x10.json"
OSF = OUSTER / "osf_fw_3.2_10scans.osf"
VLP16 = NEBULA / "velodyne-vlp16-1673400472138016708.pcd"

#: The real captures, by the short name the mutants use.
REAL = {
    "vlp16.pcd": VLP16,
    "vls128.pcd": NEBULA / "velodyne-vls128-1585897255376374245.pcd",
    "pandar64.pcd": NEBULA / "hesai-pandar64-1673403880898440686.pcd",
    "helios.pcd": NEBULA / "robosense-helios5515-1691141763462381376.pcd",
    "os1.pcap": PCAP,
    "os0.osf": OSF,
}
#: The VLP-16 frame written in the reader's other formats (:func:`derived_sources`).
DERIVED = ("vlp16c.pcd", "vlp16.las", "vlp16.laz", "vlp16.ply", "vlp16.bin", "vlp16.pcd.bin",
           "vlp16.bag", "vlp16-12.laz")  # fmt: skip
SOURCES = (*REAL, *DERIVED)

#: Mutants of each random kind a source gets (times LIDAR_SIM_FUZZ_SCALE).
PER_SOURCE = 30


def scale() -> int:
    """How many times the default corpus to make (``LIDAR_SIM_FUZZ_SCALE``, default 1)."""
    return max(1, int(os.environ.get("LIDAR_SIM_FUZZ_SCALE", "1")))


@dataclass(frozen=True)
class Mutant:
    """One damaged capture: a recipe, and what to expect of it.

    Attributes
    ----------
    source : str
        The capture it is made of (a key of :data:`SOURCES`).
    kind : str
        The damage (``truncate``, ``flip``, ``lie``, ``type``, ``swap``).
    seed : int
        The seed of a random damage, or the index into the kind's table.
    refuse : bool
        Whether the damage can only be refused (else it may read as a valid cloud).
    """

    source: str
    kind: str
    seed: int
    refuse: bool = True
    label: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return f"{self.source}/{self.kind}-{self.seed}" + (f"-{self.label}" if self.label else "")


# --------------------------------------------------------------------------- the sources


def derived_sources(folder: Path) -> dict[str, Path]:
    """The VLP-16 frame in the reader's other formats, written into ``folder``."""
    import laspy
    import open3d as o3d

    from simulator.io.read import read

    folder.mkdir(parents=True, exist_ok=True)
    cloud = read(VLP16)
    xyz = cloud["xyz"]
    out: dict[str, Path] = {}
    pc = o3d.t.geometry.PointCloud()
    pc.point.positions = o3d.core.Tensor(xyz)
    pc.point.intensity = o3d.core.Tensor(cloud["intensity"].reshape(-1, 1))
    pc.point.ring = o3d.core.Tensor(cloud["ring"].reshape(-1, 1))
    out["vlp16c.pcd"] = folder / "vlp16c.pcd"
    o3d.t.io.write_point_cloud(str(out["vlp16c.pcd"]), pc, write_ascii=False, compressed=True)
    out["vlp16.ply"] = folder / "vlp16.ply"
    o3d.t.io.write_point_cloud(str(out["vlp16.ply"]), pc, write_ascii=False)
    # LAS 1.4 (format 1 and, compressed, 6) and the LAZ most tools still write: 1.2, format 1
    for name, version, fmt in (("vlp16.las", "1.4", 1), ("vlp16.laz", "1.4", 6),
                               ("vlp16-12.laz", "1.2", 1)):  # fmt: skip
        header = laspy.LasHeader(point_format=fmt, version=version)
        header.scales = np.full(3, 1e-3)
        las = laspy.LasData(header)
        las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
        las.intensity = cloud["intensity"].astype(np.uint16)
        las.gps_time = cloud["time_s"]
        path = folder / name
        las.write(str(path))
        out[path.name] = path
    rows = np.column_stack([xyz, cloud["intensity"] / 255.0]).astype("<f4")
    out["vlp16.bin"] = folder / "vlp16.bin"
    rows.tofile(out["vlp16.bin"])
    sweep = np.column_stack([xyz, cloud["intensity"], cloud["ring"]]).astype("<f4")
    out["vlp16.pcd.bin"] = folder / "vlp16.pcd.bin"
    sweep.tofile(out["vlp16.pcd.bin"])
    out["vlp16.bag"] = write_bag(folder / "vlp16.bag", [cloud_message(xyz, cloud["intensity"])])
    return out


def cloud_message(
    xyz: np.ndarray,
    intensity: np.ndarray,
    height: int = 1,
    big_endian: bool = False,
    extra: dict[str, np.ndarray] | None = None,
    lies: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A PointCloud2's parts (for :func:`write_bag`): ``x y z intensity`` float32 and any
    ``extra`` fields, packed in the given byte order; ``lies`` replace any part."""
    fields = {"x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2], "intensity": intensity}
    fields.update(extra or {})
    order = ">" if big_endian else "<"
    dtype = np.dtype([(k, np.asarray(v).dtype.newbyteorder(order)) for k, v in fields.items()])
    data = np.zeros(len(xyz), dtype=dtype)
    for k, v in fields.items():
        data[k] = v
    codes = {"i1": 1, "u1": 2, "i2": 3, "u2": 4, "i4": 5, "u4": 6, "f4": 7, "f8": 8}
    parts: dict[str, Any] = {
        "height": height,
        "width": len(xyz) // height,
        "fields": [(k, dtype.fields[k][1], codes[dtype[k].str[1:]], 1) for k in dtype.names or ()],
        "is_bigendian": big_endian,
        "point_step": dtype.itemsize,
        "row_step": dtype.itemsize * (len(xyz) // height),
        "data": np.frombuffer(data.tobytes(), dtype=np.uint8),
        "stamp_ns": 1_673_400_472_138_016_708,
        "frame_id": "lidar",
    }
    parts.update(lies or {})
    return parts


def write_bag(path: Path, messages: list[dict[str, Any]], topic: str = "/points") -> Path:
    """A ROS 2 bag of PointCloud2 messages (:func:`cloud_message`'s parts), written with
    the rosbags library."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    t = store.types
    try:
        writer = Writer(path, version=8)
    except TypeError:  # rosbags < 0.10 writes its one version
        writer = Writer(path)
    writer.open()
    connection = writer.add_connection(topic, "sensor_msgs/msg/PointCloud2", typestore=store)
    for k, m in enumerate(messages):
        stamp_ns = int(m["stamp_ns"]) + k * 100_000_000
        header = t["std_msgs/msg/Header"](
            stamp=t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9),
            frame_id=m["frame_id"],
        )
        msg = t["sensor_msgs/msg/PointCloud2"](
            header=header,
            height=m["height"],
            width=m["width"],
            fields=[
                t["sensor_msgs/msg/PointField"](name=n, offset=o, datatype=d, count=c)
                for n, o, d, c in m["fields"]
            ],
            is_bigendian=m["is_bigendian"],
            point_step=m["point_step"],
            row_step=m["row_step"],
            data=m["data"],
            is_dense=False,
        )
        writer.write(connection, stamp_ns, store.serialize_cdr(msg, msg.__msgtype__))
    writer.close()
    return path


# --------------------------------------------------------------------------- helpers


def _pcd_parts(data: bytes) -> tuple[list[str], bytes]:
    """A PCD's header lines and its data bytes."""
    at = data.index(b"\nDATA ") + 1
    end = data.index(b"\n", at) + 1
    return data[:end].decode("ascii").splitlines(), data[end:]


def _pcd_set(data: bytes, **keys: str) -> bytes:
    """A PCD's bytes with header keys replaced (``POINTS="99"``)."""
    lines, body = _pcd_parts(data)
    for i, line in enumerate(lines):
        key = line.split(" ", 1)[0]
        if key in keys:
            lines[i] = f"{key} {keys[key]}"
    return ("\n".join(lines) + "\n").encode("ascii") + body


def _pcd_words(data: bytes, key: str) -> list[str]:
    lines, _ = _pcd_parts(data)
    return next(line.split()[1:] for line in lines if line.split(" ", 1)[0] == key)


def _replace_word(words: list[str], index: int, value: str) -> str:
    words = list(words)
    words[index] = value
    return " ".join(words)


def pcap_records(data: bytes) -> list[tuple[int, int]]:
    """(offset of the record header, captured length) of each record of a pcap."""
    out, at = [], 24
    while at + 16 <= len(data):
        (incl,) = struct.unpack_from("<I", data, at + 8)
        out.append((at, incl))
        at += 16 + incl
    return out


# --------------------------------------------------------------------------- the tables

#: Header lies of a PCD, by what they replace: (label, keys to set) of a file of n points.
PCD_LIES: list[tuple[str, Callable[[int], dict[str, str]]]] = [
    ("points-99999999999", lambda n: {"POINTS": "99999999999"}),
    ("points-width-height-1e11", lambda n: {"POINTS": "99999999999", "WIDTH": "99999999999"}),
    ("all-1e12", lambda n: {"POINTS": str(10**12), "WIDTH": str(10**12), "HEIGHT": "1"}),
    ("grid-1e6x1e6", lambda n: {"POINTS": str(10**12), "WIDTH": "1000000", "HEIGHT": "1000000"}),
    ("points-2^64", lambda n: {"POINTS": str(2**64 + 5), "WIDTH": str(2**64 + 5)}),
    ("points-plus-1", lambda n: {"POINTS": str(n + 1), "WIDTH": str(n + 1)}),
    ("points-twice", lambda n: {"POINTS": str(2 * n), "WIDTH": str(n), "HEIGHT": "2"}),
    ("points-minus-1", lambda n: {"POINTS": "-1", "WIDTH": "-1"}),
    ("points-text", lambda n: {"POINTS": "many"}),
    ("points-float", lambda n: {"POINTS": f"{n}.5"}),
    ("width-lies", lambda n: {"WIDTH": str(n + 7)}),
    ("height-lies", lambda n: {"HEIGHT": "3"}),
    ("height-0", lambda n: {"HEIGHT": "0"}),
    ("width-huge-height-0", lambda n: {"WIDTH": "99999999999", "HEIGHT": "0"}),
    ("points-0", lambda n: {"POINTS": "0"}),
]

#: Wrong field types and sizes of a PCD: (label, keys to set) of its header's words.
PCD_TYPES: list[tuple[str, Callable[[bytes], dict[str, str]]]] = [
    ("x-size-8", lambda d: {"SIZE": _replace_word(_pcd_words(d, "SIZE"), 0, "8")}),
    ("x-size-2", lambda d: {"SIZE": _replace_word(_pcd_words(d, "SIZE"), 0, "2")}),
    ("y-type-U", lambda d: {"TYPE": _replace_word(_pcd_words(d, "TYPE"), 1, "U")}),
    ("z-type-Q", lambda d: {"TYPE": _replace_word(_pcd_words(d, "TYPE"), 2, "Q")}),
    ("last-size-99", lambda d: {"SIZE": _replace_word(_pcd_words(d, "SIZE"), -1, "99")}),
    ("x-count-0", lambda d: {"COUNT": _replace_word(_pcd_words(d, "COUNT"), 0, "0")}),
    ("x-count-3", lambda d: {"COUNT": _replace_word(_pcd_words(d, "COUNT"), 0, "3")}),
    (
        "last-count-huge",
        lambda d: {"COUNT": _replace_word(_pcd_words(d, "COUNT"), -1, "99999999999")},
    ),
    ("size-text", lambda d: {"SIZE": _replace_word(_pcd_words(d, "SIZE"), 1, "four")}),
    ("one-field-fewer", lambda d: {"FIELDS": " ".join(_pcd_words(d, "FIELDS")[:-1])}),
    ("x-named-twice", lambda d: {"FIELDS": _replace_word(_pcd_words(d, "FIELDS"), 1, "x")}),
    (
        "data-other",
        lambda d: {"DATA": "ascii" if _pcd_words(d, "DATA")[0] != "ascii" else "binary"},
    ),
    ("data-compressed", lambda d: {"DATA": "binary_compressed"}),
    ("data-unknown", lambda d: {"DATA": "lzma"}),
]

#: LAS header fields (offset, struct format) and the lies told in them.
LAS_LIES: list[tuple[str, int, str, int | float]] = [
    ("legacy-count-4e9", 107, "<I", 4_000_000_000),
    ("count-1e12", 247, "<Q", 10**12),
    ("count-2^63", 247, "<Q", 2**63),
    ("count-plus-1", 247, "<Q", -1),  # -1: the true count + 1 (filled in by make)
    ("record-length-1", 105, "<H", 1),
    ("record-length-65535", 105, "<H", 65535),
    ("point-offset-huge", 96, "<I", 4_000_000_000),
    ("point-offset-0", 96, "<I", 0),
    ("header-size-9", 94, "<H", 9),
    ("vlrs-1e9", 100, "<I", 1_000_000_000),
    ("x-scale-nan", 131, "<d", float("nan")),
    ("x-scale-0", 131, "<d", 0.0),
]
#: LAS type damage: (label, offset, struct format, value). ``point-format-0`` reads: format
#: 0's 20 bytes and 8 (or 10) extra bytes are a valid layout of the same records.
LAS_TYPES: list[tuple[str, int, str, int]] = [
    ("point-format-99", 104, "<B", 99),
    ("point-format-0", 104, "<B", 0),
    ("point-format-10", 104, "<B", 10),
    ("version-9.9", 24, "<BB", 0),
    ("signature", 0, "<4s", 0),
]

#: PointCloud2 lies of a message of n points (:func:`cloud_message`'s parts).
BAG_LIES: list[tuple[str, Callable[[int], dict[str, Any]]]] = [
    ("width-1e9", lambda n: {"width": 10**9, "row_step": 16 * 10**9 % 2**32}),
    ("width-plus-1", lambda n: {"width": n + 1, "row_step": 16 * (n + 1)}),
    ("height-2^31", lambda n: {"height": 2**31}),
    ("height-2-width-n", lambda n: {"height": 2}),
    ("row-step-0", lambda n: {"row_step": 0}),
    ("row-step-huge", lambda n: {"row_step": 2**32 - 1}),
    ("row-step-short", lambda n: {"row_step": 16 * n - 1}),
    ("point-step-0", lambda n: {"point_step": 0, "row_step": 0}),
    ("point-step-8", lambda n: {"point_step": 8, "row_step": 8 * n}),
    ("point-step-huge", lambda n: {"point_step": 2**32 - 1}),
    ("data-short", lambda n: {"data": np.zeros(16 * n - 5, np.uint8)}),
    ("data-empty", lambda n: {"data": np.zeros(0, np.uint8)}),
]
#: PointCloud2 field damage: (label, field parts of a message's ``fields``).
BAG_TYPES: list[tuple[str, list[tuple[str, int, int, int]]]] = [
    ("datatype-0", [("x", 0, 0, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]),
    ("datatype-9", [("x", 0, 7, 1), ("y", 4, 9, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]),
    ("x-uint32", [("x", 0, 6, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]),
    ("x-float64", [("x", 0, 8, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]),
    (
        "offset-past-point",
        [("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 14, 7, 1), ("intensity", 12, 7, 1)],
    ),
    (
        "offset-2^32",
        [("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 2**32 - 1, 7, 1), ("intensity", 12, 7, 1)],
    ),
    ("count-0", [("x", 0, 7, 0), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]),
    ("count-huge", [("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 2**31)]),
    ("x-twice", [("x", 0, 7, 1), ("x", 4, 7, 1), ("z", 8, 7, 1), ("intensity", 12, 7, 1)]),
    ("no-z", [("x", 0, 7, 1), ("y", 4, 7, 1), ("intensity", 12, 7, 1)]),
    ("empty-name", [("x", 0, 7, 1), ("y", 4, 7, 1), ("z", 8, 7, 1), ("", 12, 7, 1)]),
    ("no-fields", []),
]

#: Changes to the OS1-128's metadata JSON (ouster-sdk's legacy layout: top-level keys, the
#: packet layout in ``data_format``) that make it another unit's or mode's: (label, keys).
SWAPS: list[tuple[str, dict[str, Any]]] = [
    ("mode-2048x10", {"lidar_mode": "2048x10",
                      "data_format": {"columns_per_frame": 2048, "column_window": [0, 2047]}}),
    ("mode-512x10", {"lidar_mode": "512x10",
                     "data_format": {"columns_per_frame": 512, "column_window": [0, 511]}}),
    ("mode-1024x20", {"lidar_mode": "1024x20"}),
    ("mode-2048x10-only", {"lidar_mode": "2048x10"}),
    ("rows-64", {"data_format": {"pixels_per_column": 64},
                 "beam_altitude_angles": list(range(64)), "beam_azimuth_angles": [0.0] * 64}),
    ("columns-per-packet-8", {"data_format": {"columns_per_packet": 8}}),
    ("profile-dual", {"data_format": {"udp_profile_lidar": "RNG19_RFL8_SIG16_NIR16_DUAL"}}),
    ("profile-legacy", {"data_format": {"udp_profile_lidar": "LEGACY"}}),
    ("profile-single", {"data_format": {"udp_profile_lidar": "RNG19_RFL8_SIG16_NIR16"}}),
    ("other-serial", {"prod_sn": "992109000153"}),
    ("other-init-id", {"initialization_id": 5431292}),
    ("lidar-port-other", {"udp_port_lidar": 7503, "udp_port_imu": 7502}),
]  # fmt: skip
#: Damaged metadata JSON texts: (label, text of the original -> text).
BAD_JSON: list[tuple[str, Callable[[str], str]]] = [
    ("empty", lambda t: ""),
    ("half", lambda t: t[: len(t) // 2]),
    ("not-json", lambda t: "lidar_mode: 1024x10\n"),
    ("a-list", lambda t: "[1, 2, 3]"),
    ("no-beams", lambda t: t.replace("beam_altitude_angles", "beam_altitude_angle")),
    ("columns-text", lambda t: t.replace('"columns_per_frame": 1024', '"columns_per_frame": "x"')),
    ("columns-huge", lambda t: t.replace('"columns_per_frame": 1024',
                                          '"columns_per_frame": 99999999999')),
]  # fmt: skip


#: The labels of the ``swap`` mutants, in order.
SWAP_LABELS = ["osf-metadata", *(s[0] for s in SWAPS), *(f"json-{b[0]}" for b in BAD_JSON)]
#: Metadata swaps that the SDK reads as the unit's own, rightly: a port the SDK does not use
#: to tell packets apart, a ``lidar_mode`` its ``data_format`` overrides, a damaged
#: ``columns_per_frame`` it does not read.
SWAPS_READ = ("lidar-port-other", "mode-2048x10-only", "json-columns-text")
#: The kinds of damage.
KINDS = ("truncate", "flip", "lie", "type", "swap")


def _kinds(source: str) -> dict[str, int]:
    """How many mutants of each kind a source gets (before the scale)."""
    n = PER_SOURCE * scale()
    kinds = {"truncate": n, "flip": n}
    if source.endswith(".pcd"):
        kinds.update(lie=len(PCD_LIES), type=len(PCD_TYPES))
    elif source.endswith((".las", ".laz")):
        kinds.update(lie=len(LAS_LIES), type=len(LAS_TYPES))
    elif source.endswith(".bag"):
        kinds.update(lie=len(BAG_LIES), type=len(BAG_TYPES))
    elif source.endswith(".pcap"):
        kinds.update(lie=4, swap=1 + len(SWAPS) + len(BAD_JSON))
    elif source.endswith(".osf"):
        kinds.update(lie=3)
    return kinds


def mutants(source: str) -> Iterator[Mutant]:
    """Every mutant of one source, in order (the recipes only: :func:`make` writes them)."""
    for kind, count in _kinds(source).items():
        for seed in range(count):
            label = ""
            if kind == "lie" and source.endswith(".pcd"):
                label = PCD_LIES[seed][0]
            elif kind == "type" and source.endswith(".pcd"):
                label = PCD_TYPES[seed][0]
            elif kind in ("lie", "type") and source.endswith((".las", ".laz")):
                label = (LAS_LIES if kind == "lie" else LAS_TYPES)[seed][0]
            elif kind in ("lie", "type") and source.endswith(".bag"):
                label = (BAG_LIES if kind == "lie" else BAG_TYPES)[seed][0]
            elif kind == "swap":
                label = SWAP_LABELS[seed]
            refuse = label not in SWAPS_READ if kind == "swap" else True
            yield Mutant(source, kind, seed, refuse=refuse, label=label)


# --------------------------------------------------------------------------- making one


@dataclass
class Made:
    """A mutant written: the path to read, its read options, whether it must be refused,
    and the files the message may name."""

    path: Path
    options: ReadOptions
    refuse: bool
    names: tuple[Path, ...]


def make(m: Mutant, sources: dict[str, Path], folder: Path) -> Made:
    """Write mutant ``m`` of ``sources[m.source]`` into ``folder`` (a fresh one)."""
    src = sources[m.source]
    rng = np.random.default_rng([SOURCES.index(m.source), KINDS.index(m.kind), m.seed])
    folder.mkdir(parents=True, exist_ok=True)
    if m.source.endswith(".bag"):
        return _make_bag(m, src, folder, rng)
    name = src.name if m.source in REAL else m.source
    path = folder / name
    data = src.read_bytes()
    options = ReadOptions()
    names: tuple[Path, ...] = (path,)
    refuse = m.refuse
    if m.source.endswith(".pcap"):
        meta = folder / PCAP_META.name
        meta.write_bytes(PCAP_META.read_bytes())
        options = ReadOptions(meta=meta)
        names = (path, meta)
    if m.kind == "truncate":
        cut = int(rng.integers(0, len(data)))
        data = data[:cut]
        refuse = _cut_is_refused(m.source, src, cut, len(data))
    elif m.kind == "flip":
        data = bytearray(data)
        for k in range(int(rng.integers(1, 9))):
            top = min(512, len(data)) if k % 2 == 0 else len(data)
            at = int(rng.integers(0, top))
            data[at] ^= int(rng.integers(1, 256))
        data = bytes(data)
        refuse = False
    elif m.kind == "lie":
        data = _lie(m, data, src)
    elif m.kind == "type":
        before = data
        data = _type(m, data)
        refuse = data != before and not (m.source.endswith((".las", ".laz")) and m.seed == 1)
    elif m.kind == "swap":
        meta = _swap(m.seed, folder)
        options = ReadOptions(meta=meta)
        names = (path, meta)
        refuse = m.refuse
    path.write_bytes(data)
    return Made(path, options, refuse, names)


def _cut_is_refused(source: str, src: Path, cut: int, size: int) -> bool:
    """Whether a file cut at ``cut`` bytes can only be refused (no whole record left over)."""
    if source.endswith(".pcd.bin"):
        return cut % 20 != 0
    if source.endswith(".bin"):
        return cut % 16 != 0
    if source.endswith(".pcap"):
        ends = {at + 16 + n for at, n in pcap_records(src.read_bytes())}
        return cut not in ends and cut != 24
    return True


def _lie(m: Mutant, data: bytes, src: Path) -> bytes:
    if m.source.endswith(".pcd"):
        n = int(_pcd_words(data, "POINTS")[0])
        return _pcd_set(data, **PCD_LIES[m.seed][1](n))
    if m.source.endswith((".las", ".laz")):
        _, offset, fmt, value = LAS_LIES[m.seed]
        if offset == 247 and data[24:26] < bytes([1, 4]):
            # Before 1.4 there is no 64-bit count (offset 247 is in the first VLR's
            # header): the lie goes to the one count there is, as large as it holds.
            offset, fmt, value = 107, "<I", value if value == -1 else min(value, 2**32 - 1)
        if value == -1:
            value = struct.unpack_from(fmt, data, offset)[0] + 1
        out = bytearray(data)
        struct.pack_into(fmt, out, offset, value)
        return bytes(out)
    if m.source.endswith(".pcap"):
        records = pcap_records(data)
        out = bytearray(data)
        at, incl = records[[1, len(records) // 2, -1, 5][m.seed]]
        lie = [2**32 - 1, incl + 1, 10**9, 0][m.seed]
        struct.pack_into("<I", out, at + 8, lie)
        if m.seed == 3:  # a zero-length record where a packet was: the rest misread
            struct.pack_into("<I", out, at + 12, 0)
        return bytes(out)
    if m.source.endswith(".osf"):
        out = bytearray(data)
        # The size-prefixed flatbuffer's header: its file_length lies (see osf_size_problem).
        lies = [len(data) * 2, 2**63, len(data) - 1]
        _osf_set_length(out, lies[m.seed])
        return bytes(out)
    raise AssertionError(m)


def _osf_set_length(data: bytearray, length: int) -> None:
    """Set an OSF header's ``file_length`` (its flatbuffer table's field 3, a uint64; the
    layout :func:`simulator.config.vendor.osf_size_problem` reads)."""
    root = struct.unpack_from("<I", data, 4)[0]
    table = 4 + root
    vtable = table - struct.unpack_from("<i", data, table)[0]
    offset = struct.unpack_from("<H", data, vtable + 4 + 2 * 3)[0]
    struct.pack_into("<Q", data, table + offset, length % 2**64)


def _type(m: Mutant, data: bytes) -> bytes:
    if m.source.endswith(".pcd"):
        return _pcd_set(data, **PCD_TYPES[m.seed][1](data))
    if m.source.endswith((".las", ".laz")):
        label, offset, fmt, value = LAS_TYPES[m.seed]
        out = bytearray(data)
        if label == "version-9.9":
            struct.pack_into(fmt, out, offset, 9, 9)
        elif label == "signature":
            struct.pack_into(fmt, out, offset, b"SALF")
        else:
            struct.pack_into(fmt, out, offset, value)
        return bytes(out)
    raise AssertionError(m)


def _swap(seed: int, folder: Path) -> Path:
    """Another unit's metadata for the OS1-128 pcap: the OSF's, a changed copy of its own,
    or a damaged JSON."""
    meta = folder / "other-unit.json"
    if seed == 0:
        from ouster.sdk import open_source

        source = open_source(str(OSF))
        meta.write_text(source.sensor_info[0].to_json_string())
        source.close()
        return meta
    seed -= 1
    text = PCAP_META.read_text()
    if seed < len(SWAPS):
        doc = json.loads(text)
        for key, value in SWAPS[seed][1].items():
            if isinstance(value, dict):
                doc[key].update(value)
            else:
                doc[key] = value
        meta.write_text(json.dumps(doc, indent=1))
        return meta
    meta.write_text(BAD_JSON[seed - len(SWAPS)][1](text))
    return meta


def _make_bag(m: Mutant, src: Path, folder: Path, rng: np.random.Generator) -> Made:
    """A bag mutant: its database or metadata cut or flipped, or its message lying."""
    from simulator.io.read import read

    bag = folder / "vlp16.bag"
    if m.kind in ("lie", "type"):
        cloud = read(VLP16)
        n = len(cloud)
        lie = BAG_LIES[m.seed][1](n) if m.kind == "lie" else {"fields": BAG_TYPES[m.seed][1]}
        lies = lie
        parts = cloud_message(cloud["xyz"], cloud["intensity"], lies=lies)
        write_bag(bag, [parts])
        return Made(bag, ReadOptions(), True, (bag,))
    bag.mkdir()
    files = sorted(p for p in src.iterdir())
    target = files[int(rng.integers(0, len(files)))]
    for f in files:
        data = f.read_bytes()
        if f == target:
            if m.kind == "truncate":
                data = data[: int(rng.integers(0, len(data)))]
            else:
                data = bytearray(data)
                for _ in range(int(rng.integers(1, 9))):
                    data[int(rng.integers(0, len(data)))] ^= int(rng.integers(1, 256))
                data = bytes(data)
        (bag / f.name).write_bytes(data)
    return Made(bag, ReadOptions(), False, (bag, bag / target.name))
