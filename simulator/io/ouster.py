"""Ouster captures, read through Ouster's own SDK (``pip install 'lidar-sim[ouster]'``): a pcap
of lidar packets with the unit's metadata JSON, or an OSF file (Ouster's own recording format,
the metadata inside it).

A frame (``LidarScan``) is the whole beam grid: one row a beam (``pixels_per_column``), one
column a firing (``columns_per_frame``; ``measurement_id`` = column). RANGE 0 is a beam that
fired and saw nothing, so a frame records its drop-outs exactly: the cloud keeps the pixels
with a return, their ``ring`` (row) and ``column``, and ``meta["beam_grid"]`` the grid's
size. Columns whose packets did not arrive (``status`` without its valid bit) were never
seen, so they are not drop-outs: they are left out of ``firings_per_ring``.

Fields (:func:`cloud_of_scan`, the same for both formats): ``xyz`` from the SDK's ``XYZLut``
(the sensor frame, m); ``intensity`` = REFLECTIVITY (Ouster's calibrated reflectivity,
0-255); ``range_m`` = RANGE / 1000, measured as Ouster measures it, from the lidar origin on
the spin axis (the beam's exit point is ``lidar_origin_to_beam_origin_mm`` nearer);
``time_s`` from the column timestamps (s from the frame's first valid column); ``near_ir``
and ``signal`` where the profile has them. ``meta["source"]`` is the capture's path and
``meta["metadata"]`` where its metadata came from (the JSON, or the OSF itself).

An OSF also holds a pose per column (``LidarScan.pose``, body-to-world, 4 x 4), the identity
when the recorder did not estimate one: :func:`column_poses` gives them. The unit's calibration
travels with both kinds of capture, so :func:`scanner_of_capture` imports its scanner
(:func:`simulator.config.vendor.import_scanner`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..config.vendor import import_scanner
from ..config.vendor.ouster import osf_problem
from ..errors import ConfigError, InputError
from ..pointcloud import PointCloud
from .drivers import grid_meta

__all__ = [
    "COLUMN_PERIOD_TOLERANCE",
    "check_osf",
    "check_pcap",
    "cloud_of_scan",
    "column_poses",
    "find_metadata",
    "osf_problem",
    "read_osf_frames",
    "read_pcap_frames",
    "scanner_of_capture",
]


def find_metadata(pcap: Path, meta: Path | None = None) -> Path:
    """The metadata JSON of ``pcap``: ``meta`` if given, else ``STEM.json`` beside it, else
    the JSON beside it whose stem is the longest start of the pcap's stem (the way
    ouster-sdk pairs a recording with its metadata, e.g. ``OS-1-128_1024x10.json`` for
    ``OS-1-128_1024x10_lb_n3.pcap``)."""
    if meta is not None:
        if not Path(meta).is_file():
            raise InputError(meta, "metadata file not found (--meta)")
        return Path(meta)
    same = pcap.with_suffix(".json")
    if same.is_file():
        return same
    starts = [p for p in pcap.parent.glob("*.json") if pcap.stem.startswith(p.stem)]
    if starts:
        return max(starts, key=lambda p: len(p.stem))
    raise InputError(
        pcap,
        f"no sensor metadata beside it (expected {same.name}, or a JSON whose name starts "
        "the pcap's); pass --meta FILE",
    )


#: pcap magic numbers (microsecond and nanosecond stamps) and their byte order.
_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": "<",
    b"\x4d\x3c\xb2\xa1": "<",
    b"\xa1\xb2\xc3\xd4": ">",
    b"\xa1\xb2\x3c\x4d": ">",
}
#: The longest packet a pcap record may hold (libpcap's MAXIMUM_SNAPLEN).
_PCAP_MAX_RECORD = 262_144
#: How far a frame's column spacing may stray from its metadata's mode before the metadata
#: is refused as another unit's or mode's (the motor holds its speed far closer).
COLUMN_PERIOD_TOLERANCE = 0.1


def check_pcap(path: Path) -> None:
    """Refuse a pcap that is damaged or cut short, before ouster-sdk reads it (the SDK reads
    what it can of such a file and yields fewer frames, without a word).

    Every record header is walked: each must hold at most 262,144 bytes, no more than the
    packet's length on the wire, and end inside the file. A pcapng file is left to the SDK.

    Raises
    ------
    InputError
        If the file is shorter than its 24-byte header, is no pcap, or a record is damaged
        or cut short.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(24)
        if head[:4] == b"\x0a\x0d\x0d\x0a":
            return  # pcapng: the SDK's reader judges it
        if len(head) < 24 or head[:4] not in _PCAP_MAGIC:
            raise InputError(path, "not a pcap file (expected its 24-byte header)")
        order = _PCAP_MAGIC[head[:4]]
        at, index = 24, 0
        while at < size:
            record = f.read(16)
            if len(record) < 16:
                raise InputError(
                    path,
                    f"truncated: packet record {index:,} at byte {at:,} is cut in its header "
                    "(a copy cut short, or a capture that did not finish)",
                )
            captured, wire = struct.unpack(order + "8xII", record)
            if captured > _PCAP_MAX_RECORD or captured > wire:
                raise InputError(
                    path,
                    f"packet record {index:,} at byte {at:,} claims {captured:,} bytes of a "
                    f"{wire:,}-byte packet; expected at most {_PCAP_MAX_RECORD:,} and no more "
                    "than the packet (a damaged file)",
                )
            at += 16 + captured
            if at > size:
                raise InputError(
                    path,
                    f"truncated: packet record {index:,} claims {captured:,} bytes, "
                    f"{captured - (at - size):,} are in the file (a copy cut short, or a "
                    "capture that did not finish)",
                )
            f.seek(at)
            index += 1


