"""What the vendor readers share: numbers checked as they are read, floats plain for YAML,
the base preset a unit's radiometry comes from, the imported pattern composed with it and
validated, and the header comment that names the sources."""

from __future__ import annotations

import copy
import hashlib
import math
import re
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import ValidationError

from ...errors import ConfigError
from ..base import raise_validation
from ..load import load_yaml, scanner_presets
from ..scanner import ScannerConfig

__all__ = [
    "PATTERN_KEYS",
    "base_preset",
    "base_spin",
    "compose_mapping",
    "digest",
    "header_comment",
    "number",
    "numbers",
    "plain_floats",
    "slug",
]

#: The keys of a pattern that an import replaces; the base preset gives everything else.
PATTERN_KEYS = ("name", "description", "pattern", "rotation_hz", "rotation",
                 "start_azimuth_deg", "firings_per_revolution", "channels",
                 "beam_origin_offset_m")  # fmt: skip


def number(source: Path, key: str, value: Any) -> float:
    """A finite real number (not a bool), or a :class:`ConfigError` naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(source, key, f"expected a finite number, got {value!r}")
    return float(value)


def numbers(source: Path, key: str, value: Any, length: int | None = None) -> NDArray:
    """A list of finite numbers as a float64 array, of ``length`` entries if given."""
    if not isinstance(value, list) or not value:
        raise ConfigError(source, key, f"expected a non-empty list of numbers, got {value!r:.60}")
    out = np.array([number(source, f"{key}[{i}]", v) for i, v in enumerate(value)])
    if length is not None and len(out) != length:
        raise ConfigError(source, key, f"has {len(out)} entries; expected {length}")
    return out


def plain_floats(values: NDArray, decimals: int | None = None) -> list[float]:
    """Python floats (no ``-0.0``), optionally rounded, for YAML."""
    arr = np.asarray(values, dtype=np.float64)
    if decimals is not None:
        arr = np.round(arr, decimals)
    return [float(v) + 0.0 for v in arr]


def slug(text: str) -> str:
    """``text`` lower-case, each run of other characters than ``a-z0-9`` one ``-``: a name's
    part (``OS1 SN 122`` -> ``os1-sn-122``)."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def digest(text: str) -> str:
    """The first 12 hex digits of the SHA-256 of ``text`` (UTF-8): a source file's stamp in
    the header."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def base_preset(preset: str, source: str | Path) -> tuple[dict[str, Any], str]:
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


def base_spin(
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


def compose_mapping(base: dict[str, Any], pattern: dict[str, Any], source: Path) -> dict[str, Any]:
    """The imported pattern keys, then the base preset's other keys; validated."""
    out = {"pattern": "spinning", **pattern}
    out = {k: out[k] for k in (*PATTERN_KEYS, *pattern) if k in out}
    out.update({k: copy.deepcopy(v) for k, v in base.items() if k not in out})
    try:
        ScannerConfig.model_validate(out)
    except ValidationError as err:
        raise_validation(source, err)
    return out


def header_comment(title: str, sources: list[tuple[Path, str, str]], lines: list[str]) -> str:
    """A comment block: title, the source files (name, sha256 prefix, role), the notes."""
    out = [f"# {title}", "#", "# Imported by `lidar-sim scanners import` from:"]
    for path, text, role in sources:
        out.append(f"#   {path.name} (sha256 {digest(text)}...): {role}")
    out.append("#")
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" ")) + 2)
        wrapped = textwrap.wrap(line, width=96, subsequent_indent=indent) or [""]
        out.extend(f"# {part}".rstrip() for part in wrapped)
    return "\n".join(out) + "\n"
