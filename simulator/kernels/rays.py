"""Ray kernels: a spinning pattern's rays with the sensor's pose, footprint sub-rays, and the
rays cast on behind see-through surfaces."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import PulsePoses
from ..constants import PASS_THROUGH_M
from ..sensor.scanner import SpinningPattern
from .common import TWO_PI, firing_time, read_only

__all__ = ["rays_behind", "spinning_rays", "spinning_times", "sub_rays"]


@njit(parallel=True, cache=True, nogil=True)
def _spinning_rays(  # type: ignore[no-untyped-def]
    start, n, channels, period_s, cos_az, sin_az, cos_lag, sin_lag, el_cos, el_sin,
    sign, az0, rate, r0, rot, pos, rays,
):  # fmt: skip
    """One firing per iteration: the head's angle at the firing's start is turned by
    each channel's fixed angle (its firing lag times the spin, plus its azimuth
    offset) by the angle-addition formulas, so a firing costs one sin/cos pair."""
    # A rotation and a position per pulse, or one for all (each on its own).
    rs, ps = (1 if rot.shape[0] > 1 else 0), (1 if pos.shape[0] > 1 else 0)
    first = start // channels
    for f in prange((start + n - 1) // channels - first + 1):
        firing = first + f
        head = az0 + sign * TWO_PI * (rate * (firing * period_s))
        cb, sb = math.cos(head), math.sin(head)
        lo = max(start - firing * channels, 0)
        hi = min(start + n - firing * channels, channels)
        for ch in range(lo, hi):
            k = firing * channels + ch - start
            j, jp = k * rs, k * ps
            ca = cb * cos_az[ch] - sb * sin_az[ch]  # cos(head + lag + azimuth offset)
            sa = sb * cos_az[ch] + cb * sin_az[ch]
            ds0, ds1, ds2 = el_cos[ch] * ca, el_cos[ch] * sa, el_sin[ch]
            oc = cb * cos_lag[ch] - sb * sin_lag[ch]  # the head itself, at this firing
            os_ = sb * cos_lag[ch] + cb * sin_lag[ch]
            os0, os1 = r0 * oc, r0 * os_
            for a in range(3):
                rays[k, a] = rot[j, a, 0] * os0 + rot[j, a, 1] * os1 + pos[jp, a]
                rays[k, 3 + a] = rot[j, a, 0] * ds0 + rot[j, a, 1] * ds1 + rot[j, a, 2] * ds2


def spinning_rays(
    pattern: SpinningPattern,
    start: int,
    stop: int,
    poses: PulsePoses,
    shift_m: NDArray[np.float64],
) -> NDArray[np.float32]:
    """:func:`simulator.steps.rays.pattern_rays` for a spinning pattern, in one kernel.

    Parameters
    ----------
    pattern : SpinningPattern
    start, stop : int
        Global pulse ids.
    poses : PulsePoses
        World from sensor at each pulse (or one for all).
    shift_m : (3,) float64
        The ray engine's local origin, subtracted from the ray origins.

    Returns
    -------
    (stop - start, 6) float32
    """
    p = pattern
    rays = np.empty((stop - start, 6), dtype=np.float32)  # every row is written
    el = p.elevation_rad
    lag = p.sign * 2.0 * math.pi * p.scanner.rotation_hz * p.firing_offset_s
    if p.scanner.firing_azimuth == "block":  # the decoded cloud: no turn during the delay
        lag = np.zeros_like(lag)
    turn = lag + p.azimuth_offset_rad
    _spinning_rays(
        start, stop - start, p.channels, p.period_s, np.cos(turn), np.sin(turn), np.cos(lag),
        np.sin(lag), np.cos(el), np.sin(el), p.sign, math.radians(p.scanner.start_azimuth_deg),
        p.scanner.rotation_hz, p.scanner.beam_origin_offset_m,
        read_only(poses.rotation), np.ascontiguousarray(poses.position_m - shift_m),
        rays,
    )  # fmt: skip
    return rays


@njit(parallel=True, cache=True, nogil=True)
def _spinning_times(start, channels, period_s, offset_s, out):  # type: ignore[no-untyped-def]
    """Pulse ``start + k``'s firing time into ``out[k]`` (:func:`firing_time`)."""
    for k in prange(out.shape[0]):
        out[k], _ = firing_time(start + k, channels, period_s, offset_s)


def spinning_times(pattern: SpinningPattern, start: int, stop: int) -> NDArray[np.float64]:
    """:func:`simulator.steps.rays.pulse_times` for a spinning pattern, in one kernel pass
    over the pulses: (stop - start,) float64, s."""
    out = np.zeros(stop - start, dtype=np.float64)
    if len(out):
        _spinning_times(np.int64(start), np.int64(pattern.channels), float(pattern.period_s),
                        np.ascontiguousarray(pattern.firing_offset_s, np.float64), out)  # fmt: skip
    return out


