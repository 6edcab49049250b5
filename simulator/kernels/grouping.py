"""Inline numba helpers the returns kernels share: echoes accumulated from the surfaces (and
particles) of a pulse, measured, detected and chosen by the return mode, a pulse at a time
(the specification: :mod:`simulator.steps.echoes`,
:func:`simulator.steps.returns.select_returns`).

The kernels are handed their arrays from Python in tuples, always in these orders, and
take them apart once, before their parallel loop, by index (``a = t[0]``: numba 0.68's
parallel loops lose the writes to arrays unpacked from a tuple with ``a, b = t``). The
helpers here, called once a pulse or once an echo, take the arrays one by one: an array
taken out of a tuple costs numba a reference count each time (a third more time in the
formation of layered footprints' echoes, a tenth in the see-through kernel, measured).

* ``entries``, what echoes are made of, one row an entry (a surface a sub-ray met, a
  particle): ``(range_m, relief_m, backscatter, spread_m, object_index, cos_incidence,
  cos_effective)``, float64 but the int64 object;
* ``echoes``, the echoes, one row a slot: ``(energy, norm, range_true_m, relief_m,
  spread_plane_m, between_var, object_index, dominant_energy, cos_incidence,
  cos_effective)`` (:data:`ECHO_SLOTS`), float64 but the int64 object;
* ``sums``, scratch of one echo's objects: ``(object, energy, weight, weight x range)``;
* ``selection``, the reported returns, (P, R) each: ``(slot, return_number,
  num_returns, range_m, spread_m, peak_factor)``, slot -1 where none (the ``out_*``
  arrays of :func:`select_of_pulse`);
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
    "ECHO_SLOTS",
    "RETURN_FIELDS",
    "echoes_of_pulse",
    "finish_echo",
    "insert_by_range",
    "joined",
    "report_echoes",
    "returns_out",
    "select_of_pulse",
]

#: The names of the ``echoes`` tuple's arrays (the module docstring), as the slot dicts of
#: :func:`simulator.kernels.echoes.echo_slots` key them.
ECHO_SLOTS = ("energy", "norm", "range", "relief", "spread_plane", "between", "object",
              "dominant", "cos_incidence", "cos_effective")  # fmt: skip

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


@njit(inline="always", cache=True)
def echoes_of_pulse(  # type: ignore[no-untyped-def]
    base, width, weights, hit_of_slot, rng, relief, b, spread, obj, cos_inc, cos_eff,
    separation, e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between, e_obj,
    e_dom, e_cos_inc, e_cos_eff, order, hit, objs, obj_e, obj_w, obj_wr, keys,
):  # fmt: skip
    """The echoes of the pulse whose ``width`` slots start at ``base``: ``hit_of_slot``
    maps each slot to an entry (-1: none; ``rng`` to ``cos_eff``, the ``entries``), and
    ``weights`` gives each slot its share of the pulse's energy. The entries sorted by
    range, split at gaps of more than ``separation``, each echo accumulated
    (:func:`finish_echo`) into slot ``base + e`` of the ``e_*`` arrays (the ``echoes``).
    Returns how many (``order`` to ``keys`` are scratch).

    The arrays one by one, not in tuples, as :func:`finish_echo`'s: called once a pulse."""
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
            finish_echo(
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
    return echo + 1


@njit(inline="always", cache=True)
def finish_echo(  # type: ignore[no-untyped-def]
    slot, start, stop, entry, weight_at, weight_base, weights, rng, relief, b, spread, obj,
    cos_inc, cos_eff, objs, obj_e, obj_w, obj_wr, e_energy, e_norm, e_range, e_relief,
    e_spread_plane, e_between, e_obj, e_dom, e_cos_inc, e_cos_eff,
):  # fmt: skip
    """Accumulate one echo into ``slot``: the entries ``entry[start:stop]`` (indices of the
    per-entry inputs), entry ``t`` weighing ``weights[weight_base + weight_at[t]]``, summed
    in the order the specification sums them (``objs`` to ``obj_wr`` are scratch).

    Its arrays one by one (``entries``, ``sums``, ``echoes``), not in tuples: called once
    an echo, and an array taken out of a tuple costs numba a reference count (an atomic
    add and a release) each call, a third more time in the formation of layered
    footprints' echoes (measured)."""
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


@njit(inline="always", cache=True)
def insert_by_range(order, m, rm, k):  # type: ignore[no-untyped-def]
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
def report_echoes(  # type: ignore[no-untyped-def]
    p, base, n, m, order, detected, received, rm, spread, peak, mode, max_returns,
    out_slot, out_number, out_total, out_range, out_spread, out_peak,
):  # fmt: skip
    """The reported returns of pulse ``p`` (the return mode's choice, as
    :func:`simulator.steps.returns.select_returns`) among its ``n`` echoes, ``m`` of them
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
def select_of_pulse(  # type: ignore[no-untyped-def]
    p, n, base, energy, range_true, relief, spread_plane, between, key0, model, out_slot,
    out_number, out_total, out_range, out_spread, out_peak, scratch, order, detected,
):  # fmt: skip
    """Pulse ``p``'s returns among its ``n`` echoes, in slots ``base ...`` of the
    ``echoes``' arrays: measured (``key0`` is the hash key of its first echo's jitter),
    detected, and chosen by the return mode into row ``p`` of the ``selection``'s arrays
    (``scratch``, (4, n or more) float64, ``order`` and ``detected`` are scratch).
    Returns how many. Called once a pulse, so its arrays one by one (see
    :func:`finish_echo`); ``model``'s numbers are taken out of it here."""
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
    rm, received, spread, peak = scratch[0], scratch[1], scratch[2], scratch[3]
    m = 0
    for k in range(n):
        s = base + k
        spread[k] = math.sqrt(spread_plane[s] * spread_plane[s] + 4.0 * between[s])
        peak[k] = peak_factor(pulse_m, spread[k])
        key = key0 if k == 0 else mix64(key0 + U(k))
        # the receiver's overlap and speckle (the reading's: where it is reported)
        e = received_energies(rec, key, range_true[s], energy[s])[0]
        received[k] = received_peak(e, peak[k], range_true[s], ext)
        r = measured_range(range_true[s], relief[s], noise_m * hash_normal(key), resolution)
        rm[k] = r
        if soft_detected(rec, received[k], threshold, key) and r >= rmin and r <= rmax:
            m = insert_by_range(order, m, rm, k)
    if m == 0:
        return 0
    return report_echoes(
        p, base, n, m, order, detected, received, rm, spread, peak, mode, max_returns,
        out_slot, out_number, out_total, out_range, out_spread, out_peak,
    )  # fmt: skip


def joined(arrays: list[NDArray[Any]], dtype: Any) -> NDArray[Any]:
    """The arrays one after the other as one contiguous array of ``dtype`` for a kernel
    to read (one array: itself, not copied)."""
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0], dtype=dtype)
    return np.concatenate(arrays).astype(dtype, copy=False) if arrays else np.zeros(0, dtype)
