"""Datasets at scale: many labelled sequences in the layouts training code reads.

A dataset spec lists groups of sequences: a scene generator (or a scene file), a
scanner, a trajectory, how many sequences and frames. Sequence ``s`` (counted over all
groups in order) gets the seed ``mix64(root + (s + 1) * GOLDEN_GAMMA)``; its scene is
generated from it and its scan uses it, and frame ``k`` of it is the ``k``-th
revolution. So a sample's output depends only on its own index and the root seed,
whichever worker, process or machine computes it, in whatever order.

Layouts (``semantickitti``, ``nuscenes``, ``npz``, ``openpcdet``, ``kitti``, optional
range images) are defined and
written by :mod:`simulator.io.layouts`. ``manifest.json`` records the effective spec, the
seeds, the package version and the counts. Every file is written to a temporary name and
renamed, so ``--resume`` skips finished samples and never sees a partial one.
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..boxes import headings_from_spec, object_boxes, visibility_from
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

if TYPE_CHECKING:
    from ..pipeline import Frame, Simulation

__all__ = [
    "SampleError",
    "SequenceResult",
    "SequenceTask",
    "reference_frame",
    "run_dataset",
    "run_sequence",
]


@dataclass(frozen=True)
class SequenceTask:
    """Everything a worker needs for one sequence (picklable)."""

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


@dataclass
class SampleError:
    """A sample that failed: which, with which seed, and why."""

    sequence: int
    frame: int
    seed: int
    error: str


@dataclass
class SequenceResult:
    index: int
    seed: int
    frames_written: int = 0
    frames_skipped: int = 0
    points: int = 0
    label_counts: dict[int, int] = field(default_factory=dict)
    errors: list[SampleError] = field(default_factory=list)
    #: (sequence, frame) of every sample on disk (written or kept).
    samples: list[tuple[int, int]] = field(default_factory=list)


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


def run_sequence(task: SequenceTask) -> SequenceResult:
    """Scan one sequence (in whatever process); failures are reported, not raised."""
    from ..pipeline import Simulation
    from ..scene import build_scene, load_scene

    result = SequenceResult(task.index, task.seed)
    group = SequenceGroup.model_validate(task.group)
    try:
        base = Path(task.base_dir)
        if group.generator is not None:
            spec = SceneSpec.model_validate(GENERATORS[group.generator](task.seed % 2**63))
            scene = build_scene(spec, base, load_materials(), source=f"{group.generator}")
        else:
            scene = load_scene(base / str(group.scene))
        # static countable objects face the way they were placed (a parked car's front)
        headings = headings_from_spec(spec) if group.generator is not None else (
            headings_from_spec(load_scene_spec(base / str(group.scene)))
            if str(group.scene).endswith((".yaml", ".yml")) else {})  # fmt: skip
        scanner = load_scanner(group.scanner, group.scanner_overrides, base_dir=base)
        trajectory = group.trajectory.model_copy(deep=True)
        if group.start_jitter_m and trajectory.start is not None:
            jitter = np.random.default_rng(task.seed).uniform(-1, 1, 2) * group.start_jitter_m
            trajectory.start.position_m[0] += float(jitter[0])
            trajectory.start.position_m[1] += float(jitter[1])
        survey = Survey(scanner=scanner.name, scene="(generated)", trajectory=trajectory,
                        mount=group.mount, revolutions=group.frames, seed=task.seed,
                        weather=group.weather)  # fmt: skip
        sim = Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=base)
        if task.threads:
            sim.limit_threads(task.threads)
    except Exception as exc:  # the whole sequence fails: every frame reported
        for k in range(group.frames):
            message = f"{type(exc).__name__}: {exc}"
            result.errors.append(SampleError(task.index, k, task.seed, message))
        return result
    layout = _layout(task)
    compensated = (
        layout.compensates if group.motion_compensated is None else group.motion_compensated
    )
    mount_rotation = rotation_from_rpy_deg(group.mount.rotation_deg)
    mount_m = np.asarray(group.mount.position_m, dtype=np.float64)
    frames = [reference_frame(sim, f, task.layout) for f in sim.frames()]
    window = None  # the scanner's vertical field of view: what its beams can see at all
    if scanner.channels is not None:
        el = np.radians(np.asarray(scanner.channels.elevation_deg, dtype=np.float64))
        half_beam = 0.5e-3 * scanner.divergence_mrad.vertical
        window = (float(el.min()) - half_beam, float(el.max()) + half_beam)
    for f in frames:
        if task.resume and layout.has_sample(task.index, f.index):
            result.frames_skipped += 1
            result.samples.append((task.index, f.index))
            continue
        try:
            cloud = sim.frame_cloud(f, "sensor_compensated" if compensated else None)
            boxes = object_boxes(scene, f.time_s, (f.rotation, f.position_m), xyz_m=cloud["xyz"],
                                 point_instance=cloud["instance"], engine=sim.engine,
                                 range_max_m=scanner.range_max_m,
                                 headings_rad=headings,
                                 elevation_window_rad=window)  # fmt: skip
            pose = SamplePose(f.time_s, f.rotation, f.position_m, mount_rotation, mount_m)
            seen = None
            if layout.name == "kitti":  # occlusion from the virtual camera
                camera_m = f.rotation @ CAMERA_IN_VELO_M + f.position_m
                seen = visibility_from(scene, boxes, f.time_s, camera_m, sim.engine)
            layout.write_sample(Sample(task.index, f.index, cloud, scanner.intensity_max,
                                       boxes, pose, seen))  # fmt: skip
        except Exception as exc:
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            result.errors.append(SampleError(task.index, f.index, task.seed, detail))
            continue
        result.frames_written += 1
        result.samples.append((task.index, f.index))
        result.points += len(cloud)
        count_labels(cloud["label"], into=result.label_counts)
    layout.write_sequence_files(task.index, [f.time_s for f in frames],
                                [f.rotation for f in frames],
                                [f.position_m for f in frames])  # fmt: skip
    return result


def reference_frame(sim: Simulation, frame: Frame, layout: str) -> Frame:
    """The frame with its reference time (and the sensor's pose then) as the layout's
    convention has it; the boxes, the poses and motion-compensated points are given then.

    ``nuscenes``
        The end of the sweep, its last firing: nuScenes stamps a LIDAR_TOP sweep when
        the spin completes (the ``sample_data`` timestamp).
    ``kitti``
        The moment the head faces forward (+x, azimuth 0), which triggers KITTI's
        cameras: the firing whose beam azimuth is nearest 0.
    ``semantickitti``, ``npz``, ``openpcdet``
        The frame's first firing (``times.txt``; OpenPCDet's custom format has none of
        its own).

    Parameters
    ----------
    sim : Simulation
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
    elif layout == "kitti":
        schedule = pattern.schedule(frame.start, frame.stop)
        azimuth = np.arctan2(schedule.direction[:, 1], schedule.direction[:, 0])
        time_s = float(schedule.time_s[int(np.argmin(np.abs(azimuth)))])
    else:
        return frame
    rotation, position = sim.trajectory.pose_at(time_s)
    return dataclasses.replace(frame, time_s=time_s, rotation=rotation, position_m=position)


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
    that each generator builds. The first problem is one :class:`ConfigError` naming the
    spec file and the group's key, e.g. ``groups[1].scanner``."""
    from ..scene import build_scene, load_scene

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
                generated = SceneSpec.model_validate(GENERATORS[group.generator](0))
                build_scene(generated, base, load_materials(), source=group.generator)
        except (ConfigError, SceneError) as exc:
            raise ConfigError(spec_path, f"{key}.scene", str(exc)) from None


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
    """
    from .. import __version__

    spec_path = Path(spec_path)
    spec = load_dataset_spec(spec_path)
    check_dataset(spec, spec_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out)  # a killed run's half-written files
    tasks = _tasks(spec, out.resolve(), spec_path.resolve().parent, resume)
    started = time.perf_counter()
    results: list[SequenceResult] = []
    done_frames = 0

    def collect(r: SequenceResult) -> None:
        nonlocal done_frames
        results.append(r)
        done_frames += r.frames_written + r.frames_skipped
        if progress is not None:
            progress(r, done_frames)

    if scheduler is None and (workers == 1 or len(tasks) == 1):
        for t in tasks:
            collect(run_sequence(t))
    elif scheduler is None:
        import multiprocessing

        n = workers or os.cpu_count() or 1
        tasks = _share_cores(tasks, min(n, len(tasks)))
        ctx = multiprocessing.get_context("spawn")  # numba/OpenMP and Open3D are not fork-safe
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            for f in as_completed([pool.submit(run_sequence, t) for t in tasks]):
                collect(f.result())
    else:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed

        if scheduler.startswith("local:"):
            n = int(scheduler.split(":", 1)[1])
            tasks = _share_cores(tasks, n)
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=None)  # fmt: skip
            client = Client(cluster)
        else:
            cluster, client = None, Client(scheduler)
        try:
            futures = client.map(run_sequence, tasks, pure=False)
            for f in dask_completed(futures):
                collect(f.result())
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    results.sort(key=lambda r: r.index)
    labels: dict[str, int] = {}
    for r in results:
        for k, v in r.label_counts.items():
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
    }
    _layout_of(spec, out).write_dataset_files([p for r in results for p in r.samples])
    write_manifest(out, manifest)
    return manifest