def _sdk() -> Any:
    try:
        import ouster.sdk as sdk
        from ouster.sdk import core
    except ImportError:
        raise InputError(
            "ouster-sdk", "reading an Ouster capture needs it: pip install 'lidar-sim[ouster]'"
        ) from None
    return sdk, core


def _sdk_problem(exc: Exception) -> str:
    """One line of what the SDK said (``open_source`` wraps the cause in two lines)."""
    cause = exc.get_sub_exception() if hasattr(exc, "get_sub_exception") else exc
    return " ".join(str(cause).split()) or type(cause).__name__


def cloud_of_scan(scan: Any, info: Any, xyz_lut: Any, meta: dict[str, Any]) -> PointCloud:
    """One Ouster frame as the point record (see the module): the pixels with a return.

    Parameters
    ----------
    scan : ouster.sdk.core.LidarScan
        The frame, H rows (beams) x W columns (firings), with RANGE and REFLECTIVITY.
    info : ouster.sdk.core.SensorInfo
        Its sensor's metadata.
    xyz_lut : ouster.sdk.core.XYZLut
        ``XYZLut(info)``, made once per capture.
    meta : dict
        Facts added to the cloud's ``meta`` (where the capture came from).

    Returns
    -------
    PointCloud
        ``xyz`` (N, 3) float32 m, ``intensity`` (N,) float32 0-255, ``range_m`` (N,)
        float32 m, ``ring`` and ``column`` (N,) uint16, ``time_s`` (N,) float64 s,
        ``return_number`` (N,) uint8 (1), ``near_ir``/``signal`` where present; ``meta``
        with ``beam_grid``, ``firings_per_ring``, ``frame_id``, ``time_origin_ns``.
    """
    rows, columns = info.format.pixels_per_column, info.format.columns_per_frame
    range_mm = scan.field("RANGE")
    valid_column = (np.asarray(scan.status) & 1).astype(bool)
    hit = (range_mm > 0) & valid_column[None, :]
    row, column = np.nonzero(hit)
    stamps = np.asarray(scan.timestamp, dtype=np.int64)
    t0 = stamps[valid_column].min() if valid_column.any() else 0
    fields: dict[str, np.ndarray] = {
        "xyz": xyz_lut(scan)[hit].astype(np.float32),
        "intensity": scan.field("REFLECTIVITY")[hit].astype(np.float32),
        "range_m": (range_mm[hit].astype(np.float64) * 1e-3).astype(np.float32),
        "ring": row.astype(np.uint16),
        "time_s": (stamps[column] - t0).astype(np.float64) * 1e-9,
        "return_number": np.ones(len(row), dtype=np.uint8),
        "column": column.astype(np.uint16),
    }
    for field, key in (("NEAR_IR", "near_ir"), ("SIGNAL", "signal")):
        if field in scan.fields:
            fields[key] = scan.field(field)[hit].astype(np.float32)
    return PointCloud(
        fields,
        {
            "scanner": f"{info.prod_line} {info.sn}".strip(),
            "intensity_max": 255.0,
            "frame": "sensor",
            "frame_id": int(scan.frame_id),
            "time_origin_ns": int(t0),
            "range_reference": "lidar_origin",
            **meta,
            **grid_meta(rows, columns, int(valid_column.sum())),
        },
    )


