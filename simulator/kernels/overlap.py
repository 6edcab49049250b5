"""The receiver's near-field overlap in numba kernels (the specification:
:meth:`simulator.beam.BeamOptics.overlap`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamOptics

__all__ = ["overlap_of", "partial_overlap"]


@njit(inline="always", cache=True)
def overlap_of(r, table):  # type: ignore[no-untyped-def]
    """:meth:`simulator.beam.BeamOptics.overlap` at one range where it is exactly 0 or 1, else -1
    (the specification computes the rest). ``table``: ``[0, start, full]`` given
    ``overlap_m`` (linear between, computed here), else ``[1, rho_t, grow_t, half the
    aperture, half the field of view, separation, range_min]``."""
    if table[0] == 0.0:
        start, full = table[1], table[2]
        if full <= start:
            return 1.0 if r >= start else 0.0
        return min(max((r - start) / (full - start), 0.0), 1.0)
    if r < table[6]:
        return 0.0
    a = table[1] + r * table[2]
    b = table[3] + r * 0.5 * table[4]
    s = table[5]
    if s >= a + b:
        return 0.0
    if s <= b - a:
        return 1.0
    return -1.0


def partial_overlap(range_m: NDArray[np.float64], optics: BeamOptics) -> NDArray[np.float64]:
    """:meth:`simulator.beam.BeamOptics.overlap`, value for value: its elementwise arithmetic in
    two kernels, the ``arccos`` by numpy as the specification takes it (for the ranges
    where the overlap is partial, though any range gives its value)."""
    if optics.overlap_given:
        return optics.overlap(range_m)
    r = np.ascontiguousarray(range_m, dtype=np.float64)
    table = optics.overlap_args()
    cos_a, cos_b = np.empty(len(r)), np.empty(len(r))
    _overlap_cosines(r, table, cos_a, cos_b)
    np.arccos(cos_a, out=cos_a)
    np.arccos(cos_b, out=cos_b)
    out = np.empty(len(r))
    _overlap_shares(r, table, cos_a, cos_b, out)
    return out


@njit(parallel=True, cache=True, nogil=True)
def _overlap_cosines(r, table, cos_a, cos_b):  # type: ignore[no-untyped-def]
    """The cosines of the two discs' half-angles in :meth:`simulator.beam.BeamOptics.overlap`
    (``table``: :meth:`~simulator.beam.BeamOptics.overlap_args`, geometric), in its arithmetic."""
    s = table[5]
    for i in prange(r.shape[0]):
        a = table[1] + r[i] * table[2]
        b = table[3] + r[i] * 0.5 * table[4]
        if s > 0.0:
            cos_a[i] = min(max((s * s + a * a - b * b) / (2.0 * s * a), -1.0), 1.0)
            cos_b[i] = min(max((s * s + b * b - a * a) / (2.0 * s * b), -1.0), 1.0)
        else:
            cos_a[i] = cos_b[i] = 1.0


@njit(parallel=True, cache=True, nogil=True)
def _overlap_shares(r, table, angle_a, angle_b, out):  # type: ignore[no-untyped-def]
    """:meth:`simulator.beam.BeamOptics.overlap` from the half-angles (numpy's ``arccos`` of
    :func:`_overlap_cosines`), in its arithmetic."""
    s = table[5]
    for i in prange(r.shape[0]):
        a = table[1] + r[i] * table[2]
        b = table[3] + r[i] * 0.5 * table[4]
        if s >= a + b:
            share = 0.0
        elif s <= b - a:
            share = 1.0
        else:
            if s > 0.0:
                kite = math.sqrt(max((-s + a + b) * (s + a - b) * (s - a + b) * (s + a + b), 0.0))
                lens = a * a * angle_a[i] + b * b * angle_b[i] - 0.5 * kite
            else:
                m = min(a, b)
                lens = np.pi * (m * m)
            share = min(max(lens / (np.pi * (a * a)), 0.0), 1.0)
        out[i] = share if r[i] >= table[6] else 0.0
