"""The returns of a chunk cast one ray a pulse through see-through surfaces, a pulse at a
time in one kernel (the specification: :func:`simulator.steps.see_through.see_through_returns`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..steps.hits import HitResults, ReturnModel, Streams
from ..steps.returns import DIAGNOSTIC_FIELDS, Returns
from ..steps.transmittance import Behind
from .common import U, mix64
from .common import reported_intensity as intensity_of
from .grouping import RETURN_FIELDS, echoes_of_pulse, joined, returns_out, select_of_pulse
from .receiver import received_energies

__all__ = ["see_through_returns"]


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
    """:func:`simulator.steps.see_through.see_through_returns` in one kernel, a pulse at a time."""
    if beam.samples != 1:
        raise ValueError(f"see_through_returns is for one ray a pulse, not {beam.samples}")
    pulse_count = len(hits.range_m)
    width = model.returns_per_pulse
    size = pulse_count * width
    blocks = max(1, min(pulse_count, 256))
    block_count = np.zeros(blocks, dtype=np.int64)
    out = returns_out(size, np.int32, diagnostics)
    row_start = np.zeros(len(behind) + 1, dtype=np.int64)
    row_start[1:] = np.cumsum([len(b.rays) for b in behind])
    hit_start = np.cumsum([0] + [len(b.results.idx) for b in behind])

    l_hit = np.full(row_start[-1], -1, dtype=np.int64)
    for k, b in enumerate(behind):
        l_hit[row_start[k] + b.results.idx] = hit_start[k] + np.arange(len(b.results.idx))
    res = [b.results for b in behind]
    first = (results.idx, results.keep, results.range_m, results.intensity, results.relief_m,
             results.backscatter, results.spread_m, results.peak_factor, results.cos_incidence,
             results.cos_effective, hits.range_m, hits.object_index)  # fmt: skip
    layers = (
        row_start, joined([b.rays for b in behind], np.int64),
        joined([b.two_way for b in behind], np.float64),
        joined([b.hits.range_m for b in behind], np.float32),
        joined([b.hits.object_index for b in behind], np.int32), l_hit,
        *(joined([getattr(r, name) for r in res], np.float64)
          for name in ("relief_m", "backscatter", "spread_m", "cos_incidence", "cos_effective")),
    )  # fmt: skip
    _see_through_returns(
        first, layers, float(beam.weights[0]), np.ascontiguousarray(pulse_id, np.uint64),
        np.uint64(streams.sensor_noise), model.kernel_args(), diagnostics, block_count, out,
    )  # fmt: skip
    # Each block's returns, moved together into one table: the fields six at a time (the
    # record's, then the diagnostics'), one kernel launch each.
    src = np.arange(blocks, dtype=np.int64) * pulse_count // blocks * width
    dst = np.concatenate([[0], np.cumsum(block_count)])
    fields = dict(zip(RETURN_FIELDS, out, strict=True))
    names = [n for n in RETURN_FIELDS if diagnostics or n not in DIAGNOSTIC_FIELDS]
    packed = {n: np.empty(dst[-1], dtype=fields[n].dtype) for n in names}
    for at in range(0, len(names), _MOVED_TOGETHER):
        six = names[at : at + _MOVED_TOGETHER]
        _move_blocks(tuple(fields[n] for n in six), src, block_count, dst,
                     tuple(packed[n] for n in six))  # fmt: skip
    return Returns(**packed)


#: Fields :func:`_move_blocks` moves a launch: the record's six, then the diagnostics' six.
_MOVED_TOGETHER = 6
if (len(RETURN_FIELDS) - len(DIAGNOSTIC_FIELDS), len(DIAGNOSTIC_FIELDS)) != (6, 6):
    raise ImportError("_move_blocks moves six fields a launch: the record's and the "
                      "diagnostics' fields must be six each")  # fmt: skip


@njit(parallel=True, cache=True, nogil=True)
def _see_through_returns(  # type: ignore[no-untyped-def]
    first, layers, weight, pulse_id, noise_seed, model, diagnostics, block_count, out
):  # fmt: skip
    """Per pulse of a chunk cast one ray a pulse: the echoes of every surface its ray met
    when it passed a see-through one (formed and selected as
    :func:`simulator.kernels.echoes.echo_returns` does), else its one hit if detected.
    Block ``b`` of the pulses writes its ``block_count[b]`` returns to the (P * R,)
    arrays of ``out`` (:data:`simulator.kernels.grouping.RETURN_FIELDS`) from ``p0 * R``
    on, its first pulse ``p0``, in pulse and range order.

    ``first``, the first surfaces: ``(idx, keep, range_m, intensity, relief_m,
    backscatter, spread_m, peak_factor, cos_incidence, cos_effective)`` of the per-hit
    model (hit ``j`` is of ray ``idx[j]``, increasing) and the rays' ``(range_m,
    object_index)``. ``layers``, the layers behind: ``(row_start, rays, two_way, range_m,
    object_index, hit, relief_m, backscatter, spread_m, cos_incidence, cos_effective)``;
    layer ``l`` has the rows ``row_start[l]`` to ``row_start[l + 1]`` of the by-row arrays
    (its rays increasing), and ``hit`` the hit of each row among the by-hit arrays (-1:
    none). ``weight`` is the ray's share of its pulse (1), ``model``
    :meth:`simulator.steps.hits.ReturnModel.kernel_args`.

    The blocks are taken in a scattered order (see the loop), which changes no output:
    each block writes its own rows. The loop body is one call of
    :func:`_see_through_block`, a plain function the per-pulse
    helpers are inlined into: inlined into this parallel loop instead, numba's parfor passes
    over their code made this kernel take 16 s to compile, not 9 s (docs/performance.md)."""
    pulses = first[10].shape[0]
    blocks = block_count.shape[0]
    for i in prange(blocks):
        # Blocks in a scattered order (263 is a prime, coprime with any count up to 256):
        # numba hands each thread one contiguous run of the loop, and the pulses that pass
        # leaves crowd into part of a revolution (62 % of them in the first half of a
        # chunk of the street's VLS-128 scan: the first thread's blocks took 29.7 ms, the
        # second's 18.7); in this order each thread's blocks span the chunk (24.4, 24.0).
        block = (i * 263) % blocks
        block_count[block] = _see_through_block(
            block * pulses // blocks, (block + 1) * pulses // blocks, first, layers, weight,
            pulse_id, noise_seed, model, diagnostics, out,
        )  # fmt: skip


@njit(cache=True, nogil=True, error_model="numpy")
def _see_through_block(  # type: ignore[no-untyped-def]
    p0, p1, first, behind, weight, pulse_id, noise_seed, model, diagnostics, out
):  # fmt: skip
    """The pulses ``p0`` to ``p1`` of :func:`_see_through_returns` (one block, its
    ``layers`` here ``behind``): writes their returns from ``p0 * max_returns`` on and
    returns how many.

    numpy's error model, as the specification divides: a division by zero gives an
    infinity or a NaN instead of raising. The raising paths of Python's model also kept
    numba from pruning the reference counts of the arrays the inlined per-pulse helpers
    are handed (an atomic increment and decrement each, each pulse): a third less time
    with numpy's (docs/performance.md). The helpers take a few tables
    (:mod:`simulator.kernels.grouping`), not an array a quantity: half the time again."""
    idx = first[0]
    keep = first[1]
    range_meas = first[2]
    intensity = first[3]
    relief = first[4]
    b = first[5]
    spread = first[6]
    peak = first[7]
    cos_inc = first[8]
    cos_eff = first[9]
    range_true = first[10]
    obj = first[11]
    row_start = behind[0]
    l_rays = behind[1]
    l_two_way = behind[2]
    l_range = behind[3]
    l_obj = behind[4]
    l_hit = behind[5]
    l_relief = behind[6]
    l_b = behind[7]
    l_spread = behind[8]
    l_cos_inc = behind[9]
    l_cos_eff = behind[10]
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
    layers = row_start.shape[0] - 1
    width = layers + 1
    hits = idx.shape[0]
    # scratch, the tables of kernels.grouping: one pulse's surfaces (column l: layer l),
    # their shares of the pulse, its echoes, and their measures and choice
    entries = np.zeros((6, width))  # (ENTRY_ROWS)
    s_obj = np.zeros(width, dtype=np.int64)
    w_slot = np.zeros(width)
    hit_of_slot = np.zeros(width, dtype=np.int64)
    echoes = np.zeros((9, width))  # (ECHO_ROWS)
    e_obj = np.zeros(width, dtype=np.int64)
    ints = np.zeros((3, width), dtype=np.int64)
    sums = np.zeros((4, width))
    measured = np.empty((4, width))
    ranked = np.empty((2, width), dtype=np.int64)
    chosen = np.empty((3, 1, max_returns), dtype=np.int64)
    chosen_f = np.empty((3, 1, max_returns))
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
        entries[0, 0] = np.float64(range_true[p])
        s_obj[0] = obj[p]
        entries[1, 0], entries[2, 0], entries[3, 0] = relief[j], b[j], spread[j]
        entries[4, 0], entries[5, 0] = cos_inc[j], cos_eff[j]
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
                    entries[0, used] = np.float64(l_range[row])
                    s_obj[used] = l_obj[row]
                    entries[1, used], entries[2, used] = l_relief[h], l_b[h]
                    entries[3, used], entries[4, used] = l_spread[h], l_cos_inc[h]
                    entries[5, used] = l_cos_eff[h]
                    used += 1
            w_slot[layer + 1] = w
        count = echoes_of_pulse(0, width, w_slot, hit_of_slot, entries, s_obj, separation,
                                echoes, e_obj, ints, sums)  # fmt: skip
        key0 = mix64(noise_seed + pulse_id[p])
        n_out = select_of_pulse(0, count, 0, echoes, key0, model, chosen, chosen_f, measured,
                                ranked)  # fmt: skip
        for t in range(n_out):
            k = chosen[0, 0, t]
            energy = echoes[0, k]
            read = energy
            if rec[0] != 0.0:  # the reading's share of the receiver's gains (its jitter key)
                key = key0 if k == 0 else mix64(key0 + U(k))
                read = received_energies(rec, key, echoes[2, k], energy)[1]
            o_pulse[at + t] = p
            o_number[at + t] = chosen[1, 0, t]
            o_total[at + t] = chosen[2, 0, t]
            o_range[at + t] = chosen_f[0, 0, t]
            o_intensity[at + t] = intensity_of(
                read, chosen_f[0, 0, t], np.int64(pulse_id[p]), iscale, imax, istep, response
            )
            o_obj[at + t] = e_obj[k]
            if diagnostics:
                o_range_true[at + t] = echoes[2, k]
                o_cos_inc[at + t] = echoes[7, k]
                o_cos_eff[at + t] = echoes[8, k]
                o_spread[at + t] = chosen_f[1, 0, t]
                o_peak[at + t] = chosen_f[2, 0, t]
                o_fraction[at + t] = echoes[6, k] / max(energy, 1e-300) if energy > 0.0 else 1.0
        at += n_out
    return at - p0 * max_returns


@njit(parallel=True, cache=True, nogil=True)
def _move_blocks(values, src, count, dst, out):  # type: ignore[no-untyped-def]
    """``out[f][dst[b] : dst[b] + count[b]] = values[f][src[b] : src[b] + count[b]]`` for
    every block ``b`` and each of the six arrays ``f`` of the tuples ``values`` and
    ``out``."""
    # (taken apart by index before the parallel loop: see kernels.grouping)
    v0 = values[0]
    v1 = values[1]
    v2 = values[2]
    v3 = values[3]
    v4 = values[4]
    v5 = values[5]
    o0 = out[0]
    o1 = out[1]
    o2 = out[2]
    o3 = out[3]
    o4 = out[4]
    o5 = out[5]
    for b in prange(count.shape[0]):
        a, c = src[b], dst[b]
        for k in range(count[b]):
            o0[c + k] = v0[a + k]
            o1[c + k] = v1[a + k]
            o2[c + k] = v2[a + k]
            o3[c + k] = v3[a + k]
            o4[c + k] = v4[a + k]
            o5[c + k] = v5[a + k]
