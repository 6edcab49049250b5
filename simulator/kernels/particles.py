"""The weather's particles counted and drawn per pulse in parallel kernels, and the lit ones
drawn where they are used (the specification: :mod:`simulator.steps.particles`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamOptics, BeamPattern
from ..steps.hits import ReturnModel
from ..steps.particles import Particles, Population
from .common import GAMMA, U, mix64, uniform
from .overlap import overlap_of, partial_overlap

__all__ = ["count_particles", "draw_particles", "lit_particles", "particle_light"]


def count_particles(population: Population, pulse_id: NDArray[np.uint64]) -> NDArray[np.int64]:
    """:func:`simulator.steps.particles.count_particles`, value for value, in a parallel kernel."""
    ids = np.ascontiguousarray(pulse_id, dtype=np.uint64)
    count = np.empty(len(ids), dtype=np.int64)
    _particle_counts(population.stream, ids, population.poisson_cdf, count)
    return count


def draw_particles(population: Population, pulse_id: NDArray[np.uint64]) -> Particles:
    """:func:`simulator.steps.particles.draw_particles`, value for value: the hashes and the table
    look-ups in two parallel kernels, the size's logarithm and power with numpy as the
    specification takes them."""
    ids = np.ascontiguousarray(pulse_id, dtype=np.uint64)
    count = count_particles(population, ids)
    first = np.cumsum(count) - count
    total = int(count.sum())
    range_m, smallest, u_size, u_place = (np.empty(total) for _ in range(4))
    finite = np.isfinite(population.min_size_mm)
    _particle_draws(
        population.stream, ids, first, count, population.mean_per_pulse,
        population.cumulative, population.range_m,
        np.ascontiguousarray(population.range_m[finite]),
        np.ascontiguousarray(population.min_size_mm[finite]), range_m, smallest, u_size,
        u_place,
    )  # fmt: skip
    size = smallest - np.log(u_size) / population.lambda_per_mm
    diameter_m = population.diameter_k * size**population.diameter_p * 1e-3
    pulse = np.repeat(np.arange(len(ids)), count)
    return Particles(pulse, range_m, diameter_m, u_place)


@njit(parallel=True, cache=True, nogil=True)
def _particle_counts(stream, ids, cdf, count):  # type: ignore[no-untyped-def]
    """Each pulse's particle count: ``searchsorted(cdf, hash_uniform(mix64(stream +
    id)))`` (the left side), as :meth:`simulator.steps.particles.Population.draw`."""
    for i in prange(ids.shape[0]):
        u = uniform(mix64(stream + ids[i]))
        lo, hi = 0, cdf.shape[0]
        while lo < hi:
            mid = (lo + hi) // 2
            if cdf[mid] < u:
                lo = mid + 1
            else:
                hi = mid
        count[i] = lo


@njit(inline="always", cache=True)
def _last_at_most(x, xp, lo, hi):  # type: ignore[no-untyped-def]
    """The last ``j`` with ``xp[j] <= x`` in ``lo <= j < hi``, by bisection (``xp[lo] <=
    x < xp[hi]``)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xp[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo


@njit(inline="always", cache=True)
def _segment_value(x, xp, fp, lo):  # type: ignore[no-untyped-def]
    """``np.interp``'s value at ``x`` on the segment from ``xp[lo]`` (``xp[lo] <= x <
    xp[lo + 1]``), in numpy's arithmetic: the segment's slope times the distance from its
    start, plus its start's value (from its end where that is NaN)."""
    if xp[lo] == x:
        return fp[lo]
    slope = (fp[lo + 1] - fp[lo]) / (xp[lo + 1] - xp[lo])
    value = slope * (x - xp[lo]) + fp[lo]
    if math.isnan(value):
        value = slope * (x - xp[lo + 1]) + fp[lo + 1]
        if math.isnan(value) and fp[lo] == fp[lo + 1]:
            value = fp[lo]
    return value


@njit(inline="always", cache=True)
def _interp(x, xp, fp):  # type: ignore[no-untyped-def]
    """``np.interp(x, xp, fp)`` of one value, in numpy's arithmetic (the segment's slope
    times the distance from its start, plus its start's value; the ends held)."""
    n = xp.shape[0]
    if x < xp[0]:
        return fp[0]
    if x >= xp[n - 1]:
        return fp[n - 1]
    lo, hi = 0, n - 1  # the last j with xp[j] <= x
    return _segment_value(x, xp, fp, _last_at_most(x, xp, lo, hi))


@njit(parallel=True, cache=True, nogil=True)
def _particle_draws(  # type: ignore[no-untyped-def]
    stream, ids, first, count, mean, cumulative, table_r, finite_r, finite_size, range_m,
    smallest, u_size, u_place,
):  # fmt: skip
    """Particle ``j`` of pulse ``i`` (at ``first[i] + j``): its range from the cumulative
    table, the smallest drawn size there, and the uniforms of its size and place."""
    for i in prange(ids.shape[0]):
        key = mix64(stream + ids[i])
        for j in range(count[i]):
            h = mix64(key + U(j + 1) * GAMMA)
            q = first[i] + j
            r = _interp(uniform(mix64(h + U(1))) * mean, cumulative, table_r)
            range_m[q] = r
            smallest[q] = _interp(r, finite_r, finite_size)
            u_size[q] = uniform(mix64(h + U(2)))
            u_place[q] = uniform(mix64(h + U(3)))


@njit(parallel=True, cache=True, nogil=True)
def particle_light(  # type: ignore[no-untyped-def]
    samples, cumulative, cum_last, ray_range, range_max, starts, q_range, q_place, table,
    q_sub, q_overlap,
):  # fmt: skip
    """Each particle's sub-ray (``q_sub``, -1: not lit: behind its sub-ray's surface or
    beyond the maximum range) and, if lit, its overlap (-1 where the specification must
    compute it); pulse ``p``'s particles are ``starts[p] ...``."""
    pulses = starts.shape[0] - 1
    blocks = min(pulses, 256)
    for block in prange(blocks):
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            for i in range(starts[p], starts[p + 1]):
                v = q_place[i] * cum_last
                k = 0  # searchsorted, left
                while k < samples and cumulative[k] < v:
                    k += 1
                k = min(k, samples - 1)
                r = q_range[i]
                if r < ray_range[p * samples + k] and r < range_max:
                    q_sub[i] = k
                    q_overlap[i] = overlap_of(r, table)
                else:
                    q_sub[i] = -1


#: Buckets of the guide tables that start the particle tables' searches near their end.
_GUIDE_BUCKETS = 32768


def _guide(xp: NDArray[np.float64]) -> tuple[NDArray[np.int32], float, float]:
    """A guide to the increasing table ``xp`` for :func:`_interp_guided`: the last entry
    at or below each of :data:`_GUIDE_BUCKETS` + 1 equal steps from its first value to
    its last, the first value and the inverse step."""
    x0, x1 = float(xp[0]), float(xp[-1])
    width = (x1 - x0) / _GUIDE_BUCKETS if x1 > x0 else 1.0
    edges = x0 + width * np.arange(_GUIDE_BUCKETS + 1)
    guide = np.clip(np.searchsorted(xp, edges, side="right") - 1, 0, len(xp) - 1)
    return guide.astype(np.int32), x0, 1.0 / width


#: The guides of the populations drawn last (by id, the population kept to check it).
_GUIDES: dict[int, tuple[Population, tuple[Any, ...], tuple[Any, ...]]] = {}


def _guides_of(population: Population) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """:func:`_guide` of a population's cumulative count and of its ranges where a size is
    drawn, made once a population."""
    held = _GUIDES.get(id(population))
    if held is not None and held[0] is population:
        return held[1], held[2]
    if len(_GUIDES) > 16:
        _GUIDES.clear()
    finite = np.isfinite(population.min_size_mm)
    guides = _guide(population.cumulative), _guide(population.range_m[finite])
    _GUIDES[id(population)] = (population, *guides)
    return guides


@njit(inline="always", cache=True)
def _interp_guided(x, xp, fp, guide, x0, inv_width):  # type: ignore[no-untyped-def]
    """:func:`_interp` (``np.interp`` of one value), the search started from the guide
    (:func:`_guide`): the same segment (the last ``j`` with ``xp[j] <= x``), so the
    same value, in a few steps instead of twelve."""
    n = xp.shape[0]
    if x < xp[0]:
        return fp[0]
    if x >= xp[n - 1]:
        return fp[n - 1]
    g = guide.shape[0] - 1
    b = np.int64(min(max((x - x0) * inv_width, 0.0), float(g - 1)))
    lo = np.int64(guide[max(b - 1, 0)])
    hi = min(np.int64(guide[min(b + 2, g)]) + 1, n - 1)
    if not (xp[lo] <= x and x < xp[hi]):  # (never seen; the whole table then)
        lo, hi = 0, n - 1
    return _segment_value(x, xp, fp, _last_at_most(x, xp, lo, hi))


@njit(parallel=True, cache=True, nogil=True)
def _lit_draws(  # type: ignore[no-untyped-def]
    stream, ids, first, mean, cumulative, table_r, c_guide, c_x0, c_inv, finite_r,
    finite_size, f_guide, f_x0, f_inv, samples, sub_cumulative, cum_last, ray_range,
    range_max, table, lit, q_range, q_smallest, q_u_size, q_sub, q_overlap,
):  # fmt: skip
    """:meth:`simulator.steps.particles.Population.draw` fused with the lighting of
    :func:`particle_light`: each pulse's ``first[i + 1] - first[i]`` particles drawn
    (range, place), and of those lit (in front of their sub-ray's surface and the
    maximum range) the count (``lit``) and from ``first[i]`` on: range, smallest size
    there, the uniform of the size, the sub-ray and the overlap (-1: numpy's to
    compute)."""
    for i in prange(ids.shape[0]):
        key = mix64(stream + ids[i])
        at = first[i]
        n = 0
        for j in range(first[i + 1] - at):
            h = mix64(key + U(j + 1) * GAMMA)
            r = _interp_guided(
                uniform(mix64(h + U(1))) * mean, cumulative, table_r, c_guide, c_x0, c_inv
            )
            v = uniform(mix64(h + U(3))) * cum_last
            k = 0  # searchsorted, left
            while k < samples and sub_cumulative[k] < v:
                k += 1
            k = min(k, samples - 1)
            if not (r < ray_range[i * samples + k] and r < range_max):
                continue
            q = at + n
            q_range[q] = r
            q_smallest[q] = _interp_guided(r, finite_r, finite_size, f_guide, f_x0, f_inv)
            q_u_size[q] = uniform(mix64(h + U(2)))
            q_sub[q] = k
            q_overlap[q] = overlap_of(r, table)
            n += 1
        lit[i] = n


@njit(parallel=True, cache=True, nogil=True)
def _compact_lit(  # type: ignore[no-untyped-def]
    first, starts, range_m, smallest, u_size, overlap_share, sub, o_range, o_smallest,
    o_u_size, o_overlap, o_sub,
):  # fmt: skip
    """Each pulse's lit particles, which :func:`_lit_draws` wrote from ``first[i]`` on,
    copied to ``starts[i]`` on: one table of them all, in pulse order."""
    for i in prange(starts.shape[0] - 1):
        a, b = first[i], starts[i]
        for j in range(starts[i + 1] - b):
            o_range[b + j] = range_m[a + j]
            o_smallest[b + j] = smallest[a + j]
            o_u_size[b + j] = u_size[a + j]
            o_overlap[b + j] = overlap_share[a + j]
            o_sub[b + j] = sub[a + j]


def lit_particles(
    population: Population,
    pulse_id: NDArray[np.uint64],
    ray_range: NDArray[np.float64],
    beam: BeamPattern,
    model: ReturnModel,
    optics: BeamOptics,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64],
           NDArray[np.float64]]:  # fmt: skip
    """The lit particles of a population in the beams of pulses ``pulse_id`` (those
    :func:`draw_particles` draws that lie in front of their sub-ray's surface and the
    maximum range), drawn where they are used: (P + 1,) starts of each pulse's, and
    their ranges, diameters (:meth:`simulator.steps.particles.Population.draw`'s logarithm and
    power by numpy), sub-rays and overlaps."""
    ids = np.ascontiguousarray(pulse_id, dtype=np.uint64)
    count = count_particles(population, ids)
    first = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(count, out=first[1:])
    finite = np.isfinite(population.min_size_mm)
    finite_r = np.ascontiguousarray(population.range_m[finite])
    finite_size = np.ascontiguousarray(population.min_size_mm[finite])
    sub_cumulative = np.cumsum(beam.weights)
    c_guide, f_guide = _guides_of(population)
    total = int(first[-1])
    lit = np.empty(len(ids), dtype=np.int64)
    q_range, smallest, u_size, q_overlap = (np.empty(total) for _ in range(4))
    q_sub = np.empty(total, dtype=np.int64)
    _lit_draws(
        population.stream, ids, first, population.mean_per_pulse, population.cumulative,
        population.range_m, *c_guide, finite_r, finite_size, *f_guide, beam.samples,
        sub_cumulative.astype(np.float64), float(sub_cumulative[-1]), ray_range,
        model.range_max_m, optics.overlap_args(),
        lit, q_range, smallest, u_size, q_sub, q_overlap,
    )  # fmt: skip
    # The lit ones of each pulse, from first[i] on, one after the other.
    starts = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum(lit, out=starts[1:])
    n_lit = int(starts[-1])
    drawn = (q_range, smallest, u_size, q_overlap)
    q_range, smallest, u_size, q_overlap = (np.empty(n_lit) for _ in range(4))
    lit_sub = np.empty(n_lit, dtype=np.int64)
    _compact_lit(first, starts, *drawn, q_sub, q_range, smallest, u_size, q_overlap, lit_sub)
    q_sub = lit_sub
    size = smallest - np.log(u_size) / population.lambda_per_mm
    diameter_m = population.diameter_k * size**population.diameter_p * 1e-3
    partial = np.flatnonzero(q_overlap < 0.0)
    if len(partial):
        q_overlap[partial] = partial_overlap(q_range[partial], optics)
    return starts, q_range, diameter_m, q_sub, q_overlap
