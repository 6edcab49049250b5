"""Adaptive footprint sampling (``beam_sampling: adaptive``): a chunk is cast as beams,
and only the footprints that :func:`simulator.steps.footprint.single_surface` does not
vouch for have their sub-rays cast and their echoes formed as in full sampling."""

from __future__ import annotations

from copy import copy
from dataclasses import replace
from itertools import pairwise
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ..chunk import CastChunk, Hits, Rays
from ..steps.footprint import Part, Witnesses, centre_sub_ray, neighbour_stride, probe_indices
from ..steps.returns import Returns, single_returns
from .layers import Evaluate, Scanning, several_surfaces, surface_returns

__all__ = [
    "Batching",
    "adaptive_returns",
    "cast_in_full",
    "cast_together",
    "fan_returns",
    "kept_beams",
    "rest_of_fans",
    "witnesses",
]


class Batching(Scanning, Protocol):
    """A :class:`~simulator.pipeline.layers.Scanning` that also says how many pulses'
    fans are cast and formed together (:attr:`~simulator.pipeline.Simulation.fan_pulses`)."""

    @property
    def fan_pulses(self) -> int: ...


def witnesses(sim: Scanning, chunk: CastChunk) -> Witnesses:
    """What vouches for each footprint of a chunk cast as beams, cast
    (:mod:`simulator.steps.footprint`): probe sub-rays at its vertical extremes, and its
    horizontal neighbours' beams (or probes at its horizontal extremes)."""
    stride = neighbour_stride(sim.pattern, sim.beam)
    which = probe_indices(sim.beam, stride == 0)
    probes = sim.footprint_rays(chunk, which)
    start, stop, total = chunk.start, chunk.start + chunk.pulses, sim.total_pulses
    if not stride:
        probe_hits = sim.cast_rays(probes.cast, probes.cast_time_s)
        nothing = chunk.hits.take(np.zeros(0, dtype=np.intp))
        return Witnesses(which, probes.cast, probe_hits, stride, chunk.beams[:0], nothing,
                         chunk.beams[:0], nothing, start, total,
                         sim.model.separation_m)  # fmt: skip
    # The same channel's previous and next firing: this chunk's beams, and beyond its
    # ends the beams of up to `stride` more pulses on each side, cast with the probes
    # (one cast; a ray's hit does not depend on the rays cast with it).
    lo, hi = max(0, start - stride), min(total, stop + stride)
    sides = [sim.aim(a, b, footprints=False) for a, b in ((lo, start), (stop, hi))]
    parts = [probes, *sides]
    probe_hits, before, after = cast_together(
        sim, [r.cast for r in parts], [r.cast_time_s for r in parts]
    )
    # (the chunk's own beams are not copied beside them: the footprint test reads the
    # neighbours in three parts)
    return Witnesses(which, probes.cast, probe_hits, stride, sides[0].beams, before,
                     sides[1].beams, after, start, total, sim.model.separation_m)  # fmt: skip


def cast_together(
    sim: Scanning, rays: list[NDArray[np.float32]], times: list[NDArray[np.float64] | None]
) -> list[Hits]:
    """Sets of rays (each with its times, all or none timed) cast in one cast, and each
    set's hits: a ray's hit does not depend on the rays cast with it. One set is cast as it
    is (no copy)."""
    if len(rays) == 1:
        return [sim.cast_rays(rays[0], times[0])]
    hits = sim.cast_rays(np.concatenate(rays), None if times[0] is None else np.concatenate(times))
    ends = np.cumsum([0] + [len(r) for r in rays])
    return [hits.take(slice(a, b)) for a, b in pairwise(ends)]


def cast_in_full(sim: Scanning, chunk: CastChunk, particles: list) -> NDArray[np.bool_]:
    """(P,) bool: the pulses of a chunk cast as beams that adaptive sampling casts in full
    whatever their witnesses say: those whose beam meets a see-through surface, and those
    the weather touches (``particles``: the chunk's, :meth:`Medium.draw`)."""
    out = several_surfaces(chunk)
    if sim.see_through.any:
        out |= sim.see_through.transmittance_of_object[chunk.hits.object_index] > 0.0
    if sim.medium is not None:
        out |= sim.medium.touched(chunk.pulse_ids, sim.model.detection_floor, particles)
    return out


