"""Echo formation and return selection for footprint sub-rays, per pulse in one kernel
each (the specification: :func:`simulator.echoes.echo_returns`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..echoes import Behind, Echoes, Returns
from ..hits import HitResults, ReturnModel, Streams, reported_intensity
from ..physics import pulse_peak_factor
from .common import U, hash_normal, measured_range, mix64, peak_factor, received_peak

__all__ = ["echo_returns", "echo_slots", "form_echoes"]


@njit(parallel=True, cache=True, nogil=True)
def _form_echoes(  # type: ignore[no-untyped-def]
    width, weights, hit_of_slot, rng, relief, b, spread, obj, cos_inc, cos_eff,
    separation, count, e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between,
    e_obj, e_dom, e_cos_inc, e_cos_eff,
):  # fmt: skip
    """Per pulse: sort the surfaces its sub-rays met by range, split at gaps, accumulate
    each echo.

    Pulse ``p`` has the ``width`` slots ``p * width + j``: ``hit_of_slot`` maps each to a
    hit (-1: none), which the per-hit inputs are indexed by, and ``weights`` gives each
    its share of the pulse's energy."""
    pulses = hit_of_slot.shape[0] // width
    blocks = min(pulses, 256)  # scratch arrays once a block of pulses, not once a pulse
    for block in prange(blocks):
        order = np.zeros(width, dtype=np.int64)  # slots by range
        hit = np.zeros(width, dtype=np.int64)  # their hits
        objs = np.zeros(width, dtype=np.int64)
        obj_e = np.zeros(width)
        obj_w = np.zeros(width)
        obj_wr = np.zeros(width)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            _echoes_of_pulse(
                p, width, weights, hit_of_slot, rng, relief, b, spread, obj, cos_inc,
                cos_eff, separation, count, e_energy, e_norm, e_range, e_relief,
                e_spread_plane, e_between, e_obj, e_dom, e_cos_inc, e_cos_eff, order, hit,
                objs, obj_e, obj_w, obj_wr,
            )  # fmt: skip


@njit(inline="always", cache=True)
def _echoes_of_pulse(  # type: ignore[no-untyped-def]
    p, width, weights, hit_of_slot, rng, relief, b, spread, obj, cos_inc, cos_eff,
    separation, count, e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between,
    e_obj, e_dom, e_cos_inc, e_cos_eff, order, hit, objs, obj_e, obj_w, obj_wr,
):  # fmt: skip
    """One pulse of :func:`_form_echoes` (``order`` to ``obj_wr`` are scratch)."""
    base = p * width
    n = 0
    for k in range(width):  # insertion sort of the slots that hit, by range (stable)
        h = hit_of_slot[base + k]
        if h >= 0:
            j = n
            while j > 0 and rng[hit[j - 1]] > rng[h]:
                order[j], hit[j] = order[j - 1], hit[j - 1]
                j -= 1
            order[j], hit[j] = k, h
            n += 1
    echo = -1
    start = 0
    prev = 0.0
    for q in range(n + 1):
        close = q == n
        if not close:
            r = rng[hit[q]]
            close = q > 0 and r - prev > separation
        if close and echo >= 0:  # finish echo `echo` over sub-rays start..q-1
            slot = base + echo
            energy = 0.0
            for t in range(start, q):
                energy += weights[base + order[t]] * b[hit[t]]
            wsum = wr = wrel = wsp = wci = wce = 0.0
            m = 0
            for t in range(start, q):
                i = hit[t]
                w = weights[base + order[t]]
                e = w * b[i]
                ew = e if energy > 0.0 else w
                wsum += ew
                wr += ew * rng[i]
                wrel += ew * relief[i]
                wsp += ew * spread[i]
                wci += ew * cos_inc[i]
                wce += ew * cos_eff[i]
                f = 0
                while f < m and objs[f] != obj[i]:
                    f += 1
                if f == m:
                    objs[m] = obj[i]
                    obj_e[m] = obj_w[m] = obj_wr[m] = 0.0
                    m += 1
                obj_e[f] += e
                obj_w[f] += ew
                obj_wr[f] += ew * rng[i]
            mean_r = wr / wsum
            for f in range(1, m):  # the objects by index, as the spec sums them
                g = f
                while g > 0 and objs[g - 1] > objs[g]:
                    objs[g - 1], objs[g] = objs[g], objs[g - 1]
                    obj_e[g - 1], obj_e[g] = obj_e[g], obj_e[g - 1]
                    obj_w[g - 1], obj_w[g] = obj_w[g], obj_w[g - 1]
                    obj_wr[g - 1], obj_wr[g] = obj_wr[g], obj_wr[g - 1]
                    g -= 1
            var = 0.0
            best = 0
            for f in range(m):
                dr = obj_wr[f] / obj_w[f] - mean_r
                var += obj_w[f] * (dr * dr)  # x * x, as numpy squares (pow may differ)
                # Most energy; on a tie the higher object index, as the numpy spec.
                if obj_e[f] >= obj_e[best]:
                    best = f
            e_energy[slot] = energy
            e_norm[slot] = wsum
            e_range[slot] = mean_r
            e_relief[slot] = wrel / wsum
            e_spread_plane[slot] = wsp / wsum
            e_between[slot] = var / wsum
            e_obj[slot] = objs[best]
            e_dom[slot] = obj_e[best]
            e_cos_inc[slot] = wci / wsum
            e_cos_eff[slot] = wce / wsum
        if q == n:
            break
        if q == 0 or close:
            echo += 1
            start = q
        prev = r
    count[p] = echo + 1


