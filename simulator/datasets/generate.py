"""Datasets at scale: many labelled sequences in the layouts training code reads.

A dataset spec lists groups of sequences: a scene generator (or a scene file), a
scanner, a trajectory, how many sequences and frames. Sequence ``s`` (counted over all
groups in order) gets the seed ``mix64(root + (s + 1) * GOLDEN_GAMMA)``; its scene is
generated from it and its scan uses it, and frame ``k`` of it is the ``k``-th
revolution. So a sample's output depends only on its own index and the root seed,
whichever worker, process or machine computes it, in whatever order.

The unit of work is one frame. A worker keeps what it built for a sequence (the scene,
its ray-casting structure, the simulation; :func:`prepared`, keyed by the content that
determines it) across the frames it runs, and is given the next frame of a sequence it
holds while there is one (:class:`Dispatcher`); when none is left it starts a sequence
nobody has started, and only then takes frames from the end of the one with the most
left. A worker process also keeps its compiled kernels: local workers live as long as
the run, Dask workers as long as the cluster (their cache serves later runs too).

Layouts (``semantickitti``, ``nuscenes``, ``npz``, ``openpcdet``, ``kitti``, optional
range images) are defined and
written by :mod:`simulator.io.layouts`. ``manifest.json`` records the effective spec, the
seeds, the package version and the counts. Every file is written to a temporary name and
renamed, so ``--resume`` skips finished samples (they are not even dispatched) and never
sees a partial one; the files of a whole sequence (poses, times) and of the whole dataset
(nuScenes' tables, the ``ImageSets`` splits) are written by the coordinating process from
the frames on disk, so a resumed run completes them in every layout and executor.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import (
    DatasetSpec,
    SceneSpec,
    SequenceGroup,
    Survey,
    load_dataset_spec,
    load_materials,
    load_scanner,
    load_scene_spec,
)
from ..constants import sequence_seed
from ..errors import ConfigError, SceneError
from ..generators import GENERATORS
from ..io.atomic import remove_stale_temps
from ..io.kitti_object import CAMERA_IN_VELO_M
from ..io.layouts import DatasetLayout, Sample, write_manifest
from ..io.nuscenes import SamplePose
from ..labels import count_labels, label_name
from ..transforms import rotation_from_rpy_deg
from ..world.boxes import headings_from_spec, object_boxes, visibility_from

if TYPE_CHECKING:
    from ..config import ScannerConfig
    from ..pipeline.simulation import Frame, Simulation
    from ..sensor.scanner import ScanPattern
    from ..sensor.trajectory import Trajectory
    from ..world.scene import Scene

__all__ = [
    "CACHE_ENTRIES",
    "Dispatcher",
    "SampleError",
    "SequenceResult",
    "SequenceTask",
    "clear_cache",
    "content_key",
    "prepared",
    "reference_frame",
    "run_dataset",
    "run_sequence",
    "sequence_frames",
]

#: Sequences a worker keeps built at once (the one it runs and one it took frames of).
CACHE_ENTRIES = 2


@dataclass(frozen=True)
class SequenceTask:
    """Everything a worker needs for one sequence, or some of its frames (picklable)."""

    index: int
    seed: int
    group: dict[str, Any]
    layout: str
    range_images: bool
    out_dir: str
    base_dir: str
    resume: bool
    #: Threads the sequence may use (0: all cores): a worker process's share of the
    #: machine, so that parallel workers do not oversubscribe the cores.
    threads: int = 0
    keyframe_every: int = 1
    #: The frames to scan, in this order (None: every frame of the sequence, and then
    #: the sequence's own files too).
    frames: tuple[int, ...] | None = None


@dataclass
class SampleError:
    """A sample that failed: which, with which seed, and why."""

    sequence: int
    frame: int
    seed: int
    error: str


@dataclass
class SequenceResult:
    """What a task did: the frames it wrote or kept, their points and labels, its errors,
    which worker ran it and the seconds it spent building (0 when the worker had the
    sequence already) and scanning."""

    index: int
    seed: int
    frames_written: int = 0
    frames_skipped: int = 0
    points: int = 0
    label_counts: dict[int, int] = field(default_factory=dict)
    errors: list[SampleError] = field(default_factory=list)
    #: (sequence, frame) of every sample on disk (written or kept).
    samples: list[tuple[int, int]] = field(default_factory=list)
    worker: str = ""
    build_s: float = 0.0
    scan_s: float = 0.0
    #: The worker process's CPU seconds (all its threads) while it built and scanned.
    cpu_s: float = 0.0


def _layout(task: SequenceTask) -> DatasetLayout:
    """The files of the task's dataset."""
    return DatasetLayout(task.layout, Path(task.out_dir), task.range_images, task.keyframe_every)


