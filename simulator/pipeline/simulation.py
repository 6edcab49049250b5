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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..backend import Backend, select_backend
from ..beam import BeamPattern
from ..chunk import CastChunk, Hits, Layer, PulsePoses, Rays
from ..config import ScannerConfig, Survey, load_scanner, load_survey, referenced_file
from ..errors import ConfigError
from ..pointcloud import PointCloud
from ..sensor.scanner import ScanPattern, pattern_for
from ..sensor.trajectory import Trajectory, trajectory_from_survey
from ..steps.footprint import adaptive_chunk_pulses, sub_pattern
from ..steps.hits import HitResults, ReturnModel
from ..steps.record import add_diagnostics
from ..steps.returns import Returns
from ..steps.tables import SceneTables, Streams
from ..steps.transmittance import with_front_laws
from ..steps.weather import Medium, weather_extinction_per_m
from ..world.ego import with_ego
from ..world.memory import check_scan_memory
from ..world.raycast import RayEngine
from ..world.scene import Scene, load_scene
from .layers import SeeThrough, surfaces_behind
from .plans import ReturnsPlan, returns_plan
from .records import Frame, OutputFrame, ProgressCallback, ScanSummary, Window
from .run import Runs

__all__ = [
    "Frame",
    "OutputFrame",
    "ProgressCallback",
    "ScanSummary",
    "Simulation",
    "Window",
    "scan",
]


