"""What the README promises and no other test ran: ``report`` and ``rangeimage --npy`` from
the command line, ``sequence`` to every frame format and to a ROS 2 bag from the command
line, ``render`` of a survey in fog, dust as a soft target, the receiver's near field
(``overlap_m``, ``beam_exit_diameter_mm``). Small scenes, a fraction of a revolution."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.io.read import read

from .conftest import PLAIN, Workspace, lidar_sim, single_channel_scanner

WALL = {"name": "wall", "box": {"size_m": [0.4, 30.0, 6.0]}, "position_m": [25.0, 0.0, 3.0],
        "material": "building_wall"}  # fmt: skip


@pytest.fixture(scope="module")
def slope(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tilted plane of k = 0.6 (no micro-slope) under a four-channel scanner."""
    ws = Workspace(tmp_path_factory.mktemp("slope"))
    material = {**PLAIN, "reflectance": 0.4, "minnaert_k": 0.6}
    plane = {"name": "slope", "plane": {"size_m": [200, 200]}, "position_m": [0, 0, -2],
             "rotation_deg": [0, 25, 0], "material": material}  # fmt: skip
    scanner = single_channel_scanner(channels={"elevation_deg": [-10.0, -20.0, -30.0, -45.0]})
    return ws.survey([plane], scanner=scanner)


def test_report_command_fits_the_exponent_and_writes_the_page(slope: Path, tmp_path: Path) -> None:
    """``lidar-sim report SURVEY -o DIR``: the fitted Minnaert k of the slope (0.6 exactly,
    nothing saturated), its point count, and the page with its plots."""
    res = lidar_sim("report", slope, "-o", tmp_path / "rep")
    assert res.returncode == 0, res.stderr
    cloud = simulator.scan(slope)
    line = f"slope:inline: {len(cloud):,} points, k 0.6, fitted 0.600 from {len(cloud):,}"
    assert line in res.stdout, res.stdout
    assert f"wrote {tmp_path / 'rep' / 'report.html'}" in res.stdout
    page = (tmp_path / "rep" / "report.html").read_text()
    for image in ("intensity_vs_incidence.png", "detection.png", "points_per_ring.png"):
        assert (tmp_path / "rep" / image).stat().st_size > 5000 and image in page


