"""Moving sensors: interpolation, pose files, mounts, motion distortion, sequences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
import simulator.sequence
from simulator.config import Pose, TrajectorySpec
from simulator.io.kitti import read_kitti
from simulator.sensor.trajectory import (
    StaticTrajectory,
    matrix_from_quaternion,
    quaternion_from_matrix,
    trajectory_from_survey,
)
from simulator.transforms import rotation_from_rpy_deg

from .conftest import PLAIN, REPO, Ran, Workspace, lidar_sim, single_channel_scanner


def _trajectory(spec: dict, mount: dict | None = None, base: Path = Path(".")):
    return trajectory_from_survey(
        Pose(), TrajectorySpec.model_validate(spec), Pose(**mount) if mount else None, base
    )


def test_waypoints_interpolate_position_linearly_and_rotation_by_slerp() -> None:
    traj = _trajectory(
        {"waypoints": [
            {"time_s": 0.0, "position_m": [0, 0, 0], "rotation_deg": [0, 0, 0]},
            {"time_s": 2.0, "position_m": [4, 2, 0], "rotation_deg": [0, 0, 90]},
            {"time_s": 3.0, "position_m": [4, 2, 1], "rotation_deg": [90, 0, 90]},
        ]}
    )  # fmt: skip
    rot, pos = traj.poses(np.array([-1.0, 0.5, 1.0, 2.0, 2.5, 9.0]))
    np.testing.assert_allclose(pos, [[0, 0, 0], [1, 0.5, 0], [2, 1, 0], [4, 2, 0], [4, 2, 0.5],
                                     [4, 2, 1]], atol=1e-12)  # fmt: skip
    # About one axis, slerp turns at a constant rate: yaw 22.5 deg at a quarter of the way.
    np.testing.assert_allclose(rot[1], rotation_from_rpy_deg([0, 0, 22.5]), atol=1e-12)
    np.testing.assert_allclose(rot[2], rotation_from_rpy_deg([0, 0, 45.0]), atol=1e-12)
    # Between yaw 90 and roll 90 + yaw 90: a roll of 45 after the yaw.
    np.testing.assert_allclose(rot[4], rotation_from_rpy_deg([45, 0, 90]), atol=1e-12)
    np.testing.assert_allclose(rot[0], np.eye(3), atol=1e-12)  # held before the first
    np.testing.assert_allclose(rot[5], rotation_from_rpy_deg([90, 0, 90]), atol=1e-12)


def test_spline_passes_through_waypoints_and_is_smooth() -> None:
    wps = [{"time_s": t, "position_m": [t, np.sin(t), 0.0]} for t in np.linspace(0, 3, 7)]
    traj = _trajectory({"waypoints": wps, "interpolation": "spline"})
    _, at_wp = traj.poses(np.linspace(0, 3, 7))
    np.testing.assert_allclose(at_wp[:, 1], np.sin(np.linspace(0, 3, 7)), atol=1e-12)
    t = np.linspace(0.6, 2.4, 200)
    _, pos = traj.poses(t)
    assert np.abs(pos[:, 1] - np.sin(t)).max() < 5e-3  # far closer than linear
    _, lin = _trajectory({"waypoints": wps}).poses(t)
    assert np.abs(pos[:, 1] - np.sin(t)).max() < 0.3 * np.abs(lin[:, 1] - np.sin(t)).max()


def test_constant_motion_and_mount() -> None:
    traj = _trajectory(
        {"start": {"position_m": [1, 2, 0]}, "velocity_mps": [5, 0, 0], "yaw_rate_deg_s": 90},
        mount={"position_m": [0.5, 0, 1.8], "rotation_deg": [0, 0, 0]},
    )
    rot, pos = traj.poses(np.array([0.0, 1.0]))
    # At t = 1 the platform is at (6, 2, 0) turned 90 deg: the mount's 0.5 m forward is +y.
    np.testing.assert_allclose(pos, [[1.5, 2, 1.8], [6, 2.5, 1.8]], atol=1e-12)
    np.testing.assert_allclose(rot[1], rotation_from_rpy_deg([0, 0, 90]), atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-180, 180), min_size=3, max_size=3))
def test_quaternion_round_trip(rpy: list[float]) -> None:
    rot = rotation_from_rpy_deg(rpy)
    q = quaternion_from_matrix(rot)
    assert abs(np.linalg.norm(q) - 1.0) < 1e-12 and q[3] >= 0
    np.testing.assert_allclose(matrix_from_quaternion(q), rot, atol=1e-12)


def test_tum_and_kitti_pose_files(tmp_path: Path) -> None:
    rots = [rotation_from_rpy_deg([0, 0, yaw]) for yaw in (0.0, 30.0, 60.0)]
    pos = np.array([[0, 0, 1.0], [1, 0, 1.0], [2, 1, 1.0]])
    tum = [
        f"{t} {p[0]} {p[1]} {p[2]} " + " ".join(map(str, quaternion_from_matrix(r)))
        for t, p, r in zip((0.0, 0.1, 0.2), pos, rots, strict=True)
    ]
    (tmp_path / "poses_tum.txt").write_text("# t x y z qx qy qz qw\n" + "\n".join(tum) + "\n")
    kitti = [
        " ".join(map(str, np.hstack([r, p[:, None]]).ravel()))
        for p, r in zip(pos, rots, strict=True)
    ]
    (tmp_path / "poses.txt").write_text("\n".join(kitti) + "\n")
    a = _trajectory({"file": "poses_tum.txt"}, base=tmp_path)
    b = _trajectory({"file": "poses.txt", "period_s": 0.1}, base=tmp_path)
    for traj in (a, b):
        rot, p = traj.poses(np.array([0.1, 0.15]))
        np.testing.assert_allclose(p, [[1, 0, 1], [1.5, 0.5, 1]], atol=1e-12)
        np.testing.assert_allclose(rot[0], rots[1], atol=1e-12)
        np.testing.assert_allclose(rot[1], rotation_from_rpy_deg([0, 0, 45]), atol=1e-12)
    with pytest.raises(simulator.ConfigError, match="period_s"):
        _trajectory({"file": "poses.txt"}, base=tmp_path)
    (tmp_path / "bad.txt").write_text("1 2 3\n")
    with pytest.raises(simulator.ConfigError, match="3 columns; expected 8"):
        _trajectory({"file": "bad.txt"}, base=tmp_path)


def test_pose_and_trajectory_are_exclusive(ws: Workspace) -> None:
    path = ws.survey(
        [{"name": "g", "plane": {"size_m": [10, 10]}, "material": PLAIN}],
        trajectory={"start": {"position_m": [0, 0, 1]}, "velocity_mps": [1, 0, 0]},
    )
    with pytest.raises(simulator.ConfigError, match="not both"):
        simulator.load_survey(path)


def _wall(y_m: float) -> dict:
    """A long wall at y = y_m, facing the origin (-y)."""
    return {"name": "wall", "plane": {"size_m": [400.0, 50.0]}, "position_m": [0.0, y_m, 0.0],
            "rotation_deg": [90.0, 0.0, 0.0], "material": PLAIN}  # fmt: skip


@pytest.fixture
def drive_past(ws: Workspace):
    """A one-channel sensor driving along x at 5 m/s past a wall 10 m to its left."""

    def scan(frame: str) -> simulator.PointCloud:
        return ws.scan(
            [_wall(10.0)],
            scanner=single_channel_scanner(),
            pose=None,
            trajectory={"start": {"position_m": [0, 0, 0]}, "velocity_mps": [5.0, 0.0, 0.0]},
            output={"frame": frame, "diagnostics": True},
        )

    return scan


def test_moving_sensor_distorts_the_wall_by_v_times_t(drive_past) -> None:
    world = drive_past("world")
    raw = drive_past("sensor")
    comp = drive_past("sensor_compensated")
    assert len(world) > 1000
    np.testing.assert_array_equal(raw["pulse_id"], world["pulse_id"])
    np.testing.assert_allclose(world["xyz"][:, 1], 10.0, atol=1e-4)  # the wall is where it is
    t = raw["time_s"]
    # A real sensor reports each point from where it was at its firing: shifted by -v t.
    np.testing.assert_allclose(raw["xyz"][:, 0], world["xyz"][:, 0] - 5.0 * t, atol=2e-4)
    np.testing.assert_allclose(raw["xyz"][:, 1], 10.0, atol=1e-4)
    # Compensated into the sensor frame at t = 0 (identity pose at the origin): the world.
    np.testing.assert_allclose(comp["xyz"], world["xyz"], atol=2e-4)
    assert np.ptp(5.0 * t) > 0.2  # the distortion across the wall is large enough to matter


def _pose_fields(cloud: simulator.PointCloud) -> dict[str, np.ndarray]:
    return {k: cloud[k] for k in cloud.names}


def test_a_motionless_trajectory_reproduces_the_static_scan_bit_for_bit(tmp_path: Path) -> None:
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    static = simulator.scan(survey, ["revolutions=0.3"])
    data = yaml.safe_load(survey.read_text())
    data["scene"] = str(REPO / "scenes" / "farm" / "scene.yaml")
    del data["pose"]
    for traj in (
        {"start": {"position_m": [0, 0, 1.8]}, "velocity_mps": [0, 0, 0]},
        {"waypoints": [{"time_s": 0, "position_m": [0, 0, 1.8]},
                       {"time_s": 5, "position_m": [0, 0, 1.8]}]},
    ):  # fmt: skip
        path = tmp_path / "still.yaml"
        path.write_text(yaml.safe_dump({**data, "trajectory": traj}))
        sim = simulator.Simulation.from_file(path, ["revolutions=0.3"])
        assert isinstance(sim.trajectory, StaticTrajectory)
        moving = sim.run()
        for name in static.names:
            np.testing.assert_array_equal(moving[name], static[name], err_msg=name)


def test_sequence_frames_cut_at_each_revolution(tmp_path: Path) -> None:
    """Frames hold exactly their revolution's pulses; nothing lost or doubled."""
    survey = REPO / "scenes" / "farm" / "drive.yaml"
    sim = simulator.Simulation.from_file(survey, ["duration_s=0.35", "output.diagnostics=true"])
    whole = sim.run()
    summary = simulator.sequence.write_sequence(sim, tmp_path / "seq", "npz")
    assert summary.frames == 4  # 3.5 revolutions: three whole and a half
    per_frame = 1800 * 32
    pulse_ids = []
    for k in range(4):
        frame = simulator.io.npz.read_npz(tmp_path / "seq" / "frames" / f"{k:06d}.npz")
        pid = frame["pulse_id"].astype(np.int64)
        assert pid.min() >= k * per_frame and pid.max() < (k + 1) * per_frame
        assert frame["time_s"].min() >= 0.0 and frame["time_s"].max() < 0.1
        pulse_ids.append(pid)
    np.testing.assert_array_equal(np.concatenate(pulse_ids), whole["pulse_id"])
    tum = np.loadtxt(tmp_path / "seq" / "poses_tum.txt")
    np.testing.assert_allclose(tum[:, 0], [0.0, 0.1, 0.2, 0.3], atol=1e-9)
    np.testing.assert_allclose(tum[:, 1], -25.0 + 5.0 * tum[:, 0], atol=1e-9)
    np.testing.assert_allclose(tum[:, 3], 1.8, atol=1e-12)
    kitti = np.loadtxt(tmp_path / "seq" / "poses_kitti.txt").reshape(-1, 3, 4)
    np.testing.assert_allclose(kitti[:, :, 3], tum[:, 1:4], atol=1e-9)


