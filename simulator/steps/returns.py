"""The returns a chunk reports: the :class:`Returns` table, and the sensor's return modes.

Return modes (``return_mode``), among the detected echoes of a pulse: ``strongest``
(highest received peak), ``first``, ``last``, ``dual`` (the RS-Helios rule: the
strongest and the last, or the strongest and the second strongest when the strongest
is the last), and ``multi`` (the first ``max_returns`` by range). ``return_number``
counts the reported returns of a pulse by range from 1; ``num_returns`` is how many.

A chunk cast one ray a pulse reports each detected hit as its pulse's only return
(:func:`single_returns`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from ..chunk import Hits
from .hits import HitResults

__all__ = ["DIAGNOSTIC_FIELDS", "Returns", "group_starts", "select_returns", "single_returns"]


@dataclass
class Returns:
    """The returns a chunk reports, one row each, in pulse then range order: what the
    point record is made of.

    Attributes
    ----------
    pulse : (K,) int64
        Pulse of each return (index in the chunk); its point lies along that pulse's
        central ray.
    range_m : (K,) float64
        Measured range.
    intensity : (K,) float64
        Calibrated reflectivity, clipped.
    object_index : (K,) int32
        The object that gave the return (most of its energy).
    return_number, num_returns : (K,) uint8
        Its number among its pulse's reported returns (from 1, by range), and how many.
    range_true_m, cos_incidence, cos_effective, spread_m, peak_factor, energy_fraction : (K,)
        Diagnostics (float64); ``None`` when not asked for.
    """

    pulse: NDArray[np.int64]
    range_m: NDArray[np.float64]
    intensity: NDArray[np.float64]
    object_index: NDArray[np.int32]
    return_number: NDArray[np.uint8]
    num_returns: NDArray[np.uint8]
    range_true_m: NDArray[np.float64] | None = None
    cos_incidence: NDArray[np.float64] | None = None
    cos_effective: NDArray[np.float64] | None = None
    spread_m: NDArray[np.float64] | None = None
    peak_factor: NDArray[np.float64] | None = None
    energy_fraction: NDArray[np.float64] | None = None

    def __len__(self) -> int:
        return len(self.pulse)

    @classmethod
    def concatenate(cls, parts: list[Returns]) -> Returns:
        """The returns of several blocks, one after the other (their ``pulse`` already
        counting in the whole); a diagnostic field ``None`` in the first is ``None``."""
        return cls(**{
            f.name: None if getattr(parts[0], f.name) is None
            else np.concatenate([getattr(p, f.name) for p in parts])
            for f in fields(cls)
        })  # fmt: skip


#: The diagnostic fields of :class:`Returns`.
DIAGNOSTIC_FIELDS = (
    "range_true_m", "cos_incidence", "cos_effective", "spread_m", "peak_factor",
    "energy_fraction",
)  # fmt: skip


def group_starts(keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """Start positions of the runs of equal, sorted keys."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))


def select_returns(
    pulse: NDArray[np.int64],
    range_m: NDArray[np.float64],
    received: NDArray[np.float64],
    mode: str,
    max_returns: int,
) -> tuple[NDArray[np.int64], NDArray[np.uint8], NDArray[np.uint8]]:
    """Pick the reported returns among a chunk's detected echoes.

    Parameters
    ----------
    pulse : (D,) int64
        Pulse of each detected echo.
    range_m : (D,) float64
        Measured range of each.
    received : (D,) float64
        Received peak of each (what "strongest" compares).
    mode : {"strongest", "first", "last", "dual", "multi"}
    max_returns : int
        For ``multi``.

    Returns
    -------
    chosen : (K,) int64
        Indices into the inputs, ordered by pulse then range.
    return_number, num_returns : (K,) uint8
    """
    d = len(pulse)
    by_range = np.lexsort((range_m, pulse))
    starts = group_starts(pulse[by_range])
    counts = np.diff(np.append(starts, d))
    group = np.repeat(np.arange(len(starts)), counts)  # pulse group of each sorted position
    group_of = np.zeros(d, dtype=np.int64)  # ... and of each echo
    group_of[by_range] = group
    rank_r = np.zeros(d, dtype=np.int64)
    rank_r[by_range] = np.arange(d) - starts[group]
    by_strength = np.lexsort((-received, pulse))
    rank_s = np.zeros(d, dtype=np.int64)
    rank_s[by_strength] = np.arange(d) - starts[group]
    is_last = rank_r == counts[group_of] - 1
    if mode == "strongest":
        keep = rank_s == 0
    elif mode == "first":
        keep = rank_r == 0
    elif mode == "last":
        keep = is_last
    elif mode == "dual":
        strongest = rank_s == 0
        strongest_is_last = np.zeros(len(starts), dtype=bool)
        strongest_is_last[group_of[strongest]] = is_last[strongest]
        keep = strongest | np.where(strongest_is_last[group_of], rank_s == 1, is_last)
    elif mode == "multi":
        keep = rank_r < max_returns
    else:
        raise ValueError(f"unknown return mode {mode!r}")
    chosen = by_range[keep[by_range]]
    cp = pulse[chosen]
    cstarts = group_starts(cp)
    ccounts = np.diff(np.append(cstarts, len(chosen)))
    cgroup = np.repeat(np.arange(len(cstarts)), ccounts)
    number = (np.arange(len(chosen)) - cstarts[cgroup] + 1).astype(np.uint8)
    total = ccounts[cgroup].astype(np.uint8)
    return chosen, number, total


def single_returns(results: HitResults, hits: Hits, *, diagnostics: bool = False) -> Returns:
    """The returns of a chunk cast with one ray a pulse: each detected hit is its pulse's
    only return (the same for every backend: a gather).

    Parameters
    ----------
    results : HitResults
        The per-hit model of the chunk (ray ``i`` is pulse ``i``).
    hits : Hits
    diagnostics : bool
        Also gather the diagnostic fields.
    """
    sel_hit = np.flatnonzero(results.keep)
    sel = results.idx[sel_hit]
    count = len(sel)
    out = Returns(
        pulse=sel,
        range_m=results.range_m[sel_hit],
        intensity=results.intensity[sel_hit],
        object_index=hits.object_index[sel],
        return_number=np.ones(count, dtype=np.uint8),
        num_returns=np.ones(count, dtype=np.uint8),
    )
    if diagnostics:
        out.range_true_m = hits.range_m[sel].astype(np.float64)
        out.cos_incidence = results.cos_incidence[sel_hit]
        out.cos_effective = results.cos_effective[sel_hit]
        out.spread_m = results.spread_m[sel_hit]
        out.peak_factor = results.peak_factor[sel_hit]
        out.energy_fraction = np.ones(count)
    return out
