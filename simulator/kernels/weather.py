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
from ..steps.echoes import of_pulses
from ..steps.hits import HitResults, ReturnModel, Streams
from ..steps.particles import Particles
from ..steps.returns import Returns
from ..steps.transmittance import Behind
from ..steps.weather import Medium, medium_entries
from .common import U, hash_normal, measured_range, mix64, peak_factor, received_peak
from .common import reported_intensity as intensity_of
from .echoes import surface_returns
from .grouping import (
    RETURN_FIELDS,
    finish_echo,
    insert_by_range,
    joined,
    report_echoes,
    returns_out,
)
from .overlap import partial_overlap
from .particles import draw_particles, lit_particles, particle_light
from .receiver import received_energies, soft_detected
from .soft_targets import peak_echo_energies, soft_echoes

__all__ = ["medium_returns"]


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
        hits, pulse_id, beam, model, medium, particles, behind, results, soft_echoes
    )
    return surface_returns(
        results, hits, pulse_id, beam, model, streams,
        behind=behind, shadow=shadow, extra=extra, broad=broad,
    )  # fmt: skip


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
    (:func:`lit_particles`), as they are used. With ``pulses`` the kernel reads the
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
    optics = medium.optics
    table = optics.overlap_args()
    drawn = []
    for q, population in enumerate(medium.populations):
        if particles is None:
            drawn.append(lit_particles(population, pulse_id, ray_range, beam, model, optics))
            continue
        p = particles[q]
        counts = np.bincount(p.pulse, minlength=n_pulses)
        starts = np.zeros(n_pulses + 1, dtype=np.int64)
        np.cumsum(counts, out=starts[1:])
        q_range = np.ascontiguousarray(p.range_m, dtype=np.float64)
        q_sub = np.empty(len(q_range), dtype=np.int64)
        q_overlap = np.empty(len(q_range))
        particle_light(
            samples, cumulative.astype(np.float64), cum_last, ray_range, model.range_max_m,
            starts, q_range, np.ascontiguousarray(p.place, dtype=np.float64), table, q_sub,
            q_overlap,
        )  # fmt: skip
        partial = np.flatnonzero((q_sub >= 0) & (q_overlap < 0.0))
        if len(partial):
            q_overlap[partial] = partial_overlap(q_range[partial], optics)
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
    softs = [peak_echo_energies(s, sub_range, beam, model) for s in medium.soft]
    soft_energy = np.array([s[0] for s in softs]).reshape(len(softs), n_pulses)
    soft_range = np.array([s[1] for s in softs]).reshape(len(softs), n_pulses)
    soft_stream = np.array([s.stream for s in medium.soft], dtype=np.uint64)
    area = optics.area_args()
    width = model.returns_per_pulse
    size = n_pulses * width
    blocks = max(1, min(n_pulses, 256))
    block_count = np.zeros(blocks, dtype=np.int64)
    out = returns_out(size, np.int64)
    surfaces = (hit_of_ray, ray_range, results.relief_m, results.backscatter, results.spread_m,
                ray_obj, results.cos_incidence, results.cos_effective)  # fmt: skip
    drawn_args = (
        starts, np.array([p.efficiency for p in pops], dtype=np.float64),
        np.array([p.reflectance for p in pops], dtype=np.float64),
        np.array([p.object_index for p in pops], dtype=np.int64),
        joined(subs, np.int64), joined(ranges, np.float64), joined(diameters, np.float64),
        joined(overlaps, np.float64),
    )  # fmt: skip
    soft_args = (soft_energy, soft_range, soft_stream,
                 np.array([s.object_index for s in medium.soft], dtype=np.int64))  # fmt: skip
    _medium_pulses(
        samples, beam.weights.astype(np.float64), share_of_sub, surfaces, drawn_args, area,
        soft_args, widest, np.ascontiguousarray(pulse_id, dtype=np.uint64),
        np.uint64(streams.sensor_noise), model.kernel_args(), block_count, out,
    )  # fmt: skip
    # Each block's returns, one table: block b's from slot src[b] on.
    # (every slot filled, as in fog with one return a pulse: the table as it is)
    total = int(block_count.sum())
    src = np.arange(blocks, dtype=np.int64) * n_pulses // blocks * width
    start = np.cumsum(block_count) - block_count
    rows = None if total == size else np.repeat(src - start, block_count) + np.arange(total)

    def packed(values: NDArray[Any]) -> NDArray[Any]:
        return values if rows is None else values[rows]

    fields = {name: packed(values) for name, values in zip(RETURN_FIELDS, out, strict=True)}
    fields["object_index"] = fields["object_index"].astype(np.int32)
    return Returns(**fields)


