"""The scan pipeline, one chunk of pulses at a time, as its steps:

``poses`` -> ``aim`` (schedule and rays) -> ``cast`` -> ``evaluate`` (the per-hit model)
-> ``returns`` (echoes) -> ``record`` -> ``write``.

Each step is a method of :class:`Simulation` that takes and returns the records of
:mod:`simulator.chunk`, so it can be called and tested on its own. A chunk is a
contiguous range of global pulse ids, and nothing in it depends on another chunk (every
random quantity is a hash of a place or a pulse id), so the result is bit-identical for
any chunk size. Where a step has a numba kernel, the simulation's :attr:`backend`
(chosen once, :mod:`simulator.backend`) computes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from ..backend import Backend, select_backend
from ..beam import BeamPattern
from ..chunk import CastChunk, Hits, Layer, PulsePoses, Rays
from ..config import ScannerConfig, Survey, load_scanner, load_survey, referenced_file
from ..config.scene import TRANSMITTANCE_LAWS
from ..constants import PASS_THROUGH_M
from ..io import check_space, check_writable, open_writer
from ..io.poses import kitti_line
from ..labels import count_labels, named_counts
from ..pointcloud import PointCloud, record_spec
from ..sensor.scanner import ScanPattern, pattern_for
from ..sensor.trajectory import Trajectory, trajectory_from_survey
from ..steps.echoes import (
    DIAGNOSTIC_FIELDS,
    Behind,
    Returns,
    layers_behind,
    of_pulses,
    single_returns,
    with_front_laws,
)
from ..steps.footprint import (
    Witnesses,
    centre_sub_ray,
    neighbour_stride,
    probe_indices,
    sub_pattern,
)
from ..steps.hits import HitResults, ReturnModel, SceneTables, Streams
from ..steps.record import add_diagnostics
from ..steps.weather import MEDIUM_BLOCK_PULSES, SOFT_BLOCK_PULSES, Medium, weather_extinction_per_m
from ..world.raycast import RayEngine
from ..world.scene import Scene, load_scene

__all__ = [
    "Frame",
    "OutputFrame",
    "ProgressCallback",
    "ScanSummary",
    "Simulation",
    "Window",
    "scan",
]

#: Called after each chunk with (pulses done, pulses in all).
ProgressCallback = Callable[[int, int], None]

#: Where points are reported: ``sensor`` (the sensor frame at each point's own firing),
#: ``world``, or ``sensor_compensated`` (the sensor frame at the window's reference time).
OutputFrame = Literal["sensor", "world", "sensor_compensated"]


@dataclass(frozen=True)
class Window:
    """Which pulses a run scans, and how it reports them.

    Attributes
    ----------
    start, stop : int
        Pulses ``start <= pulse_id < stop`` (``stop`` None: to the end of the survey).
    frame : OutputFrame, optional
        The output frame; None takes the survey's ``output.frame``.
    time_s : float
        The window's reference time: ``time_s`` of the points counts from it, and
        ``sensor_compensated`` reports in the sensor frame at that time.
    """

    start: int = 0
    stop: int | None = None
    frame: OutputFrame | None = None
    time_s: float = 0.0


@dataclass(frozen=True)
class Frame:
    """A frame of a survey: pulses ``start..stop``, its reference (first firing) time and
    the sensor's world-from-sensor pose then."""

    index: int
    start: int
    stop: int
    time_s: float
    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]

    @property
    def kitti_pose(self) -> str:
        """The pose as a KITTI poses.txt line (3x4 row-major)."""
        return kitti_line(self.rotation, self.position_m)

    def window(self, frame: OutputFrame | None = None) -> Window:
        """The frame's pulses, reported in ``frame`` with ``time_s`` from its first firing."""
        return Window(self.start, self.stop, frame, self.time_s)


@dataclass
class ScanSummary:
    """Running totals of a scan that is written chunk by chunk.

    Attributes
    ----------
    pulses : int
        Pulses fired.
    points : int
        Returns detected.
    seconds : float
        Wall time of scanning and writing.
    label_counts : dict of int to int
        Points per SemanticKITTI id.
    range_m, intensity : tuple of float
        (min, max) of the measured range and of the intensity.
    files : list of Path
        Files written.
    """

    pulses: int
    points: int = 0
    seconds: float = 0.0
    label_counts: dict[int, int] = field(default_factory=dict)
    range_m: tuple[float, float] = (float("inf"), float("-inf"))
    intensity: tuple[float, float] = (float("inf"), float("-inf"))
    files: list[Path] = field(default_factory=list)

    def add(self, chunk: PointCloud) -> None:
        """Count a chunk in."""
        if len(chunk) == 0:
            return
        self.points += len(chunk)
        count_labels(chunk["label"], self.label_counts)
        r, i = chunk["range_m"], chunk["intensity"]
        self.range_m = (min(self.range_m[0], float(r.min())), max(self.range_m[1], float(r.max())))
        self.intensity = (
            min(self.intensity[0], float(i.min())),
            max(self.intensity[1], float(i.max())),
        )

    def named_label_counts(self) -> dict[str, int]:
        """Points per class name, most common first."""
        return named_counts(self.label_counts)


