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

The readers, one module a vendor, each with the sign convention it derives from the
vendor's own point formulas: :mod:`~simulator.config.vendor.ouster`,
:mod:`~simulator.config.vendor.velodyne`, :mod:`~simulator.config.vendor.hesai`; what they
share is :mod:`~simulator.config.vendor.common`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ...errors import ConfigError
from ..load import load_scanner
from ..scanner import ScannerConfig
from .hesai import import_hesai
from .ouster import import_ouster, osf_metadata_json, osf_size_problem
from .velodyne import import_velodyne

__all__ = ["import_scanner", "osf_size_problem", "write_imported_scanner", "write_scanner_yaml"]


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
        return import_ouster(paths[0], texts[0], preset)
    if kinds[0] == "velodyne_yaml":
        return import_velodyne(paths[0], texts[0], preset)
    if "hesai_angles" not in by_kind:
        raise ConfigError(
            paths[0], "", "a Hesai firetime CSV needs its angle correction CSV beside it"
        )
    return import_hesai(by_kind["hesai_angles"], by_kind.get("hesai_firetime"), preset)


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


def write_imported_scanner(
    files: list[Path], output: Path, preset: str | None = None
) -> ScannerConfig:
    """A unit's calibration file(s) as a scanner YAML (``lidar-sim scanners import``): read
    (:func:`import_scanner`), written with its header (:func:`write_scanner_yaml`) and
    loaded back as any scanner file is.

    Parameters
    ----------
    files : list of Path
        As :func:`import_scanner` takes them.
    output : Path
        The scanner YAML to write; its folder must exist.
    preset : str, optional
        The base preset of the radiometry (see :func:`import_scanner`).

    Returns
    -------
    ScannerConfig
        The scanner ``output`` now holds.

    Raises
    ------
    ConfigError
        As :func:`import_scanner`, before anything is written.
    """
    return load_scanner(write_scanner_yaml(*import_scanner(files, preset), Path(output)))


class _FlowListDumper(yaml.SafeDumper):
    """Safe dumper writing lists of scalars on one (wrapped) line."""


def _represent_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flow = all(not isinstance(v, (list, dict)) for v in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_FlowListDumper.add_representer(list, _represent_list)


def _read_text(path: Path) -> str:
    if path.suffix.lower() == ".osf":
        return osf_metadata_json(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read as UTF-8 text ({exc})") from None


def _csvheader_comment(text: str) -> list[str]:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return [h.strip().lower() for h in first.split(",")]


def _detect_kind(path: Path, text: str) -> str:
    """``ouster_json``, ``velodyne_yaml``, ``hesai_angles`` or ``hesai_firetime``."""
    ext = path.suffix.lower()
    stripped = text.lstrip()
    if ext == ".json" or stripped.startswith("{"):
        return "ouster_json"
    if ext == ".csv" or (stripped and "," in stripped.splitlines()[0] and ":" not in stripped):
        head = _csvheader_comment(text)
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
