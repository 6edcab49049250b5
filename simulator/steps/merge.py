"""One chunk's returns joined from two sources that share no pulse: the single-ray returns
that stand and those recomputed for some pulses (the numba kernel:
:func:`simulator.kernels.merge.merge_returns`)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
from numpy.typing import NDArray

from .returns import DIAGNOSTIC_FIELDS, Returns

__all__ = ["merge_returns"]


def merge_returns(
    single: Returns | None,
    kept: NDArray[np.bool_] | None,
    footprint: Returns,
    pulses: NDArray[np.intp],
    *,
    diagnostics: bool = False,
) -> Returns:
    """One chunk's returns from two sources that share no pulse: the single-ray returns
    ``single[kept]``, and the returns of footprints cast for the chunk's pulses
    ``pulses`` (``footprint.pulse`` indexes ``pulses``). In pulse order, each pulse's
    returns in their own (range) order.

    Parameters
    ----------
    single : Returns or None
        Returns of the chunk cast one ray a pulse (None: none stands).
    kept : (len(single),) bool or None
        Which of them stand.
    footprint : Returns
        Returns of the footprints of ``pulses``.
    pulses : (F,) intp
        The chunk's pulses those footprints belong to.
    diagnostics : bool
        Keep the diagnostic fields (both sources must carry them).
    """
    names = [f.name for f in fields(Returns) if diagnostics or f.name not in DIAGNOSTIC_FIELDS]
    b_pulse = np.asarray(pulses, dtype=np.int64)[footprint.pulse]
    if single is None or kept is None:  # (fog touches every pulse)
        return Returns(**{k: b_pulse if k == "pulse" else getattr(footprint, k) for k in names})
    rows = np.flatnonzero(kept)  # (an index array: a gather a field by it beats a mask)
    a_pulse = single.pulse[rows].astype(np.int64)
    # Both are in pulse order and share no pulse: a stable sort of the two by pulse (a
    # merge of two sorted runs) keeps each pulse's returns in their own order; with one
    # source only they are in order already.
    both = np.concatenate([a_pulse, b_pulse])
    one_source = len(rows) == 0 or len(b_pulse) == 0
    order = None if one_source else np.argsort(both, kind="stable")
    out = {"pulse": both if order is None else both[order]}
    for k in names:
        if k != "pulse":
            joined = np.concatenate([getattr(single, k)[rows], getattr(footprint, k)])
            out[k] = joined if order is None else joined[order]
    return Returns(**out)
