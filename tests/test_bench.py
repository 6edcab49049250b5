"""The benchmark runs, and its figures are consistent with a plain scan of the same scene."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from simulator.bench.run import BenchOptions, run_bench
from simulator.bench.scene import build_bench_scene
from simulator.config import Pose, Survey, load_scanner
from simulator.pipeline.simulation import Simulation

from .conftest import REPO, count_cast_in_full, judged_in_full, lidar_sim


def test_bench_scene_is_reproducible_and_about_a_million_triangles() -> None:
    a, b = build_bench_scene(seed=3), build_bench_scene(seed=3)
    assert 0.9e6 < a.triangle_count < 1.4e6
    assert [o.name for o in a.objects] == [o.name for o in b.objects]
    assert all(
        (x.vertices_m == y.vertices_m).all() for x, y in zip(a.objects, b.objects, strict=True)
    )


@pytest.fixture(scope="module")
def bench_scene():  # type: ignore[no-untyped-def]
    """The benchmark scene at a tenth of its size, seed 0 (what run_bench builds)."""
    return build_bench_scene(0, 0.1)


@pytest.fixture(scope="module")
def half_turn() -> tuple[dict, float]:
    """One benchmark of half a revolution with the bare script (its figures, and the wall
    time of the call on an outside clock)."""
    import time

    t0 = time.perf_counter()
    figures = run_bench(
        BenchOptions(revolutions=0.5, scene_scale=0.1, chunk_pulses=5000, bare_script=True)
    ).figures
    return figures, time.perf_counter() - t0


def _helios(scene, revolutions: float, **keys) -> Simulation:  # type: ignore[no-untyped-def]
    """A plain Simulation of the benchmark's sensor (the Helios at 1.8 m) in ``scene``."""
    overrides = keys.pop("overrides", None)
    survey = Survey(
        scanner="rs-helios-5515", scene="-", pose=Pose(position_m=[0.0, 0.0, 1.8]),
        revolutions=revolutions, **keys,
    )  # fmt: skip
    scanner = load_scanner("rs-helios-5515", overrides)
    return Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path("."))


