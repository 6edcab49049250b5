"""Hesai: an angle correction CSV (``Laser id,Elevation,Azimuth`` or
``Channel,Elevation,Azimuth``, degrees), optionally with a firetime CSV
(``Channel,fire time(us)``), as a scanner mapping on a base preset.

The sign convention, derived from the vendor's own point formula (sources cited where used;
this simulator's sensor frame is x forward, y left, z up, azimuth counter-clockwise from +x
seen from above, see :mod:`simulator.sensor.scanner`):

* Hesai: tier4/nebula @ 606ac41f1f136333915f0114736f2f828e9d2789,
  ``.../decoders/angle_corrector_calibration_based.hpp`` (azimuth = block azimuth + the
  CSV's Azimuth) and ``.../decoders/hesai_decoder.hpp`` (``x = d cos(el) sin(az)``, ``y = d
  cos(el) cos(az)``: x right, y forward), so the counter-clockwise azimuth from forward is
  ``-az``: clockwise, ``azimuth_offset_deg = -Azimuth``; ``nebula_hesai_common/
  hesai_common.hpp`` reads laser id ``k`` (1-based) into channel ``k - 1``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ...errors import ConfigError
from .common import base_preset, base_spin, compose_mapping, header_comment, plain_floats, slug

__all__ = ["import_hesai"]

#: Base preset of a Hesai angle file by channel count.
_HESAI_BASE = {32: "pandar-xt32", 64: "pandar64", 128: "pandar128"}


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


def import_hesai(
    angles: tuple[Path, str], firetime: tuple[Path, str] | None, preset: str | None
) -> tuple[dict[str, Any], str]:
    """A Hesai angle correction CSV (and firetime CSV) as a scanner mapping on a base preset
    (:func:`~simulator.config.vendor.import_scanner` reads the files and picks the reader).

    Parameters
    ----------
    angles : (Path, str)
        The angle correction CSV and its text.
    firetime : (Path, str) or None
        The firetime CSV and its text, if given.
    preset : str or None
        Base preset (a name, or a scanner YAML's path) of the radiometry and what the file
        does not give; None: chosen from the channel count.

    Returns
    -------
    mapping : dict
        A scanner mapping that :class:`~simulator.config.ScannerConfig` validates.
    header : str
        The YAML comment block naming the sources and which numbers came from where.
    """
    path, text = angles
    _, ang = _csv_rows(path, text, 3)
    n = len(ang)
    elevation, azimuth = ang[:, 0], ang[:, 1]
    if np.abs(elevation).max() > 90.0:
        raise ConfigError(path, "Elevation", "beyond +-90: expected degrees")
    if preset is None and n not in _HESAI_BASE:
        raise ConfigError(path, "Laser id", f"no base preset for {n} channels; give --preset")
    base_name = preset or _HESAI_BASE[n]
    base, base_label = base_preset(base_name, path)
    base_firing = (base.get("channels") or {}).get("firing_offset_us")
    channels: dict[str, Any] = {
        "elevation_deg": plain_floats(elevation),
        "azimuth_offset_deg": plain_floats(-azimuth),
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
        channels["firing_offset_us"] = plain_floats(fire_us - fire_us.min() + anchor, 6)
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
    name = f"{base.get('name', base_name)}-{slug(path.stem)}"
    pattern = base_spin(
        base,
        name,
        f"Hesai ({base_label}) with the angle correction of {path.name}, {n} ch",
        channels,
        beam_origin_offset_m=base.get("beam_origin_offset_m", 0.0),
    )
    mapping = compose_mapping(base, pattern, path)
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
    header = header_comment(f"{name}: a Hesai calibration on {base_label}.", sources, lines)
    return mapping, header