def test_sequence_command_writes_kitti_frames(tmp_path: Path) -> None:
    res = lidar_sim("sequence", REPO / "scenes/farm/drive.yaml", "-o", tmp_path / "kitti",
                    "--format", "bin", "--set", "duration_s=0.2", "-q")  # fmt: skip
    assert res.returncode == 0, res.stderr
    frames = sorted((tmp_path / "kitti" / "frames").glob("*.bin"))
    assert [f.name for f in frames] == ["000000.bin", "000001.bin"]
    points, labels = read_kitti(frames[0])
    assert labels is not None and len(labels) == len(points) > 10_000
    assert len(np.loadtxt(tmp_path / "kitti" / "times.txt")) == 2


def _drive_sequence(out: Path, *extra: str) -> Ran:
    """``lidar-sim sequence`` of the farm drive's first 0.2 s (two frames) into ``out``."""
    return lidar_sim("sequence", REPO / "scenes/farm/drive.yaml", "-o", out,
                     "--set", "duration_s=0.2", "-q", *extra)  # fmt: skip


@pytest.fixture(scope="module")
def world_and_raw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The drive's sequence in the world frame (``world/``) and the sensor's (``raw/``)."""
    root = tmp_path_factory.mktemp("frames")
    for name, extra in (("world", ["--set", "output.frame=world"]), ("raw", [])):
        res = _drive_sequence(root / name, *extra)
        assert res.returncode == 0, res.stderr
    return root


@pytest.mark.parametrize("how", ["--set", "--compensate"])
def test_sequence_writes_the_frame_the_survey_asks_for(
    tmp_path: Path, how: str, world_and_raw: Path
) -> None:
    """``output.frame=world`` gives world-frame frames, and ``sensor_compensated`` (by key
    or by --compensate) the frame-start sensor frame: each world frame is the compensated
    frame moved by that frame's pose in poses_kitti.txt."""
    compensated = _drive_sequence(
        tmp_path / "comp",
        *(
            ["--compensate"]
            if how == "--compensate"
            else ["--set", "output.frame=sensor_compensated"]
        ),
    )
    assert compensated.returncode == 0, compensated.stderr
    poses = np.loadtxt(world_and_raw / "world" / "poses_kitti.txt").reshape(-1, 3, 4)
    for k in range(2):
        name = f"frames/{k:06d}.npz"
        w = simulator.io.npz.read_npz(world_and_raw / "world" / name)
        c = simulator.io.npz.read_npz(tmp_path / "comp" / name)
        r = simulator.io.npz.read_npz(world_and_raw / "raw" / name)
        assert len(w) == len(c) == len(r) > 10_000
        moved = c["xyz"].astype(np.float64) @ poses[k, :, :3].T + poses[k, :, 3]
        np.testing.assert_allclose(w["xyz"], moved, atol=2e-4)
        assert np.abs(w["xyz"] - r["xyz"]).max() > 1.0  # not the sensor frame
        assert np.abs(c["xyz"] - r["xyz"]).max() > 0.01  # the motion was removed
        np.testing.assert_array_equal(w["time_s"], r["time_s"])


