"""Echo formation and return selection for footprint sub-rays, per pulse in one kernel
each (the specification: :mod:`simulator.steps.echoes`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..physics import pulse_peak_factor
from ..steps import echoes as spec
from ..steps.echoes import Echoes, rank_keys
from ..steps.hits import HitResults, ReturnModel, Streams, reported_intensity
from ..steps.receiver import received_energies
from ..steps.returns import Returns
from ..steps.transmittance import Behind
from .common import mix64
from .grouping import (
    ECHO_ROWS,
    ENTRY_ROWS,
    echo_table,
    echoes_of_pulse,
    finish_echo,
    select_of_pulse,
    selection_tables,
)

__all__ = [
    "echo_returns",
    "echo_slots",
    "entry_slots",
    "form_echoes",
    "form_entry_echoes",
    "surface_returns",
]


@njit(parallel=True, cache=True, nogil=True)
def _form_echoes(width, weights, hit_of_slot, entries, separation, count, echoes):  # type: ignore[no-untyped-def]
    """Per pulse: sort the surfaces its sub-rays met by range, split at gaps, accumulate
    each echo (:func:`simulator.kernels.grouping.echoes_of_pulse`).

    Pulse ``p`` has the ``width`` slots ``p * width + j``: ``hit_of_slot`` maps each to a
    column of ``entries`` (-1: none), and ``weights`` gives each its share of the pulse's
    energy; its echoes go to the same slots of ``echoes``, ``count[p]`` of them.
    ``entries`` and ``echoes`` are the pairs (table, object index) of
    :mod:`simulator.kernels.grouping`."""
    # The tuples taken apart once, before the parallel loop (by index: numba's parallel
    # loops lose writes to arrays unpacked from a tuple with ``a, b = t``).
    table = entries[0]
    obj = entries[1]
    e_table = echoes[0]
    e_obj = echoes[1]
    pulses = hit_of_slot.shape[0] // width
    blocks = min(pulses, 256)  # scratch arrays once a block of pulses, not once a pulse
    for block in prange(blocks):
        ints = np.zeros((3, width), dtype=np.int64)  # slots by range, their hits, objects
        sums = np.zeros((4, width))  # the objects' sums, the sorted slots' ranges
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            count[p] = echoes_of_pulse(p * width, width, weights, hit_of_slot, table, obj,
                                       separation, e_table, e_obj, ints, sums)  # fmt: skip


@njit(parallel=True, cache=True, nogil=True)
def _select_echoes(width, count, echoes, pulse_id, noise_seed, model, selection):  # type: ignore[no-untyped-def]
    """Per pulse: measure its echoes (range jitter by pulse and echo rank,
    quantisation, detection, as :func:`simulator.steps.echoes.echo_returns`) and pick
    the reported ones (as :func:`simulator.steps.returns.select_returns`), in range order
    into row ``p`` of the ``selection`` pair (slot -1: none); pulse ``p``'s echoes are in
    slots ``p * width ...`` of the ``echoes`` table."""
    table = echoes[0]
    chosen = selection[0]
    chosen_f = selection[1]
    pulses = count.shape[0]
    blocks = min(pulses, 256)  # scratch arrays once a block of pulses, not once a pulse
    for block in prange(blocks):
        measured = np.empty((4, width))
        ranked = np.empty((2, width), dtype=np.int64)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            select_of_pulse(p, count[p], p * width, table, mix64(noise_seed + pulse_id[p]),
                            model, chosen, chosen_f, measured, ranked)  # fmt: skip


@njit(cache=True, nogil=True)
def _layer_slots(  # type: ignore[no-untyped-def]
    layer, pulses, samples, idx, rays, weights, two_way, range_m, object_index, per_hit, used,
    hit_of_slot, weight, entries,
):  # fmt: skip
    """Layer ``layer`` of the slots of the pulses ``pulses`` (increasing): each sub-ray's
    share of the energy (its beam weight times the two-way transmittance in front, when
    ``two_way`` is not empty) and its hit there, if any and lit: the hit is appended to
    ``entries`` (:mod:`simulator.kernels.grouping`) from row ``used`` on. Returns the new
    ``used``.

    ``entries`` is the tuple of :data:`simulator.kernels.grouping.ENTRY_ROWS`' rows with
    the object index after the spread (a column an entry).

    Hit ``j`` is of the layer's row ``idx[j]`` (increasing), which is the cast ray
    ``rays[idx[j]]`` (``rays`` empty: the ray ``idx[j]``); ``range_m``,
    ``object_index`` and ``two_way`` are by row, ``per_hit`` (relief, backscatter, spread,
    cos incidence, cos effective) by hit."""
    relief, b, spread, cos_inc, cos_eff = per_hit
    o_range = entries[0]
    o_relief = entries[1]
    o_b = entries[2]
    o_spread = entries[3]
    o_obj = entries[4]
    o_cos_inc = entries[5]
    o_cos_eff = entries[6]
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
    idx, weights, ray_range, ray_object, relief, backscatter, spread, cos_incidence,
    cos_effective, hit_of_slot, weight, table, object_index,
):  # fmt: skip
    """The slots of a chunk whose every ray is a slot (one layer of surfaces, every
    sub-ray lit): slot ``s`` is ray ``s``, of weight ``weights[s % samples]`` and hit
    row ``j`` where ``idx[j] == s`` (-1: a miss); each hit's range (float64) and object
    gathered from its ray, and its per-hit inputs (``relief`` .. ``cos_effective``, a
    hit each) copied to the rows of ``table`` (:data:`ENTRY_ROWS`) in the same pass."""
    samples = weights.shape[0]
    for s in prange(hit_of_slot.shape[0]):
        hit_of_slot[s] = -1
        weight[s] = weights[s % samples]
    for j in prange(idx.shape[0]):
        r = idx[j]
        hit_of_slot[r] = j
        table[0, j] = np.float64(ray_range[r])
        table[1, j] = relief[j]
        table[2, j] = backscatter[j]
        table[3, j] = spread[j]
        table[4, j] = cos_incidence[j]
        table[5, j] = cos_effective[j]
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
    between, object, dominant, cos_incidence, cos_effective`` (all but the object rows
    of one table: ``echoes``, the pair of :mod:`simulator.kernels.grouping`), the (P,)
    ``count`` and the ``width``.
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
        table = np.empty((len(ENTRY_ROWS), len(idx)))
        object_index = np.empty(len(idx), dtype=np.int64)
        _every_ray_slots(idx, weights, hits.range_m, hits.object_index, results.relief_m,
                         results.backscatter, results.spread_m, results.cos_incidence,
                         results.cos_effective, hit_of_slot.reshape(-1), weight.reshape(-1),
                         table, object_index)  # fmt: skip
    else:
        table = np.empty((len(ENTRY_ROWS), hit_of_slot.size))
        object_index = np.empty(hit_of_slot.size, dtype=np.int64)
        rows = (*table[:4], object_index, *table[4:])  # as _layer_slots writes them
        used = 0
        for layer, (rays, res, layer_hits, two_way) in enumerate(layers):
            per_hit = (res.relief_m, res.backscatter, res.spread_m, res.cos_incidence,
                       res.cos_effective)  # fmt: skip
            used = _layer_slots(
                layer, pulses, samples, res.idx, np.ascontiguousarray(rays, np.int64),
                weights, np.zeros(0) if two_way is None else two_way, layer_hits.range_m,
                layer_hits.object_index, per_hit, used, hit_of_slot, weight, rows,
            )  # fmt: skip
    # Only slots below a pulse's count are written and read: no need to zero the rest.
    out = _slots(len(pulses) * width, len(pulses))
    _form_echoes(width, weight.ravel(), hit_of_slot.ravel(), (table, object_index),
                 separation_m, out["count"], out["echoes"])  # fmt: skip
    out["width"] = width
    return out


def _slots(total: int, pulses: int) -> dict[str, Any]:
    """A slot dict of ``total`` slots (unset) of ``pulses`` pulses: an array a name of
    :data:`simulator.kernels.grouping.ECHO_SLOTS` (float64, the object int64; the others
    rows of one table, the ``echoes`` pair's), and the (pulses,) ``count``, zero."""
    table, object_index = echo_table(total)
    out: dict[str, Any] = dict(zip(ECHO_ROWS, table, strict=True))
    out["object"] = object_index
    out["echoes"] = (table, object_index)
    out["count"] = np.zeros(pulses, dtype=np.int64)
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


def _selected_returns(
    slots: dict[str, Any],
    selection: tuple[NDArray[Any], ...],
    pulse_id: NDArray[np.uint64],
    model: ReturnModel,
    streams: Streams,
    first_slot: NDArray[np.int64],
) -> Returns:
    """The :class:`~simulator.steps.returns.Returns` a selection kernel chose (``selection``,
    the pair :func:`simulator.kernels.grouping.selection_tables` made) from the echoes in
    ``slots``, of pulses ``pulse_id`` (pulse ``p``'s echoes from slot ``first_slot[p]``
    on, in their order: an echo's rank is its slot less that, which keys the receiver's
    draws as the kernel drew them)."""
    (out_slot, out_number, out_total), (out_range, out_spread, out_peak) = selection
    width = out_slot.shape[1]
    flat = np.flatnonzero(out_slot.ravel() >= 0)
    slot = out_slot.ravel()[flat]
    energy = slots["energy"][slot]
    range_m = out_range.ravel()[flat]
    ids = np.asarray(pulse_id, dtype=np.uint64)[flat // width]
    read = energy
    if model.receiver is not None:  # the reading's share of the receiver's gains
        key = rank_keys(ids, slot - first_slot[flat // width], streams)
        read = received_energies(model.receiver, key, slots["range"][slot], energy)[1]
    fraction = np.where(energy > 0.0, slots["dominant"][slot] / np.maximum(energy, 1e-300), 1.0)
    return Returns(
        pulse=flat // width,
        range_m=range_m,
        intensity=reported_intensity(read, model, range_m, ids),
        object_index=slots["object"][slot].astype(np.int32),
        return_number=out_number.ravel()[flat].astype(np.uint8),
        num_returns=out_total.ravel()[flat].astype(np.uint8),
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
    selection = selection_tables(count, width)
    _select_echoes(
        slots["width"], slots["count"], slots["echoes"],
        np.ascontiguousarray(pulse_id, np.uint64), np.uint64(streams.sensor_noise),
        model.kernel_args(), selection,
    )  # fmt: skip
    first = np.arange(count, dtype=np.int64) * slots["width"]
    return _selected_returns(slots, selection, pulse_id, model, streams, first)


@njit(parallel=True, cache=True, nogil=True)
def _form_entries(starts, weight, entries, separation, count, echoes):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.echoes.form_echoes` per pulse over ``entries`` sorted by pulse
    (pulse ``p``'s are columns ``starts[p]`` to ``starts[p + 1]``, in the specification's
    order), of energy shares ``weight``: sorted by range (stable), split at gaps, each echo
    accumulated in the order the specification sums; echo ``k`` of pulse ``p`` goes to
    slot ``starts[p] + k`` of ``echoes``. ``entries`` and ``echoes`` are the pairs
    (table, object index) of :mod:`simulator.kernels.grouping`."""
    # The tuples taken apart once, before the parallel loop (by index: numba's parallel
    # loops lose writes to arrays unpacked from a tuple with ``a, b = t``).
    table = entries[0]
    obj = entries[1]
    e_table = echoes[0]
    e_obj = echoes[1]
    pulses = starts.shape[0] - 1
    blocks = min(pulses, 256)
    widest = 0
    for p in range(pulses):
        widest = max(widest, starts[p + 1] - starts[p])
    for block in prange(blocks):
        ints = np.zeros((3, widest), dtype=np.int64)  # the pulse's entries by range; objects
        sums = np.zeros((3, widest))  # the objects' sums
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            base = starts[p]
            n = starts[p + 1] - base
            for k in range(n):  # insertion sort by range, stable
                i = base + k
                j = k
                while j > 0 and table[0, ints[0, j - 1]] > table[0, i]:
                    ints[0, j] = ints[0, j - 1]
                    j -= 1
                ints[0, j] = i
            echo = -1
            start = 0
            prev = 0.0
            for q in range(n + 1):
                close = q == n
                r = 0.0
                if not close:
                    r = table[0, ints[0, q]]
                    close = q > 0 and r - prev > separation
                if close and echo >= 0:  # finish echo `echo` over entries start..q-1
                    finish_echo(base + echo, start, q, ints, 0, 0, weight, table, obj, sums,
                                e_table, e_obj)  # fmt: skip
                if q == n:
                    break
                if q == 0 or close:
                    echo += 1
                    start = q
                prev = r
            count[p] = echo + 1


@njit(parallel=True, cache=True, nogil=True)
def _select_entries(starts, count, widest, echoes, pulse_id, noise_seed, model, selection):  # type: ignore[no-untyped-def]
    """:func:`_select_echoes` of echoes in the slots of :func:`_form_entries` (pulse
    ``p``'s from ``starts[p]`` on)."""
    table = echoes[0]
    chosen = selection[0]
    chosen_f = selection[1]
    pulses = count.shape[0]
    blocks = min(pulses, 256)
    for block in prange(blocks):
        measured = np.empty((4, widest))
        ranked = np.empty((2, widest), dtype=np.int64)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            select_of_pulse(p, count[p], starts[p], table, mix64(noise_seed + pulse_id[p]),
                            model, chosen, chosen_f, measured, ranked)  # fmt: skip


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
    in slots ``starts[p] ...``, by true range; the ``echoes`` pair as in
    :func:`echo_slots`), the (P + 1,) ``starts``, the (P,) ``count`` and the ``widest``
    pulse's entries."""
    by_pulse = np.argsort(pulse, kind="stable")
    per_pulse = np.bincount(pulse, minlength=pulses)
    starts = np.zeros(pulses + 1, dtype=np.int64)
    np.cumsum(per_pulse, out=starts[1:])

    table = np.empty((len(ENTRY_ROWS), len(pulse)))
    for row, values in zip(table, (range_m, relief_m, backscatter, spread_m, cos_incidence,
                                   cos_effective), strict=True):  # fmt: skip
        row[:] = values[by_pulse]
    entries = (table, np.ascontiguousarray(object_index[by_pulse], dtype=np.int64))
    out = _slots(len(pulse), pulses)
    _form_entries(starts, np.ascontiguousarray(weight[by_pulse], dtype=np.float64), entries,
                  float(separation_m), out["count"], out["echoes"])  # fmt: skip
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
    columns = spec.surface_entries(results, hits, beam, behind=behind, shadow=shadow, extra=extra)
    if broad:
        echoes = form_entry_echoes(*columns, model.separation_m, model.pulse_length_m)
        return spec.report_surface_echoes(echoes, pulse_id, model, streams, broad)
    # No broad echo: the echoes measured, detected and selected in their slots.
    slots = entry_slots(*columns, model.separation_m, len(pulse_id))
    count = len(pulse_id)
    width = model.returns_per_pulse
    selection = selection_tables(count, width)
    _select_entries(
        slots["starts"], slots["count"], max(slots["widest"], 1), slots["echoes"], pulse_id,
        np.uint64(streams.sensor_noise), model.kernel_args(), selection,
    )  # fmt: skip
    first = slots["starts"][:-1].astype(np.int64)
    return _selected_returns(slots, selection, pulse_id, model, streams, first)