@njit(cache=True, nogil=True)
def _hit_rows(idx, rays, out):  # type: ignore[no-untyped-def]
    """Each ray's row in the per-hit model (-1: a miss): both ``idx`` (the hit rays) and
    ``rays`` increasing, one walk along both."""
    j = np.searchsorted(idx, rays[0]) if rays.shape[0] else 0
    for i in range(rays.shape[0]):
        while j < idx.shape[0] and idx[j] < rays[i]:
            j += 1
        out[i] = j if j < idx.shape[0] and idx[j] == rays[i] else -1


#: More than the largest hashed normal, ``sqrt(-2 ln(2^-54))`` = 8.65: the bound of the
#: sensor's jitter in units of its deviation.
_MOST_NORMAL = 9.0


@njit(inline="always", cache=True)
def _choose(p, n, echoes, key, model, chosen, chosen_f, measured, ranked):  # type: ignore[no-untyped-def]
    """:func:`simulator.kernels.grouping.select_of_pulse` of a pulse's ``n`` echoes in
    slots ``0 ...`` of the ``echoes`` table, each with the hash key of its jitter given
    (``key``): measured, detected and chosen by the return mode into row ``p`` of the
    ``selection`` pair ``chosen``, ``chosen_f`` (``measured`` and ``ranked`` scratch, as
    there). Returns how many.

    Strongest (mode 0) reports one echo, whatever the order of the others: an echo's
    measured range is then made only where its jitter could take it out of the range
    window (the jitter is at most ``_MOST_NORMAL`` times ``noise_m``, the quantisation
    half a step), and for the one reported."""
    pulse_m = model[2]
    threshold = model[3]
    ext = model[4]
    rmin = model[5]
    rmax = model[6]
    resolution = model[7]
    noise_m = model[8]
    mode = model[18]
    max_returns = model[19]
    rec = model[20:26]
    m = 0
    margin = _MOST_NORMAL * noise_m + resolution
    strongest = -1
    for k in range(n):
        range_true = echoes[2, k]
        relief = echoes[3, k]
        spread = math.sqrt(echoes[4, k] * echoes[4, k] + 4.0 * echoes[5, k])
        # (a spread of 0 has a peak factor of exactly 1: 1 / hypot(1, 0))
        peak = 1.0 if spread == 0.0 else peak_factor(pulse_m, spread)
        measured[2, k] = spread
        measured[3, k] = peak
        # the receiver's speckle (the reading's: where it is reported)
        e = received_energies(rec, key[k], range_true, echoes[0, k])[0]
        received = received_peak(e, peak, range_true, ext)
        measured[1, k] = received
        if not soft_detected(rec, received, threshold, key[k]):
            continue  # (its measured range is never read)
        if mode == 0:
            mid = range_true + relief
            slack = margin + 1e-9 * abs(mid)
            if mid - slack < rmin or mid + slack > rmax:
                jitter = noise_m * hash_normal(key[k])
                r = measured_range(range_true, relief, jitter, resolution)
                if r < rmin or r > rmax:
                    continue
                measured[0, k] = r
            else:
                measured[0, k] = math.nan  # in the window whatever its jitter: made if reported
            if strongest < 0 or received > measured[1, strongest]:
                strongest = k
            m += 1
            continue
        r = measured_range(range_true, relief, noise_m * hash_normal(key[k]), resolution)
        measured[0, k] = r
        if r >= rmin and r <= rmax:
            m = insert_by_range(ranked, measured, m, k)
    if m == 0:
        return 0
    if mode == 0:  # the strongest, the first of equals
        k = strongest
        if math.isnan(measured[0, k]):
            measured[0, k] = measured_range(echoes[2, k], echoes[3, k],
                                            noise_m * hash_normal(key[k]), resolution)  # fmt: skip
        chosen[0, p, 0] = k
        chosen_f[0, p, 0] = measured[0, k]
        chosen_f[1, p, 0] = measured[2, k]
        chosen_f[2, p, 0] = measured[3, k]
        chosen[1, p, 0] = 1
        chosen[2, p, 0] = 1
        return 1
    return report_echoes(p, 0, n, m, ranked, measured, mode, max_returns, chosen, chosen_f)