@dataclass
class Simulation:
    """A survey made ready to run: scanner, scene, ray engine, pose and backend resolved.

    Build one with :meth:`from_survey` (or :meth:`from_file`), then call :meth:`run`
    for the whole cloud, :meth:`write` to files, or iterate :meth:`chunks`; or call the
    steps one by one (:meth:`aim`, :meth:`cast`, :meth:`evaluate`, :meth:`returns`,
    :meth:`record`).
    """

    survey: Survey
    scanner: ScannerConfig
    scene: Scene
    base_dir: Path
    #: Computes the steps that have kernels (default: the numba kernels when installed;
    #: ``NumpyBackend()`` runs the numpy specification, e.g. to check the kernels).
    backend: Backend = field(default_factory=select_backend)
    source: str | Path = "survey"
    pattern: ScanPattern = field(init=False)
    engine: RayEngine = field(init=False)
    trajectory: Trajectory = field(init=False)
    tables: SceneTables = field(init=False)
    model: ReturnModel = field(init=False)
    streams: Streams = field(init=False)
    beam: BeamPattern = field(init=False)
    #: Whether footprints are sampled adaptively (``beam_sampling: adaptive`` with more
    #: than one sub-ray): sub-rays are cast only where :mod:`simulator.steps.footprint` says.
    adaptive: bool = field(init=False)
    #: The survey's weather made ready for the scanner (None: clear air).
    medium: Medium | None = field(init=False)
    #: The share of the beam each object lets through (its material's transmittance),
    #: and a 0 after the last for a miss; and whether any is not 0.
    transmittance_of_object: NDArray[np.float64] = field(init=False)
    #: Which objects are porous layers (the gap model), and False for a miss.
    porous_of_object: NDArray[np.bool_] = field(init=False)
    #: Each object's ``transmittance_law`` (codes of ``TRANSMITTANCE_LAWS``; 0 for a
    #: miss); None when every material's is ``constant`` (nothing extra is computed).
    law_of_object: NDArray[np.int8] | None = field(init=False)
    see_through: bool = field(init=False)
    timings_s: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        s, scanner = self.survey, self.scanner
        self.pattern = pattern_for(scanner)
        self.engine = RayEngine(self.scene, cull=self.backend.rays_into_boxes)
        self.trajectory = trajectory_from_survey(
            s.pose, s.trajectory, s.mount, self.base_dir, self.source
        )
        self.tables = SceneTables.from_scene(self.scene)
        t = self.tables
        self.transmittance_of_object = np.append(
            t.materials.transmittance[t.material_of_object], 0.0
        )  # the last entry: a miss (object -1)
        self.porous_of_object = np.append(t.materials.porous[t.material_of_object], False)
        laws = [TRANSMITTANCE_LAWS.index(m.transmittance_law)
                for m in self.scene.materials.values()]  # fmt: skip
        self.law_of_object = (
            np.append(np.array(laws, dtype=np.int8)[t.material_of_object], np.int8(0))
            if any(laws)
            else None
        )
        self.see_through = bool(np.any(self.transmittance_of_object > 0.0))
        self.model = ReturnModel.from_scanner(
            scanner, weather_extinction_per_m(s.weather, scanner.wavelength_nm), self.pattern
        )
        self.medium = None
        if not s.weather.clear:
            objects = len(self.tables.label_of_object)
            self.medium = Medium.of(
                s.weather, scanner, self.model, s.seed, objects,
                self.transmittance_of_object if self.see_through else None,
                self.porous_of_object, self.law_of_object,
            )  # fmt: skip
            self.model = self.medium.model  # with the drawn particles' extinction relief
            self.tables = self.tables.with_media(self.medium.labels)
        self.streams = Streams.from_seed(s.seed)
        div = scanner.divergence_mrad
        self.beam = BeamPattern.of(scanner.beam_samples, div.horizontal, div.vertical)
        self.adaptive = scanner.beam_sampling == "adaptive" and self.beam.samples > 1
        self.timings_s = {"schedule": 0.0, "cast": 0.0, "physics": 0.0, "output": 0.0}

    @classmethod
    def from_survey(
        cls, survey: Survey, base_dir: str | Path = ".", source: str | Path = "survey"
    ) -> Simulation:
        """Resolve a validated survey; relative paths in it start at ``base_dir``.

        ``source`` names the survey in error messages (its file, when it has one).
        """
        base = Path(base_dir)
        scanner = load_scanner(
            survey.scanner, survey.scanner_overrides, base_dir=base, source=source
        )
        scene = load_scene(referenced_file(base, survey.scene, source, "scene"))
        return cls(survey=survey, scanner=scanner, scene=scene, base_dir=base, source=source)

    @classmethod
    def from_file(cls, path: str | Path, overrides: list[str] | None = None) -> Simulation:
        """Load a survey YAML (with ``dotted.key=value`` overrides) and resolve it."""
        survey, base = load_survey(path, overrides)
        return cls.from_survey(survey, base, source=path)

    # ------------------------------------------------------------------ facts

    @property
    def chunk_step(self) -> int:
        """Pulses per chunk: ``chunk_pulses``, divided by ``beam_samples`` (rays per chunk
        stay the same, and so does memory)."""
        return max(1, self.survey.chunk_pulses // self.beam.samples)

    @property
    def total_pulses(self) -> int:
        """Pulses in the whole survey."""
        return self.pattern.pulses_for(self.survey.revolutions, self.survey.duration_s)

    @property
    def diagnostics(self) -> bool:
        """Whether the record carries the diagnostic fields (``output.diagnostics``)."""
        return self.survey.output.diagnostics

    @property
    def output_path(self) -> Path:
        """The survey's ``output.path``, relative to the survey file."""
        return self.base_dir / self.survey.output.path

    def meta(self, window: Window | None = None) -> dict[str, Any]:
        """Facts about the scan that travel with the cloud."""
        window = window or Window()
        rotation0, position0 = self.trajectory.pose_at(0.0)
        return {
            "scanner": self.scanner.name,
            "frame": window.frame or self.survey.output.frame,
            "intensity_max": self.scanner.intensity_max,
            "pulses": self.total_pulses,
            "seed": self.survey.seed,
            "sensor_position_m": position0.tolist(),
            "sensor_rotation": rotation0.tolist(),
            "scene": self.scene.source,
        }

    def limit_threads(self, threads: int) -> None:
        """Cast and compute on ``threads`` threads (0: every core), e.g. a worker's share."""
        self.engine.threads = threads
        self.backend.set_threads(threads)

    # ------------------------------------------------------------------ the steps

    def poses(self, start: int, stop: int) -> tuple[PulsePoses, NDArray[np.float64] | None]:
        """The sensor's pose at pulses ``start..stop``, and their firing times (None for a
        static sensor, whose one pose needs no times)."""
        t = self.trajectory
        if t.is_static:
            return PulsePoses.one(*t.pose_at(0.0)), None
        pulse_time, _ = self.pattern.time_and_channel(np.arange(start, stop, dtype=np.uint64))
        rot, pos = t.poses(pulse_time)
        # A sensor that does not turn (or move) keeps one row: the pose broadcast.
        rot = rot[:1] if rot.strides[0] == 0 else rot
        pos = pos[:1] if pos.strides[0] == 0 else pos
        return PulsePoses(np.ascontiguousarray(rot), np.ascontiguousarray(pos)), pulse_time

    def aim(self, start: int, stop: int, footprints: bool | None = None) -> Rays:
        """Schedule and rays: the beams of pulses ``start..stop`` with the sensor's pose at
        each, and the rays to cast: the beams, or with ``footprints`` their sub-rays
        (default: sub-rays when there are several a pulse and sampling is ``full``;
        adaptive sampling casts the beams first, :meth:`adaptive_returns` the rest)."""
        poses, pulse_time = self.poses(start, stop)
        shift = self.engine.origin_shift_m
        beams = self.backend.pattern_rays(self.pattern, start, stop, poses, shift)
        if footprints is None:
            footprints = self.beam.samples > 1 and not self.adaptive
        if self.engine.has_moving and pulse_time is None:  # each ray's own time
            pulse_time, _ = self.pattern.time_and_channel(np.arange(start, stop, dtype=np.uint64))
        times = pulse_time if self.engine.has_moving else None
        rays = Rays(start, beams, beams, shift, poses, poses.up, times)
        return self.footprint_rays(rays) if footprints else rays

    def footprint_rays(self, rays: Rays, which: NDArray[np.intp] | None = None) -> Rays:
        """The footprint sub-rays of the beams of ``rays`` (cast as beams), pulse-major,
        with their up axes and times: every sub-ray of the pattern, or the sub-rays
        ``which`` of each footprint."""
        beam = self.beam if which is None else sub_pattern(self.beam, which)
        poses = rays.poses
        cast = self.backend.sub_rays(rays.beams, poses.up, poses.forward, beam)
        return rays.fanned(cast, beam.samples)

    def cast(self, rays: Rays) -> CastChunk:
        """The ray engine's first hit of every cast ray, and the surfaces behind the
        see-through ones it meets."""
        hits = self._cast(rays.cast, rays.cast_time_s)
        return CastChunk(**vars(rays), hits=hits, behind=self.surfaces_behind(rays, hits))

    def surfaces_behind(self, rays: Rays, hits: Hits) -> tuple[Layer, ...]:
        """Cast on behind every see-through surface (a material's ``transmittance``), up
        to ``max_surfaces`` surfaces a ray: one :class:`Layer` a further layer, with the
        rays that met a surface there (none: no layer), ranges from the rays' origins."""
        if not self.see_through:
            return ()
        layers: list[Layer] = []
        front, front_rays = hits, None  # the first surfaces: every ray
        for _ in range(self.survey.max_surfaces - 1):
            passes = np.flatnonzero(self.transmittance_of_object[front.object_index] > 0.0)
            if len(passes) == 0:  # (a miss passes nothing: its transmittance is 0)
                break
            on = passes if front_rays is None else front_rays[passes]
            start_m = front.range_m[passes].astype(np.float64) + PASS_THROUGH_M
            cast = rays.cast[on]
            cast[:, :3] += (start_m[:, None] * cast[:, 3:].astype(np.float64)).astype(np.float32)
            met = self._cast(cast, None if rays.cast_time_s is None else rays.cast_time_s[on])
            met_rows = np.flatnonzero(met.hit)
            if len(met_rows) == 0:
                break
            front = met.take(met_rows)  # (with the material rows, if any)
            front.range_m = (met.range_m[met_rows] + start_m[met_rows]).astype(np.float32)
            front_rays = on[met_rows].astype(np.int64)
            layers.append(Layer(front_rays, front))
        return tuple(layers)

    def _cast(self, rays: NDArray[np.float32], time_s: NDArray[np.float64] | None) -> Hits:
        t0 = time.perf_counter()
        hits = self.engine.cast_rays(rays, time_s)
        self.timings_s["cast"] += time.perf_counter() - t0
        return hits

    def cast_pulses(self, start: int, stop: int) -> CastChunk:
        """:meth:`aim` and :meth:`cast` of pulses ``start..stop``."""
        return self.cast(self.aim(start, stop))

    def evaluate(self, chunk: CastChunk) -> HitResults:
        """The per-hit model of every hit (with what echo formation and the diagnostics
        need; footprint sub-rays without the sensor jitter, added to their echoes)."""
        single = chunk.as_beams
        full = self.diagnostics or not single or self.medium is not None or self.see_through
        full = full or self.law_of_object is not None
        # Sub-rays' echoes are detected once formed: their own detection is not needed
        # (but a see-through surface's own law recomputes it).
        detect = single or self.law_of_object is not None
        model, streams = self.model, self.streams
        results = self.front_laws(
            chunk,
            self.backend.evaluate_hits(
                chunk, self.tables, model, streams, full=full, jitter=single, detect=detect
            ),
        )
        if chunk.behind:
            layers = [chunk.of_layer(layer) for layer in chunk.behind]
            results.behind = tuple(
                self.front_laws(sub, self.backend.evaluate_hits(
                    sub, self.tables, self.model, self.streams, full=True, jitter=False,
                ))
                for sub in layers
            )  # fmt: skip
        return results

    def front_laws(self, chunk: CastChunk, results: HitResults) -> HitResults:
        """``results`` with each see-through surface's own echo at its incidence by its
        material's ``transmittance_law`` (:func:`simulator.steps.echoes.with_front_laws`);
        ``results`` itself when every law is ``constant``."""
        if self.law_of_object is None:
            return results
        return with_front_laws(results, chunk, self.law_of_object,
                               self.transmittance_of_object, self.model)  # fmt: skip

    def returns(self, chunk: CastChunk, results: HitResults) -> Returns:
        """What the chunk reports: with one ray a pulse each detected hit; with footprint
        sub-rays the echoes, formed, detected and selected by the return mode."""
        if chunk.as_beams:
            if chunk.behind and self.medium is None and not self.adaptive:
                behind = self.layers_behind(chunk, results)
                return self.backend.see_through_returns(
                    results, chunk.hits, chunk.pulse_ids, self.beam, self.model, self.streams,
                    behind, diagnostics=self.diagnostics,
                )  # fmt: skip

            def first() -> Returns:
                return single_returns(results, chunk.hits, diagnostics=self.diagnostics)

            if self.adaptive:
                return self.adaptive_returns(chunk, first())
        else:

            def first() -> Returns:
                return self.backend.echo_returns(
                    results, chunk.hits, chunk.pulse_ids, self.beam, self.model, self.streams
                )

        if self.medium is None and not chunk.behind:
            return first()
        return self.layered_returns(chunk, results, first)

    def _several_surfaces(self, chunk: CastChunk) -> NDArray[np.bool_]:
        """(P,) bool: pulses with a ray that passed a see-through surface."""
        if not chunk.behind:
            return np.zeros(chunk.pulses, dtype=bool)
        return chunk.behind[0].pulses(chunk.pulses, len(chunk.cast) // chunk.pulses)

    def medium_draw(self, ids: NDArray[np.uint64]) -> list:
        """The weather's particles in the beams of pulses ``ids`` (:meth:`Medium.draw`
        with the backend's kernel)."""
        assert self.medium is not None
        return self.medium.draw(ids, self.backend.draw_particles)

    def layered_returns(
        self, chunk: CastChunk, results: HitResults, first: Callable[[], Returns]
    ) -> Returns:
        """The chunk's returns where a pulse's light meets more than its first surfaces:
        the pulses the weather touches (a particle in the beam, or a detectable soft
        target; :mod:`simulator.steps.weather`) and those that pass a see-through surface,
        recomputed with every surface and the medium's echoes
        (:func:`simulator.steps.echoes.surface_returns`). The others keep the returns of their
        first surfaces, ``first()`` (called only if some pulse keeps them: fog touches
        every pulse), whose model already carries the weather's extinction."""
        ids = chunk.pulse_ids
        touched = self._several_surfaces(chunk)
        if self.medium is not None:  # (counted here, drawn where they are used)
            touched |= self.medium.touched(
                ids, self.model.threshold, count=self.backend.count_particles
            )
        pulses = np.flatnonzero(touched)
        recomputed = self._surface_returns(chunk, results, ids, None, pulses)
        if len(pulses) == len(touched):
            return self.backend.merge_returns(None, None, recomputed, pulses,
                                              diagnostics=self.diagnostics)  # fmt: skip
        returns = first()
        kept = ~touched[returns.pulse]
        return self.backend.merge_returns(returns, kept, recomputed, pulses,
                                          diagnostics=self.diagnostics)  # fmt: skip

    def layers_behind(self, chunk: CastChunk, results: HitResults) -> list[Behind]:
        """The surfaces behind see-through ones, a :class:`Behind` a layer, with the
        two-way transmittance in front of each (``chunk.behind`` and ``results.behind``)."""
        return layers_behind(chunk.hits, chunk.behind, results.behind,
                             self.transmittance_of_object, self.porous_of_object,
                             self.law_of_object, results)  # fmt: skip

    def _surface_returns(
        self,
        chunk: CastChunk,
        results: HitResults,
        ids: NDArray[np.uint64],
        particles: list | None,
        pulses: NDArray[np.intp] | None = None,
    ) -> Returns:
        """Returns of the chunk's pulses (or of ``pulses`` among them), sub-ray-major,
        with every surface behind see-through ones, and through the weather (its
        ``particles`` drawn for ``ids``; None: the backend draws them)."""
        behind = self.layers_behind(chunk, results)
        beam, model, streams = self.beam, self.model, self.streams
        if self.medium is None:
            return self.backend.echo_returns(results, chunk.hits, ids, beam, model, streams,
                                             behind, pulses)  # fmt: skip
        hits = chunk.hits
        # (all of the chunk's pulses: as they are)
        sel = None if pulses is None or len(pulses) == len(ids) else np.asarray(pulses)
        if sel is not None and particles is not None:
            particles = [p.of_pulses(sel) for p in particles]
        if sel is not None and behind:  # (with layers behind, gathered once here)
            results, hits, behind = of_pulses(results, hits, behind, sel, beam.samples)
            ids, sel = ids[sel], None
        # The weather's pulses in blocks (each pulse's returns are its own): the
        # particles' entries and echoes of a whole chunk would hold gigabytes in snow.
        # Without layers behind the backend reads each block's per-hit model where it
        # lies (``pulses``); with them a block's is gathered.
        size = MEDIUM_BLOCK_PULSES if self.medium.populations else SOFT_BLOCK_PULSES
        n = len(ids) if sel is None else len(sel)
        if n <= size:
            return self.backend.medium_returns(results, hits, ids, beam, model, streams,
                                               self.medium, particles, behind, sel)  # fmt: skip
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
            part = self.backend.medium_returns(
                b_results, b_hits, b_ids, beam, model, streams, self.medium,
                None if particles is None else [p.of_span(start, stop) for p in particles],
                b_behind, b_pulses,
            )  # fmt: skip
            # (the diagnostics, when not recorded, are not joined: merge_returns drops them)
            unused = {} if self.diagnostics else dict.fromkeys(DIAGNOSTIC_FIELDS)
            parts.append(replace(part, pulse=part.pulse + start, **unused))
        return Returns.concatenate(parts)

    def witnesses(self, chunk: CastChunk) -> Witnesses:
        """What vouches for each footprint of a chunk cast as beams, cast
        (:mod:`simulator.steps.footprint`): probe sub-rays at its vertical extremes, and its
        horizontal neighbours' beams (or probes at its horizontal extremes)."""
        stride = neighbour_stride(self.pattern, self.beam)
        which = probe_indices(self.beam, stride == 0)
        probes = self.footprint_rays(chunk, which)
        start, stop, total = chunk.start, chunk.start + chunk.pulses, self.total_pulses
        beams, beam_hits, beams_start = chunk.beams, chunk.hits, start
        if stride:
            # The same channel's previous and next firing: this chunk's beams, and
            # beyond its ends the beams of up to `stride` more pulses on each side.
            lo, hi = max(0, start - stride), min(total, stop + stride)
            spans = ((lo, start), (stop, hi))
            sides = [self.cast(self.aim(a, b, footprints=False)) for a, b in spans]
            pieces = [sides[0], chunk, sides[1]]
            beams = np.concatenate([c.beams for c in pieces])
            beam_hits = Hits.concatenate([c.hits for c in pieces])
            beams_start = lo
        return Witnesses(which, probes.cast, self._cast(probes.cast, probes.cast_time_s),
                         stride, beams, beam_hits, beams_start, start, total,
                         self.model.separation_m)  # fmt: skip

    def cast_in_full(self, chunk: CastChunk, particles: list) -> NDArray[np.bool_]:
        """(P,) bool: the pulses of a chunk cast as beams that adaptive sampling casts in
        full whatever their witnesses say: those whose beam meets a see-through surface,
        and those the weather touches (``particles``: the chunk's, :meth:`Medium.draw`)."""
        out = self._several_surfaces(chunk)
        if self.see_through:
            out |= self.transmittance_of_object[chunk.hits.object_index] > 0.0
        if self.medium is not None:
            ids = chunk.pulse_ids
            out |= self.medium.touched(ids, self.model.threshold, particles)
        return out

    def rest_of_fans(
        self, beam_hits: Hits, fans: Rays, probe: NDArray[np.intp]
    ) -> list[tuple[NDArray[np.intp], NDArray[np.float32], Hits]]:
        """The sub-rays of the footprints of beams ``fans`` (with their hits
        ``beam_hits``) that the probes ``probe`` did not cast, cast: ``(which, rays,
        hits)`` parts as :func:`~simulator.steps.footprint.interleave` takes them. The central
        sub-ray is not cast again where it is the beam bit for bit (both are the beam's
        direction, the sub-ray normalised once more: 99 % of them): its hit is the
        beam's."""
        unprobed = np.ones(self.beam.samples, dtype=bool)
        unprobed[probe] = False
        rest = np.flatnonzero(unprobed)
        centre = np.flatnonzero(rest == centre_sub_ray(self.beam))
        if len(centre) == 0:
            others = self.footprint_rays(fans, rest)
            return [(rest, others.cast, self._cast(others.cast, others.cast_time_s))]
        # The central sub-ray and the others made apart (each sub-ray is made from its
        # beam alone), so that neither needs copying out of one fan.
        c = int(centre[0])
        cols = np.delete(rest, c)
        # (A pattern of the central sub-ray alone would be the beams as they are, the
        # single-ray scan's rays; a fan's central sub-ray is the beam normalised once
        # more, so it is made twice a beam and taken once.)
        centre_rays = np.ascontiguousarray(self.footprint_rays(fans, rest[[c, c]]).cast[::2])
        again = np.flatnonzero(
            np.any(centre_rays.view(np.uint32) != fans.beams.view(np.uint32), axis=1)
        )
        if len(again):
            times = fans.cast_time_s
            met = self._cast(centre_rays[again], None if times is None else times[again])
            beam_hits.put(again, met)
        others = self.footprint_rays(fans, cols)
        return [
            (rest[c : c + 1], centre_rays, beam_hits),
            (cols, others.cast, self._cast(others.cast, others.cast_time_s)),
        ]

    def adaptive_returns(self, chunk: CastChunk, single: Returns) -> Returns:
        """Adaptive footprint sampling of a chunk cast as beams: the single-ray
        ``single`` returns where the footprint lies on one smooth surface, and elsewhere
        the footprint's sub-rays cast (the probes kept) and their echoes formed as in
        full sampling."""
        witnesses = self.witnesses(chunk)
        smooth = self.backend.single_surface(chunk.beams, chunk.hits, witnesses)
        ids = chunk.pulse_ids
        particles = [] if self.medium is None else self.medium_draw(ids)
        smooth &= ~self.cast_in_full(chunk, particles)
        pulses = np.flatnonzero(~smooth)
        probe = witnesses.probes
        fans = chunk.select(pulses)
        rows = (pulses[:, None] * len(probe) + np.arange(len(probe))).ravel()
        parts = [(probe, witnesses.probe_rays[rows], witnesses.probe_hits.take(rows))]
        cast, hits = self.backend.interleave(
            parts + self.rest_of_fans(chunk.hits.take(pulses), fans, probe), self.beam.samples
        )
        fanned = fans.fanned(cast, self.beam.samples)
        sub = CastChunk(**vars(fanned), hits=hits, behind=self.surfaces_behind(fanned, hits))
        results = self.evaluate(sub)
        ids = chunk.pulse_ids[pulses]
        echoes = self._surface_returns(sub, results, ids, [p.of_pulses(pulses) for p in particles])
        kept = smooth[single.pulse]
        return self.backend.merge_returns(single, kept, echoes, pulses,
                                          diagnostics=self.diagnostics)  # fmt: skip

    def output_frame(self, rays: Rays, window: Window) -> PulsePoses | None:
        """World from the output frame at the chunk's pulses (None: the world)."""
        frame = window.frame or self.survey.output.frame
        if frame == "world":
            return None
        if frame == "sensor":
            return rays.poses
        return PulsePoses.one(*self.trajectory.pose_at(window.time_s))

    def record(self, chunk: CastChunk, returns: Returns, window: Window) -> PointCloud:
        """The point record of the returns, in the window's frame and time."""
        frame = self.output_frame(chunk, window)
        cloud = self.backend.record(returns, chunk, frame, self.tables, self.pattern)
        if self.scanner.range_reference == "lidar_origin":
            cloud.fields["range_m"] += np.float32(self.scanner.beam_origin_offset_m)
        if self.diagnostics:
            add_diagnostics(cloud, returns, chunk.start)
        if window.time_s:
            cloud.fields["time_s"] = cloud.fields["time_s"] - window.time_s
        return cloud

    def scan_pulses(self, start: int, stop: int, window: Window | None = None) -> PointCloud:
        """Every step for pulses ``start <= pulse_id < stop``: their detected returns."""
        window = window or Window()
        timings = self.timings_s
        t0 = time.perf_counter()
        rays = self.aim(start, stop)
        t1 = time.perf_counter()
        cast_s = timings["cast"]
        chunk = self.cast(rays)
        cloud = self.record(chunk, self.returns(chunk, self.evaluate(chunk)), window)
        timings["schedule"] += t1 - t0
        # Casts inside the steps (adaptive sampling's) count as cast, not physics.
        timings["physics"] += time.perf_counter() - t1 - (timings["cast"] - cast_s)
        return cloud

    def warm_up(self, paths: Sequence[str | Path] = (), pulses: int = 1000) -> float:
        """Make the one-time set-up happen now, outside any timed scan: Open3D builds its
        ray-casting structure on the first cast, and numba compiles the kernels on their
        first call (or loads them from its cache). Runs every step on ``pulses`` pulses in
        16 short runs spread evenly over the survey (the first pulses alone may meet no
        see-through surface, whose kernels would then compile inside the timed scan), and
        writes them to a throw-away file of each of the formats of ``paths`` (LAS has a
        packing kernel); keeps nothing, and clears the step timings.

        Returns
        -------
        float
            Seconds the set-up took (tens of seconds on the first run after an install,
            when the kernels compile; well under one once they are cached).
        """
        import tempfile

        from ..io import write

        t0 = time.perf_counter()
        runs = 16
        size = max(1, min(pulses, self.total_pulses) // runs)
        starts = np.unique(np.linspace(0, self.total_pulses - size, runs).astype(np.int64))
        clouds = [self.scan_pulses(int(a), int(a) + size) for a in starts]
        cloud = max(clouds, key=len)
        suffixes = {Path(p).suffix.lower() for p in paths} & {".las", ".laz"}
        if suffixes and len(cloud):
            with tempfile.TemporaryDirectory() as tmp:
                for suffix in suffixes:
                    write(cloud, Path(tmp) / f"warm-up{suffix}")
        self.timings_s = dict.fromkeys(self.timings_s, 0.0)
        return time.perf_counter() - t0

    # ------------------------------------------------------------------ runs

    def _span(self, window: Window) -> tuple[int, int]:
        return window.start, self.total_pulses if window.stop is None else window.stop

    def chunk_spans(self, window: Window | None = None) -> Iterator[tuple[int, int]]:
        """The (start, stop) pulse ids of each chunk of the window (default: the survey)."""
        start, stop = self._span(window or Window())
        for a in range(start, stop, self.chunk_step):
            yield a, min(a + self.chunk_step, stop)

    def chunks(
        self, progress: ProgressCallback | None = None, window: Window | None = None
    ) -> Iterator[PointCloud]:
        """Yield the scan of the window's pulses (default: all) chunk by chunk, in order.

        One chunk at a time, each step over all cores: Open3D holds the GIL while it
        casts, so a cast on a second thread cannot overlap Python work, and a cast beside
        the (GIL-free) numba kernels only made the two share the cores; it measured no
        faster (see docs/performance.md). Every chunk is computed from its pulse
        ids alone. ``progress`` gets (pulses done, pulses in all) of the window.
        """
        window = window or Window()
        start, stop = self._span(window)
        for a, b in self.chunk_spans(window):
            yield self.scan_pulses(a, b, window)
            if progress is not None:
                progress(b - start, stop - start)

    def evaluated_chunks(self) -> Iterator[tuple[CastChunk, HitResults]]:
        """Every chunk of the survey cast and through the per-hit model, with every
        per-hit field (what a report of the physics plots)."""
        for start, stop in self.chunk_spans():
            chunk = self.cast_pulses(start, stop)
            results = self.backend.evaluate_hits(
                chunk, self.tables, self.model, self.streams, full=True
            )
            yield chunk, self.front_laws(chunk, results)

    def frames(self) -> list[Frame]:
        """The survey cut into frames: one per turn of the pattern (``frame_pulses``), the
        last one shorter if the survey ends mid-turn; no pulse lost or repeated."""
        out = []
        total, per_frame = self.total_pulses, self.pattern.frame_pulses
        for k, first in enumerate(range(0, total, per_frame)):
            ref = float(self.pattern.time_and_channel(np.array([first], np.uint64))[0][0])
            rot, pos = self.trajectory.pose_at(ref)
            out.append(Frame(k, first, min(first + per_frame, total), ref, rot, pos))
        return out

    def frame_cloud(self, frame: Frame, output_frame: OutputFrame | None = None) -> PointCloud:
        """One frame's cloud (held in memory), ``time_s`` from the frame's first firing."""
        return PointCloud.concatenate(list(self.chunks(None, frame.window(output_frame))))

    def run(self, progress: ProgressCallback | None = None) -> PointCloud:
        """Simulate the whole survey and return one cloud."""
        return PointCloud.concatenate(list(self.chunks(progress)), meta=self.meta())

    def write(
        self,
        paths: list[str | Path],
        progress: ProgressCallback | None = None,
        *,
        window: Window | None = None,
    ) -> ScanSummary:
        """Simulate the window (default: the survey) and write it to every path, chunk by
        chunk (bounded memory).

        Every path is checked before the scan starts; on any error or interruption all
        outputs are dropped, and no partial file is left. Each chunk is written as soon as
        it is made, on this thread: a writer thread measured slower, since each of its
        GIL-free writes had to win the GIL back from the scan (Open3D holds it for a whole
        cast), often after Python's 5 ms switch interval.
        """
        window = window or Window()
        start, stop = self._span(window)
        for path in paths:
            check_writable(path)
        most = (stop - start) * self.scanner.returns_per_pulse
        check_space([Path(p) for p in paths], most, self.diagnostics)
        started = time.perf_counter()
        # The most points there can be lets the npz writer put chunks in place.
        meta = {**self.meta(window), "max_points": most}
        spec = record_spec(self.diagnostics)
        writers = []
        try:
            for path in paths:
                writers.append(open_writer(path, spec, meta))
            summary = ScanSummary(pulses=stop - start)
            for chunk in self.chunks(progress, window):
                t0 = time.perf_counter()
                for writer in writers:
                    writer.write(chunk)
                self.timings_s["output"] += time.perf_counter() - t0
                summary.add(chunk)
            t0 = time.perf_counter()
            for writer in writers:
                summary.files.extend(writer.close())
            self.timings_s["output"] += time.perf_counter() - t0
        except BaseException:
            for writer in writers:
                writer.abort()
            raise
        summary.seconds = time.perf_counter() - started
        return summary


def scan(
    survey: Survey | str | Path,
    overrides: list[str] | None = None,
    *,
    base_dir: str | Path | None = None,
    progress: ProgressCallback | None = None,
) -> PointCloud:
    """Simulate a survey and return its point cloud.

    Parameters
    ----------
    survey : Survey, str or Path
        A validated :class:`~simulator.config.Survey`, or the path of a survey YAML.
    overrides : list of str, optional
        ``dotted.key=value`` overrides, for a survey given by path.
    base_dir : str or Path, optional
        Where relative paths of a :class:`Survey` object start (default: the current
        directory; a survey file's own directory for a path).
    progress : callable, optional
        Called as ``progress(pulses_done, pulses_total)`` after each chunk.

    Returns
    -------
    PointCloud

    Examples
    --------
    >>> import simulator
    >>> cloud = simulator.scan("scenes/farm/survey.yaml", ["revolutions=0.1"])  # doctest: +SKIP
    >>> cloud["xyz"].shape  # doctest: +SKIP
    (5604, 3)
    """
    if isinstance(survey, Survey):
        sim = Simulation.from_survey(survey, base_dir if base_dir is not None else ".")
    else:
        sim = Simulation.from_file(survey, overrides)
    return sim.run(progress)
