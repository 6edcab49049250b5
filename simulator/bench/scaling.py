"""``lidar-sim bench --sequence`` and ``--dataset-workers``: the frames a second of a moving
sequence on the benchmark scene, and a dataset spec run with one and more local workers
and on a Dask cluster (the scaling, and whether the files stay bit-identical)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..config import Survey, TrajectorySpec, load_scanner
from ..pipeline.simulation import Simulation
from .machine import busy_seconds, cpu_seconds
from .scene import build_bench_scene

__all__ = [
    "format_dataset_scaling",
    "format_sequence",
    "preset_cpu_per_frame",
    "run_dataset_scaling",
    "run_sequence_bench",
]


def run_sequence_bench(revolutions: float = 20.0, scene_scale: float = 1.0) -> dict[str, Any]:
    """``lidar-sim sequence`` on the benchmark scene with the sensor driving at 5 m/s:
    frames (one a revolution, KITTI ``.bin`` + labels + poses) per second of wall time.

    Times :func:`~simulator.sequence.write_sequence` alone, after the scene, the ray
    engine and a warm-up; the frames go to a temporary folder.
    """
    from ..sequence import write_sequence

    scene = build_bench_scene(0, scene_scale)
    motion = {"start": {"position_m": [-10.0, 0.0, 1.8]}, "velocity_mps": [5.0, 0.0, 0.0]}
    survey = Survey(
        scanner="rs-helios-5515",
        scene="(in memory)",
        trajectory=TrajectorySpec.model_validate(motion),
        revolutions=revolutions,
    )
    sim = Simulation(
        survey=survey, scanner=load_scanner("rs-helios-5515"), scene=scene, base_dir=Path(".")
    )
    sim.warm_up([Path("x.bin")])
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = write_sequence(sim, Path(tmp) / "seq", "bin")
        seconds = time.perf_counter() - t0
        mib = sum(p.stat().st_size for p in (Path(tmp) / "seq").rglob("*") if p.is_file())
        mib /= 2**20
    frame_s = sim.pattern.frame_pulses / sim.pattern.pulses_per_second
    return {
        "frames": summary.frames,
        "points": summary.points,
        "pulses": summary.pulses,
        "seconds": seconds,
        "frames_per_s": summary.frames / seconds,
        "real_time_factor": summary.frames * frame_s / seconds,
        "pulses_per_s": summary.pulses / seconds,
        "output_mib": mib,
    }


def format_sequence(f: dict[str, Any]) -> str:
    """Lines of :func:`run_sequence_bench`'s figures."""
    return (
        f"sequence (KITTI bin, moving at 5 m/s): {f['frames']} frames, {f['points']:,} points "
        f"in {f['seconds']:.2f} s = {f['frames_per_s']:.1f} frames/s "
        f"({f['real_time_factor']:.1f} x real time, {f['pulses_per_s'] / 1e6:.2f} M pulses/s, "
        f"{f['output_mib']:.1f} MiB)"
    )


