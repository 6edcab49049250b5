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
    load_scanner,
)
from ..pipeline.simulation import Simulation, Window
from ..world.scene import Scene
from .load import format_load, run_load_bench_apart
from .machine import cpu_name, peak_rss_mib, rss_mib
from .presets import preset_table_text
from .scaling import (
    format_dataset_scaling,
    format_sequence,
    run_dataset_scaling,
    run_sequence_bench,
)
from .scene import bench_survey, scene_of

__all__ = ["BenchOptions", "BenchResult", "bench_text", "format_result", "run_bench"]


@dataclass
class BenchResult:
    """Figures of one benchmark run (times in s, rates in pulses/s, memory in MiB)."""

    figures: dict[str, Any]

    def to_json(self) -> str:
        """The figures as JSON."""
        return json.dumps(self.figures, indent=2)


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
        See :func:`~simulator.bench.scene.build_bench_scene`.
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
    scene, y0 = scene_of(o.scene_name, o.seed, o.scene_scale)
    if o.scene_name != "bench":
        bare_script = False
    t_scene = time.perf_counter() - t0
    survey = bench_survey("rs-helios-5515", y0, o)
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
    rss_before = rss_mib()
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
    peak = peak_rss_mib()
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
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, "
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
        # pulses a chunk: chunk_pulses rays, each pulse's sub-rays or adaptive sampling's
        # beams and witnesses (Simulation.chunk_step)
        "chunk_step_pulses": sim.chunk_step,
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
        f"chunks of {f['chunk_step_pulses']:,} pulses ({f['chunk_pulses']:,} rays), "
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


def bench_text(
    options: BenchOptions,
    *,
    sequence: bool = False,
    load_triangles: int = 0,
    dataset_spec: str | Path | None = None,
    presets: str | None = None,
    as_json: bool = False,
) -> str:
    """What ``lidar-sim bench`` prints, as text or JSON: the figures of :func:`run_bench`
    with ``options``, or instead of a moving sequence (:func:`run_sequence_bench` over
    the options' revolutions, 20 unless given), of loading a mesh of ``load_triangles``
    (:func:`run_load_bench_apart`), of a dataset spec (:func:`run_dataset_scaling`), or
    a table of ``presets`` (``all`` or NAME,NAME,...) on the options' scene
    (:func:`simulator.bench.presets.run_preset_table`)."""
    if sequence:
        revolutions = options.revolutions  # run_bench's default (50): not given
        revolutions = 20.0 if revolutions == 50.0 else revolutions
        figures = run_sequence_bench(revolutions, options.scene_scale)
        return json.dumps(figures) if as_json else format_sequence(figures)
    if dataset_spec is not None:
        figures = run_dataset_scaling(dataset_spec, cluster_workers=2)
        return json.dumps(figures) if as_json else format_dataset_scaling(figures)
    if presets is not None:
        return preset_table_text(options, presets, as_json=as_json)
    if load_triangles:
        figures = run_load_bench_apart(load_triangles)
        return json.dumps(figures, indent=2) if as_json else format_load(figures)
    result = run_bench(options)
    return result.to_json() if as_json else format_result(result)