def test_bench_figures_match_a_scan_of_the_same_scene(
    half_turn: tuple[dict, float], bench_scene, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """What the benchmark reports is what an independent scan and an outside clock see.

    Counts and file sizes are compared with a plain scan of the same scene, written by
    the pipeline on its own. Times are intervals nested in one another on one clock, so
    their order is certain whatever the machine's speed: the stages lie inside the
    pipeline's wall time, the steady state inside the pipeline, and everything inside
    the wall time of the call.
    """
    figures, wall_s = half_turn
    # The Helios fires 32 channels 18,000 times a second: 900 firings in half a turn.
    assert figures["pulses"] == 900 * 32
    assert figures["sensor_pulses_per_s"] == 576_000
    assert figures["sensor_time_s"] == pytest.approx(0.05)
    assert figures["kernels"] == "numba"
    assert figures["triangles"] == bench_scene.triangle_count
    assert set(figures["stages_s"]) == {"schedule", "cast", "physics", "output"}
    sim = _helios(bench_scene, 0.5)
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
    bare_s = figures["bare_script"]["seconds"]
    assert timed + figures["bvh_build_s"] + figures["warm_up_s"] + bare_s <= wall_s
    # The steady state starts after the first 5000-pulse chunk and ends with the pipeline.
    steady_s = (figures["pulses"] - 5000) / figures["pipeline_pulses_per_s"]
    assert 0.0 < steady_s <= figures["pipeline_s"]
    # The kernel's peak (getrusage) and the current size (/proc) are kept apart and can
    # differ by some pages; the peak is never below the current size by more than that.
    assert figures["rss_before_scan_mib"] <= figures["peak_rss_mib"] + 1.0


def test_bench_command_prints_json(tmp_path: Path) -> None:
    """``lidar-sim bench --json``: a fifth of a turn is 11,520 pulses; a KITTI .bin holds 16
    bytes a point and its .label 4, so the output's size is the point count's. The command
    times simulator/bench/bare.py on the same pulses unless told not to."""
    res = lidar_sim("bench", "--json", "--revolutions", "0.2", "--scene-scale", "0.05",
                    "--format", "bin")  # fmt: skip
    assert res.returncode == 0, res.stderr
    figures = json.loads(res.stdout)
    assert figures["output_format"] == "bin" and figures["pulses"] == 11_520
    assert figures["bare_script"]["pulses"] == 11_520
    assert 1000 < figures["points"] < figures["pulses"]
    assert figures["output_mib"] == (16 + 4) * figures["points"] / 2**20
    assert figures["sensor_time_s"] == pytest.approx(0.02)


def _bench_json(*args: str) -> dict:
    """``lidar-sim bench --json ARGS`` without the bare script (a child process of ~4 s;
    the test of the command, and the one of the script, run it)."""
    res = lidar_sim("bench", "--json", "--scene-scale", "0.05", "--format", "none",
                    "--no-bare-script", *args)  # fmt: skip
    assert res.returncode == 0, res.stderr
    figures = json.loads(res.stdout)
    assert figures["bare_script"] is None
    return figures


def test_bench_flags_change_what_is_run() -> None:
    """``--duration`` sets the pulses (seconds times the firing rate), ``--numpy`` runs the
    specification (the same points as the kernels), ``--moving`` drives the sensor,
    ``--scene street`` scans the generated street, ``--weather fog=30`` scans in fog (fewer
    points of the scene, outliers of the fog among them); each a few thousand pulses."""
    base = _bench_json("--duration", "0.005")
    assert base["pulses"] == 2880 and base["kernels"] == "numba" and base["moving"] is False
    assert base["scene"] == "bench" and base["weather"] == "clear air"
    numpy = _bench_json("--duration", "0.005", "--numpy")
    assert numpy["kernels"] == "numpy" and numpy["points"] == base["points"] > 500
    moving = _bench_json("--duration", "0.005", "--moving")
    assert moving["moving"] is True and moving["pulses"] == 2880
    street = _bench_json("--duration", "0.005", "--scene", "street")
    assert street["scene"] == "street" and street["triangles"] != base["triangles"]
    assert street["points"] > 500
    fog = _bench_json("--duration", "0.005", "--weather", "fog=30")
    assert fog["weather"] == "fog 30 m" and fog["points"] != base["points"]


def test_bench_load_reports_the_mesh_it_loaded() -> None:
    """``--load N``: a terrain mesh of about N triangles, loaded and cast in a fresh process."""
    res = lidar_sim("bench", "--json", "--load", "20000")
    assert res.returncode == 0, res.stderr
    figures = json.loads(res.stdout)
    assert 19_000 <= figures["triangles"] <= 21_000
    assert figures["hit_ok"] is True and figures["scan_points"] > 0


def test_bench_runs_the_plain_script_on_the_same_rays(half_turn: tuple[dict, float]) -> None:
    """simulator/bench/bare.py casts the pipeline's pulses (in world coordinates): the same
    pulse count, and every detected point among its hits, in less time than the call."""
    figures, wall_s = half_turn
    bare = figures["bare_script"]
    assert bare["pulses"] == figures["pulses"] == 900 * 32
    assert figures["points"] <= bare["hits"] < bare["pulses"]
    assert bare["hits"] > 0.9 * figures["points"]
    assert 0.0 < bare["seconds"] < wall_s


def test_sequence_bench_writes_one_frame_a_revolution(bench_scene) -> None:  # type: ignore[no-untyped-def]
    """Two frames of the sensor driving at 5 m/s: the points of the same drive scanned on
    its own, in less time than the call took."""
    import time

    from simulator.bench.scaling import run_sequence_bench
    from simulator.config import TrajectorySpec

    t0 = time.perf_counter()
    f = run_sequence_bench(revolutions=2, scene_scale=0.05)
    wall_s = time.perf_counter() - t0
    assert f["frames"] == 2 and f["pulses"] == 2 * 1800 * 32
    motion = {"start": {"position_m": [-10.0, 0.0, 1.8]}, "velocity_mps": [5.0, 0.0, 0.0]}
    survey = Survey(scanner="rs-helios-5515", scene="-", revolutions=2,
                    trajectory=TrajectorySpec.model_validate(motion))  # fmt: skip
    sim = Simulation(survey=survey, scanner=load_scanner("rs-helios-5515"),
                     scene=build_bench_scene(0, 0.05), base_dir=Path("."))  # fmt: skip
    assert f["points"] == len(sim.run()) > 10_000
    assert 0.0 < f["seconds"] < wall_s and f["output_mib"] > 16 * f["points"] / 2**20


def test_dataset_scaling_gives_the_same_files_with_one_or_two_workers() -> None:
    from simulator.bench.scaling import run_dataset_scaling

    f = run_dataset_scaling(REPO / "configs" / "datasets" / "demo.yaml")
    assert [r["workers"] for r in f["runs"]] == [1, 2]
    assert [r["frames"] for r in f["runs"]] == [6, 6]
    assert f["runs"][1]["identical_to_first"] is True  # two workers wrote the one's files
    # each sequence built once however many workers; its presets' CPU a frame, whose
    # frames' sum is the CPU of the frames, within the whole process's
    assert [r["builds"] for r in f["runs"]] == [2, 2]
    for r in f["runs"]:
        per_frame = r["cpu_s_per_frame"]
        assert sorted(per_frame) == ["rs-helios-5515", "vlp-16"]
        assert sum(c["per_frame"] for c in per_frame.values()) * 3 == pytest.approx(
            r["frames_cpu_s"]
        )
        for c in per_frame.values():  # two frames of three built nothing
            assert c["frame"] > 0 and c["build"] > 0
            assert (c["per_frame"] * 3 - c["frame"] * 2 - c["build"]) == pytest.approx(c["frame"])
        assert 0 < r["frames_cpu_s"] < r["cpu_s"]
    assert f["cpu_ratio"] == pytest.approx(f["runs"][1]["cpu_s"] / f["runs"][0]["cpu_s"])


def test_adaptive_bench_counts_the_points_of_an_adaptive_scan_and_every_sub_ray_cast(
    bench_scene,
) -> None:  # type: ignore[no-untyped-def]
    """``beam_sampling="adaptive"``: the points are those of an adaptive scan of the same
    scene, which casts in full exactly the pulses the footprint test's specification
    judges (a share well below all: a no-op that cast everything in full would fail), and
    the bare cast it is compared with casts every sub-ray, 7 a pulse."""
    figures = run_bench(BenchOptions(
        revolutions=0.2, scene_scale=0.1, chunk_pulses=7000, beam_samples=7,
        beam_sampling="adaptive", output_format="none",
    )).figures  # fmt: skip
    keys = {"beam_samples": 7, "beam_sampling": "adaptive"}
    sim = _helios(bench_scene, 0.2, chunk_pulses=7000, overrides=keys)
    assert sim.adaptive and figures["beam_sampling"] == "adaptive"
    cloud, in_full = count_cast_in_full(sim)
    assert figures["points"] == len(cloud)
    judged = judged_in_full(sim)
    assert in_full == judged.sum()
    share = in_full / figures["pulses"]
    print(f"adaptive bench: {share:.3f} of the pulses cast in full")
    assert 0.01 < share < 0.5, share
    full = _helios(bench_scene, 0.2, chunk_pulses=7000, overrides={"beam_samples": 7})
    assert count_cast_in_full(full)[1] == 0  # full sampling casts every sub-ray with the beam


def test_preset_table_rows_are_scans_of_the_street() -> None:
    """``lidar-sim bench --presets A,B --scene street``: a row a preset, in the order asked;
    each row's pulses are its survey's (seconds times the preset's rate), its points those
    of an independent scan of the same survey, its real-time factor the pipeline's rate over
    the sensor's, and its CPU time a positive share of the frames scanned."""
    from simulator.config import GeneratorRef, SceneSpec, load_materials
    from simulator.world.scene import build_scene

    res = lidar_sim("bench", "--json", "--presets", "vlp-16,livox-mid70", "--scene", "street",
                    "--duration", "0.05", "--chunk-pulses", "4000", "--format", "none")  # fmt: skip
    assert res.returncode == 0, res.stderr
    figures = json.loads(res.stdout)
    assert figures["scene"] == "street (seed 0)" and figures["weather"] == "clear air"
    rows = figures["rows"]
    assert [r["preset"] for r in rows] == ["vlp-16", "livox-mid70"]
    assert [r["pattern"] for r in rows] == ["spinning", "risley"]
    scene = build_scene(SceneSpec(generator=GeneratorRef(name="street", seed=0)), Path("."),
                        load_materials(), source="street")  # fmt: skip
    for r in rows:
        assert r["pulses"] == round(0.05 * r["sensor_pulses_per_s"])
        survey = Survey(scanner=r["preset"], scene="(in memory)", duration_s=0.05,
                        pose=Pose(position_m=[0.0, -1.6, 1.8]), chunk_pulses=4000)  # fmt: skip
        sim = Simulation(survey=survey, scanner=load_scanner(r["preset"]), scene=scene,
                         base_dir=Path("."))  # fmt: skip
        assert r["points"] == len(sim.run()) > 1000
        assert r["real_time_factor"] == r["pipeline_pulses_per_s"] / r["sensor_pulses_per_s"]
        assert r["cpu_s_per_frame"] > 0.0
        assert 0.0 < r["cpu_cores_used"] <= 1.05 * os.cpu_count()
        assert sum(r["stages_s"].values()) <= r["wall_s"]


def test_all_presets_are_the_ground_sensors_and_a_bad_name_is_refused() -> None:
    """``--presets all`` is every bundled preset but the airborne oscillating mirror,
    spinning heads first; an unknown name is one line naming it, exit code 2."""
    from simulator.bench.presets import ground_presets
    from simulator.config import scanner_presets

    names = ground_presets()
    assert set(names) == set(scanner_presets()) - {"als-oscillating"}
    spinning = [n for n in names if load_scanner(n).pattern == "spinning"]
    assert names[: len(spinning)] == sorted(spinning) and len(spinning) == 15
    res = lidar_sim("bench", "--presets", "vlp-16,vlp-17", "--scene", "street")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "vlp-17" in lines[0] and "--presets" in lines[0], res.stderr


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads Linux's /proc/stat")
def test_the_machines_busy_seconds_hold_this_process_own() -> None:
    """The machine's busy CPU seconds (all processes) grow at least by this process's own
    while it computes (to the clock tick), so the benchmark's 'others used' is never less
    than what the rest of the machine took."""
    import time

    from simulator.bench.machine import busy_seconds

    busy0, own0 = busy_seconds(), time.process_time()
    while time.process_time() - own0 < 0.5:
        sum(range(10_000))
    busy1, own1 = busy_seconds(), time.process_time()
    assert busy0 is not None and busy1 is not None
    assert busy1 - busy0 >= (own1 - own0) - 0.03
