"""Bounded memory: the up-front check of a scene's memory, its estimate against a measured
peak, and the sequence writer's frame-at-a-time pose files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simulator
import simulator.sequence
from simulator.bench.load import run_load_bench_apart
from simulator.bench.long_drive import LongDrive, drive_waypoints, run_long_drive
from simulator.errors import SceneMemoryError
from simulator.io.poses import PoseStreams, write_kitti_poses, write_times, write_tum_poses
from simulator.sensor.trajectory import quaternion_from_matrix
from simulator.transforms import rotation_from_rpy_deg
from simulator.world.memory import MEMORY_ENV, available_memory_bytes, scan_memory_bytes

from .conftest import PLAIN, REPO, Workspace, lidar_sim, refused_in_one_line

BOX = [{"name": "box", "box": {"size_m": [2.0, 2.0, 2.0]}, "position_m": [6.0, 0.0, 0.0],
        "material": PLAIN}]  # fmt: skip


def test_a_scene_beyond_the_memory_available_stops_before_the_engine(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One byte short of the estimate stops the scan with exit code 2 and one line naming
    the scene file, its triangles and both figures; the estimate itself is enough."""
    survey = ws.survey(BOX, chunk_pulses=4096)
    needed = scan_memory_bytes(12, 4096, loaded=True)  # a box: 12 triangles
    assert needed == 12 * 80 + 4096 * 400
    monkeypatch.setenv(MEMORY_ENV, str(needed - 1))
    out = ws.root / "out" / "short.npz"
    res = lidar_sim("scan", survey, "-o", out)
    refused_in_one_line(res, f"{ws.root / 'scene.yaml'}: 12 triangles", out)
    line = " ".join(res.stderr.split())  # (the console may wrap the one line)
    assert f"{needed / 2**30:.2f} GiB more" in line
    assert f"but {(needed - 1) / 2**30:.2f} GiB is available ({MEMORY_ENV})" in line
    monkeypatch.setenv(MEMORY_ENV, str(needed))
    assert len(simulator.Simulation.from_file(survey).run()) > 0


def test_the_memory_available_is_read_from_the_system_or_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(MEMORY_ENV, "1.5G")
    assert available_memory_bytes() == (3 * 2**29, MEMORY_ENV)
    monkeypatch.setenv(MEMORY_ENV, "512MiB")
    assert available_memory_bytes() == (512 * 2**20, MEMORY_ENV)
    monkeypatch.setenv(MEMORY_ENV, "lots")
    with pytest.raises(SceneMemoryError, match=f"{MEMORY_ENV}='lots': expected a size"):
        available_memory_bytes()
    monkeypatch.delenv(MEMORY_ENV)
    if not Path("/proc/meminfo").exists():
        pytest.skip("no /proc/meminfo here")
    got, where = available_memory_bytes()
    line = next(s for s in Path("/proc/meminfo").read_text().splitlines()
                if s.startswith("MemAvailable:"))  # fmt: skip
    assert where == "MemAvailable"
    assert abs(got - int(line.split()[1]) * 1024) < 2**28  # (it moves while we read)


def test_the_estimate_is_within_a_factor_of_two_of_a_measured_peak() -> None:
    """A ~1 M-triangle terrain loaded, its engine built and one revolution scanned in a
    fresh process (``lidar-sim bench --load``): the peak resident set over the start
    against the whole scan's estimate."""
    f = run_load_bench_apart(1_000_000)
    measured = (f["peak_rss_mib"] - f["rss_start_mib"]) * 2**20
    estimate = scan_memory_bytes(f["triangles"], 2**18)
    assert f["triangles"] > 990_000
    assert estimate / 2 <= measured <= 2 * estimate, (measured / 2**20, estimate / 2**20)