def test_rangeimage_command_writes_the_npy_stack(slope: Path, tmp_path: Path) -> None:
    """``lidar-sim rangeimage CLOUD -o PNG --width 90 --npy``: beside the PNG, the (6, rings,
    width) float32 stack of the range image's channels, as range_image computes them."""
    from simulator.rangeimage import CHANNELS, range_image

    cloud = simulator.scan(slope)
    simulator.write(cloud, tmp_path / "slope.npz")
    res = lidar_sim("rangeimage", tmp_path / "slope.npz", "-o", tmp_path / "ri.png",
                    "--width", "90", "--npy")  # fmt: skip
    assert res.returncode == 0, res.stderr
    npy = sorted(tmp_path.glob("ri*.npy"))
    assert len(npy) == 1 and f"wrote {npy[0]}" in res.stdout
    assert (tmp_path / "ri.png").stat().st_size > 1000
    stack = np.load(npy[0])
    assert stack.shape == (6, 4, 90) and stack.dtype == np.float32
    want = range_image(read(tmp_path / "slope.npz"), width=90)
    for k, channel in enumerate(CHANNELS):
        np.testing.assert_array_equal(stack[k], want[channel], err_msg=channel)
    assert np.sum(stack[0] > 0) > 300  # most of the 360 pixels hold a point


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two revolutions of a one-channel scanner walking past a wall: two frames."""
    ws = Workspace(tmp_path_factory.mktemp("walk"))
    ground = {"name": "ground", "plane": {"size_m": [80, 80]}, "material": "asphalt"}
    scanner = single_channel_scanner(channels={"elevation_deg": [-5.0, 0.0]})
    return ws.survey([ground, WALL], scanner=scanner, pose=None, revolutions=2,
                     trajectory={"start": {"position_m": [0, 0, 1.8]},
                                 "velocity_mps": [1.5, 0, 0]})  # fmt: skip


def test_sequence_command_writes_every_frame_format(walk: Path, tmp_path: Path) -> None:
    """``lidar-sim sequence --format F`` for pcd, ply, las and laz: the npz frames' points
    (LAS to its 0.1 mm scale and whole-number intensities), frame by frame."""
    res = lidar_sim("sequence", walk, "-o", tmp_path / "npz", "--format", "npz", "-q")
    assert res.returncode == 0, res.stderr
    frames = sorted((tmp_path / "npz" / "frames").glob("*.npz"))
    assert [f.name for f in frames] == ["000000.npz", "000001.npz"]
    for fmt in ("pcd", "ply", "las", "laz"):
        res = lidar_sim("sequence", walk, "-o", tmp_path / fmt, "--format", fmt, "-q")
        assert res.returncode == 0, res.stderr
        for ref_path in frames:
            ref = read(ref_path)
            got = read(tmp_path / fmt / "frames" / ref_path.with_suffix(f".{fmt}").name)
            assert len(got) == len(ref) > 1000, fmt
            atol = 6e-5 if fmt in ("las", "laz") else 0.0
            np.testing.assert_allclose(got["xyz"], ref["xyz"], rtol=0, atol=atol, err_msg=fmt)
            np.testing.assert_array_equal(got["ring"], ref["ring"], err_msg=fmt)
            # LAS stores the reflectivity rounded to a whole number
            want = np.rint(ref["intensity"]) if fmt in ("las", "laz") else ref["intensity"]
            np.testing.assert_array_equal(got["intensity"], want, err_msg=fmt)


def test_sequence_command_writes_a_ros2_bag(walk: Path, tmp_path: Path) -> None:
    """``lidar-sim sequence --format rosbag2``: one PointCloud2 a frame, holding the frame's
    points."""
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    sensor = ["--set", "output.frame=sensor"]  # a bag holds sensor-frame clouds
    res = lidar_sim("sequence", walk, "-o", tmp_path / "seq", "--format", "rosbag2", "-q", *sensor)
    assert res.returncode == 0, res.stderr
    sim = simulator.Simulation.from_file(walk, ["output.frame=sensor"])
    want = [len(sim.frame_cloud(f)) for f in sim.frames()]
    ts = get_typestore(Stores.ROS2_HUMBLE)
    counts = []
    with Reader(tmp_path / "seq" / "bag") as reader:
        for conn, _, raw in reader.messages():
            if conn.msgtype == "sensor_msgs/msg/PointCloud2":
                msg = ts.deserialize_cdr(raw, conn.msgtype)
                counts.append(msg.width * msg.height)
    assert counts == want and len(want) == 2 and min(want) > 1000


def test_render_of_a_survey_in_fog(tmp_path: Path) -> None:
    """``lidar-sim render SURVEY --set weather.fog.visibility_m=...``: the survey is scanned in
    fog and drawn; the picture is not the clear one. (A child process: the offscreen
    renderer never lives in the test process.)"""
    ws = Workspace(tmp_path)
    ground = {"name": "ground", "plane": {"size_m": [80, 80]}, "material": "asphalt"}
    survey = ws.survey([ground, WALL], pose={"position_m": [0, 0, 1.8]}, revolutions=0.2)
    code = (
        "import sys\nfrom simulator.cli import main\n"
        "fog = ['--set', 'weather.fog.visibility_m=40']\n"
        "for out, extra in ((sys.argv[2], []), (sys.argv[3], fog)):\n"
        "    try:\n"
        "        main(['render', sys.argv[1], '-o', out, '--width', '240', '--height', '160',\n"
        "              '--view', 'bev', *extra])\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
    )  # fmt: skip
    clear, fog = tmp_path / "clear.png", tmp_path / "fog.png"
    res = subprocess.run([sys.executable, "-c", code, str(survey), str(clear), str(fog)],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr
    import matplotlib.pyplot as plt

    a, b = plt.imread(clear), plt.imread(fog)
    assert a.shape == b.shape and a.shape[0] == 160
    assert np.abs(a - b).sum() > 100  # the fog's points and the hidden wall


@pytest.fixture(scope="module")
def street_wall(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = Workspace(tmp_path_factory.mktemp("wall"))
    return ws.survey([WALL], pose={"position_m": [0, 0, 1.8]}, revolutions=0.2,
                     output={"frame": "sensor", "diagnostics": True})  # fmt: skip


def _medium(cloud: simulator.PointCloud) -> np.ndarray:
    return cloud["object_id"] > 0  # the wall is object 0; the media come after it


def test_dust_is_a_soft_target_brighter_than_fog(street_wall: Path) -> None:
    """Dust returns light as fog does (outlier points, instance 0, its own object id after
    fog's), with a lidar ratio of 45 sr against fog's 85: at the same visibility (100 m)
    its backscatter is nearly twice fog's, so more pulses return from the dust than from the
    fog, and fewer reach the wall."""
    fog = simulator.scan(street_wall, ["weather.fog.visibility_m=100"])
    dust = simulator.scan(street_wall, ["weather.dust.visibility_m=100"])
    for cloud, object_id in ((fog, 1), (dust, 2)):  # fog, dust, rain, snow after the scene
        medium = _medium(cloud)
        assert np.all(cloud["object_id"][medium] == object_id)
        assert np.all(cloud["label"][medium] == 1) and np.all(cloud["instance"][medium] == 0)
        assert np.all(cloud["range_m"][medium] < 5.0)  # the near field's peak
    assert _medium(dust).sum() > _medium(fog).sum() + 300
    assert np.sum(~_medium(dust)) < np.sum(~_medium(fog)) - 300


def test_the_overlap_and_the_beam_exit_set_where_fog_returns(street_wall: Path) -> None:
    """Dense fog (30 m): every pulse returns from the fog at the near-field peak, 1.7-1.9 m
    for the Helios' default geometric overlap. ``overlap_m: [5, 6]`` (a linear ramp) moves
    it behind 5 m; a 40 mm exit beam (against 10 mm) meets the receiver's field of view
    sooner, so the peak comes nearer."""
    fog = ["weather.fog.visibility_m=30"]
    default = simulator.scan(street_wall, fog)
    ramp = simulator.scan(street_wall, [*fog, "scanner_overrides.overlap_m=[5, 6]"])
    wide = simulator.scan(street_wall, [*fog, "scanner_overrides.beam_exit_diameter_mm=40"])
    for cloud in (default, ramp, wide):
        assert np.all(_medium(cloud)) and len(cloud) == 11_520
    assert default["range_m"].min() > 1.6 and default["range_m"].max() < 2.0
    assert ramp["range_m"].min() >= 5.0
    assert wide["range_m"].max() < default["range_m"].min()
