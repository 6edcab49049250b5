"""The returns of pulses through the weather with their echoes formed in a numba kernel
(the specification: :func:`simulator.steps.weather.medium_returns`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..config import ScannerConfig
from ..steps.echoes import Behind, Returns, of_pulses
from ..steps.hits import HitResults, ReturnModel, Streams
from ..steps.weather import Medium, Particles, Population, SoftTarget, medium_entries, overlap
from .common import (
    GAMMA,
    U,
    hash_normal,
    measured_range,
    mix64,
    peak_factor,
    received_peak,
    uniform,
)
from .common import reported_intensity as intensity_of
from .echoes import _finish_echo, _insert_by_range, _joined, _report_echoes, surface_returns

__all__ = ["count_particles", "draw_particles", "medium_returns", "soft_echoes"]


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
    pulses: NDArray[np.intp] | None = None,
) -> Returns:
    """:func:`simulator.steps.weather.medium_returns`, value for value. In a scene without
    see-through surfaces, one kernel a pulse (:func:`_one_layer_returns`), which reads
    the per-hit model of ``pulses`` where it lies; otherwise the particles' shadows,
    their entries and the soft targets' echoes as the specification makes them
    (:func:`simulator.steps.weather.medium_entries`), grouped, detected and selected with the
    scene's hits by :func:`simulator.kernels.echoes.surface_returns`."""
    pulse_id = np.asarray(pulse_id, dtype=np.uint64)
    if not behind and medium.transmittance_of_object is None:
        return _one_layer_returns(results, hits, pulse_id, beam, model, streams, medium,
                                  particles, pulses)  # fmt: skip
    if pulses is not None:
        results, hits, behind = of_pulses(results, hits, behind, pulses, beam.samples)
        pulse_id = pulse_id[pulses]
    if particles is None:
        particles = medium.draw(pulse_id, draw_particles)
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
    id)))`` (the left side), as :meth:`simulator.steps.weather.Population.draw`."""
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
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xp[mid] <= x:
            lo = mid
        else:
            hi = mid
    return _segment_value(x, xp, fp, lo)


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


def count_particles(population: Population, pulse_id: NDArray[np.uint64]) -> NDArray[np.int64]:
    """:func:`simulator.steps.weather.count_particles`, value for value, in a parallel kernel."""
    ids = np.ascontiguousarray(pulse_id, dtype=np.uint64)
    count = np.empty(len(ids), dtype=np.int64)
    _particle_counts(population.stream, ids, population.poisson_cdf, count)
    return count


def draw_particles(population: Population, pulse_id: NDArray[np.uint64]) -> Particles:
    """:func:`simulator.steps.weather.draw_particles`, value for value: the hashes and the table
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
def _soft_peaks(  # type: ignore[no-untyped-def]
    sub_range, share, first_m, step, g, reach, waveform, range_m, out_range, out_received
):  # fmt: skip
    """:meth:`simulator.steps.weather.SoftTarget.echoes` without layers behind, per pulse: the
    uncut peak where no sub-ray meets a surface closer than ``reach`` (``out_*`` already
    hold it), else the peak of the cut waveform, in the specification's arithmetic (each
    sub-ray's cut interpolated between two rows of ``waveform``, weighted by ``share``
    and summed in sub-ray order; the parabola through the top three samples)."""
    pulses, samples = sub_range.shape
    receiving = waveform.shape[1]
    blocks = min(pulses, 256)
    for block in prange(blocks):
        wave = np.empty(receiving)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            cut = False
            for s in range(samples):
                if sub_range[p, s] < reach:
                    cut = True
            if not cut:
                continue
            for j in range(receiving):
                wave[j] = 0.0
            for s in range(samples):
                x = min(max((sub_range[p, s] - first_m) / step + 0.5, 0.0), float(g))
                full = min(np.int64(math.floor(x)), g - 1)
                frac = x - full
                w = share[s]
                for j in range(receiving):
                    below = waveform[full, j]
                    wave[j] += w * (below + frac * (waveform[full + 1, j] - below))
            top = 0
            for j in range(1, receiving):
                if wave[j] > wave[top]:
                    top = j
            i = min(max(top, 1), receiving - 2)
            a, b, c = wave[i - 1], wave[i], wave[i + 1]
            denom = a - 2.0 * b + c
            shift = 0.5 * (a - c) / denom if denom < 0.0 else 0.0
            shift = min(max(shift, -0.5), 0.5)
            out_range[p] = range_m[i] + shift * (range_m[1] - range_m[0])
            out_received[p] = b - 0.25 * (a - c) * shift


