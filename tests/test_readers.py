"""The one reader: real captures (nuScenes, ROS-driver PCD, LAS, Ouster pcap, rosbag2) keep
what their files have, and bad captures get one line and exit code 2."""

from __future__ import annotations

from pathlib import Path

import laspy
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.io.read import ReadOptions, read, read_frames
from simulator.pointcloud import PointCloud

from .conftest import lidar_sim

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
OUSTER = REALDATA / "ouster"
PCAP = OUSTER / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"
OUSTER_META = OUSTER / "OS-1-128_v2.3.0_1024x10.json"
VLP16 = REALDATA / "nebula" / "velodyne-vlp16-1673400472138016708.pcd"


def needs(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} not found: the shared real captures are not in this checkout")


def test_nuscenes_sweep_is_told_from_kitti_by_its_name(tmp_path: Path) -> None:
    """A ``*.pcd.bin`` is nuScenes' 5 columns: intensity stays 0-255 and ring is kept; the
    same bytes named ``.bin`` are not a whole number of KITTI points and say so."""
    rows = np.array([[1, 2, 3, 28, 0], [4, 5, 6, 255, 31], [7, 8, 9, 0, 7]], dtype="<f4")
    sweep = tmp_path / "n008__LIDAR_TOP__1.pcd.bin"
    rows.tofile(sweep)
    cloud = read(sweep)
    np.testing.assert_array_equal(cloud["xyz"], rows[:, :3])
    np.testing.assert_array_equal(cloud["intensity"], [28, 255, 0])
    np.testing.assert_array_equal(cloud["ring"], np.array([0, 31, 7], dtype=np.uint16))
    kitti = tmp_path / "000000.bin"
    rows.tofile(kitti)  # 60 bytes: not 16-byte points
    with pytest.raises(InputError, match=r"000000\.bin: 60 bytes .* KITTI .*pcd\.bin"):
        read(kitti)
    k = np.array([[1, 2, 3, 0.5], [4, 5, 6, 1.0]], dtype="<f4")
    k.tofile(kitti)
    cloud = read(kitti)
    np.testing.assert_array_equal(cloud["intensity"], [127.5, 255.0])
    np.testing.assert_allclose(cloud["range_m"], np.linalg.norm(k[:, :3], axis=1), rtol=1e-7)


def _pcd(path: Path, fields: dict[str, np.ndarray], ascii_: bool, height: int = 1) -> None:
    names = list(fields)
    n = len(next(iter(fields.values())))
    types = {"f": "F", "u": "U", "i": "I"}
    head = (
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\n"
        f"FIELDS {' '.join(names)}\n"
        f"SIZE {' '.join(str(fields[k].dtype.itemsize) for k in names)}\n"
        f"TYPE {' '.join(types[fields[k].dtype.kind] for k in names)}\n"
        f"COUNT {' '.join('1' for _ in names)}\n"
        f"WIDTH {n // height}\nHEIGHT {height}\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\n"
        f"DATA {'ascii' if ascii_ else 'binary'}\n"
    )
    if ascii_:
        lines = [" ".join(repr(fields[k][i].item()) for k in names) for i in range(n)]
        path.write_text(head + "\n".join(lines) + "\n")
    else:
        rec = np.zeros(n, dtype=[(k, fields[k].dtype.newbyteorder("<")) for k in names])
        for k in names:
            rec[k] = fields[k]
        path.write_bytes(head.encode() + rec.tobytes())


