"""The vehicle under the sensor (``ego:``): boxes fixed in the sensor frame block exactly
the beams whose path crosses them, for a still and for a moving sensor; every other beam
returns what it returned without them, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simulator

from .conftest import REPO, lidar_sim, refused_in_one_line

YARD = REPO / "scenes/calibration/survey.yaml"  # flat ground and a few targets
BASE = ["revolutions=1", "scanner=vlp-16", "output.diagnostics=true"]
#: A car roof under the sensor, reaching 3 m behind it and 1 m ahead.
ROOF = {"size_m": [4.0, 2.0, 0.5], "position_m": [-1.0, 0.0, -0.6], "rotation_deg": [0, 0, 15]}
#: A rack post ahead and to the left, reaching up past the sensor's height.
POST = {"size_m": [0.2, 0.2, 1.5], "position_m": [1.5, 1.0, 0.0], "rotation_deg": [0, 0, 0]}
MOVING = 'trajectory={"start": {"position_m": [0, 0, 1.8]}, "velocity_mps": [12.0, 1.0, 0.0]}'


def ego_override(*boxes: dict) -> str:
    import json

    return f"ego={json.dumps({'boxes': list(boxes)})}"


def crosses(points: np.ndarray, box: dict, grow_m: float) -> np.ndarray:
    """(N,) bool: whether the straight path from the sensor's origin to each point (sensor
    frame) crosses ``box`` grown by ``grow_m`` on every side (slabs in the box's frame)."""
    from simulator.transforms import rotation_from_rpy_deg

    rot = rotation_from_rpy_deg(box["rotation_deg"])
    half = np.asarray(box["size_m"]) / 2 + grow_m
    p = (points.astype(np.float64) - np.asarray(box["position_m"])) @ rot  # in the box frame
    o = -np.asarray(box["position_m"]) @ rot
    d = p - o
    with np.errstate(divide="ignore", invalid="ignore"):
        t1, t2 = (-half - o) / d, (half - o) / d
    t_in = np.nanmax(np.minimum(t1, t2), axis=1)
    t_out = np.nanmin(np.maximum(t1, t2), axis=1)
    return (t_in <= t_out) & (t_out >= 0.0) & (t_in <= 1.0)


@pytest.mark.parametrize("motion", [[], [MOVING]], ids=["still", "moving"])
def test_boxes_block_exactly_the_beams_that_cross_them(motion: list[str]) -> None:
    """Points in the sensor frame: none of the scan with the boxes lies behind a box (its
    path crosses the box shrunk by 5 cm: the beam origin sits a few centimetres off the
    axis), and every pulse of the scan without them whose path misses the boxes grown by
    5 cm returns the same point, bit for bit."""
    plain = simulator.Simulation.from_file(YARD, BASE + motion).run()
    sim = simulator.Simulation.from_file(YARD, BASE + motion + [ego_override(ROOF, POST)])
    assert sim.scene.objects[-1].moving == bool(motion)
    blocked = sim.run()
    xyz = blocked["xyz"]
    for box in (ROOF, POST):
        assert not crosses(xyz, box, -0.05).any()
    free = ~(crosses(plain["xyz"], ROOF, 0.05) | crosses(plain["xyz"], POST, 0.05))
    shadow = (~free).sum()
    assert shadow > 0.08 * len(plain)  # (the roof hides the ground behind: not a vacuous test)
    kept = np.isin(plain["pulse_id"], blocked["pulse_id"])
    assert kept[free].all()
    rows = np.searchsorted(blocked["pulse_id"], plain["pulse_id"][free])
    for name in ("xyz", "intensity", "range_m", "time_s", "label"):
        np.testing.assert_array_equal(blocked[name][rows], plain[name][free])


def test_an_empty_ego_section_changes_nothing() -> None:
    """``ego: {}`` (and boxes: []) adds no object and gives the same bytes as none."""
    plain = simulator.Simulation.from_file(YARD, BASE).run()
    sim = simulator.Simulation.from_file(YARD, [*BASE, "ego={}", "scanner_overrides.ego={}"])
    assert sim.scene.objects[-1].name != "ego"
    same = sim.run()
    for name in plain.fields:
        np.testing.assert_array_equal(same[name], plain[name])


def test_a_scanners_boxes_and_a_surveys_mesh_block_together(tmp_path: Path) -> None:
    """The scanner's own boxes (its bracket) and the survey's mesh (the car, a PLY file
    beside the survey) are one blocker: the scan holds no point behind either."""
    import trimesh

    car = trimesh.creation.box(extents=ROOF["size_m"])
    car.export(tmp_path / "car.ply")
    survey = tmp_path / "survey.yaml"
    survey.write_text(
        f"scanner: vlp-16\nscene: {REPO / 'scenes/calibration/scene.yaml'}\n"
        "pose: {position_m: [0, 0, 1.8]}\nrevolutions: 1\n"
        "output: {diagnostics: true}\n"
        "ego: {mesh: car.ply, mesh_pose: {position_m: [-1.0, 0.0, -0.6], "
        "rotation_deg: [0, 0, 15]}}\n"
        "scanner_overrides: {ego: {boxes: [{size_m: [0.2, 0.2, 1.5], "
        "position_m: [1.5, 1.0, 0.0]}]}}\n"
    )
    cloud = simulator.scan(survey)
    assert not crosses(cloud["xyz"], ROOF, -0.05).any()
    assert not crosses(cloud["xyz"], POST, -0.05).any()
    plain = simulator.Simulation.from_file(YARD, BASE).run()
    assert len(cloud) < len(plain) - 0.08 * len(plain)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ('scanner_overrides.ego={"mesh": "car.ply"}', "a scanner's ego section takes boxes"),
        ('ego={"mesh": "no-such-car.ply"}', "ego.mesh: no such file"),
        ('ego={"boxes": [{"size_m": [1, 0, 1]}]}', "ego.boxes[0].size_m[1]"),
    ],
    ids=["scanner-mesh", "missing-mesh", "flat-box"],
)
def test_a_bad_ego_section_is_refused_in_one_line(
    override: str, fragment: str, tmp_path: Path
) -> None:
    out = tmp_path / "scan.npz"
    res = lidar_sim("scan", YARD, "-o", out, "--set", override)
    refused_in_one_line(res, fragment, out)


def test_a_body_that_returns_gives_its_points_on_its_faces() -> None:
    """With ``returns: true`` the beams that met the roof return from it: every point that
    lies behind the box without it now lies on the box's surface (within the range
    noise), labelled unlabeled, and the others are unchanged."""
    import json

    plain = simulator.Simulation.from_file(YARD, BASE).run()
    roof = {**ROOF, "rotation_deg": [0, 0, 0]}
    ego = f"ego={json.dumps({'boxes': [roof], 'returns': True, 'reflectance': 0.3})}"
    cloud = simulator.Simulation.from_file(YARD, [*BASE, ego]).run()
    on_body = np.isin(cloud["pulse_id"], plain["pulse_id"][crosses(plain["xyz"], roof, -0.05)])
    assert on_body.sum() > 0.05 * len(plain)
    local = np.abs(cloud["xyz"][on_body] - np.asarray(roof["position_m"]))
    half = np.asarray(roof["size_m"]) / 2
    assert (local <= half + 0.05).all()  # on the box
    assert (np.abs(local - half) < 0.05).any(axis=1).all()  # on one of its faces
    assert (cloud["label"][on_body] == 0).all()
