"""Ouster: a unit's sensor metadata JSON (the flat layout of firmware 2.x and the nested
``sensor_info`` / ``beam_intrinsics`` / ``lidar_data_format`` / ``config_params`` /
``lidar_intrinsics`` layout), or the same metadata inside an OSF recording, as a scanner
mapping. ouster-sdk parses it when installed (``ouster.sdk.core.SensorInfo``); a plain JSON
reading of the same keys is the fallback. A unit without a preset of its own name (an OS0,
say) takes the nearest Ouster preset's radiometry: the nearest product line, then the
nearest channel count (the header says which).

The sign convention, derived from the vendor's own point formula (sources cited where used;
this simulator's sensor frame is x forward, y left, z up, azimuth counter-clockwise from +x
seen from above, see :mod:`simulator.sensor.scanner`):

* Ouster: ouster-lidar/ouster-sdk @ 46b7bceee7995914e2f3f3facf4d78418335b2d7 ("Release
  1.0.1"), ``ouster_core/src/xyzlut.cpp``, ``impl::make_xyz_lut``. For column ``j`` of ``W``
  and row ``c`` the lidar-frame encoder angle is ``2 pi (1 - j / W)``, the beam's direction
  angle is the encoder angle minus ``beam_azimuth_angles[c]``, its altitude
  ``beam_altitude_angles[c]``; the beam origin is ``n`` along the encoder angle (``n`` =
  ``beam_to_lidar_transform[0, 3]``, mm) plus ``beam_to_lidar_transform[2, 3]`` up; the point
  is ``origin + (RANGE - |(n_x, n_z)|) * direction``, so RANGE counts from the lidar origin;
  ``lidar_to_sensor_transform`` then rotates and translates both. A rotation about z by
  ``phi`` makes the head azimuth ``phi - 360 j / W`` deg: clockwise, ``start_azimuth_deg =
  phi`` (180 for the usual ``diag(-1, -1, 1)``), ``azimuth_offset_deg = -beam_azimuth_angles``.
"""

from __future__ import annotations

import json
import math
import re
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError
from ..load import scanner_presets
from .common import (
    base_preset,
    compose_mapping,
    header_comment,
    number,
    numbers,
    plain_floats,
    slug,
)

__all__ = ["import_ouster", "osf_metadata_json", "osf_problem", "osf_size_problem"]

#: The file identifier of an OSF (v2) header, a size-prefixed flatbuffer.
_OSF_IDENTIFIER = b"OSF$"
#: The header table's ``file_length`` field (the fourth: version, status, metadata_offset,
#: file_length; ouster-sdk ``ouster_osf/fb/header.fbs``).
_OSF_FILE_LENGTH_FIELD = 3


def _osf_file_length(head: bytes) -> int | None:
    """The ``file_length`` an OSF header declares, or None when ``head`` does not start with
    an OSF v2 header (then the SDK judges the file).

    The header is a size-prefixed flatbuffer: ``uint32`` size, ``uint32`` offset of the root
    table, the identifier ``OSF$``; the table's first ``int32`` points back to its vtable,
    whose ``uint16`` entries (after two of sizes) are the fields' offsets in the table.
    """
    if len(head) < 16 or head[8:12] != _OSF_IDENTIFIER:
        return None
    size, root = struct.unpack_from("<II", head, 0)
    buf = head[4 : 4 + size]
    if len(buf) < size or root + 4 > size:
        return None
    vtable = root - struct.unpack_from("<i", buf, root)[0]
    if not 0 <= vtable <= size - 4:
        return None
    entry = vtable + 4 + 2 * _OSF_FILE_LENGTH_FIELD
    if entry + 2 > min(size, vtable + struct.unpack_from("<H", buf, vtable)[0]):
        return None
    offset = struct.unpack_from("<H", buf, entry)[0]
    if offset == 0 or root + offset + 8 > size:
        return None
    return int(struct.unpack_from("<Q", buf, root + offset)[0])


