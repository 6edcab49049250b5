"""A unit's own calibration becomes a scanner YAML (``lidar-sim scanners import``).

Three vendor formats are read, each detected from the file's content and extension:

* **Ouster sensor metadata JSON**, the flat layout of firmware 2.x and the nested
  ``sensor_info`` / ``beam_intrinsics`` / ``lidar_data_format`` / ``config_params`` /
  ``lidar_intrinsics`` layout. ouster-sdk parses it when installed
  (``ouster.sdk.core.SensorInfo``); a plain JSON reading of the same keys is the fallback.
  An **Ouster OSF recording** carries the same metadata inside it: ouster-sdk (needed for
  OSF) gives it as JSON (``SensorInfo.to_json_string``), read as above. A unit without a
  preset of its own name (an OS0, say) takes the nearest Ouster preset's radiometry: the
  nearest product line, then the nearest channel count (the header says which).
* **Velodyne calibration YAML** in the format of ros-drivers/velodyne's
  ``velodyne_pointcloud`` (``lasers:`` list, ``num_lasers``, ``distance_resolution``).
* **Hesai angle correction CSV** (``Laser id,Elevation,Azimuth`` or
  ``Channel,Elevation,Azimuth``, degrees), optionally with a **firetime CSV**
  (``Channel,fire time(us)``).

The geometry (elevations, azimuth offsets, firing times, spin rate and columns for Ouster)
comes from the file; the radiometry (divergence, pulse length, detection, noise, intensity,
range limits) and what the file does not give come from a base preset. The returned header
comment names the source files and which numbers came from which.

Sign conventions, derived from the vendors' own point formulas (sources cited where used;
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
* Velodyne: ros-drivers/velodyne @ 29abd0e1361cb7f5eda451d2b51c35eeca45e0d5,
  ``velodyne_pointcloud/src/lib/rawdata.cc`` (``RawData::unpack``): the driver forms the
  angle ``theta - rot_correction`` of the clockwise-counting block rotation ``theta``, puts
  ``x_v = d sin(.)``, ``y_v = d cos(.)`` and then the ROS frame ``x = y_v, y = -x_v``, so
  ``atan2(y, x) = rot_correction - theta``: clockwise, ``azimuth_offset_deg =
  +degrees(rot_correction)``; ``elevation = vert_correction``. ``calibration.cc``
  (``Calibration::read``) numbers the rings by rising ``vert_correction`` (ring 0 lowest).
* Hesai: tier4/nebula @ 606ac41f1f136333915f0114736f2f828e9d2789,
  ``.../decoders/angle_corrector_calibration_based.hpp`` (azimuth = block azimuth + the
  CSV's Azimuth) and ``.../decoders/hesai_decoder.hpp`` (``x = d cos(el) sin(az)``, ``y = d
  cos(el) cos(az)``: x right, y forward), so the counter-clockwise azimuth from forward is
  ``-az``: clockwise, ``azimuth_offset_deg = -Azimuth``; ``nebula_hesai_common/
  hesai_common.hpp`` reads laser id ``k`` (1-based) into channel ``k - 1``.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import math
import os
import re
import struct
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray
from pydantic import ValidationError

from ..errors import ConfigError
from .base import raise_validation
from .load import load_yaml, scanner_presets
from .scanner import ScannerConfig

__all__ = ["import_scanner", "osf_size_problem", "write_scanner_yaml"]

#: Base preset of a Velodyne calibration by ``num_lasers`` (32 lasers: see
#: :func:`_velodyne_base`).
_VELODYNE_BASE = {16: "vlp-16", 64: "hdl-64e"}
#: Base preset of a Hesai angle file by channel count.
_HESAI_BASE = {32: "pandar-xt32", 64: "pandar64", 128: "pandar128"}
#: The keys of a pattern that an import replaces; the base preset gives everything else.
_PATTERN_KEYS = ("name", "description", "pattern", "rotation_hz", "rotation",
                 "start_azimuth_deg", "firings_per_revolution", "channels",
                 "beam_origin_offset_m")  # fmt: skip

#: The file identifier of an OSF (v2) header, a size-prefixed flatbuffer.
_OSF_IDENTIFIER = b"OSF$"
#: The header table's ``file_length`` field (the fourth: version, status, metadata_offset,
#: file_length; ouster-sdk ``ouster_osf/fb/header.fbs``).
_OSF_FILE_LENGTH_FIELD = 3


# --------------------------------------------------------------------------- public API


def import_scanner(files: list[Path], preset: str | None = None) -> tuple[dict[str, Any], str]:
    """Read a unit's calibration file(s) into a scanner mapping.

    Parameters
    ----------
    files : list of Path
        One Ouster metadata JSON or OSF recording, one Velodyne calibration YAML, or a
        Hesai angle correction CSV with an optional firetime CSV (either order).
    preset : str, optional
        Base preset (name, or path of a scanner YAML) for the radiometry and what the
        file does not give; by default chosen from the unit (Ouster product line,
        Velodyne ``num_lasers``, Hesai channel count).

    Returns
    -------
    mapping : dict
        A scanner mapping that :class:`~simulator.config.ScannerConfig` validates
        (plain Python types only, ready for YAML).
    header : str
        A YAML comment block (every line starts with ``#``) naming the source file(s)
        and which numbers came from where.

    Raises
    ------
    ConfigError
        If a file cannot be read, its kind is unknown, or a value is missing, of the
        wrong type or inconsistent.
    """
    paths = [Path(f) for f in files]
    if not 1 <= len(paths) <= 2:
        raise ConfigError("scanners import", "", f"expected 1 or 2 files, got {len(paths)}")
    texts = [_read_text(p) for p in paths]
    kinds = [_detect_kind(p, t) for p, t in zip(paths, texts, strict=True)]
    by_kind = dict(zip(kinds, zip(paths, texts, strict=True), strict=True))
    if len(paths) == 2 and sorted(kinds) != ["hesai_angles", "hesai_firetime"]:
        raise ConfigError(
            paths[1],
            "",
            f"cannot combine a {kinds[0]} file with a {kinds[1]} file; the only pair is "
            "a Hesai angle correction CSV and its firetime CSV",
        )
    if kinds[0] == "ouster_json":
        return _import_ouster(paths[0], texts[0], preset)
    if kinds[0] == "velodyne_yaml":
        return _import_velodyne(paths[0], texts[0], preset)
    if "hesai_angles" not in by_kind:
        raise ConfigError(
            paths[0], "", "a Hesai firetime CSV needs its angle correction CSV beside it"
        )
    return _import_hesai(by_kind["hesai_angles"], by_kind.get("hesai_firetime"), preset)


def write_scanner_yaml(mapping: dict[str, Any], header: str, path: Path) -> Path:
    """Write a scanner mapping as YAML, atomically (a temporary file, then a rename).

    Parameters
    ----------
    mapping : dict
        As :func:`import_scanner` returns it.
    header : str
        Comment lines written before the mapping.
    path : Path
        The output file; its folder must exist.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    body = yaml.dump(mapping, Dumper=_FlowListDumper, sort_keys=False, width=100)
    text = header.rstrip("\n") + "\n" + body if header else body
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class _FlowListDumper(yaml.SafeDumper):
    """Safe dumper writing lists of scalars on one (wrapped) line."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(not isinstance(v, (list, dict)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_FlowListDumper.add_representer(list, _represent_list)


# --------------------------------------------------------------------------- file kinds


def _read_text(path: Path) -> str:
    if path.suffix.lower() == ".osf":
        return _osf_metadata_json(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read as UTF-8 text ({exc})") from None


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


def _osf_metadata_json(path: Path) -> str:
    """The sensor metadata inside an Ouster OSF recording (its first sensor's), as the JSON
    text ouster-sdk writes for it."""
    if not path.is_file():
        raise ConfigError(path, "", "file not found")
    problem = osf_size_problem(path)
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


def _csv_header(text: str) -> list[str]:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return [h.strip().lower() for h in first.split(",")]


def _detect_kind(path: Path, text: str) -> str:
    """``ouster_json``, ``velodyne_yaml``, ``hesai_angles`` or ``hesai_firetime``."""
    ext = path.suffix.lower()
    stripped = text.lstrip()
    if ext == ".json" or stripped.startswith("{"):
        return "ouster_json"
    if ext == ".csv" or (stripped and "," in stripped.splitlines()[0] and ":" not in stripped):
        head = _csv_header(text)
        if head[:1] in (["laser id"], ["channel"]) and len(head) >= 2:
            if head[1:3] == ["elevation", "azimuth"]:
                return "hesai_angles"
            if head[1].startswith("fire time") or head[1].startswith("firetime"):
                return "hesai_firetime"
        raise ConfigError(
            path,
            "header",
            f"unknown CSV header {','.join(head)!r}; expected a Hesai angle correction file "
            "('Laser id,Elevation,Azimuth' or 'Channel,Elevation,Azimuth') or a Hesai "
            "firetime file ('Channel,fire time(us)')",
        )
    if ext in (".yaml", ".yml") or stripped.startswith(("lasers", "num_lasers", "%YAML", "---")):
        return "velodyne_yaml"
    raise ConfigError(
        path,
        "",
        "unknown file kind; expected an Ouster metadata .json, a Velodyne calibration .yaml "
        "or a Hesai angle correction / firetime .csv",
    )


# --------------------------------------------------------------------------- shared helpers


def _number(source: Path, key: str, value: Any) -> float:
    """A finite real number (not a bool), or a :class:`ConfigError` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(source, key, f"expected a finite number, got {value!r}")
    return float(value)


def _numbers(source: Path, key: str, value: Any, length: int | None = None) -> NDArray:
    """A list of finite numbers as a float64 array, of ``length`` entries if given."""
    if not isinstance(value, list) or not value:
        raise ConfigError(source, key, f"expected a non-empty list of numbers, got {value!r:.60}")
    out = np.array([_number(source, f"{key}[{i}]", v) for i, v in enumerate(value)])
    if length is not None and len(out) != length:
        raise ConfigError(source, key, f"has {len(out)} entries; expected {length}")
    return out


def _plain(values: NDArray, decimals: int | None = None) -> list[float]:
    """Python floats (no ``-0.0``), optionally rounded, for YAML."""
    arr = np.asarray(values, dtype=np.float64)
    if decimals is not None:
        arr = np.round(arr, decimals)
    return [float(v) + 0.0 for v in arr]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _base_preset(preset: str, source: str | Path) -> tuple[dict[str, Any], str]:
    """The base preset's raw mapping and how to name it."""
    presets = scanner_presets()
    if preset in presets:
        data, label = load_yaml(presets[preset]), f"preset {preset}"
    elif preset.endswith((".yaml", ".yml")) and Path(preset).is_file():
        data, label = load_yaml(preset), f"scanner file {Path(preset).name}"
    else:
        raise ConfigError(
            source,
            "--preset",
            f"unknown base preset {preset!r}; choose one of {', '.join(presets)} or a scanner "
            "YAML path",
        )
    if data.get("pattern", "spinning") != "spinning":
        raise ConfigError(source, "--preset", f"{label} is not a spinning scanner")
    return data, label


def _base_spin(
    base: dict[str, Any],
    name: str,
    description: str,
    channels: dict[str, Any],
    beam_origin_offset_m: float,
) -> dict[str, Any]:
    """The spinning pattern of a unit whose file gives its channels and the base preset its
    spin (rate, firings a revolution, start azimuth; clockwise, as Velodyne and Hesai turn)."""
    return {
        "name": name,
        "description": description,
        "rotation_hz": base.get("rotation_hz"),
        "rotation": "clockwise",
        "start_azimuth_deg": base.get("start_azimuth_deg", 0.0),
        "firings_per_revolution": base.get("firings_per_revolution"),
        "beam_origin_offset_m": beam_origin_offset_m,
        "channels": channels,
    }


def _compose(base: dict[str, Any], pattern: dict[str, Any], source: Path) -> dict[str, Any]:
    """The imported pattern keys, then the base preset's other keys; validated."""
    out = {"pattern": "spinning", **pattern}
    out = {k: out[k] for k in (*_PATTERN_KEYS, *pattern) if k in out}
    out.update({k: copy.deepcopy(v) for k, v in base.items() if k not in out})
    try:
        ScannerConfig.model_validate(out)
    except ValidationError as err:
        raise_validation(source, err)
    return out


def _header(title: str, sources: list[tuple[Path, str, str]], lines: list[str]) -> str:
    """A comment block: title, the source files (name, sha256 prefix, role), the notes."""
    out = [f"# {title}", "#", "# Imported by `lidar-sim scanners import` from:"]
    for path, text, role in sources:
        out.append(f"#   {path.name} (sha256 {_digest(text)}...): {role}")
    out.append("#")
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
        wrapped = textwrap.wrap(line, width=96, subsequent_indent=indent) or [""]
        out.extend(f"# {part}".rstrip() for part in wrapped)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- Ouster


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
    alt = _numbers(path, f"{prefix}beam_altitude_angles", beams["beam_altitude_angles"])
    az = _numbers(path, f"{prefix}beam_azimuth_angles", beams["beam_azimuth_angles"], len(alt))
    if "beam_to_lidar_transform" in beams:
        b2l = _numbers(path, f"{prefix}beam_to_lidar_transform",
                       beams["beam_to_lidar_transform"], 16).reshape(4, 4)  # fmt: skip
    else:
        key = f"{prefix}lidar_origin_to_beam_origin_mm"
        n_mm = _number(path, key, beams.get("lidar_origin_to_beam_origin_mm"))
        b2l = np.eye(4)
        b2l[0, 3] = n_mm
    intr = section("lidar_intrinsics")
    lkey = ("lidar_intrinsics." if nested else "") + "lidar_to_sensor_transform"
    if "lidar_to_sensor_transform" not in intr:
        raise ConfigError(path, lkey, "missing (the 4 x 4 lidar-to-sensor transform, mm)")
    l2s = _numbers(path, lkey, intr["lidar_to_sensor_transform"], 16).reshape(4, 4)
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
    window_arr = _numbers(path, f"{fkey}.column_window", window, 2).astype(int)
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


def _import_ouster(path: Path, text: str, preset: str | None) -> tuple[dict[str, Any], str]:
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
    name = f"{unit}-{_slug(f['prod_sn'])}" if f["prod_sn"] else f"{unit}-{_slug(path.stem)}"
    base_name = preset or _ouster_base(unit, path)
    base, base_label = _base_preset(base_name, path)
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
        "channels": {"elevation_deg": _plain(alt), "azimuth_offset_deg": _plain(-az)},
        "range_reference": "lidar_origin",
    }
    mapping = _compose(base, pattern, path)
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
    header = _header(
        f"{name}: Ouster {f['prod_line']} from its own sensor metadata.",
        [(path, text, role)],
        lines,
    )
    return mapping, header


# --------------------------------------------------------------------------- Velodyne


def _velodyne_base(num_lasers: int, elevation_deg: NDArray, path: Path) -> str:
    if num_lasers == 32:
        # HDL-32E reaches -30.67 deg, VLP-32C -25 deg (the two presets).
        return "hdl-32e" if elevation_deg.min() < -28.0 else "vlp-32c"
    if num_lasers not in _VELODYNE_BASE:
        raise ConfigError(
            path, "num_lasers", f"no base preset for {num_lasers} lasers; give --preset"
        )
    return _VELODYNE_BASE[num_lasers]


def _import_velodyne(path: Path, text: str, preset: str | None) -> tuple[dict[str, Any], str]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(path, "", f"not valid YAML: {exc}") from None
    if not isinstance(doc, dict) or "lasers" not in doc:
        raise ConfigError(
            path, "lasers", "missing: not a Velodyne calibration (expected a lasers: list)"
        )
    lasers = doc["lasers"]
    if not isinstance(lasers, list) or not lasers:
        raise ConfigError(path, "lasers", "expected a non-empty list of laser mappings")
    n = len(lasers)
    if "num_lasers" in doc:
        given = doc["num_lasers"]
        if isinstance(given, bool) or not isinstance(given, int):
            raise ConfigError(path, "num_lasers", f"expected an integer, got {given!r}")
        if given != n:
            raise ConfigError(path, "num_lasers", f"is {given} but lasers has {n} entries")
    keys = ("vert_correction", "rot_correction", "vert_offset_correction",
            "horiz_offset_correction", "dist_correction")  # fmt: skip
    table = np.zeros((n, len(keys)))
    ids = np.full(n, -1)
    for i, laser in enumerate(lasers):  # one row per laser
        if not isinstance(laser, dict):
            raise ConfigError(path, f"lasers[{i}]", "expected a mapping")
        lid = laser.get("laser_id")
        if isinstance(lid, bool) or not isinstance(lid, int) or not 0 <= lid < n:
            raise ConfigError(path, f"lasers[{i}].laser_id", f"expected an integer 0-{n - 1}")
        ids[i] = lid
        for k, key in enumerate(keys):
            if key in laser or k < 2:
                table[i, k] = _number(path, f"lasers[{i}].{key}", laser.get(key))
    if len(set(ids.tolist())) != n:
        raise ConfigError(path, "lasers", "laser_id values repeat; expected each of 0-{n-1} once")
    table[ids] = table.copy()  # laser-id order
    vert, rot, voff, hoff, dist = table.T
    if np.abs(vert).max() > math.pi / 2:
        raise ConfigError(path, "lasers", "vert_correction beyond pi/2: expected radians")
    elevation = np.round(np.degrees(vert), 6)
    base_name = preset or _velodyne_base(n, elevation, path)
    base, base_label = _base_preset(base_name, path)
    base_ch = base.get("channels") or {}
    channels: dict[str, Any] = {
        "elevation_deg": _plain(elevation),
        "azimuth_offset_deg": _plain(np.degrees(rot), 6),
    }
    firing = base_ch.get("firing_offset_us")
    timing = "no firing_offset_us (base has a different channel count): all fire together"
    if firing is not None and len(firing) == n:
        channels["firing_offset_us"] = firing
        timing = f"firing_offset_us: {base_label} (by laser id)"
    resolution = doc.get("distance_resolution")
    ring = np.argsort(np.argsort(vert, kind="stable"), kind="stable")
    name = f"{base.get('name', base_name)}-{_slug(path.stem)}"
    pattern = _base_spin(
        base,
        name,
        f"Velodyne ({base_label}) with the calibration of {path.name}, {n} lasers",
        channels,
        beam_origin_offset_m=0.0,
    )
    mapping = _compose(base, pattern, path)
    if resolution is not None:
        mapping["range_resolution_m"] = _number(path, "distance_resolution", resolution)
    lines = [
        "From the file (channel c = laser_id c, the packet / firing order):",
        "  channels.elevation_deg = degrees(vert_correction), rounded to 1e-6 deg",
        "  channels.azimuth_offset_deg = +degrees(rot_correction), rounded to 1e-6 deg (sign:",
        "    velodyne_pointcloud rawdata.cc gives atan2(y, x) = rot_correction - theta, theta",
        "    the clockwise block rotation)",
    ]
    if resolution is not None:
        lines.append(f"  range_resolution_m {resolution:g} = distance_resolution")
    lines += [
        "The driver's ring (calibration.cc: rank of vert_correction, lowest first) of laser 0..:",
        f"  {ring.tolist()}",
        "NOT modelled (the pattern has one beam origin on the axis): largest |value| of",
        f"  horiz_offset_correction {np.abs(hoff).max():g} m, vert_offset_correction "
        f"{np.abs(voff).max():g} m, dist_correction {np.abs(dist).max():g} m.",
        f"rotation_hz, firings_per_revolution, start_azimuth_deg: {base_label}; {timing}.",
        f"Radiometry, range limits, noise, intensity: {base_label}.",
    ]
    header = _header(
        f"{name}: a Velodyne calibration on {base_label}.",
        [(path, text, "Velodyne calibration (vert_correction, rot_correction)")],
        lines,
    )
    return mapping, header


# --------------------------------------------------------------------------- Hesai


def _csv_rows(path: Path, text: str, columns: int) -> tuple[NDArray, NDArray]:
    """Rows of a Hesai CSV after its header: (ids (R,) int, values (R, columns - 1))."""
    rows = [r for r in csv.reader(io.StringIO(text.lstrip())) if any(c.strip() for c in r)][1:]
    if not rows:
        raise ConfigError(path, "", "no rows after the header")
    ids = np.zeros(len(rows), dtype=np.int64)
    values = np.zeros((len(rows), columns - 1))
    for i, row in enumerate(rows):  # one row per channel
        where = f"row {i + 2}"
        if len(row) < columns:
            raise ConfigError(path, where, f"has {len(row)} fields; expected {columns}")
        try:
            ids[i] = int(row[0])
            values[i] = [float(v) for v in row[1:columns]]
        except ValueError:
            raise ConfigError(path, where, f"expected numbers, got {','.join(row)!r}") from None
        if not np.isfinite(values[i]).all():
            raise ConfigError(path, where, "values must be finite")
    if sorted(ids.tolist()) != list(range(1, len(rows) + 1)):
        raise ConfigError(
            path, "Laser id", f"expected the ids 1-{len(rows)} once each, got {ids.tolist()}"
        )
    order = np.argsort(ids)
    return ids[order], values[order]


def _import_hesai(
    angles: tuple[Path, str], firetime: tuple[Path, str] | None, preset: str | None
) -> tuple[dict[str, Any], str]:
    path, text = angles
    _, ang = _csv_rows(path, text, 3)
    n = len(ang)
    elevation, azimuth = ang[:, 0], ang[:, 1]
    if np.abs(elevation).max() > 90.0:
        raise ConfigError(path, "Elevation", "beyond +-90: expected degrees")
    if preset is None and n not in _HESAI_BASE:
        raise ConfigError(path, "Laser id", f"no base preset for {n} channels; give --preset")
    base_name = preset or _HESAI_BASE[n]
    base, base_label = _base_preset(base_name, path)
    base_firing = (base.get("channels") or {}).get("firing_offset_us")
    channels: dict[str, Any] = {
        "elevation_deg": _plain(elevation),
        "azimuth_offset_deg": _plain(-azimuth),
    }
    sources = [(path, text, "Hesai angle correction (Elevation, Azimuth)")]
    if firetime is not None:
        fpath, ftext = firetime
        _, fire = _csv_rows(fpath, ftext, 2)
        if len(fire) != n:
            raise ConfigError(
                fpath, "Channel", f"has {len(fire)} channels; the angle file {path.name} has {n}"
            )
        fire_us = fire[:, 0]
        # Only differences of the file's times are used: its zero is model-specific (block
        # start or end). The earliest channel fires when the base preset's earliest does.
        anchor = float(min(base_firing)) if base_firing and len(base_firing) == n else 0.0
        channels["firing_offset_us"] = _plain(fire_us - fire_us.min() + anchor, 6)
        timing = (
            f"firing_offset_us = fire time - min(fire time) + {anchor:g} us ({base_label}'s "
            "earliest channel)"
        )
        sources.append((fpath, ftext, "Hesai firetime (fire time, us)"))
    elif base_firing is not None and len(base_firing) == n:
        channels["firing_offset_us"] = base_firing
        timing = f"firing_offset_us: {base_label} (no firetime file given)"
    else:
        timing = "no firing_offset_us: no firetime file, and the base has another channel count"
    name = f"{base.get('name', base_name)}-{_slug(path.stem)}"
    pattern = _base_spin(
        base,
        name,
        f"Hesai ({base_label}) with the angle correction of {path.name}, {n} ch",
        channels,
        beam_origin_offset_m=base.get("beam_origin_offset_m", 0.0),
    )
    mapping = _compose(base, pattern, path)
    lines = [
        "From the angle file (channel c = Laser id c + 1):",
        "  channels.elevation_deg = Elevation, degrees as written",
        "  channels.azimuth_offset_deg = -Azimuth (nebula: azimuth = block azimuth + Azimuth,",
        "    x = d cos(el) sin(az), y = d cos(el) cos(az), x right, y forward: clockwise)",
        f"Timing: {timing}.",
        f"rotation_hz, firings_per_revolution, start_azimuth_deg, beam_origin_offset_m: "
        f"{base_label}.",
        f"Radiometry, range limits, noise, intensity: {base_label}.",
    ]
    header = _header(f"{name}: a Hesai calibration on {base_label}.", sources, lines)
    return mapping, header
