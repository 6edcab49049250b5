"""The reader's one check (:func:`simulator.io.read.check_values`): every format's frames go
through it, values no scanner records are refused in one line naming the file, each bad
field, how many points and an example, exit code 2 through any command; the real captures
and the simulator's own outputs pass."""

from __future__ import annotations

from pathlib import Path

import laspy
import numpy as np
import pytest

from simulator.config.scanner import RasterSpec, ScannerConfig
from simulator.errors import InputError
from simulator.io import write
from simulator.io.labels import pack_labels
from simulator.io.read import (
    INTENSITY_LIMIT,
    RANGE_LIMIT_M,
    RING_LIMIT,
    ReadOptions,
    check_values,
    read,
    read_frames,
)
from simulator.pointcloud import PointCloud

from .conftest import lidar_sim
from .test_readers import OUSTER, PCAP, REALDATA, _pcd, needs

N = 40


def record(n: int = N) -> PointCloud:
    """A small cloud of every record field, values as a scan has them."""
    k = np.arange(n)
    xyz = np.stack([5.0 + k, 0.5 * k, np.full(n, -1.5)], axis=1).astype(np.float32)
    return PointCloud(
        {
            "xyz": xyz,
            "intensity": (k % 200).astype(np.float32),
            "range_m": np.linalg.norm(xyz, axis=1).astype(np.float32),
            "ring": (k % 32).astype(np.uint16),
            "time_s": k * 1e-4,
            "return_number": np.ones(n, np.uint8),
            "num_returns": np.ones(n, np.uint8),
            "label": np.where(k % 2, 40, 50).astype(np.uint16),
            "instance": np.zeros(n, np.uint16),
        }
    )


def with_value(cloud: PointCloud, field: str, index: int, value: object) -> PointCloud:
    values = cloud[field].copy()
    values[index] = value
    return PointCloud({**cloud.fields, field: values}, dict(cloud.meta))


def test_the_limits_are_the_scanner_configs() -> None:
    """The reader takes every value a scanner of this simulator can write: its ranges, its
    intensity scale and its rows are the config's largest."""

    def le(model: type, name: str) -> float:
        return next(m.le for m in model.model_fields[name].metadata if hasattr(m, "le"))

    assert le(ScannerConfig, "range_max_m") == RANGE_LIMIT_M
    assert le(ScannerConfig, "intensity_max") == INTENSITY_LIMIT
    assert le(RasterSpec, "rows") == RING_LIMIT


BAD = [
    ("xyz", (3, 1), np.inf, "xyz: 1 of 40 points non-finite or beyond 1e+08 m (e.g. inf)"),
    ("xyz", (3, 0), 1e30, "xyz: 1 of 40 points non-finite or beyond 1e+08 m (e.g. 1e+30)"),
    ("xyz", (3, 2), np.nan, "xyz: 1 of 40 points non-finite or beyond 1e+08 m (e.g. nan)"),
    ("range_m", 3, 1e30, "range_m: 1 of 40 points negative, non-finite or beyond 100000 m"),
    ("range_m", 3, -0.5, "range_m: 1 of 40 points negative, non-finite or beyond 100000 m"),
    ("intensity", 3, np.inf, "intensity: 1 of 40 points negative, non-finite or above 65535"),
    ("intensity", 3, -1.0, "intensity: 1 of 40 points negative, non-finite or above 65535"),
    ("time_s", 3, np.nan, "time_s: 1 of 40 points non-finite (e.g. nan)"),
    ("time_s", 3, -np.inf, "time_s: 1 of 40 points non-finite (e.g. -inf)"),
    ("ring", 3, 48906, "ring: 1 of 40 points above 4095 (e.g. 48906)"),
    ("label", 3, 45106, "label: 1 of 40 points not SemanticKITTI ids (e.g. 45106)"),
]


@pytest.mark.parametrize(
    ("field", "index", "value", "said"), BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD]
)
@pytest.mark.parametrize("ext", [".npz", ".pcd", ".ply"])
def test_one_bad_value_is_one_line_naming_the_file_and_field(
    tmp_path: Path, ext: str, field: str, index: object, value: object, said: str
) -> None:
    path = tmp_path / f"cloud{ext}"
    start = f"{path}: values no scanner records"
    if ext == ".ply" and value == np.inf:  # Open3D's PLY writer stops there: a cut file
        start, said = f"{path}: the header says 40 vertices", "(a truncated file)"
    write(with_value(record(), field, index, value), path)  # type: ignore[arg-type]
    with pytest.raises(InputError) as info:
        read(path)
    message = str(info.value)
    assert message.startswith(start) and said in message
    assert "\n" not in message


