"""The point record and its LAS packing, one kernel each (the specification:
:mod:`simulator.steps.record`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..chunk import PulsePoses, Rays
from ..pointcloud import PointCloud
from ..sensor.scanner import SpinningPattern
from ..steps.returns import Returns
from ..steps.tables import SceneTables
from .common import firing_time, read_only

__all__ = ["pack_las", "record"]


@njit(parallel=True, cache=True, nogil=True)
def _record(  # type: ignore[no-untyped-def]
    pulse, range_meas, intensity, obj, beams, shift, pulse_start, channels, period_s,
    offset_s, rot, pos, to_sensor, labels, instances,
    xyz, intensity_out, range_out, ring, time_s, label, instance,
):  # fmt: skip
    # A rotation and a position per pulse of the chunk, or one (each on its own).
    rs, ps = (1 if rot.shape[0] > 1 else 0), (1 if pos.shape[0] > 1 else 0)
    for q in prange(len(pulse)):
        i = pulse[q]
        j, jp = i * rs, i * ps
        r = range_meas[q]
        p0 = (np.float64(beams[i, 0]) + shift[0]) + r * np.float64(beams[i, 3])
        p1 = (np.float64(beams[i, 1]) + shift[1]) + r * np.float64(beams[i, 4])
        p2 = (np.float64(beams[i, 2]) + shift[2]) + r * np.float64(beams[i, 5])
        if to_sensor:
            p0, p1, p2 = p0 - pos[jp, 0], p1 - pos[jp, 1], p2 - pos[jp, 2]
            for a in range(3):
                xyz[q, a] = rot[j, 0, a] * p0 + rot[j, 1, a] * p1 + rot[j, 2, a] * p2
        else:
            xyz[q, 0], xyz[q, 1], xyz[q, 2] = p0, p1, p2
        time_s[q], ring[q] = firing_time(pulse_start + i, channels, period_s, offset_s)
        intensity_out[q] = intensity[q]
        range_out[q] = r
        label[q] = labels[obj[q]]
        instance[q] = instances[obj[q]]


def record(
    returns: Returns,
    rays: Rays,
    frame: PulsePoses | None,
    tables: SceneTables,
    pattern: SpinningPattern,
) -> PointCloud:
    """:func:`simulator.steps.record.record` of a spinning pattern's chunk in one kernel (the
    ring and firing time follow from the pulse id by the pattern's tables)."""
    n = len(returns)
    fields = {  # the kernel writes every row of each
        "xyz": np.empty((n, 3), dtype=np.float32),
        "intensity": np.empty(n, dtype=np.float32),
        "range_m": np.empty(n, dtype=np.float32),
        "ring": np.empty(n, dtype=np.uint16),
        "time_s": np.empty(n, dtype=np.float64),
        "return_number": returns.return_number,
        "num_returns": returns.num_returns,
        "label": np.empty(n, dtype=np.uint16),
        "instance": np.empty(n, dtype=np.uint16),
    }
    identity = PulsePoses.one(np.eye(3), np.zeros(3))
    poses = frame if frame is not None else identity
    _record(
        returns.pulse, returns.range_m, returns.intensity, returns.object_index, rays.beams,
        rays.shift_m, rays.start, pattern.channels, pattern.period_s, pattern.firing_offset_s,
        read_only(poses.rotation), read_only(poses.position_m),
        frame is not None, tables.label_of_object, tables.instance_of_object,
        fields["xyz"], fields["intensity"], fields["range_m"], fields["ring"], fields["time_s"],
        fields["label"], fields["instance"],
    )  # fmt: skip
    return PointCloud(fields)


@njit(parallel=True, cache=True, nogil=True)
def _pack_las(  # type: ignore[no-untyped-def]
    xyz, intensity, return_number, num_returns, label, time_s, ring, instance, range_m,
    offset, scale, X, Y, Z, level, bits, cls, gps, ring_out, label_out, instance_out,
    range_out,
):  # fmt: skip
    for i in prange(xyz.shape[0]):
        X[i] = np.int32(np.rint((np.float64(xyz[i, 0]) - offset[0]) / scale[0]))
        Y[i] = np.int32(np.rint((np.float64(xyz[i, 1]) - offset[1]) / scale[1]))
        Z[i] = np.int32(np.rint((np.float64(xyz[i, 2]) - offset[2]) / scale[2]))
        level[i] = np.uint16(min(max(np.rint(np.float64(intensity[i])), 0.0), 65535.0))
        bits[i] = (return_number[i] & 0x0F) | (num_returns[i] << 4)
        cls[i] = label[i] if label[i] < 256 else 0
        gps[i] = time_s[i]
        ring_out[i] = ring[i]
        label_out[i] = label[i]
        instance_out[i] = instance[i]
        range_out[i] = range_m[i]


def pack_las(
    fields: dict[str, NDArray[Any]],
    offset_m: NDArray[np.float64],
    scale_m: NDArray[np.float64],
    data: NDArray[Any],
) -> None:
    """:func:`simulator.steps.record.pack_las` in one kernel (the same bytes)."""
    f = fields
    _pack_las(
        f["xyz"], f["intensity"], f["return_number"], f["num_returns"], f["label"], f["time_s"],
        f["ring"], f["instance"], f["range_m"], np.asarray(offset_m, np.float64),
        np.asarray(scale_m, np.float64), data["X"], data["Y"], data["Z"], data["intensity"],
        data["bit_fields"], data["classification"], data["gps_time"], data["ring"],
        data["label"], data["instance"], data["range"],
    )  # fmt: skip