@njit(parallel=True, cache=True, nogil=True)
def _select_echoes(  # type: ignore[no-untyped-def]
    width, count, energy, range_true, relief, spread_plane, between, pulse_id,
    noise_seed, noise_m, resolution, pulse_m, threshold, ext, rmin, rmax, mode,
    max_returns, out_slot, out_number, out_total, out_range, out_spread, out_peak,
):  # fmt: skip
    """Per pulse: measure its echoes (range jitter by pulse and echo rank,
    quantisation, detection, as :func:`simulator.echoes.echo_returns`) and pick
    the reported ones (as :func:`simulator.echoes.select_returns`), in range order
    into slots ``p * R ...`` of the (P, R) outputs (slot -1: none)."""
    pulses = count.shape[0]
    blocks = min(pulses, 256)  # scratch arrays once a block of pulses, not once a pulse
    for block in prange(blocks):
        rm = np.empty(width)
        received = np.empty(width)
        spread = np.empty(width)
        peak = np.empty(width)
        order = np.empty(width, dtype=np.int64)  # detected echoes by measured range
        detected = np.empty(width, dtype=np.bool_)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            n = count[p]
            base = p * width
            key0 = mix64(noise_seed + pulse_id[p])
            m = 0
            for k in range(n):
                s = base + k
                spread[k] = math.sqrt(spread_plane[s] * spread_plane[s] + 4.0 * between[s])
                peak[k] = peak_factor(pulse_m, spread[k])
                received[k] = received_peak(energy[s], peak[k], range_true[s], ext)
                key = key0 if k == 0 else mix64(key0 + U(k))
                r = measured_range(range_true[s], relief[s], noise_m * hash_normal(key), resolution)
                rm[k] = r
                if received[k] >= threshold and r >= rmin and r <= rmax:
                    j = m  # insertion by range, stable: equal ranges keep echo order
                    while j > 0 and rm[order[j - 1]] > r:
                        order[j] = order[j - 1]
                        j -= 1
                    order[j] = k
                    m += 1
            if m == 0:
                continue
            # Strongest and second strongest, in echo order on ties (a stable sort).
            for k in range(n):
                detected[k] = False
            for t in range(m):
                detected[order[t]] = True
            first = second = -1
            for k in range(n):
                if not detected[k]:
                    continue
                if first < 0 or received[k] > received[first]:
                    first, second = k, first
                elif second < 0 or received[k] > received[second]:
                    second = k
            last = order[m - 1]
            out = 0
            for t in range(m):
                k = order[t]
                if mode == 0:
                    keep = k == first
                elif mode == 1:
                    keep = t == 0
                elif mode == 2:
                    keep = t == m - 1
                elif mode == 3:  # strongest, and the last, or the second if it is the last
                    keep = k == first or (k == second if first == last else t == m - 1)
                else:
                    keep = t < max_returns
                if keep:
                    out_slot[p, out] = base + k
                    out_range[p, out] = rm[k]
                    out_spread[p, out] = spread[k]
                    out_peak[p, out] = peak[k]
                    out += 1
            for t in range(out):
                out_number[p, t] = t + 1
                out_total[p, t] = out


