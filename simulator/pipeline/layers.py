"""Where a pulse's light meets more than its first surfaces: the see-through surfaces'
optics by object (:class:`SeeThrough`), the layers behind them, and the returns of the
pulses that pass one or that the weather touches, recomputed with every surface and the
medium's echoes (:func:`surface_returns`).

The functions here take the simulation as a :class:`Scanning`: the few parts of it they
read, so that this module does not import the one that builds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from ..backend import Backend
from ..beam import BeamPattern
from ..chunk import CastChunk, Hits, Layer, Rays
from ..config.scene import TRANSMITTANCE_LAWS
from ..sensor.scanner import ScanPattern
from ..steps.echoes import of_pulses
from ..steps.hits import HitResults, ReturnModel
from ..steps.returns import DIAGNOSTIC_FIELDS, Returns
from ..steps.tables import SceneTables, Streams
from ..steps.transmittance import Behind, layers_behind
from ..steps.weather import MEDIUM_BLOCK_PULSES, SOFT_BLOCK_PULSES, Medium
from ..world.scene import Scene

__all__ = [
    "Evaluate",
    "Scanning",
    "SeeThrough",
    "layers_of",
    "several_surfaces",
    "surface_returns",
    "surfaces_behind",
]


@dataclass(frozen=True)
class SeeThrough:
    """The optics of see-through surfaces, a row an object and a last row for a miss
    (object -1), from each object's material.

    Attributes
    ----------
    transmittance_of_object : (O + 1,) float64
        The share of the beam each object lets through (``transmittance``), 0 for a miss.
    porous_of_object : (O + 1,) bool
        Which objects are porous layers (the gap model); False for a miss.
    law_of_object : (O + 1,) int8 or None
        Each object's ``transmittance_law`` (codes of ``TRANSMITTANCE_LAWS``, 0 for a
        miss); None when every material's is ``constant`` (nothing extra is computed).
    any : bool
        Whether any object lets light through.
    """

    transmittance_of_object: NDArray[np.float64]
    porous_of_object: NDArray[np.bool_]
    law_of_object: NDArray[np.int8] | None
    any: bool

    @classmethod
    def of(cls, tables: SceneTables, scene: Scene) -> SeeThrough:
        """The see-through optics of a scene's objects (``tables``: its tables)."""
        materials, of_object = tables.materials, tables.material_of_object
        transmittance = np.append(materials.transmittance[of_object], 0.0)
        porous = np.append(materials.porous[of_object], False)
        laws = [TRANSMITTANCE_LAWS.index(m.transmittance_law) for m in scene.materials.values()]
        law = np.append(np.array(laws, dtype=np.int8)[of_object], np.int8(0)) if any(laws) else None
        return cls(transmittance, porous, law, bool(np.any(transmittance > 0.0)))


#: The per-hit model of a chunk's hits (:meth:`~simulator.pipeline.Simulation.evaluate`).
Evaluate = Callable[[CastChunk], HitResults]


class Scanning(Protocol):
    """What the returns plans read of a :class:`~simulator.pipeline.Simulation`."""

    backend: Backend
    beam: BeamPattern
    model: ReturnModel
    streams: Streams
    pattern: ScanPattern
    medium: Medium | None
    see_through: SeeThrough

    @property
    def diagnostics(self) -> bool: ...

    @property
    def total_pulses(self) -> int: ...

    def aim(self, start: int, stop: int, footprints: bool | None = None) -> Rays: ...

    def cast(self, rays: Rays) -> CastChunk: ...

    def cast_rays(self, rays: NDArray[np.float32], time_s: NDArray[np.float64] | None) -> Hits: ...

    def footprint_rays(self, rays: Rays, which: NDArray[np.intp] | None = None) -> Rays: ...

    def surfaces_behind(self, rays: Rays, hits: Hits) -> tuple: ...

    def evaluate(self, chunk: CastChunk) -> HitResults: ...