def _column_period_problem(scan: Any, period_ns: float, mode: str) -> str | None:
    """Whether a frame's columns are spaced as its metadata's mode fires them, or what is
    wrong (a pcap read with another unit's or mode's metadata)."""
    valid = (np.asarray(scan.status) & 1).astype(bool)
    column = np.flatnonzero(valid)
    if len(column) < 2:
        return None
    stamps = np.asarray(scan.timestamp, dtype=np.float64)[column]
    step = float(np.median(np.diff(stamps) / np.diff(column)))
    if step <= 0.0 or abs(step / period_ns - 1.0) <= COLUMN_PERIOD_TOLERANCE:
        return None
    return (
        f"its columns are {step / 1e3:.1f} us apart, the metadata's {mode} fires one every "
        f"{period_ns / 1e3:.1f} us: the metadata of another unit or mode?"
    )


def _clouds(
    source: Any, path: Path, meta: dict[str, Any], metadata: Path | None = None
) -> Iterator[PointCloud]:
    """The lidar frames of an opened SDK source (its first sensor), closed when done; each
    frame's column spacing checked against its metadata's mode (``metadata``, the JSON of a
    pcap, is named when they disagree)."""
    _, core = _sdk()
    told = metadata if metadata is not None else path
    try:
        info = source.sensor_info[0]
        rows, columns = info.format.pixels_per_column, info.format.columns_per_frame
        fps = info.format.fps
        if not (0 < rows <= 256 and 0 < columns <= 8192 and fps > 0):
            raise InputError(
                told,
                f"metadata of {rows} rows x {columns} columns at {fps} Hz; expected up to 256 "
                "rows and 8192 columns",
            )
        try:
            xyz_lut = core.XYZLut(info)
        except Exception as exc:  # the SDK's own errors on metadata it parsed
            raise InputError(told, f"ouster-sdk cannot use it: {_sdk_problem(exc)}") from None
        mode = f"{columns}x{fps:g}"
        period_ns = 1e9 / (fps * columns)
        frames = iter(source)
        while True:
            try:
                frame = next(frames)
            except StopIteration:
                return
            except Exception as exc:  # a damaged chunk: the SDK's own error types
                raise InputError(
                    path, f"ouster-sdk cannot read a frame: {_sdk_problem(exc)}"
                ) from None
            if frame[0] is not None:
                problem = _column_period_problem(frame[0], period_ns, mode)
                if problem is not None:
                    name = f" with {metadata.name}" if metadata is not None else ""
                    raise InputError(path, f"read{name}: {problem}")
                yield cloud_of_scan(frame[0], info, xyz_lut, meta)
    finally:
        source.close()


def read_pcap_frames(pcap: Path, meta: Path | None = None) -> Iterator[PointCloud]:
    """The frames of an Ouster pcap, in order, as point records (see the module).

    Parameters
    ----------
    pcap : Path
        The recording.
    meta : Path, optional
        Its metadata JSON (found beside it when not given: :func:`find_metadata`).

    Raises
    ------
    InputError
        If the pcap is damaged or cut short (:func:`check_pcap`), its metadata cannot be
        read, or no lidar frame of it fits the metadata (another unit's, or another mode's:
        no packet of its size, or columns spaced otherwise).
    """
    sdk, core = _sdk()
    meta_path = find_metadata(pcap, meta)
    check_pcap(pcap)
    try:
        source = sdk.open_source(str(pcap), meta=[str(meta_path)])
    except Exception as exc:  # the SDK raises RuntimeError/ValueError of its own
        raise InputError(
            pcap, f"ouster-sdk cannot open it with {meta_path.name}: {_sdk_problem(exc)}"
        ) from None
    try:
        info = source.sensor_info[0]
        unit = (
            f"{info.prod_line} {info.config.lidar_mode}, {info.format.udp_profile_lidar}: "
            f"{core.PacketFormat(info).lidar_packet_size:,}-byte lidar packets"
        )
    except Exception as exc:  # the SDK's own errors on metadata it parsed
        source.close()
        raise InputError(meta_path, f"ouster-sdk cannot use it: {_sdk_problem(exc)}") from None
    count = 0
    for cloud in _clouds(
        source, pcap, {"source": str(pcap), "metadata": str(meta_path)}, meta_path
    ):
        count += 1
        yield cloud
    if count == 0:
        raise InputError(
            pcap,
            f"no lidar frame in it fits its metadata {meta_path.name} ({unit}): the metadata "
            "of another unit or mode?",
        )


