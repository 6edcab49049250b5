"""``lidar-sim bench --load``: a large mesh file loaded as a scene, the ray engine set up
on it and one revolution scanned, with the time and resident memory of each step, in a
process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..config import Pose, Survey, load_scanner
from ..pipeline.simulation import Simulation
from .machine import peak_rss_mib, reset_peak_rss, rss_mib
from .scene import rolling_ground

__all__ = ["format_load", "run_load_bench", "run_load_bench_apart", "write_load_mesh"]


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
    _warm_kernels()  # (numba compiling inside the scan would put LLVM's memory in the peak)
    reset_peak_rss()  # (and the warm-up's own peak is not the load's)
    rss0 = rss_mib()
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
    rss_loaded = rss_mib()
    centre = scene.bounds_m.mean(axis=0) + np.array([0.0, 0.0, 10.0])
    t0 = time.perf_counter()
    sim = _survey_above(scene, centre)  # setting up builds the ray engine
    t_engine = time.perf_counter() - t0
    rss_engine = rss_mib()
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
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "open3d": o3d.__version__,
    }


def _survey_above(scene: Any, centre: np.ndarray) -> Simulation:
    """One revolution of the Helios at ``centre`` (10 m above the mesh's middle)."""
    survey = Survey(scanner="rs-helios-5515", scene="(file)",
                    pose=Pose(position_m=[float(v) for v in centre]), revolutions=1)  # fmt: skip
    return Simulation(survey=survey, scanner=load_scanner("rs-helios-5515"), scene=scene,
                      base_dir=Path("."))  # fmt: skip


def _warm_kernels() -> None:
    """Compile or load the scan's kernels on a small terrain first
    (:meth:`simulator.pipeline.run.Runs.warm_up`), so the measured steps hold the load,
    the engine and the scan alone."""
    from ..world.scene import load_scene

    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "small.ply"
        write_load_mesh(small, 2_000)
        scene = load_scene(small)
        _survey_above(scene, scene.bounds_m.mean(axis=0) + np.array([0.0, 0.0, 10.0])).warm_up()


def run_load_bench_apart(triangles: int) -> dict[str, Any]:
    """:func:`run_load_bench` on a mesh of ``triangles`` (:func:`write_load_mesh`), in a
    fresh process, so that its peak memory is the load's alone; a failed process raises
    :class:`subprocess.CalledProcessError` with its stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        mesh = Path(tmp) / "terrain.ply"
        write_load_mesh(mesh, triangles)
        code = (
            "import json, sys, simulator.bench.load as b; "
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