def several_surfaces(chunk: CastChunk) -> NDArray[np.bool_]:
    """(P,) bool: pulses with a ray that passed a see-through surface."""
    if not chunk.behind:
        return np.zeros(chunk.pulses, dtype=bool)
    return chunk.behind[0].pulses(chunk.pulses, len(chunk.cast) // chunk.pulses)


def surfaces_behind(sim: Scanning, rays: Rays, hits: Hits, max_surfaces: int) -> tuple[Layer, ...]:
    """Cast on behind every see-through surface (a material's ``transmittance``), up to
    ``max_surfaces`` surfaces a ray: one :class:`Layer` a further layer, with the rays that
    met a surface there (none: no layer), ranges from the rays' origins."""
    transmittance = sim.see_through.transmittance_of_object
    if not sim.see_through.any:
        return ()
    layers: list[Layer] = []
    front, front_rays = hits, None  # the first surfaces: every ray
    for _ in range(max_surfaces - 1):
        passes = np.flatnonzero(transmittance[front.object_index] > 0.0)
        if len(passes) == 0:  # (a miss passes nothing: its transmittance is 0)
            break
        on = passes if front_rays is None else front_rays[passes]
        cast, start_m = sim.backend.rays_behind(rays.cast, on, front.range_m, passes)
        met = sim.cast_rays(cast, None if rays.cast_time_s is None else rays.cast_time_s[on])
        met_rows = np.flatnonzero(met.hit)
        if len(met_rows) == 0:
            break
        front = met.take(met_rows)  # (with the material rows, if any)
        front.range_m = (met.range_m[met_rows] + start_m[met_rows]).astype(np.float32)
        front_rays = on[met_rows].astype(np.int64)
        layers.append(Layer(front_rays, front))
    return tuple(layers)


def layers_of(sim: Scanning, chunk: CastChunk, results: HitResults) -> list[Behind]:
    """The surfaces behind see-through ones, a :class:`Behind` a layer, with the two-way
    transmittance in front of each (``chunk.behind`` and ``results.behind``)."""
    optics = sim.see_through
    return layers_behind(chunk.hits, chunk.behind, results.behind,
                         optics.transmittance_of_object, optics.porous_of_object,
                         optics.law_of_object, results)  # fmt: skip


def surface_returns(
    sim: Scanning,
    chunk: CastChunk,
    results: HitResults,
    ids: NDArray[np.uint64],
    particles: list | None,
    pulses: NDArray[np.intp] | None = None,
) -> Returns:
    """Returns of the chunk's pulses (or of ``pulses`` among them), sub-ray-major, with
    every surface behind see-through ones, and through the weather (its ``particles``
    drawn for ``ids``; None: the backend draws them)."""
    behind = layers_of(sim, chunk, results)
    backend, beam, model, streams, medium = (
        sim.backend,
        sim.beam,
        sim.model,
        sim.streams,
        sim.medium,
    )
    if medium is None:
        return backend.echo_returns(results, chunk.hits, ids, beam, model, streams,
                                    behind, pulses)  # fmt: skip
    hits = chunk.hits
    # (all of the chunk's pulses: as they are)
    sel = None if pulses is None or len(pulses) == len(ids) else np.asarray(pulses)
    if sel is not None and particles is not None:
        particles = [p.of_pulses(sel) for p in particles]
    if sel is not None and behind:  # (with layers behind, gathered once here)
        results, hits, behind = of_pulses(results, hits, behind, sel, beam.samples)
        ids, sel = ids[sel], None
    # The weather's pulses in blocks (each pulse's returns are its own): the particles'
    # entries and echoes of a whole chunk would hold gigabytes in snow. Without layers
    # behind the backend reads each block's per-hit model where it lies (``pulses``);
    # with them a block's is gathered.
    size = MEDIUM_BLOCK_PULSES if medium.populations else SOFT_BLOCK_PULSES
    n = len(ids) if sel is None else len(sel)
    if n <= size:
        return backend.medium_returns(results, hits, ids, beam, model, streams,
                                      medium, particles, behind, sel)  # fmt: skip
    parts = []
    for start in range(0, n, size):
        stop = min(start + size, n)
        block = np.arange(start, stop) if sel is None else sel[start:stop]
        if behind:
            b_results, b_hits, b_behind = of_pulses(results, hits, behind, block,
                                                    beam.samples)  # fmt: skip
            b_ids, b_pulses = ids[block], None
        else:
            b_results, b_hits, b_behind, b_ids, b_pulses = results, hits, [], ids, block
        part = backend.medium_returns(
            b_results, b_hits, b_ids, beam, model, streams, medium,
            None if particles is None else [p.of_span(start, stop) for p in particles],
            b_behind, b_pulses,
        )  # fmt: skip
        # (the diagnostics, when not recorded, are not joined: merge_returns drops them)
        unused = {} if sim.diagnostics else dict.fromkeys(DIAGNOSTIC_FIELDS)
        parts.append(replace(part, pulse=part.pulse + start, **unused))
    return Returns.concatenate(parts)


def layered_returns(
    sim: Scanning, chunk: CastChunk, results: HitResults, first: Callable[[], Returns]
) -> Returns:
    """The chunk's returns where a pulse's light meets more than its first surfaces: the
    pulses the weather touches (a particle in the beam, or a detectable soft target;
    :mod:`simulator.steps.weather`) and those that pass a see-through surface, recomputed
    by :func:`surface_returns`. The others keep the returns of their first surfaces,
    ``first()`` (called only if some pulse keeps them: fog touches every pulse), whose
    model already carries the weather's extinction."""
    ids = chunk.pulse_ids
    touched = several_surfaces(chunk)
    if sim.medium is not None:  # (counted here, drawn where they are used)
        touched |= sim.medium.touched(
            ids, sim.model.detection_floor, count=sim.backend.count_particles
        )
    pulses = np.flatnonzero(touched)
    recomputed = surface_returns(sim, chunk, results, ids, None, pulses)
    merge = sim.backend.merge_returns
    if len(pulses) == len(touched):
        return merge(None, None, recomputed, pulses, diagnostics=sim.diagnostics)
    returns = first()
    kept = ~touched[returns.pulse]
    return merge(returns, kept, recomputed, pulses, diagnostics=sim.diagnostics)