def test_pose_streams_write_the_bytes_of_the_whole_list_writers(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(0.05, 0.15, 7))
    rotations = np.stack([rotation_from_rpy_deg(rng.uniform(-180, 180, 3)) for _ in times])
    positions = rng.normal(0, 50, (7, 3))
    quaternions = np.stack([quaternion_from_matrix(r) for r in rotations])
    left = tmp_path / "streamed" / ".poses_tum.tmp-0123abcd.txt"  # a killed run's
    left.parent.mkdir()
    left.write_text("1 2 3\n")
    streams = PoseStreams(tmp_path / "streamed")
    for t, r, p, q in zip(times, rotations, positions, quaternions, strict=True):
        streams.add(float(t), r, p, q)
    assert streams.close() == [tmp_path / "streamed" / n for n in PoseStreams.NAMES]
    whole = tmp_path / "whole"
    write_tum_poses(whole / "poses_tum.txt", times, positions, quaternions)
    write_kitti_poses(whole / "poses_kitti.txt", rotations, positions)
    write_times(whole / "times.txt", times)
    for name in PoseStreams.NAMES:
        assert (tmp_path / "streamed" / name).read_bytes() == (whole / name).read_bytes()
    assert sorted(p.name for p in (tmp_path / "streamed").iterdir()) == sorted(PoseStreams.NAMES)
    dropped = PoseStreams(tmp_path / "dropped")
    dropped.add(0.0, rotations[0], positions[0], quaternions[0])
    dropped.abort()
    assert list((tmp_path / "dropped").iterdir()) == []


def test_a_sequence_counts_its_frame_files_and_lists_the_rest(tmp_path: Path) -> None:
    """Frames are made one at a time, the same as :meth:`frames`, and the summary keeps a
    count of the frame files, not a list."""
    sim = simulator.Simulation.from_file(REPO / "scenes" / "farm" / "drive.yaml",
                                         ["duration_s=0.35"])  # fmt: skip
    listed = sim.frames()
    made = list(sim.iter_frames())
    assert sim.frame_count == len(listed) == len(made) == 4
    for a, b in zip(listed, made, strict=True):
        assert (a.index, a.start, a.stop, a.time_s) == (b.index, b.start, b.stop, b.time_s)
        np.testing.assert_array_equal(a.rotation, b.rotation)
        np.testing.assert_array_equal(a.position_m, b.position_m)
    summary = simulator.sequence.write_sequence(sim, tmp_path / "seq", "bin")
    assert summary.frame_files == 8  # .bin and .label a frame
    assert sorted(p.name for p in (tmp_path / "seq" / "frames").iterdir()) == sorted(
        f"{k:06d}.{ext}" for k in range(4) for ext in ("bin", "label")
    )
    assert summary.files == [tmp_path / "seq" / n for n in PoseStreams.NAMES]
    kitti = np.loadtxt(tmp_path / "seq" / "poses_kitti.txt").reshape(-1, 3, 4)
    np.testing.assert_allclose(kitti[:, :, 3], [f.position_m for f in listed], rtol=1e-9)
    assert sorted(p.name for p in (tmp_path / "seq").iterdir()) == sorted(
        ["frames", *PoseStreams.NAMES]
    )


def test_the_long_drive_stays_on_the_street_and_takes_memory_at_each_count(
    tmp_path: Path,
) -> None:
    """The drive turns at both ends of the street, in its lanes, for any length; the bench
    takes its figures at each count asked for."""
    drive = LongDrive()
    sensor = _trajectory_of(drive_waypoints(drive, 3600.0))
    rotation, position = sensor.poses(np.linspace(0.0, 3600.0, 36_001))
    assert np.abs(position[:, 0]).max() <= drive.half_length_m + 3.0
    on_leg = np.abs(position[:, 0]) < drive.half_length_m
    assert set(np.round(np.abs(position[on_leg, 1]), 6)) == {drive.lane_y_m}
    heading = rotation[:, :2, 0]  # the sensor's x axis: where it drives
    step = np.diff(position[:, :2], axis=0)
    moving = on_leg[1:] & on_leg[:-1]
    assert (np.einsum("ij,ij->i", heading[1:][moving], step[moving]) > 0.79).all()  # 8 m/s
    figures = run_long_drive(LongDrive(frames=(2, 5)))
    assert [m["frames"] for m in figures["marks"]] == [2, 5]
    assert figures["frames"] == 5 and figures["points"] > 5 * 10_000
    peaks = [m["peak_rss_mib"] for m in figures["marks"]]
    assert peaks == sorted(peaks) and peaks[0] >= figures["rss_before_mib"] - 1.0
    res = lidar_sim("bench", "--long-drive", "100,x")
    refused_in_one_line(res, "--long-drive: 100,x: expected frame counts", tmp_path / "none")


