"""Echo formation from footprint sub-rays and the surfaces behind see-through ones: echoes
formed, measured, detected and selected (the numba kernels: :mod:`simulator.kernels.echoes`).

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

The reported returns are chosen by the sensor's return mode
(:func:`simulator.steps.returns.select_returns`).

The sensor jitter of the nearest echo of a pulse is the single ray's
(``hash_normal(mix64(seed + pulse_id))``); echo ``k > 0`` uses
``hash_normal(mix64(mix64(seed + pulse_id) + k))``.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import BeamPattern
from ..chunk import Hits, positions_in
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

# ``x as x``: re-exported for one release, for the imports of
# simulator.pipeline.simulation (their homes: simulator.steps.returns, .transmittance).
from .receiver import received_energies
from .returns import DIAGNOSTIC_FIELDS as DIAGNOSTIC_FIELDS
from .returns import Returns, group_starts, select_returns
from .returns import single_returns as single_returns
from .transmittance import Behind
from .transmittance import layers_behind as layers_behind
from .transmittance import with_front_laws as with_front_laws

__all__ = [
    "Echoes",
    "echo_inputs",
    "echo_returns",
    "form_echoes",
    "jitter_keys",
    "of_pulses",
    "report_echoes",
    "report_surface_echoes",
    "surface_entries",
    "surface_returns",
]

#: What moved out of this module in release 0.2, by name: its new module. For one release
#: ``simulator.steps.echoes.<name>`` (and the old ``simulator.echoes.<name>``) still gives
#: it, with a DeprecationWarning.
MOVED = {
    "select_returns": "returns", "merge_returns": "merge",
    "see_through_returns": "see_through", "fresnel_pane_ratio": "transmittance",
    "fresnel_pane_reflectance_ratio": "transmittance", "front_echo_factor": "transmittance",
    "transmittance_at": "transmittance",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """The names of :data:`MOVED`, from their new modules (with a DeprecationWarning)."""
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    new = f"{__package__}.{MOVED[name]}"
    warnings.warn(f"{__name__}.{name} has moved to {new}; the old name goes in the next "
                  "release", DeprecationWarning, stacklevel=2)  # fmt: skip
    return getattr(importlib.import_module(new), name)


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
    starts = group_starts(key)
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
    echo_pulse = p[group_starts(echo)] if n else np.zeros(0, dtype=np.int64)
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
    return rank_keys(np.asarray(pulse_id, dtype=np.uint64)[echoes.pulse], echoes.rank, streams)


def rank_keys(
    pulse_id: NDArray[np.uint64], rank: NDArray[np.integer], streams: Streams
) -> NDArray[np.uint64]:
    """The jitter keys of echoes given by their pulses' ids and their ranks among their
    pulses' echoes: ``mix64(sensor_noise + id)`` for the first, mixed again with the rank
    for the others. (E,) uint64."""
    with np.errstate(over="ignore"):
        key = physics.mix64(streams.sensor_noise + np.asarray(pulse_id, dtype=np.uint64))
        later = physics.mix64(key + np.asarray(rank).astype(np.uint64))
    return np.where(np.asarray(rank) == 0, key, later)


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
    # the receiver's overlap and speckle
    energy, energy_read = received_energies(model.receiver, key, r_true, echoes.energy)
    received = received_peak(energy, echoes.peak_factor, r_true, model)
    range_meas = measured_range(r_true, echoes.relief_m, sensor_jitter_m(key, model), model)
    sel = np.flatnonzero(in_window(received, range_meas, model, key))
    chosen, number, total = select_returns(
        echoes.pulse[sel], range_meas[sel], received[sel], model.return_mode,
        model.returns_per_pulse,
    )  # fmt: skip
    e = sel[chosen]
    ids = np.asarray(pulse_id, dtype=np.uint64)[echoes.pulse[e]]
    return Returns(
        pulse=echoes.pulse[e],
        range_m=range_meas[e],
        intensity=reported_intensity(energy_read[e], model, range_meas[e], ids),
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
