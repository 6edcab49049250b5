"""The moving objects' cull in one pass over the rays (the specification:
:func:`simulator.raycast.rays_into_boxes`).

Testing every ray against every moving group's box is most of the work; most pairs are
ruled out a time slot at a time first. A ray from ``o`` can meet a box ``B`` only if its
direction's azimuth lies among those of ``B - O``, ``O`` the box of the slot's ray origins.
Azimuths are compared as *pseudo-angles* (a monotone, trigonometry-free stand-in in
[0, 4) for the angle in [0, 2 pi)), with a margin: the slab test decides the rest, so the
answer is the specification's exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

__all__ = ["rays_into_boxes"]

#: Pseudo-angle margin of the azimuth test (about 1e-6 rad).
MARGIN = 1e-6


@njit(inline="always", cache=True)
def _pseudo_angle(x, y):  # type: ignore[no-untyped-def]
    """A monotone stand-in in [0, 4) for the angle of (x, y) in [0, 2 pi); -1 for (0, 0)."""
    s = abs(x) + abs(y)
    if s == 0.0:
        return -1.0
    p = y / s
    if x >= 0.0:
        return p if y >= 0.0 else 4.0 + p
    return 2.0 - p


@njit(inline="always", cache=True)
def _turn(a):  # type: ignore[no-untyped-def]
    """A pseudo-angle difference wrapped to [-2, 2)."""
    return (a + 2.0) % 4.0 - 2.0


@njit(cache=True, nogil=True)
def _slot_candidates(rays, shift, slot, lo, hi):  # type: ignore[no-untyped-def]
    """(S, G) bool: whether some ray of slot ``s`` may point at box ``g`` of that slot."""
    slots, groups = lo.shape[1], lo.shape[0]
    o_lo = np.full((slots, 3), np.inf)
    o_hi = np.full((slots, 3), -np.inf)
    ref = np.full(slots, -2.0)  # the slot's reference azimuth; -1: any azimuth
    d_lo = np.zeros(slots)
    d_hi = np.zeros(slots)
    for i in range(rays.shape[0]):
        s = slot[i]
        for k in range(3):
            o = np.float64(rays[i, k]) + shift[k]
            o_lo[s, k] = min(o_lo[s, k], o)
            o_hi[s, k] = max(o_hi[s, k], o)
        if ref[s] == -1.0:
            continue
        a = _pseudo_angle(np.float64(rays[i, 3]), np.float64(rays[i, 4]))
        if a < 0.0:
            ref[s] = -1.0
        elif ref[s] == -2.0:
            ref[s] = a
        else:
            t = _turn(a - ref[s])
            d_lo[s] = min(d_lo[s], t)
            d_hi[s] = max(d_hi[s], t)
    out = np.ones((slots, groups), dtype=np.bool_)
    for s in range(slots):
        if ref[s] < 0.0 or d_hi[s] - d_lo[s] >= 1.0:  # no ray, or a wide fan: test all
            continue
        mid = ref[s] + 0.5 * (d_lo[s] + d_hi[s])
        half = 0.5 * (d_hi[s] - d_lo[s])
        for g in range(groups):
            x0, x1 = lo[g, s, 0] - o_hi[s, 0], hi[g, s, 0] - o_lo[s, 0]  # B - O
            y0, y1 = lo[g, s, 1] - o_hi[s, 1], hi[g, s, 1] - o_lo[s, 1]
            if x0 <= 0.0 <= x1 and y0 <= 0.0 <= y1:
                continue  # around the origins: any azimuth
            c = _pseudo_angle(0.5 * (x0 + x1), 0.5 * (y0 + y1))
            c_lo = c_hi = 0.0
            for x, y in ((x0, y0), (x0, y1), (x1, y0), (x1, y1)):
                t = _turn(_pseudo_angle(x, y) - c)
                c_lo = min(c_lo, t)
                c_hi = max(c_hi, t)
            c_mid = c + 0.5 * (c_lo + c_hi)
            c_half = 0.5 * (c_hi - c_lo)
            out[s, g] = abs(_turn(c_mid - mid)) <= half + c_half + MARGIN
    return out


@njit(parallel=True, cache=True, nogil=True)
def _rays_into_boxes(rays, shift, range_max, slot, lo, hi, candidate, out):  # type: ignore[no-untyped-def]
    """Per ray: the slab test against every box of its time slot not ruled out."""
    for i in prange(rays.shape[0]):
        s = slot[i]
        for g in range(lo.shape[0]):
            if not candidate[s, g]:
                continue
            enter = 0.0
            leave = range_max[i]
            for k in range(3):
                o = np.float64(rays[i, k]) + shift[k]  # as world_rays
                d = np.float64(rays[i, 3 + k])
                low = lo[g, s, k]
                high = hi[g, s, k]
                if d == 0.0:  # parallel to the slab: inside it for all t or never
                    if o < low or o > high:
                        leave = -1.0
                    continue
                inv = 1.0 / d
                a = (low - o) * inv
                b = (high - o) * inv
                if a > b:
                    a, b = b, a
                enter = max(enter, a)
                leave = min(leave, b)
            out[g, i] = enter <= leave


def rays_into_boxes(
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    range_max_m: NDArray,
    slot: NDArray[np.int64],
    lo_m: NDArray[np.float64],
    hi_m: NDArray[np.float64],
) -> NDArray[np.bool_]:
    """:func:`simulator.raycast.rays_into_boxes`: (G, N) bool, whether ray ``n`` meets
    box ``g`` of its time slot before its range."""
    rays = np.ascontiguousarray(rays, np.float32)
    shift = np.ascontiguousarray(shift_m, np.float64)
    slot = np.ascontiguousarray(slot, np.int64)
    lo = np.ascontiguousarray(lo_m, np.float64)
    hi = np.ascontiguousarray(hi_m, np.float64)
    out = np.zeros((len(lo), len(rays)), dtype=np.bool_)
    if len(rays) == 0 or len(lo) == 0:
        return out
    candidate = _slot_candidates(rays, shift, slot, lo, hi)
    _rays_into_boxes(
        rays, shift, np.ascontiguousarray(range_max_m, np.float64), slot, lo, hi, candidate, out
    )
    return out
