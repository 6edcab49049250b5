"""The point record of a chunk's returns, the numpy specification, and its LAS packing.

Each return's point lies at its measured range along its pulse's central ray; it is
reported in the output frame (the world, or a sensor frame given as poses), with the ring
and firing time the scan pattern gives its pulse id, and the label and instance of the
object that returned it. The numba kernels of the same names are in
:mod:`simulator.kernels.record`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..chunk import PulsePoses, Rays, world_rays
from ..pointcloud import PointCloud
from ..sensor.scanner import ScanPattern
from .hits import SceneTables
from .returns import Returns

__all__ = ["add_diagnostics", "frame_points", "pack_las", "record"]


def frame_points(
    points_m: NDArray[np.float64], pulse: NDArray[np.int64], frame: PulsePoses | None
) -> NDArray[np.float64]:
    """World points in the output frame.

    Parameters
    ----------
    points_m : (K, 3) float64
        World coordinates.
    pulse : (K,) int64
        Each point's pulse in the chunk (which row of a per-pulse pose applies).
    frame : PulsePoses or None
        World from the output frame: per pulse (the sensor at each firing) or one (a
        fixed sensor frame); ``None`` reports in the world.

    Returns
    -------
    (K, 3) float64
    """
    if frame is None:
        return points_m
    rot, pos = frame.rotation, frame.position_m
    if len(rot) == 1 and len(pos) == 1:
        return (points_m - pos[0]) @ rot[0]
    rot_k = rot[pulse] if len(rot) > 1 else np.broadcast_to(rot[0], (len(pulse), 3, 3))
    pos_k = pos[pulse] if len(pos) > 1 else pos[0]
    return np.einsum("nji,nj->ni", rot_k, points_m - pos_k)


def record(
    returns: Returns,
    rays: Rays,
    frame: PulsePoses | None,
    tables: SceneTables,
    pattern: ScanPattern,
) -> PointCloud:
    """The point record of a chunk's returns (the record's fields, no diagnostics).

    Parameters
    ----------
    returns : Returns
        What the chunk reports.
    rays : Rays
        The chunk's rays (``beams``, ``shift_m``, ``start``).
    frame : PulsePoses or None
        The output frame (see :func:`frame_points`).
    tables : SceneTables
        Labels and instances by object.
    pattern : ScanPattern
        Ring and firing time by pulse id.

    Returns
    -------
    PointCloud
    """
    pulse = returns.pulse
    pulse_id = np.uint64(rays.start) + pulse.astype(np.uint64)
    time_s, ring = pattern.time_and_channel(pulse_id)
    origins_m, directions = world_rays(rays.beams[pulse], rays.shift_m)
    r = returns.range_m
    xyz = frame_points(origins_m + r[:, None] * directions, pulse, frame)
    obj = returns.object_index
    return PointCloud(
        {
            "xyz": xyz.astype(np.float32),
            "intensity": returns.intensity.astype(np.float32),
            "range_m": r.astype(np.float32),
            "ring": ring,
            "time_s": time_s,
            "return_number": returns.return_number,
            "num_returns": returns.num_returns,
            "label": tables.label_of_object[obj],
            "instance": tables.instance_of_object[obj],
        }
    )


def add_diagnostics(cloud: PointCloud, returns: Returns, pulse_start: int) -> PointCloud:
    """The record with the diagnostic fields of ``output.diagnostics: true`` added (every
    backend: gathered from ``returns``, which must carry them)."""
    assert returns.range_true_m is not None, "returns made without diagnostics"

    def f32(values: NDArray[np.float64] | None) -> NDArray[np.float32]:
        assert values is not None
        return values.astype(np.float32)

    cloud.fields.update(
        range_true_m=returns.range_true_m,
        cos_incidence=f32(returns.cos_incidence),
        cos_effective=f32(returns.cos_effective),
        footprint_spread_m=f32(returns.spread_m),
        peak_factor=f32(returns.peak_factor),
        object_id=returns.object_index.astype(np.int32),
        pulse_id=np.uint64(pulse_start) + returns.pulse.astype(np.uint64),
        energy_fraction=f32(returns.energy_fraction),
    )
    return cloud


def pack_las(
    fields: dict[str, NDArray[Any]],
    offset_m: NDArray[np.float64],
    scale_m: NDArray[np.float64],
    data: NDArray[Any],
) -> None:
    """Fill LAS point-format-6 records from a point record's fields (the specification).

    Parameters
    ----------
    fields : dict
        The record's fields (``xyz``, ``intensity``, ``return_number``, ``num_returns``,
        ``label``, ``time_s``, ``ring``, ``instance``, ``range_m``), N points.
    offset_m, scale_m : (3,) float64
        The LAS header's coordinate offset and scale.
    data : (N,) structured array
        The point format's records (with the ``ring``, ``label``, ``instance`` and
        ``range`` extra bytes), written in place.
    """
    xyz = fields["xyz"].astype(np.float64)
    for axis, name in enumerate("XYZ"):
        data[name] = np.round((xyz[:, axis] - offset_m[axis]) / scale_m[axis])
    data["intensity"] = np.clip(np.round(fields["intensity"]), 0, 65535)
    # Point format 6: return number in bits 0-3, number of returns in bits 4-7.
    data["bit_fields"] = (fields["return_number"] & 0x0F) | (fields["num_returns"] << 4)
    label = fields["label"]
    data["classification"] = np.where(label < 256, label, 0)
    data["gps_time"] = fields["time_s"]
    data["ring"] = fields["ring"]
    data["label"] = label
    data["instance"] = fields["instance"]
    data["range"] = fields["range_m"]