def test_the_good_record_reads_in_every_format(tmp_path: Path) -> None:
    """The check refuses nothing a scan writes (every format, the extreme legal values)."""
    cloud = with_value(record(), "ring", 0, RING_LIMIT - 1)
    cloud = with_value(cloud, "intensity", 1, 255.0)
    cloud = with_value(cloud, "label", 2, 259)
    for ext in (".npz", ".pcd", ".ply", ".las", ".bin"):
        path = tmp_path / f"ok{ext}"
        write(cloud, path)
        assert len(read(path)) == N, ext


def test_a_truncated_ply_is_refused(tmp_path: Path) -> None:
    """A binary PLY cut short (Open3D's writer stops at an infinite value and leaves such a
    file) was read with garbage or as an empty cloud."""
    path = tmp_path / "cut.ply"
    write(record(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(
        InputError, match=r"cut\.ply: the header says 40 vertices of 36 bytes, the file holds 37 "
    ):
        read(path)
    path.write_text("hello\n")
    with pytest.raises(InputError, match=r"cut\.ply: not a PLY file"):
        read(path)


def test_every_bad_field_is_said_on_one_line(tmp_path: Path) -> None:
    cloud = with_value(record(), "ring", 7, 5000)
    cloud = with_value(cloud, "ring", 8, 6000)
    cloud = with_value(cloud, "label", 9, 3)
    with pytest.raises(InputError) as info:
        check_values(cloud, "scan.pcd")
    assert str(info.value) == (
        "scan.pcd: values no scanner records (a damaged file, or not the format its name "
        "says): ring: 2 of 40 points above 4095 (e.g. 5000); label: 1 of 40 points not "
        "SemanticKITTI ids (e.g. 3)"
    )


def test_an_npz_without_coordinates_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "no_xyz.npz"
    np.savez(path, intensity=np.float32([1, 2]))
    with pytest.raises(InputError, match=r"no_xyz\.npz: no xyz field; .* \(it has intensity\)"):
        read(path)


def test_a_pcd_with_corrupted_data_bytes_is_refused_by_every_command(tmp_path: Path) -> None:
    """A scan's binary PCD with 600 data bytes overwritten (once drawn by ``render`` and
    ``rangeimage`` with ring 48906 and label 45106): one line and exit code 2."""
    path = tmp_path / "scan.pcd"
    write(record(400), path)
    data = bytearray(path.read_bytes())
    start = data.index(b"DATA binary\n") + len(b"DATA binary\n")
    rng = np.random.default_rng(44)
    data[start + 4000 : start + 4600] = rng.integers(0, 256, 600, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"ring: \d+ of 400 points above 4095") as info:
        read(path)
    assert "label: " in str(info.value)
    for command in ("render", "rangeimage"):
        out = tmp_path / f"{command}.png"
        res = lidar_sim(command, path, "-o", out)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert lines[0].startswith(f"error: {path}: values no scanner records")
        assert not out.exists()


def test_coordinates_all_nan_are_no_return_partly_non_finite_are_refused(tmp_path: Path) -> None:
    """PCL marks a point with no return x = y = z = NaN: dropped, as before. One NaN
    coordinate, or an infinite one, is a damaged point: refused."""
    f = {
        "x": np.float32([1, np.nan, 3, 4]),
        "y": np.float32([0, np.nan, 0, 0]),
        "z": np.float32([0, np.nan, 0, 0]),
        "intensity": np.float32([1, 0, 3, 4]),
    }
    path = tmp_path / "holes.pcd"
    _pcd(path, f, ascii_=False)
    np.testing.assert_array_equal(read(path)["intensity"], [1, 3, 4])
    f["y"] = np.float32([0, np.nan, np.inf, 0])
    _pcd(path, f, ascii_=False)
    with pytest.raises(InputError, match=r"xyz: 1 of 3 points non-finite .* \(e\.g\. inf\)"):
        read(path)
    f["y"] = np.float32([0, np.nan, 0, np.nan])  # organised 2 x 2: the same rule
    _pcd(path, f, ascii_=False, height=2)
    with pytest.raises(InputError, match=r"xyz: 1 of 3 points non-finite"):
        read(path)


def test_an_integer_field_too_wide_for_the_record_is_refused_not_wrapped(tmp_path: Path) -> None:
    """A uint32 ``label`` of 70000 once became 4464 (wrapped to 16 bits)."""
    f = {
        "x": np.float32([1, 2]),
        "y": np.float32([0, 0]),
        "z": np.float32([0, 0]),
        "label": np.uint32([40, 70000]),
    }
    path = tmp_path / "wide.pcd"
    _pcd(path, f, ascii_=True)
    with pytest.raises(InputError, match=r"field 'label' runs 40\.\.70000; expected 0\.\.65535"):
        read(path)


def test_las_classification_is_asprs_and_a_label_dimension_semantic_kitti(tmp_path: Path) -> None:
    """A LAS of another tool: its ASPRS classes (2 ground, 6 building) are the labels, not
    checked as SemanticKITTI ids; the ``label`` dimension of this simulator's LAS is."""
    header = laspy.LasHeader(point_format=6, version="1.4")
    las = laspy.LasData(header)
    las.x, las.y, las.z = [1.0, 2.0, 3.0], [0.0, 1.0, 2.0], [0.5, 0.5, 0.5]
    las.classification = np.array([2, 6, 2], np.uint8)
    path = tmp_path / "asprs.las"
    las.write(str(path))
    cloud = read(path)
    np.testing.assert_array_equal(cloud["label"], [2, 6, 2])
    assert cloud.meta["label_field"] == "classification"
    own = tmp_path / "own.las"
    write(with_value(record(), "label", 5, 2), own)
    with pytest.raises(InputError, match=r"own\.las: .*label: 1 of 40 points not SemanticKITTI"):
        read(own)


def test_kitti_and_nuscenes_bins(tmp_path: Path) -> None:
    """KITTI: reflectance above 1 (intensity above 255) and a ``.label`` id that is not
    SemanticKITTI's; nuScenes: a ring of 48906."""
    points = np.array([[1, 2, 3, 0.5], [4, 5, 6, 1.0], [7, 8, 9, 0.25]], dtype="<f4")
    kitti = tmp_path / "000000.bin"
    points.tofile(kitti)
    pack_labels(np.uint16([40, 50, 70]), np.uint16([0, 0, 0])).tofile(kitti.with_suffix(".label"))
    assert len(read(kitti)) == 3
    pack_labels(np.uint16([40, 45106, 70]), np.uint16([0, 0, 0])).tofile(
        kitti.with_suffix(".label")
    )
    with pytest.raises(InputError, match=r"label: 1 of 3 points not SemanticKITTI ids"):
        read(kitti)
    kitti.with_suffix(".label").unlink()
    points[1, 3] = 255.0  # an 8-bit reading where KITTI has 0-1
    points.tofile(kitti)
    with pytest.raises(
        InputError, match=r"intensity: 1 of 3 points .* above 255 \(the format's intensity_max\)"
    ):
        read(kitti)
    sweep = tmp_path / "n008__LIDAR_TOP__1.pcd.bin"
    np.array([[1, 2, 3, 28, 0], [4, 5, 6, 255, 48906]], dtype="<f4").tofile(sweep)
    with pytest.raises(InputError, match=r"ring: 1 of 2 points above 4095 \(e\.g\. 48906\)"):
        read(sweep)


def test_a_bag_names_the_bad_frame_and_its_good_frames_read(tmp_path: Path) -> None:
    """Frame 1 of 3 holds an infinite intensity: reading through it stops there naming the
    frame; frame 0 and frame 2, asked for, read (the frames before the one asked for are
    not checked)."""
    from simulator.io.rosbag import RosbagWriter

    bag = tmp_path / "bag"
    writer = RosbagWriter(bag)
    for k in range(3):
        cloud = record(6)
        if k == 1:
            cloud = with_value(cloud, "intensity", 4, np.inf)
        writer.write_frame(cloud, 0.1 * k, np.eye(3), np.zeros(3), np.array([0, 0, 0, 1.0]))
    writer.close()
    frames = read_frames(bag)
    assert len(next(frames)) == 6
    with pytest.raises(InputError, match=r"bag: frame 1: values .* intensity: 1 of 6 points"):
        next(frames)
    assert len(read(bag, ReadOptions(frame=2))) == 6
    res = lidar_sim("rangeimage", bag, "--frame", "1", "-o", tmp_path / "r.png")
    assert res.returncode == 2 and "frame 1: values no scanner records" in res.stderr


def test_the_real_captures_pass() -> None:
    """Every shared real capture, frame by frame, passes the check (each PCD of nebula's
    drivers, the Ouster pcap and OSF)."""
    needs(PCAP)
    pytest.importorskip("ouster.sdk")
    captures = sorted((REALDATA / "nebula").glob("*.pcd"))
    captures += [PCAP, OUSTER / "osf_fw_3.2_10scans.osf"]
    counts = {p.name: [len(c) for c in read_frames(p)] for p in captures}
    assert counts["OS-1-128_v2.3.0_1024x10_lb_n3.pcap"] == [107_647, 107_357, 107_532]
    assert len(counts["osf_fw_3.2_10scans.osf"]) == 10
    assert all(min(n) > 0 for n in counts.values()), counts
