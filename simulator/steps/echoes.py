"""Echo formation from footprint sub-rays, and the sensor's return modes.

With ``beam_samples > 1`` every pulse is cast as a fan of sub-rays over its
elliptical Gaussian beam (:mod:`simulator.beam`), each carrying its share ``w`` of the
pulse energy. Each sub-ray hit goes through the per-hit model of a single ray
(incidence, micro-slope, Minnaert backscatter ``b``, in-plane footprint spread, relief),
then:

1. **Grouping.** A pulse's sub-ray hits are sorted by range; a new echo starts where
   the gap to the previous hit exceeds the separation the sensor resolves,
   ``max(min_return_separation_m, pulse length)``.
2. **Energy and range.** An echo's energy is ``E = sum(w b)``; its true range is the
   energy-weighted range of its sub-rays (a mixed point at an edge whose two targets
   are closer than the separation), and its measured range adds the energy-weighted
   relief, the sensor jitter, quantisation and the range window.
3. **Peak factor.** The echo's range extent combines the seed's in-plane footprint
   spread (energy-weighted over its sub-rays) with the spread between the surfaces it
   is made of (twice the energy-weighted standard deviation of the per-object ranges,
   which is the distance between two equal surfaces): ``s = sqrt(s_plane^2 +
   s_between^2)``, peak ``L / sqrt(L^2 + s^2)``. On one plane ``s_between = 0`` and
   the echo is the single-ray result near normal incidence (at grazing incidence its
   range is the footprint's energy-weighted mean, and the relief is averaged).
4. **Detection** against the single ray's threshold: ``E * peak * exp(-2 alpha R) / R^2``.
5. **Labels.** An echo takes the label, instance and material of the object that gave
   it most energy; ``energy_fraction`` is that object's share.

Return modes (``return_mode``), among the detected echoes of a pulse: ``strongest``
(highest received peak), ``first``, ``last``, ``dual`` (the RS-Helios rule: the
strongest and the last, or the strongest and the second strongest when the strongest
is the last), and ``multi`` (the first ``max_returns`` by range). ``return_number``
counts the reported returns of a pulse by range from 1; ``num_returns`` is how many.

The sensor jitter of the nearest echo of a pulse is the single ray's
(``hash_normal(mix64(seed + pulse_id))``); echo ``k > 0`` uses
``hash_normal(mix64(mix64(seed + pulse_id) + k))``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import BeamPattern
from ..chunk import CastChunk, Hits, Layer, positions_in
from ..config.scene import GLASS_REFRACTIVE_INDEX, TRANSMITTANCE_LAWS
from .hits import (
    HitResults,
    ReturnModel,
    Streams,
    in_window,
    measured_range,
    received_peak,
    reported_intensity,
    sensor_jitter_m,
)

__all__ = [
    "Behind",
    "Echoes",
    "Returns",
    "echo_returns",
    "form_echoes",
    "fresnel_pane_ratio",
    "fresnel_pane_reflectance_ratio",
    "front_echo_factor",
    "jitter_keys",
    "layers_behind",
    "merge_returns",
    "of_pulses",
    "report_echoes",
    "see_through_returns",
    "select_returns",
    "single_returns",
    "surface_returns",
    "transmittance_at",
    "with_front_laws",
]


@dataclass
class Echoes:
    """One row per echo of a chunk, ordered by pulse then range.

    Attributes
    ----------
    pulse : (E,) int64
        Pulse (index in the chunk) of each echo.
    rank : (E,) int64
        Position of the echo among its pulse's echoes by range, from 0.
    energy : (E,) float64
        ``sum(w b)`` of its sub-rays.
    range_true_m : (E,) float64
        Energy-weighted geometric range.
    relief_m : (E,) float64
        Energy-weighted relief offset.
    spread_m, peak_factor : (E,) float64
        Combined range extent and the echo's peak factor.
    object_index : (E,) int32
        The object that gave the echo most energy.
    energy_fraction : (E,) float64
        That object's share of the echo's energy.
    cos_incidence, cos_effective : (E,) float64
        Energy-weighted incidence cosines (diagnostics).
    """

    pulse: NDArray[np.int64]
    rank: NDArray[np.int64]
    energy: NDArray[np.float64]
    range_true_m: NDArray[np.float64]
    relief_m: NDArray[np.float64]
    spread_m: NDArray[np.float64]
    peak_factor: NDArray[np.float64]
    object_index: NDArray[np.int32]
    energy_fraction: NDArray[np.float64]
    cos_incidence: NDArray[np.float64]
    cos_effective: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.pulse)

    @classmethod
    def concatenate(cls, parts: list[Echoes]) -> Echoes:
        """The echoes of several tables, one after the other (no longer in pulse order)."""
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts])
                      for f in fields(cls)})  # fmt: skip


def _group_starts(keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """Start positions of the runs of equal, sorted keys."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))


