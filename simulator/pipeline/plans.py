"""The returns step's plans: what a chunk reports, chosen once for the survey.

At set-up :func:`returns_plan` reads the survey (one ray a pulse or footprint sub-rays,
adaptive sampling, see-through surfaces, weather) and picks one plan; each chunk then
runs that plan, and no flag of the survey is tested again per chunk (the model: the
deskew choice of kiss-icp's pipeline, made by a factory). What a plan still asks of a
chunk is about its data: whether any of its rays met a see-through surface.

========================  =========================================================
plan                      used for
========================  =========================================================
:class:`SingleReturns`    one ray a pulse, clear air, nothing see-through
:class:`EchoReturns`      footprint sub-rays (full sampling), clear air, nothing
                          see-through: echoes formed, detected, selected
:class:`SeeThroughReturns` one ray a pulse, clear air, see-through surfaces: every
                          pulse's returns in one pass where a chunk meets one
:class:`LayeredReturns`   weather, or footprints with see-through surfaces: the
                          pulses touched recomputed, merged with the others'
:class:`AdaptiveReturns`  ``beam_sampling: adaptive``: sub-rays only where a
                          footprint is not one smooth surface
========================  =========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..chunk import CastChunk
from ..steps.returns import Returns, single_returns
from .adaptive import Batching, adaptive_returns
from .layers import Evaluate, Scanning, layered_returns, layers_of

__all__ = [
    "AdaptiveReturns",
    "EchoReturns",
    "Evaluate",
    "LayeredReturns",
    "ReturnsPlan",
    "SeeThroughReturns",
    "SingleReturns",
    "returns_plan",
]


class ReturnsPlan(Protocol):
    """A chunk's returns from its cast, through the per-hit model ``evaluate`` of the
    hits it reports from (adaptive sampling: only the beams it keeps)."""

    def __call__(self, chunk: CastChunk, evaluate: Evaluate) -> Returns: ...


@dataclass(frozen=True)
class SingleReturns:
    """One ray a pulse: each detected hit is a return."""

    sim: Scanning

    def __call__(self, chunk: CastChunk, evaluate: Evaluate) -> Returns:
        return single_returns(evaluate(chunk), chunk.hits, diagnostics=self.sim.diagnostics)


@dataclass(frozen=True)
class EchoReturns:
    """Footprint sub-rays: their echoes formed, detected and selected by the return mode."""

    sim: Scanning

    def __call__(self, chunk: CastChunk, evaluate: Evaluate) -> Returns:
        sim = self.sim
        return sim.backend.echo_returns(
            evaluate(chunk), chunk.hits, chunk.pulse_ids, sim.beam, sim.model, sim.streams
        )


@dataclass(frozen=True)
class SeeThroughReturns:
    """One ray a pulse in clear air among see-through surfaces: where some of a chunk's
    rays passed one, every pulse's returns in one pass (those that passed as echoes of
    all their surfaces, the others as single returns); else single returns."""

    sim: Scanning

    def __call__(self, chunk: CastChunk, evaluate: Evaluate) -> Returns:
        sim = self.sim
        results = evaluate(chunk)
        if not chunk.behind:
            return single_returns(results, chunk.hits, diagnostics=sim.diagnostics)
        return sim.backend.see_through_returns(
            results, chunk.hits, chunk.pulse_ids, sim.beam, sim.model, sim.streams,
            layers_of(sim, chunk, results), diagnostics=sim.diagnostics,
        )  # fmt: skip


@dataclass(frozen=True)
class LayeredReturns:
    """The ``first`` plan's returns, with the pulses the weather touches or that pass a
    see-through surface recomputed with every surface and the medium's echoes
    (:func:`~simulator.pipeline.layers.layered_returns`)."""

    sim: Scanning
    first: ReturnsPlan

    def __call__(self, chunk: CastChunk, evaluate: Evaluate) -> Returns:
        if self.sim.medium is None and not chunk.behind:  # (no ray passed a surface)
            return self.first(chunk, evaluate)
        results = evaluate(chunk)
        return layered_returns(
            self.sim, chunk, results, lambda: self.first(chunk, lambda _: results)
        )


@dataclass(frozen=True)
class AdaptiveReturns:
    """Adaptive footprint sampling (:func:`~simulator.pipeline.adaptive.adaptive_returns`)
    over the single-ray returns of a chunk cast as beams."""

    sim: Batching

    def __call__(self, chunk: CastChunk, evaluate: Evaluate) -> Returns:
        return adaptive_returns(self.sim, chunk, evaluate)


def returns_plan(sim: Batching, adaptive: bool) -> ReturnsPlan:
    """The plan of a survey's returns step (see the module's table); ``adaptive``: the
    footprints are sampled adaptively."""
    if adaptive:
        return AdaptiveReturns(sim)
    clear = sim.medium is None
    if sim.beam.samples > 1:  # footprints, sampled in full
        echoes = EchoReturns(sim)
        return echoes if clear and not sim.see_through.any else LayeredReturns(sim, echoes)
    if not clear:
        return LayeredReturns(sim, SingleReturns(sim))
    return SeeThroughReturns(sim) if sim.see_through.any else SingleReturns(sim)
