"""The moving objects' cull in one pass over the rays (the specification:
:func:`simulator.raycast.rays_into_boxes`)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

__all__ = ["rays_into_boxes"]


@njit(parallel=True, cache=True, nogil=True)
def _rays_into_boxes(rays, shift, range_max, slot, lo, hi, out):  # type: ignore[no-untyped-def]
    """Per ray: the slab test against every box of its time slot."""
    for i in prange(rays.shape[0]):
        s = slot[i]
        for g in range(lo.shape[0]):
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
    out = np.zeros((len(lo_m), len(rays)), dtype=np.bool_)
    _rays_into_boxes(
        np.ascontiguousarray(rays, np.float32), np.ascontiguousarray(shift_m, np.float64),
        np.ascontiguousarray(range_max_m, np.float64), np.ascontiguousarray(slot, np.int64),
        np.ascontiguousarray(lo_m, np.float64), np.ascontiguousarray(hi_m, np.float64), out,
    )  # fmt: skip
    return out
