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
range images; ``rosbag2``, one bag a sequence, whose sequences are dispatched whole: a bag
is written by one worker) are defined and written by :mod:`simulator.io.layouts`.
``manifest.json`` records the effective spec, the seeds, the package version and the
counts. Every file is written to a temporary name and
renamed, so ``--resume`` skips finished samples (they are not even dispatched) and never
sees a partial one; the files of a whole sequence (poses, times) and of the whole dataset
(nuScenes' tables, the ``ImageSets`` splits) are written by the coordinating process at
the end, from the frames on disk and the reference times the workers handed back with
them (a kept frame's computed then), so a resumed run completes them in every layout
and executor. Each frame's reference time is computed once, by the worker scanning it,
so nothing a frame needs is computed before the workers start.

The parts: the specs and samples (:mod:`~simulator.datasets.tasks`), a worker's builds and
scans (:mod:`~simulator.datasets.worker`), the dispatch of frames to local processes or a
Dask cluster (:mod:`~simulator.datasets.dispatch`); this module runs them and writes the
manifest, and re-exports their public names.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..config import DatasetSpec, Rosbag2Spec, SequenceGroup, load_dataset_spec, raise_validation
from ..errors import ConfigError, OutputError
from ..io.atomic import folder_lock, no_space, remove_stale_temps
from ..io.layouts import DatasetLayout, write_manifest
from ..labels import label_name
from .dispatch import Dispatcher, import_for_workers, run_dask, run_local, start_method
from .tasks import (
    SampleError,
    SequenceClock,
    SequenceResult,
    SequenceTask,
    check_dataset,
    check_resumable,
    frame_task,
    pending_frames,
    reference_frame,
    sequence_clock,
    sequence_frames,
    sequence_tasks,
    share_cores,
    spec_layout,
    spec_record,
)
from .worker import (
    CACHE_ENTRIES,
    clear_cache,
    content_key,
    prepared,
    run_sequence,
    write_sequence_files,
)

if TYPE_CHECKING:
    from ..pipeline.simulation import Frame

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
    "sequence_clock",
    "sequence_frames",
    "with_bag_options",
]


def run_dataset(
    spec_path: str | Path,
    out_dir: str | Path,
    *,
    scheduler: str | None = None,
    workers: int | None = None,
    resume: bool = False,
    progress: Callable[[SequenceResult, int], None] | None = None,
    rosbag2: dict[str, str] | None = None,
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
    rosbag2 : dict of str to str, optional
        Keys of the spec's ``rosbag2:`` section given on the command line (``storage``,
        ``point_layout``: the ``--storage`` and ``--point-layout`` options), over the
        spec's; a ``rosbag2`` layout's only.

    Raises
    ------
    ConfigError
        If the spec is bad, or ``rosbag2`` is given for another layout.
    """
    spec_path = Path(spec_path)
    spec = with_bag_options(load_dataset_spec(spec_path), spec_path, rosbag2 or {})
    check_dataset(spec, spec_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):  # one run a folder: a second would interleave its files
        try:
            return _run(spec, spec_path, out, scheduler, workers, resume, progress)
        except (OSError, OutputError) as exc:
            if not no_space(exc):
                raise
            raise OutputError(
                f"{out}: no space left on the device; every sample written is complete and "
                "nothing half-written is kept: free some space and run again with --resume"
            ) from None


def _run(
    spec: DatasetSpec,
    spec_path: Path,
    out: Path,
    scheduler: str | None,
    workers: int | None,
    resume: bool,
    progress: Callable[[SequenceResult, int], None] | None,
) -> dict[str, Any]:
    """The steps of :func:`run_dataset`, in its folder, held."""
    if resume:
        check_resumable(spec, spec_path, out)  # before anything in it is touched
    remove_stale_temps(out)  # a killed run's half-written files
    tasks = sequence_tasks(spec, out.resolve(), spec_path.resolve().parent, resume)
    layout = spec_layout(spec, out)
    layout.remove_partial()  # (and its unfinished bags)
    started = time.perf_counter()
    tally = _Tally(tasks, progress)
    clocks, pending = _clocks(tasks, layout, resume, tally)
    started_by = _execute(tasks, pending, tally, scheduler, workers)
    for index, (clock, frames) in sorted(clocks.items()):
        scanned = tally.reference_frames.get(index, {})  # the others: kept or failed
        write_sequence_files(layout, index, [scanned[f.index] if f.index in scanned
                                             else reference_frame(clock, f, spec.layout)
                                             for f in frames])  # fmt: skip
    results = tally.results()
    manifest = _manifest(spec, results, tally.by_worker, started, started_by)
    layout.write_dataset_files([p for r in results for p in r.samples])
    write_manifest(out, manifest)
    return manifest


def with_bag_options(spec: DatasetSpec, spec_path: Path, given: dict[str, str]) -> DatasetSpec:
    """The spec with the ``rosbag2:`` keys ``given`` on the command line (each option
    named ``--storage``, ``--point-layout``) over its own, validated as the file's are."""
    if not given:
        return spec
    options = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in given.items())
    if spec.layout != "rosbag2":
        raise ConfigError(spec_path, "layout", f"{spec.layout}, and {options} is for "
                          "layout rosbag2 only; expected layout: rosbag2")  # fmt: skip
    section = {**(spec.rosbag2 or Rosbag2Spec()).model_dump(), **given}
    try:
        return spec.model_copy(update={"rosbag2": Rosbag2Spec.model_validate(section)})
    except ValidationError as err:
        raise_validation(options, err)


