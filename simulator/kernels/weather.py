"""The returns of pulses through the weather with their echoes formed in a numba kernel
(the specification: :func:`simulator.weather.medium_returns`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..echoes import Behind, Returns
from ..hits import HitResults, ReturnModel, Streams
from ..weather import Medium, Particles, Population, medium_entries
from .common import GAMMA, U, mix64, uniform
from .echoes import surface_returns

__all__ = ["draw_particles", "medium_returns"]


def medium_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    medium: Medium,
    particles: list[Particles] | None = None,
    behind: Sequence[Behind] = (),
) -> Returns:
    """:func:`simulator.weather.medium_returns`, value for value: the particles' shadows,
    their entries and the soft targets' echoes as the specification makes them
    (:func:`simulator.weather.medium_entries`), grouped, detected and selected with the
    scene's hits by :func:`simulator.kernels.echoes.surface_returns`."""
    pulse_id = np.asarray(pulse_id, dtype=np.uint64)
    shadow, extra, broad = medium_entries(
        hits, pulse_id, beam, model, medium, particles, behind, results
    )
    return surface_returns(
        results, hits, pulse_id, beam, model, streams,
        behind=behind, shadow=shadow, extra=extra, broad=broad,
    )  # fmt: skip


@njit(parallel=True, cache=True, nogil=True)
def _particle_counts(stream, ids, cdf, count):  # type: ignore[no-untyped-def]
    """Each pulse's particle count: ``searchsorted(cdf, hash_uniform(mix64(stream +
    id)))`` (the left side), as :meth:`simulator.weather.Population.draw`."""
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
def _interp(x, xp, fp):  # type: ignore[no-untyped-def]
    """``np.interp(x, xp, fp)`` of one value, in numpy's arithmetic (the segment's slope
    times the distance from its start, plus its start's value; the ends held)."""
    n = xp.shape[0]
    if x < xp[0]:
        return fp[0]
    if x >= xp[n - 1]:
        return fp[n - 1]
    lo, hi = 0, n - 1  # the last j with xp[j] <= x
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xp[mid] <= x:
            lo = mid
        else:
            hi = mid
    if xp[lo] == x:
        return fp[lo]
    slope = (fp[lo + 1] - fp[lo]) / (xp[lo + 1] - xp[lo])
    value = slope * (x - xp[lo]) + fp[lo]
    if math.isnan(value):
        value = slope * (x - xp[lo + 1]) + fp[lo + 1]
        if math.isnan(value) and fp[lo] == fp[lo + 1]:
            value = fp[lo]
    return value


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


def draw_particles(population: Population, pulse_id: NDArray[np.uint64]) -> Particles:
    """:func:`simulator.weather.draw_particles`, value for value: the hashes and the table
    look-ups in two parallel kernels, the size's logarithm and power with numpy as the
    specification takes them."""
    ids = np.ascontiguousarray(pulse_id, dtype=np.uint64)
    count = np.empty(len(ids), dtype=np.int64)
    _particle_counts(population.stream, ids, population.poisson_cdf, count)
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
