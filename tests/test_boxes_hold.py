"""Boxes hold their objects: on a street with cars passing at 15 m/s, cyclists and walkers,
seen from a sensor driving at 6 m/s, every box with 10 or more of its object's points holds
at least 95 % of them within 0.1 m, in raw sweeps (each point in the sensor frame at its
own firing) and in motion-compensated ones. Boxes placed at the frame's reference time, as
before, do not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.world.boxes import Boxes, object_boxes


@pytest.fixture(scope="module")
def street() -> tuple[object, object]:
    """An HDL-64E driving at 6 m/s along a road with traffic at 15 m/s both ways, parked
    cars, two cyclists at 5 m/s and walkers."""
    from simulator.config import SceneSpec, Survey, load_materials, load_scanner
    from simulator.config.pose import Pose, TrajectorySpec
    from simulator.generators.kit import Kit
    from simulator.pipeline.simulation import Simulation
    from simulator.world.scene import build_scene

    kit = Kit(np.random.default_rng(3))
    kit.part("road", {"plane": {"size_m": [120.0, 40.0]}}, (0, 0, 0), "asphalt", "road")
    for k, (x, y, yaw) in enumerate(
        [
            (14.0, -1.8, 0.0),
            (-9.0, -5.2, 0.0),
            (22.0, 1.8, 180.0),
            (-20.0, 5.2, 180.0),
            (4.0, 5.2, 180.0),
        ]
    ):
        kit.car(f"traffic{k}", x, y, yaw, kind="sedan", speed_mps=15.0)
    for k, x in enumerate((-6.0, 8.0, 26.0)):
        kit.car(f"parked{k}", x, -8.0, 0.0, kind="hatchback")
    kit.bicycle("cyclist0", 6.0, 7.5, 180.0, speed_mps=5.0)
    kit.bicycle("cyclist1", -12.0, -7.0, 0.0, speed_mps=5.0)
    kit.person("walker0", 3.0, -10.0, 0.0, speed_mps=1.4)
    kit.person("walker1", -4.0, 10.0, 180.0, speed_mps=1.4)
    kit.person("standing0", 10.0, 9.5, 90.0)
    spec = SceneSpec.model_validate({"objects": kit.objects})
    scene = build_scene(spec, Path("."), load_materials(), source="test")
    scanner = load_scanner("hdl-64e")
    survey = Survey(scanner=scanner.name, scene="(test)", revolutions=2, seed=2,
                    trajectory=TrajectorySpec(start=Pose(position_m=[-3.0, 0.0, 0.0]),
                                              velocity_mps=[6.0, 0.0, 0.0]),
                    mount=Pose(position_m=[0.0, 0.0, 1.8]))  # fmt: skip
    return Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path(".")), scene


def held_shares(boxes: Boxes, cloud: object) -> dict[int, float]:
    """Per box with at least 10 of its object's points: the share of them within 0.1 m of
    the box."""
    inside = boxes.contains(cloud["xyz"], margin_m=0.1)  # type: ignore[index]
    out = {}
    for b, instance in enumerate(boxes.instance):
        own = cloud["instance"] == instance  # type: ignore[index]
        if own.sum() >= 10:
            out[int(instance)] = float(inside[b, own].mean())
    return out


@pytest.mark.parametrize("compensated", [False, True], ids=["raw", "compensated"])
def test_every_box_holds_its_objects_points(street: tuple, compensated: bool) -> None:
    sim, scene = street
    frame = sim.frames()[1]
    cloud = sim.frame_cloud(frame, "sensor_compensated" if compensated else "sensor")
    times = frame.time_s + cloud["time_s"]
    at_scan = object_boxes(
        scene, frame.time_s, (frame.rotation, frame.position_m),
        xyz_m=cloud["xyz"], point_instance=cloud["instance"], point_time_s=times,
        sensor_pose_at=None if compensated else sim.trajectory.pose_at,
    )  # fmt: skip
    shares = held_shares(at_scan, cloud)
    movers = {o.instance for o in scene.objects if o.moving and o.instance}
    assert len(shares) >= 8 and len(movers & set(shares)) >= 5  # (cars, cyclists, walkers)
    assert min(shares.values()) >= 0.95, shares
    # num_points stays the object's own points
    for b, instance in enumerate(at_scan.instance):
        assert at_scan.num_points[b] == int((cloud["instance"] == instance).sum())
    # The boxes of the frame's reference time (and, for raw sweeps, in its sensor frame)
    # miss the fast objects' points: the timing the test guards.
    at_reference = object_boxes(scene, frame.time_s, (frame.rotation, frame.position_m),
                                xyz_m=cloud["xyz"], point_instance=cloud["instance"])  # fmt: skip
    before = held_shares(at_reference, cloud)
    assert min(before[i] for i in movers & set(before)) < 0.5


def test_a_margin_grows_the_box() -> None:
    """``contains`` with a margin holds points up to the margin outside every face."""
    boxes = Boxes(centre_m=np.zeros((1, 3)), size_m=np.array([[4.0, 2.0, 1.0]]),
                  rotation=np.eye(3)[None], yaw_rad=np.zeros(1),
                  label=np.array([10], np.uint16), instance=np.array([1], np.uint16),
                  velocity_mps=np.zeros((1, 3)), num_points=np.zeros(1, np.int64),
                  num_points_in_box=np.zeros(1, np.int64), visibility=np.zeros(1))  # fmt: skip
    points = np.array([[2.05, 0, 0], [0, 1.09, 0], [0, 0, -0.61], [2.11, 0, 0]])
    assert boxes.contains(points).tolist() == [[False, False, False, False]]
    assert boxes.contains(points, margin_m=0.1).tolist() == [[True, True, False, False]]
    assert boxes.contains(points, margin_m=0.12).tolist() == [[True, True, True, True]]