def _trajectory_of(waypoints: list[dict]):  # type: ignore[no-untyped-def]
    from simulator.config import Pose, TrajectorySpec
    from simulator.sensor.trajectory import trajectory_from_survey

    spec = TrajectorySpec.model_validate({"waypoints": waypoints})
    return trajectory_from_survey(Pose(), spec, None, Path("."))


def test_mesh_headers_count_triangles_and_stop_a_scene_before_its_load(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PLY and binary STL headers give the triangles without a load; a header that counts
    too many stops the scan before trimesh reads the file (here a file with no faces after
    its header, which trimesh could not load)."""
    import trimesh

    from simulator.bench.load import write_load_mesh
    from simulator.world.memory import mesh_file_triangles

    write_load_mesh(ws.root / "ground.ply", 5000)
    ground = trimesh.load(ws.root / "ground.ply")
    assert mesh_file_triangles(ws.root / "ground.ply") == len(ground.faces) == 5000
    ground.export(ws.root / "ground.stl")
    assert mesh_file_triangles(ws.root / "ground.stl") == 5000
    (ws.root / "ground.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    assert mesh_file_triangles(ws.root / "ground.obj") is None  # (counted after the load)
    header = "ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\n"
    header += "property float y\nproperty float z\nelement face 50000000\n"
    header += "property list uchar int vertex_indices\nend_header\n"
    (ws.root / "huge.ply").write_text(header)
    survey = ws.survey([{"name": "huge", "mesh": "huge.ply", "material": PLAIN}])
    whole = scan_memory_bytes(50_000_000, 2**18)
    monkeypatch.setenv(MEMORY_ENV, "1G")
    out = ws.root / "out" / "huge.npz"
    res = lidar_sim("scan", survey, "-o", out)
    refused_in_one_line(res, f"{ws.root / 'scene.yaml'}: 50,000,000 triangles", out)
    line = " ".join(res.stderr.split())
    assert f"its scan needs about {whole / 2**30:.2f} GiB (counted from the mesh" in line
    monkeypatch.setenv(MEMORY_ENV, str(whole))  # enough: now the load itself fails
    res = lidar_sim("scan", survey, "-o", out)
    assert res.returncode == 2 and "GiB" not in res.stderr, res.stderr


def test_a_frames_folder_is_swept_once_not_listed_for_every_frame(tmp_path: Path) -> None:
    """A killed writer's frame temporaries go when the sequence starts; then each frame's
    write leaves the folder unlisted (an hour of frames would list 72,000 files a frame)."""
    from simulator.io.atomic import atomic_path, without_stale_sweep

    frames = tmp_path / "seq" / "frames"
    frames.mkdir(parents=True)
    stale = [frames / ".000001.tmp-0123abcd.bin", frames / ".000001.tmp-0123abcd.label"]
    kept = [frames / ".notes.tmp-0123abcd.txt", frames / "000009.tmp-0123abcd.bin"]
    for p in stale + kept:
        p.write_bytes(b"x")
    sim = simulator.Simulation.from_file(REPO / "scenes" / "farm" / "drive.yaml",
                                         ["duration_s=0.15"])  # fmt: skip
    simulator.sequence.write_sequence(sim, tmp_path / "seq", "bin")
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)
    target = tmp_path / "one.npz"
    left = tmp_path / ".one.tmp-89abcdef.npz"
    left.write_bytes(b"x")
    with without_stale_sweep(), atomic_path(target) as tmp:
        tmp.write_bytes(b"y")
    assert left.exists() and target.read_bytes() == b"y"
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"z")
    assert not left.exists() and target.read_bytes() == b"z"