def test_sequence_refuses_a_frame_it_cannot_write(tmp_path: Path) -> None:
    """--compensate with output.frame=world, and world in a ROS 2 bag: exit 2, the survey
    and the key named, nothing written."""
    drive = REPO / "scenes/farm/drive.yaml"
    for extra in (["--compensate"], ["--format", "rosbag2"]):
        out = tmp_path / extra[-1].lstrip("-")
        res = lidar_sim("sequence", drive, "-o", out, "--set", "output.frame=world",
                        "--set", "duration_s=0.2", "-q", *extra)  # fmt: skip
        assert res.returncode == 2, res.stderr
        assert str(drive) in res.stderr and "output.frame" in res.stderr
        assert "Traceback" not in res.stderr
        assert not out.exists() or not any(out.rglob("*.*"))


def test_a_moving_object_is_hit_where_it_is_at_each_pulse(ws: Workspace) -> None:
    """A box driving along y at 10 m/s past a static sensor: every hit on it lies on its
    face at the box's position at that pulse's own time (exact per pulse, no slices)."""
    car = {
        "name": "car", "box": {"size_m": [2.0, 4.0, 2.0]}, "material": PLAIN, "label": "car",
        "trajectory": {"start": {"position_m": [11.0, -20.0, 0.0]}, "velocity_mps": [0, 10, 0]},
    }  # fmt: skip
    still = {"name": "post", "box": {"size_m": [1, 1, 4]}, "position_m": [-10, 0, 0],
             "material": PLAIN}  # fmt: skip
    cloud = ws.scan([car, still], scanner=single_channel_scanner(), revolutions=40,
                    output={"frame": "world", "diagnostics": True})  # fmt: skip
    on_car = cloud["label"] == simulator.labels.label_id("car")
    assert on_car.sum() > 100
    xyz = cloud["xyz"][on_car].astype(np.float64)
    t = cloud["time_s"][on_car]
    centre_y = -20.0 + 10.0 * t
    # In the box's frame at each pulse's time, every point is on its surface.
    local = np.stack([(xyz[:, 0] - 11.0) / 1.0, (xyz[:, 1] - centre_y) / 2.0], axis=1)
    np.testing.assert_allclose(np.abs(local).max(axis=1), 1.0, atol=2e-4)
    assert np.mean(np.abs(xyz[:, 0] - 10.0) < 2e-4) > 0.5  # mostly its near face
    assert np.ptp(centre_y) > 10.0  # it moved a long way during the scan
    assert len(np.unique(cloud["instance"][on_car])) == 1 and cloud["instance"][on_car][0] > 0
    # The static post is unaffected.
    post = ~on_car
    np.testing.assert_allclose(cloud["xyz"][post, 0], -9.5, atol=2e-4)


