"""Benchmark: the pipeline against the bare ray cast of the same rays, on a 1 M-triangle scene.

The scene is generated in memory from a seed (the same scene every run): rolling
ground, buildings with subdivided facades, and trees and bushes whose crowns are
finely tessellated, jittered spheres (vegetation-like clutter). The Helios-5515 scans
it from the middle of the site.

Figures printed (from one run):

- pipeline pulses per second in steady state (the first chunk, which builds Open3D's
  acceleration structure, is left out) and the real-time factor (over the sensor's
  pulses per second);
- the time of the bare ray cast of the same rays, and the pipeline-to-cast ratio;
- the per-stage breakdown (schedule, cast, physics, output);
- peak memory (the process's maximum resident set);
- scene generation and acceleration-structure build times.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import trimesh

from ..backend import NumpyBackend, select_backend
from ..config import (
    GeneratorRef,
    Pose,
    SceneSpec,
    Survey,
    TrajectorySpec,
    Weather,
    load_materials,
    load_scanner,
)
from ..pipeline.simulation import Simulation, Window
from ..world.scene import Scene, build_scene
from .scene import build_bench_scene, rolling_ground

__all__ = ["BenchOptions", "BenchResult", "bench_text", "format_result", "run_bench"]


@dataclass
class BenchResult:
    """Figures of one benchmark run (times in s, rates in pulses/s, memory in MiB)."""

    figures: dict[str, Any]

    def to_json(self) -> str:
        """The figures as JSON."""
        return json.dumps(self.figures, indent=2)


def _cpu_name() -> str:
    """The processor's model name (Linux), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{platform.machine()} {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _trimesh_embree_rays_per_s(scene: Scene, rays: np.ndarray) -> dict[str, float] | None:
    """Rays per second of trimesh's Embree (embreex) intersector on the same rays.

    ``first``: ``intersects_first`` (triangle index only, its fastest call);
    ``location``: ``intersects_location`` (hit points, what a simulator needs).
    """
    try:
        from trimesh.ray.ray_pyembree import RayMeshIntersector
    except ImportError:
        return None
    offsets = np.cumsum([0] + [len(o.vertices_m) for o in scene.objects[:-1]])
    mesh = trimesh.Trimesh(
        np.concatenate([o.vertices_m for o in scene.objects]),
        np.concatenate([o.faces + k for o, k in zip(scene.objects, offsets, strict=True)]),
        process=False,
    )
    intersector = RayMeshIntersector(mesh)
    origins = rays[:, :3].astype(np.float64)
    directions = rays[:, 3:].astype(np.float64)
    intersector.intersects_first(origins[:10], directions[:10])
    t0 = time.perf_counter()
    intersector.intersects_first(origins, directions)
    t1 = time.perf_counter()
    intersector.intersects_location(origins, directions, multiple_hits=False)
    t2 = time.perf_counter()
    return {"first": len(rays) / (t1 - t0), "location": len(rays) / (t2 - t1)}


def _bare_cast_s(sim: Simulation, total: int) -> tuple[float, np.ndarray | None]:
    """Seconds inside Open3D's ``cast_rays`` alone for the survey's rays, chunk by chunk
    (the rays are made untimed, and each is cast once, as in the pipeline: casting a
    chunk twice would time the second cast with the first one's caches warm), and the
    first chunk's rays."""
    seconds, first = 0.0, None
    for start, stop in sim.chunk_spans(Window(0, total)):
        # Every sub-ray of every pulse, also when sampling is adaptive: what full
        # footprint sampling would have to cast.
        rays = sim.aim(start, stop, footprints=sim.beam.samples > 1).cast
        first = rays if first is None else first
        t0 = time.perf_counter()
        sim.engine.cast_bare(rays)
        seconds += time.perf_counter() - t0
    return seconds, first


