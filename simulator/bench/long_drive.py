"""``lidar-sim bench --long-drive 100,1000,10000``: the memory of a long drive.

A VLP-16 drives up and down generated street 0 at 8 m/s (its ego lane out, the other lane
back, a three-second U-turn at each end, so that any number of frames stays on the
street) and :func:`~simulator.sequence.write_sequence` writes the frames as KITTI
``.bin`` + ``.label``, one a revolution, as ``lidar-sim sequence --format bin`` does. When
the drive passes each frame count asked for, the process's peak resident set
(``ru_maxrss``), its resident set then and the CPU seconds so far are taken. A sequence
whose memory does not grow with its length shows the same figures at 100 frames and at
10,000, and a growth per 1,000 frames near zero.

Each frame's files are removed once the frame is complete (an hour of VLP-16 frames is
about 19 GB; what is measured is the writer's memory, not the disk).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import (
    GeneratorRef,
    Pose,
    SceneSpec,
    Survey,
    TrajectorySpec,
    load_materials,
    load_scanner,
)
from ..errors import ConfigError
from ..pipeline.simulation import Simulation
from ..world.scene import build_scene
from .machine import cpu_seconds, peak_rss_mib, rss_mib

__all__ = [
    "LongDrive",
    "drive_waypoints",
    "format_long_drive",
    "long_drive_text",
    "run_long_drive",
]


@dataclass(frozen=True)
class LongDrive:
    """What :func:`run_long_drive` drives.

    Attributes
    ----------
    frames : tuple of int
        The frame counts at which memory is taken; the drive lasts the largest.
    scanner : str
        A scanner preset (a spinning pattern; one frame a revolution).
    speed_mps : float
        Driving speed, m/s.
    half_length_m : float
        The drive turns at x = +-``half_length_m`` (the street is 220 m long).
    lane_y_m : float
        The lanes' centres are at y = -``lane_y_m`` (out) and +``lane_y_m`` (back).
    mount_height_m : float
        The sensor above the road, m.
    seed : int
        The street generator's seed.
    """

    frames: tuple[int, ...] = (100, 1000, 10000)
    scanner: str = "vlp-16"
    speed_mps: float = 8.0
    half_length_m: float = 90.0
    lane_y_m: float = 1.6
    mount_height_m: float = 1.73
    seed: int = 0


def drive_waypoints(drive: LongDrive, duration_s: float) -> list[dict[str, Any]]:
    """Waypoints of the drive up and down the street for at least ``duration_s``.

    Each leg runs the street's length in one lane at ``speed_mps``; each U-turn takes
    three seconds through a waypoint at the lanes' middle, 3 m beyond the leg's end,
    heading across the street (the yaw turns 90 degrees a half-turn, so slerp turns it
    the way the vehicle does).

    Returns
    -------
    list of dict
        ``{time_s, position_m, rotation_deg}`` mappings (a ``trajectory: waypoints:``).
    """
    x, y = drive.half_length_m, drive.lane_y_m
    leg_s, turn_s = 2.0 * x / drive.speed_mps, 3.0
    out: list[dict[str, Any]] = []
    t, yaw, leg = 0.0, 0.0, 0
    while True:
        sign = 1.0 if leg % 2 == 0 else -1.0  # +x out in the right lane, -x back
        out.append({"time_s": t, "position_m": [-sign * x, -sign * y, 0.0],
                    "rotation_deg": [0.0, 0.0, yaw]})  # fmt: skip
        t += leg_s
        out.append({"time_s": t, "position_m": [sign * x, -sign * y, 0.0],
                    "rotation_deg": [0.0, 0.0, yaw]})  # fmt: skip
        if t >= duration_s:
            return out
        out.append({"time_s": t + turn_s / 2, "position_m": [sign * (x + 3.0), 0.0, 0.0],
                    "rotation_deg": [0.0, 0.0, yaw + 90.0]})  # fmt: skip
        t, yaw, leg = t + turn_s, yaw + 180.0, leg + 1


def run_long_drive(
    drive: LongDrive | None = None, say: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Drive ``max(drive.frames)`` frames and take the memory at each of ``drive.frames``
    (each mark also handed to ``say`` as a line, when given, as it is taken).

    The scene, the ray engine and a warm-up (:meth:`~simulator.pipeline.Simulation.warm_up`)
    come first; then one :func:`~simulator.sequence.write_sequence` in ``bin`` into a
    temporary folder.

    Returns
    -------
    dict
        ``marks``: one ``{frames, peak_rss_mib, rss_mib, cpu_s, wall_s}`` per count (CPU
        and wall seconds from the sequence's start); ``growth_mib_per_1000_frames`` (the
        resident set's, from the first count to the last), ``rss_before_mib`` (after the
        warm-up), ``points``, ``scanner``, ``frames``.
    """
    from ..sequence import write_sequence

    drive = drive or LongDrive()
    counts = sorted(set(drive.frames))
    scanner = load_scanner(drive.scanner)
    frame_s = 1.0 / abs(scanner.rotation_hz)
    waypoints = drive_waypoints(drive, counts[-1] * frame_s + 1.0)
    spec = SceneSpec(generator=GeneratorRef(name="street", seed=drive.seed))
    scene = build_scene(spec, Path("."), load_materials(), source="street")
    survey = Survey(
        scanner=drive.scanner,
        scene="(in memory)",
        trajectory=TrajectorySpec.model_validate({"waypoints": waypoints}),
        mount=Pose(position_m=[0.0, 0.0, drive.mount_height_m]),
        revolutions=counts[-1],
    )
    sim = Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path("."))
    sim.warm_up()
    per_frame = sim.pattern.frame_pulses
    marks: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        frames_dir = Path(tmp) / "seq" / "frames"
        cpu0, wall0 = cpu_seconds(), time.perf_counter()
        rss0 = rss_mib()

        def after_frame(done: int, _total: int) -> None:
            for entry in os.scandir(frames_dir):  # the frame is complete: drop its files
                os.unlink(entry.path)
            frames = -(-done // per_frame)
            if frames in counts and all(m["frames"] != frames for m in marks):
                marks.append({"frames": frames, "peak_rss_mib": round(peak_rss_mib(), 1),
                              "rss_mib": round(rss_mib(), 1),
                              "cpu_s": round(cpu_seconds() - cpu0, 1),
                              "wall_s": round(time.perf_counter() - wall0, 1)})  # fmt: skip
                if say is not None:
                    say(_mark_line(marks[-1]))

        summary = write_sequence(sim, Path(tmp) / "seq", "bin", progress=after_frame)
    first, last = marks[0], marks[-1]
    span = max(last["frames"] - first["frames"], 1)
    return {
        "scanner": drive.scanner,
        "frames": summary.frames,
        "points": summary.points,
        "rss_before_mib": round(rss0, 1),
        "marks": marks,
        "growth_mib_per_1000_frames": round(
            1000.0 * (last["rss_mib"] - first["rss_mib"]) / span, 2
        ),
    }


def format_long_drive(f: dict[str, Any]) -> str:
    """Lines of :func:`run_long_drive`'s figures."""
    lines = [
        f"long drive: {f['scanner']} up and down street 0 at 8 m/s, {f['frames']:,} frames "
        f"(KITTI bin), {f['points']:,} points; resident {f['rss_before_mib']:.0f} MiB "
        "after the warm-up"
    ]
    lines += [_mark_line(m) for m in f["marks"]]
    lines.append(
        f"  resident set growth {f['growth_mib_per_1000_frames']:+.2f} MiB per 1,000 frames"
    )
    return "\n".join(lines)


def _mark_line(m: dict[str, Any]) -> str:
    return (
        f"  {m['frames']:>6,} frames: peak {m['peak_rss_mib']:.0f} MiB, resident "
        f"{m['rss_mib']:.0f} MiB ({m['cpu_s']:.0f} CPU s, {m['wall_s']:.0f} s wall)"
    )


def long_drive_text(
    frames: str, *, as_json: bool = False, say: Callable[[str], None] | None = None
) -> str:
    """What ``lidar-sim bench --long-drive FRAMES`` prints: :func:`run_long_drive` to the
    comma-separated frame counts of ``frames`` (e.g. ``"100,1000,10000"``), as text or JSON.

    Raises
    ------
    ConfigError
        Naming ``--long-drive``, if ``frames`` is not a list of positive whole numbers.
    """
    try:
        counts = tuple(int(v) for v in frames.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise ConfigError("--long-drive", frames, "expected frame counts, e.g. 100,1000,10000")
    figures = run_long_drive(LongDrive(frames=counts), say)
    return json.dumps(figures, indent=2) if as_json else format_long_drive(figures)
