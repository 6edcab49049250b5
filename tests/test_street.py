"""The generated street: parts, labels and instances, a scan's classes, walkers' swing, and
the moving objects' cull (exactly what casting every ray into every moving part gives)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from simulator.backend import Backend
from simulator.config import (
    GeneratorRef,
    Pose,
    SceneSpec,
    Survey,
    TrajectorySpec,
    load_materials,
    load_scanner,
)
from simulator.errors import ConfigError
from simulator.generators import street
from simulator.labels import THING_LABELS, label_id
from simulator.pipeline.simulation import Simulation
from simulator.sensor.trajectory import trajectory_from_spec
from simulator.world.raycast import RayEngine
from simulator.world.scene import build_scene


@pytest.fixture(scope="module")
def scene():  # type: ignore[no-untyped-def]
    spec = SceneSpec(generator=GeneratorRef(name="street", seed=4))
    return build_scene(spec, Path("."), load_materials(), source="street")


def test_the_same_seed_gives_the_same_street_and_another_a_different_one() -> None:
    assert street(4) == street(4)
    a, b = street(4), street(5)
    assert a != b and len(a["objects"]) != len(b["objects"])


def test_the_parts_of_one_countable_object_share_one_instance_and_no_other(scene) -> None:  # type: ignore[no-untyped-def]
    owners: dict[int, set[str]] = defaultdict(set)
    for obj in scene.objects:
        if obj.label in THING_LABELS:
            assert obj.instance > 0, obj.name
            owners[obj.instance].add(obj.name.split("/")[0])
        else:
            assert obj.instance == 0, obj.name
    assert all(len(names) == 1 for names in owners.values())  # one object per id
    kinds = {next(iter(n)).rstrip("0123456789_-") for n in owners.values()}
    assert {"parked", "traffic", "walker"} <= kinds
    # a car is made of a body, glass, a roof, seats and four wheels
    car = [o for o in scene.objects if o.name.startswith("traffic0/")]
    assert sorted(o.name.split("/")[1] for o in car) == sorted(
        ["body", "glass", "roof", "seats", "wheel0", "wheel1", "wheel2", "wheel3"]
    )
    assert {scene.materials[o.material].transmittance > 0 for o in car} == {True, False}


def test_a_drive_down_the_street_sees_its_classes(scene) -> None:  # type: ignore[no-untyped-def]
    survey = Survey(
        scanner="hdl-64e", scene="(generated)", revolutions=2,
        trajectory=TrajectorySpec(start=Pose(position_m=[-20.0, -1.6, 0.0]),
                                  velocity_mps=[8.0, 0.0, 0.0]),
        mount=Pose(position_m=[0.0, 0.0, 1.73]),
    )  # fmt: skip
    scanner = load_scanner("hdl-64e", {"return_mode": "dual"})
    sim = Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path("."))
    cloud = sim.run()
    seen = set(np.unique(cloud["label"]).tolist())
    for name in (
        "road",
        "sidewalk",
        "building",
        "car",
        "vegetation",
        "trunk",
        "terrain",
        "pole",
        "traffic-sign",
        "lane-marking",
        "moving-person",
        "other-object",
    ):
        assert label_id(name) in seen, name
    # through the windows: a weak echo of the glass and a stronger one of the room behind
    building = cloud["label"] == label_id("building")
    two = building & (cloud["num_returns"] == 2)
    first, last = two & (cloud["return_number"] == 1), two & (cloud["return_number"] == 2)
    assert first.sum() > 100 and last.sum() > 100
    assert np.median(cloud["intensity"][first]) < np.median(cloud["intensity"][last])


def test_a_walkers_leg_swings_about_the_hip_by_its_amplitude() -> None:
    period, amp = 1.2, 25.0
    spec = TrajectorySpec.model_validate({
        "start": {"position_m": [0.0, 0.0, 0.9]}, "velocity_mps": [1.4, 0.0, 0.0],
        "swing": {"axis": "pitch", "amplitude_deg": amp, "period_s": period},
    })  # fmt: skip
    traj = trajectory_from_spec(spec, Path("."))
    t = np.array([0.0, period / 4, period / 2, 3 * period / 4])
    rot, pos = traj.poses(t)
    foot = np.einsum("nij,j->ni", rot, [0.0, 0.0, -0.9]) + pos  # the foot below the hip
    leg = foot - pos
    pitch = np.degrees(np.arctan2(-leg[:, 0], -leg[:, 2]))  # a pitch of +a moves the foot back
    np.testing.assert_allclose(pitch, [0.0, amp, 0.0, -amp], atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(leg, axis=1), 0.9)
    np.testing.assert_allclose(pos[:, 0], 1.4 * t)
    np.testing.assert_allclose(foot[:, 1], 0.0, atol=1e-12)  # a pitch swing stays in x-z


def test_the_cull_of_moving_parts_changes_no_hit(scene, backend: Backend) -> None:  # type: ignore[no-untyped-def]
    """The engine casts only the rays that can reach a moving group's box swept over
    their time slot; casting every ray into every moving part in its own frame gives the
    same nearest hits (with the cull's specification and its kernel)."""
    import open3d as o3d

    engine = RayEngine(scene, cull=backend.rays_into_boxes)
    rng = np.random.default_rng(0)
    n = 40000
    origins = np.array([0.0, -1.6, 1.7]) + np.outer(np.linspace(0, 4, n), [1.0, 0, 0])
    d = rng.normal(size=(n, 3)) * [1, 1, 0.15]
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    times = np.linspace(0.0, 0.5, n)
    hits = engine.cast(origins, d, times)
    static = [o for o in scene.objects if not o.moving]
    ref = o3d.t.geometry.RaycastingScene()
    for o in static:
        ref.add_triangles(
            o3d.core.Tensor((o.vertices_m - engine.origin_shift_m).astype(np.float32)),
            o3d.core.Tensor(o.faces.astype(np.uint32)),
        )
    best = ref.cast_rays(o3d.core.Tensor(engine.rays(origins, d)))["t_hit"].numpy().copy()
    moving = [o for o in scene.objects if o.moving]
    assert len(moving) > 20
    for o in moving:  # brute force: every ray into every moving part alone
        rc = o3d.t.geometry.RaycastingScene()
        rc.add_triangles(o3d.core.Tensor(o.vertices_m.astype(np.float32)),
                         o3d.core.Tensor(o.faces.astype(np.uint32)))  # fmt: skip
        rot, pos = o.trajectory.poses(times)
        lo = np.einsum("nji,nj->ni", rot, origins - pos)
        ld = np.einsum("nji,nj->ni", rot, d)
        t = rc.cast_rays(o3d.core.Tensor(np.hstack([lo, ld]).astype(np.float32)))["t_hit"]
        best = np.minimum(best, t.numpy())
    hit_moving = np.isin(hits.object_index, [scene.objects.index(o) for o in moving])
    assert hit_moving.sum() > 100
    # the engine's float32 frame differs from this one by a shift: agree to 0.1 mm
    np.testing.assert_allclose(hits.range_m, best, atol=1e-4, rtol=0)


def test_an_unknown_generator_is_named() -> None:
    spec = SceneSpec(generator=GeneratorRef(name="moon_base"))
    with pytest.raises(ConfigError, match=r"generator\.name: unknown generator 'moon_base'"):
        build_scene(spec, Path("."), load_materials(), source="s.yaml")


def test_a_porous_crown_gives_multiple_returns() -> None:
    """scenes/tree: the leaves, the inner crown and the wall behind return from one pulse."""
    import simulator

    root = Path(__file__).resolve().parents[1]
    cloud = simulator.scan(root / "scenes" / "tree" / "survey.yaml")
    veg, wall = cloud["label"] == label_id("vegetation"), cloud["label"] == label_id("building")
    n = cloud["return_number"]
    assert (veg & (n == 1)).sum() > 500 and (veg & (n == 2)).sum() > 500
    assert (wall & (n == 3)).sum() > 200  # the wall through two crown surfaces
    # the third returns are the farthest of their pulses
    assert (cloud["num_returns"][n == 3] == 3).all()