@pytest.mark.parametrize("ascii_", [True, False], ids=["ascii", "binary"])
def test_ouster_ros_pcd_keeps_reflectivity_ring_time_range_and_its_grid(
    tmp_path: Path, ascii_: bool
) -> None:
    """An organised PCD as ouster-ros writes it (2 beams x 3 firings, one beam without a
    return at 0 0 0): reflectivity is the intensity, the raw ``intensity`` the signal,
    ``t`` ns and ``range`` mm in seconds and metres, and the grid with its drop-out."""
    f = {
        "x": np.array([1, 0, 3, 4, 5, 6], np.float32),
        "y": np.array([0.5, 0, 0, 0, 0, 0], np.float32),
        "z": np.zeros(6, np.float32),
        "intensity": np.array([10, 0, 30, 40, 50, 60], np.float32),
        "t": np.array([0, 50_000, 100_000, 0, 50_000, 100_000], np.uint32),
        "reflectivity": np.array([7, 0, 9, 11, 13, 255], np.uint16),
        "ring": np.array([0, 0, 0, 1, 1, 1], np.uint16),
        "range": np.array([1118, 0, 3000, 4000, 5000, 6000], np.uint32),
    }
    path = tmp_path / "os.pcd"
    _pcd(path, f, ascii_, height=2)
    cloud = read(path)
    assert len(cloud) == 5 and cloud.meta["beam_grid"] == {"rows": 2, "columns": 3}
    assert cloud.meta["firings_per_ring"] == 3
    np.testing.assert_array_equal(cloud["intensity"], [7, 9, 11, 13, 255])
    np.testing.assert_array_equal(cloud["signal"], [10, 30, 40, 50, 60])
    np.testing.assert_array_equal(cloud["ring"], [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(cloud["column"], [0, 2, 0, 1, 2])
    np.testing.assert_array_equal(cloud["time_s"], [0.0, 1e-4, 0.0, 5e-5, 1e-4])
    np.testing.assert_array_equal(cloud["range_m"], np.float32([1.118, 3, 4, 5, 6]))


def test_velodyne_and_nebula_pcd_fields(tmp_path: Path) -> None:
    """Velodyne's ``time`` is float seconds; nebula's ``channel``, ``distance`` and
    ``return_type`` become ring, range and return number (its dual-return codes: 1 LAST,
    5 LAST_WEAK, 10 LAST_STRONGEST are second returns when first returns are present)."""
    f = {
        "x": np.array([1, 2, 3], np.float32), "y": np.zeros(3, np.float32),
        "z": np.zeros(3, np.float32), "intensity": np.array([1, 2, 3], np.uint8),
        "ring": np.array([15, 0, 3], np.uint16), "time": np.float32([0.0, 0.05, 0.099]),
    }  # fmt: skip
    path = tmp_path / "velodyne.pcd"
    _pcd(path, f, ascii_=False)
    cloud = read(path)
    np.testing.assert_array_equal(cloud["time_s"], np.float32([0.0, 0.05, 0.099]))
    np.testing.assert_array_equal(cloud["ring"], [15, 0, 3])
    g = {
        "x": np.array([1, 2, 3, 4], np.float32), "y": np.zeros(4, np.float32),
        "z": np.zeros(4, np.float32), "channel": np.array([0, 0, 1, 1], np.uint16),
        "return_type": np.array([4, 10, 6, 5], np.uint8),
        "distance": np.float32([1, 2, 3, 4]), "azimuth": np.float32([0.1, 0.1, 0.2, 0.2]),
    }  # fmt: skip
    path = tmp_path / "nebula.pcd"
    _pcd(path, g, ascii_=True)
    cloud = read(path)
    np.testing.assert_array_equal(cloud["return_number"], [1, 2, 1, 2])
    np.testing.assert_array_equal(cloud["range_m"], [1, 2, 3, 4])
    np.testing.assert_array_equal(cloud["azimuth"], np.float32([0.1, 0.1, 0.2, 0.2]))
    g["return_type"] = np.array([3, 3, 3, 3], np.uint8)  # single return (STRONGEST)
    _pcd(path, g, ascii_=True)
    np.testing.assert_array_equal(read(path)["return_number"], [1, 1, 1, 1])


def test_pcd_bad_input_names_the_file_and_what_was_expected(tmp_path: Path) -> None:
    path = tmp_path / "not.pcd"
    path.write_text("hello\nworld\n")
    with pytest.raises(InputError, match=r"not\.pcd: not a PCD file: its header has no FIELDS"):
        read(path)
    f = {"x": np.float32([1, 2]), "y": np.float32([0, 0]), "z": np.float32([0, 0]),
         "ring": np.float32([0.5, 1])}  # fmt: skip
    _pcd(path, f, ascii_=True)
    with pytest.raises(InputError, match=r"field 'ring' holds non-whole values"):
        read(path)
    f = {"x": np.uint8([1, 2]), "y": np.float32([0, 0]), "z": np.float32([0, 0])}
    _pcd(path, f, ascii_=True)
    with pytest.raises(InputError, match=r"field 'x' is of PCD TYPE U; expected a float"):
        read(path)


def test_las_keeps_gps_time_and_every_extra_dimension(tmp_path: Path) -> None:
    """A LAS of a real sweep (its own extra dimensions, a 16-bit intensity): gps_time is
    the time, ``ring`` the ring, any other extra dimension comes through by its name."""
    header = laspy.LasHeader(point_format=6, version="1.4")
    header.add_extra_dims([laspy.ExtraBytesParams(name="ring", type=np.uint8),
                           laspy.ExtraBytesParams(name="azimuth_cdeg", type=np.int32)])  # fmt: skip
    header.scales = np.full(3, 1e-3)
    las = laspy.LasData(header)
    las.x, las.y, las.z = [1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [0.5, 0.5, 0.5]
    las.intensity = np.array([0, 1000, 65535], np.uint16)
    las.gps_time = np.array([1.5e5, 1.5e5 + 0.05, 1.5e5 + 0.1])
    las.return_number = np.array([1, 1, 2], np.uint8)
    las.number_of_returns = np.array([1, 2, 2], np.uint8)
    las.ring = np.array([0, 31, 7], np.uint8)
    las.azimuth_cdeg = np.array([-100, 0, 35999], np.int32)
    path = tmp_path / "sweep.laz"
    las.write(str(path))
    cloud = read(path)
    np.testing.assert_array_equal(cloud["intensity"], [0, 1000, 65535])
    np.testing.assert_array_equal(cloud["time_s"], las.gps_time)
    np.testing.assert_array_equal(cloud["ring"], [0, 31, 7])
    np.testing.assert_array_equal(cloud["azimuth_cdeg"], [-100, 0, 35999])
    np.testing.assert_array_equal(cloud["return_number"], [1, 1, 2])
    np.testing.assert_array_equal(cloud["num_returns"], [1, 2, 2])
    assert cloud.meta["intensity_max"] == 65535


def test_ouster_pcap_is_the_whole_beam_grid_with_its_drop_outs() -> None:
    """Frame by frame, the reader's cloud is ouster-sdk's own: the pixels with RANGE > 0,
    where ``XYZLut`` puts them, REFLECTIVITY as intensity; every other pixel of the
    128 x 1024 grid is a drop-out."""
    needs(PCAP)
    pytest.importorskip("ouster.sdk")
    from ouster.sdk import core, open_source

    source = open_source(str(PCAP), meta=[str(OUSTER_META)])
    lut = core.XYZLut(source.sensor_info[0])
    sdk_frames = [frame[0] for frame in source]
    frames = list(read_frames(PCAP))
    assert len(frames) == len(sdk_frames) == 3
    for scan, cloud in zip(sdk_frames, frames, strict=True):
        rng = scan.field("RANGE")
        hit = rng > 0
        assert len(cloud) == int(hit.sum())
        assert cloud.meta["beam_grid"] == {"rows": 128, "columns": 1024}
        grid = np.zeros((128, 1024), dtype=bool)
        grid[cloud["ring"], cloud["column"]] = True
        np.testing.assert_array_equal(grid, hit)
        np.testing.assert_array_equal(cloud["xyz"], lut(scan)[hit].astype(np.float32))
        np.testing.assert_array_equal(cloud["intensity"], scan.field("REFLECTIVITY")[hit])
        np.testing.assert_array_equal(cloud["range_m"], np.float32(rng[hit] * 1e-3))
    drop = 1.0 - len(frames[0]) / (128 * 1024)
    print(f"OS1-128 frame 0: {len(frames[0]):,} returns, {drop:.1%} of the beams dropped")
    assert 0.17 < drop < 0.19
    # --frame picks the frame, and one that is not there is a clear message.
    assert len(read(PCAP, ReadOptions(frame=2))) == len(frames[2])
    with pytest.raises(InputError, match=r"has 3 frame\(s\); frame 3 is not there"):
        read(PCAP, ReadOptions(frame=3))


def test_pcap_without_its_metadata_says_how_to_give_it(tmp_path: Path) -> None:
    needs(PCAP)
    lonely = tmp_path / "capture.pcap"
    lonely.symlink_to(PCAP)
    with pytest.raises(InputError, match=r"capture\.pcap: no sensor metadata .* --meta FILE"):
        read(lonely)
    assert len(read(lonely, ReadOptions(meta=OUSTER_META))) == len(read(PCAP))


def test_rosbag2_topic_frame_by_frame(tmp_path: Path) -> None:
    """A bag written as the ROS 2 velodyne driver lays points out reads back exactly, frame
    by frame; a topic that is not there or is no PointCloud2 names what there is."""
    from simulator.io.pointcloud2 import BagOptions
    from simulator.io.rosbag import RosbagWriter

    clouds = []
    for k in range(3):
        n = 4 + k
        clouds.append(PointCloud({
            "xyz": np.arange(3 * n, dtype=np.float32).reshape(n, 3) + k,
            "intensity": np.arange(n, dtype=np.float32) * 10,
            "ring": np.arange(n, dtype=np.uint16),
            "time_s": np.linspace(0, 0.09, n),
        }))  # fmt: skip
    bag = tmp_path / "bag"
    writer = RosbagWriter(bag, BagOptions(point_layout="velodyne"))
    for k, cloud in enumerate(clouds):
        writer.write_frame(cloud, 0.1 * k, np.eye(3), np.zeros(3), np.array([0, 0, 0, 1.0]))
    writer.close()
    frames = list(read_frames(bag, ReadOptions(topic="/points")))
    assert len(frames) == 3
    for cloud, back in zip(clouds, frames, strict=True):
        np.testing.assert_array_equal(back["xyz"], cloud["xyz"])
        np.testing.assert_array_equal(back["intensity"], cloud["intensity"])
        np.testing.assert_array_equal(back["ring"], cloud["ring"])
        np.testing.assert_array_equal(back["time_s"], cloud["time_s"].astype(np.float32))
    assert [f.meta["stamp_ns"] for f in frames] == [0, 100_000_000, 200_000_000]
    assert len(read(bag, ReadOptions(frame=2))) == 6  # the one PointCloud2 topic
    with pytest.raises(InputError, match=r"no topic '/lidar'; the bag has /points, /tf"):
        read(bag, ReadOptions(topic="/lidar"))
    with pytest.raises(InputError, match=r"topic /tf carries tf2_msgs/msg/TFMessage"):
        read(bag, ReadOptions(topic="/tf"))


def test_real_vlp16_pcd_keeps_its_channels_and_dual_returns() -> None:
    needs(VLP16)
    cloud = read(VLP16)
    assert len(cloud) == 14_831
    assert sorted(np.unique(cloud["ring"]).tolist()) == list(range(1, 16))
    counts = np.bincount(cloud["return_number"], minlength=3)
    print(f"VLP-16 frame: returns by number {counts[1:].tolist()}")
    assert counts.tolist() == [0, 14_643, 188]
    np.testing.assert_allclose(
        cloud["range_m"], np.linalg.norm(cloud["xyz"], axis=1), rtol=0, atol=2e-3
    )


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.write_text("x"), "cannot read '.txt'"),
        (lambda p: None, "file not found"),
    ],
    ids=["unknown", "missing"],
)
def test_command_on_a_bad_capture_is_one_line_and_exit_2(tmp_path: Path, make, expected) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "cloud.txt"
    make(path)
    out = tmp_path / "x.png"
    res = lidar_sim("render", path, "-o", out)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert expected in res.stderr and str(path) in res.stderr.replace("\n", "")
    assert not out.exists()
