"""The soft targets' waveform peaks in a parallel kernel (the specification:
:mod:`simulator.steps.soft_targets`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..steps.hits import ReturnModel
from ..steps.soft_targets import SoftTarget

__all__ = ["peak_echo_energies", "soft_echoes"]


def soft_echoes(
    soft: SoftTarget,
    sub_range_m: NDArray[np.float64],
    weights: NDArray[np.float64],
    behind_m: NDArray[np.float64] | None = None,
    two_way: NDArray[np.float64] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:meth:`simulator.steps.soft_targets.SoftTarget.echoes` (``soft.echoes`` with the same
    arguments), value for value, in one parallel kernel: :func:`_soft_peaks` without
    layers behind, :func:`_soft_peaks_layered` with them."""
    n = len(sub_range_m)
    g, receiving = soft.waveform.shape[0] - 1, soft.waveform.shape[1]
    step = soft.range_m[1] - soft.range_m[0]
    sub = np.ascontiguousarray(sub_range_m, dtype=np.float64)
    grid = (float(soft.range_m[0]), float(step), g, float(soft.reach_m), soft.waveform,
            np.ascontiguousarray(soft.range_m[:receiving]))  # fmt: skip
    if behind_m is None or two_way is None:
        range_m, received = np.empty(n), np.empty(n)  # (every pulse written)
        uncut = (soft.peak_range_m, soft.peak_received)
        _soft_peaks(sub, weights / weights.sum(), *grid, soft.peak_bins, *uncut, range_m, received)
        return range_m, received
    range_m, received = np.full(n, soft.peak_range_m), np.full(n, soft.peak_received)
    behind = np.ascontiguousarray(behind_m, dtype=np.float64).reshape(-1, *sub.shape)
    factors = np.ascontiguousarray(two_way, dtype=np.float64)
    _soft_peaks_layered(sub, behind, factors, weights / weights.sum(), *grid, range_m, received)
    return range_m, received


