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


@njit(parallel=True, cache=True, nogil=True)
def _soft_peaks(  # type: ignore[no-untyped-def]
    sub_range, share, first_m, step, g, reach, waveform, range_m, out_range, out_received
):  # fmt: skip
    """:meth:`simulator.steps.soft_targets.SoftTarget.echoes` without layers behind, per pulse: the
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
    back = np.full(len(range_m), undone(np.array([soft.peak_range_m]))[0])
    moved = np.flatnonzero(range_m != soft.peak_range_m)
    back[moved] = undone(range_m[moved])
    return received * range_m**2 * back, range_m