@dataclass(frozen=True)
class BenchOptions:
    """What :func:`run_bench` is asked for.

    Attributes
    ----------
    revolutions : float
        Survey length at 10 Hz (ignored when ``duration_s`` is given).
    duration_s : float or None
        Survey length in seconds of sensor time.
    output_format : str
        Extension of the file the pipeline writes (into a temporary folder), or
        ``"none"`` to skip writing.
    chunk_pulses : int
        Pulses per chunk.
    seed : int
        Scene layout seed.
    scene_scale : float
        See :func:`build_bench_scene`.
    compare_trimesh : bool
        Also cast the first chunk's rays with trimesh + embreex (if installed).
    use_fast : bool
        Use the numba kernels (``False``: the numpy specification).
    beam_samples : int
        Sub-rays per pulse (the bare cast then casts all of them).
    beam_sampling : {"full", "adaptive"}
        How footprints are sampled (the scanner's ``beam_sampling``).
    moving : bool
        Drive the sensor at 5 m/s (a pose per pulse) instead of a static pose.
    bare_script : bool
        Also run ``python -m simulator.bench.bare`` (a plain cast-keep-save script on the same
        rays, in a process of its own) when the source tree has it, and compare per
        revolution.
    weather : dict or None
        A ``weather:`` section (e.g. ``{"fog": {"visibility_m": 50}}``); None: clear.
    scene_name : str
        ``bench`` (the ~1 M-triangle scene) or a generator (``street``, ``farm_yard``,
        with ``seed``); in a generated scene the sensor stands, or drives, in the ego lane
        at y = -1.6 m and the bare script is not run.
    """

    revolutions: float = 50.0
    duration_s: float | None = None
    output_format: str = "npz"
    chunk_pulses: int = 2**18
    seed: int = 0
    scene_scale: float = 1.0
    compare_trimesh: bool = False
    use_fast: bool = True
    beam_samples: int = 1
    beam_sampling: str = "full"
    moving: bool = False
    bare_script: bool = False
    weather: dict[str, Any] | None = None
    scene_name: str = "bench"