def _layout_of(spec: DatasetSpec, out: Path) -> DatasetLayout:
    return DatasetLayout(spec.layout, out, spec.range_images, spec.keyframe_every)


def _share_cores(tasks: list[SequenceTask], processes: int) -> list[SequenceTask]:
    """The tasks, each with its share of the cores for one of ``processes`` workers on
    this machine (each would otherwise cast and compute on all of them)."""
    share = max(1, (os.cpu_count() or 1) // max(1, processes))
    return [dataclasses.replace(task, threads=share) for task in tasks]


def _survey(task: SequenceTask, group: SequenceGroup, scanner: ScannerConfig) -> Survey:
    """The sequence's survey: the group's trajectory (with its seeded start jitter)."""
    trajectory = group.trajectory.model_copy(deep=True)
    if group.start_jitter_m and trajectory.start is not None:
        jitter = np.random.default_rng(task.seed).uniform(-1, 1, 2) * group.start_jitter_m
        trajectory.start.position_m[0] += float(jitter[0])
        trajectory.start.position_m[1] += float(jitter[1])
    return Survey(scanner=scanner.name, scene="(generated)", trajectory=trajectory,
                  mount=group.mount, revolutions=group.frames, seed=task.seed,
                  weather=group.weather)  # fmt: skip


@dataclass(frozen=True)
class _Clock:
    """What a sequence's frame times and poses need (no scene): :meth:`Simulation.frames`
    and :func:`reference_frame` read only these."""

    survey: Survey
    pattern: ScanPattern
    trajectory: Trajectory

    @property
    def total_pulses(self) -> int:
        return self.pattern.pulses_for(self.survey.revolutions, self.survey.duration_s)


def sequence_frames(task: SequenceTask) -> list[Frame]:
    """The sequence's frames at the layout's reference times, without building its scene
    (the same values as the worker's, from the same functions): what the sequence's own
    files hold.

    Raises
    ------
    Exception
        Whatever the group's scanner or trajectory raise (a missing poses file).
    """
    from ..pipeline.simulation import Simulation
    from ..sensor.scanner import pattern_for
    from ..sensor.trajectory import trajectory_from_survey

    group = SequenceGroup.model_validate(task.group)
    base = Path(task.base_dir)
    scanner = load_scanner(group.scanner, group.scanner_overrides, base_dir=base)
    survey = _survey(task, group, scanner)
    trajectory = trajectory_from_survey(survey.pose, survey.trajectory, survey.mount, base,
                                        "survey")  # fmt: skip
    clock = _Clock(survey, pattern_for(scanner), trajectory)
    frames = Simulation.frames(clock)  # type: ignore[arg-type]  # reads only the clock's
    return [reference_frame(clock, f, task.layout) for f in frames]  # type: ignore[arg-type]


@dataclass
class _Prepared:
    """A sequence made ready to scan, kept by a worker across the frames it runs."""

    sim: Simulation
    scene: Scene
    scanner: ScannerConfig
    group: SequenceGroup
    headings: dict[int, float]
    window: tuple[float, float] | None
    frames: list[Frame]
    lock: threading.Lock = field(default_factory=threading.Lock)


#: The worker's built sequences by content key, the most recently used last.
_CACHE: OrderedDict[str, _Prepared | BaseException] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_BUILDING: dict[str, threading.Lock] = {}


def _file_stamps(values: Iterable[Any], base: Path, depth: int = 0) -> list[list[Any]]:
    """(path, size, mtime) of every string among ``values`` (nested) that names a file
    under ``base``, and of the files a scene YAML among them names in turn."""
    stamps: list[list[Any]] = []
    for v in values:
        if isinstance(v, dict):
            stamps += _file_stamps(v.values(), base, depth)
        elif isinstance(v, list):
            stamps += _file_stamps(v, base, depth)
        elif isinstance(v, str) and v and len(v) < 4096:
            path = base / v
            try:
                if not path.is_file():
                    continue
                st = path.stat()
            except OSError:
                continue
            stamps.append([str(path), st.st_size, st.st_mtime_ns])
            if depth < 2 and path.suffix in (".yaml", ".yml"):
                from ..config import load_yaml

                try:
                    inner = load_yaml(path)
                except Exception:
                    continue
                stamps += _file_stamps([inner], path.parent, depth + 1)
    return stamps


def content_key(task: SequenceTask) -> str:
    """What a sequence's build depends on: its seed, group, base folder, the layout (its
    reference times) and the size and time of every file the group names (and a scene
    file's own meshes and part mappings), so an edited file is built again."""
    base = Path(task.base_dir)
    return json.dumps([task.seed, task.group, task.base_dir, task.layout,
                       _file_stamps([task.group], base)], sort_keys=True, default=str)  # fmt: skip


def _build(task: SequenceTask) -> _Prepared:
    from ..pipeline.simulation import Simulation
    from ..world.scene import build_scene, load_scene

    group = SequenceGroup.model_validate(task.group)
    base = Path(task.base_dir)
    if group.generator is not None:
        spec = SceneSpec.model_validate(GENERATORS[group.generator](task.seed % 2**63))
        scene = build_scene(
            spec, base, load_materials(), source=f"{group.generator}", generated=True
        )  # (each once: not kept in the mesh cache)
        headings = headings_from_spec(spec)  # a parked car's front
    else:
        scene = load_scene(base / str(group.scene))
        yaml_scene = str(group.scene).endswith((".yaml", ".yml"))
        headings = (
            headings_from_spec(load_scene_spec(base / str(group.scene))) if yaml_scene else {}
        )
    scanner = load_scanner(group.scanner, group.scanner_overrides, base_dir=base)
    sim = Simulation(survey=_survey(task, group, scanner), scanner=scanner, scene=scene,
                     base_dir=base)  # fmt: skip
    window = None  # the scanner's vertical field of view: what its beams can see at all
    if scanner.channels is not None:
        el = np.radians(np.asarray(scanner.channels.elevation_deg, dtype=np.float64))
        half_beam = 0.5e-3 * scanner.divergence_mrad.vertical
        window = (float(el.min()) - half_beam, float(el.max()) + half_beam)
    frames = [reference_frame(sim, f, task.layout) for f in sim.frames()]
    return _Prepared(sim, scene, scanner, group, headings, window, frames)


def prepared(task: SequenceTask) -> tuple[_Prepared, float]:
    """The task's sequence built, from this process's cache when it holds it; and the
    seconds spent building it now (0.0 from the cache). At most :data:`CACHE_ENTRIES`
    sequences are kept; a build that failed is kept too (its error raised again), so a
    broken sequence is not rebuilt for every frame. Thread-safe: two threads of one
    worker wanting the same sequence build it once.

    Raises
    ------
    Exception
        Whatever the build raised.
    """
    key = content_key(task)
    with _CACHE_LOCK:
        building = _BUILDING.setdefault(key, threading.Lock())
    with building:
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
        seconds = 0.0
        if hit is None:
            t0 = time.perf_counter()
            try:
                hit = _build(task)
            except Exception as exc:
                hit = exc
            seconds = time.perf_counter() - t0
            with _CACHE_LOCK:
                _CACHE[key] = hit
                while len(_CACHE) > CACHE_ENTRIES:
                    _CACHE.popitem(last=False)
        with _CACHE_LOCK:
            _BUILDING.pop(key, None)
    if isinstance(hit, BaseException):
        raise hit
    return hit, seconds


def clear_cache() -> None:
    """Drop every sequence this process keeps built."""
    with _CACHE_LOCK:
        _CACHE.clear()


def _worker_name() -> str:
    """The Dask worker's address, or ``pid:N`` of this process."""
    if "distributed" in sys.modules:  # (never imported just to ask)
        try:
            return str(sys.modules["distributed"].get_worker().address)
        except ValueError:  # not inside a Dask task
            pass
    return f"pid:{os.getpid()}"


def run_sequence(task: SequenceTask) -> SequenceResult:
    """Scan a sequence's frames (``task.frames``, default all of them, and then its own
    files) in whatever process; failures are reported, not raised."""
    result = SequenceResult(task.index, task.seed, worker=_worker_name())
    group = SequenceGroup.model_validate(task.group)
    wanted = range(group.frames) if task.frames is None else task.frames
    layout = _layout(task)
    if task.resume:  # finished samples need nothing built
        done = [k for k in wanted if layout.has_sample(task.index, k)]
        result.frames_skipped += len(done)
        result.samples += [(task.index, k) for k in done]
        wanted = [k for k in wanted if k not in set(done)]
    if not wanted and task.frames is not None:
        return result
    cpu0 = time.process_time()
    try:
        prep, result.build_s = prepared(task)
    except Exception as exc:  # the whole sequence fails: every frame reported
        message = f"{type(exc).__name__}: {exc}"
        result.errors += [SampleError(task.index, k, task.seed, message) for k in wanted]
        return result
    started = time.perf_counter()
    with prep.lock:
        if task.threads:
            prep.sim.limit_threads(task.threads)
        for k in wanted:
            try:
                cloud = _write_frame(task, layout, prep, prep.frames[k])
            except Exception as exc:
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                result.errors.append(SampleError(task.index, k, task.seed, detail))
                continue
            result.frames_written += 1
            result.samples.append((task.index, k))
            result.points += len(cloud)
            count_labels(cloud["label"], into=result.label_counts)
    result.scan_s = time.perf_counter() - started
    result.cpu_s = time.process_time() - cpu0
    if task.frames is None:
        _write_sequence_files(layout, task.index, prep.frames)
    return result


def _write_frame(task: SequenceTask, layout: DatasetLayout, prep: _Prepared, f: Frame) -> Any:
    """Scan one frame, make its boxes and write its sample; return its cloud."""
    sim, scanner, group = prep.sim, prep.scanner, prep.group
    compensated = (
        layout.compensates if group.motion_compensated is None else group.motion_compensated
    )
    cloud = sim.frame_cloud(f, "sensor_compensated" if compensated else None)
    # Each box where its object was scanned, in the points' frame (object_boxes).
    boxes = object_boxes(prep.scene, f.time_s, (f.rotation, f.position_m), xyz_m=cloud["xyz"],
                         point_instance=cloud["instance"], engine=sim.engine,
                         range_max_m=scanner.range_max_m, headings_rad=prep.headings,
                         elevation_window_rad=prep.window,
                         point_time_s=f.time_s + cloud["time_s"],
                         sensor_pose_at=None if compensated else sim.trajectory.pose_at,
                         )  # fmt: skip
    mount_rotation = rotation_from_rpy_deg(group.mount.rotation_deg)
    mount_m = np.asarray(group.mount.position_m, dtype=np.float64)
    pose = SamplePose(f.time_s, f.rotation, f.position_m, mount_rotation, mount_m)
    seen = None
    if layout.name == "kitti":  # occlusion from the virtual camera
        camera_m = f.rotation @ CAMERA_IN_VELO_M + f.position_m
        seen = visibility_from(prep.scene, boxes, f.time_s, camera_m, sim.engine)
    layout.write_sample(Sample(task.index, f.index, cloud, scanner.intensity_max,
                               boxes, pose, seen))  # fmt: skip
    return cloud


def _write_sequence_files(layout: DatasetLayout, index: int, frames: list[Frame]) -> None:
    layout.write_sequence_files(index, [f.time_s for f in frames],
                                [f.rotation for f in frames],
                                [f.position_m for f in frames])  # fmt: skip


def reference_frame(sim: Simulation, frame: Frame, layout: str) -> Frame:
    """The frame with its reference time (and the sensor's pose then) as the layout's
    convention has it; the boxes, the poses and motion-compensated points are given then.

    ``nuscenes``
        The end of the sweep, its last firing: nuScenes stamps a LIDAR_TOP sweep when
        the spin completes (the ``sample_data`` timestamp).
    ``kitti``, ``semantickitti``, ``openpcdet``
        The moment the head faces forward (+x, azimuth 0), which triggers KITTI's
        cameras: the firing whose beam azimuth is nearest 0 (the odometry scans that
        SemanticKITTI labels are compensated to the camera's time, ``times.txt``;
        OpenPCDet's custom format has no time of its own, and its KITTI frames are the
        camera's).
    ``npz``
        The frame's first firing.

    Parameters
    ----------
    sim : Simulation
        (Only its ``pattern`` and ``trajectory`` are read.)
    frame : Frame
        One of ``sim.frames()`` (reference: its first firing).
    layout : str

    Returns
    -------
    Frame
        The same pulses with ``time_s`` (s from the survey start), ``rotation`` and
        ``position_m`` (world from sensor) at the layout's reference time.
    """
    pattern = sim.pattern
    if layout == "nuscenes":
        last = np.arange(max(frame.start, frame.stop - 4096), frame.stop, dtype=np.uint64)
        time_s = float(pattern.time_and_channel(last)[0].max())
    elif layout in ("kitti", "semantickitti", "openpcdet"):
        schedule = pattern.schedule(frame.start, frame.stop)
        azimuth = np.arctan2(schedule.direction[:, 1], schedule.direction[:, 0])
        time_s = float(schedule.time_s[int(np.argmin(np.abs(azimuth)))])
    else:
        return frame
    rotation, position = sim.trajectory.pose_at(time_s)
    return dataclasses.replace(frame, time_s=time_s, rotation=rotation, position_m=position)


class Dispatcher:
    """Which frame each worker runs next, so that workers keep to the sequences they
    have built and the frames still balance.

    A worker is given, in this order: the next frame of a sequence it holds; the first
    frame of a sequence nobody has started; a frame from the end of the sequence with the
    most frames left, if that is worth a build (more frames left than a build takes in
    frame times, by the running means; two without figures yet), or if nobody who holds
    that sequence is at work; else nothing (it waits, and the run ends when every worker
    waits). Which worker computes a frame never changes its bytes.

    Parameters
    ----------
    pending : mapping of int to iterable of int
        The frames to do of each sequence, in order.
    """

    def __init__(self, pending: dict[int, Iterable[int]]) -> None:
        self.pending = {s: deque(fr) for s, fr in pending.items() if fr}
        self.order = sorted(self.pending)
        self.started: set[int] = set()
        self.held: dict[str, list[int]] = {}  # worker -> sequences it has built, newest last
        self.busy: dict[str, int] = {}  # worker -> sequence it is running a frame of
        self._build_s: list[float] = []
        self._frame_s: list[float] = []

    def __bool__(self) -> bool:
        return any(self.pending.values())

    def done(self, result: SequenceResult, worker: str) -> None:
        """Note a finished task of ``worker`` (its sequence is held there now)."""
        self.busy.pop(worker, None)
        held = self.held.setdefault(worker, [])
        if result.index in held:
            held.remove(result.index)
        held.append(result.index)
        del held[:-CACHE_ENTRIES]
        if result.build_s > 0:
            self._build_s.append(result.build_s)
        if result.frames_written:
            self._frame_s.append(result.scan_s / result.frames_written)

    def _worth_a_build(self, left: int) -> bool:
        if not self._build_s or not self._frame_s:
            return left >= 2
        return left * float(np.mean(self._frame_s)) > float(np.mean(self._build_s))

    def next(self, worker: str | None) -> tuple[int, int] | None:
        """The (sequence, frame) for ``worker`` (None: a worker not yet known), or None."""
        for s in reversed(self.held.get(worker, []) if worker is not None else []):
            if self.pending.get(s):
                return self._take(worker, s, self.pending[s].popleft())
        for s in self.order:
            if s not in self.started and self.pending[s]:
                self.started.add(s)
                return self._take(worker, s, self.pending[s].popleft())
        left = [s for s in self.order if self.pending[s]]
        if not left:
            return None
        s = max(left, key=lambda q: len(self.pending[q]))
        if self._worth_a_build(len(self.pending[s])) or s not in self.busy.values():
            return self._take(worker, s, self.pending[s].pop())
        return None

    def _take(self, worker: str | None, s: int, frame: int) -> tuple[int, int]:
        if worker is not None:
            self.busy[worker] = s
        return s, frame


def _tasks(spec: DatasetSpec, out_dir: Path, base_dir: Path, resume: bool) -> list[SequenceTask]:
    tasks, index = [], 0
    for group in spec.groups:
        for _ in range(group.sequences):
            tasks.append(SequenceTask(index, sequence_seed(spec.seed, index), group.model_dump(),
                                      spec.layout, spec.range_images, str(out_dir),
                                      str(base_dir), resume,
                                      keyframe_every=spec.keyframe_every))  # fmt: skip
            index += 1
    return tasks


def check_dataset(spec: DatasetSpec, spec_path: Path) -> None:
    """Check every group of a dataset spec whole, before any sample runs: its scanner
    (preset or file, with the overrides), its scene file (materials, labels, meshes) and
    that each generator's scene is a valid scene spec (the build itself is the workers';
    a generator takes no input from the spec but its seed). The first problem is one
    :class:`ConfigError` naming the spec file and the group's key, e.g.
    ``groups[1].scanner``."""
    from ..world.scene import load_scene

    base = spec_path.resolve().parent
    for i, group in enumerate(spec.groups):
        key = f"groups[{i}]"
        try:
            load_scanner(group.scanner, group.scanner_overrides, base_dir=base, source=spec_path)
        except ConfigError as exc:
            if exc.source != str(spec_path):  # the group's own scanner file is bad
                raise ConfigError(spec_path, f"{key}.scanner", str(exc)) from None
            where = "scanner" if exc.key in ("", "scanner") else exc.key
            raise ConfigError(spec_path, f"{key}.{where}", exc.problem) from None
        try:
            if group.scene is not None:
                load_scene(base / str(group.scene))
            elif group.generator is not None:
                SceneSpec.model_validate(GENERATORS[group.generator](0))
        except (ConfigError, SceneError) as exc:
            raise ConfigError(spec_path, f"{key}.scene", str(exc)) from None


def _frame_task(task: SequenceTask, frame: int) -> SequenceTask:
    return dataclasses.replace(task, frames=(frame,), resume=False)


def start_method() -> str:
    """How local worker processes start: ``"fork"`` where the platform has it (Linux) and
    no kernel has run in this process yet, else ``"spawn"``.

    A forked worker inherits this process's imports (Open3D, trimesh, numba, the
    simulator), which a spawned one spends about two CPU seconds importing again. Forking
    is safe only before any thread pool exists: GNU OpenMP (numba's ``omp`` layer) aborts
    a child forked after a parallel kernel ran ("fork() called from a process already
    using GNU OpenMP"). So :func:`run_dataset` forks at its start, before it casts or
    computes anything, and falls back to ``spawn`` in a process whose numba threads have
    started (a second run in one Python session, e.g. a notebook or the bench) and on
    macOS and Windows (no safe ``fork``). The start method never changes the files
    written (a test writes a dataset both ways).

    Returns
    -------
    str
        A :mod:`multiprocessing` start method.
    """
    import multiprocessing

    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    return "spawn" if _threads_started() else "fork"


def _import_for_workers() -> None:
    """Import what a worker needs, for forked workers to inherit instead of importing it
    again (Open3D alone is about 1 CPU s a process; importing starts no thread)."""
    from ..pipeline import simulation  # noqa: F401
    from ..world import scene  # noqa: F401
    from ..world.raycast import import_open3d

    import_open3d()


def _threads_started() -> bool:
    """Whether numba's parallel threads have started in this process."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return parallel is not None and bool(getattr(parallel, "_is_initialized", True))


def _run_local(
    tasks: dict[int, SequenceTask],
    dispatcher: Dispatcher,
    workers: int,
    collect: Callable[[SequenceResult], None],
) -> str:
    """Run the dispatcher's frames on ``workers`` local workers: this process (which has
    its imports and compiled kernels already, and starts at once) and ``workers - 1``
    processes started by :func:`start_method` (forked, they inherit the imports), one
    frame in flight each (so a frame submitted when a process
    finishes goes to that process). A thread of this process hands the spawned ones their
    frames while this one scans its own. Returns the start method used."""
    import multiprocessing

    lock = threading.Lock()
    failure: list[BaseException] = []
    method = start_method()
    if method == "fork":
        _import_for_workers()
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx) as pool:
        running: dict[Any, tuple[int, int]] = {}
        with lock:
            for _ in range(workers - 1):
                job = dispatcher.next(None)
                if job is None:
                    break
                running[pool.submit(run_sequence, _frame_task(tasks[job[0]], job[1]))] = job

        def hand_out() -> None:  # the spawned processes' frames
            try:
                while running:
                    finished, _ = wait_futures(list(running), return_when="FIRST_COMPLETED")
                    for fut in finished:
                        del running[fut]
                        result = fut.result()
                        with lock:
                            dispatcher.done(result, result.worker)
                            collect(result)
                            job = dispatcher.next(result.worker)
                        if job is not None:
                            task = _frame_task(tasks[job[0]], job[1])
                            running[pool.submit(run_sequence, task)] = job
            except BaseException as exc:  # raised again in this thread
                failure.append(exc)

        helper = threading.Thread(target=hand_out, name="dataset-dispatch", daemon=True)
        helper.start()
        me = _worker_name()
        try:
            while True:
                with lock:
                    job = dispatcher.next(me)
                if job is None:
                    break
                result = run_sequence(_frame_task(tasks[job[0]], job[1]))
                with lock:
                    dispatcher.done(result, me)
                    collect(result)
        finally:
            clear_cache()
            _all_threads()
            helper.join()
    if failure:
        raise failure[0]
    return method


def _all_threads() -> None:
    """This process's kernels back on every core (a worker's share was set for a run)."""
    from ..backend import select_backend

    select_backend().set_threads(0)


def _run_dask(
    tasks: dict[int, SequenceTask],
    dispatcher: Dispatcher,
    client: Any,
    collect: Callable[[SequenceResult], None],
) -> None:
    """Run the dispatcher's frames on a Dask cluster: as many in flight a worker as it
    has threads, each asked of the worker the dispatcher chose (others may take it)."""
    from dask.distributed import as_completed as dask_completed

    info = client.scheduler_info(n_workers=-1)["workers"]
    slots = [addr for addr, w in sorted(info.items()) for _ in range(max(1, w.get("nthreads", 1)))]
    if not slots:
        slots = [None]

    def submit(job: tuple[int, int], worker: str | None) -> Any:
        return client.submit(run_sequence, _frame_task(tasks[job[0]], job[1]), pure=False,
                             workers=None if worker is None else [worker],
                             allow_other_workers=True)  # fmt: skip

    running = dask_completed()
    for addr in slots:
        job = dispatcher.next(addr)
        if job is None:
            break
        running.add(submit(job, addr))
    for fut in running:
        result = fut.result()
        dispatcher.done(result, result.worker)
        collect(result)
        job = dispatcher.next(result.worker)
        if job is not None:
            running.add(submit(job, result.worker))


def run_dataset(
    spec_path: str | Path,
    out_dir: str | Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    resume: bool = False,
    progress: Callable[[SequenceResult, int], None] | None = None,
) -> dict[str, Any]:
    """Generate a dataset; returns (and writes) the manifest.

    Parameters
    ----------
    scheduler : str, optional
        None: local worker processes (``workers``, default the core count; 1 runs in this
        process). ``local:N``: a Dask LocalCluster of N single-threaded workers. Anything
        else: the address of a running Dask scheduler (``tcp://host:8786``).
    resume : bool
        Skip samples whose files all exist.
    progress : callable, optional
        Called with each task's result and the samples done so far.
    """
    from .. import __version__

    spec_path = Path(spec_path)
    spec = load_dataset_spec(spec_path)
    check_dataset(spec, spec_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)  # a killed run's half-written files
    tasks = _tasks(spec, out.resolve(), spec_path.resolve().parent, resume)
    layout = _layout_of(spec, out)
    started = time.perf_counter()
    by_index: dict[int, SequenceResult] = {t.index: SequenceResult(t.index, t.seed) for t in tasks}
    done_frames = 0
    by_worker: dict[str, dict[str, Any]] = {}

    def collect(r: SequenceResult) -> None:
        nonlocal done_frames
        if r.worker:
            w = by_worker.setdefault(r.worker, {"frames": 0, "builds": 0, "build_s": 0.0,
                                                "scan_s": 0.0, "cpu_s": 0.0})  # fmt: skip
            w["cpu_s"] += r.cpu_s
            w["frames"] += r.frames_written
            w["builds"] += int(r.build_s > 0)
            w["build_s"] += r.build_s
            w["scan_s"] += r.scan_s
        into = by_index[r.index]
        into.frames_written += r.frames_written
        into.frames_skipped += r.frames_skipped
        into.points += r.points
        for k, v in r.label_counts.items():
            into.label_counts[k] = into.label_counts.get(k, 0) + v
        into.errors += r.errors
        into.samples += r.samples
        done_frames += r.frames_written + r.frames_skipped
        if progress is not None:
            progress(r, done_frames)

    # Each sequence's frames (times and poses) without its scene; the frames on disk
    # are kept (resume), the others dispatched one by one.
    timelines: dict[int, list[Frame]] = {}
    pending: dict[int, list[int]] = {}
    for t in tasks:
        frames = SequenceGroup.model_validate(t.group).frames
        try:
            timelines[t.index] = sequence_frames(t)
        except Exception as exc:  # the whole sequence fails: reported
            message = f"{type(exc).__name__}: {exc}"
            failed = SequenceResult(t.index, t.seed)
            failed.errors = [SampleError(t.index, k, t.seed, message) for k in range(frames)]
            collect(failed)
            continue
        kept = [k for k in range(frames) if resume and layout.has_sample(t.index, k)]
        if kept:
            collect(SequenceResult(t.index, t.seed, frames_skipped=len(kept),
                                   samples=[(t.index, k) for k in kept]))  # fmt: skip
        pending[t.index] = [k for k in range(frames) if k not in set(kept)]
    dispatcher = Dispatcher(pending)
    todo = sum(len(p) for p in pending.values())
    by_task = {t.index: t for t in tasks}
    started_by = None  # how the local worker processes started
    if scheduler is None and (workers == 1 or todo <= 1):
        try:
            while (job := dispatcher.next("main")) is not None:
                result = run_sequence(_frame_task(by_task[job[0]], job[1]))
                dispatcher.done(result, "main")
                collect(result)
        finally:
            clear_cache()  # this process goes on: do not keep the scenes
    elif scheduler is None:
        n = min(workers or os.cpu_count() or 1, todo)
        shared = {t.index: t for t in _share_cores(tasks, n)}
        started_by = _run_local(shared, dispatcher, n, collect)  # this process is one of n
    elif todo:
        import dask
        from dask.distributed import Client, LocalCluster

        if scheduler.startswith("local:"):
            n = int(scheduler.split(":", 1)[1])
            by_task = {t.index: t for t in _share_cores(tasks, n)}
            started_by = start_method()
            if started_by == "fork":  # the workers inherit the imports (as _run_local's)
                _import_for_workers()
            with dask.config.set({"distributed.worker.multiprocessing-method": started_by}):
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                       dashboard_address=None)  # fmt: skip
            client = Client(cluster)
        else:
            cluster, client = None, Client(scheduler)
        try:
            _run_dask(by_task, dispatcher, client, collect)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    for index, frames in sorted(timelines.items()):
        _write_sequence_files(layout, index, frames)
    results = [by_index[i] for i in sorted(by_index)]
    for r in results:
        r.samples.sort()
        r.errors.sort(key=lambda e: e.frame)
    labels: dict[str, int] = {}
    for r in results:
        for k, v in sorted(r.label_counts.items()):
            labels[label_name(k)] = labels.get(label_name(k), 0) + v
    manifest = {
        "package": "lidar-sim",
        "version": __version__,
        "spec": spec.model_dump(),
        "layout": spec.layout,
        "sequences": [
            {
                "index": r.index,
                "seed": r.seed,
                "frames_written": r.frames_written,
                "frames_skipped": r.frames_skipped,
                "points": r.points,
            }
            for r in results
        ],
        "errors": [e.__dict__ for r in results for e in r.errors],
        "frames": sum(r.frames_written + r.frames_skipped for r in results),
        "points_written": sum(r.points for r in results),
        "label_counts_written": labels,
        "seconds": time.perf_counter() - started,
        # who ran what: frames written, sequences built (and the seconds of both)
        "workers": {w: by_worker[w] for w in sorted(by_worker)},
        "start_method": started_by,
    }
    layout.write_dataset_files([p for r in results for p in r.samples])
    write_manifest(out, manifest)
    return manifest
