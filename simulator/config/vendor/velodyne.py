"""Velodyne: a calibration YAML in the format of ros-drivers/velodyne's
``velodyne_pointcloud`` (``lasers:`` list, ``num_lasers``, ``distance_resolution``) as a
scanner mapping on a base preset.

The sign convention, derived from the vendor's own point formula (sources cited where used;
this simulator's sensor frame is x forward, y left, z up, azimuth counter-clockwise from +x
seen from above, see :mod:`simulator.sensor.scanner`):

* Velodyne: ros-drivers/velodyne @ 29abd0e1361cb7f5eda451d2b51c35eeca45e0d5,
  ``velodyne_pointcloud/src/lib/rawdata.cc`` (``RawData::unpack``): the driver forms the
  angle ``theta - rot_correction`` of the clockwise-counting block rotation ``theta``, puts
  ``x_v = d sin(.)``, ``y_v = d cos(.)`` and then the ROS frame ``x = y_v, y = -x_v``, so
  ``atan2(y, x) = rot_correction - theta``: clockwise, ``azimuth_offset_deg =
  +degrees(rot_correction)``; ``elevation = vert_correction``. ``calibration.cc``
  (``Calibration::read``) numbers the rings by rising ``vert_correction`` (ring 0 lowest).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from ...errors import ConfigError
from .common import (
    base_preset,
    base_spin,
    compose_mapping,
    header_comment,
    number,
    plain_floats,
    slug,
)

__all__ = ["import_velodyne"]

#: Base preset of a Velodyne calibration by ``num_lasers`` (32 lasers: see
#: :func:`_velodyne_base`).
_VELODYNE_BASE = {16: "vlp-16", 64: "hdl-64e"}


def _velodyne_base(num_lasers: int, elevation_deg: NDArray, path: Path) -> str:
    if num_lasers == 32:
        # HDL-32E reaches -30.67 deg, VLP-32C -25 deg (the two presets).
        return "hdl-32e" if elevation_deg.min() < -28.0 else "vlp-32c"
    if num_lasers not in _VELODYNE_BASE:
        raise ConfigError(
            path, "num_lasers", f"no base preset for {num_lasers} lasers; give --preset"
        )
    return _VELODYNE_BASE[num_lasers]


def import_velodyne(path: Path, text: str, preset: str | None) -> tuple[dict[str, Any], str]:
    """A Velodyne calibration YAML as a scanner mapping on a base preset
    (:func:`~simulator.config.vendor.import_scanner` reads the files and picks the reader).

    Parameters
    ----------
    path : Path
        The calibration YAML (named in messages and the header).
    text : str
        Its text.
    preset : str or None
        Base preset (a name, or a scanner YAML's path) of the radiometry and what the file
        does not give; None: chosen from ``num_lasers`` (and, for 32, the lowest elevation).

    Returns
    -------
    mapping : dict
        A scanner mapping that :class:`~simulator.config.ScannerConfig` validates.
    header : str
        The YAML comment block naming the sources and which numbers came from where.
    """
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
                table[i, k] = number(path, f"lasers[{i}].{key}", laser.get(key))
    if len(set(ids.tolist())) != n:
        raise ConfigError(path, "lasers", "laser_id values repeat; expected each of 0-{n-1} once")
    table[ids] = table.copy()  # laser-id order
    vert, rot, voff, hoff, dist = table.T
    if np.abs(vert).max() > math.pi / 2:
        raise ConfigError(path, "lasers", "vert_correction beyond pi/2: expected radians")
    elevation = np.round(np.degrees(vert), 6)
    base_name = preset or _velodyne_base(n, elevation, path)
    base, base_label = base_preset(base_name, path)
    base_ch = base.get("channels") or {}
    channels: dict[str, Any] = {
        "elevation_deg": plain_floats(elevation),
        "azimuth_offset_deg": plain_floats(np.degrees(rot), 6),
    }
    firing = base_ch.get("firing_offset_us")
    timing = "no firing_offset_us (base has a different channel count): all fire together"
    if firing is not None and len(firing) == n:
        channels["firing_offset_us"] = firing
        timing = f"firing_offset_us: {base_label} (by laser id)"
    resolution = doc.get("distance_resolution")
    ring = np.argsort(np.argsort(vert, kind="stable"), kind="stable")
    name = f"{base.get('name', base_name)}-{slug(path.stem)}"
    pattern = base_spin(
        base,
        name,
        f"Velodyne ({base_label}) with the calibration of {path.name}, {n} lasers",
        channels,
        beam_origin_offset_m=0.0,
    )
    mapping = compose_mapping(base, pattern, path)
    if resolution is not None:
        mapping["range_resolution_m"] = number(path, "distance_resolution", resolution)
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
    header = header_comment(
        f"{name}: a Velodyne calibration on {base_label}.",
        [(path, text, "Velodyne calibration (vert_correction, rot_correction)")],
        lines,
    )
    return mapping, header
