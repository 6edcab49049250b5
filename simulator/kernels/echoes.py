"""Echo formation and return selection for footprint sub-rays, per pulse in one kernel
each (the specification: :func:`simulator.steps.echoes.echo_returns`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..physics import pulse_peak_factor
from ..steps import echoes as _echoes_spec
from ..steps.echoes import DIAGNOSTIC_FIELDS, Behind, Echoes, Returns
from ..steps.hits import HitResults, ReturnModel, Streams, reported_intensity
from .common import U, hash_normal, measured_range, mix64, peak_factor, received_peak
from .common import reported_intensity as intensity_of

__all__ = [
    "echo_returns",
    "echo_slots",
    "entry_slots",
    "form_echoes",
    "form_entry_echoes",
    "merge_returns",
    "see_through_returns",
    "surface_returns",
]


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
        keys = np.zeros(width)  # the ranges of the sorted slots
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            _echoes_of_pulse(
                p, width, weights, hit_of_slot, rng, relief, b, spread, obj, cos_inc,
                cos_eff, separation, count, e_energy, e_norm, e_range, e_relief,
                e_spread_plane, e_between, e_obj, e_dom, e_cos_inc, e_cos_eff, order, hit,
                objs, obj_e, obj_w, obj_wr, keys,
            )  # fmt: skip


@njit(inline="always", cache=True)
def _echoes_of_pulse(  # type: ignore[no-untyped-def]
    p, width, weights, hit_of_slot, rng, relief, b, spread, obj, cos_inc, cos_eff,
    separation, count, e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between,
    e_obj, e_dom, e_cos_inc, e_cos_eff, order, hit, objs, obj_e, obj_w, obj_wr, keys,
):  # fmt: skip
    """One pulse of :func:`_form_echoes` (``order`` to ``keys`` are scratch)."""
    base = p * width
    n = 0
    for k in range(width):  # insertion sort of the slots that hit, by range (stable)
        h = hit_of_slot[base + k]
        if h >= 0:
            r = rng[h]
            j = n
            while j > 0 and keys[j - 1] > r:  # (the ranges at hand: no load through hit)
                order[j], hit[j], keys[j] = order[j - 1], hit[j - 1], keys[j - 1]
                j -= 1
            order[j], hit[j], keys[j] = k, h, r
            n += 1
    echo = -1
    start = 0
    prev = 0.0
    for q in range(n + 1):
        close = q == n
        if not close:
            r = keys[q]
            close = q > 0 and r - prev > separation
        if close and echo >= 0:  # finish echo `echo` over sub-rays start..q-1
            _finish_echo(
                base + echo, start, q, hit, order, base, weights, rng, relief, b, spread,
                obj, cos_inc, cos_eff, objs, obj_e, obj_w, obj_wr, e_energy, e_norm,
                e_range, e_relief, e_spread_plane, e_between, e_obj, e_dom, e_cos_inc,
                e_cos_eff,
            )  # fmt: skip
        if q == n:
            break
        if q == 0 or close:
            echo += 1
            start = q
        prev = r
    count[p] = echo + 1


@njit(inline="always", cache=True)
def _finish_echo(  # type: ignore[no-untyped-def]
    slot, start, stop, entry, weight_at, weight_base, weights, rng, relief, b, spread, obj,
    cos_inc, cos_eff, objs, obj_e, obj_w, obj_wr, e_energy, e_norm, e_range, e_relief,
    e_spread_plane, e_between, e_obj, e_dom, e_cos_inc, e_cos_eff,
):  # fmt: skip
    """Accumulate one echo into ``slot``: the entries ``entry[start:stop]`` (indices of the
    per-entry inputs), entry ``t`` weighing ``weights[weight_base + weight_at[t]]``, summed
    in the order the specification sums them (``objs`` to ``obj_wr`` are scratch)."""
    energy = 0.0
    for t in range(start, stop):
        energy += weights[weight_base + weight_at[t]] * b[entry[t]]
    wsum = wr = wrel = wsp = wci = wce = 0.0
    m = 0
    for t in range(start, stop):
        i = entry[t]
        w = weights[weight_base + weight_at[t]]
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
        dr = obj_wr[f] / max(obj_w[f], 1e-300) - mean_r
        var += obj_w[f] * (dr * dr)  # x * x, as numpy squares (pow may differ)
        # Most energy; on a tie the higher object index, as the numpy spec.
        if obj_e[f] >= obj_e[best]:
            best = f
    e_energy[slot] = energy
    e_norm[slot] = wsum
    e_range[slot] = mean_r
    e_relief[slot] = wrel / wsum
    e_spread_plane[slot] = wsp / wsum
    e_between[slot] = var / max(wsum, 1e-300)
    e_obj[slot] = objs[best]
    e_dom[slot] = obj_e[best]
    e_cos_inc[slot] = wci / wsum
    e_cos_eff[slot] = wce / wsum


@njit(parallel=True, cache=True, nogil=True)
def _select_echoes(  # type: ignore[no-untyped-def]
    width, count, energy, range_true, relief, spread_plane, between, pulse_id,
    noise_seed, noise_m, resolution, pulse_m, threshold, ext, rmin, rmax, mode,
    max_returns, out_slot, out_number, out_total, out_range, out_spread, out_peak,
):  # fmt: skip
    """Per pulse: measure its echoes (range jitter by pulse and echo rank,
    quantisation, detection, as :func:`simulator.steps.echoes.echo_returns`) and pick
    the reported ones (as :func:`simulator.steps.echoes.select_returns`), in range order
    into slots ``p * R ...`` of the (P, R) outputs (slot -1: none)."""
    pulses = count.shape[0]
    blocks = min(pulses, 256)  # scratch arrays once a block of pulses, not once a pulse
    for block in prange(blocks):
        scratch = np.empty((4, width))
        order = np.empty(width, dtype=np.int64)  # detected echoes by measured range
        detected = np.empty(width, dtype=np.bool_)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            _select_of_pulse(
                p, count[p], p * width, energy, range_true, relief, spread_plane, between,
                mix64(noise_seed + pulse_id[p]), noise_m, resolution, pulse_m, threshold,
                ext, rmin, rmax, mode, max_returns, out_slot, out_number, out_total,
                out_range, out_spread, out_peak, scratch, order, detected,
            )  # fmt: skip


@njit(inline="always", cache=True)
def _insert_by_range(order, m, rm, k):  # type: ignore[no-untyped-def]
    """Echo ``k`` inserted among the ``m`` in ``order`` (sorted by measured range
    ``rm``), after those of equal range (a stable insertion): returns ``m + 1``."""
    j = m
    r = rm[k]
    while j > 0 and rm[order[j - 1]] > r:
        order[j] = order[j - 1]
        j -= 1
    order[j] = k
    return m + 1


@njit(inline="always", cache=True)
def _report_echoes(  # type: ignore[no-untyped-def]
    p, base, n, m, order, detected, received, rm, spread, peak, mode, max_returns,
    out_slot, out_number, out_total, out_range, out_spread, out_peak,
):  # fmt: skip
    """The reported returns of pulse ``p`` (the return mode's choice, as
    :func:`simulator.steps.echoes.select_returns`) among its ``n`` echoes, ``m`` of them
    detected (``order``: their indices by measured range; ``received``, ``rm``, ``spread``
    and ``peak``: each echo's), into row ``p`` of the outputs, slot ``base + k`` for echo
    ``k``: numbered in range order. The strongest and second strongest are taken in echo
    order on ties (a stable sort). ``detected`` is (n or more,) bool scratch. Returns how
    many."""
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
    return out


@njit(inline="always", cache=True)
def _select_of_pulse(  # type: ignore[no-untyped-def]
    p, n, base, energy, range_true, relief, spread_plane, between, key0, noise_m,
    resolution, pulse_m, threshold, ext, rmin, rmax, mode, max_returns, out_slot,
    out_number, out_total, out_range, out_spread, out_peak, scratch, order, detected,
):  # fmt: skip
    """One pulse of :func:`_select_echoes`: its ``n`` echoes are in slots ``base ...``,
    ``key0`` is the hash key of its first echo's jitter, and its returns go to row ``p``
    of the outputs (``scratch``, (4, n or more) float64, ``order`` and ``detected`` are
    scratch). Returns how many."""
    rm, received, spread, peak = scratch[0], scratch[1], scratch[2], scratch[3]
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
            m = _insert_by_range(order, m, rm, k)
    if m == 0:
        return 0
    return _report_echoes(
        p, base, n, m, order, detected, received, rm, spread, peak, mode, max_returns,
        out_slot, out_number, out_total, out_range, out_spread, out_peak,
    )  # fmt: skip


@njit(cache=True, nogil=True)
def _layer_slots(  # type: ignore[no-untyped-def]
    layer, pulses, samples, idx, rays, weights, two_way, range_m, object_index, relief, b,
    spread, cos_inc, cos_eff, used, hit_of_slot, weight, o_range, o_relief, o_b, o_spread,
    o_obj, o_cos_inc, o_cos_eff,
):  # fmt: skip
    """Layer ``layer`` of the slots of the pulses ``pulses`` (increasing): each sub-ray's
    share of the energy (its beam weight times the two-way transmittance in front, when
    ``two_way`` is not empty) and its hit there, if any and lit: the hit's per-hit inputs
    are appended to the ``o_*`` arrays from ``used`` on. Returns the new ``used``.

    Hit ``j`` is of the layer's row ``idx[j]`` (increasing), which is the cast ray
    ``rays[idx[j]]`` (``rays`` empty: the ray ``idx[j]``); ``range_m``,
    ``object_index`` and ``two_way`` are by row, the other inputs by hit."""
    j = 0
    hits = idx.shape[0]
    by_row = rays.shape[0] > 0
    for f in range(pulses.shape[0]):
        base = pulses[f] * samples
        for k in range(samples):
            ray = base + k
            while j < hits and (rays[idx[j]] if by_row else idx[j]) < ray:  # a merge walk
                j += 1
            w = weights[k]
            met = j < hits and (rays[idx[j]] if by_row else idx[j]) == ray
            if met:
                row = idx[j]
                if two_way.shape[0] > 0:
                    w = w * two_way[row]
            weight[f, layer, k] = w
            if met and w > 0.0:  # (no light: the surface stays dark)
                hit_of_slot[f, layer, k] = used
                o_range[used] = np.float64(range_m[row])
                o_obj[used] = object_index[row]
                o_relief[used] = relief[j]
                o_b[used] = b[j]
                o_spread[used] = spread[j]
                o_cos_inc[used] = cos_inc[j]
                o_cos_eff[used] = cos_eff[j]
                used += 1
            else:
                hit_of_slot[f, layer, k] = -1
    return used


@njit(parallel=True, cache=True, nogil=True)
def _every_ray_slots(  # type: ignore[no-untyped-def]
    idx, weights, ray_range, ray_object, hit_of_slot, weight, range_m, object_index
):  # fmt: skip
    """The slots of a chunk whose every ray is a slot (one layer of surfaces, every
    sub-ray lit): slot ``s`` is ray ``s``, of weight ``weights[s % samples]`` and hit
    row ``j`` where ``idx[j] == s`` (-1: a miss); each hit's range (float64) and object
    gathered from its ray."""
    samples = weights.shape[0]
    for s in prange(hit_of_slot.shape[0]):
        hit_of_slot[s] = -1
        weight[s] = weights[s % samples]
    for j in prange(idx.shape[0]):
        r = idx[j]
        hit_of_slot[r] = j
        range_m[j] = np.float64(ray_range[r])
        object_index[j] = np.int64(ray_object[r])


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
    none = np.zeros(0, dtype=np.int64)
    layers = [(none, results, hits, None)]
    layers += [(b.rays, b.results, b.hits, b.two_way) for b in behind]
    width = samples * len(layers)
    # Slot l * samples + k of a pulse: its sub-ray k's surface in layer l, as the
    # specification orders the entries of a pulse (layer by layer, sub-ray by sub-ray).
    shape = (len(pulses), len(layers), samples)
    hit_of_slot = np.empty(shape, dtype=np.int64)
    weight = np.empty(shape)
    weights = np.ascontiguousarray(beam.weights, dtype=np.float64)
    if not behind and len(pulses) * samples == len(hits.range_m) and np.all(weights > 0.0):
        # Every ray of the chunk, one layer, every sub-ray lit: hit j is the slot of its
        # ray, and the per-hit inputs are the hits' own, as _layer_slots lays them out.
        idx = np.ascontiguousarray(results.idx, dtype=np.int64)
        range_m, object_index = np.empty(len(idx)), np.empty(len(idx), dtype=np.int64)
        _every_ray_slots(idx, weights, hits.range_m, hits.object_index,
                         hit_of_slot.reshape(-1), weight.reshape(-1), range_m,
                         object_index)  # fmt: skip
        relief_m, backscatter, spread_m, cos_inc, cos_eff = (
            np.ascontiguousarray(v, dtype=np.float64)
            for v in (results.relief_m, results.backscatter, results.spread_m,
                      results.cos_incidence, results.cos_effective)
        )  # fmt: skip
    else:
        capacity = hit_of_slot.size
        per_hit = [np.empty(capacity) for _ in range(4)] + [np.empty(capacity, np.int64)]
        per_hit += [np.empty(capacity) for _ in range(2)]
        range_m, relief_m, backscatter, spread_m, object_index, cos_inc, cos_eff = per_hit
        used = 0
        for layer, (rays, res, layer_hits, two_way) in enumerate(layers):
            used = _layer_slots(
                layer, pulses, samples, res.idx, np.ascontiguousarray(rays, np.int64),
                weights, np.zeros(0) if two_way is None else two_way, layer_hits.range_m,
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


def _echoes_in_slots(
    slots: dict[str, Any],
    used: NDArray[Any],
    pulse: NDArray[np.int64],
    rank: NDArray[np.int64],
    pulse_length_m: float,
) -> Echoes:
    """The :class:`~simulator.steps.echoes.Echoes` in the ``used`` slots (a mask or indices) of
    a slot dict (:func:`echo_slots`, :func:`entry_slots`), of pulses ``pulse``, ranked
    ``rank`` within them."""
    spread = np.sqrt(slots["spread_plane"][used] ** 2 + 4.0 * slots["between"][used])
    energy = slots["energy"][used]
    return Echoes(
        pulse=pulse,
        rank=rank,
        energy=energy,
        range_true_m=slots["range"][used],
        relief_m=slots["relief"][used],
        spread_m=spread,
        peak_factor=np.asarray(pulse_peak_factor(pulse_length_m, spread), dtype=np.float64),
        object_index=slots["object"][used].astype(np.int32),
        energy_fraction=np.where(
            energy > 0.0, slots["dominant"][used] / np.maximum(energy, 1e-300), 1.0
        ),
        cos_incidence=slots["cos_incidence"][used],
        cos_effective=slots["cos_effective"][used],
    )


def _selection(count: int, width: int) -> tuple[NDArray[Any], ...]:
    """The selection kernels' outputs for ``count`` pulses of up to ``width`` returns:
    slot (-1: none), return number, number of returns, range, spread and peak factor,
    each (count, width)."""
    out_slot = np.full((count, width), -1, dtype=np.int64)
    out_number = np.zeros((count, width), dtype=np.uint8)
    out_total = np.zeros((count, width), dtype=np.uint8)
    out_range, out_spread, out_peak = (np.zeros((count, width)) for _ in range(3))
    return out_slot, out_number, out_total, out_range, out_spread, out_peak


def _selected_returns(
    slots: dict[str, Any],
    selection: tuple[NDArray[Any], ...],
    pulse_id: NDArray[np.uint64],
    model: ReturnModel,
) -> Returns:
    """The :class:`~simulator.steps.echoes.Returns` a selection kernel chose (``selection`` as
    :func:`_selection` made it) from the echoes in ``slots``, of pulses ``pulse_id``."""
    out_slot, out_number, out_total, out_range, out_spread, out_peak = selection
    width = out_slot.shape[1]
    flat = np.flatnonzero(out_slot.ravel() >= 0)
    slot = out_slot.ravel()[flat]
    energy = slots["energy"][slot]
    range_m = out_range.ravel()[flat]
    ids = np.asarray(pulse_id, dtype=np.uint64)[flat // width]
    fraction = np.where(energy > 0.0, slots["dominant"][slot] / np.maximum(energy, 1e-300), 1.0)
    return Returns(
        pulse=flat // width,
        range_m=range_m,
        intensity=reported_intensity(energy, model, range_m, ids),
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


def form_echoes(slots: dict[str, Any], pulse_length_m: float) -> Echoes:
    """:func:`simulator.steps.echoes.form_echoes`'s :class:`~simulator.steps.echoes.Echoes` from the
    slots of :func:`echo_slots` (echoes in pulse, then true-range order)."""
    e, width = slots, slots["width"]
    slot_echo = np.arange(len(e["count"]) * width) % width
    used = slot_echo < np.repeat(e["count"], width)
    return _echoes_in_slots(e, used, np.flatnonzero(used) // width, slot_echo[used], pulse_length_m)


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
    """:func:`simulator.steps.echoes.echo_returns` in two kernels: echoes formed per pulse
    (:func:`echo_slots`), then measured, detected and selected per pulse."""
    slots = echo_slots(results, hits, beam, model.separation_m, behind, pulses)
    if pulses is not None:
        pulse_id = np.asarray(pulse_id)[pulses]
    count = len(slots["count"])
    width = model.returns_per_pulse
    selection = _selection(count, width)
    _select_echoes(
        slots["width"], slots["count"], slots["energy"], slots["range"], slots["relief"],
        slots["spread_plane"], slots["between"], np.ascontiguousarray(pulse_id, np.uint64),
        np.uint64(streams.sensor_noise), model.range_noise_m, model.range_resolution_m,
        model.pulse_length_m, model.threshold, model.extinction_args, model.range_min_m,
        model.range_max_m, model.return_mode_number, width, *selection,
    )  # fmt: skip
    return _selected_returns(slots, selection, pulse_id, model)


@njit(parallel=True, cache=True, nogil=True)
def _see_through_returns(  # type: ignore[no-untyped-def]
    idx, keep, range_meas, intensity, relief, b, spread, peak, cos_inc, cos_eff, range_true,
    obj, row_start, l_rays, l_two_way, l_range, l_obj, l_hit, l_relief, l_b, l_spread,
    l_cos_inc, l_cos_eff, weight, separation, pulse_id, noise_seed, noise_m, resolution,
    pulse_m, threshold, ext, rmin, rmax, mode, max_returns, iscale, imax, istep, response,
    diagnostics, block_count, o_pulse, o_number, o_total, o_range, o_intensity, o_obj, o_range_true,
    o_cos_inc, o_cos_eff, o_spread, o_peak, o_fraction,
):  # fmt: skip
    """Per pulse of a chunk cast one ray a pulse: the echoes of every surface its ray met
    when it passed a see-through one (formed as :func:`_form_echoes`, selected as
    :func:`_select_echoes`), else its one hit if detected. Block ``b`` of the pulses
    writes its ``block_count[b]`` returns to the (P * R,) outputs from ``p0 * R`` on, its
    first pulse ``p0``, in pulse and range order.

    Hit ``j`` of the first surfaces is of ray ``idx[j]`` (increasing); ``range_true`` and
    ``obj`` are by ray. Layer ``l`` behind has the rows ``row_start[l]`` to
    ``row_start[l + 1]`` of the ``l_*`` by-row arrays (its rays increasing), and
    ``l_hit`` the hit of each row among the ``l_*`` by-hit arrays (-1: none).

    The loop body is one call of :func:`_see_through_block`, a plain function the per-pulse
    helpers are inlined into: inlined into this parallel loop instead, numba's parfor passes
    over their code made this kernel take 16 s to compile, not 9 s (docs/performance.md)."""
    pulses = range_true.shape[0]
    blocks = block_count.shape[0]
    for block in prange(blocks):
        block_count[block] = _see_through_block(
            block * pulses // blocks, (block + 1) * pulses // blocks, idx, keep, range_meas,
            intensity, relief, b, spread, peak, cos_inc, cos_eff, range_true, obj, row_start,
            l_rays, l_two_way, l_range, l_obj, l_hit, l_relief, l_b, l_spread, l_cos_inc,
            l_cos_eff, weight, separation, pulse_id, noise_seed, noise_m, resolution, pulse_m,
            threshold, ext, rmin, rmax, mode, max_returns, iscale, imax, istep, response,
            diagnostics, o_pulse, o_number, o_total, o_range, o_intensity, o_obj,
            o_range_true, o_cos_inc, o_cos_eff, o_spread, o_peak, o_fraction,
        )  # fmt: skip


@njit(cache=True, nogil=True)
def _see_through_block(  # type: ignore[no-untyped-def]
    p0, p1, idx, keep, range_meas, intensity, relief, b, spread, peak, cos_inc, cos_eff,
    range_true, obj, row_start, l_rays, l_two_way, l_range, l_obj, l_hit, l_relief, l_b,
    l_spread, l_cos_inc, l_cos_eff, weight, separation, pulse_id, noise_seed, noise_m,
    resolution, pulse_m, threshold, ext, rmin, rmax, mode, max_returns, iscale, imax, istep,
    response, diagnostics, o_pulse, o_number, o_total, o_range, o_intensity, o_obj,
    o_range_true, o_cos_inc, o_cos_eff, o_spread, o_peak, o_fraction,
):  # fmt: skip
    """The pulses ``p0`` to ``p1`` of :func:`_see_through_returns` (one block): writes
    their returns from ``p0 * max_returns`` on and returns how many."""
    layers = row_start.shape[0] - 1
    width = layers + 1
    hits = idx.shape[0]
    # scratch: one pulse's surfaces (slot l: layer l) and its echoes
    f8 = np.zeros((20, width))
    w_slot, s_rng, s_rel, s_b, s_spr = f8[0], f8[1], f8[2], f8[3], f8[4]
    s_ci, s_ce, e_energy, e_norm, e_range = f8[5], f8[6], f8[7], f8[8], f8[9]
    e_relief, e_sp, e_between, e_dom, e_ci = f8[10], f8[11], f8[12], f8[13], f8[14]
    e_ce, obj_e, obj_w, obj_wr, keys = f8[15], f8[16], f8[17], f8[18], f8[19]
    i8 = np.zeros((6, width), dtype=np.int64)
    hit_of_slot, s_obj, e_obj, order, hit, objs = i8[0], i8[1], i8[2], i8[3], i8[4], i8[5]
    count = np.zeros(1, dtype=np.int64)
    scratch = np.empty((4, width))
    s_order = np.empty(width, dtype=np.int64)
    detected = np.empty(width, dtype=np.bool_)
    out_slot = np.empty((1, max_returns), dtype=np.int64)
    out_number = np.empty((1, max_returns), dtype=np.uint8)
    out_total = np.empty((1, max_returns), dtype=np.uint8)
    out_range, out_spread, out_peak = (
        np.empty((1, max_returns)),
        np.empty((1, max_returns)),
        np.empty((1, max_returns)),
    )
    # merge walks over the first surfaces' hits and the first layer's rays
    at = p0 * max_returns  # the block's returns from here, to be moved together
    j = np.searchsorted(idx, p0)
    f = row_start[0] + np.searchsorted(l_rays[row_start[0] : row_start[1]], p0)
    for p in range(p0, p1):
        while j < hits and idx[j] < p:
            j += 1
        if j >= hits or idx[j] != p:
            continue  # a miss: no surface at all
        while f < row_start[1] and l_rays[f] < p:
            f += 1
        if f >= row_start[1] or l_rays[f] != p:  # one surface: the single ray's return
            if keep[j]:
                o_pulse[at] = p
                o_number[at] = 1
                o_total[at] = 1
                o_range[at] = range_meas[j]
                o_intensity[at] = intensity[j]
                o_obj[at] = obj[p]
                if diagnostics:
                    o_range_true[at] = np.float64(range_true[p])
                    o_cos_inc[at] = cos_inc[j]
                    o_cos_eff[at] = cos_eff[j]
                    o_spread[at] = spread[j]
                    o_peak[at] = peak[j]
                    o_fraction[at] = 1.0
                at += 1
            continue
        # Its surfaces, slot by slot as _layer_slots lays them out.
        w_slot[0] = weight
        hit_of_slot[0] = 0 if weight > 0.0 else -1
        s_rng[0] = np.float64(range_true[p])
        s_obj[0] = obj[p]
        s_rel[0], s_b[0], s_spr[0] = relief[j], b[j], spread[j]
        s_ci[0], s_ce[0] = cos_inc[j], cos_eff[j]
        used = 1 if weight > 0.0 else 0
        row = f
        for layer in range(layers):
            if layer > 0 and row >= 0:  # (not in a layer: in none behind it)
                a, z = row_start[layer], row_start[layer + 1]
                row = a + np.searchsorted(l_rays[a:z], p)
                row = row if row < z and l_rays[row] == p else -1
            w = weight
            hit_of_slot[layer + 1] = -1
            if row >= 0:
                w = w * l_two_way[row]
                h = l_hit[row]
                if h >= 0 and w > 0.0:
                    hit_of_slot[layer + 1] = used
                    s_rng[used] = np.float64(l_range[row])
                    s_obj[used] = l_obj[row]
                    s_rel[used], s_b[used], s_spr[used] = l_relief[h], l_b[h], l_spread[h]
                    s_ci[used], s_ce[used] = l_cos_inc[h], l_cos_eff[h]
                    used += 1
            w_slot[layer + 1] = w
        _echoes_of_pulse(
            0, width, w_slot, hit_of_slot, s_rng, s_rel, s_b, s_spr, s_obj, s_ci, s_ce,
            separation, count, e_energy, e_norm, e_range, e_relief, e_sp, e_between,
            e_obj, e_dom, e_ci, e_ce, order, hit, objs, obj_e, obj_w, obj_wr, keys,
        )  # fmt: skip
        n_out = _select_of_pulse(
            0, count[0], 0, e_energy, e_range, e_relief, e_sp, e_between,
            mix64(noise_seed + pulse_id[p]), noise_m, resolution, pulse_m, threshold,
            ext, rmin, rmax, mode, max_returns, out_slot, out_number, out_total,
            out_range, out_spread, out_peak, scratch, s_order, detected,
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
            if diagnostics:
                o_range_true[at + t] = e_range[k]
                o_cos_inc[at + t] = e_ci[k]
                o_cos_eff[at + t] = e_ce[k]
                o_spread[at + t] = out_spread[0, t]
                o_peak[at + t] = out_peak[0, t]
                o_fraction[at + t] = e_dom[k] / max(energy, 1e-300) if energy > 0.0 else 1.0
        at += n_out
    return at - p0 * max_returns


def _joined(arrays: list[NDArray[Any]], dtype: Any) -> NDArray[Any]:
    """The arrays one after the other as one contiguous array of ``dtype`` for a kernel
    to read (one array: itself, not copied)."""
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0], dtype=dtype)
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)


def see_through_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    behind: Sequence[Behind] = (),
    *,
    diagnostics: bool = False,
) -> Returns:
    """:func:`simulator.steps.echoes.see_through_returns` in one kernel, a pulse at a time."""
    if beam.samples != 1:
        raise ValueError(f"see_through_returns is for one ray a pulse, not {beam.samples}")
    pulse_count = len(hits.range_m)
    width = model.returns_per_pulse
    size = pulse_count * width
    blocks = max(1, min(pulse_count, 256))
    block_count = np.zeros(blocks, dtype=np.int64)
    o_pulse = np.empty(size, dtype=np.int64)
    o_number, o_total = np.empty(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)
    o_range, o_intensity = np.empty(size), np.empty(size)
    o_obj = np.empty(size, dtype=np.int32)
    diag = [np.empty(size if diagnostics else 0) for _ in range(6)]
    row_start = np.zeros(len(behind) + 1, dtype=np.int64)
    row_start[1:] = np.cumsum([len(b.rays) for b in behind])
    hit_start = np.cumsum([0] + [len(b.results.idx) for b in behind])

    l_hit = np.full(row_start[-1], -1, dtype=np.int64)
    for k, b in enumerate(behind):
        l_hit[row_start[k] + b.results.idx] = hit_start[k] + np.arange(len(b.results.idx))
    res = [b.results for b in behind]
    _see_through_returns(
        results.idx, results.keep, results.range_m, results.intensity, results.relief_m,
        results.backscatter, results.spread_m, results.peak_factor, results.cos_incidence,
        results.cos_effective, hits.range_m, hits.object_index, row_start,
        _joined([b.rays for b in behind], np.int64),
        _joined([b.two_way for b in behind], np.float64),
        _joined([b.hits.range_m for b in behind], np.float32),
        _joined([b.hits.object_index for b in behind], np.int32), l_hit,
        *(_joined([getattr(r, name) for r in res], np.float64)
          for name in ("relief_m", "backscatter", "spread_m", "cos_incidence", "cos_effective")),
        float(beam.weights[0]), model.separation_m, np.ascontiguousarray(pulse_id, np.uint64),
        np.uint64(streams.sensor_noise), model.range_noise_m, model.range_resolution_m,
        model.pulse_length_m, model.threshold, model.extinction_args, model.range_min_m,
        model.range_max_m, model.return_mode_number, width, model.intensity_scale,
        model.intensity_max, model.intensity_step, model.response_args, diagnostics,
        block_count, o_pulse, o_number,
        o_total, o_range, o_intensity, o_obj, *diag,
    )  # fmt: skip
    # Each block's returns, moved together into one table.
    src = np.arange(blocks, dtype=np.int64) * pulse_count // blocks * width
    dst = np.concatenate([[0], np.cumsum(block_count)])

    def packed(values: NDArray[Any]) -> NDArray[Any]:
        out = np.empty(dst[-1], dtype=values.dtype)
        _move_blocks(values, src, block_count, dst, out)
        return out

    out = Returns(
        pulse=packed(o_pulse),
        range_m=packed(o_range),
        intensity=packed(o_intensity),
        object_index=packed(o_obj),
        return_number=packed(o_number),
        num_returns=packed(o_total),
    )
    if diagnostics:
        names = ("range_true_m", "cos_incidence", "cos_effective", "spread_m", "peak_factor",
                 "energy_fraction")  # fmt: skip
        for name, values in zip(names, diag, strict=True):
            setattr(out, name, packed(values))
    return out


@njit(parallel=True, cache=True, nogil=True)
def _move_blocks(values, src, count, dst, out):  # type: ignore[no-untyped-def]
    """``out[dst[b] : dst[b] + count[b]] = values[src[b] : src[b] + count[b]]`` for every
    block ``b``."""
    for b in prange(count.shape[0]):
        for k in range(count[b]):
            out[dst[b] + k] = values[src[b] + k]


@njit(parallel=True, cache=True, nogil=True)
def _form_entries(  # type: ignore[no-untyped-def]
    starts, weight, rng, relief, b, spread, obj, cos_inc, cos_eff, separation, count,
    e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between, e_obj, e_dom,
    e_cos_inc, e_cos_eff,
):  # fmt: skip
    """:func:`simulator.steps.echoes.form_echoes` per pulse over entries sorted by pulse
    (pulse ``p``'s are ``starts[p]`` to ``starts[p + 1]``, in the specification's order):
    sorted by range (stable), split at gaps, each echo accumulated in the order the
    specification sums; echo ``k`` of pulse ``p`` goes to slot ``starts[p] + k``."""
    pulses = starts.shape[0] - 1
    blocks = min(pulses, 256)
    widest = 0
    for p in range(pulses):
        widest = max(widest, starts[p + 1] - starts[p])
    for block in prange(blocks):
        order = np.zeros(widest, dtype=np.int64)  # the pulse's entries by range
        objs = np.zeros(widest, dtype=np.int64)
        obj_e = np.zeros(widest)
        obj_w = np.zeros(widest)
        obj_wr = np.zeros(widest)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            base = starts[p]
            n = starts[p + 1] - base
            for k in range(n):  # insertion sort by range, stable
                i = base + k
                j = k
                while j > 0 and rng[order[j - 1]] > rng[i]:
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = i
            echo = -1
            start = 0
            prev = 0.0
            for q in range(n + 1):
                close = q == n
                r = 0.0
                if not close:
                    r = rng[order[q]]
                    close = q > 0 and r - prev > separation
                if close and echo >= 0:  # finish echo `echo` over entries start..q-1
                    _finish_echo(
                        base + echo, start, q, order, order, 0, weight, rng, relief, b,
                        spread, obj, cos_inc, cos_eff, objs, obj_e, obj_w, obj_wr, e_energy,
                        e_norm, e_range, e_relief, e_spread_plane, e_between, e_obj, e_dom,
                        e_cos_inc, e_cos_eff,
                    )  # fmt: skip
                if q == n:
                    break
                if q == 0 or close:
                    echo += 1
                    start = q
                prev = r
            count[p] = echo + 1


@njit(parallel=True, cache=True, nogil=True)
def _select_entries(  # type: ignore[no-untyped-def]
    starts, count, widest, energy, range_true, relief, spread_plane, between, pulse_id,
    noise_seed, noise_m, resolution, pulse_m, threshold, ext, rmin, rmax, mode,
    max_returns, out_slot, out_number, out_total, out_range, out_spread, out_peak,
):  # fmt: skip
    """:func:`_select_echoes` of echoes in the slots of :func:`_form_entries` (pulse
    ``p``'s from ``starts[p]`` on)."""
    pulses = count.shape[0]
    blocks = min(pulses, 256)
    for block in prange(blocks):
        scratch = np.empty((4, widest))
        order = np.empty(widest, dtype=np.int64)
        detected = np.empty(widest, dtype=np.bool_)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            _select_of_pulse(
                p, count[p], starts[p], energy, range_true, relief, spread_plane, between,
                mix64(noise_seed + pulse_id[p]), noise_m, resolution, pulse_m, threshold,
                ext, rmin, rmax, mode, max_returns, out_slot, out_number, out_total,
                out_range, out_spread, out_peak, scratch, order, detected,
            )  # fmt: skip


def entry_slots(
    pulse: NDArray[np.int64],
    weight: NDArray[np.float64],
    range_m: NDArray[np.float64],
    relief_m: NDArray[np.float64],
    backscatter: NDArray[np.float64],
    spread_m: NDArray[np.float64],
    object_index: NDArray[np.int32],
    cos_incidence: NDArray[np.float64],
    cos_effective: NDArray[np.float64],
    separation_m: float,
    pulses: int,
) -> dict[str, Any]:
    """The echoes :func:`_form_entries` forms from the entries of ``pulses`` pulses: a
    dict of (N,) slot arrays ``energy, norm, range, relief, spread_plane, between,
    object, dominant, cos_incidence, cos_effective`` (pulse ``p``'s ``count[p]`` echoes
    in slots ``starts[p] ...``, by true range), the (P + 1,) ``starts``, the (P,)
    ``count`` and the ``widest`` pulse's entries."""
    by_pulse = np.argsort(pulse, kind="stable")
    per_pulse = np.bincount(pulse, minlength=pulses)
    starts = np.zeros(pulses + 1, dtype=np.int64)
    np.cumsum(per_pulse, out=starts[1:])

    def sorted_(values: NDArray[Any], dtype: Any) -> NDArray[Any]:
        return np.ascontiguousarray(values[by_pulse], dtype=dtype)

    columns = [sorted_(v, np.float64) for v in (weight, range_m, relief_m, backscatter, spread_m)]
    obj = sorted_(object_index, np.int64)
    cos_inc, cos_eff = sorted_(cos_incidence, np.float64), sorted_(cos_effective, np.float64)
    total = len(pulse)
    names = ("energy", "norm", "range", "relief", "spread_plane", "between")
    out: dict[str, Any] = {
        k: np.empty(total) for k in (*names, "dominant", "cos_incidence", "cos_effective")
    }
    out["object"] = np.empty(total, dtype=np.int64)
    out["count"] = np.zeros(pulses, dtype=np.int64)
    _form_entries(
        starts, *columns, obj, cos_inc, cos_eff, float(separation_m), out["count"],
        *(out[k] for k in names), out["object"], out["dominant"], out["cos_incidence"],
        out["cos_effective"],
    )  # fmt: skip
    out["starts"] = starts
    out["widest"] = int(per_pulse.max()) if pulses else 0
    return out


def form_entry_echoes(
    pulse: NDArray[np.int64],
    weight: NDArray[np.float64],
    range_m: NDArray[np.float64],
    relief_m: NDArray[np.float64],
    backscatter: NDArray[np.float64],
    spread_m: NDArray[np.float64],
    object_index: NDArray[np.int32],
    cos_incidence: NDArray[np.float64],
    cos_effective: NDArray[np.float64],
    separation_m: float,
    pulse_length_m: float,
) -> Echoes:
    """:func:`simulator.steps.echoes.form_echoes` (the same parameters and echoes, value for
    value) with the grouping in one parallel kernel over pulses (:func:`entry_slots`)."""
    n_pulses = int(pulse.max()) + 1 if len(pulse) else 0
    out = entry_slots(pulse, weight, range_m, relief_m, backscatter, spread_m, object_index,
                      cos_incidence, cos_effective, separation_m, n_pulses)  # fmt: skip
    count, starts = out["count"], out["starts"]
    echo_pulse = np.repeat(np.arange(n_pulses, dtype=np.int64), count)
    rank = np.arange(len(echo_pulse)) - np.repeat(np.cumsum(count) - count, count)
    used = starts[:-1][echo_pulse] + rank
    return _echoes_in_slots(out, used, echo_pulse, rank.astype(np.int64), pulse_length_m)


def surface_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    *,
    behind: Sequence[Behind] = (),
    shadow: NDArray[np.float64] | None = None,
    extra: Sequence[tuple[NDArray, ...]] = (),
    broad: Sequence[tuple[Echoes, NDArray[np.uint64]]] = (),
) -> Returns:
    """:func:`simulator.steps.echoes.surface_returns` with its echoes formed in a parallel
    kernel (:func:`form_entry_echoes`); the entries, the broad echoes and the report as
    the specification."""
    pulse_id = np.asarray(pulse_id, dtype=np.uint64)
    columns = _echoes_spec.surface_entries(
        results, hits, beam, behind=behind, shadow=shadow, extra=extra
    )
    if broad:
        echoes = form_entry_echoes(*columns, model.separation_m, model.pulse_length_m)
        return _echoes_spec.report_surface_echoes(echoes, pulse_id, model, streams, broad)
    # No broad echo: the echoes measured, detected and selected in their slots.
    slots = entry_slots(*columns, model.separation_m, len(pulse_id))
    count = len(pulse_id)
    width = model.returns_per_pulse
    selection = _selection(count, width)
    _select_entries(
        slots["starts"], slots["count"], max(slots["widest"], 1), slots["energy"],
        slots["range"], slots["relief"], slots["spread_plane"], slots["between"], pulse_id,
        np.uint64(streams.sensor_noise), model.range_noise_m, model.range_resolution_m,
        model.pulse_length_m, model.threshold, model.extinction_args, model.range_min_m,
        model.range_max_m, model.return_mode_number, width, *selection,
    )  # fmt: skip
    return _selected_returns(slots, selection, pulse_id, model)


@njit(cache=True, nogil=True)
def _merged_order(a_pulse, b_pulse, order):  # type: ignore[no-untyped-def]
    """The merge of two pulse-ordered runs that share no pulse: ``order[k]`` is the
    ``k``-th return's index in the two joined (``a`` first), what a stable sort of the
    joined pulses gives."""
    i = j = 0
    na, nb = a_pulse.shape[0], b_pulse.shape[0]
    for k in range(na + nb):
        if j >= nb or (i < na and a_pulse[i] < b_pulse[j]):
            order[k] = i
            i += 1
        else:
            order[k] = na + j
            j += 1


@njit(parallel=True, cache=True, nogil=True)
def _merged_field(a_values, a_rows, b_values, order, out):  # type: ignore[no-untyped-def]
    """One field of the merge: ``out[k]`` is ``a_values[a_rows[o]]`` or
    ``b_values[o - len(a_rows)]`` for ``o = order[k]``."""
    na = a_rows.shape[0]
    for k in prange(order.shape[0]):
        o = order[k]
        out[k] = a_values[a_rows[o]] if o < na else b_values[o - na]


def merge_returns(
    single: Returns | None,
    kept: NDArray[np.bool_] | None,
    footprint: Returns,
    pulses: NDArray[np.intp],
    *,
    diagnostics: bool = False,
) -> Returns:
    """:func:`simulator.steps.echoes.merge_returns`, value for value: the order by one walk
    along the two runs, each field gathered from both by one parallel kernel (no
    joined copy, no sort)."""
    if single is None or kept is None:
        return _echoes_spec.merge_returns(single, kept, footprint, pulses,
                                          diagnostics=diagnostics)  # fmt: skip
    rows = np.flatnonzero(kept)
    if len(rows) == 0 or len(footprint) == 0:  # (one source: the specification's copy)
        return _echoes_spec.merge_returns(single, kept, footprint, pulses,
                                          diagnostics=diagnostics)  # fmt: skip
    a_pulse = single.pulse[rows].astype(np.int64)
    b_pulse = np.asarray(pulses, dtype=np.int64)[footprint.pulse]
    order = np.empty(len(rows) + len(b_pulse), dtype=np.int64)
    _merged_order(a_pulse, b_pulse, order)
    out: dict[str, Any] = {}
    for name in (f.name for f in fields(Returns)):
        if name in DIAGNOSTIC_FIELDS and not diagnostics:
            continue
        a_values, b_values = getattr(single, name), getattr(footprint, name)
        if name == "pulse":
            a_values, b_values = single.pulse.astype(np.int64), b_pulse
        dtype = np.result_type(a_values, b_values)  # (as the joined copy would have)
        a_values = a_values.astype(dtype, copy=False)
        b_values = b_values.astype(dtype, copy=False)
        merged = np.empty(len(order), dtype=dtype)
        _merged_field(a_values, rows, b_values, order, merged)
        out[name] = merged
    return Returns(**out)