class _Tally:
    """The results of a run's tasks added up, by sequence and by worker, as they come."""

    def __init__(
        self, tasks: list[SequenceTask], progress: Callable[[SequenceResult, int], None] | None
    ) -> None:
        self.by_index = {t.index: SequenceResult(t.index, t.seed) for t in tasks}
        self.by_worker: dict[str, dict[str, Any]] = {}
        #: Each sequence's scanned frames at the reference time, by frame index.
        self.reference_frames: dict[int, dict[int, Frame]] = {}
        self.done_frames = 0
        self.progress = progress

    def collect(self, r: SequenceResult) -> None:
        """Add a task's result (and report the samples done so far)."""
        if r.worker:
            w = self.by_worker.setdefault(r.worker, {"frames": 0, "builds": 0, "build_s": 0.0,
                                                     "scan_s": 0.0, "cpu_s": 0.0})  # fmt: skip
            w["cpu_s"] += r.cpu_s
            w["frames"] += r.frames_written
            w["builds"] += int(r.build_s > 0)
            w["build_s"] += r.build_s
            w["scan_s"] += r.scan_s
        into = self.by_index[r.index]
        into.frames_written += r.frames_written
        into.frames_skipped += r.frames_skipped
        into.points += r.points
        for k, v in r.label_counts.items():
            into.label_counts[k] = into.label_counts.get(k, 0) + v
        into.errors += r.errors
        into.samples += r.samples
        into.cpu_s += r.cpu_s
        if r.build_s > 0:
            into.builds += 1
            into.build_cpu_s += r.cpu_s
        into.build_s += r.build_s
        into.scan_s += r.scan_s
        for f in r.reference_frames:
            self.reference_frames.setdefault(r.index, {})[f.index] = f
        self.done_frames += r.frames_written + r.frames_skipped
        if self.progress is not None:
            self.progress(r, self.done_frames)

    def results(self) -> list[SequenceResult]:
        """Each sequence's result, in order, its samples and errors sorted."""
        results = [self.by_index[i] for i in sorted(self.by_index)]
        for r in results:
            r.samples.sort()
            r.errors.sort(key=lambda e: e.frame)
        return results