def rest_of_fans(sim: Scanning, beam_hits: Hits, fans: Rays, probe: NDArray[np.intp]) -> list[Part]:
    """The sub-rays of the footprints of beams ``fans`` (with their hits ``beam_hits``)
    that the probes ``probe`` did not cast, cast: parts as
    :func:`~simulator.steps.footprint.interleave` takes them. The central sub-ray is not
    cast again where it is the beam bit for bit (both are the beam's direction, the
    sub-ray normalised once more: 99 % of them): its hit is the beam's."""
    unprobed = np.ones(sim.beam.samples, dtype=bool)
    unprobed[probe] = False
    rest = np.flatnonzero(unprobed)
    centre = np.flatnonzero(rest == centre_sub_ray(sim.beam))
    if len(centre) == 0:
        others = sim.footprint_rays(fans, rest)
        return [(rest, others.cast, sim.cast_rays(others.cast, others.cast_time_s), None)]
    # The central sub-ray and the others made apart (each sub-ray is made from its beam
    # alone), so that neither needs copying out of one fan.
    c = int(centre[0])
    cols = np.delete(rest, c)
    # (A pattern of the central sub-ray alone would be the beams as they are, the
    # single-ray scan's rays; a fan's central sub-ray is the beam normalised once more,
    # so it is made twice a beam and taken once.)
    centre_rays = np.ascontiguousarray(sim.footprint_rays(fans, rest[[c, c]]).cast[::2])
    again = np.flatnonzero(
        np.any(centre_rays.view(np.uint32) != fans.beams.view(np.uint32), axis=1)
    )
    others = sim.footprint_rays(fans, cols)
    rays, times = [others.cast], [others.cast_time_s]
    if len(again):  # the central sub-rays that differ cast again, with the others
        rays.append(centre_rays[again])
        times.append(None if fans.cast_time_s is None else fans.cast_time_s[again])
    other_hits, *centre_hits = cast_together(sim, rays, times)
    if centre_hits:
        beam_hits.put(again, centre_hits[0])
    return [
        (rest[c : c + 1], centre_rays, beam_hits, None),
        (cols, others.cast, other_hits, None),
    ]


def adaptive_returns(sim: Batching, chunk: CastChunk, evaluate: Evaluate) -> Returns:
    """Adaptive footprint sampling of a chunk cast as beams: the single-ray returns where
    the footprint lies on one smooth surface, and elsewhere the footprint's sub-rays cast
    (the probes kept) and their echoes formed as in full sampling, in batches of at most
    ``sim.fan_pulses`` pulses (a full-sampling chunk's rays: one batch in the usual case,
    a few where most footprints are cast in full). ``evaluate`` (the per-hit model) runs
    on the beams of the pulses kept and on the fans."""
    seen = witnesses(sim, chunk)
    smooth = sim.backend.single_surface(chunk.beams, chunk.hits, seen)
    particles = (
        [] if sim.medium is None else sim.medium.draw(chunk.pulse_ids, sim.backend.draw_particles)
    )
    smooth &= ~cast_in_full(sim, chunk, particles)
    pulses = np.flatnonzero(~smooth)
    single = single_returns(
        evaluate(kept_beams(chunk, pulses)), chunk.hits, diagnostics=sim.diagnostics
    )
    step = sim.fan_pulses
    starts = range(0, max(1, len(pulses)), step)
    batches = [fan_returns(sim, chunk, seen, pulses[a : a + step], evaluate, particles)
               for a in starts]  # fmt: skip
    echoes = batches[0] if len(batches) == 1 else Returns.concatenate(
        [replace(r, pulse=r.pulse + a) for a, r in zip(starts, batches, strict=True)]
    )  # fmt: skip
    kept = smooth[single.pulse]
    return sim.backend.merge_returns(single, kept, echoes, pulses, diagnostics=sim.diagnostics)


def fan_returns(
    sim: Scanning,
    chunk: CastChunk,
    seen: Witnesses,
    pulses: NDArray[np.intp],
    evaluate: Evaluate,
    particles: list,
) -> Returns:
    """The returns of the footprints of a chunk's pulses ``pulses`` (indices in the chunk)
    cast in full: the rest of their fans cast (their probes, read in ``seen``, kept), their
    echoes formed as in full sampling; ``pulse`` indexes ``pulses``."""
    probe = seen.probes
    fans = chunk.select(pulses)
    # (the probes read where they lie, every pulse's: not gathered first)
    parts: list[Part] = [(probe, seen.probe_rays, seen.probe_hits, pulses)]
    cast, hits = sim.backend.interleave(
        parts + rest_of_fans(sim, chunk.hits.take(pulses), fans, probe), sim.beam.samples
    )
    fanned = fans.fanned(cast, sim.beam.samples)
    sub = CastChunk(**vars(fanned), hits=hits, behind=sim.surfaces_behind(fanned, hits))
    results = evaluate(sub)
    ids = chunk.pulse_ids[pulses]
    return surface_returns(sim, sub, results, ids, [p.of_pulses(pulses) for p in particles])


def kept_beams(chunk: CastChunk, cast_in_full: NDArray[np.intp]) -> CastChunk:
    """The chunk with the beams of the pulses ``cast_in_full`` (indices in the chunk) read
    as misses: what the per-hit model of the single-ray returns kept evaluates. Each hit's
    model is its own, so the others' are the same without them; their returns would be
    dropped (on the adaptive-7 bench, 18 % of the beams' hits)."""
    if len(cast_in_full) == 0:
        return chunk
    hits = copy(chunk.hits)
    hits.object_index = hits.object_index.copy()
    hits.object_index[cast_in_full] = -1
    return replace(chunk, hits=hits)
