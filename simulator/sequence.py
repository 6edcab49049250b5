"""Sequences: a survey written as frames, one per turn of the pattern, with ground-truth
poses."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import ConfigError
from .io.frames import open_frame_sink
from .io.pointcloud2 import BagOptions
from .io.poses import PoseStreams
from .pipeline.simulation import OutputFrame, ProgressCallback, Simulation

__all__ = ["SequenceSummary", "sequence_frame", "write_sequence"]


def write_sequence(
    sim: Simulation,
    out_dir: str | Path,
    fmt: str = "npz",
    *,
    compensate: bool = False,
    progress: ProgressCallback | None = None,
    bag: BagOptions | None = None,
) -> SequenceSummary:
    """Write a survey as a sequence of frames, one per revolution, with ground-truth poses.

    Frames are cut where the head completes a turn (every ``firings_per_revolution``
    firings, starting at the survey's start azimuth), so no pulse is lost or written
    twice; a last partial turn is a shorter last frame. A frame's reference time is its
    first firing. Files: ``frames/NNNNNN.EXT`` (with ``rosbag2``, one ROS 2 bag ``bag/``
    instead; :mod:`simulator.io.frames`), ``poses_tum.txt`` (``t x y z qx qy qz qw``)
    and ``poses_kitti.txt`` (3x4 row-major), both world from sensor at each frame's
    reference time, and ``times.txt``. Points are in the frame the survey's
    ``output.frame`` names (:func:`sequence_frame`): by default the sensor frame at their
    own firing time, distorted by the motion as a real sensor's are; with ``compensate``
    (or ``sensor_compensated``) the sensor frame at the frame's reference time; or the
    world frame. ``time_s`` is relative to the frame. ``bag``: how a ``rosbag2``
    sequence's bag is written (storage, point layout, frame id; default MCAP, ``lidar-sim``).
    """
    from .sensor.trajectory import quaternion_from_matrix

    out = Path(out_dir)
    frame_kind = sequence_frame(sim, fmt, compensate=compensate)
    poses = PoseStreams(out)
    try:
        sink = open_frame_sink(out, fmt, bag, sim.scanner.return_mode)
    except BaseException:
        poses.abort()
        raise
    total = sim.total_pulses
    summary = SequenceSummary(frames=sim.frame_count, pulses=total)
    started = time.perf_counter()
    # Nothing is kept per frame: frames are made one at a time, their poses go straight
    # to the pose files, and their files are counted (memory stays flat over an hour).
    try:
        for f in sim.iter_frames():
            q = quaternion_from_matrix(f.rotation)
            points, files = sink.write_frame(sim, f, q, frame_kind)
            summary.points += points
            summary.frame_files += len(files)
            poses.add(f.time_s, f.rotation, f.position_m, q)
            if progress is not None:
                progress(f.stop, total)
        summary.files += sink.close()
    except BaseException:
        sink.abort()
        poses.abort()
        raise
    summary.files += poses.close()
    summary.seconds = time.perf_counter() - started
    return summary


def sequence_frame(sim: Simulation, fmt: str, *, compensate: bool = False) -> OutputFrame:
    """The frame a sequence's points are written in: the survey's ``output.frame``, or
    ``sensor_compensated`` when ``compensate`` asks for it.

    Raises
    ------
    ConfigError
        Naming the survey's ``output.frame``, if ``compensate`` contradicts it (``world``),
        or the format cannot say the frame (a ROS 2 bag's clouds are in the sensor frame,
        its poses on ``/tf``).
    """
    frame: OutputFrame = sim.survey.output.frame
    if compensate and frame == "world":
        raise ConfigError(
            sim.source,
            "output.frame",
            "world contradicts --compensate (points in the sensor frame at each frame's "
            "start); give one of them",
        )
    if compensate:
        frame = "sensor_compensated"
    if fmt == "rosbag2" and frame == "world":
        raise ConfigError(
            sim.source,
            "output.frame",
            "a rosbag2 sequence holds sensor-frame clouds and the poses on /tf; world is "
            "not supported there (use sensor, or another --format)",
        )
    return frame


@dataclass
class SequenceSummary:
    """What :func:`write_sequence` wrote.

    Attributes
    ----------
    frames, pulses, points : int
        Frames, pulses fired and points written.
    seconds : float
        Wall time of the scan and the writing.
    frame_files : int
        Files written under ``frames/`` (one a frame; two for ``bin``: ``.bin`` and
        ``.label``), counted, not listed: a long sequence keeps no list of them.
    files : list of Path
        The other files: the pose files and ``times.txt`` (and the bag, for ``rosbag2``).
    """

    frames: int
    pulses: int
    points: int = 0
    seconds: float = 0.0
    frame_files: int = 0
    files: list[Path] = field(default_factory=list)
