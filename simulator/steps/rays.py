"""The rays of a chunk, the numpy specification: a scan pattern's firing schedule moved to
the world by the sensor's pose at each pulse, the footprint sub-rays of each beam, and the
rays cast on behind the see-through surfaces they met.

The numba kernels of the same names are in :mod:`simulator.kernels.rays`; they fuse the
spinning pattern's schedule with the pose (one sine and cosine a firing) and write the
sub-rays straight into the cast layout.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..beam import BeamPattern, sub_ray_directions
from ..chunk import PulsePoses
from ..constants import PASS_THROUGH_M
from ..sensor.scanner import ScanPattern

__all__ = ["pattern_rays", "pulse_times", "rays_behind", "sub_rays"]


def pulse_times(pattern: ScanPattern, start: int, stop: int) -> NDArray[np.float64]:
    """The firing time of pulses ``start..stop`` of any scan pattern (its
    ``time_and_channel``): (stop - start,) float64, s from the survey start.

    Parameters
    ----------
    pattern : ScanPattern
    start, stop : int
        Global pulse ids.
    """
    return pattern.time_and_channel(np.arange(start, stop, dtype=np.uint64))[0]


def pattern_rays(
    pattern: ScanPattern, start: int, stop: int, poses: PulsePoses, shift_m: NDArray[np.float64]
) -> NDArray[np.float32]:
    """Open3D rays of pulses ``start..stop`` of any scan pattern.

    Parameters
    ----------
    pattern : ScanPattern
    start, stop : int
        Global pulse ids.
    poses : PulsePoses
        World from sensor at each pulse (or one for all).
    shift_m : (3,) float64
        The ray engine's local origin, subtracted from the ray origins.

    Returns
    -------
    (stop - start, 6) float32
        Origins (world, less ``shift_m``) and unit directions.
    """
    schedule = pattern.schedule(start, stop)
    rot, pos = poses.rotation, poses.position_m
    if len(rot) == 1 and len(pos) == 1:
        origins = schedule.origin_m @ rot[0].T + pos[0]
        directions = schedule.direction @ rot[0].T
    else:
        n = len(schedule)
        rot = np.broadcast_to(rot, (n, 3, 3))
        origins = np.einsum("nij,nj->ni", rot, schedule.origin_m) + pos
        directions = np.einsum("nij,nj->ni", rot, schedule.direction)
    rays = np.zeros((len(origins), 6), dtype=np.float32)
    rays[:, :3] = origins - shift_m
    rays[:, 3:] = directions
    return rays


def sub_rays(
    rays: NDArray[np.float32],
    sensor_up: NDArray[np.float64],
    sensor_forward: NDArray[np.float64],
    beam: BeamPattern,
) -> NDArray[np.float32]:
    """The rays to cast for the beams ``rays``: each beam's ``beam.samples`` sub-rays over
    its elliptical footprint, pulse-major (the beams themselves for one sample).

    Parameters
    ----------
    rays : (P, 6) float32
        The beams (Open3D layout).
    sensor_up, sensor_forward : (1, 3) or (P, 3) float64
        The sensor's z and x axes in the world, one row or one a beam.
    beam : BeamPattern

    Returns
    -------
    (P * beam.samples, 6) float32
    """
    n = beam.samples
    if n == 1 and not beam.offsets.any():  # the central ray alone
        return rays
    directions = sub_ray_directions(
        rays[:, 3:].astype(np.float64), sensor_up, sensor_forward, beam.half_angle_h_rad,
        beam.half_angle_v_rad, beam.offsets,
    )  # fmt: skip
    out = np.zeros((len(rays), n, 6), dtype=np.float32)
    out[:, :, :3] = rays[:, None, :3]
    out[:, :, 3:] = directions
    return out.reshape(-1, 6)


def rays_behind(
    rays: NDArray[np.float32],
    on: NDArray[np.int64],
    range_m: NDArray[np.floating],
    passes: NDArray[np.int64],
    pass_through_m: float = PASS_THROUGH_M,
) -> tuple[NDArray[np.float32], NDArray[np.float64]]:
    """The rays ``rays[on]`` cast on from just behind the surfaces they met: ray ``k``'s
    origin moved along its direction to ``range_m[passes[k]] + pass_through_m``.

    Parameters
    ----------
    rays : (N, 6) float32
        The cast rays (Open3D layout; directions of unit length, so ranges are in m).
    on : (K,) int64
        The rays that go on.
    range_m : (M,) float
        The ranges of the surfaces they met (m), from the rays' origins.
    passes : (K,) int64
        Each one's row of ``range_m``.
    pass_through_m : float
        How far behind its surface a ray starts again (m).

    Returns
    -------
    rays : (K, 6) float32
        The rays from there: the origin the float32 sum of the old one and the float32
        step, the direction as it was.
    start_m : (K,) float64
        Where each starts, along the old ray (m): its new ranges add to this.
    """
    start_m = range_m[passes].astype(np.float64) + pass_through_m
    cast = rays[on]
    cast[:, :3] += (start_m[:, None] * cast[:, 3:].astype(np.float64)).astype(np.float32)
    return cast, start_m