def osf_size_problem(path: Path) -> str | None:
    """What is wrong with the size of an Ouster OSF recording, or None.

    ouster-sdk reads what it can of a file cut short: it prints warnings, finds its
    metadata or not, and yields fewer frames or none. So a truncated file is refused
    before the SDK opens it, from the length its header declares.

    Returns
    -------
    str or None
        "empty file ..." or "truncated: N bytes of the M its OSF header declares ...";
        None when the file is as long as its header says, or has no OSF v2 header (the SDK
        then judges it).
    """
    size = path.stat().st_size
    if size == 0:
        return "empty file; expected an Ouster OSF recording"
    with open(path, "rb") as f:
        declared = _osf_file_length(f.read(4096))
    if declared is not None and size < declared:
        return (
            f"truncated: {size:,} bytes of the {declared:,} its OSF header declares "
            "(a copy cut short, or a recording that did not finish)"
        )
    return None


def osf_problem(path: Path) -> str | None:
    """What is wrong with an Ouster OSF (v2) recording's blocks, or None.

    An OSF v2 file is a run of blocks, each a ``uint32`` size, that many bytes of a
    flatbuffer, and a CRC-32 of both: the header, the chunks of scans, the metadata. Each is
    checked, so that no damaged byte reaches ouster-sdk (which crashes the process on some).

    Returns
    -------
    str or None
        The truncation (:func:`osf_size_problem`), the block that
        is cut short or fails its CRC, or None (also for a file with no OSF v2 header: the
        SDK judges it).
    """
    problem = osf_size_problem(path)
    if problem is not None:
        return problem
    with open(path, "rb") as f:
        if f.read(12)[8:12] != b"OSF$":
            return None
        f.seek(0)
        at, index = 0, 0
        size = path.stat().st_size
        while at < size:
            prefix = f.read(4)
            (length,) = struct.unpack("<I", prefix) if len(prefix) == 4 else (size,)
            if at + 8 + length > size:
                return (
                    f"truncated: block {index} at byte {at:,} claims {length:,} bytes, the "
                    "file ends before them (a copy cut short, or a damaged file)"
                )
            block = f.read(length)
            (crc,) = struct.unpack("<I", f.read(4))
            if zlib.crc32(prefix + block) != crc:
                return (
                    f"block {index} at byte {at:,} ({length:,} bytes) fails its CRC-32 "
                    "(a damaged file)"
                )
            at += 8 + length
            index += 1
    return None


def osf_metadata_json(path: Path) -> str:
    """The sensor metadata inside an Ouster OSF recording (its first sensor's), as the JSON
    text ouster-sdk writes for it."""
    if not path.is_file():
        raise ConfigError(path, "", "file not found")
    problem = osf_problem(path)  # (every block's CRC: the SDK crashes on some damage)
    if problem is not None:
        raise ConfigError(path, "", problem)
    try:
        from ouster.sdk import open_source  # lazy: an optional dependency
    except ImportError:
        raise ConfigError(
            path, "", "reading an Ouster OSF needs ouster-sdk: pip install 'lidar-sim[ouster]'"
        ) from None
    try:
        source = open_source(str(path))
    except Exception as exc:  # SourceURLException around the SDK's RuntimeError
        cause = exc.get_sub_exception() if hasattr(exc, "get_sub_exception") else exc
        raise ConfigError(
            path, "", f"not a readable Ouster OSF recording ({' '.join(str(cause).split())})"
        ) from None
    try:
        infos = list(source.sensor_info)
        if not infos:
            raise ConfigError(path, "", "an OSF without sensor metadata")
        return str(infos[0].to_json_string())
    finally:
        source.close()