def form_echoes(
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
    """Group sub-ray hits into echoes (see the module docstring).

    Parameters
    ----------
    pulse : (H,) int64
        Pulse of each sub-ray hit.
    weight : (H,) float64
        Energy share of the sub-ray in its beam.
    range_m, relief_m, backscatter, spread_m, cos_incidence, cos_effective : (H,) float64
        The per-hit model's results for each sub-ray hit.
    object_index : (H,) int32
        Object each sub-ray hit.
    separation_m : float
        Echoes closer than this merge.
    pulse_length_m : float
        ``c * FWHM / 2`` (the peak factor's ``L``; 0 turns stretching off).

    Returns
    -------
    Echoes
    """
    order = np.lexsort((range_m, pulse))
    p = pulse[order]
    r = range_m[order]
    w = weight[order]
    e = w * backscatter[order]
    obj = object_index[order].astype(np.int64)
    new_pulse = np.concatenate([[True], p[1:] != p[:-1]]) if len(p) else np.zeros(0, bool)
    gap = np.concatenate([[np.inf], np.diff(r)]) if len(p) else np.zeros(0)
    echo = np.cumsum(new_pulse | (gap > separation_m)) - 1
    n = int(echo[-1]) + 1 if len(echo) else 0

    energy = np.bincount(echo, e, minlength=n)
    # Energy weights; an echo of black surfaces (E = 0) falls back to the beam shares.
    ew = np.where(energy[echo] > 0.0, e, w)
    norm = np.bincount(echo, ew, minlength=n)

    def mean(values: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.bincount(echo, ew * values, minlength=n) / norm

    range_true = mean(r)
    # Per (echo, object) runs: the dominant object and the spread between surfaces.
    by_obj = np.lexsort((obj, echo))
    key = echo[by_obj] * (int(obj.max()) + 1 if len(obj) else 1) + obj[by_obj]
    starts = _group_starts(key)
    run_echo = echo[by_obj][starts]
    run_obj = obj[by_obj][starts]
    # Sums in order, one after the other (bincount; reduceat would add a run's first
    # entry to the pairwise sum of the others): what the kernel adds, bit for bit.
    run = np.cumsum(np.concatenate([[True], key[1:] != key[:-1]])) - 1 if len(key) else key
    runs = len(starts)
    run_w = np.bincount(run, ew[by_obj], minlength=runs)
    run_e = np.bincount(run, e[by_obj], minlength=runs)
    run_r = np.bincount(run, (ew * r)[by_obj], minlength=runs) / np.maximum(run_w, 1e-300)
    between_var = np.bincount(
        run_echo, run_w * (run_r - range_true[run_echo]) ** 2, minlength=n
    ) / np.maximum(norm, 1e-300)
    # Runs by echo, then energy: each echo's most energetic object is the last of its group.
    best = np.lexsort((run_e, run_echo))
    best_echo = run_echo[best]
    dominant_run = best[np.append(best_echo[1:] != best_echo[:-1], True)] if n else best
    spread_plane = mean(spread_m[order])
    spread = np.sqrt(spread_plane**2 + 4.0 * between_var)
    peak = physics.pulse_peak_factor(pulse_length_m, spread)
    echo_pulse = p[_group_starts(echo)] if n else np.zeros(0, dtype=np.int64)
    first_echo_of_pulse = np.concatenate([[True], echo_pulse[1:] != echo_pulse[:-1]])
    pulse_start_idx = np.maximum.accumulate(np.where(first_echo_of_pulse, np.arange(n), 0))
    dominant_e = run_e[dominant_run]
    return Echoes(
        pulse=echo_pulse.astype(np.int64),
        rank=np.arange(n) - pulse_start_idx,
        energy=energy,
        range_true_m=range_true,
        relief_m=mean(relief_m[order]),
        spread_m=spread,
        peak_factor=np.asarray(peak, dtype=np.float64),
        object_index=run_obj[dominant_run].astype(np.int32),
        energy_fraction=np.where(energy > 0.0, dominant_e / np.maximum(energy, 1e-300), 1.0),
        cos_incidence=mean(cos_incidence[order]),
        cos_effective=mean(cos_effective[order]),
    )


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
    starts = _group_starts(pulse[by_range])
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
    cstarts = _group_starts(cp)
    ccounts = np.diff(np.append(cstarts, len(chosen)))
    cgroup = np.repeat(np.arange(len(cstarts)), ccounts)
    number = (np.arange(len(chosen)) - cstarts[cgroup] + 1).astype(np.uint8)
    total = ccounts[cgroup].astype(np.uint8)
    return chosen, number, total


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


#: The diagnostic fields of :class:`Returns`.
DIAGNOSTIC_FIELDS = (
    "range_true_m", "cos_incidence", "cos_effective", "spread_m", "peak_factor",
    "energy_fraction",
)  # fmt: skip


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
    """The returns of a chunk cast one ray a pulse, with the surfaces behind see-through
    ones (the specification): a pulse whose ray passed a see-through surface and met
    another reports the echoes of all its surfaces (:func:`echo_returns`), any other
    pulse its one hit, if detected (:func:`single_returns`).

    Parameters
    ----------
    results, hits
        The per-hit model (every field) and the hits of the chunk's rays (ray ``p`` is
        pulse ``p``).
    pulse_id, beam, model, streams
        As :func:`echo_returns` (``beam`` of one ray a pulse).
    behind : sequence of Behind
        The surfaces behind see-through ones, a layer each (:func:`layers_behind`).
    diagnostics : bool
        Also report the diagnostic fields.

    Returns
    -------
    Returns
    """
    if beam.samples != 1:
        raise ValueError(f"see_through_returns is for one ray a pulse, not {beam.samples}")
    single = single_returns(results, hits, diagnostics=diagnostics)
    if not behind:
        return single
    pulses = behind[0].rays  # one ray a pulse: the pulses that passed one
    touched = np.zeros(len(hits.range_m), dtype=bool)
    touched[pulses] = True
    echoes = echo_returns(results, hits, pulse_id, beam, model, streams, behind, pulses)
    return merge_returns(single, ~touched[single.pulse], echoes, pulses, diagnostics=diagnostics)


def echo_inputs(results: HitResults, hits: Hits) -> tuple[NDArray, ...]:
    """The per-hit inputs of echo formation, in the order :func:`form_echoes` takes them:
    true range, relief, backscatter, spread, object, cos incidence, cos effective."""
    idx = results.idx
    return (
        hits.range_m[idx].astype(np.float64),
        results.relief_m,
        results.backscatter,
        results.spread_m,
        hits.object_index[idx],
        results.cos_incidence,
        results.cos_effective,
    )


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
    """The returns of a chunk cast as footprint sub-rays (the specification): echoes
    formed, measured, detected and selected by the return mode (see the module docstring),
    with the surfaces behind see-through ones.

    Parameters
    ----------
    results : HitResults
        The per-hit model of the sub-ray hits (sub-ray ``k`` of pulse ``p`` is ray
        ``p * beam.samples + k``), computed without the sensor jitter.
    hits : Hits
        The sub-rays' hits.
    pulse_id : (P,) uint64
        Global id of each pulse (pulse ``p`` of the chunk is ``pulse_id[p]``: the chunk's
        pulses in order, or the footprints that adaptive sampling casts).
    beam : BeamPattern
        The sub-rays' energy shares.
    model : ReturnModel
    streams : Streams
    behind : sequence of Behind
        The surfaces behind see-through ones, a layer each (:func:`surface_returns`).
    pulses : (F,) intp, optional
        Only these pulses of the chunk (increasing): the returns' ``pulse`` then counts
        among them.

    Returns
    -------
    Returns
        With every diagnostic field.
    """
    if pulses is not None:
        results, hits, behind = of_pulses(results, hits, behind, pulses, beam.samples)
        pulse_id = np.asarray(pulse_id)[pulses]
    return surface_returns(results, hits, pulse_id, beam, model, streams, behind=behind)


def of_pulses(
    results: HitResults,
    hits: Hits,
    behind: Sequence[Behind],
    pulses: NDArray[np.intp],
    samples: int,
) -> tuple[HitResults, Hits, list[Behind]]:
    """The per-hit model, hits and surfaces behind of the pulses ``pulses`` (increasing)
    of a chunk cast with ``samples`` rays a pulse, their rays renumbered from 0."""
    pulses = np.asarray(pulses)
    rays = (pulses[:, None] * samples + np.arange(samples)).ravel()
    layers = []
    for b in behind:
        at, found = positions_in(pulses, b.rays // samples)
        rows = np.flatnonzero(found)
        renumbered = (at[rows] * samples + b.rays[rows] % samples).astype(np.int64)
        layers.append(
            Behind(renumbered, b.results.take_rays(rows), b.hits.take(rows), b.two_way[rows])
        )
    return replace(results, behind=()).take_rays(rays), hits.take(rays), layers


def jitter_keys(
    echoes: Echoes, pulse_id: NDArray[np.uint64], streams: Streams
) -> NDArray[np.uint64]:
    """The hash keys of the echoes' sensor jitter (see the module docstring): (E,) uint64.

    Parameters
    ----------
    echoes : Echoes
    pulse_id : (P,) uint64
        Global id of each pulse of the chunk (``echoes.pulse`` indexes it).
    streams : Streams
    """
    ids = np.asarray(pulse_id, dtype=np.uint64)[echoes.pulse]
    with np.errstate(over="ignore"):
        key = physics.mix64(streams.sensor_noise + ids)
        later = physics.mix64(key + echoes.rank.astype(np.uint64))
    return np.where(echoes.rank == 0, key, later)


def report_echoes(
    echoes: Echoes, key: NDArray[np.uint64], model: ReturnModel, pulse_id: NDArray[np.uint64]
) -> Returns:
    """Echoes measured (relief, jitter from ``key``, quantisation), detected against the
    threshold and the range window, selected by the return mode, and their intensity
    reported (through the sensor's intensity response: the pulse's channel, the measured
    range; :func:`simulator.steps.hits.reported_intensity`).

    Parameters
    ----------
    echoes : Echoes
        In any order (selection sorts by pulse and range).
    key : (E,) uint64
        Hash key of each echo's sensor jitter.
    model : ReturnModel
    pulse_id : (P,) uint64
        Global id of each pulse (``echoes.pulse`` indexes it).

    Returns
    -------
    Returns
        With every diagnostic field.
    """
    r_true = echoes.range_true_m
    received = received_peak(echoes.energy, echoes.peak_factor, r_true, model)
    range_meas = measured_range(r_true, echoes.relief_m, sensor_jitter_m(key, model), model)
    sel = np.flatnonzero(in_window(received, range_meas, model))
    chosen, number, total = select_returns(
        echoes.pulse[sel], range_meas[sel], received[sel], model.return_mode,
        model.returns_per_pulse,
    )  # fmt: skip
    e = sel[chosen]
    ids = np.asarray(pulse_id, dtype=np.uint64)[echoes.pulse[e]]
    return Returns(
        pulse=echoes.pulse[e],
        range_m=range_meas[e],
        intensity=reported_intensity(echoes.energy[e], model, range_meas[e], ids),
        object_index=echoes.object_index[e],
        return_number=number,
        num_returns=total,
        range_true_m=r_true[e],
        cos_incidence=echoes.cos_incidence[e],
        cos_effective=echoes.cos_effective[e],
        spread_m=echoes.spread_m[e],
        peak_factor=echoes.peak_factor[e],
        energy_fraction=echoes.energy_fraction[e],
    )


@dataclass(frozen=True)
class Behind:
    """The surfaces one layer further behind see-through surfaces, of the rays that met
    one there.

    Attributes
    ----------
    rays : (M,) int64
        The cast rays that met a surface in this layer, increasing.
    results : HitResults
        The per-hit model of those surfaces (every field; ``idx`` counts the layer's rays).
    hits : Hits
        The surfaces, (M,); ranges from the rays' origins.
    two_way : (M,) float64
        The share of each ray's light that reaches its surface and comes back: the
        product of ``transmittance^2`` of the surfaces in front.
    """

    rays: NDArray[np.int64]
    results: HitResults
    hits: Hits
    two_way: NDArray[np.float64]


def layers_behind(
    hits: Hits,
    layers: Sequence[Layer],
    results: Sequence[HitResults],
    transmittance_of_object: NDArray[np.float64],
    porous_of_object: NDArray[np.bool_] | None = None,
    law_of_object: NDArray[np.int8] | None = None,
    first: HitResults | None = None,
) -> list[Behind]:
    """The surfaces behind see-through ones, a :class:`Behind` a layer, with the two-way
    transmittance in front of each: ``T^2`` a pane in front, ``T`` a porous layer (the
    gap model: the light comes back through the gap it went through), ``T`` at each
    ray's incidence by its material's ``transmittance_law`` (:func:`transmittance_at`).

    Parameters
    ----------
    hits : Hits
        The first surfaces of the cast rays.
    layers : sequence of Layer
        The surfaces behind them, a layer each (a layer's rays are among the last's).
    results : sequence of HitResults
        The per-hit model of each layer.
    transmittance_of_object : (objects + 1,) float64
        Each object's transmittance, and 0 for a miss (object -1).
    porous_of_object : (objects + 1,) bool, optional
        Which objects are porous layers (none when not given).
    law_of_object : (objects + 1,) int8, optional
        Each object's transmittance law (codes of
        :data:`simulator.config.scene.TRANSMITTANCE_LAWS`; all constant when not given);
        ``first`` is then the per-hit model of the first surfaces.
    first : HitResults, optional
    """
    out = []
    two_way = np.ones(len(hits.range_m))  # by ray, then by the last layer's rays
    front_object, front_rays = hits.object_index, None
    front_results = first
    for layer, layer_results in zip(layers, results, strict=True):
        at = layer.rays if front_rays is None else np.searchsorted(front_rays, layer.rays)
        t = transmittance_of_object[front_object[at]]
        if law_of_object is not None and front_results is not None:
            cos_front = np.ones(len(front_object))
            cos_front[front_results.idx] = front_results.cos_incidence
            t = transmittance_at(t, law_of_object[front_object[at]], cos_front[at])
        before = two_way[at]
        two_way = before * t * t  # a pane: T each way
        if porous_of_object is not None:  # a porous layer: T, through one gap both ways
            two_way = np.where(porous_of_object[front_object[at]], before * t, two_way)
        out.append(Behind(layer.rays, layer_results, layer.hits, two_way))
        front_object, front_rays = layer.hits.object_index, layer.rays
        front_results = layer_results
    return out


#: The codes of the transmittance laws (``law_of_object``).
LAW_CONSTANT, LAW_FRESNEL, LAW_PATH_LENGTH = (
    TRANSMITTANCE_LAWS.index(law) for law in ("constant", "fresnel", "path_length")
)


def _fresnel_pane(c: NDArray[np.float64], n: float) -> NDArray[np.float64]:
    """What an uncoated glass pane passes at incidence cosine ``c`` (in [0, 1]): two
    faces, unpolarised light, the reflections between the faces summed incoherently."""
    cos_t = np.sqrt(1.0 - (1.0 - c * c) / (n * n))
    r_s = ((c - n * cos_t) / (c + n * cos_t)) ** 2
    r_p = ((n * c - cos_t) / (n * c + cos_t)) ** 2
    return 0.5 * ((1.0 - r_s) / (1.0 + r_s) + (1.0 - r_p) / (1.0 + r_p))


def fresnel_pane_ratio(
    cos_incidence: NDArray[np.float64], n: float = GLASS_REFRACTIVE_INDEX
) -> NDArray[np.float64]:
    """A glass pane's transmittance at an incidence over that at normal incidence:
    ``T(theta) / T(0)``, (N,) float64 in [0, 1].

    Two faces, unpolarised light, the reflections between the faces summed incoherently:
    each polarisation passes ``(1 - R)^2 / (1 - R^2) = (1 - R) / (1 + R)`` of the light,
    ``R`` the Fresnel reflectance of one face (air to glass of index ``n``, the same
    glass to air), and the pane the mean of the two: 0.923 at normal incidence for
    ``n = 1.5``, 0 at grazing incidence (Born & Wolf, Principles of Optics, 1.5.3).
    """
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    r_0 = ((n - 1.0) / (n + 1.0)) ** 2
    return _fresnel_pane(c, n) / ((1.0 - r_0) / (1.0 + r_0))


def fresnel_pane_reflectance_ratio(
    cos_incidence: NDArray[np.float64], n: float = GLASS_REFRACTIVE_INDEX
) -> NDArray[np.float64]:
    """What a glass pane reflects at an incidence over what it reflects at normal
    incidence: ``R(theta) / R(0)``, ``R = 1 - T`` of :func:`fresnel_pane_ratio`'s pane
    (the mean of ``2 R_face / (1 + R_face)`` of the two polarisations), (N,) float64 in
    [1, 1 / R(0)]: 1 at normal incidence, 1.35 at 50 deg, 4.96 at 75, 13 (all the light)
    at grazing incidence, for ``n = 1.5`` (``R(0)`` =
    :data:`simulator.config.scene.GLASS_PANE_REFLECTANCE`)."""
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    r_0 = ((n - 1.0) / (n + 1.0)) ** 2
    return (1.0 - _fresnel_pane(c, n)) / (2.0 * r_0 / (1.0 + r_0))


def transmittance_at(
    transmittance: NDArray[np.float64],
    law: NDArray[np.int8],
    cos_incidence: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Each surface's transmittance ``T(theta)`` at its ray's incidence, by its material's
    ``transmittance_law`` (codes of :data:`simulator.config.scene.TRANSMITTANCE_LAWS`):
    ``constant`` ``T``; ``fresnel`` ``T T_F(theta) / T_F(0)``
    (:func:`fresnel_pane_ratio`); ``path_length`` ``T^(1 / cos theta)``, the gap
    probability of a slanted path through a porous layer whose gap probability along
    its normal is ``T`` (Beer-Lambert: ``exp(-G Omega LAI / cos theta)``, Nilson 1971;
    Ni-Meister, Jupp and Dubayah 2001), 0 at grazing incidence.

    Parameters
    ----------
    transmittance : (N,) float64
        Each surface's transmittance at normal incidence.
    law : (N,) int8
        Each surface's law.
    cos_incidence : (N,) float64
        The cosine of each ray's incidence on its surface.

    Returns
    -------
    (N,) float64
    """
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    t = np.where(law == LAW_FRESNEL, transmittance * fresnel_pane_ratio(c), transmittance)
    slant = law == LAW_PATH_LENGTH
    if slant.any():
        t = np.where(slant, transmittance ** (1.0 / np.maximum(c, 1e-12)), t)
    return t


def front_echo_factor(
    transmittance: NDArray[np.float64],
    law: NDArray[np.int8],
    cos_incidence: NDArray[np.float64],
) -> NDArray[np.float64]:
    """The factor on each see-through surface's own echo at its ray's incidence, by its
    material's ``transmittance_law``, over the echo at normal incidence (the material's
    ``reflectance``, a porous layer's ``(1 - T) rho``): ``constant`` 1; ``fresnel``
    ``R(theta) / R(0)``, what the pane reflects (:func:`fresnel_pane_reflectance_ratio`);
    ``path_length`` ``(1 - T(theta)) / (1 - T)``, the share of the beam that meets the
    layer's elements on its slanted path (:func:`transmittance_at`; 1 where ``T`` is 0
    or 1). (N,) float64; exactly 1 at normal incidence for ``path_length``."""
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    out = np.where(law == LAW_FRESNEL, fresnel_pane_reflectance_ratio(c), 1.0)
    slant = (law == LAW_PATH_LENGTH) & (transmittance > 0.0) & (transmittance < 1.0)
    if slant.any():
        t = transmittance[slant]
        out[slant] = (1.0 - transmittance_at(t, law[slant], c[slant])) / (1.0 - t)
    return out


def with_front_laws(
    results: HitResults,
    chunk: CastChunk,
    law_of_object: NDArray[np.int8],
    transmittance_of_object: NDArray[np.float64],
    model: ReturnModel,
) -> HitResults:
    """The per-hit model of a chunk's hits with each see-through surface's own echo at its
    incidence by its ``transmittance_law`` (:func:`front_echo_factor` on its
    backscatter; its detection and its intensity as the pulse's only return again, as
    :func:`simulator.steps.hits.evaluate_hits` makes them). Hits of ``constant`` surfaces keep
    every bit.

    Parameters
    ----------
    results : HitResults
        Of ``chunk``'s hits, with every field.
    chunk : CastChunk
        ``hits`` and ``start`` (ray ``i`` as pulse ``start + i``).
    law_of_object : (objects + 1,) int8
        Each object's law and a 0 (constant) for a miss.
    transmittance_of_object : (objects + 1,) float64
    model : ReturnModel

    Returns
    -------
    HitResults
    """
    obj = chunk.hits.object_index[results.idx]
    law = law_of_object[obj]
    m = np.flatnonzero(law != LAW_CONSTANT)
    if len(m) == 0:
        return results
    cos = results.cos_incidence[m]
    backscatter = results.backscatter.copy()
    backscatter[m] *= front_echo_factor(transmittance_of_object[obj[m]], law[m], cos)
    r_true = chunk.hits.range_m[results.idx[m]].astype(np.float64)
    range_m = results.range_m[m]
    keep, intensity = results.keep.copy(), results.intensity.copy()
    received = received_peak(backscatter[m], results.peak_factor[m], r_true, model)
    keep[m] = in_window(received, range_m, model)
    pulse = np.uint64(chunk.start) + results.idx[m].astype(np.uint64)
    intensity[m] = reported_intensity(backscatter[m], model, range_m, pulse)
    return replace(results, backscatter=backscatter, keep=keep, intensity=intensity)


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
    """The returns of pulses whose light meets more than one surface a sub-ray (the
    specification; :func:`echo_returns` is the case of one).

    Every surface a sub-ray meets is an entry of its pulse: the first surface with the
    sub-ray's share ``w`` (less ``shadow``), each surface behind see-through ones with
    ``w`` times the two-way transmittance in front. Entries and ``extra`` ones (e.g.
    particles of the weather) are grouped into echoes as sub-ray hits are; ``broad``
    echoes (e.g. a fog's waveform peak) join them, the weaker of a broad echo and another
    closer than the separation dropped (the receiver sees one peak). All are then
    measured, detected and selected by the return mode.

    Parameters
    ----------
    results, hits, pulse_id, beam, model, streams
        As :func:`echo_returns` (``results`` with every field).
    behind : sequence of Behind
        The surfaces behind see-through ones, one layer each.
    shadow : (P, S) float64, or a sequence of arrays, optional
        The share of each sub-ray's light taken before its surfaces: one (P, S) array
        for every layer, or one a layer (the first surfaces' (P, S), then each layer of
        ``behind`` by its rows).
    extra : sequence of tuples
        More entries, as the columns :func:`form_echoes` takes (pulse, weight, range,
        relief, backscatter, spread, object, cos incidence, cos effective).
    broad : sequence of (Echoes, (P,) uint64)
        One echo a pulse each, and the hash keys of their jitter.

    Returns
    -------
    Returns
        With every diagnostic field.
    """
    pulse_id = np.asarray(pulse_id, dtype=np.uint64)
    columns = surface_entries(results, hits, beam, behind=behind, shadow=shadow, extra=extra)
    echoes = form_echoes(*columns, model.separation_m, model.pulse_length_m)
    return report_surface_echoes(echoes, pulse_id, model, streams, broad)


def surface_entries(
    results: HitResults,
    hits: Hits,
    beam: BeamPattern,
    *,
    behind: Sequence[Behind] = (),
    shadow: NDArray[np.float64] | None = None,
    extra: Sequence[tuple[NDArray, ...]] = (),
) -> list[NDArray]:
    """The entries :func:`surface_returns` groups into echoes, as the columns
    :func:`form_echoes` takes (pulse, weight, range, relief, backscatter, spread, object,
    cos incidence, cos effective): layer by layer, then ``extra``; each (N,)."""
    samples = beam.samples
    layers = [(None, results, hits, None)]
    layers += [(b.rays, b.results, b.hits, b.two_way) for b in behind]
    parts = []
    for layer, (rays, res, layer_hits, two_way) in enumerate(layers):
        idx = res.idx  # rows of the layer's hits: the rays, or the layer's rays
        ray = idx if rays is None else rays[idx]
        pulse, sub = ray // samples, ray % samples
        weight = beam.weights[sub].astype(np.float64)
        if isinstance(shadow, np.ndarray):
            weight = np.maximum(weight - shadow[pulse, sub], 0.0)
        elif shadow is not None:  # one a layer: (P, S) the first surfaces', then by row
            taken = shadow[layer][pulse, sub] if layer == 0 else shadow[layer][idx]
            weight = np.maximum(weight - taken, 0.0)
        if two_way is not None:
            weight = weight * two_way[idx]
        reached = weight > 0.0  # light taken entirely on the way: the surface stays dark
        columns = (pulse, weight, *echo_inputs(res, layer_hits))
        parts.append(tuple(a[reached] for a in columns))
    parts.extend(extra)
    return [np.concatenate(c) for c in zip(*parts, strict=True)]


def report_surface_echoes(
    echoes: Echoes,
    pulse_id: NDArray[np.uint64],
    model: ReturnModel,
    streams: Streams,
    broad: Sequence[tuple[Echoes, NDArray[np.uint64]]] = (),
) -> Returns:
    """The end of :func:`surface_returns`: ``broad`` echoes resolved against the formed
    ``echoes`` (:func:`_resolve`, in place) and all of them reported
    (:func:`report_echoes`)."""
    tables, keys = [echoes], [jitter_keys(echoes, pulse_id, streams)]
    for wide, key in broad:
        _resolve(echoes, wide, model)
        tables.append(wide)
        keys.append(key)
    return report_echoes(Echoes.concatenate(tables), np.concatenate(keys), model, pulse_id)


def _resolve(echoes: Echoes, broad: Echoes, model: ReturnModel) -> None:
    """Where a broad echo (one a pulse) and another echo of the pulse are closer than the
    separation, the receiver sees one peak: the weaker of the two is dropped (its energy
    set to 0), in place."""
    p = echoes.pulse
    near = np.abs(echoes.range_true_m - broad.range_true_m[p]) <= model.separation_m
    if not near.any():
        return
    mine = received_peak(echoes.energy, echoes.peak_factor, echoes.range_true_m, model)
    theirs = received_peak(broad.energy, broad.peak_factor, broad.range_true_m, model)
    beaten = near & (mine < theirs[p])
    echoes.energy[beaten] = 0.0
    wins = np.zeros(len(broad), dtype=bool)
    wins[p[near & ~beaten]] = True
    broad.energy[wins] = 0.0