def run_bench(options: BenchOptions | None = None) -> BenchResult:
    """Run the benchmark; see the module docstring for what is measured.

    Parameters
    ----------
    options : BenchOptions, optional
        What to run (default: :class:`BenchOptions`' defaults, 50 revolutions of the
        1 M-triangle scene).

    Returns
    -------
    BenchResult
    """
    import open3d as o3d

    o = options if options is not None else BenchOptions()
    bare_script = o.bare_script  # (not in a generated scene)

    t0 = time.perf_counter()
    y0 = 0.0
    if o.scene_name == "bench":
        scene = build_bench_scene(o.seed, o.scene_scale)
    else:
        spec = SceneSpec(generator=GeneratorRef(name=o.scene_name, seed=o.seed))
        scene = build_scene(spec, Path("."), load_materials(), source=o.scene_name)
        y0, bare_script = -1.6, False
    t_scene = time.perf_counter() - t0
    motion = {"start": {"position_m": [-10.0, y0, 1.8]}, "velocity_mps": [5.0, 0.0, 0.0]}
    where = (
        {"trajectory": TrajectorySpec.model_validate(motion)}
        if o.moving
        else {"pose": Pose(position_m=[0.0, y0, 1.8])}
    )
    survey = Survey(
        scanner="rs-helios-5515",
        scene="(in memory)",
        **where,
        revolutions=None if o.duration_s else o.revolutions,
        duration_s=o.duration_s,
        chunk_pulses=o.chunk_pulses,
        weather=Weather.model_validate(o.weather or {}),
    )
    scanner = load_scanner(
        "rs-helios-5515", {"beam_samples": o.beam_samples, "beam_sampling": o.beam_sampling}
    )
    t0 = time.perf_counter()
    backend = select_backend() if o.use_fast else NumpyBackend()
    sim = Simulation(
        survey=survey, scanner=scanner, scene=scene, base_dir=Path("."), backend=backend
    )
    t_engine = time.perf_counter() - t0
    # Open3D builds its BVH on the first cast; numba compiles (or loads) on the first call.
    t0 = time.perf_counter()
    sim.engine.cast(np.zeros((1, 3)), np.array([[1.0, 0.0, 0.0]]), np.zeros(1))
    t_bvh = time.perf_counter() - t0
    t0 = time.perf_counter()
    sim.scan_pulses(0, 1000)
    t_warm = time.perf_counter() - t0
    sim.timings_s = dict.fromkeys(sim.timings_s, 0.0)

    total = sim.total_pulses
    # The bare cast is timed before and after the pipeline, and the mean is the
    # reference: on a shared machine the speed drifts, and this halves its effect.
    t_cast_before, _ = _bare_cast_s(sim, total)
    rss_before = _rss_mib()
    marks: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [] if o.output_format == "none" else [Path(tmp) / f"bench.{o.output_format}"]
        t_all = time.perf_counter()
        marks.append((0, t_all))
        summary = sim.write(
            paths, progress=lambda done, _: marks.append((done, time.perf_counter()))
        )
        t_pipeline = time.perf_counter() - t_all
        file_mib = sum(p.stat().st_size for p in summary.files) / 2**20
    peak = _peak_rss_mib()
    points = summary.points
    stage = dict(sim.timings_s)
    # Steady state: from the end of the first chunk (BVH and caches warm) to the end.
    (p0, t0), (p1, t1) = (marks[1] if len(marks) > 2 else marks[0]), marks[-1]
    pulses_per_s = (p1 - p0) / (t1 - t0) if t1 > t0 else float("nan")

    t_cast_after, first_rays = _bare_cast_s(sim, total)
    t_cast = 0.5 * (t_cast_before + t_cast_after)
    trimesh_rate = None
    if o.compare_trimesh and first_rays is not None:
        trimesh_rate = _trimesh_embree_rays_per_s(scene, first_rays)

    figures: dict[str, Any] = {
        "machine": f"{_cpu_name()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Open3D {o3d.__version__}",
        "kernels": sim.backend.name,
        "scanner": scanner.name,
        "beam_samples": o.beam_samples,
        "beam_sampling": o.beam_sampling,
        "moving": o.moving,
        "weather": survey.weather.describe(),
        "scene": o.scene_name,
        "sensor_pulses_per_s": sim.pattern.pulses_per_second,
        "triangles": scene.triangle_count,
        "objects": len(scene.objects),
        "pulses": total,
        "sensor_time_s": total / sim.pattern.pulses_per_second,
        "points": points,
        "chunk_pulses": o.chunk_pulses,
        "output_format": o.output_format,
        "output_mib": file_mib,
        "scene_build_s": t_scene,
        "engine_setup_s": t_engine,
        "bvh_build_s": t_bvh,
        "warm_up_s": t_warm,
        "pipeline_s": t_pipeline,
        "pipeline_pulses_per_s": pulses_per_s,
        "real_time_factor": pulses_per_s / sim.pattern.pulses_per_second,
        "cast_only_s": t_cast,
        "cast_only_s_before_after": [t_cast_before, t_cast_after],
        "cast_only_rays_per_s": total * o.beam_samples / t_cast,
        "pipeline_to_cast_ratio": t_pipeline / t_cast,
        "steady_state_ratio": total / t_cast / pulses_per_s,
        "stages_s": stage,
        "trimesh_embree_rays_per_s": trimesh_rate,
        "rss_before_scan_mib": rss_before,
        "peak_rss_mib": peak,
    }
    figures["pipeline_per_revolution_ms"] = 1e3 * t_pipeline / (total / sim.pattern.frame_pulses)
    figures["bare_script"] = (
        _bare_script(total / sim.pattern.frame_pulses, o.scene_scale, o.chunk_pulses)
        if bare_script and not o.moving and o.beam_samples == 1
        else None
    )
    return BenchResult(figures)