def _ouster_fields(path: Path, text: str) -> dict[str, Any]:
    """The numbers of an Ouster metadata file, read as plain JSON (both layouts).

    Returns
    -------
    dict
        ``altitude_deg`` (H,), ``azimuth_deg`` (H,), ``beam_to_lidar_mm`` (4, 4),
        ``lidar_to_sensor_mm`` (4, 4), ``columns``, ``fps``, ``column_window`` (2,),
        ``prod_line``, ``prod_sn``, ``prod_pn``, ``fw``, ``lidar_mode``, ``layout``.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(path, "", f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError(path, "", "expected a JSON object of Ouster sensor metadata")
    nested = "beam_intrinsics" in doc or "sensor_info" in doc

    def section(name: str) -> dict[str, Any]:
        if not nested:
            return doc
        node = doc.get(name, {})
        if not isinstance(node, dict):
            raise ConfigError(path, name, "expected a JSON object")
        return node

    beams, fmt, cfg, info = (section(n) for n in
                             ("beam_intrinsics", "lidar_data_format", "config_params",
                              "sensor_info"))  # fmt: skip
    prefix = "beam_intrinsics." if nested else ""
    if "beam_altitude_angles" not in beams or "beam_azimuth_angles" not in beams:
        raise ConfigError(
            path,
            f"{prefix}beam_altitude_angles",
            "no beam angles: not Ouster sensor metadata (expected beam_altitude_angles and "
            "beam_azimuth_angles, degrees, one per row)",
        )
    alt = numbers(path, f"{prefix}beam_altitude_angles", beams["beam_altitude_angles"])
    az = numbers(path, f"{prefix}beam_azimuth_angles", beams["beam_azimuth_angles"], len(alt))
    if "beam_to_lidar_transform" in beams:
        b2l = numbers(path, f"{prefix}beam_to_lidar_transform",
                       beams["beam_to_lidar_transform"], 16).reshape(4, 4)  # fmt: skip
    else:
        key = f"{prefix}lidar_origin_to_beam_origin_mm"
        n_mm = number(path, key, beams.get("lidar_origin_to_beam_origin_mm"))
        b2l = np.eye(4)
        b2l[0, 3] = n_mm
    intr = section("lidar_intrinsics")
    lkey = ("lidar_intrinsics." if nested else "") + "lidar_to_sensor_transform"
    if "lidar_to_sensor_transform" not in intr:
        raise ConfigError(path, lkey, "missing (the 4 x 4 lidar-to-sensor transform, mm)")
    l2s = numbers(path, lkey, intr["lidar_to_sensor_transform"], 16).reshape(4, 4)
    fkey = "lidar_data_format" if nested else "data_format"
    fmt = fmt if nested else doc.get("data_format", {})
    if not isinstance(fmt, dict):
        raise ConfigError(path, fkey, "expected a JSON object")
    mode = cfg.get("lidar_mode")
    mkey = ("config_params." if nested else "") + "lidar_mode"
    match = re.fullmatch(r"(\d+)x(\d+)", mode) if isinstance(mode, str) else None
    if match is None:
        raise ConfigError(path, mkey, f"expected a lidar mode such as '1024x10', got {mode!r}")
    columns = fmt.get("columns_per_frame", int(match.group(1)))
    if isinstance(columns, bool) or not isinstance(columns, int) or columns <= 0:
        raise ConfigError(
            path, f"{fkey}.columns_per_frame", f"expected a positive integer, got {columns!r}"
        )
    window = fmt.get("column_window", [0, columns - 1])
    window_arr = numbers(path, f"{fkey}.column_window", window, 2).astype(int)
    return {
        "altitude_deg": alt,
        "azimuth_deg": az,
        "beam_to_lidar_mm": b2l,
        "lidar_to_sensor_mm": l2s,
        "columns": columns,
        "fps": float(match.group(2)),
        "column_window": (int(window_arr[0]), int(window_arr[1])),
        "prod_line": str(info.get("prod_line", "")),
        "prod_sn": str(info.get("prod_sn", "")),
        "prod_pn": str(info.get("prod_pn", "")),
        "fw": str(info.get("build_rev", "")),
        "lidar_mode": mode,
        "layout": "nested (sensor_info, beam_intrinsics, ...)" if nested else "flat (FW 2.x)",
    }


def _ouster_fields_sdk(path: Path, text: str, plain: dict[str, Any]) -> dict[str, Any] | None:
    """The same numbers as ouster-sdk parses them, or None without ouster-sdk."""
    try:
        from ouster.sdk.core import SensorInfo  # lazy: an optional dependency
    except ImportError:
        return None
    try:
        info = SensorInfo(text)
    except Exception as exc:  # the SDK raises RuntimeError/ValueError subclasses of its own
        raise ConfigError(path, "", f"ouster-sdk cannot parse it: {exc}") from None
    out = dict(plain)
    out.update(
        altitude_deg=np.asarray(info.beam_altitude_angles, dtype=np.float64),
        azimuth_deg=np.asarray(info.beam_azimuth_angles, dtype=np.float64),
        beam_to_lidar_mm=np.asarray(info.beam_to_lidar_transform, dtype=np.float64),
        lidar_to_sensor_mm=np.asarray(info.lidar_to_sensor_transform, dtype=np.float64),
        columns=int(info.format.columns_per_frame),
        fps=float(info.format.fps),
        column_window=tuple(int(v) for v in info.format.column_window),
        prod_line=str(info.prod_line),
        prod_sn=str(info.sn),
        prod_pn=str(info.prod_pn),
        fw=str(info.fw_rev),
        lidar_mode=str(info.config.lidar_mode),
    )
    return out


def _ouster_name(prod_line: str) -> str:
    """``OS-1-128`` -> ``os1-128`` (the presets' spelling)."""
    return re.sub(r"^os-([a-z0-9]+)-", r"os\1-", prod_line.strip().lower())


def _ouster_base(unit: str, path: Path) -> str:
    """The preset whose radiometry an Ouster unit takes: its own name (``os1-128``), else the
    Ouster preset on the nearest product line (OS0, OS1, OS2: the number) and then with the
    nearest channel count (in octaves)."""
    presets = scanner_presets()
    if unit in presets:
        return unit
    pattern = re.compile(r"os(\d)-(\d+)")
    own = pattern.fullmatch(unit)
    ouster = [(p, pattern.fullmatch(p)) for p in presets]
    candidates = [(p, int(m.group(1)), int(m.group(2))) for p, m in ouster if m]
    if own is None or not candidates:
        raise ConfigError(
            path,
            "prod_line",
            f"no preset named {unit!r} to take the radiometry from; give --preset",
        )
    line, channels = int(own.group(1)), int(own.group(2))
    return min(
        candidates,
        key=lambda c: (abs(c[1] - line), abs(math.log2(c[2]) - math.log2(channels)), c[0]),
    )[0]


def import_ouster(path: Path, text: str, preset: str | None) -> tuple[dict[str, Any], str]:
    """A unit's Ouster sensor metadata as a scanner mapping on a base preset
    (:func:`~simulator.config.vendor.import_scanner` reads the files and picks the reader).

    Parameters
    ----------
    path : Path
        The metadata JSON or OSF recording (named in messages and the header).
    text : str
        The metadata JSON's text.
    preset : str or None
        Base preset (a name, or a scanner YAML's path) of the radiometry and what the file
        does not give; None: the unit's own preset, else the nearest Ouster one.

    Returns
    -------
    mapping : dict
        A scanner mapping that :class:`~simulator.config.ScannerConfig` validates.
    header : str
        The YAML comment block naming the sources and which numbers came from where.
    """
    plain = _ouster_fields(path, text)
    sdk = _ouster_fields_sdk(path, text, plain)
    f = sdk if sdk is not None else plain
    reader = "ouster-sdk SensorInfo" if sdk is not None else "a plain JSON reading"
    alt, az = f["altitude_deg"], f["azimuth_deg"]
    rows, columns = len(alt), f["columns"]
    l2s, b2l = f["lidar_to_sensor_mm"], f["beam_to_lidar_mm"]
    rot = l2s[:3, :3]
    if not (np.allclose(rot[2], [0, 0, 1], atol=1e-9) and np.allclose(rot[:2, 2], 0, atol=1e-9)):
        raise ConfigError(
            path,
            "lidar_to_sensor_transform",
            "rotates the lidar frame off the z axis; the spinning pattern turns about the "
            "sensor's z: put that rotation in the survey pose and import with a z-only one",
        )
    phi_deg = math.degrees(math.atan2(rot[1, 0], rot[0, 0])) % 360.0
    n_x_mm, n_z_mm = float(b2l[0, 3]), float(b2l[2, 3])
    if n_x_mm < 0:
        raise ConfigError(path, "beam_to_lidar_transform", f"[0, 3] is {n_x_mm} mm; expected >= 0")
    lift_mm = l2s[:3, 3] + rot @ np.array([0.0, 0.0, n_z_mm])
    n_eucl_mm = math.hypot(n_x_mm, n_z_mm)
    unit = _ouster_name(f["prod_line"]) or "ouster"
    name = f"{unit}-{slug(f['prod_sn'])}" if f["prod_sn"] else f"{unit}-{slug(path.stem)}"
    base_name = preset or _ouster_base(unit, path)
    base, base_label = base_preset(base_name, path)
    lo, hi = f["column_window"]
    full = (lo, hi) == (0, columns - 1)
    pattern = {
        "name": name,
        "description": (
            f"Ouster {f['prod_line']} unit {f['prod_sn']} (fw {f['fw']}), {rows} ch, "
            f"{alt.max():+.2f} to {alt.min():+.2f} deg, {f['lidar_mode']}, "
            f"imported from {path.name}"
        ),
        "rotation_hz": f["fps"],
        "rotation": "clockwise",
        "start_azimuth_deg": round(phi_deg, 9) + 0.0,
        "firings_per_revolution": columns,
        "beam_origin_offset_m": round(n_x_mm / 1000.0, 12),
        "channels": {"elevation_deg": plain_floats(alt), "azimuth_offset_deg": plain_floats(-az)},
        "range_reference": "lidar_origin",
    }
    mapping = compose_mapping(base, pattern, path)
    window_note = (
        [f"column_window: [{lo}, {hi}], the full revolution."]
        if full
        else [
            f"column_window: [{lo}, {hi}] of {columns} columns: the unit reports only those",
            "measurement_ids. The spinning pattern has no azimuth window: all columns are",
            "simulated; keep firings whose (firing mod columns) lies in the window.",
        ]
    )
    bias = n_eucl_mm - n_x_mm
    lines = [
        f"Read with {reader}; layout {f['layout']}. Unit: prod_line {f['prod_line']}, prod_pn",
        f"{f['prod_pn']}, prod_sn {f['prod_sn']}, firmware {f['fw']}, lidar_mode "
        f"{f['lidar_mode']}.",
        "From the file:",
        f"  rotation_hz {f['fps']:g}, firings_per_revolution {columns}: lidar_mode / "
        "columns_per_frame",
        f"  channels.elevation_deg[c] = beam_altitude_angles[c] (row c, {rows} rows)",
        "  channels.azimuth_offset_deg[c] = -beam_azimuth_angles[c]",
        f"  beam_origin_offset_m {n_x_mm / 1000.0:g} = beam_to_lidar_transform[0, 3] "
        "(lidar_origin_to_beam_origin_mm)",
        f"  rotation clockwise, start_azimuth_deg {phi_deg:g}: lidar_to_sensor_transform's "
        "rotation about z",
        "Derivation (ouster-sdk 1.0.1 ouster_core/src/xyzlut.cpp, impl::make_xyz_lut): column",
        "j = measurement_id = firing, encoder angle 2 pi (1 - j / W); beam angle = encoder -",
        "beam_azimuth_angles; beam origin n along the encoder angle; the lidar frame turned by",
        "lidar_to_sensor_transform about z gives head azimuth start - 360 j / W (clockwise).",
        "range_reference: lidar_origin: Ouster's RANGE counts from the lidar origin on the",
        "axis (xyz = beam origin + (RANGE - n) direction), n more than from the beam's exit.",
        "NOT modelled by the spinning pattern: the translation of lidar_to_sensor_transform",
        f"(+ beam_to_lidar z): ({lift_mm[0]:g}, {lift_mm[1]:g}, {lift_mm[2]:g}) mm in the "
        "sensor frame. Add it to the",
        "survey pose (the sensor frame's origin is that far from this model's origin).",
    ]
    if bias != 0.0:
        lines.append(
            f"NOT modelled: beam_to_lidar z {n_z_mm:g} mm: Ouster's RANGE exceeds this "
            f"model's range_m by {bias:g} mm (|(n_x, n_z)| - n_x)."
        )
    lines += window_note
    lines.append(f"Radiometry, range limits, noise, intensity: {base_label}.")
    if preset is None and base_name != unit:
        lines.append(
            f"No preset named {unit}: {base_name} is the nearest Ouster preset (product line, "
            "then channel count); give --preset to choose another."
        )
    osf = path.suffix.lower() == ".osf"
    role = (
        "Ouster OSF recording, hash of the metadata JSON inside it (geometry, spin, columns)"
        if osf
        else "Ouster metadata (geometry, spin, columns)"
    )
    header = header_comment(
        f"{name}: Ouster {f['prod_line']} from its own sensor metadata.",
        [(path, text, role)],
        lines,
    )
    return mapping, header