def run_dataset_scaling(
    spec: str | Path, workers: tuple[int, ...] = (1, 2), cluster_workers: int = 0
) -> dict[str, Any]:
    """``lidar-sim dataset`` of ``spec`` with each number of local worker processes, and
    (``cluster_workers`` > 0) on a Dask LocalCluster of that many workers, one after the
    other in this process: wall and CPU seconds of the whole process (a worker's start-up
    included), frames per second, the CPU seconds a frame of each scanner preset takes
    (building its sequence included), and whether the files are bit-identical to the
    first's.

    CPU seconds are what to trust on a busy machine (they show work added, e.g. a scene
    built twice); the wall clock shows the scaling only on idle cores, so each run records
    the load average it started at."""
    from ..datasets import run_dataset

    runs: list[dict[str, Any]] = []
    reference: dict[str, bytes] | None = None
    modes: list[tuple[int, str | None]] = [(n, None) for n in workers]
    if cluster_workers:
        modes.append((cluster_workers, f"local:{cluster_workers}"))
    with tempfile.TemporaryDirectory() as tmp:
        for n, scheduler in modes:
            out = Path(tmp) / f"w{n}{'-dask' if scheduler else ''}"
            load = os.getloadavg()[0]
            cpu0, busy0 = cpu_seconds(), busy_seconds()
            t0 = time.perf_counter()
            if scheduler is None:  # a fresh process each, as `lidar-sim dataset` runs
                _dataset_process(spec, out, n)  # (its workers fork before any kernel ran)
                manifest = json.loads((out / "manifest.json").read_text())
            else:
                manifest = run_dataset(spec, out, workers=n, scheduler=scheduler)
            seconds = time.perf_counter() - t0
            cpu_s = cpu_seconds() - cpu0
            busy1 = busy_seconds()
            # others_cpu_s: what the rest of the machine used meanwhile (None: unknown)
            others = None if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - cpu_s)
            files = {
                str(p.relative_to(out)): p.read_bytes()
                for p in sorted(out.rglob("*"))
                if p.is_file() and p.name != "manifest.json"
            }
            reference = files if reference is None else reference
            # cpu_s: this process's and its ended children's CPU seconds (all the work,
            # start-ups included; on a loaded machine the wall clock shows only its share)
            # run_s: the run's own seconds (the manifest's, from the spec read to the
            # last file; without the interpreter's start-up)
            # worker_cpu_s: the busiest worker's CPU seconds, building and scanning (what
            # bounds the run on idle cores, whatever else the machine runs)
            # frames_cpu_s: the CPU seconds of the frames (builds included), the rest of
            # cpu_s being start-up and hand-out
            busiest = max((w.get("cpu_s", 0.0) for w in manifest["workers"].values()), default=0)
            run = {"workers": n, "seconds": seconds, "run_s": manifest["seconds"],
                   "worker_cpu_s": busiest, "load": load, "others_cpu_s": others,
                   "frames": manifest["frames"], "frames_per_s": manifest["frames"] / seconds,
                   "cpu_s": cpu_s, "frames_cpu_s": sum(s.get("cpu_s", 0.0)
                                                       for s in manifest["sequences"]),
                   "builds": sum(w.get("builds", 0) for w in manifest["workers"].values()),
                   "cpu_s_per_frame": preset_cpu_per_frame(manifest),
                   "identical_to_first": files == reference}  # fmt: skip
            if scheduler is None:
                runs.append(run)
            else:
                # (in this process, whose imports are made: its fair measure is the
                # one-worker run's own seconds, not that process's whole)
                cluster = {**run, "scheduler": scheduler,
                           "speedup": runs[0]["seconds"] / seconds,
                           "run_speedup": runs[0]["run_s"] / manifest["seconds"]}  # fmt: skip
    figures = {"spec": str(spec), "cores": os.cpu_count(), "runs": runs,
               "speedup": runs[0]["seconds"] / runs[-1]["seconds"],
               "run_speedup": runs[0]["run_s"] / runs[-1]["run_s"],
               "cpu_ratio": runs[-1]["cpu_s"] / max(runs[0]["cpu_s"], 1e-9),
               "cpu_speedup": runs[0]["worker_cpu_s"] / max(runs[-1]["worker_cpu_s"], 1e-9),
               }  # fmt: skip
    if cluster_workers:
        figures["cluster"] = cluster
    return figures