@njit(parallel=True, cache=True, nogil=True)
def _medium_pulses(  # type: ignore[no-untyped-def]
    samples, weights, share_of_sub, surfaces, particles, area, softs, widest, pulse_id,
    noise_seed, model, block_count, out,
):  # fmt: skip
    """:func:`simulator.steps.weather.medium_returns` of pulses whose sub-rays meet one surface
    each, a pulse at a time: the particles' shadows on their sub-rays (in the
    specification's order of products) and their entries, the surfaces' entries, the
    echoes formed (:func:`simulator.kernels.grouping.finish_echo`), the soft targets'
    echoes resolved against them, all measured, detected and selected
    (:func:`_choose`); block ``b``'s returns to ``out``
    (:data:`simulator.kernels.grouping.RETURN_FIELDS`) from row ``p0 * max_returns`` on.

    ``surfaces``: ``(hit_of_ray, range_m, relief_m, backscatter, spread_m, object_index,
    cos_incidence, cos_effective)``, the ray's hit (-1: a miss) in the per-hit model's
    fields (range and object by ray). ``particles``: ``(starts, efficiency, reflectance,
    object_index, sub, range_m, diameter_m, overlap)``, the populations' by population,
    particle ``i`` of population ``q`` and pulse ``p`` at ``starts[q, p] <= i < starts[q,
    p + 1]`` (``sub`` -1: not lit). ``softs``: ``(energy, range_m, stream,
    object_index)``, the soft targets' echoes (T, P) and their own (T,). ``area`` is
    :meth:`simulator.beam.BeamOptics.area_args`, ``model``
    :meth:`simulator.steps.hits.ReturnModel.kernel_args`."""
    hit_of_ray = surfaces[0]
    ray_range = surfaces[1]
    h_relief = surfaces[2]
    h_b = surfaces[3]
    h_spread = surfaces[4]
    ray_obj = surfaces[5]
    h_ci = surfaces[6]
    h_ce = surfaces[7]
    starts = particles[0]
    pop_efficiency = particles[1]
    pop_reflectance = particles[2]
    pop_object = particles[3]
    q_sub = particles[4]
    q_range = particles[5]
    q_diameter = particles[6]
    q_overlap = particles[7]
    soft_energy = softs[0]
    soft_range = softs[1]
    soft_stream = softs[2]
    soft_object = softs[3]
    pulse_m = model[2]
    ext = model[4]
    iscale = model[9]
    imax = model[10]
    istep = model[11]
    response = model[12:17]
    separation = model[17]
    max_returns = model[19]
    rec = model[20:26]
    o_pulse = out[0]
    o_number = out[1]
    o_total = out[2]
    o_range = out[3]
    o_intensity = out[4]
    o_obj = out[5]
    o_range_true = out[6]
    o_cos_inc = out[7]
    o_cos_eff = out[8]
    o_spread = out[9]
    o_peak = out[10]
    o_fraction = out[11]
    pulses = hit_of_ray.shape[0] // samples
    populations = starts.shape[0]
    n_softs = soft_energy.shape[0]
    echoes_most = widest + n_softs
    blocks = min(pulses, 256)
    for block in prange(blocks):
        # scratch, the tables of kernels.grouping: one pulse's entries (surfaces, then
        # particles from column `samples` on) and their shares, its echoes, their keys,
        # measures and choice
        passed = np.empty(samples)
        w_s = np.empty(widest)
        entries = np.empty((6, widest))  # (ENTRY_ROWS)
        obj_s = np.empty(widest, dtype=np.int64)
        ints = np.empty((3, widest), dtype=np.int64)
        sums = np.empty((3, widest))
        echoes = np.empty((9, echoes_most))  # (ECHO_ROWS)
        e_obj = np.empty(echoes_most, dtype=np.int64)
        e_key = np.empty(echoes_most, dtype=np.uint64)
        measured = np.empty((4, echoes_most))
        ranked = np.empty((2, echoes_most), dtype=np.int64)
        chosen = np.empty((3, 1, max_returns), dtype=np.int64)
        chosen_f = np.empty((3, 1, max_returns))
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
                        w_s[e], entries[0, e], entries[1, e] = share, r, 0.0
                        entries[2, e], entries[3, e] = energy, 0.0
                        obj_s[e], entries[4, e], entries[5, e] = pop_object[q], 1.0, 1.0
                        n_q += 1
            n_h = 0
            for k in range(samples):
                h = hit_of_ray[base + k]
                if h < 0:
                    continue
                w = weights[k]
                weight = max(w - w * (1.0 - passed[k] * passed[k]), 0.0)
                if weight > 0.0:
                    w_s[n_h], entries[0, n_h] = weight, ray_range[base + k]
                    entries[1, n_h], entries[2, n_h] = h_relief[h], h_b[h]
                    entries[3, n_h], obj_s[n_h] = h_spread[h], ray_obj[base + k]
                    entries[4, n_h], entries[5, n_h] = h_ci[h], h_ce[h]
                    n_h += 1
            n = n_h + n_q
            for t in range(n):  # insertion sort by range, stable, of surfaces then particles
                i = t if t < n_h else samples + t - n_h
                j = t
                while j > 0 and entries[0, ints[0, j - 1]] > entries[0, i]:
                    ints[0, j] = ints[0, j - 1]
                    j -= 1
                ints[0, j] = i
            echo = -1
            start = 0
            prev = 0.0
            for t in range(n + 1):
                close = t == n
                r = 0.0
                if not close:
                    r = entries[0, ints[0, t]]
                    close = t > 0 and r - prev > separation
                if close and echo >= 0:
                    finish_echo(echo, start, t, ints, 0, 0, w_s, entries, obj_s, sums, echoes,
                                e_obj)  # fmt: skip
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
            for t in range(n_softs):
                s_range = soft_range[t, p]
                s_energy = soft_energy[t, p]
                theirs = -1.0  # (made when an echo is near)
                wins = False
                for k in range(count):
                    if abs(echoes[2, k] - s_range) <= separation:
                        if theirs < 0.0:
                            theirs = received_peak(s_energy, 1.0, s_range, ext)
                        sp = math.sqrt(echoes[4, k] * echoes[4, k] + 4.0 * echoes[5, k])
                        f = 1.0 if sp == 0.0 else peak_factor(pulse_m, sp)
                        mine = received_peak(echoes[0, k], f, echoes[2, k], ext)
                        if mine < theirs:
                            echoes[0, k] = 0.0
                        else:
                            wins = True
                k = count + t
                echoes[0, k] = 0.0 if wins else s_energy
                echoes[2, k], echoes[3, k], echoes[4, k], echoes[5, k] = s_range, 0.0, 0.0, 0.0
                e_obj[k], echoes[6, k] = soft_object[t], echoes[0, k]
                echoes[7, k], echoes[8, k] = 1.0, 1.0
                e_key[k] = mix64(soft_stream[t] + pulse_id[p])
            n_out = _choose(0, count + n_softs, echoes, e_key, model, chosen, chosen_f, measured,
                            ranked)  # fmt: skip
            for t in range(n_out):
                k = chosen[0, 0, t]
                energy = echoes[0, k]
                read = received_energies(rec, e_key[k], echoes[2, k], energy)[1]
                o_pulse[at + t] = p
                o_number[at + t] = chosen[1, 0, t]
                o_total[at + t] = chosen[2, 0, t]
                o_range[at + t] = chosen_f[0, 0, t]
                o_intensity[at + t] = intensity_of(
                    read, chosen_f[0, 0, t], np.int64(pulse_id[p]), iscale, imax, istep, response
                )
                o_obj[at + t] = e_obj[k]
                o_range_true[at + t] = echoes[2, k]
                o_cos_inc[at + t] = echoes[7, k]
                o_cos_eff[at + t] = echoes[8, k]
                o_spread[at + t] = chosen_f[1, 0, t]
                o_peak[at + t] = chosen_f[2, 0, t]
                o_fraction[at + t] = echoes[6, k] / max(energy, 1e-300) if energy > 0.0 else 1.0
            at += n_out
        block_count[block] = at - p0 * max_returns