@njit(inline="always", cache=True)
def _peak(wave, range_m):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.soft_targets._peak` of one waveform: (range, value)."""
    receiving = wave.shape[0]
    top = 0
    for j in range(1, receiving):
        if wave[j] > wave[top]:
            top = j
    i = min(max(top, 1), receiving - 2)
    return _parabola(wave[i - 1], wave[i], wave[i + 1], range_m, i)


@njit(inline="always", cache=True)
def _parabola(a, b, c, range_m, i):  # type: ignore[no-untyped-def]
    """The peak (range, value) of the parabola through samples ``a, b, c`` of a waveform at
    ``range_m[i - 1 .. i + 1]``, its vertex kept within half a step of ``i``."""
    denom = a - 2.0 * b + c
    shift = 0.5 * (a - c) / denom if denom < 0.0 else 0.0
    shift = min(max(shift, -0.5), 0.5)
    return range_m[i] + shift * (range_m[1] - range_m[0]), b - 0.25 * (a - c) * shift


@njit(inline="always", cache=True)
def _add_cut(out, weight, at_m, first_m, step, g, waveform):  # type: ignore[no-untyped-def]
    """``out += weight x`` the waveform of a beam cut at ``at_m`` (the specification's
    ``cut``: interpolated between two rows of ``waveform``)."""
    x = min(max((at_m - first_m) / step + 0.5, 0.0), float(g))
    full = min(np.int64(math.floor(x)), g - 1)
    frac = x - full
    for j in range(out.shape[0]):
        below = waveform[full, j]
        out[j] += weight * (below + frac * (waveform[full + 1, j] - below))


@njit(parallel=True, cache=True, nogil=True)
def _soft_peaks_layered(  # type: ignore[no-untyped-def]
    sub_range, behind, two_way, share, first_m, step, g, reach, waveform, range_m, out_range,
    out_received,
):  # fmt: skip
    """:meth:`simulator.steps.soft_targets.SoftTarget.echoes` with layers behind, per pulse, in
    the specification's arithmetic: a layer's share of each sub-ray's sources
    (``share x passing x (1 - f)``, 0 where the layer meets nothing) times its cut
    waveform, summed in sub-ray order into the layer's waveform, added to the pulse's;
    then what passes every surface, ``sum(passing x share)`` (numpy's sum of a row: one
    after the other below 8 terms, else its eight partial sums), times the uncut waveform."""
    pulses, samples = sub_range.shape
    layers = behind.shape[0]
    receiving = waveform.shape[1]
    blocks = min(pulses, 256)
    for block in prange(blocks):
        wave = np.empty(receiving)
        layer = np.empty(receiving)
        passing = np.empty(samples)
        terms = np.empty(samples)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            if not _cut_within(sub_range, p, reach):
                continue
            for j in range(receiving):
                wave[j] = 0.0
            for s in range(samples):
                passing[s] = 1.0
            for k in range(layers + 1):
                for j in range(receiving):
                    layer[j] = 0.0
                for s in range(samples):
                    at = sub_range[p, s] if k == 0 else behind[k - 1, p, s]
                    f = two_way[k, p, s]
                    if math.isfinite(at):  # (a layer that meets nothing adds exactly 0)
                        _add_cut(layer, share[s] * passing[s] * (1.0 - f), at, first_m, step, g,
                                 waveform)  # fmt: skip
                        passing[s] = passing[s] * f
                for j in range(receiving):
                    wave[j] += layer[j]
            for s in range(samples):
                terms[s] = passing[s] * share[s]
            uncut = _row_sum(terms)
            for j in range(receiving):
                wave[j] += uncut * waveform[g, j]
            out_range[p], out_received[p] = _peak(wave, range_m)


@njit(inline="always", cache=True)
def _row_sum(a):  # type: ignore[no-untyped-def]
    """numpy's sum of a short contiguous row (its pairwise sum below 128 terms): one after
    the other below 8 terms, else eight partial sums combined in pairs, then the rest."""
    n = a.shape[0]
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[0], a[1], a[2], a[3]
    r4, r5, r6, r7 = a[4], a[5], a[6], a[7]
    i = 8
    while i < n - n % 8:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


@njit(inline="always", cache=True)
def _cut_bin(weight, waveform, full, frac, j):  # type: ignore[no-untyped-def]
    """Bin ``j`` of ``weight`` times a beam cut between rows ``full`` and ``full + 1``,
    as :func:`_add_cut` adds it to a zero."""
    below = waveform[full, j]
    return 0.0 + weight * (below + frac * (waveform[full + 1, j] - below))


@njit(inline="always", cache=True)
def _one_cut_peak(  # type: ignore[no-untyped-def]
    weight, at_m, first_m, step, g, waveform, peak_bins, range_m
):  # fmt: skip
    """:func:`_peak` of one ray's cut waveform (``weight`` times the cut at ``at_m``, as
    :func:`_add_cut` adds it to zeros), its first maximum sought only in the bins
    ``peak_bins`` give for the cut's rows
    (:func:`simulator.steps.soft_targets.cut_peak_bins`), the three samples of the parabola
    made again: the same values, without the waveform's other bins."""
    receiving = waveform.shape[1]
    x = min(max((at_m - first_m) / step + 0.5, 0.0), float(g))
    full = min(np.int64(math.floor(x)), g - 1)
    frac = x - full
    top = peak_bins[full, 0]
    best = _cut_bin(weight, waveform, full, frac, top)
    for j in range(top + 1, peak_bins[full, 1] + 1):
        v = _cut_bin(weight, waveform, full, frac, j)
        if v > best:
            top, best = j, v
    i = min(max(top, 1), receiving - 2)
    a = _cut_bin(weight, waveform, full, frac, i - 1)
    b = _cut_bin(weight, waveform, full, frac, i)
    c = _cut_bin(weight, waveform, full, frac, i + 1)
    return _parabola(a, b, c, range_m, i)


@njit(parallel=True, cache=True, nogil=True)
def _soft_peaks(  # type: ignore[no-untyped-def]
    sub_range, share, first_m, step, g, reach, waveform, range_m, peak_bins, uncut_range,
    uncut_received, out_range, out_received,
):  # fmt: skip
    """:meth:`simulator.steps.soft_targets.SoftTarget.echoes` without layers behind, per
    pulse: the uncut peak (``uncut_range``, ``uncut_received``) where no sub-ray meets a
    surface closer than ``reach``, else the peak of the cut waveform, in the
    specification's arithmetic (each sub-ray's cut interpolated between two rows of
    ``waveform``, weighted by ``share`` and summed in sub-ray order; the parabola through
    the top three samples). One ray a pulse: its peak sought in the bins ``peak_bins``
    give (:func:`_one_cut_peak`)."""
    pulses, samples = sub_range.shape
    receiving = waveform.shape[1]
    blocks = min(pulses, 256)
    for block in prange(blocks):
        wave = np.empty(receiving)
        for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
            if not _cut_within(sub_range, p, reach):
                out_range[p], out_received[p] = uncut_range, uncut_received
                continue
            if samples == 1:
                out_range[p], out_received[p] = _one_cut_peak(
                    share[0], sub_range[p, 0], first_m, step, g, waveform, peak_bins, range_m
                )  # fmt: skip
                continue
            for j in range(receiving):
                wave[j] = 0.0
            for s in range(samples):
                _add_cut(wave, share[s], sub_range[p, s], first_m, step, g, waveform)
            out_range[p], out_received[p] = _peak(wave, range_m)


@njit(inline="always", cache=True)
def _cut_within(sub_range, p, reach):  # type: ignore[no-untyped-def]
    """Whether a sub-ray of pulse ``p`` meets a surface closer than ``reach``."""
    for s in range(sub_range.shape[1]):  # noqa: SIM110 (a loop: numba compiles no generator)
        if sub_range[p, s] < reach:
            return True
    return False


def peak_echo_energies(
    soft: SoftTarget,
    sub_range: NDArray[np.float64],
    beam: BeamPattern,
    model: ReturnModel,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`simulator.steps.soft_targets.peak_echoes` without layers behind: each pulse's echo
    energy and true range (the kernel hashes its jitter key,
    ``mix64(soft.stream + pulse_id)``)."""
    range_m, received = soft_echoes(soft, sub_range, beam.weights.astype(np.float64))

    def undone(r: NDArray[np.float64]) -> NDArray[np.float64]:
        if model.extinction_relief is None:
            return np.exp(2.0 * model.extinction_per_m * r)
        return 1.0 / model.two_way_transmission(r)

    # The extinction undone where the peak moved; elsewhere it is the uncut peak's (an
    # elementwise function of the range: the same value).
    moved = np.flatnonzero(range_m != soft.peak_range_m)
    energy = np.empty(len(range_m))  # (every pulse written)
    _echo_energies(received, range_m, undone(np.array([soft.peak_range_m]))[0], moved,
                   undone(range_m[moved]), energy)  # fmt: skip
    return energy, range_m


@njit(parallel=True, cache=True, nogil=True)
def _echo_energies(received, range_m, back, moved, back_moved, out):  # type: ignore[no-untyped-def]
    """Each pulse's echo energy, ``received * range_m**2`` times the extinction undone
    (numpy's order of products: the square first): ``back`` for every pulse, then
    ``back_moved`` for the pulses ``moved``."""
    for p in prange(out.shape[0]):
        r = range_m[p]
        out[p] = received[p] * (r * r) * back
    for i in range(moved.shape[0]):  # (after the loop above: one thread)
        p = moved[i]
        r = range_m[p]
        out[p] = received[p] * (r * r) * back_moved[i]