@njit(parallel=True, cache=True, nogil=True)
def _sub_rays(rays, up, fwd, tan_h, tan_v, out):  # type: ignore[no-untyped-def]
    """Fan each beam into sub-rays: d + tan_h e_h + tan_v e_v, normalised (beam.py)."""
    n = tan_h.shape[0]
    stride = 1 if up.shape[0] > 1 else 0  # one axis row per beam, or one for all
    for p in prange(rays.shape[0]):
        a = p * stride
        u0, u1, u2 = up[a, 0], up[a, 1], up[a, 2]
        d0, d1, d2 = np.float64(rays[p, 3]), np.float64(rays[p, 4]), np.float64(rays[p, 5])
        ud = u0 * d0 + u1 * d1 + u2 * d2
        v0, v1, v2 = u0 - ud * d0, u1 - ud * d1, u2 - ud * d2
        lv = math.sqrt(v0 * v0 + v1 * v1 + v2 * v2)
        if lv < 1e-9:
            f0, f1, f2 = fwd[a, 0], fwd[a, 1], fwd[a, 2]
            fd = f0 * d0 + f1 * d1 + f2 * d2
            v0, v1, v2 = f0 - fd * d0, f1 - fd * d1, f2 - fd * d2
            lv = math.sqrt(v0 * v0 + v1 * v1 + v2 * v2)
        v0, v1, v2 = v0 / lv, v1 / lv, v2 / lv
        h0, h1, h2 = d1 * v2 - d2 * v1, d2 * v0 - d0 * v2, d0 * v1 - d1 * v0
        for k in range(n):
            s0 = d0 + tan_h[k] * h0 + tan_v[k] * v0
            s1 = d1 + tan_h[k] * h1 + tan_v[k] * v1
            s2 = d2 + tan_h[k] * h2 + tan_v[k] * v2
            ls = math.sqrt(s0 * s0 + s1 * s1 + s2 * s2)
            row = p * n + k
            out[row, 0], out[row, 1], out[row, 2] = rays[p, 0], rays[p, 1], rays[p, 2]
            out[row, 3], out[row, 4], out[row, 5] = s0 / ls, s1 / ls, s2 / ls


def sub_rays(
    rays: NDArray[np.float32],
    sensor_up: NDArray[np.float64],
    sensor_forward: NDArray[np.float64],
    beam: BeamPattern,
) -> NDArray[np.float32]:
    """:func:`simulator.steps.rays.sub_rays` in one kernel: (P * beam.samples, 6) float32."""
    if beam.samples == 1 and not beam.offsets.any():
        return rays
    offsets = beam.offsets
    tan_h = np.tan(offsets[:, 0] * beam.half_angle_h_rad)
    tan_v = np.tan(offsets[:, 1] * beam.half_angle_v_rad)
    out = np.empty((len(rays) * len(offsets), 6), dtype=np.float32)  # every row is written
    up = np.ascontiguousarray(np.asarray(sensor_up, np.float64).reshape(-1, 3))
    fwd = np.ascontiguousarray(np.asarray(sensor_forward, np.float64).reshape(-1, 3))
    _sub_rays(rays, up, fwd, tan_h, tan_v, out)
    return out


@njit(cache=True, nogil=True)
def _rays_behind(rays, on, range_m, passes, pass_through_m, out, start_m):  # type: ignore[no-untyped-def]
    """Ray ``on[k]`` from ``start_m[k]`` along itself into ``out[k]``, one pass (one
    thread: a layer's rays are too few to pay for a parallel launch). The step rounded to
    float32, then added in float64 and rounded once: float32's own sum, as numpy's (a sum
    of two float32 is exact in float64, or rounds once there and once more to the same
    float32)."""
    for k in range(on.shape[0]):
        r = on[k]
        s = np.float64(range_m[passes[k]]) + pass_through_m
        start_m[k] = s
        for c in range(3):
            d = rays[r, 3 + c]
            step = np.float32(s * np.float64(d))
            out[k, c] = np.float32(np.float64(rays[r, c]) + np.float64(step))
            out[k, 3 + c] = d


def rays_behind(
    rays: NDArray[np.float32],
    on: NDArray[np.int64],
    range_m: NDArray[np.floating],
    passes: NDArray[np.int64],
    pass_through_m: float = PASS_THROUGH_M,
) -> tuple[NDArray[np.float32], NDArray[np.float64]]:
    """:func:`simulator.steps.rays.rays_behind` in one kernel pass: the (K, 6) float32 rays
    and (K,) float64 starts (m), value for value (the gather, the float64 starts and the
    float32 step without numpy's temporaries)."""
    on = np.ascontiguousarray(on, dtype=np.int64)
    out = np.empty((len(on), 6), dtype=np.float32)  # every row is written
    start_m = np.empty(len(on))
    _rays_behind(np.ascontiguousarray(rays, dtype=np.float32), on, np.ascontiguousarray(range_m),
                 np.ascontiguousarray(passes, dtype=np.int64), float(pass_through_m), out,
                 start_m)  # fmt: skip
    return out, start_m