def _clocks(
    tasks: list[SequenceTask], layout: DatasetLayout, resume: bool, tally: _Tally
) -> tuple[dict[int, tuple[SequenceClock, list[Frame]]], dict[int, list[int]]]:
    """Each sequence's clock and frames (no scene, no reference times yet: the workers
    give those of the frames they scan, and the run computes the others' at its end), and
    the frames still to do of each: the frames on disk are kept (resume), a sequence
    whose clock fails is reported whole."""
    clocks: dict[int, tuple[SequenceClock, list[Frame]]] = {}
    pending: dict[int, list[int]] = {}
    for t in tasks:
        frames = SequenceGroup.model_validate(t.group).frames
        try:
            clock = sequence_clock(t)
            clocks[t.index] = (clock, clock.frames())
        except Exception as exc:  # the whole sequence fails: reported
            message = f"{type(exc).__name__}: {exc}"
            failed = SequenceResult(t.index, t.seed)
            failed.errors = [SampleError(t.index, k, t.seed, message) for k in range(frames)]
            tally.collect(failed)
            continue
        kept = [k for k in range(frames) if resume and layout.has_sample(t.index, k)]
        if kept:
            tally.collect(SequenceResult(t.index, t.seed, frames_skipped=len(kept),
                                         samples=[(t.index, k) for k in kept]))  # fmt: skip
        pending[t.index] = pending_frames(layout, [k for k in range(frames) if k not in set(kept)])
    return clocks, pending


def _execute(
    tasks: list[SequenceTask],
    pending: dict[int, list[int]],
    tally: _Tally,
    scheduler: str | None,
    workers: int | None,
) -> str | None:
    """Run the pending frames: in this process, on local worker processes or on a Dask
    cluster; returns how the local worker processes started (None: none did)."""
    dispatcher = Dispatcher(pending)
    todo = sum(len(p) for p in pending.values())
    by_task = {t.index: t for t in tasks}
    started_by = None  # how the local worker processes started
    if scheduler is None and (workers == 1 or todo <= 1):
        try:
            while (job := dispatcher.next("main")) is not None:
                result = run_sequence(frame_task(by_task[job[0]], job[1]))
                dispatcher.done(result, "main")
                tally.collect(result)
        finally:
            clear_cache()  # this process goes on: do not keep the scenes
    elif scheduler is None:
        n = min(workers or os.cpu_count() or 1, todo)
        shared = {t.index: t for t in share_cores(tasks, n)}
        started_by = run_local(shared, dispatcher, n, tally.collect)  # this process is one of n
    elif todo:
        import dask
        from dask.distributed import Client, LocalCluster

        if scheduler.startswith("local:"):
            n = int(scheduler.split(":", 1)[1])
            by_task = {t.index: t for t in share_cores(tasks, n)}
            started_by = start_method()
            if started_by == "fork":  # the workers inherit the imports (as run_local's)
                import_for_workers()
            with dask.config.set({"distributed.worker.multiprocessing-method": started_by}):
                cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                       dashboard_address=None)  # fmt: skip
            client = Client(cluster)
        else:
            cluster, client = None, Client(scheduler)
        try:
            run_dask(by_task, dispatcher, client, tally.collect)
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
    return started_by


def _manifest(
    spec: DatasetSpec,
    results: list[SequenceResult],
    by_worker: dict[str, dict[str, Any]],
    started: float,
    started_by: str | None,
) -> dict[str, Any]:
    """What ``manifest.json`` records: the effective spec, the package version, each
    sequence's seed and counts, the errors, the labels written, the seconds since
    ``started`` (``time.perf_counter``), who ran what, how local workers started, and the
    machine (:func:`simulator.machine.machine_summary`: the CPU and the libraries'
    versions)."""
    from .. import __version__
    from ..machine import machine_summary

    labels: dict[str, int] = {}
    for r in results:
        for k, v in sorted(r.label_counts.items()):
            labels[label_name(k)] = labels.get(label_name(k), 0) + v
    return {
        "package": "lidar-sim",
        "version": __version__,
        "spec": spec_record(spec),
        "layout": spec.layout,
        "sequences": [
            {
                "index": r.index,
                "seed": r.seed,
                "frames_written": r.frames_written,
                "frames_skipped": r.frames_skipped,
                "points": r.points,
                # CPU seconds building and scanning it, on whichever workers; the builds,
                # and the CPU seconds of the tasks that built (each with its frame)
                "cpu_s": r.cpu_s,
                "builds": r.builds,
                "build_cpu_s": r.build_cpu_s,
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
        # the CPU and libraries (issue 49): what to compare when two datasets differ
        "machine": machine_summary(),
    }