def preset_cpu_per_frame(manifest: dict[str, Any]) -> dict[str, dict[str, float]]:
    """CPU seconds of each scanner preset (or scanner file) of a dataset's manifest:
    ``frame``, a frame scanned by a worker that held its sequence (the mean over the
    frames that built nothing); ``build``, what building a sequence added to its first
    frame (a worker process's own start-up too, for its first sequence); ``per_frame``,
    its sequences' CPU seconds over their frames written, builds included."""
    scanners = [g["scanner"] for g in manifest["spec"]["groups"] for _ in range(g["sequences"])]
    sums: dict[str, list[float]] = {}
    for s in manifest["sequences"]:
        if s["frames_written"]:
            into = sums.setdefault(str(scanners[s["index"]]), [0.0] * 4)
            into[0] += s.get("cpu_s", 0.0)
            into[1] += s["frames_written"]
            into[2] += s.get("build_cpu_s", 0.0)
            into[3] += s.get("builds", 0)
    out = {}
    for name, (cpu_s, frames, build_cpu_s, builds) in sorted(sums.items()):
        plain = frames - builds
        frame = (cpu_s - build_cpu_s) / plain if plain else float("nan")
        build = build_cpu_s / builds - frame if builds and plain else float("nan")
        out[name] = {"frame": frame, "build": build, "per_frame": cpu_s / frames}
    return out


def _dataset_process(spec: str | Path, out: Path, workers: int) -> None:
    """``lidar-sim dataset SPEC -o OUT --workers N`` in a new Python process."""
    command = [sys.executable, "-m", "simulator.cli", "dataset", str(spec), "-o", str(out),
               "--workers", str(workers), "--quiet"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")


def format_dataset_scaling(f: dict[str, Any]) -> str:
    """Lines of :func:`run_dataset_scaling`'s figures."""
    lines = [f"dataset {f['spec']} on {f['cores']} cores (whole `lidar-sim dataset` processes)"]
    for r in f["runs"]:
        same = "identical files" if r["identical_to_first"] else "FILES DIFFER"
        lines.append(
            f"  {r['workers']} worker(s): {r['frames']} frames in {r['seconds']:.2f} s wall, "
            f"{r['cpu_s']:.2f} CPU s ({r['frames_cpu_s']:.2f} in the frames, "
            f"{r['cpu_s'] - r['frames_cpu_s']:.2f} start-up and hand-out), {r['builds']} "
            f"builds, busiest worker {r['worker_cpu_s']:.2f} CPU s, run {r['run_s']:.2f} s, "
            f"load {r['load']:.2f} at start, {_others(r)}, {same}"
        )
    first, last = f["runs"][0], f["runs"][-1]
    lines.append(
        f"  {last['workers']} workers against 1: wall {f['speedup']:.2f} x faster (the run "
        f"alone {f['run_speedup']:.2f} x), CPU {f['cpu_ratio']:.2f} x as much "
        f"({last['cpu_s'] - first['cpu_s']:+.2f} CPU s), busiest worker's CPU "
        f"{f['cpu_speedup']:.2f} x less"
    )
    if any(_busy(r) for r in f["runs"]):
        lines.append("  (the machine was busy: the wall figures hold only on idle cores)")
    lines.append("  CPU s of each preset (one worker): a frame; a build (a process's start-up "
                 "in its first); a frame with the builds")  # fmt: skip
    for name, c in first["cpu_s_per_frame"].items():
        lines.append(f"    {name}: {c['frame']:.3f}; {c['build']:.2f}; {c['per_frame']:.3f}")
    if "cluster" in f:
        c = f["cluster"]
        same = "identical files" if c["identical_to_first"] else "FILES DIFFER"
        lines.append(
            f"  Dask cluster of {c['workers']} ({c['scheduler']}): {c['frames']} frames in "
            f"{c['seconds']:.2f} s in this process ({c['frames_per_s']:.2f} frames/s, "
            f"{same}), speed-up {c['run_speedup']:.2f} x on one worker's run "
            f"({c['speedup']:.2f} x on its whole process)"
        )
    return "\n".join(lines)


def _others(run: dict[str, Any]) -> str:
    """What the rest of the machine used during a run, in words."""
    others = run.get("others_cpu_s")
    return "others' CPU unknown" if others is None else f"others used {others:.2f} CPU s"


def _busy(run: dict[str, Any]) -> bool:
    """Whether the rest of the machine took more than 5 % of one core during the run (by
    the load at its start where that is unknown)."""
    others = run.get("others_cpu_s")
    return run["load"] > 0.5 if others is None else others > 0.05 * run["seconds"]