def soft_echoes(
    soft: SoftTarget,
    sub_range_m: NDArray[np.float64],
    weights: NDArray[np.float64],
    behind_m: NDArray[np.float64] | None = None,
    two_way: NDArray[np.float64] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:meth:`simulator.steps.weather.SoftTarget.echoes` (``soft.echoes`` with the same
    arguments), value for value: without layers behind in one parallel kernel
    (:func:`_soft_peaks`), with them by the specification."""
    if behind_m is not None:
        return soft.echoes(sub_range_m, weights, behind_m, two_way)
    n = len(sub_range_m)
    range_m, received = np.full(n, soft.peak_range_m), np.full(n, soft.peak_received)
    g, receiving = soft.waveform.shape[0] - 1, soft.waveform.shape[1]
    step = soft.range_m[1] - soft.range_m[0]
    _soft_peaks(
        np.ascontiguousarray(sub_range_m, dtype=np.float64), weights / weights.sum(),
        float(soft.range_m[0]), float(step), g, float(soft.reach_m), soft.waveform,
        np.ascontiguousarray(soft.range_m[:receiving]), range_m, received,
    )  # fmt: skip
    return range_m, received


@njit(inline="always", cache=True)
def _overlap_of(r, table):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.weather.overlap` at one range where it is exactly 0 or 1, else -1
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


@njit(parallel=True, cache=True, nogil=True)
def _particle_light(  # type: ignore[no-untyped-def]
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
                    q_overlap[i] = _overlap_of(r, table)
                else:
                    q_sub[i] = -1


#: More than the largest hashed normal, ``sqrt(-2 ln(2^-54))`` = 8.65: the bound of the
#: sensor's jitter in units of its deviation.
_MOST_NORMAL = 9.0


@njit(inline="always", cache=True)
def _choose(  # type: ignore[no-untyped-def]
    p, n, energy, range_true, relief, spread_plane, between, key, noise_m, resolution,
    pulse_m, threshold, ext, rmin, rmax, mode, max_returns, out_slot, out_number,
    out_total, out_range, out_spread, out_peak, rm, received, spread, peak, order, detected,
):  # fmt: skip
    """:func:`simulator.kernels.echoes._select_of_pulse` of a pulse's ``n`` echoes in
    slots ``0 ...``, each with the hash key of its jitter given (``key``): measured,
    detected and chosen by the return mode into row ``p`` of the outputs. Returns how
    many.

    Strongest (mode 0) reports one echo, whatever the order of the others: an echo's
    measured range is then made only where its jitter could take it out of the range
    window (the jitter is at most ``_MOST_NORMAL`` times ``noise_m``, the quantisation
    half a step), and for the one reported."""
    m = 0
    margin = _MOST_NORMAL * noise_m + resolution
    strongest = -1
    for k in range(n):
        spread[k] = math.sqrt(spread_plane[k] * spread_plane[k] + 4.0 * between[k])
        # (a spread of 0 has a peak factor of exactly 1: 1 / hypot(1, 0))
        peak[k] = 1.0 if spread[k] == 0.0 else peak_factor(pulse_m, spread[k])
        received[k] = received_peak(energy[k], peak[k], range_true[k], ext)
        if received[k] < threshold:  # (its measured range is never read)
            continue
        if mode == 0:
            mid = range_true[k] + relief[k]
            slack = margin + 1e-9 * abs(mid)
            if mid - slack < rmin or mid + slack > rmax:
                jitter = noise_m * hash_normal(key[k])
                r = measured_range(range_true[k], relief[k], jitter, resolution)
                if r < rmin or r > rmax:
                    continue
                rm[k] = r
            else:
                rm[k] = math.nan  # in the window whatever its jitter: made if reported
            if strongest < 0 or received[k] > received[strongest]:
                strongest = k
            m += 1
            continue
        r = measured_range(range_true[k], relief[k], noise_m * hash_normal(key[k]), resolution)
        rm[k] = r
        if r >= rmin and r <= rmax:
            m = _insert_by_range(order, m, rm, k)
    if m == 0:
        return 0
    if mode == 0:  # the strongest, the first of equals
        k = strongest
        if math.isnan(rm[k]):
            rm[k] = measured_range(range_true[k], relief[k], noise_m * hash_normal(key[k]),
                                   resolution)  # fmt: skip
        out_slot[p, 0] = k
        out_range[p, 0] = rm[k]
        out_spread[p, 0] = spread[k]
        out_peak[p, 0] = peak[k]
        out_number[p, 0] = 1
        out_total[p, 0] = 1
        return 1
    return _report_echoes(
        p, 0, n, m, order, detected, received, rm, spread, peak, mode, max_returns,
        out_slot, out_number, out_total, out_range, out_spread, out_peak,
    )  # fmt: skip


@njit(parallel=True, cache=True, nogil=True)
def _medium_pulses(  # type: ignore[no-untyped-def]
    samples, weights, hit_of_ray, ray_range, h_relief, h_b, h_spread, ray_obj, h_ci,
    h_ce, share_of_sub, starts, pop_efficiency, pop_reflectance, pop_object, q_sub,
    q_range, q_diameter, q_overlap, area, soft_energy, soft_range, soft_stream, soft_object,
    widest, separation, pulse_id, noise_seed, noise_m, resolution, pulse_m, threshold, ext,
    rmin, rmax, mode, max_returns, iscale, imax, istep, response, block_count, o_pulse,
    o_number, o_total, o_range, o_intensity, o_obj, o_range_true, o_cos_inc, o_cos_eff,
    o_spread, o_peak, o_fraction,
):  # fmt: skip
    """:func:`simulator.steps.weather.medium_returns` of pulses whose sub-rays meet one surface
    each, a pulse at a time: the particles' shadows on their sub-rays (in the
    specification's order of products) and their entries, the surfaces' entries, the
    echoes formed (:func:`simulator.kernels.echoes._finish_echo`), the soft targets'
    echoes resolved against them, all measured, detected and selected
    (:func:`_choose`); block ``b``'s returns from slot ``p0 * max_returns`` on.

    Particle ``i`` of population ``q`` and pulse ``p`` is at ``starts[q, p] <= i <
    starts[q, p + 1]`` (``q_sub`` -1: not lit); ``area`` is ``[pi / 4, d0, divergence
    h, divergence v]`` of :func:`simulator.steps.weather.beam_area_m2`."""
    pulses = hit_of_ray.shape[0] // samples
    populations = starts.shape[0]
    softs = soft_energy.shape[0]
    echoes_most = widest + softs
    blocks = min(pulses, 256)
    for block in prange(blocks):
        passed = np.empty(samples)
        w_s, rng_s, rel_s = np.empty(widest), np.empty(widest), np.empty(widest)
        b_s, sp_s = np.empty(widest), np.empty(widest)
        ci_s, ce_s = np.empty(widest), np.empty(widest)
        obj_s = np.empty(widest, dtype=np.int64)
        order = np.empty(widest, dtype=np.int64)
        objs = np.empty(widest, dtype=np.int64)
        obj_e, obj_w, obj_wr = np.empty(widest), np.empty(widest), np.empty(widest)
        e_energy, e_norm = np.empty(echoes_most), np.empty(echoes_most)
        e_range, e_relief = np.empty(echoes_most), np.empty(echoes_most)
        e_sp, e_between = np.empty(echoes_most), np.empty(echoes_most)
        e_obj = np.empty(echoes_most, dtype=np.int64)
        e_dom, e_ci, e_ce = np.empty(echoes_most), np.empty(echoes_most), np.empty(echoes_most)
        e_key = np.empty(echoes_most, dtype=np.uint64)
        rm, received = np.empty(echoes_most), np.empty(echoes_most)
        spread, peak = np.empty(echoes_most), np.empty(echoes_most)
        e_order = np.empty(echoes_most, dtype=np.int64)
        detected = np.empty(echoes_most, dtype=np.bool_)
        out_slot = np.empty((1, max_returns), dtype=np.int64)
        out_number = np.empty((1, max_returns), dtype=np.uint8)
        out_total = np.empty((1, max_returns), dtype=np.uint8)
        out_range = np.empty((1, max_returns))
        out_spread, out_peak = np.empty((1, max_returns)), np.empty((1, max_returns))
        p0 = block * pulses // blocks
        at = p0 * max_returns
        for p in range(p0, (block + 1) * pulses // blocks):
            base = p * samples
            for k in range(samples):
                passed[k] = 1.0
            # The particles' entries after the surfaces' (filled in below).
            n_q = 0
            for q in range(populations):
                for i in range(starts[q, p], starts[q, p + 1]):
                    k = q_sub[i]
                    if k < 0:
                        continue
                    r = q_range[i]
                    d = q_diameter[i]
                    beam = area[0] * (area[1] + r * area[2] * 1e-3) * (area[1] + r * area[3] * 1e-3)
                    share = min(area[0] * (d * d) / beam, 1.0)
                    lost = min(pop_efficiency[q] * share / share_of_sub[k], 1.0)
                    passed[k] *= 1.0 - lost
                    energy = pop_reflectance[q] * q_overlap[i]
                    if energy > 0.0:
                        e = samples + n_q
                        w_s[e], rng_s[e], rel_s[e], b_s[e], sp_s[e] = share, r, 0.0, energy, 0.0
                        obj_s[e], ci_s[e], ce_s[e] = pop_object[q], 1.0, 1.0
                        n_q += 1
            n_h = 0
            for k in range(samples):
                h = hit_of_ray[base + k]
                if h < 0:
                    continue
                w = weights[k]
                weight = max(w - w * (1.0 - passed[k] * passed[k]), 0.0)
                if weight > 0.0:
                    w_s[n_h], rng_s[n_h], rel_s[n_h] = weight, ray_range[base + k], h_relief[h]
                    b_s[n_h], sp_s[n_h], obj_s[n_h] = h_b[h], h_spread[h], ray_obj[base + k]
                    ci_s[n_h], ce_s[n_h] = h_ci[h], h_ce[h]
                    n_h += 1
            n = n_h + n_q
            for t in range(n):  # insertion sort by range, stable, of surfaces then particles
                i = t if t < n_h else samples + t - n_h
                j = t
                while j > 0 and rng_s[order[j - 1]] > rng_s[i]:
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = i
            echo = -1
            start = 0
            prev = 0.0
            for t in range(n + 1):
                close = t == n
                r = 0.0
                if not close:
                    r = rng_s[order[t]]
                    close = t > 0 and r - prev > separation
                if close and echo >= 0:
                    _finish_echo(
                        echo, start, t, order, order, 0, w_s, rng_s, rel_s, b_s, sp_s, obj_s,
                        ci_s, ce_s, objs, obj_e, obj_w, obj_wr, e_energy, e_norm, e_range,
                        e_relief, e_sp, e_between, e_obj, e_dom, e_ci, e_ce,
                    )  # fmt: skip
                if t == n:
                    break
                if t == 0 or close:
                    echo += 1
                    start = t
                prev = r
            count = echo + 1
            key0 = mix64(noise_seed + pulse_id[p])
            for k in range(count):
                e_key[k] = key0 if k == 0 else mix64(key0 + U(k))
            # The soft targets' peaks: the weaker of one and an echo closer than the
            # separation dropped (simulator.steps.echoes._resolve, one target after the other).
            for t in range(softs):
                s_range = soft_range[t, p]
                s_energy = soft_energy[t, p]
                theirs = -1.0  # (made when an echo is near)
                wins = False
                for k in range(count):
                    if abs(e_range[k] - s_range) <= separation:
                        if theirs < 0.0:
                            theirs = received_peak(s_energy, 1.0, s_range, ext)
                        sp = math.sqrt(e_sp[k] * e_sp[k] + 4.0 * e_between[k])
                        f = 1.0 if sp == 0.0 else peak_factor(pulse_m, sp)
                        mine = received_peak(e_energy[k], f, e_range[k], ext)
                        if mine < theirs:
                            e_energy[k] = 0.0
                        else:
                            wins = True
                k = count + t
                e_energy[k] = 0.0 if wins else s_energy
                e_range[k], e_relief[k], e_sp[k], e_between[k] = s_range, 0.0, 0.0, 0.0
                e_obj[k], e_dom[k], e_ci[k], e_ce[k] = soft_object[t], e_energy[k], 1.0, 1.0
                e_key[k] = mix64(soft_stream[t] + pulse_id[p])
            n_out = _choose(
                0, count + softs, e_energy, e_range, e_relief, e_sp, e_between, e_key, noise_m,
                resolution, pulse_m, threshold, ext, rmin, rmax, mode, max_returns, out_slot,
                out_number, out_total, out_range, out_spread, out_peak, rm, received, spread,
                peak, e_order, detected,
            )  # fmt: skip
            for t in range(n_out):
                k = out_slot[0, t]
                energy = e_energy[k]
                o_pulse[at + t] = p
                o_number[at + t] = out_number[0, t]
                o_total[at + t] = out_total[0, t]
                o_range[at + t] = out_range[0, t]
                o_intensity[at + t] = intensity_of(
                    energy, out_range[0, t], np.int64(pulse_id[p]), iscale, imax, istep, response
                )
                o_obj[at + t] = e_obj[k]
                o_range_true[at + t] = e_range[k]
                o_cos_inc[at + t] = e_ci[k]
                o_cos_eff[at + t] = e_ce[k]
                o_spread[at + t] = out_spread[0, t]
                o_peak[at + t] = out_peak[0, t]
                o_fraction[at + t] = e_dom[k] / max(energy, 1e-300) if energy > 0.0 else 1.0
            at += n_out
        block_count[block] = at - p0 * max_returns


def _soft_broad(
    soft: SoftTarget,
    sub_range: NDArray[np.float64],
    beam: BeamPattern,
    model: ReturnModel,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`simulator.steps.weather._soft_echoes` without layers behind: each pulse's echo
    energy and true range (the kernel hashes its jitter key,
    ``mix64(soft.stream + pulse_id)``)."""
    range_m, received = soft_echoes(soft, sub_range, beam.weights.astype(np.float64))

    def undone(r: NDArray[np.float64]) -> NDArray[np.float64]:
        if model.extinction_relief is None:
            return np.exp(2.0 * model.extinction_per_m * r)
        return 1.0 / model.two_way_transmission(r)

    # The extinction undone where the peak moved; elsewhere it is the uncut peak's (an
    # elementwise function of the range: the same value).
    back = np.full(len(range_m), undone(np.array([soft.peak_range_m]))[0])
    moved = np.flatnonzero(range_m != soft.peak_range_m)
    back[moved] = undone(range_m[moved])
    return received * range_m**2 * back, range_m


@njit(parallel=True, cache=True, nogil=True)
def _overlap_cosines(r, table, cos_a, cos_b):  # type: ignore[no-untyped-def]
    """The cosines of the two discs' half-angles in :func:`simulator.steps.weather.overlap`
    (``table``: :func:`_overlap_table`, geometric), in its arithmetic."""
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
    """:func:`simulator.steps.weather.overlap` from the half-angles (numpy's ``arccos`` of
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


def partial_overlap(range_m: NDArray[np.float64], scanner: ScannerConfig) -> NDArray[np.float64]:
    """:func:`simulator.steps.weather.overlap`, value for value: its elementwise arithmetic in
    two kernels, the ``arccos`` by numpy as the specification takes it (for the ranges
    where the overlap is partial, though any range gives its value)."""
    if scanner.overlap_m is not None:
        return overlap(range_m, scanner)
    r = np.ascontiguousarray(range_m, dtype=np.float64)
    table = _overlap_table(scanner)
    cos_a, cos_b = np.empty(len(r)), np.empty(len(r))
    _overlap_cosines(r, table, cos_a, cos_b)
    np.arccos(cos_a, out=cos_a)
    np.arccos(cos_b, out=cos_b)
    out = np.empty(len(r))
    _overlap_shares(r, table, cos_a, cos_b, out)
    return out


def _overlap_table(scanner: ScannerConfig) -> NDArray[np.float64]:
    """The overlap's constants as :func:`_overlap_of` takes them."""
    if scanner.overlap_m is not None:
        start, full = scanner.overlap_range_m
        return np.array([0.0, start, full, 0.0, 0.0, 0.0, 0.0])
    rho_t, grow_t = scanner.transmit_radius_mm
    return np.array([1.0, rho_t, grow_t, 0.5 * scanner.receiver_aperture_mm,
                     scanner.receiver_fov_mrad, scanner.axis_separation_mm,
                     scanner.range_min_m])  # fmt: skip


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
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if xp[mid] <= x:
            lo = mid
        else:
            hi = mid
    return _segment_value(x, xp, fp, lo)


@njit(parallel=True, cache=True, nogil=True)
def _lit_draws(  # type: ignore[no-untyped-def]
    stream, ids, first, mean, cumulative, table_r, c_guide, c_x0, c_inv, finite_r,
    finite_size, f_guide, f_x0, f_inv, samples, sub_cumulative, cum_last, ray_range,
    range_max, table, lit, q_range, q_smallest, q_u_size, q_sub, q_overlap,
):  # fmt: skip
    """:meth:`simulator.steps.weather.Population.draw` fused with the lighting of
    :func:`_particle_light`: each pulse's ``first[i + 1] - first[i]`` particles drawn
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
            q_overlap[q] = _overlap_of(r, table)
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


def _lit_particles(
    population: Population,
    pulse_id: NDArray[np.uint64],
    ray_range: NDArray[np.float64],
    beam: BeamPattern,
    model: ReturnModel,
    scanner: ScannerConfig,
) -> tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64], NDArray[np.int64],
           NDArray[np.float64]]:  # fmt: skip
    """The lit particles of a population in the beams of pulses ``pulse_id`` (those
    :func:`draw_particles` draws that lie in front of their sub-ray's surface and the
    maximum range), drawn where they are used: (P + 1,) starts of each pulse's, and
    their ranges, diameters (:meth:`simulator.steps.weather.Population.draw`'s logarithm and
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
        model.range_max_m, _overlap_table(scanner),
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
        q_overlap[partial] = partial_overlap(q_range[partial], scanner)
    return starts, q_range, diameter_m, q_sub, q_overlap


@njit(cache=True, nogil=True)
def _hit_rows(idx, rays, out):  # type: ignore[no-untyped-def]
    """Each ray's row in the per-hit model (-1: a miss): both ``idx`` (the hit rays) and
    ``rays`` increasing, one walk along both."""
    j = np.searchsorted(idx, rays[0]) if rays.shape[0] else 0
    for i in range(rays.shape[0]):
        while j < idx.shape[0] and idx[j] < rays[i]:
            j += 1
        out[i] = j if j < idx.shape[0] and idx[j] == rays[i] else -1


def _one_layer_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    medium: Medium,
    particles: list[Particles] | None,
    pulses: NDArray[np.intp] | None = None,
) -> Returns:
    """:func:`simulator.steps.weather.medium_returns` of a scene without see-through surfaces
    in one kernel a pulse (:func:`_medium_pulses`); what needs numpy's transcendental
    functions (the soft targets' extinction, the overlap in its partial zone, the
    particles' sizes) by numpy. Without ``particles`` only the lit ones are drawn
    (:func:`_lit_particles`), as they are used. With ``pulses`` the kernel reads the
    per-hit model of their rays where it lies (no gather of its fields)."""
    samples, idx = beam.samples, results.idx
    if pulses is None:
        n_pulses = len(pulse_id)
        ray_range = hits.range_m.astype(np.float64)
        ray_obj = hits.object_index.astype(np.int64)
        hit_of_ray = np.full(n_pulses * samples, -1, dtype=np.int64)
        hit_of_ray[idx] = np.arange(len(idx))
    else:
        n_pulses = len(pulses)
        pulse_id = pulse_id[pulses]
        rays = np.asarray(pulses, dtype=np.int64)[:, None] * samples + np.arange(samples)
        rays = rays.ravel()
        ray_range = hits.range_m[rays].astype(np.float64)
        ray_obj = hits.object_index[rays].astype(np.int64)
        hit_of_ray = np.empty(len(rays), dtype=np.int64)
        _hit_rows(np.ascontiguousarray(idx, dtype=np.int64), rays, hit_of_ray)
    cumulative = np.cumsum(beam.weights)
    cum_last = float(cumulative[-1])
    share_of_sub = (beam.weights / cumulative[-1]).astype(np.float64)
    scanner = medium.scanner
    table = _overlap_table(scanner)
    drawn = []
    for q, population in enumerate(medium.populations):
        if particles is None:
            drawn.append(_lit_particles(population, pulse_id, ray_range, beam, model, scanner))
            continue
        p = particles[q]
        counts = np.bincount(p.pulse, minlength=n_pulses)
        starts = np.zeros(n_pulses + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        q_range = np.ascontiguousarray(p.range_m, dtype=np.float64)
        q_sub = np.empty(len(q_range), dtype=np.int64)
        q_overlap = np.empty(len(q_range))
        _particle_light(
            samples, cumulative.astype(np.float64), cum_last, ray_range, model.range_max_m,
            starts, q_range, np.ascontiguousarray(p.place, dtype=np.float64), table, q_sub,
            q_overlap,
        )  # fmt: skip
        partial = np.flatnonzero((q_sub >= 0) & (q_overlap < 0.0))
        if len(partial):
            q_overlap[partial] = partial_overlap(q_range[partial], scanner)
        drawn.append((starts, q_range, np.asarray(p.diameter_m, dtype=np.float64), q_sub,
                      q_overlap))  # fmt: skip
    # Each population's particles one after the other: pulse p's of population q are
    # starts[q, p] ... starts[q, p + 1].
    starts = np.zeros((len(drawn), n_pulses + 1), dtype=np.int64)
    offset = 0
    for q, d in enumerate(drawn):
        starts[q] = d[0] + offset
        offset += len(d[1])
    subs, ranges, diameters, overlaps = ([d[i] for d in drawn] for i in (3, 1, 2, 4))
    per_pulse = np.zeros(n_pulses, dtype=np.int64)
    for q in range(len(drawn)):
        per_pulse += np.diff(starts[q])
    widest = samples + (int(per_pulse.max()) if n_pulses else 0)

    pops = medium.populations
    sub_range = ray_range.reshape(n_pulses, samples)
    softs = [_soft_broad(s, sub_range, beam, model) for s in medium.soft]
    soft_energy = np.array([s[0] for s in softs]).reshape(len(softs), n_pulses)
    soft_range = np.array([s[1] for s in softs]).reshape(len(softs), n_pulses)
    soft_stream = np.array([s.stream for s in medium.soft], dtype=np.uint64)
    div = scanner.divergence_mrad
    area = np.array([np.pi / 4.0, scanner.beam_exit_diameter_mm * 1e-3, div.horizontal,
                     div.vertical])  # fmt: skip
    width = model.returns_per_pulse
    size = n_pulses * width
    blocks = max(1, min(n_pulses, 256))
    block_count = np.zeros(blocks, dtype=np.int64)
    o_pulse = np.empty(size, dtype=np.int64)
    o_number, o_total = np.empty(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)
    o_range, o_intensity = np.empty(size), np.empty(size)
    o_obj = np.empty(size, dtype=np.int64)
    diag = [np.empty(size) for _ in range(6)]
    _medium_pulses(
        samples, beam.weights.astype(np.float64), hit_of_ray, ray_range,
        results.relief_m, results.backscatter, results.spread_m, ray_obj, results.cos_incidence,
        results.cos_effective, share_of_sub, starts,
        np.array([p.efficiency for p in pops], dtype=np.float64),
        np.array([p.reflectance for p in pops], dtype=np.float64),
        np.array([p.object_index for p in pops], dtype=np.int64),
        _joined(subs, np.int64), _joined(ranges, np.float64), _joined(diameters, np.float64),
        _joined(overlaps, np.float64), area, soft_energy, soft_range, soft_stream,
        np.array([s.object_index for s in medium.soft], dtype=np.int64), widest,
        model.separation_m, np.ascontiguousarray(pulse_id, dtype=np.uint64),
        np.uint64(streams.sensor_noise), model.range_noise_m, model.range_resolution_m,
        model.pulse_length_m, model.threshold, model.extinction_args, model.range_min_m,
        model.range_max_m, model.return_mode_number, width, model.intensity_scale,
        model.intensity_max, model.intensity_step, model.response_args, block_count,
        o_pulse, o_number, o_total, o_range, o_intensity, o_obj, *diag,
    )  # fmt: skip
    # Each block's returns, one table: block b's from slot src[b] on.
    # (every slot filled, as in fog with one return a pulse: the table as it is)
    total = int(block_count.sum())
    src = np.arange(blocks, dtype=np.int64) * n_pulses // blocks * width
    start = np.cumsum(block_count) - block_count
    rows = None if total == size else np.repeat(src - start, block_count) + np.arange(total)

    def packed(values: NDArray[Any]) -> NDArray[Any]:
        return values if rows is None else values[rows]

    names = ("range_true_m", "cos_incidence", "cos_effective", "spread_m", "peak_factor",
             "energy_fraction")  # fmt: skip
    return Returns(
        pulse=packed(o_pulse), range_m=packed(o_range), intensity=packed(o_intensity),
        object_index=packed(o_obj).astype(np.int32), return_number=packed(o_number),
        num_returns=packed(o_total),
        **{name: packed(values) for name, values in zip(names, diag, strict=True)},
    )  # fmt: skip