def _bare_script(revolutions: float, scene_scale: float, chunk_pulses: int) -> dict:
    """Figures of the plain cast-and-save script (:mod:`simulator.bench.bare`) on the same
    survey, run in a process of its own."""
    import json
    import subprocess
    import sys

    res = subprocess.run(
        [sys.executable, "-m", "simulator.bench.bare", "--revolutions", str(revolutions),
         "--scene-scale", str(scene_scale), "--chunk-pulses", str(chunk_pulses)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(res.stdout)


def format_result(result: BenchResult) -> str:
    """Human-readable lines of a :class:`BenchResult`."""
    f = result.figures
    s = f["stages_s"]
    before, after = f["cast_only_s_before_after"]
    lines = [
        f"machine            {f['machine']}",
        f"scene              {f.get('scene', 'bench')}: {f['triangles']:,} triangles in "
        f"{f['objects']} objects "
        f"(generated {f['scene_build_s']:.2f} s, engine {f['engine_setup_s']:.2f} s, "
        f"BVH {f['bvh_build_s']:.2f} s, warm-up {f['warm_up_s']:.2f} s)",
        f"survey             {f['scanner']} ({f['beam_samples']} ray(s) a pulse"
        f"{', sampled adaptively' if f.get('beam_sampling') == 'adaptive' else ''}"
        f"{', moving at 5 m/s' if f['moving'] else ''}"
        f"{', ' + f['weather'] if f.get('weather', 'clear air') != 'clear air' else ''}), "
        f"{f['pulses']:,} pulses ({f['sensor_time_s']:.1f} s "
        f"of sensor time) -> {f['points']:,} points, "
        f"chunks of {f['chunk_pulses']:,}, "
        f"output .{f['output_format']} ({f['output_mib']:.1f} MiB)",
        f"pipeline           {f['pipeline_pulses_per_s'] / 1e6:.2f} M pulses/s steady state = "
        f"{f['real_time_factor']:.1f} x real time ({f['pipeline_s']:.2f} s in all)",
        f"bare cast          {f['cast_only_rays_per_s'] / 1e6:.2f} M rays/s "
        f"({f['cast_only_s']:.2f} s for the same rays: mean of "
        f"{before:.2f} s before and {after:.2f} s after the pipeline)",
        f"pipeline / cast    {f['pipeline_to_cast_ratio']:.2f} in all (first chunk and file close "
        f"included), {f['steady_state_ratio']:.2f} in steady state",
        f"stages             schedule {s['schedule']:.2f} s, cast {s['cast']:.2f} s, "
        f"physics {s['physics']:.2f} s, output {s['output']:.2f} s ({f['kernels']} kernels)",
        f"peak memory        {f['peak_rss_mib']:.0f} MiB max resident set "
        f"({f['rss_before_scan_mib']:.0f} MiB before the scan)",
    ]
    bare = f.get("bare_script")
    if bare:
        lines.append(
            f"plain script       simulator/bench/bare.py (cast, keep hits, np.savez 5 fields): "
            f"{bare['per_revolution_ms']:.1f} ms a revolution; the pipeline "
            f"{f['pipeline_per_revolution_ms']:.1f} ms "
            f"({f['pipeline_per_revolution_ms'] / bare['per_revolution_ms']:.2f} x)"
        )
    if f["trimesh_embree_rays_per_s"]:
        rate = f["trimesh_embree_rays_per_s"]
        lines.append(
            f"trimesh+embreex    first chunk's rays: {rate['location'] / 1e6:.2f} M rays/s with "
            f"hit points (intersects_location), {rate['first'] / 1e6:.2f} M rays/s triangle "
            "ids only (intersects_first)"
        )
    return "\n".join(lines)


def write_load_mesh(path: Path, triangles: int = 10_000_000) -> None:
    """Write a binary PLY terrain grid of about ``triangles`` triangles."""
    cells = int(np.sqrt(triangles / 2.0))
    rolling_ground(float(cells), cells).export(str(path))


def run_load_bench(path: str | Path) -> dict[str, Any]:
    """Load a mesh file as a scene, set up the ray engine, and cast once (BVH build).

    Times :func:`~simulator.world.scene.load_scene` (trimesh), the ray engine's set-up and
    its first cast (Embree builds the BVH then), with the resident memory at each
    step. Run it in a fresh process for a meaningful peak (``lidar-sim bench --load``).
    """
    import open3d as o3d

    from ..world.scene import load_scene

    path = Path(path)
    rss0 = _rss_mib()
    previous = os.environ.get("LIDAR_SIM_CACHE")
    os.environ["LIDAR_SIM_CACHE"] = "off"  # the figure is trimesh's load, not the mesh cache's
    try:
        t0 = time.perf_counter()
        scene = load_scene(path)
        t_load = time.perf_counter() - t0
    finally:
        if previous is None:
            del os.environ["LIDAR_SIM_CACHE"]
        else:
            os.environ["LIDAR_SIM_CACHE"] = previous
    rss_loaded = _rss_mib()
    centre = scene.bounds_m.mean(axis=0) + np.array([0.0, 0.0, 10.0])
    # The Helios 10 m above the mesh's middle: setting up builds the ray engine.
    survey = Survey(scanner="rs-helios-5515", scene="(file)",
                    pose=Pose(position_m=[float(v) for v in centre]), revolutions=1)  # fmt: skip
    t0 = time.perf_counter()
    sim = Simulation(survey=survey, scanner=load_scanner("rs-helios-5515"), scene=scene,
                     base_dir=Path("."))  # fmt: skip
    t_engine = time.perf_counter() - t0
    rss_engine = _rss_mib()
    t0 = time.perf_counter()
    hits = sim.engine.cast(centre[None, :], np.array([[0.0, 0.0, -1.0]]))  # Embree's BVH
    t_bvh = time.perf_counter() - t0
    t0 = time.perf_counter()
    cloud = sim.run()  # one revolution through the whole pipeline
    t_scan = time.perf_counter() - t0
    mesh_mib = sum(o.vertices_m.nbytes + o.faces.nbytes for o in scene.objects) / 2**20
    return {
        "scan_points": len(cloud),
        "scan_s": round(t_scan, 2),
        "triangles": scene.triangle_count,
        "file_mib": round(path.stat().st_size / 2**20, 1),
        "arrays_mib": round(mesh_mib, 1),
        "load_s": round(t_load, 2),
        "engine_setup_s": round(t_engine, 2),
        "bvh_build_s": round(t_bvh, 2),
        "hit_ok": bool(hits.hit[0]),
        "rss_start_mib": round(rss0, 1),
        "rss_after_load_mib": round(rss_loaded, 1),
        "rss_after_engine_mib": round(rss_engine, 1),
        "peak_rss_mib": round(_peak_rss_mib(), 1),
        "open3d": o3d.__version__,
    }


def run_load_bench_apart(triangles: int) -> dict[str, Any]:
    """:func:`run_load_bench` on a mesh of ``triangles`` (:func:`write_load_mesh`), in a
    fresh process, so that its peak memory is the load's alone; a failed process raises
    :class:`subprocess.CalledProcessError` with its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        mesh = Path(tmp) / "terrain.ply"
        write_load_mesh(mesh, triangles)
        code = (
            "import json, sys, simulator.bench.run as b; "
            "print(json.dumps(b.run_load_bench(sys.argv[1])))"
        )
        res = subprocess.run(
            [sys.executable, "-c", code, str(mesh)], capture_output=True, text=True, check=True
        )
    return json.loads(res.stdout.strip().splitlines()[-1])


def format_load(figures: dict[str, Any]) -> str:
    """Human-readable lines of :func:`run_load_bench`'s figures."""
    f = figures
    return "\n".join(
        [
            f"mesh file          {f['triangles']:,} triangles, binary PLY {f['file_mib']} MiB "
            f"(vertices + faces as float64/int64 arrays: {f['arrays_mib']} MiB)",
            f"load (trimesh)     {f['load_s']:.2f} s, resident {f['rss_start_mib']:.0f} -> "
            f"{f['rss_after_load_mib']:.0f} MiB",
            f"engine set-up      {f['engine_setup_s']:.2f} s (resident "
            f"{f['rss_after_engine_mib']:.0f} MiB), BVH build {f['bvh_build_s']:.2f} s "
            f"(first cast)",
            f"one revolution     {f['scan_points']:,} points in {f['scan_s']:.2f} s, peak "
            f"{f['peak_rss_mib']:.0f} MiB",
        ]
    )


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
        mib = sum(p.stat().st_size for p in summary.files if p.is_file()) / 2**20
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
    other in this process: wall seconds (a worker's start-up included), frames per second,
    and whether the files are bit-identical to the first's."""
    from ..datasets import run_dataset

    runs: list[dict[str, Any]] = []
    reference: dict[str, bytes] | None = None
    modes: list[tuple[int, str | None]] = [(n, None) for n in workers]
    if cluster_workers:
        modes.append((cluster_workers, f"local:{cluster_workers}"))
    with tempfile.TemporaryDirectory() as tmp:
        for n, scheduler in modes:
            out = Path(tmp) / f"w{n}{'-dask' if scheduler else ''}"
            cpu0 = _cpu_s()
            t0 = time.perf_counter()
            if scheduler is None:  # a fresh process each, as `lidar-sim dataset` runs
                _dataset_process(spec, out, n)  # (its workers fork before any kernel ran)
                manifest = json.loads((out / "manifest.json").read_text())
            else:
                manifest = run_dataset(spec, out, workers=n, scheduler=scheduler)
            seconds = time.perf_counter() - t0
            cpu_s = _cpu_s() - cpu0
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
            busiest = max((w.get("cpu_s", 0.0) for w in manifest["workers"].values()), default=0)
            run = {"workers": n, "seconds": seconds, "run_s": manifest["seconds"],
                   "worker_cpu_s": busiest,
                   "frames": manifest["frames"], "frames_per_s": manifest["frames"] / seconds,
                   "cpu_s": cpu_s, "identical_to_first": files == reference}  # fmt: skip
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
               "cpu_speedup": runs[0]["worker_cpu_s"] / max(runs[-1]["worker_cpu_s"], 1e-9),
               }  # fmt: skip
    if cluster_workers:
        figures["cluster"] = cluster
    return figures


def _dataset_process(spec: str | Path, out: Path, workers: int) -> None:
    """``lidar-sim dataset SPEC -o OUT --workers N`` in a new Python process."""
    command = [sys.executable, "-m", "simulator.cli", "dataset", str(spec), "-o", str(out),
               "--workers", str(workers), "--quiet"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def format_dataset_scaling(f: dict[str, Any]) -> str:
    """Lines of :func:`run_dataset_scaling`'s figures."""
    lines = [f"dataset {f['spec']} on {f['cores']} cores"]
    for r in f["runs"]:
        same = "identical files" if r["identical_to_first"] else "FILES DIFFER"
        lines.append(
            f"  {r['workers']} worker(s): {r['frames']} frames in {r['seconds']:.2f} s "
            f"(run {r['run_s']:.2f} s, {r['frames_per_s']:.2f} frames/s, "
            f"{r['cpu_s']:.1f} CPU s, busiest worker {r['worker_cpu_s']:.1f} CPU s, {same})"
        )
    lines.append(
        f"  speed-up {f['speedup']:.2f} x (runs alone {f['run_speedup']:.2f} x; "
        f"busiest worker's CPU {f['cpu_speedup']:.2f} x)"
    )
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


def bench_text(
    options: BenchOptions,
    *,
    sequence: bool = False,
    load_triangles: int = 0,
    dataset_spec: str | Path | None = None,
    as_json: bool = False,
) -> str:
    """What ``lidar-sim bench`` prints, as text or JSON: the figures of :func:`run_bench`
    with ``options``, or instead of a moving sequence (:func:`run_sequence_bench` over
    the options' revolutions, 20 unless given), of loading a mesh of ``load_triangles``
    (:func:`run_load_bench_apart`), or of a dataset spec (:func:`run_dataset_scaling`)."""
    if sequence:
        revolutions = options.revolutions  # run_bench's default (50): not given
        revolutions = 20.0 if revolutions == 50.0 else revolutions
        figures = run_sequence_bench(revolutions, options.scene_scale)
        return json.dumps(figures) if as_json else format_sequence(figures)
    if dataset_spec is not None:
        figures = run_dataset_scaling(dataset_spec, cluster_workers=2)
        return json.dumps(figures) if as_json else format_dataset_scaling(figures)
    if load_triangles:
        figures = run_load_bench_apart(load_triangles)
        return json.dumps(figures, indent=2) if as_json else format_load(figures)
    result = run_bench(options)
    return result.to_json() if as_json else format_result(result)