def check_osf(path: Path) -> None:
    """Refuse an OSF that is cut short or damaged before ouster-sdk reads it (the SDK would
    read what it can, print warnings and yield no frame, or crash): :func:`osf_problem`.

    Raises
    ------
    InputError
        If the file is empty, shorter than the length its header declares, or a block of it
        fails its CRC-32.
    """
    problem = osf_problem(path)
    if problem is not None:
        raise InputError(path, problem)


def _open_osf(path: Path) -> Any:
    """``ouster.sdk.open_source`` of a checked OSF (:func:`check_osf`)."""
    sdk, _ = _sdk()
    check_osf(path)
    try:
        return sdk.open_source(str(path))
    except Exception as exc:  # SourceURLException around the SDK's RuntimeError
        raise InputError(
            path, f"not a readable Ouster OSF recording ({_sdk_problem(exc)})"
        ) from None


def read_osf_frames(osf: Path) -> Iterator[PointCloud]:
    """The frames of an Ouster OSF recording, in order, as point records (see the module);
    the sensor metadata is the one inside the file (its first sensor's, if several).

    Raises
    ------
    InputError
        If the file is truncated or not an OSF (:func:`check_osf`), or holds no lidar frame.
    """
    source = _open_osf(osf)
    count = 0
    for cloud in _clouds(source, osf, {"source": str(osf), "metadata": str(osf)}):
        count += 1
        yield cloud
    if count == 0:
        raise InputError(osf, "holds no lidar frame")


def column_poses(path: str | Path) -> list[NDArray[np.float64]] | None:
    """The per-column poses an OSF recording holds, frame by frame.

    Parameters
    ----------
    path : str or Path
        A capture.

    Returns
    -------
    list of (W, 4, 4) ndarray of float64, or None
        Each frame's body-to-world pose of each of its W columns (translations in m), in
        frame order; None when every pose is the identity (the recorder estimated none), and
        for any capture other than an OSF (a pcap carries no poses).
    """
    path = Path(path)
    if path.suffix.lower() != ".osf":
        return None
    source = _open_osf(path)
    poses: list[NDArray[np.float64]] = []
    try:
        for frame in source:
            scan = frame[0]
            if scan is None:
                continue
            # ouster-sdk 1.0 names it body_to_world; 0.x had only ``pose``.
            pose = scan.body_to_world if hasattr(scan, "body_to_world") else scan.pose
            poses.append(np.array(pose, dtype=np.float64).reshape(-1, 4, 4))
    except Exception as exc:  # a damaged chunk: the SDK's own error types
        raise InputError(path, f"ouster-sdk cannot read a frame: {_sdk_problem(exc)}") from None
    finally:
        source.close()
    if all(np.array_equal(p, np.broadcast_to(np.eye(4), p.shape)) for p in poses):
        return None
    return poses


def scanner_of_capture(
    path: str | Path, meta: Path | None = None, preset: str | None = None
) -> dict[str, Any] | None:
    """The scanner of the unit that recorded a capture, from the calibration it carries.

    Parameters
    ----------
    path : str or Path
        A capture: an Ouster pcap (its metadata JSON beside it, or ``meta``) or OSF.
    meta : Path, optional
        A pcap's metadata JSON (found beside it when not given: :func:`find_metadata`).
    preset : str, optional
        The base preset of the radiometry (see :func:`~simulator.config.vendor.import_scanner`).

    Returns
    -------
    dict or None
        The scanner mapping ``lidar-sim scanners import`` writes; None for a capture that
        carries no unit calibration (any other format).

    Raises
    ------
    InputError
        If a pcap has no metadata beside it, or its metadata or the OSF cannot be imported.
    """
    path = Path(path)
    ext = path.suffix.lower()
    if ext == ".pcap":
        calibration = find_metadata(path, meta)
    elif ext == ".osf":
        problem = osf_problem(path)  # a damaged block would reach the SDK
        if problem is not None:
            raise InputError(path, f"cannot import its scanner: {problem}")
        calibration = path
    else:
        return None
    try:
        mapping, _ = import_scanner([calibration], preset)
    except ConfigError as exc:
        where = f"{exc.key}: " if exc.key else ""
        raise InputError(exc.source, f"cannot import its scanner: {where}{exc.problem}") from None
    return mapping
