"""Inline numba helpers the returns kernels share: echoes accumulated from the surfaces (and
particles) of a pulse, measured, detected and chosen by the return mode, a pulse at a time
(the specification: :mod:`simulator.steps.echoes`,
:func:`simulator.steps.returns.select_returns`).

The kernels are handed their arrays from Python in tuples, always in these orders, and
take them apart once, before their parallel loop, by index (``a = t[0]``: numba 0.68's
parallel loops lose the writes to arrays unpacked from a tuple with ``a, b = t``). The
helpers here, called once a pulse or once an echo, take a few 2D tables whose rows are
the quantities, not an array a quantity: numba counts a reference (an atomic add, then a
release) for every array an inlined helper is handed, at every call, even when the arrays
are rows of one table; with an array a quantity (26 of them a pulse) two thirds of the
see-through kernel's time went to these counts (measured with ``perf``).

* ``entries``, what echoes are made of, one column an entry (a surface a sub-ray met, a
  particle): the (6, N) float64 table of :data:`ENTRY_ROWS` and the (N,) int64 object
  index apart;
* ``echoes``, the echoes, one column a slot: the (9, S) float64 table of
  :data:`ECHO_ROWS` and the (S,) int64 object index apart (:data:`ECHO_SLOTS` names
  both);
* ``ints`` and ``sums``, one pulse's scratch: (3, W) int64 ``(order, entry, object)``
  (the entries by range, and one echo's objects) and (4, W) float64 ``(energy, weight,
  weight x range, range)`` (one echo's objects' sums, and the sorted ranges);
* ``selection``, the reported returns of pulses: (3, P, R) int64 ``(slot,
  return_number, num_returns)``, slot -1 where none, and (3, P, R) float64
  ``(range_m, spread_m, peak_factor)`` (:func:`report_echoes`);
* ``measured`` and ``ranked``, one pulse's echoes measured: (4, W) float64 ``(range_m,
  received, spread_m, peak_factor)`` and (2, W) int64 ``(order, detected)`` (the
  detected echoes by measured range, and whether each is);
* ``model``: :meth:`simulator.steps.hits.ReturnModel.kernel_args` (a flat tuple: sliced
  by position);
* ``out``, the returns of a chunk, one row a return: the fields :data:`RETURN_FIELDS` of
  :class:`~simulator.steps.returns.Returns` (:func:`returns_out`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from ..steps.returns import DIAGNOSTIC_FIELDS
from .common import U, hash_normal, measured_range, mix64, peak_factor, received_peak
from .receiver import received_energies, soft_detected

__all__ = [
    "ECHO_ROWS",
    "ECHO_SLOTS",
    "ENTRY_ROWS",
    "RETURN_FIELDS",
    "echo_table",
    "echoes_of_pulse",
    "finish_echo",
    "insert_by_range",
    "joined",
    "report_echoes",
    "returns_out",
    "select_of_pulse",
    "selection_tables",
]

#: The names of the echoes' quantities (the module docstring), as the slot dicts of
#: :func:`simulator.kernels.echoes.echo_slots` key them.
ECHO_SLOTS = ("energy", "norm", "range", "relief", "spread_plane", "between", "object",
              "dominant", "cos_incidence", "cos_effective")  # fmt: skip

#: The rows of the ``echoes`` table: :data:`ECHO_SLOTS` but the object index (int64, apart).
ECHO_ROWS = tuple(name for name in ECHO_SLOTS if name != "object")

#: The rows of the ``entries`` table; the object index (int64) apart.
ENTRY_ROWS = ("range", "relief", "backscatter", "spread", "cos_incidence", "cos_effective")

#: The fields of the ``out`` tuple: :class:`~simulator.steps.returns.Returns`' in this order.
RETURN_FIELDS = ("pulse", "return_number", "num_returns", "range_m", "intensity", "object_index",
                 *DIAGNOSTIC_FIELDS)  # fmt: skip


def returns_out(size: int, object_dtype: Any, diagnostics: bool = True) -> tuple[NDArray, ...]:
    """An ``out`` tuple of ``size`` returns (unset), the object index of ``object_dtype``;
    the diagnostic fields empty unless ``diagnostics``."""
    diag = size if diagnostics else 0
    return (np.empty(size, np.int64), np.empty(size, np.uint8), np.empty(size, np.uint8),
            np.empty(size), np.empty(size), np.empty(size, object_dtype),
            *(np.empty(diag) for _ in DIAGNOSTIC_FIELDS))  # fmt: skip


def echo_table(slots: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """An ``echoes`` pair of ``slots`` slots (unset): the (9, slots) float64 table of
    :data:`ECHO_ROWS` and the (slots,) int64 object index."""
    return np.empty((len(ECHO_ROWS), slots)), np.empty(slots, dtype=np.int64)


def selection_tables(pulses: int, width: int) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """A ``selection`` pair for ``pulses`` pulses of up to ``width`` returns, no return
    chosen: (3, pulses, width) int64 ``(slot, return_number, num_returns)``, the slot -1
    and the numbers 0, and (3, pulses, width) float64 ``(range_m, spread_m,
    peak_factor)``, 0."""
    chosen = np.zeros((3, pulses, width), dtype=np.int64)
    chosen[0] = -1
    return chosen, np.zeros((3, pulses, width))


@njit(inline="always", cache=True)
def echoes_of_pulse(  # type: ignore[no-untyped-def]
    base, width, weights, hit_of_slot, entries, obj, separation, echoes, e_obj, ints, sums
):  # fmt: skip
    """The echoes of the pulse whose ``width`` slots start at ``base``: ``hit_of_slot``
    maps each slot to an entry (-1: none; a column of ``entries`` and of ``obj``), and
    ``weights`` gives each slot its share of the pulse's energy. The entries sorted by
    range, split at gaps of more than ``separation``, each echo accumulated
    (:func:`finish_echo`) into slot ``base + e`` of ``echoes`` and ``e_obj``. Returns how
    many (``ints`` and ``sums``, the module docstring's, are scratch)."""
    n = 0
    for k in range(width):  # insertion sort of the slots that hit, by range (stable)
        h = hit_of_slot[base + k]
        if h >= 0:
            r = entries[0, h]
            j = n
            while j > 0 and sums[3, j - 1] > r:  # (the ranges at hand: no load through hit)
                ints[0, j], ints[1, j], sums[3, j] = ints[0, j - 1], ints[1, j - 1], sums[3, j - 1]
                j -= 1
            ints[0, j], ints[1, j], sums[3, j] = k, h, r
            n += 1
    echo = -1
    start = 0
    prev = 0.0
    for q in range(n + 1):
        close = q == n
        if not close:
            r = sums[3, q]
            close = q > 0 and r - prev > separation
        if close and echo >= 0:  # finish echo `echo` over sub-rays start..q-1
            finish_echo(base + echo, start, q, ints, 1, base, weights, entries, obj, sums,
                        echoes, e_obj)  # fmt: skip
        if q == n:
            break
        if q == 0 or close:
            echo += 1
            start = q
        prev = r
    return echo + 1


@njit(inline="always", cache=True)
def finish_echo(  # type: ignore[no-untyped-def]
    slot, start, stop, ints, entry_row, weight_base, weights, entries, obj, sums, echoes, e_obj
):  # fmt: skip
    """Accumulate one echo into ``slot`` of ``echoes`` and ``e_obj``: the entries
    ``ints[entry_row, start:stop]`` (columns of ``entries`` and ``obj``), entry ``t``
    weighing ``weights[weight_base + ints[0, t]]``, summed in the order the specification
    sums them (``ints``' row 2 and ``sums``' rows 0 to 2 are scratch)."""
    energy = 0.0
    for t in range(start, stop):
        energy += weights[weight_base + ints[0, t]] * entries[2, ints[entry_row, t]]
    wsum = wr = wrel = wsp = wci = wce = 0.0
    m = 0
    for t in range(start, stop):
        i = ints[entry_row, t]
        w = weights[weight_base + ints[0, t]]
        e = w * entries[2, i]
        ew = e if energy > 0.0 else w
        wsum += ew
        wr += ew * entries[0, i]
        wrel += ew * entries[1, i]
        wsp += ew * entries[3, i]
        wci += ew * entries[4, i]
        wce += ew * entries[5, i]
        f = 0
        while f < m and ints[2, f] != obj[i]:
            f += 1
        if f == m:
            ints[2, m] = obj[i]
            sums[0, m] = sums[1, m] = sums[2, m] = 0.0
            m += 1
        sums[0, f] += e
        sums[1, f] += ew
        sums[2, f] += ew * entries[0, i]
    mean_r = wr / wsum
    for f in range(1, m):  # the objects by index, as the spec sums them
        g = f
        while g > 0 and ints[2, g - 1] > ints[2, g]:
            ints[2, g - 1], ints[2, g] = ints[2, g], ints[2, g - 1]
            for row in range(3):
                sums[row, g - 1], sums[row, g] = sums[row, g], sums[row, g - 1]
            g -= 1
    var = 0.0
    best = 0
    for f in range(m):
        dr = sums[2, f] / max(sums[1, f], 1e-300) - mean_r
        var += sums[1, f] * (dr * dr)  # x * x, as numpy squares (pow may differ)
        # Most energy; on a tie the higher object index, as the numpy spec.
        if sums[0, f] >= sums[0, best]:
            best = f
    echoes[0, slot] = energy
    echoes[1, slot] = wsum
    echoes[2, slot] = mean_r
    echoes[3, slot] = wrel / wsum
    echoes[4, slot] = wsp / wsum
    echoes[5, slot] = var / max(wsum, 1e-300)
    echoes[6, slot] = sums[0, best]
    echoes[7, slot] = wci / wsum
    echoes[8, slot] = wce / wsum
    e_obj[slot] = ints[2, best]


@njit(inline="always", cache=True)
def insert_by_range(ranked, measured, m, k):  # type: ignore[no-untyped-def]
    """Echo ``k`` inserted among the ``m`` in ``ranked[0]`` (sorted by measured range,
    ``measured[0]``), after those of equal range (a stable insertion): returns ``m + 1``."""
    j = m
    r = measured[0, k]
    while j > 0 and measured[0, ranked[0, j - 1]] > r:
        ranked[0, j] = ranked[0, j - 1]
        j -= 1
    ranked[0, j] = k
    return m + 1


@njit(inline="always", cache=True)
def report_echoes(  # type: ignore[no-untyped-def]
    p, base, n, m, ranked, measured, mode, max_returns, chosen, chosen_f
):  # fmt: skip
    """The reported returns of pulse ``p`` (the return mode's choice, as
    :func:`simulator.steps.returns.select_returns`) among its ``n`` echoes, ``m`` of them
    detected (``ranked[0]``: their indices by measured range; ``measured``: each echo's
    range, received peak, spread and peak factor), into row ``p`` of the ``selection``
    pair ``chosen``, ``chosen_f``, slot ``base + k`` for echo ``k``: numbered in range
    order. The strongest and second strongest are taken in echo order on ties (a stable
    sort). ``ranked[1]`` is (n or more,) scratch. Returns how many."""
    for k in range(n):
        ranked[1, k] = 0
    for t in range(m):
        ranked[1, ranked[0, t]] = 1
    first = second = -1
    for k in range(n):
        if ranked[1, k] == 0:
            continue
        if first < 0 or measured[1, k] > measured[1, first]:
            first, second = k, first
        elif second < 0 or measured[1, k] > measured[1, second]:
            second = k
    last = ranked[0, m - 1]
    out = 0
    for t in range(m):
        k = ranked[0, t]
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
            chosen[0, p, out] = base + k
            chosen_f[0, p, out] = measured[0, k]
            chosen_f[1, p, out] = measured[2, k]
            chosen_f[2, p, out] = measured[3, k]
            out += 1
    for t in range(out):
        chosen[1, p, t] = t + 1
        chosen[2, p, t] = out
    return out


@njit(inline="always", cache=True)
def select_of_pulse(  # type: ignore[no-untyped-def]
    p, n, base, echoes, key0, model, chosen, chosen_f, measured, ranked
):  # fmt: skip
    """Pulse ``p``'s returns among its ``n`` echoes, in slots ``base ...`` of
    ``echoes``: measured (``key0`` is the hash key of its first echo's jitter), detected,
    and chosen by the return mode into row ``p`` of the ``selection`` pair ``chosen``,
    ``chosen_f`` (``measured`` and ``ranked``, (4, n or more) float64 and (2, n or more)
    int64, are scratch). Returns how many. ``model``'s numbers are taken out of it here."""
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
    for k in range(n):
        s = base + k
        spread = math.sqrt(echoes[4, s] * echoes[4, s] + 4.0 * echoes[5, s])
        peak = peak_factor(pulse_m, spread)
        measured[2, k] = spread
        measured[3, k] = peak
        key = key0 if k == 0 else mix64(key0 + U(k))
        # the receiver's overlap and speckle (the reading's: where it is reported)
        e = received_energies(rec, key, echoes[2, s], echoes[0, s])[0]
        received = received_peak(e, peak, echoes[2, s], ext)
        measured[1, k] = received
        r = measured_range(echoes[2, s], echoes[3, s], noise_m * hash_normal(key), resolution)
        measured[0, k] = r
        if soft_detected(rec, received, threshold, key) and r >= rmin and r <= rmax:
            m = insert_by_range(ranked, measured, m, k)
    if m == 0:
        return 0
    return report_echoes(p, base, n, m, ranked, measured, mode, max_returns, chosen, chosen_f)


def joined(arrays: list[NDArray[Any]], dtype: Any) -> NDArray[Any]:
    """The arrays one after the other as one contiguous array of ``dtype`` for a kernel
    to read (one array: itself, not copied)."""
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0], dtype=dtype)
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