@njit(cache=True, nogil=True)
def _layer_slots(  # type: ignore[no-untyped-def]
    layer, pulses, samples, idx, weights, two_way, range_m, object_index, relief, b, spread,
    cos_inc, cos_eff, used, hit_of_slot, weight, o_range, o_relief, o_b, o_spread, o_obj,
    o_cos_inc, o_cos_eff,
):  # fmt: skip
    """Layer ``layer`` of the slots of the pulses ``pulses`` (increasing): each sub-ray's
    share of the energy (its beam weight times the two-way transmittance in front, when
    ``two_way`` is not empty) and its hit there, if any and lit: the hit's per-hit inputs
    are appended to the ``o_*`` arrays from ``used`` on. Returns the new ``used``.

    ``idx`` (increasing) are the rays that hit in the layer; ``range_m``,
    ``object_index`` and ``two_way`` are by ray, the other inputs by hit."""
    j = 0
    hits = idx.shape[0]
    for f in range(pulses.shape[0]):
        base = pulses[f] * samples
        for k in range(samples):
            ray = base + k
            while j < hits and idx[j] < ray:  # both increase: a merge walk
                j += 1
            w = weights[k]
            if two_way.shape[0] > 0:
                w = w * two_way[ray]
            weight[f, layer, k] = w
            if j < hits and idx[j] == ray and w > 0.0:  # (no light: the surface stays dark)
                hit_of_slot[f, layer, k] = used
                o_range[used] = np.float64(range_m[ray])
                o_obj[used] = object_index[ray]
                o_relief[used] = relief[j]
                o_b[used] = b[j]
                o_spread[used] = spread[j]
                o_cos_inc[used] = cos_inc[j]
                o_cos_eff[used] = cos_eff[j]
                used += 1
            else:
                hit_of_slot[f, layer, k] = -1
    return used


