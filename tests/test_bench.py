"""The benchmark runs, and its figures are consistent with a plain scan of the same scene."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.bench import run_bench
from simulator.bench_scene import build_bench_scene
from simulator.config import Pose, Survey, load_scanner
from simulator.pipeline import Simulation

from .conftest import REPO


def test_bench_scene_is_reproducible_and_about_a_million_triangles() -> None:
    a, b = build_bench_scene(seed=3), build_bench_scene(seed=3)
    assert 0.9e6 < a.triangle_count < 1.4e6
    assert [o.name for o in a.objects] == [o.name for o in b.objects]
    assert all(
        (x.vertices_m == y.vertices_m).all() for x, y in zip(a.objects, b.objects, strict=True)
    )


def test_bench_figures_match_a_scan_of_the_same_scene(tmp_path: Path) -> None:
    """What the benchmark reports is what an independent scan and an outside clock see.

    Counts and file sizes are compared with a plain scan of the same scene, written by
    the pipeline on its own. Times are intervals nested in one another on one clock, so
    their order is certain whatever the machine's speed: the stages lie inside the
    pipeline's wall time, the steady state inside the pipeline, and everything inside
    the wall time of the call.
    """
    import time

    t0 = time.perf_counter()
    figures = run_bench(revolutions=0.5, scene_scale=0.1, chunk_pulses=5000).figures
    wall_s = time.perf_counter() - t0
    # The Helios fires 32 channels 18,000 times a second: 900 firings in half a turn.
    assert figures["pulses"] == 900 * 32
    assert figures["sensor_pulses_per_s"] == 576_000
    assert figures["kernels"] in ("numba", "numpy")
    assert set(figures["stages_s"]) == {"schedule", "cast", "physics", "output"}
    survey = Survey(
        scanner="rs-helios-5515", scene="-", pose=Pose(position_m=[0.0, 0.0, 1.8]), revolutions=0.5
    )
    sim = Simulation(
        survey=survey,
        scanner=load_scanner("rs-helios-5515"),
        scene=build_bench_scene(0, 0.1),
        base_dir=Path("."),
    )
    summary = sim.write([tmp_path / "bench.npz"])
    assert figures["points"] == summary.points == len(sim.run())
    assert figures["output_mib"] == (tmp_path / "bench.npz").stat().st_size / 2**20
    # Nested intervals of one clock.
    stages = figures["stages_s"]
    assert all(v > 0.0 for v in stages.values()), stages
    assert sum(stages.values()) <= figures["pipeline_s"]
    before, after = figures["cast_only_s_before_after"]
    assert min(before, after) <= figures["cast_only_s"] <= max(before, after)
    timed = figures["pipeline_s"] + before + after + figures["scene_build_s"]
    assert timed + figures["bvh_build_s"] + figures["warm_up_s"] <= wall_s
    # The steady state starts after the first 5000-pulse chunk and ends with the pipeline.
    steady_s = (figures["pulses"] - 5000) / figures["pipeline_pulses_per_s"]
    assert 0.0 < steady_s <= figures["pipeline_s"]
    # The kernel's peak (getrusage) and the current size (/proc) are kept apart and can
    # differ by some pages; the peak is never below the current size by more than that.
    assert figures["rss_before_scan_mib"] <= figures["peak_rss_mib"] + 1.0


def test_bench_command_prints_json() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "bench", "--json", "--revolutions", "0.2",
         "--scene-scale", "0.05", "--format", "bin"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    figures = json.loads(res.stdout)
    assert figures["output_format"] == "bin" and figures["output_mib"] > 0
    assert figures["real_time_factor"] > 0


def test_bench_runs_the_plain_script_on_the_same_rays() -> None:
    """benchmarks/bare_cast.py casts the pipeline's pulses (in world coordinates): the same
    pulse count, and every detected point among its hits."""
    from simulator.bench import BARE_SCRIPT

    assert BARE_SCRIPT.is_file()
    figures = run_bench(revolutions=0.5, scene_scale=0.1, chunk_pulses=5000, bare_script=True)
    bare = figures.figures["bare_script"]
    assert bare["pulses"] == figures.figures["pulses"] == 900 * 32
    assert figures.figures["points"] <= bare["hits"] < bare["pulses"]
    assert bare["hits"] > 0.9 * figures.figures["points"]
    assert bare["per_revolution_ms"] == pytest.approx(2e3 * bare["seconds"])


def test_sequence_bench_writes_one_frame_a_revolution() -> None:
    from simulator.bench import run_sequence_bench

    f = run_sequence_bench(revolutions=2, scene_scale=0.05)
    assert f["frames"] == 2 and f["pulses"] == 2 * 1800 * 32
    assert 0 < f["points"] < f["pulses"] and f["output_mib"] > 0
    assert f["frames_per_s"] == pytest.approx(f["frames"] / f["seconds"])


def test_dataset_scaling_gives_the_same_files_with_one_or_two_workers() -> None:
    from simulator.bench import run_dataset_scaling

    f = run_dataset_scaling(REPO / "configs" / "datasets" / "demo.yaml")
    assert [r["workers"] for r in f["runs"]] == [1, 2]
    assert all(r["identical_to_first"] and r["frames"] == 6 for r in f["runs"])


def test_adaptive_bench_counts_the_points_of_an_adaptive_scan_and_every_sub_ray_cast() -> None:
    """``beam_sampling="adaptive"``: the points are those of an adaptive scan of the same
    scene, and the bare cast it is compared with casts every sub-ray (what full sampling
    would cast), so its rays are 7 a pulse."""
    figures = run_bench(
        revolutions=0.2, scene_scale=0.1, chunk_pulses=7000, beam_samples=7,
        beam_sampling="adaptive", output_format="none",
    ).figures  # fmt: skip
    survey = Survey(
        scanner="rs-helios-5515", scene="-", pose=Pose(position_m=[0.0, 0.0, 1.8]),
        revolutions=0.2, chunk_pulses=7000,
    )  # fmt: skip
    scanner = load_scanner("rs-helios-5515", {"beam_samples": 7, "beam_sampling": "adaptive"})
    sim = Simulation(
        survey=survey, scanner=scanner, scene=build_bench_scene(0, 0.1), base_dir=Path(".")
    )
    assert sim.adaptive and figures["beam_sampling"] == "adaptive"
    assert figures["points"] == len(sim.run())
    rays = sum(len(sim.aim(a, b, footprints=True).cast) for a, b in sim.chunk_spans())
    assert rays == 7 * figures["pulses"]
    assert figures["cast_only_rays_per_s"] == pytest.approx(rays / figures["cast_only_s"])
