"""One worker's builds and scans: a sequence built once (its scene, ray-casting structure
and simulation; :func:`prepared`, kept by the content that determines it) and reused across
the frames the worker runs, each frame scanned, boxed and written as its layout's sample
(:func:`run_sequence`), and a whole sequence's own files.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..beam import BeamOptics
from ..config import SceneSpec, SequenceGroup, load_materials, load_scanner, load_scene_spec
from ..generators import GENERATORS
from ..io.atomic import no_space
from ..io.kitti_object import CAMERA_IN_VELO_M
from ..io.layouts import DatasetLayout, Sample, SampleSink
from ..io.nuscenes import SamplePose
from ..labels import count_labels
from ..transforms import rotation_from_rpy_deg
from ..world.boxes import headings_from_spec, object_boxes, objects_at_time, visibility_from
from .tasks import (
    SampleError,
    SequenceResult,
    SequenceTask,
    reference_frame,
    survey_of,
    task_layout,
)

if TYPE_CHECKING:
    from ..config import ScannerConfig
    from ..pipeline.simulation import Frame, Simulation
    from ..world.scene import Scene

__all__ = [
    "CACHE_ENTRIES",
    "Prepared",
    "build_sequence",
    "cached_sequences",
    "clear_cache",
    "content_key",
    "file_stamps",
    "prepared",
    "run_sequence",
    "worker_name",
    "write_frame",
    "write_sequence_files",
]

#: Sequences a worker keeps built at once (the one it runs and one it took frames of).
CACHE_ENTRIES = 2


@dataclass
class Prepared:
    """A sequence made ready to scan, kept by a worker across the frames it runs."""

    sim: Simulation
    scene: Scene
    scanner: ScannerConfig
    group: SequenceGroup
    headings: dict[int, float]
    window: tuple[float, float] | None
    #: The sequence's frames (reference: each one's first firing).
    frames: list[Frame]
    #: The dataset's layout (its frames' reference times).
    layout: str
    #: The frames asked for so far at the layout's reference time, by index.
    at_reference: dict[int, Frame] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reference(self, k: int) -> Frame:
        """Frame ``k`` at the layout's reference time (:func:`reference_frame`), computed
        when first asked: a worker computes only the frames it scans."""
        if k not in self.at_reference:
            self.at_reference[k] = reference_frame(self.sim, self.frames[k], self.layout)
        return self.at_reference[k]


#: The worker's built sequences by content key, the most recently used last.
_CACHE: OrderedDict[str, Prepared | BaseException] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_BUILDING: dict[str, threading.Lock] = {}


def file_stamps(values: Iterable[Any], base: Path, depth: int = 0) -> list[list[Any]]:
    """(path, size, mtime) of every string among ``values`` (nested) that names a file
    under ``base``, and of the files a scene YAML among them names in turn."""
    stamps: list[list[Any]] = []
    for v in values:
        if isinstance(v, dict):
            stamps += file_stamps(v.values(), base, depth)
        elif isinstance(v, list):
            stamps += file_stamps(v, base, depth)
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
                stamps += file_stamps([inner], path.parent, depth + 1)
    return stamps


def content_key(task: SequenceTask) -> str:
    """What a sequence's build depends on: its seed, group, base folder, the layout (its
    reference times) and the size and time of every file the group names (and a scene
    file's own meshes and part mappings), so an edited file is built again."""
    base = Path(task.base_dir)
    return json.dumps([task.seed, task.group, task.base_dir, task.layout,
                       file_stamps([task.group], base)], sort_keys=True, default=str)  # fmt: skip


def build_sequence(task: SequenceTask) -> Prepared:
    """The task's sequence made ready to scan: its scene (generated from its seed, or its
    scene file), scanner, simulation, the parked objects' headings, the scanner's
    vertical window and the frames (each put at the layout's reference time when it is
    scanned: :meth:`Prepared.reference`)."""
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
    sim = Simulation(survey=survey_of(task, group, scanner), scanner=scanner, scene=scene,
                     base_dir=base)  # fmt: skip
    window = None  # the scanner's vertical field of view: what its beams can see at all
    if scanner.channels is not None:
        el = np.radians(np.asarray(scanner.channels.elevation_deg, dtype=np.float64))
        half_beam = BeamOptics.of(scanner).half_angle_v_rad
        window = (float(el.min()) - half_beam, float(el.max()) + half_beam)
    return Prepared(sim, scene, scanner, group, headings, window, sim.frames(), task.layout)


def prepared(task: SequenceTask) -> tuple[Prepared, float]:
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
                hit = build_sequence(task)
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


def cached_sequences() -> int:
    """How many sequences (or their builds' errors) this process keeps built now."""
    with _CACHE_LOCK:
        return len(_CACHE)


def worker_name() -> str:
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
    result = SequenceResult(task.index, task.seed, worker=worker_name())
    group = SequenceGroup.model_validate(task.group)
    wanted = range(group.frames) if task.frames is None else task.frames
    layout = task_layout(task)
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
        _write_frames(task, layout, prep, wanted, result)
        whole = [prep.reference(k) for k in range(len(prep.frames))] if task.frames is None else []
    result.scan_s = time.perf_counter() - started
    result.cpu_s = time.process_time() - cpu0
    if task.frames is None:
        write_sequence_files(layout, task.index, whole)
    return result


def _write_frames(
    task: SequenceTask,
    layout: DatasetLayout,
    prep: Prepared,
    wanted: Sequence[int],
    result: SequenceResult,
) -> None:
    """Scan and write the ``wanted`` frames of the task's sequence into the layout's
    sample sink, adding each to ``result``: a frame that fails is reported and the others
    go on, except where the layout writes the sequence whole (a bag), which the failure
    drops with every frame of it. A full disk stops the run (raised)."""
    sink = layout.open_samples(task.index, prep.scanner.return_mode)
    try:
        for k in wanted:
            try:
                frame = prep.reference(k)
                result.reference_frames.append(frame)
                cloud = write_frame(task, sink, layout, prep, frame)
            except Exception as exc:
                if no_space(exc):  # every later sample would fail alike: stop the run
                    raise
                result.errors.append(SampleError(task.index, k, task.seed, _told(exc)))
                if layout.whole_sequences:  # the sequence's one file is lost with it
                    break
                continue
            result.frames_written += 1
            result.samples.append((task.index, k))
            result.points += len(cloud)
            count_labels(cloud["label"], into=result.label_counts)
    except BaseException:
        sink.abort()
        raise
    failed = result.errors[0] if result.errors and layout.whole_sequences else None
    if failed is None:
        try:
            sink.close()
        except Exception as exc:  # (a bag that cannot be finished)
            if no_space(exc):
                raise
            failed = SampleError(task.index, wanted[-1], task.seed, _told(exc))
    if failed is not None:  # a sequence written whole lost a frame: none is kept
        sink.abort()
        _drop_whole(result, wanted, failed)


def _told(exc: BaseException) -> str:
    """An error as a sample's one line (its type and message)."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def _drop_whole(result: SequenceResult, wanted: Iterable[int], first: SampleError) -> None:
    """A sequence written whole (a bag) that failed at ``first``: none of its frames is
    on disk, so every one is an error (``first``'s own, the others naming it)."""
    because = f"not written: frame {first.frame} failed, and the sequence's bag with it"
    result.errors = [first if k == first.frame else SampleError(result.index, k, result.seed,
                                                                because)
                     for k in wanted]  # fmt: skip
    result.frames_written, result.points, result.samples = 0, 0, []
    result.label_counts = {}


def write_frame(
    task: SequenceTask, sink: SampleSink, layout: DatasetLayout, prep: Prepared, f: Frame
) -> Any:
    """Scan one frame, make its boxes (where the layout keeps them) and write its sample
    to ``sink``; return its cloud."""
    sim, scanner, group = prep.sim, prep.scanner, prep.group
    compensated = (
        layout.compensates if group.motion_compensated is None else group.motion_compensated
    )
    cloud = sim.frame_cloud(f, "sensor_compensated" if compensated else None)
    fired_s = f.time_s + cloud["time_s"]
    pose = (f.rotation, f.position_m)
    if compensated:  # the objects' own motion too: every point where it is at f.time_s
        cloud.fields["xyz"] = objects_at_time(prep.scene, cloud["xyz"], cloud["instance"],
                                              fired_s, f.time_s, pose)  # fmt: skip
    # Compensated points: every box at the reference time; raw sweeps: each box where its
    # object was scanned, in the sensor frame then (object_boxes).
    boxes = None if not layout.keeps_boxes else object_boxes(
        prep.scene, f.time_s, pose, xyz_m=cloud["xyz"], point_instance=cloud["instance"],
        engine=sim.engine, range_max_m=scanner.range_max_m, headings_rad=prep.headings,
        elevation_window_rad=prep.window, point_time_s=None if compensated else fired_s,
        sensor_pose_at=None if compensated else sim.trajectory.pose_at,
    )  # fmt: skip
    mount_rotation = rotation_from_rpy_deg(group.mount.rotation_deg)
    mount_m = np.asarray(group.mount.position_m, dtype=np.float64)
    pose = SamplePose(f.time_s, f.rotation, f.position_m, mount_rotation, mount_m)
    seen = None
    if layout.name == "kitti":  # occlusion from the virtual camera
        camera_m = f.rotation @ CAMERA_IN_VELO_M + f.position_m
        seen = visibility_from(prep.scene, boxes, f.time_s, camera_m, sim.engine)
    sink.write(Sample(task.index, f.index, cloud, scanner.intensity_max, boxes, pose, seen))
    return cloud


def write_sequence_files(layout: DatasetLayout, index: int, frames: list[Frame]) -> None:
    """The files of sequence ``index`` as a whole (its poses and times) from its frames."""
    layout.write_sequence_files(index, [f.time_s for f in frames],
                                [f.rotation for f in frames],
                                [f.position_m for f in frames])  # fmt: skip
