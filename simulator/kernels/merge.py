"""One chunk's returns joined from two sources that share no pulse, in parallel kernels
(the specification: :func:`simulator.steps.merge.merge_returns`)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..steps import merge as spec
from ..steps.returns import DIAGNOSTIC_FIELDS, Returns

__all__ = ["merge_returns"]


def merge_returns(
    single: Returns | None,
    kept: NDArray[np.bool_] | None,
    footprint: Returns,
    pulses: NDArray[np.intp],
    *,
    diagnostics: bool = False,
) -> Returns:
    """:func:`simulator.steps.merge.merge_returns`, value for value: the order by one walk
    along the two runs, each field gathered from both by one parallel kernel (no
    joined copy, no sort)."""
    if single is None or kept is None:
        return spec.merge_returns(single, kept, footprint, pulses,
                                          diagnostics=diagnostics)  # fmt: skip
    rows = np.flatnonzero(kept)
    if len(rows) == 0 or len(footprint) == 0:  # (one source: the specification's copy)
        return spec.merge_returns(single, kept, footprint, pulses,
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
