"""The scan pipeline: survey -> firing schedule -> rays -> hits -> returns, in chunks.

Each chunk is a contiguous range of global pulse ids. Nothing in a chunk depends
on another chunk (every random quantity is a hash of a place or a pulse id), so the
result is bit-identical for any chunk size.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import fast
from .beam import beam_pattern, sub_ray_directions
from .config import ScannerConfig, Survey, load_scanner, load_survey
from .labels import label_name
from .pointcloud import PointCloud, record_spec
from .raycast import Hits, RayEngine
from .returns import (
    ReturnModel,
    SceneTables,
    Streams,
    assemble_returns,
    assemble_returns_fast,
    echo_returns,
    evaluate_hits,
    evaluate_hits_fast,
)
from .scanner import ScanPattern, SpinningPattern, pattern_for
from .scene import Scene, load_scene
from .trajectory import StaticTrajectory, Trajectory, trajectory_from_survey

__all__ = ["Frame", "ProgressCallback", "ScanSummary", "Simulation", "scan"]

#: Called after each chunk with (pulses done, pulses in all).
ProgressCallback = Callable[[int, int], None]


@dataclass
class Aim:
    """A chunk's rays, before the cast.

    Attributes
    ----------
    rays : (P, 6) float32
        The pulses' central rays (Open3D layout, local origin).
    cast : (P * beam_samples, 6) float32
        The rays to cast: the same, or the sub-rays of each pulse (pulse-major).
    up : (1, 3) or (len(cast), 3) float64
        The sensor's up axis in the world for each cast ray (one row if constant).
    cast_time_s : (len(cast),) float64 or None
        Each cast ray's time (s), when the scene has moving objects.
    rotation, position_m : (1 or P, 3, 3) and (P, 3) float64, or None
        The sensor's pose at each pulse, when computed (moving, fast path).
    """

    rays: NDArray[np.float32]
    cast: NDArray[np.float32]
    up: NDArray[np.float64]
    cast_time_s: NDArray[np.float64] | None
    rotation: NDArray[np.float64] | None
    position_m: NDArray[np.float64] | None


@dataclass
class CastChunk(Aim):
    """What the cast stage hands to the physics stage: the :class:`Aim` and ``hits``,
    the hits of ``cast``."""

    hits: Hits


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
        matrix = np.hstack([self.rotation, self.position_m[:, None]])
        return " ".join(f"{v:.9e}" for v in matrix.ravel())


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
        labels, counts = np.unique(chunk["label"], return_counts=True)
        for lab, n in zip(labels.tolist(), counts.tolist(), strict=True):
            self.label_counts[lab] = self.label_counts.get(lab, 0) + n
        r, i = chunk["range_m"], chunk["intensity"]
        self.range_m = (min(self.range_m[0], float(r.min())), max(self.range_m[1], float(r.max())))
        self.intensity = (
            min(self.intensity[0], float(i.min())),
            max(self.intensity[1], float(i.max())),
        )

    def named_label_counts(self) -> dict[str, int]:
        """Points per class name, most common first."""
        ordered = sorted(self.label_counts.items(), key=lambda kv: -kv[1])
        return {label_name(k): v for k, v in ordered}


@dataclass
class Simulation:
    """A survey made ready to run: scanner, scene, ray engine and pose resolved.

    Build one with :meth:`from_survey` (or :meth:`from_file`), then call :meth:`run`
    for the whole cloud or iterate :meth:`chunks` to handle it piece by piece.
    """

    survey: Survey
    scanner: ScannerConfig
    scene: Scene
    base_dir: Path
    pattern: ScanPattern = field(init=False)
    engine: RayEngine = field(init=False)
    trajectory: Trajectory = field(init=False)
    tables: SceneTables = field(init=False)
    model: ReturnModel = field(init=False)
    streams: Streams = field(init=False)
    timings_s: dict[str, float] = field(init=False)
    beam_offsets: NDArray[np.float64] = field(init=False)
    beam_weights: NDArray[np.float64] = field(init=False)
    #: Use the fused numba kernels (default when numba is installed); ``False`` runs the
    #: pure numpy specification, e.g. to check the kernels against it.
    use_fast: bool = field(default=fast.AVAILABLE)
    #: Time whose sensor frame ``output.frame: sensor_compensated`` reports in (s).
    reference_time_s: float = 0.0
    source: str | Path = "survey"

    def __post_init__(self) -> None:
        self.pattern = pattern_for(self.scanner)
        self.engine = RayEngine(self.scene)
        s = self.survey
        self.trajectory = trajectory_from_survey(
            s.pose, s.trajectory, s.mount, self.base_dir, self.source
        )
        self.tables = SceneTables.from_scene(self.scene)
        self.model = ReturnModel.from_scanner(self.scanner)
        self.streams = Streams.from_seed(self.survey.seed)
        self.timings_s = {"schedule": 0.0, "cast": 0.0, "physics": 0.0, "output": 0.0}
        self.beam_offsets, self.beam_weights = beam_pattern(self.scanner.beam_samples)

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
        scene = load_scene(base / survey.scene)
        return cls(survey=survey, scanner=scanner, scene=scene, base_dir=base, source=source)

    @classmethod
    def from_file(cls, path: str | Path, overrides: list[str] | None = None) -> Simulation:
        """Load a survey YAML (with ``dotted.key=value`` overrides) and resolve it."""
        survey, base = load_survey(path, overrides)
        return cls.from_survey(survey, base, source=path)

    @property
    def chunk_step(self) -> int:
        """Pulses per chunk: ``chunk_pulses``, divided by ``beam_samples`` (rays per chunk
        stay the same, and so does memory)."""
        return max(1, self.survey.chunk_pulses // self.scanner.beam_samples)

    @property
    def total_pulses(self) -> int:
        """Pulses in the whole survey."""
        return self.pattern.pulses_for(self.survey.revolutions, self.survey.duration_s)

    @property
    def output_path(self) -> Path:
        """The survey's ``output.path``, relative to the survey file."""
        return self.base_dir / self.survey.output.path

    def meta(self) -> dict[str, Any]:
        """Facts about the scan that travel with the cloud."""
        rotation0, position0 = self.trajectory.pose_at(0.0)
        return {
            "scanner": self.scanner.name,
            "frame": self.survey.output.frame,
            "intensity_max": self.scanner.intensity_max,
            "pulses": self.total_pulses,
            "seed": self.survey.seed,
            "sensor_position_m": position0.tolist(),
            "sensor_rotation": rotation0.tolist(),
            "scene": self.scene.source,
        }

    def cast_pulses(self, start: int, stop: int) -> CastChunk:
        """First stage: the rays of pulses ``start <= pulse_id < stop`` and their hits."""
        t0 = time.perf_counter()
        aim = self.aim(start, stop)
        t1 = time.perf_counter()
        hits = self.engine.cast_rays(aim.cast, aim.cast_time_s)
        self.timings_s["schedule"] += t1 - t0
        self.timings_s["cast"] += time.perf_counter() - t1
        return CastChunk(**vars(aim), hits=hits)

    def aim(self, start: int, stop: int) -> Aim:
        """The rays of pulses ``start <= pulse_id < stop``, not yet cast."""
        shift = self.engine.origin_shift_m
        t = self.trajectory
        rot = pos = pulse_time = None
        spinning = isinstance(self.pattern, SpinningPattern)
        if self.use_fast and spinning and isinstance(t, StaticTrajectory):
            rays = fast.spinning_rays(self.pattern, start, stop, t.rotation, t.position_m, shift)
            up, forward = t.axes(np.zeros(0))
        elif self.use_fast and spinning:  # moving: each pulse's pose at its own firing time
            pulse_time, _ = self.pattern.time_and_channel(np.arange(start, stop, dtype=np.uint64))
            rot, pos = t.poses(pulse_time)
            if rot.strides[0] == 0:  # not turning (one rotation, broadcast): keep one copy
                rot = np.ascontiguousarray(rot[:1])
            rays = fast.spinning_rays(self.pattern, start, stop, rot, pos, shift)
            up, forward = np.ascontiguousarray(rot[:, :, 2]), np.ascontiguousarray(rot[:, :, 0])
        else:
            schedule = self.pattern.schedule(start, stop)
            pulse_time = schedule.time_s
            origins, directions, _ = t.to_world(schedule.origin_m, schedule.direction, pulse_time)
            rays = self.engine.rays(origins, directions)
            up, forward = t.axes(pulse_time)
        n = self.scanner.beam_samples
        cast, cast_up = rays, up
        if n > 1:
            cast = self._sub_rays(rays, up, forward)
            cast_up = up if len(up) == 1 else np.repeat(up, n, axis=0)
        cast_time = None
        if self.engine.has_moving:  # moving objects are placed at each ray's own time
            if pulse_time is None:
                ids = np.arange(start, stop, dtype=np.uint64)
                pulse_time, _ = self.pattern.time_and_channel(ids)
            cast_time = np.repeat(pulse_time, n) if n > 1 else pulse_time
        return Aim(rays, cast, cast_up, cast_time, rot, pos)

    def _sub_rays(
        self, rays: NDArray[np.float32], up: NDArray[np.float64], forward: NDArray[np.float64]
    ) -> NDArray[np.float32]:
        """``beam_samples`` sub-rays per beam over its elliptical footprint (pulse-major).

        ``up`` and ``forward`` are the sensor's axes in the world, (1, 3) or one row a beam.
        """
        n = self.scanner.beam_samples
        div = self.scanner.divergence_mrad
        half_h, half_v = 0.5e-3 * div.horizontal, 0.5e-3 * div.vertical
        if self.use_fast:
            return fast.sub_rays(rays, up, forward, half_h, half_v, self.beam_offsets)
        directions = sub_ray_directions(
            rays[:, 3:].astype(np.float64), up, forward, half_h, half_v, self.beam_offsets
        )
        out = np.zeros((len(rays), n, 6), dtype=np.float32)
        out[:, :, :3] = rays[:, None, :3]
        out[:, :, 3:] = directions
        return out.reshape(-1, 6)

    def to_output(
        self, points_m: NDArray[np.float64], time_s: NDArray[np.float64]
    ) -> NDArray[np.float64]:
        """World points in the survey's output frame (see ``OutputSpec.frame``)."""
        frame = self.survey.output.frame
        if frame == "world":
            return points_m
        if frame == "sensor":
            return self.trajectory.to_sensor(points_m, time_s)
        rot, pos = self.trajectory.pose_at(self.reference_time_s)
        return (points_m - pos) @ rot

    def returns_of(self, start: int, chunk: CastChunk) -> PointCloud:
        """Second stage: the per-hit model and the point record of a cast chunk."""
        t0 = time.perf_counter()
        shift = self.engine.origin_shift_m
        out = self.survey.output
        t = self.trajectory
        fast_record = (  # the record kernel applies: one ray a pulse, no diagnostics
            self.use_fast
            and self.scanner.beam_samples == 1
            and isinstance(self.pattern, SpinningPattern)
            and not out.diagnostics
            and (isinstance(t, StaticTrajectory) or chunk.rotation is not None)
            and (out.frame != "sensor_compensated" or isinstance(t, StaticTrajectory))
        )
        sub_rays = self.scanner.beam_samples > 1
        args = (start, chunk.cast, shift, chunk.up, chunk.hits, self.tables, self.model)
        if self.use_fast:  # sub-rays are jittered per echo, once formed
            results = evaluate_hits_fast(
                *args, self.streams, full=not fast_record, jitter=not sub_rays
            )
        else:
            results = evaluate_hits(*args, self.streams)
        if sub_rays:
            cloud = echo_returns(
                results, self.scanner.beam_samples, self.beam_weights, start, chunk.rays, shift,
                chunk.hits, self.tables, self.model, self.streams, self.scanner, self.pattern,
                self.to_output, diagnostics=out.diagnostics, use_fast=self.use_fast,
            )  # fmt: skip
        elif fast_record:
            rot, pos = (
                (t.rotation, t.position_m)
                if isinstance(t, StaticTrajectory)
                else (chunk.rotation, chunk.position_m)
            )
            cloud = assemble_returns_fast(
                results, start, chunk.rays, shift, chunk.hits, self.tables, self.pattern, rot,
                pos, sensor_frame=out.frame != "world",
            )  # fmt: skip
        else:
            cloud = assemble_returns(
                results, start, chunk.rays, shift, chunk.hits, self.tables, self.pattern,
                self.to_output, diagnostics=out.diagnostics,
            )  # fmt: skip
        self.timings_s["physics"] += time.perf_counter() - t0
        return cloud

    def scan_pulses(self, start: int, stop: int) -> PointCloud:
        """Simulate pulses ``start <= pulse_id < stop``; return their detected returns."""
        return self.returns_of(start, self.cast_pulses(start, stop))

    def chunks(
        self,
        progress: ProgressCallback | None = None,
        start: int = 0,
        stop: int | None = None,
    ) -> Iterator[PointCloud]:
        """Yield the scan of pulses ``start..stop`` (default: all) chunk by chunk, in order.

        One chunk at a time, each stage over all cores: Open3D holds the GIL while it
        casts, so a cast on a second thread cannot overlap Python work, and a cast beside
        the (GIL-free) numba kernels only made the two share the cores; it measured no
        faster (see the README's benchmark notes). Every chunk is computed from its pulse
        ids alone.
        ``progress`` gets (pulses done, pulses in all) of the range.
        """
        stop = self.total_pulses if stop is None else stop
        for a in range(start, stop, self.chunk_step):
            b = min(a + self.chunk_step, stop)
            yield self.scan_pulses(a, b)
            if progress is not None:
                progress(b - start, stop - start)

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

    def frame_cloud(self, frame: Frame) -> PointCloud:
        """One frame's cloud, ``time_s`` from the frame's first firing (held in memory)."""
        self.reference_time_s = frame.time_s
        cloud = PointCloud.concatenate(list(self.chunks(None, frame.start, frame.stop)))
        cloud.fields["time_s"] = cloud.fields["time_s"] - frame.time_s
        return cloud

    def run(self, progress: ProgressCallback | None = None) -> PointCloud:
        """Simulate the whole survey and return one cloud."""
        return PointCloud.concatenate(list(self.chunks(progress)), meta=self.meta())

    def write(
        self,
        paths: list[str | Path],
        progress: ProgressCallback | None = None,
        *,
        start: int = 0,
        stop: int | None = None,
        time_offset_s: float = 0.0,
    ) -> ScanSummary:
        """Simulate the survey and write it to every path, chunk by chunk (bounded memory).

        Every path is checked before the scan starts; on any error or interruption
        all outputs are dropped, and no partial file is left. Each chunk is written as
        soon as it is made, on this thread: a writer thread measured slower, since each
        of its GIL-free writes had to win the GIL back from the scan (Open3D holds it for
        a whole cast), often after Python's 5 ms switch interval. ``start``/``stop``
        limit the pulses (one frame of a sequence); ``time_offset_s`` is taken off
        ``time_s``.
        """
        from .io import check_space, check_writable, open_writer

        for path in paths:
            check_writable(path)
        span = (self.total_pulses if stop is None else stop) - start
        check_space(
            [Path(p) for p in paths],
            span * self.scanner.returns_per_pulse,
            self.survey.output.diagnostics,
        )
        started = time.perf_counter()
        # The most points there can be lets the npz writer put chunks in place.
        meta = {**self.meta(), "max_points": span * self.scanner.returns_per_pulse}
        spec = record_spec(self.survey.output.diagnostics)
        writers = []

        def write_chunk(chunk: PointCloud) -> None:
            t0 = time.perf_counter()
            if time_offset_s:
                chunk.fields["time_s"] = chunk.fields["time_s"] - time_offset_s
            for writer in writers:
                writer.write(chunk)
            self.timings_s["output"] += time.perf_counter() - t0

        try:
            for path in paths:
                writers.append(open_writer(path, spec, meta))
            stop = self.total_pulses if stop is None else stop
            summary = ScanSummary(pulses=stop - start)
            for chunk in self.chunks(progress, start, stop):
                write_chunk(chunk)
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