def test_rosbag2_sequence_reads_back_with_rosbags(tmp_path: Path) -> None:
    """The bag holds one PointCloud2 per frame, with the velodyne driver's fields (asked
    for), and the ground-truth poses as tf."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    from simulator.io.pointcloud2 import BagOptions
    from simulator.io.rosbag import POINT_DTYPE

    survey = REPO / "scenes" / "farm" / "drive.yaml"
    sim = simulator.Simulation.from_file(survey, ["duration_s=0.3"])
    total_points = len(sim.run())
    velodyne = BagOptions(point_layout="velodyne")
    simulator.sequence.write_sequence(sim, tmp_path / "seq", "rosbag2", bag=velodyne)
    ts = get_typestore(Stores.ROS2_HUMBLE)
    clouds, tfs = [], []
    with Reader(tmp_path / "seq" / "bag") as reader:
        for conn, stamp, raw in reader.messages():
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            (clouds if conn.topic == "/points" else tfs).append((stamp, msg))
    assert len(clouds) == len(tfs) == 3
    names = [(f.name, f.offset, f.datatype) for f in clouds[0][1].fields]
    assert names == [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 12, 7),
                     ("ring", 16, 4), ("time", 18, 7)]  # fmt: skip
    assert sum(m.width for _, m in clouds) == total_points
    first = np.frombuffer(clouds[0][1].data.tobytes(), dtype=POINT_DTYPE)
    assert first["ring"].max() <= 31 and first["time"].min() >= 0.0 and first["time"].max() < 0.1
    assert [s for s, _ in clouds] == [0, 100_000_000, 200_000_000]
    x = [m.transforms[0].transform.translation.x for _, m in tfs]
    np.testing.assert_allclose(x, [-25.0, -24.5, -24.0], atol=1e-9)
    assert tfs[0][1].transforms[0].child_frame_id == "lidar"


def test_a_failed_rosbag2_sequence_leaves_no_bag(tmp_path: Path) -> None:
    """The frame sink is aborted on any failure in the loop (here the progress callback)."""
    pytest.importorskip("rosbags")
    sim = simulator.Simulation.from_file(
        REPO / "scenes" / "farm" / "drive.yaml", ["duration_s=0.2"]
    )

    def fail(done: int, total: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulator.sequence.write_sequence(sim, tmp_path / "seq", "rosbag2", progress=fail)
    assert not (tmp_path / "seq" / "bag").exists()
    assert not [p for p in (tmp_path / "seq").rglob("*tmp*")]


def test_pose_lines_are_the_frame_poses_in_their_formats(tmp_path: Path) -> None:
    from simulator.io.poses import kitti_line, tum_line, write_identity_calib, write_times

    sim = simulator.Simulation.from_file(
        REPO / "scenes" / "farm" / "drive.yaml",
        ["duration_s=0.2", "trajectory.yaw_rate_deg_s=90"],
    )
    f = sim.frames()[1]
    # 0.1 s in: 9 deg of yaw, 0.5 m along x at 5 m/s; the mount 1.8 m up. [R | p] row-major.
    c, s = np.cos(np.radians(9.0)), np.sin(np.radians(9.0))
    pose = [c, -s, 0.0, -24.5, s, c, 0.0, -4.0, 0.0, 0.0, 1.0, 1.8]
    assert f.time_s == pytest.approx(0.1)
    assert f.kitti_pose == " ".join(f"{v:.9e}" for v in pose)
    assert kitti_line(f.rotation, f.position_m) == f.kitti_pose
    q = quaternion_from_matrix(f.rotation)
    assert tum_line(f.time_s, f.position_m, q).split() == [
        f"{v:.9f}" for v in [f.time_s, *f.position_m, *q]
    ]
    assert write_times(tmp_path / "a.txt", [0.1, 0.2]).read_text() == "0.100000000\n0.200000000\n"
    assert write_times(tmp_path / "b.txt", [0.1], ".9e").read_text() == "1.000000000e-01\n"
    calib = write_identity_calib(tmp_path / "calib.txt").read_text().splitlines()
    assert calib[0] == "P0: 1 0 0 0 0 1 0 0 0 0 1 0" and calib[-1].startswith("Tr: ")
