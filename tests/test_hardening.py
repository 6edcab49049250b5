"""Hardening: malformed configs, bad meshes, far coordinates, safe YAML, disk space."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trimesh
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import SimulatorError
from simulator.validate import validate_file
from simulator.world.scene import load_scene

from .conftest import PLAIN, REPO, Workspace, lidar_sim, single_channel_scanner

SURVEY = yaml.safe_load((REPO / "scenes/farm/survey.yaml").read_text())
SURVEY["scene"] = str(REPO / "scenes/farm/scene.yaml")
SCANNER = yaml.safe_load((REPO / "configs/scanners/rs-helios-5515.yaml").read_text())
SCENE = {"objects": [{"name": "g", "plane": {"size_m": [10, 10]}, "material": "asphalt"},
                     {"name": "b", "box": {"size_m": [1, 2, 3]}, "position_m": [3, 0, 1],
                      "material": PLAIN}]}  # fmt: skip
DATASET = yaml.safe_load((REPO / "configs/datasets/demo.yaml").read_text())
BASES = {"survey": SURVEY, "scanner": SCANNER, "scene": SCENE, "dataset": DATASET}

WEIRD = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.lists(st.floats(allow_nan=True), max_size=5), st.just([]), st.just({}),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just("ünïcødé ☃"), st.just(1e308), st.just(-1.0), st.just([1, 2]),
)  # fmt: skip


def _paths(d: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _mutate(base: object, path: tuple, value: object, action: str) -> object:
    import copy

    data = copy.deepcopy(base)
    node = data
    for p in path[:-1]:
        node = node[p]
    last = path[-1]
    if action == "delete" and isinstance(node, dict):
        del node[last]
    elif action == "rename" and isinstance(node, dict):
        node[f"{last}x"] = node.pop(last)
    else:
        node[last] = value
    return data


def _loaded(kind: str, path: Path) -> object:
    """The validated model of the file (a survey: the survey, its scanner and scene)."""
    from simulator.config import load_dataset_spec, load_scanner, load_survey
    from simulator.config.load import load_scene_spec

    if kind == "dataset":
        return load_dataset_spec(path)
    validate_file(path)
    if kind == "survey":
        survey, base = load_survey(path)
        return survey, load_scanner(survey.scanner, survey.scanner_overrides, base_dir=base)
    if kind == "scanner":
        from simulator.config import load_scanner

        return load_scanner(path)
    return load_scene_spec(path)


def _numbers(model: object) -> list[object]:
    """Every number of a loaded model, walked through its dump."""
    from pydantic import BaseModel

    if isinstance(model, tuple):
        return [v for m in model for v in _numbers(m)]
    data = model.model_dump() if isinstance(model, BaseModel) else model
    out: list[object] = []
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            out.append(item)
    return out


def _dumped(model: object, kind: str, path: tuple) -> object:
    """The value at a key path of the loaded model (of the survey part, for a survey)."""
    node = (model[0] if kind == "survey" else model).model_dump()
    for key in path:
        node = node[key]
    return node


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    kind=st.sampled_from(sorted(BASES)),
    data=st.data(),
    value=WEIRD,
    action=st.sampled_from(["set", "delete", "rename"]),
)
def test_malformed_configs_give_clean_errors(kind, data, value, action, tmp_path_factory) -> None:
    """Any single corruption of a valid file fails with a SimulatorError that names the
    file, or loads only with what it says: a misspelt (renamed) key never loads; a set
    value loads as that value (no boolean taken for a number, nothing ignored); and every
    number of what loads is finite."""
    base = BASES[kind]
    path_choice = data.draw(st.sampled_from(_paths(base)))
    mutated = _mutate(base, path_choice, value, action)
    if isinstance(path_choice[-1], int):
        action = "set"  # a list element is replaced whatever the action (see _mutate)
    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(mutated, allow_unicode=True), encoding="utf-8")
    try:
        model = _loaded(kind, path)
    except SimulatorError as exc:
        assert str(path) in str(exc), str(exc)
        assert "Traceback" not in str(exc)
        return
    renamed_free_name = kind == "scene" and path_choice[:1] == ("materials",)
    assert action != "rename" or renamed_free_name, f"misspelt key {path_choice} was accepted"
    numbers = _numbers(model)
    assert all(np.isfinite(float(v)) for v in numbers)
    if (
        action == "set"
        and kind != "scene"
        and not (kind == "survey" and path_choice[0] in ("scanner", "scene", "scanner_overrides"))
    ):
        got = _dumped(model, kind, path_choice)
        assert type(got) is not bool or type(value) is bool, (path_choice, value, got)
        if isinstance(value, bool) or isinstance(got, bool):
            assert got is value
        elif isinstance(value, int | float):
            assert got == (float(value) if isinstance(got, float) else value), (value, got)


@pytest.mark.parametrize(
    "text",
    [
        "scanner: !!python/object/apply:os.system ['touch /tmp/pwned-lidar-sim']\nscene: x\n",
        "a: &x [1, 2]\nb: *x\nscanner: rs-helios-5515\nscene: {{}}\n",
        "\ufeffscanner: rs-helios-5515\nscene: [\n",
        "- just\n- a list\n",
        "",
        "scanner: rs-helios-5515\nscene: s\npose: {position_m: [.nan, 0, 0]}\n",
        "scanner: rs-helios-5515\nscene: s\nrevolutions: 1e400\n",
        "{1: 2}\n",
    ],
)
def test_hostile_yaml_is_rejected_cleanly(tmp_path: Path, text: str) -> None:
    path = tmp_path / "survey.yaml"
    path.write_text(text, encoding="utf-8")
    res = lidar_sim("validate", path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "Traceback" not in res.stderr and str(path) in res.stderr
    assert not Path("/tmp/pwned-lidar-sim").exists()  # nothing in a YAML file runs code


def _obj(path: Path, vertices: str, faces: str) -> Path:
    path.write_text(vertices + faces)
    return path


@pytest.mark.parametrize(
    ("name", "vertices", "faces", "problem"),
    [
        ("nan", "v 0 0 0\nv 1 0 nan\nv 0 1 0\n", "f 1 2 3\n", "NaN or infinite"),
        ("inf", "v 0 0 0\nv 1 0 inf\nv 0 1 0\n", "f 1 2 3\n", "NaN or infinite"),
        ("empty", "v 0 0 0\n", "", "holds no triangles"),
    ],
)
def test_bad_meshes_are_rejected(tmp_path: Path, name: str, vertices: str, faces: str,
                                 problem: str) -> None:  # fmt: skip
    with pytest.raises(SimulatorError, match=problem):
        load_scene(_obj(tmp_path / f"{name}.obj", vertices, faces))


def test_degenerate_duplicate_and_inverted_faces_still_give_the_right_hits(
    ws: Workspace, tmp_path: Path
) -> None:
    """A wall mesh with a zero-area face, a duplicated face and reversed winding scans
    exactly like the clean wall."""
    v = np.array([[10, -50, -50], [10, 50, -50], [10, 50, 50], [10, -50, 50], [10, 0, 0]], float)
    clean = trimesh.Trimesh(v[:4], [[0, 1, 2], [0, 2, 3]], process=False)
    messy = trimesh.Trimesh(v, [[2, 1, 0], [3, 2, 0], [3, 2, 0], [4, 4, 4], [0, 4, 0]],
                            process=False)  # fmt: skip
    clean.export(str(ws.root / "clean.ply"))
    messy.export(str(ws.root / "messy.ply"))
    scans = []
    for mesh in ("clean.ply", "messy.ply"):
        obj = {"name": "wall", "mesh": mesh, "material": PLAIN}
        scans.append(ws.scan([obj], scanner=single_channel_scanner(), revolutions=0.5))
    assert len(scans[0]) > 500
    for name in ("xyz", "range_m", "intensity"):
        np.testing.assert_array_equal(scans[1][name], scans[0][name], err_msg=name)


def test_far_coordinates_scan_as_accurately_as_at_the_origin(ws: Workspace) -> None:
    """The same scene and sensor at UTM-like coordinates: the same ranges to 1 cm."""
    east, north = 5.0e5, 5.0e6
    clouds = []
    for dx, dy in ((0.0, 0.0), (east, north)):
        objects = [
            {"name": "ground", "plane": {"size_m": [200, 200]}, "position_m": [dx, dy, 0],
             "material": PLAIN},
            {"name": "box", "box": {"size_m": [2, 2, 2]}, "position_m": [dx + 8, dy + 3, 1],
             "material": PLAIN},
        ]  # fmt: skip
        clouds.append(ws.scan(objects, scanner=single_channel_scanner(
            channels={"elevation_deg": [-5.0, -10.0, -20.0]}),
            pose={"position_m": [dx, dy, 1.8]}, output={"frame": "sensor"}))  # fmt: skip
    near, far = clouds
    np.testing.assert_array_equal(far["ring"], near["ring"])
    assert np.abs(far["range_m"] - near["range_m"]).max() < 0.01
    assert np.abs(far["xyz"] - near["xyz"]).max() < 0.01


def test_output_needs_the_disk_space_up_front(ws: Workspace, tmp_path: Path) -> None:
    """A survey whose output cannot fit is refused before scanning, with the figures."""
    survey = ws.survey([{"name": "g", "plane": {"size_m": [100, 100]}, "material": PLAIN}],
                       pose={"position_m": [0, 0, 1.8]}, duration_s=10_000_000.0,
                       revolutions=None)  # fmt: skip
    res = lidar_sim("scan", survey)
    assert res.returncode == 2, res.stderr
    assert "not enough free space" in res.stderr and "Traceback" not in res.stderr


def test_mesh_paths_are_files_not_urls(ws: Workspace) -> None:
    ws.write("scene.yaml", {"objects": [{"name": "m", "mesh": "https://example.com/x.obj"}]})
    with pytest.raises(SimulatorError, match="local file"):
        load_scene(ws.root / "scene.yaml")


def test_property_tests_draw_the_same_examples_on_every_run() -> None:
    """conftest loads the derandomised profile unless exploring was asked for."""
    import os

    from hypothesis import settings as current

    if os.environ.get("LIDAR_SIM_HYPOTHESIS", "fixed") == "fixed":
        assert current.default.derandomize is True
        assert current.default.database is None


def test_every_subpackage_is_packaged() -> None:
    """A plain (not editable) ``pip install`` ships exactly the packages pyproject lists:
    every folder of the package with an ``__init__.py`` must be among them."""
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(REPO).parts)
        for p in (REPO / "simulator").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found - listed == set(), f"not packaged: {sorted(found - listed)}"
