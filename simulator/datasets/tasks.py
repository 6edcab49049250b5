"""A dataset's specs and samples: the sequences of a dataset spec as picklable tasks (each
with its seed, group and layout), the survey and frames of each, the frames' reference
times as each layout has them, and the spec checked whole before any sample runs. Nothing
here builds a scene or scans (:mod:`~simulator.datasets.worker` does).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import DatasetSpec, SceneSpec, SequenceGroup, Survey, load_scanner
from ..constants import sequence_seed
from ..errors import ConfigError, SceneError
from ..generators import GENERATORS
from ..io.layouts import DatasetLayout
from ..io.pointcloud2 import BagOptions

if TYPE_CHECKING:
    from ..config import ScannerConfig
    from ..pipeline.simulation import Frame, Simulation
    from ..sensor.scanner import ScanPattern
    from ..sensor.trajectory import Trajectory

__all__ = [
    "SampleError",
    "SequenceClock",
    "SequenceResult",
    "SequenceTask",
    "check_dataset",
    "check_resumable",
    "frame_task",
    "pending_frames",
    "reference_frame",
    "sequence_clock",
    "sequence_frames",
    "sequence_tasks",
    "share_cores",
    "spec_layout",
    "spec_record",
    "survey_of",
    "task_layout",
]


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
    #: ``rosbag2``: how the sequence's bag is written.
    bag: BagOptions = field(default_factory=BagOptions)


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
    #: Of a run's sequence: the tasks that built it, and their CPU seconds (the build,
    #: the frame they scanned, and a worker process's start-up if it was its first).
    builds: int = 0
    build_cpu_s: float = 0.0
    #: The scanned frames at the layout's reference time (times and poses): the
    #: sequence's own files are written from them, not computed again.
    reference_frames: list[Frame] = field(default_factory=list)


def task_layout(task: SequenceTask) -> DatasetLayout:
    """The files of the task's dataset."""
    return DatasetLayout(task.layout, Path(task.out_dir), task.range_images, task.keyframe_every,
                         task.bag)  # fmt: skip


def spec_layout(spec: DatasetSpec, out: Path) -> DatasetLayout:
    """The files of the spec's dataset in ``out``."""
    return DatasetLayout(spec.layout, out, spec.range_images, spec.keyframe_every,
                         BagOptions.of(spec.rosbag2))  # fmt: skip


