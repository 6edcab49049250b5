"""The ``lidar-sim`` command as a user runs it: exit codes, messages, files.

Most commands run in this process (:func:`tests.conftest.lidar_sim`, the CLI's own
``main``); what only a process shows (the installed entry point, the exit code a shell
sees, compiling with an empty numba cache, what a command imports) runs in a child."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from .conftest import PLAIN, REPO, Ran, Workspace, lidar_sim

LIDAR_SIM = [sys.executable, "-m", "simulator.cli"]
run = lidar_sim


def run_process(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``lidar-sim ARGS`` in a child process."""
    return subprocess.run(
        [*LIDAR_SIM, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"},
    )


def _good_survey(ws: Workspace) -> Path:
    return ws.survey(
        [{"name": "ground", "plane": {"size_m": [100, 100]}, "material": "asphalt"}],
        pose={"position_m": [0, 0, 1.8]},
        revolutions=0.25,
    )


def test_scan_writes_every_requested_format_and_a_summary(ws: Workspace) -> None:
    survey = _good_survey(ws)
    outs = [ws.root / f"o/scan.{ext}" for ext in ("npz", "pcd", "las")]
    res = run("scan", survey, *[a for o in outs for a in ("-o", o)])
    assert res.returncode == 0, res.stderr
    import re

    from simulator.io.read import read

    counted = re.search(r"([0-9,]+) points from 14,400 pulses", res.stdout)
    assert counted, res.stdout
    points = int(counted.group(1).replace(",", ""))
    assert 5000 < points < 14_400  # the ground, out to where the beams stop detecting
    assert re.search(rf"road\s+{counted.group(1)}\s+100.0 %", res.stdout), res.stdout
    for o in outs:
        assert f"wrote {o}" in res.stdout
    # Every file holds the scan's points: the same places (LAS to its 0.1 mm scale), the
    # same intensities and rings.
    npz, pcd, las = (read(o) for o in outs)
    assert len(npz) == len(pcd) == len(las) == points
    np.testing.assert_array_equal(pcd["xyz"], npz["xyz"])
    np.testing.assert_allclose(las["xyz"], npz["xyz"], rtol=0, atol=6e-5)
    for name in ("intensity", "ring", "return_number"):
        np.testing.assert_array_equal(pcd[name], npz[name], err_msg=name)
        np.testing.assert_array_equal(las[name], npz[name], err_msg=name)
    assert not list((ws.root / "o").glob(".*"))  # no temporary files left behind


def test_the_first_scan_reports_compiling_apart_from_the_scan(
    ws: Workspace, tmp_path: Path
) -> None:
    """With an empty numba cache (the first run after an install) the kernels compile in
    the set-up, which is reported on its own; the scan's time and rate are the scan's."""
    import re

    survey = _good_survey(ws)
    # LLVM at -O0 (NUMBA_OPT=0): the same kernels compiled and cached, in ~80 % of the CPU
    # time (paired, the four kernels: 11.7 s -> 9.6 s of the child's user time).
    env = {"COLUMNS": "200", "PATH": "/usr/bin:/bin", "NUMBA_CACHE_DIR": str(tmp_path / "nb"),
           "NUMBA_OPT": "0"}  # fmt: skip
    out = ws.root / "o" / "scan.las"
    res = subprocess.run([*LIDAR_SIM, "scan", str(survey), "-o", str(out)], capture_output=True,
                         text=True, timeout=600, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    setup = re.search(
        r"set-up ([0-9.]+) s: ray-casting structure, (\d+) kernels? compiled", res.stdout
    )
    assert setup, res.stdout
    assert int(setup.group(2)) >= 3  # rays, hits, record, and LAS packing
    scan = re.search(r"in ([0-9.]+) s \(([0-9.]+) M pulses/s\)", res.stdout)
    assert scan, res.stdout
    assert float(scan.group(1)) < float(setup.group(1))  # compiling (seconds) is not in it
    assert float(scan.group(2)) > 0.0
    again = subprocess.run([*LIDAR_SIM, "scan", str(survey), "-o", str(out)], capture_output=True,
                           text=True, timeout=600, env=env)  # fmt: skip
    assert "kernels loaded from numba's cache" in again.stdout, again.stdout


def test_default_output_is_relative_to_the_survey(ws: Workspace, tmp_path: Path) -> None:
    survey = _good_survey(ws)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    res = run("scan", survey, "--quiet", cwd=elsewhere)
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert (ws.root / "out" / "scan.npz").is_file()


def test_set_overrides_survey_keys(ws: Workspace) -> None:
    survey = _good_survey(ws)
    out = ws.root / "a.npz"
    res = run("scan", survey, "-o", out, "--set", "revolutions=0.5", "--set", "seed=9", "-q")
    assert res.returncode == 0, res.stderr
    with np.load(out) as data:
        assert data["time_s"].max() > 0.045  # half a revolution at 10 Hz


def _expect_error(res: Ran | subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    for fragment in fragments:
        assert fragment in res.stderr, (fragment, res.stderr)


def _edit(path: Path, **changes: object) -> None:
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))


def test_misspelt_key_names_file_and_key_path(ws: Workspace) -> None:
    survey = _good_survey(ws)
    _edit(survey, pose={"positon_m": [0, 0, 1]})
    told = f"error: {survey}: pose.positon_m: unknown key (did you mean 'position_m'?)\n"
    # A child process: the exit code and the stderr a shell sees.
    res = run_process("scan", survey)
    _expect_error(res)
    assert res.stderr == told
    _expect_error(res := run("scan", survey))
    assert res.stderr == told


def test_an_unknown_key_with_no_close_name_lists_the_keys_of_its_section(ws: Workspace) -> None:
    res = run("scan", _good_survey(ws), "--set", "weather.hail.rate_mm_h=3")
    _expect_error(res, "weather.hail: unknown key (misspelt?); this section accepts "
                  "dust, fog, rain, snow")  # fmt: skip
    assert "did you mean" not in res.stderr


def test_a_misspelt_preset_is_answered_with_the_closest(ws: Workspace) -> None:
    """``--set scanner=vlp16`` (in a survey, and as ``scanners NAME``): the closest preset
    first, then every preset; one line, exit code 2."""
    from simulator.config import scanner_presets

    every = ", ".join(scanner_presets())
    survey = _good_survey(ws)
    res = run("scan", survey, "--set", "scanner=vlp16")
    _expect_error(res)
    assert res.stderr == (
        f"error: {survey}: scanner: unknown scanner preset 'vlp16' (did you mean 'vlp-16'?); "
        f"choose one of {every}\n"
    )
    res = run("scanners", "os1128")
    _expect_error(res)
    assert res.stderr == (
        f"error: unknown scanner preset 'os1128' (did you mean 'os1-128'?); choose one of {every}\n"
    )


def test_a_file_with_several_problems_lists_them_all(ws: Workspace) -> None:
    """A dataset spec with four problems: one line, each key with its problem (the
    misspelt layout and key with the closest names), no "[and N more]"; with twelve, ten
    are listed and the others counted."""
    spec = yaml.safe_load((REPO / "configs/datasets/demo.yaml").read_text())
    spec["layout"] = "semantic-kitti"
    spec["groups"][0]["frames"] = 0
    spec["groups"][1]["mount"] = {"positon_m": [0, 0, 1.9]}
    spec["groups"][1]["trajectory"]["velocity_mps"] = [8, 0]
    path = ws.write("dataset.yaml", spec)
    res = run("validate", path)
    _expect_error(res)
    assert res.stderr == (
        f"error: {path}: layout: Input should be 'semantickitti', 'nuscenes', 'npz', "
        "'openpcdet', 'kitti' or 'rosbag2' (got 'semantic-kitti', did you mean "
        "'semantickitti'?); "
        "also groups[0].frames: Input should be greater than or equal to 1 (got 0); "
        "also groups[1].trajectory.velocity_mps: List should have at least 3 items after "
        "validation, not 2 (got [8, 0]); "
        "also groups[1].mount.positon_m: unknown key (did you mean 'position_m'?)\n"
    )
    assert "more" not in res.stderr
    spec = yaml.safe_load((REPO / "configs/datasets/demo.yaml").read_text())
    path = ws.write("dataset.yaml", {**spec, **{f"extra_{i:02d}": 1 for i in range(12)}})
    res = run("validate", path)
    _expect_error(res)
    lines = res.stderr.splitlines()
    assert len(lines) == 1
    listed = re.findall(r"extra_(\d\d): unknown key", lines[0])
    assert listed == [f"{i:02d}" for i in range(10)]
    assert lines[0].endswith("; and 2 more")


@pytest.mark.parametrize(
    ("change", "fragments"),
    [
        ({"revolutions": "many"}, ["revolutions", "number"]),
        ({"revolutions": -1}, ["revolutions", "greater than 0"]),
        ({"scanner": "no-such-lidar"}, ["scanner", "unknown scanner preset", "rs-helios-5515"]),
        ({"scene": "missing.yaml"}, ["missing.yaml", "file not found"]),
        ({"output": {"path": "x.xyz"}}, ["unknown output format", ".npz"]),
        ({"scanner_overrides": {"range_noise_m": -1}}, ["scanner_overrides", "range_noise_m"]),
        ({"scanner_overrides": {"channels": {"firing_offset_us": [0, 1]}}}, ["firing_offset_us"]),
        ({"pose": {"position_m": [0, 0]}}, ["pose.position_m", "at least 3"]),
        ({"seed": 0.5}, ["seed"]),
    ],
)
def test_bad_survey_values_give_clear_errors(
    ws: Workspace, change: dict[str, object], fragments: list[str]
) -> None:
    survey = _good_survey(ws)
    _edit(survey, **change)
    _expect_error(run("scan", survey), *fragments)
    assert not (ws.root / "out").exists()  # nothing written


def test_yaml_syntax_error_gives_the_line(ws: Workspace) -> None:
    survey = ws.root / "survey.yaml"
    survey.write_text("scanner: rs-helios-5515\nscene: [unclosed\n")
    _expect_error(run("validate", survey), str(survey), "not valid YAML", "line")


def test_scene_errors_name_the_object(ws: Workspace) -> None:
    survey = _good_survey(ws)
    ws.write(
        "scene.yaml",
        {"objects": [{"name": "a", "box": {"size_m": [1, 1, 1]}, "material": "unobtainium"}]},
    )
    _expect_error(run("scan", survey), "objects[0].material", "unknown material", "asphalt")
    ws.write("scene.yaml", {"objects": [{"name": "a", "mesh": "nope.obj"}]})
    _expect_error(run("scan", survey), "objects[0].mesh", "mesh file not found")
    ws.write(
        "scene.yaml", {"objects": [{"name": "a", "box": {"size_m": [1, 1]}, "material": PLAIN}]}
    )
    _expect_error(run("scan", survey), "objects[0].box.size_m")


def test_bad_set_override(ws: Workspace) -> None:
    _expect_error(
        run("scan", _good_survey(ws), "--set", "revolutions"), "--set", "dotted.key=value"
    )


def test_unreadable_mesh_is_a_clear_error(ws: Workspace) -> None:
    survey = _good_survey(ws)
    (ws.root / "broken.ply").write_bytes(b"ply\nformat nonsense\n")
    ws.write("scene.yaml", {"objects": [{"name": "a", "mesh": "broken.ply"}]})
    _expect_error(run("scan", survey), "broken.ply", "cannot be read as a mesh")


def test_validate_reports_each_kind_of_file(ws: Workspace) -> None:
    res = run("validate", REPO / "scenes/farm/survey.yaml")
    assert res.returncode == 0, res.stderr
    assert "survey: scanner rs-helios-5515 (32 channels)" in res.stdout
    for path, kind in [
        ("configs/scanners/vlp-16.yaml", "scanner: vlp-16"),
        ("scenes/farm/scene.yaml", "scene:"),
        ("configs/materials.yaml", "materials:"),
    ]:
        res = run("validate", REPO / path)
        assert res.returncode == 0 and kind in res.stdout, res.stdout + res.stderr


def test_scanners_lists_the_presets() -> None:
    res = run("scanners")
    assert res.returncode == 0, res.stderr
    assert "rs-helios-5515" in res.stdout and "576,000" in res.stdout
    assert "vlp-16" in res.stdout and "-15.0..+15.0" in res.stdout


def test_installed_entry_point_runs() -> None:
    exe = Path(sys.executable).parent / "lidar-sim"
    if not exe.exists():
        pytest.skip("package not installed with its entry point")
    res = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "scan" in res.stdout and "validate" in res.stdout


def test_validate_a_dataset_spec() -> None:
    res = run("validate", REPO / "configs/datasets/demo.yaml")
    assert res.returncode == 0 and "dataset: 2 groups, 6 samples" in res.stdout


def test_overriding_one_of_two_alternatives_replaces_the_other(ws: Workspace) -> None:
    """--set duration_s on a survey that gives revolutions (or trajectory over pose) wins."""
    import simulator

    survey = _good_survey(ws)
    sim = simulator.Simulation.from_file(survey, ["duration_s=0.05"])
    assert sim.survey.revolutions is None and sim.total_pulses == 900 * 32
    sim = simulator.Simulation.from_file(
        survey, ["trajectory={start: {position_m: [0, 0, 2]}, velocity_mps: [1, 0, 0]}"]
    )
    assert sim.survey.trajectory is not None


def test_commands_that_do_not_scan_do_not_import_the_heavy_parts() -> None:
    """``--help``, ``scanners`` and validating a scanner load neither trimesh, Open3D nor
    numba (they answer at once); importing the package alone loads none of them either."""
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['lidar-sim', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('simulator.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('trimesh', 'open3d', 'numba', 'laspy') if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    for args in (
        ["--help"],
        ["scanners"],
        ["validate", str(REPO / "configs/scanners/vlp-16.yaml")],
    ):
        res = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                             timeout=120)  # fmt: skip
        assert "HEAVY []" in res.stderr, (args, res.stderr[-500:])
    res = subprocess.run(
        [sys.executable, "-c", "import sys, simulator; "
         "print([m for m in ('trimesh', 'open3d', 'numba') if m in sys.modules])"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.stdout.strip() == "[]", res.stdout + res.stderr


def test_a_scan_to_npz_does_not_import_what_it_does_not_use(tmp_path: Path) -> None:
    """A scan that writes no LAS file loads neither laspy nor the ``requests`` it imports,
    and a scene of files not the scene generators, in a whole process as a user runs it; the
    cloud is written."""
    probe = (
        "import sys, runpy\n"
        "sys.argv = ['lidar-sim', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('simulator.cli', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    print('EXIT', exc.code, file=sys.stderr)\n"
        "unused = ('laspy', 'requests', 'simulator.generators')\n"
        "print('LOADED', [m for m in unused if m in sys.modules], file=sys.stderr)\n"
    )
    out = tmp_path / "farm.npz"
    res = subprocess.run(
        [sys.executable, "-c", probe, "scan", str(REPO / "scenes/farm/survey.yaml"), "-o", str(out),
         "--set", "revolutions=0.05", "-q"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert "LOADED []" in res.stderr, res.stderr[-500:]
    assert "EXIT" not in res.stderr or "EXIT 0" in res.stderr, res.stderr[-500:]
    assert out.stat().st_size > 1000


def test_weather_from_the_command_line(tmp_path: Path) -> None:
    """``--set weather.fog.visibility_m=50`` scans in fog; a bad value or an unknown
    condition is one message naming the key, exit code 2, no traceback."""
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    out = tmp_path / "fog.npz"
    res = run("scan", survey, "-o", out, "--set", "revolutions=0.05",
              "--set", "weather.fog.visibility_m=50")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "outlier" in res.stdout
    with np.load(out) as data:
        assert np.count_nonzero(data["label"] == 1) > 1000
    for bad, key in (("weather.fog.visibility_m=-3", "weather.fog.visibility_m"),
                     ("weather.hail.rate_mm_h=3", "weather.hail")):  # fmt: skip
        res = run("scan", survey, "-o", tmp_path / "x.npz", "--set", bad)
        assert res.returncode == 2
        assert key in res.stderr and "Traceback" not in res.stderr
        assert not (tmp_path / "x.npz").exists()
    res = run("bench", "--weather", "hail=3")
    assert res.returncode == 2 and "--weather" in res.stderr and "Traceback" not in res.stderr


def test_an_unwritable_output_folder_is_refused_before_scanning(ws: Workspace) -> None:
    """The bad-input table's row: a folder that cannot be written (read-only; /sys when the
    tests run as root, who may write anywhere else) or cannot be made (its parent is a
    file): exit 2 before any scanning, the path named, nothing written."""
    import os

    survey = _good_survey(ws)
    if os.geteuid() == 0:
        folder = Path("/sys")
    else:
        folder = ws.root / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
    res = run("scan", survey, "-o", folder / "scan.npz")
    _expect_error(res, str(folder / "scan.npz"), "the output directory is not writable")
    assert "points from" not in res.stdout  # refused before the scan
    assert not (folder / "scan.npz").exists()
    res = run("sequence", survey, "-o", folder / "seq")  # its frames folder cannot be made
    _expect_error(res, str(folder / "seq"), "cannot create the output directory")
    assert not (folder / "seq").exists()
    res = run("scan", survey, "-o", survey / "scan.npz")  # survey.yaml is a file
    _expect_error(res, str(survey / "scan.npz"), "cannot create the output directory")
