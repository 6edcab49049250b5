"""The benchmark runs, and its figures are consistent with a plain scan of the same scene."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from simulator.bench import run_bench
from simulator.config import Pose, Survey, load_scanner
from simulator.generators import build_bench_scene
from simulator.pipeline import Simulation


def test_bench_scene_is_reproducible_and_about_a_million_triangles() -> None:
    a, b = build_bench_scene(seed=3), build_bench_scene(seed=3)
    assert 0.9e6 < a.triangle_count < 1.4e6
    assert [o.name for o in a.objects] == [o.name for o in b.objects]
    assert all(
        (x.vertices_m == y.vertices_m).all() for x, y in zip(a.objects, b.objects, strict=True)
    )


def test_bench_figures_match_a_scan_of_the_same_scene() -> None:
    figures = run_bench(revolutions=0.5, scene_scale=0.1, chunk_pulses=5000).figures
    assert figures["pulses"] == 900 * 32
    assert figures["kernels"] in ("numba", "numpy")
    assert set(figures["stages_s"]) == {"schedule", "cast", "physics", "output"}
    assert figures["pipeline_to_cast_ratio"] == figures["pipeline_s"] / figures["cast_only_s"]
    assert figures["cast_only_s"] == sum(figures["cast_only_s_before_after"]) / 2
    assert figures["steady_state_ratio"] == (
        figures["pulses"] / figures["cast_only_s"] / figures["pipeline_pulses_per_s"]
    )
    assert figures["real_time_factor"] == figures["pipeline_pulses_per_s"] / 576_000
    survey = Survey(
        scanner="rs-helios-5515", scene="-", pose=Pose(position_m=[0.0, 0.0, 1.8]), revolutions=0.5
    )
    sim = Simulation(
        survey=survey,
        scanner=load_scanner("rs-helios-5515"),
        scene=build_bench_scene(0, 0.1),
        base_dir=Path("."),
    )
    assert figures["points"] == len(sim.run())


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