def share_cores(tasks: list[SequenceTask], processes: int) -> list[SequenceTask]:
    """The tasks, each with its share of the cores for one of ``processes`` workers on
    this machine (each would otherwise cast and compute on all of them)."""
    share = max(1, (os.cpu_count() or 1) // max(1, processes))
    return [dataclasses.replace(task, threads=share) for task in tasks]


def survey_of(task: SequenceTask, group: SequenceGroup, scanner: ScannerConfig) -> Survey:
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
class SequenceClock:
    """What a sequence's frame times and poses need (no scene): :meth:`Simulation.frames`
    and :func:`reference_frame` read only these."""

    survey: Survey
    pattern: ScanPattern
    trajectory: Trajectory

    @property
    def total_pulses(self) -> int:
        return self.pattern.pulses_for(self.survey.revolutions, self.survey.duration_s)

    def frames(self) -> list[Frame]:
        """The sequence's frames (reference: each one's first firing), as the worker's
        :meth:`Simulation.frames` gives them."""
        from ..pipeline.simulation import Simulation

        return Simulation.frames(self)  # type: ignore[arg-type]  # reads only the clock's


def sequence_clock(task: SequenceTask) -> SequenceClock:
    """The sequence's clock: its survey, scan pattern and trajectory, without building its
    scene (the same values as the worker's, from the same functions).

    Raises
    ------
    Exception
        Whatever the group's scanner or trajectory raise (a missing poses file).
    """
    from ..sensor.scanner import pattern_for
    from ..sensor.trajectory import trajectory_from_survey

    group = SequenceGroup.model_validate(task.group)
    base = Path(task.base_dir)
    scanner = load_scanner(group.scanner, group.scanner_overrides, base_dir=base)
    survey = survey_of(task, group, scanner)
    trajectory = trajectory_from_survey(survey.pose, survey.trajectory, survey.mount, base,
                                        "survey")  # fmt: skip
    return SequenceClock(survey, pattern_for(scanner), trajectory)


def sequence_frames(task: SequenceTask) -> list[Frame]:
    """The sequence's frames at the layout's reference times, without building its scene:
    what the sequence's own files hold (a worker gives the frames it scanned with its
    result, :attr:`SequenceResult.reference_frames`, so a run computes only the others).

    Raises
    ------
    Exception
        Whatever :func:`sequence_clock` raises.
    """
    clock = sequence_clock(task)
    return [reference_frame(clock, f, task.layout) for f in clock.frames()]


def reference_frame(sim: Simulation | SequenceClock, frame: Frame, layout: str) -> Frame:
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
    ``npz``, ``rosbag2``
        The frame's first firing (a bag's stamp, as the ``sequence`` command's).

    Parameters
    ----------
    sim : Simulation or SequenceClock
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


def sequence_tasks(
    spec: DatasetSpec, out_dir: Path, base_dir: Path, resume: bool
) -> list[SequenceTask]:
    """One task a sequence of the spec, counted over all groups in order, each with its
    seed (:func:`~simulator.constants.sequence_seed` of the root seed and its index)."""
    tasks, index = [], 0
    for group in spec.groups:
        for _ in range(group.sequences):
            tasks.append(SequenceTask(index, sequence_seed(spec.seed, index), group.model_dump(),
                                      spec.layout, spec.range_images, str(out_dir),
                                      str(base_dir), resume,
                                      keyframe_every=spec.keyframe_every,
                                      bag=BagOptions.of(spec.rosbag2)))  # fmt: skip
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


def spec_record(spec: DatasetSpec) -> dict[str, Any]:
    """The spec as ``manifest.json`` records it, in JSON's types (a ``rosbag2`` section
    only where the layout is ``rosbag2``)."""
    dump = spec.model_dump(exclude=None if spec.layout == "rosbag2" else {"rosbag2"})
    return json.loads(json.dumps(dump))


#: A group's keys that say how many samples it has, not what they hold: a resumed run may
#: change them (more sequences, longer ones).
_COUNT_KEYS = ("sequences", "frames")


def check_resumable(spec: DatasetSpec, spec_path: Path, out: Path) -> None:
    """Refuse to resume into ``out`` with a spec whose samples would differ from those a
    finished run left there (its ``manifest.json`` says with what they were made).

    A resumed run keeps the samples on disk, so they must be what ``spec`` makes: the same
    root seed and layout options, and each sequence both runs have from a group equal in
    everything but its counts (``sequences``, ``frames``), which may change (to extend a
    dataset). A folder without a manifest (a first run killed) is not checked.

    Raises
    ------
    ConfigError
        Naming the spec file and the first key that differs, with both values.
    """
    path = out / "manifest.json"
    if not path.is_file():
        return
    try:
        before = json.loads(path.read_text())["spec"]
        old_groups = [{k: v for k, v in g.items() if k not in _COUNT_KEYS}
                      for g in before["groups"] for _ in range(int(g["sequences"]))]  # fmt: skip
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ConfigError(path, "spec", f"unreadable ({exc!r}), so what the samples in {out} "
                          "were made with is unknown; expected the manifest a run wrote, "
                          "or run without --resume to replace them") from None  # fmt: skip
    now = spec_record(spec)

    def refuse(key: str, old: Any, new: Any) -> None:
        raise ConfigError(spec_path, key, f"{json.dumps(new)}, and the samples in {out} were "
                          f"made with {json.dumps(old)} ({path.name}); expected the spec they "
                          "were made with, or run without --resume to replace them")  # fmt: skip

    for key in sorted(set(now) | set(before)):
        if key != "groups" and now.get(key) != before.get(key):
            refuse(key, before.get(key), now.get(key))
    index = 0
    for g, group in enumerate(now["groups"]):
        for _ in range(group["sequences"]):
            if index >= len(old_groups):
                return
            old = old_groups[index]
            for key in sorted(set(group) | set(old)):
                if key not in _COUNT_KEYS and group.get(key) != old.get(key):
                    refuse(f"groups[{g}].{key}", old.get(key), group.get(key))
            index += 1


def frame_task(task: SequenceTask, frame: int) -> SequenceTask:
    """The task of one frame of ``task``'s sequence (its own files are then not written;
    a dispatched frame is never skipped as done). In a layout that writes a sequence
    whole (``rosbag2``: one bag), the task of every frame of the sequence: its one job
    (:func:`pending_frames`) names its first frame."""
    if task_layout(task).whole_sequences:
        frames = SequenceGroup.model_validate(task.group).frames
        return dataclasses.replace(task, frames=tuple(range(frames)), resume=False)
    return dataclasses.replace(task, frames=(frame,), resume=False)


def pending_frames(layout: DatasetLayout, frames: list[int]) -> list[int]:
    """The jobs of a sequence whose ``frames`` are still to do: one a frame, or, where the
    layout writes a sequence whole, one for the sequence (its first frame standing for it:
    :func:`frame_task`) if any is left."""
    return frames[:1] if layout.whole_sequences else frames