def echo_slots(
    results: HitResults,
    hits: Hits,
    beam: BeamPattern,
    separation_m: float,
    behind: Sequence[Behind] = (),
    pulses: NDArray[np.intp] | None = None,
) -> dict[str, np.ndarray]:
    """The echo-formation kernel's raw output: per pulse ``p`` (of the chunk, or the
    ``p``-th of ``pulses``), its echoes in slots ``p * width + k`` for ``k < count[p]``,
    in order of true range; ``width`` is ``beam.samples`` a layer of surfaces (the first
    surfaces and each of ``behind``).

    Returns a dict of (P * width,) arrays ``energy, norm, range, relief, spread_plane,
    between, object, dominant, cos_incidence, cos_effective``, the (P,) ``count`` and
    the ``width``.
    """
    samples = beam.samples
    if pulses is None:
        pulses = np.arange(len(hits.range_m) // samples)
    pulses = np.ascontiguousarray(pulses, dtype=np.int64)
    layers = [(results, hits, None), *((b.results, b.hits, b.two_way) for b in behind)]
    width = samples * len(layers)
    # Slot l * samples + k of a pulse: its sub-ray k's surface in layer l, as the
    # specification orders the entries of a pulse (layer by layer, sub-ray by sub-ray).
    shape = (len(pulses), len(layers), samples)
    hit_of_slot = np.empty(shape, dtype=np.int64)
    weight = np.empty(shape)
    capacity = hit_of_slot.size
    per_hit = [np.empty(capacity) for _ in range(4)] + [np.empty(capacity, np.int64)]
    per_hit += [np.empty(capacity) for _ in range(2)]
    range_m, relief_m, backscatter, spread_m, object_index, cos_inc, cos_eff = per_hit
    used = 0
    weights = np.ascontiguousarray(beam.weights, dtype=np.float64)
    for layer, (res, layer_hits, two_way) in enumerate(layers):
        used = _layer_slots(
            layer, pulses, samples, res.idx, weights,
            np.zeros(0) if two_way is None else two_way, layer_hits.range_m,
            layer_hits.object_index, res.relief_m, res.backscatter, res.spread_m,
            res.cos_incidence, res.cos_effective, used, hit_of_slot, weight, *per_hit,
        )  # fmt: skip
    pulse_count = len(pulses)
    names = ("energy", "norm", "range", "relief", "spread_plane", "between")
    # Only slots below a pulse's count are written and read: no need to zero the rest.
    total = pulse_count * width
    out: dict[str, Any] = {
        k: np.empty(total) for k in (*names, "dominant", "cos_incidence", "cos_effective")
    }
    out["object"] = np.empty(total, dtype=np.int64)
    out["count"] = np.zeros(pulse_count, dtype=np.int64)
    _form_echoes(
        width, weight.ravel(), hit_of_slot.ravel(), range_m, relief_m, backscatter, spread_m,
        object_index, cos_inc, cos_eff, separation_m,
        out["count"], *(out[k] for k in names), out["object"], out["dominant"],
        out["cos_incidence"], out["cos_effective"],
    )  # fmt: skip
    out["width"] = width
    return out


def form_echoes(slots: dict[str, Any], pulse_length_m: float) -> Echoes:
    """:func:`simulator.echoes.form_echoes`'s :class:`~simulator.echoes.Echoes` from the
    slots of :func:`echo_slots` (echoes in pulse, then true-range order)."""
    e, width = slots, slots["width"]
    slot_echo = np.arange(len(e["count"]) * width) % width
    used = slot_echo < np.repeat(e["count"], width)
    spread = np.sqrt(e["spread_plane"][used] ** 2 + 4.0 * e["between"][used])
    energy = e["energy"][used]
    return Echoes(
        pulse=np.flatnonzero(used) // width,
        rank=slot_echo[used],
        energy=energy,
        range_true_m=e["range"][used],
        relief_m=e["relief"][used],
        spread_m=spread,
        peak_factor=np.asarray(pulse_peak_factor(pulse_length_m, spread), np.float64),
        object_index=e["object"][used].astype(np.int32),
        energy_fraction=np.where(
            energy > 0.0, e["dominant"][used] / np.maximum(energy, 1e-300), 1.0
        ),
        cos_incidence=e["cos_incidence"][used],
        cos_effective=e["cos_effective"][used],
    )


def echo_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    behind: Sequence[Behind] = (),
    pulses: NDArray[np.intp] | None = None,
) -> Returns:
    """:func:`simulator.echoes.echo_returns` in two kernels: echoes formed per pulse
    (:func:`echo_slots`), then measured, detected and selected per pulse."""
    slots = echo_slots(results, hits, beam, model.separation_m, behind, pulses)
    if pulses is not None:
        pulse_id = np.asarray(pulse_id)[pulses]
    count = len(slots["count"])
    width = model.returns_per_pulse
    out_slot = np.full((count, width), -1, dtype=np.int64)
    out_number = np.zeros((count, width), dtype=np.uint8)
    out_total = np.zeros((count, width), dtype=np.uint8)
    out_range, out_spread, out_peak = (np.zeros((count, width)) for _ in range(3))
    _select_echoes(
        slots["width"], slots["count"], slots["energy"], slots["range"], slots["relief"],
        slots["spread_plane"], slots["between"], np.ascontiguousarray(pulse_id, np.uint64),
        np.uint64(streams.sensor_noise), model.range_noise_m, model.range_resolution_m,
        model.pulse_length_m, model.threshold, model.extinction_per_m, model.range_min_m,
        model.range_max_m, model.return_mode_number, width, out_slot, out_number, out_total,
        out_range, out_spread, out_peak,
    )  # fmt: skip
    flat = np.flatnonzero(out_slot.ravel() >= 0)
    slot = out_slot.ravel()[flat]
    energy = slots["energy"][slot]
    fraction = np.where(energy > 0.0, slots["dominant"][slot] / np.maximum(energy, 1e-300), 1.0)
    return Returns(
        pulse=flat // width,
        range_m=out_range.ravel()[flat],
        intensity=reported_intensity(energy, model),
        object_index=slots["object"][slot].astype(np.int32),
        return_number=out_number.ravel()[flat],
        num_returns=out_total.ravel()[flat],
        range_true_m=slots["range"][slot],
        cos_incidence=slots["cos_incidence"][slot],
        cos_effective=slots["cos_effective"][slot],
        spread_m=out_spread.ravel()[flat],
        peak_factor=out_peak.ravel()[flat],
        energy_fraction=fraction,
    )