@dataclass
class Simulation(Runs):
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
    #: The see-through surfaces' optics by object (transmittance, gap model, law).
    see_through: SeeThrough = field(init=False)
    #: Whether a beam's hit is detected and measured as its pulse's only return when
    #: evaluated; not where the weather touches every pulse (fog): there each pulse's
    #: returns are formed with the medium's echoes, and no single-ray return is read.
    detects_beams: bool = field(init=False)
    #: The returns step, chosen once for the survey (:mod:`simulator.pipeline.plans`).
    returns: ReturnsPlan = field(init=False)
    timings_s: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        s, scanner = self.survey, self.scanner
        self.pattern = pattern_for(scanner)
        self.trajectory = trajectory_from_survey(
            s.pose, s.trajectory, s.mount, self.base_dir, self.source
        )
        # The vehicle under the sensor, if any, follows it (after the scene's objects).
        ego = (scanner.ego, s.ego)
        self.scene = with_ego(self.scene, ego, self.trajectory, self.base_dir, self.source)
        check_scan_memory(self.scene.source, self.scene.triangle_count, s.chunk_pulses)
        backend = self.backend
        self.engine = RayEngine(self.scene, cull=backend.rays_into_boxes,
                                refine=backend.refine_hits,
                                into_frame=backend.into_group_frame,
                                nearer=backend.nearer_hits)  # fmt: skip
        self.tables = SceneTables.from_scene(self.scene)
        optics = self.see_through = SeeThrough.of(self.tables, self.scene)
        self.model = ReturnModel.from_scanner(
            scanner, weather_extinction_per_m(s.weather, scanner.wavelength_nm), self.pattern
        )
        self.medium = None
        if not s.weather.clear and scanner.receiver.near_overlap != "off":
            raise ConfigError(
                self.source, "weather",
                "the receiver's near_overlap is not applied in weather yet (the weather's "
                "particles see the overlap already); scan in clear air, or with near_overlap: off",
            )  # fmt: skip
        if not s.weather.clear:
            objects = len(self.tables.label_of_object)
            self.medium = Medium.of(
                s.weather, scanner, self.model, s.seed, objects,
                optics.transmittance_of_object if optics.any else None,
                optics.porous_of_object, optics.law_of_object,
            )  # fmt: skip
            self.model = self.medium.model  # with the drawn particles' extinction relief
            self.tables = self.tables.with_media(self.medium.labels)
        self.streams = Streams.from_seed(s.seed)
        self.beam = BeamPattern.of_optics(scanner.beam_samples, self.model.optics)
        self.adaptive = scanner.beam_sampling == "adaptive" and self.beam.samples > 1
        self.detects_beams = (
            self.adaptive
            or self.medium is None
            or not self.medium.touches_every_pulse(self.model.detection_floor)
        )
        self.returns = returns_plan(self, self.adaptive)
        self.timings_s = {"schedule": 0.0, "cast": 0.0, "physics": 0.0, "output": 0.0}

    @classmethod
    def from_survey(
        cls,
        survey: Survey,
        base_dir: str | Path = ".",
        source: str | Path = "survey",
        *,
        backend: Backend | None = None,
    ) -> Simulation:
        """Resolve a validated survey; relative paths in it start at ``base_dir``.

        ``source`` names the survey in error messages (its file, when it has one);
        ``backend`` computes the steps (default: :func:`~simulator.backend.select_backend`'s).
        """
        base = Path(base_dir)
        scanner = load_scanner(
            survey.scanner, survey.scanner_overrides, base_dir=base, source=source
        )
        scene = load_scene(referenced_file(base, survey.scene, source, "scene"))
        return cls(survey=survey, scanner=scanner, scene=scene, base_dir=base, source=source,
                   backend=select_backend() if backend is None else backend)  # fmt: skip

    @classmethod
    def from_file(
        cls, path: str | Path, overrides: list[str] | None = None, *, backend: Backend | None = None
    ) -> Simulation:
        """Load a survey YAML (with ``dotted.key=value`` overrides) and resolve it, its steps
        computed by ``backend`` (default: :func:`~simulator.backend.select_backend`'s)."""
        survey, base = load_survey(path, overrides)
        return cls.from_survey(survey, base, source=path, backend=backend)

    # ------------------------------------------------------------------ facts

    @property
    def chunk_step(self) -> int:
        """Pulses per chunk: ``chunk_pulses``, divided by ``beam_samples`` (rays per chunk
        stay the same, and so does memory); with adaptive sampling, as many as its beams
        and witnesses take (:func:`~simulator.steps.footprint.adaptive_chunk_pulses`)."""
        if self.adaptive:
            return adaptive_chunk_pulses(self.survey.chunk_pulses, self.pattern, self.beam)
        return self.fan_pulses

    @property
    def fan_pulses(self) -> int:
        """Pulses whose footprints' sub-rays are cast and formed together: ``chunk_pulses``
        divided by ``beam_samples`` (a chunk of full sampling; adaptive sampling's batches
        of the pulses it casts in full)."""
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
        pulse_time = self.backend.pulse_times(self.pattern, start, stop)
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
            pulse_time = self.backend.pulse_times(self.pattern, start, stop)
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
        hits = self.cast_rays(rays.cast, rays.cast_time_s)
        return CastChunk(**vars(rays), hits=hits, behind=self.surfaces_behind(rays, hits))

    def surfaces_behind(self, rays: Rays, hits: Hits) -> tuple[Layer, ...]:
        """The layers behind see-through surfaces (:func:`~.layers.surfaces_behind`)."""
        return surfaces_behind(self, rays, hits, self.survey.max_surfaces)

    def cast_rays(self, rays: NDArray[np.float32], time_s: NDArray[np.float64] | None) -> Hits:
        """The ray engine's first hits of ``rays`` (at times ``time_s``), the time counted."""
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
        law = self.see_through.law_of_object
        full = self.diagnostics or not single or self.medium is not None or self.see_through.any
        full = full or law is not None
        # Sub-rays' echoes are detected once formed: their own detection is not needed
        # (but a see-through surface's own law recomputes it); nor is a beam's where the
        # weather forms every pulse's returns (:attr:`detects_beams`).
        detect = (single and self.detects_beams) or law is not None
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
        optics = self.see_through
        if optics.law_of_object is None:
            return results
        return with_front_laws(results, chunk, optics.law_of_object,
                               optics.transmittance_of_object, self.model,
                               self.streams)  # fmt: skip

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
        cloud = self.record(chunk, self.returns(chunk, self.evaluate), window)
        timings["schedule"] += t1 - t0
        # Casts inside the steps (adaptive sampling's) count as cast, not physics.
        timings["physics"] += time.perf_counter() - t1 - (timings["cast"] - cast_s)
        return cloud


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
