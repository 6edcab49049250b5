"""The readers on every layout they claim (issue 49, point 3): an organised PointCloud2 as
ouster-ros lays it out (its drop-outs are drop-outs, its beam grid kept), a big-endian cloud,
an organised PCD without a ring field (rings are the grid's rows), an Ouster capture's times
against ouster-sdk's own column timestamps, ``lidar-sim scanners import`` through the
command, and Ouster's sensor rotation at an angle a transposed matrix would read otherwise.

The small fixtures are written here with exact values; the real ones are made of the shared
OS1-128 capture (``../shared/realdata``) at run time, and skip without it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.config import load_scanner
from simulator.config.vendor import import_scanner
from simulator.io.read import read, read_frames

from . import capture_mutants as cm
from .test_readers import _pcd
from .test_vendor_import import _angle_rad, _schedule_grid

#: ouster-ros' ``PointOS`` (``ouster_ros/os_point.h``): PCL's 16-byte aligned xyz, then
#: intensity float32, t uint32 (ns from the scan's stamp), reflectivity, ring and ambient
#: uint16, range uint32 (mm); 48 bytes a point.
POINT_OS = np.dtype(
    {
        "names": ["x", "y", "z", "intensity", "t", "reflectivity", "ring", "ambient", "range"],
        "formats": ["f4", "f4", "f4", "f4", "u4", "u2", "u2", "u2", "u4"],
        "offsets": [0, 4, 8, 16, 20, 24, 26, 28, 32],
        "itemsize": 48,
    }
)
_CODES = {"f4": 7, "u4": 6, "u2": 4}


def _needs(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path.name} not found: the shared real captures are not in this checkout")


def point_os_message(
    points: np.ndarray, height: int, big_endian: bool = False, row_padding: int = 0
) -> dict:
    """A PointCloud2 (:func:`capture_mutants.write_bag`'s parts) of ``POINT_OS`` points,
    ``height`` rows, each row padded with ``row_padding`` bytes (``row_step`` beyond it)."""
    order = ">" if big_endian else "<"
    dtype = POINT_OS.newbyteorder(order)
    width = len(points) // height
    packed = np.zeros(len(points), dtype=dtype)
    for name in POINT_OS.names:
        packed[name] = points[name]
    rows = np.zeros((height, width * dtype.itemsize + row_padding), dtype=np.uint8)
    rows[:, : width * dtype.itemsize] = np.frombuffer(packed.tobytes(), np.uint8).reshape(
        height, -1
    )
    return {
        "height": height,
        "width": width,
        "fields": [
            (n, POINT_OS.fields[n][1], _CODES[POINT_OS.fields[n][0].str[1:]], 1)
            for n in POINT_OS.names
        ],
        "is_bigendian": big_endian,
        "point_step": dtype.itemsize,
        "row_step": width * dtype.itemsize + row_padding,
        "data": rows.reshape(-1),
        "stamp_ns": 1_700_000_000_000_000_000,
        "frame_id": "os_sensor",
    }


def small_grid() -> np.ndarray:
    """2 beams x 3 firings as ouster-ros writes them: beam 0 firing 1 returned nothing (0 0 0,
    as ouster-ros writes a pixel of RANGE 0), beam 1 firing 0 is PCL's NaN."""
    p = np.zeros(6, dtype=POINT_OS)
    nan = np.float32(np.nan)
    p["x"] = [1.0, 0.0, 3.0, nan, 5.0, 6.0]
    p["y"] = [0.5, 0.0, 0.0, nan, 1.0, 0.0]
    p["z"] = [0.0, 0.0, -1.0, nan, 0.0, 1.0]
    p["intensity"] = [10, 0, 30, 0, 50, 60]
    p["t"] = [0, 48_828, 97_656, 0, 48_828, 97_656]
    p["reflectivity"] = [7, 0, 9, 0, 258, 255]  # 258 = 0x0102: its bytes' order shows
    p["ring"] = [0, 0, 0, 1, 1, 1]
    p["ambient"] = [100, 101, 102, 103, 104, 105]
    p["range"] = [1118, 0, 3162, 0, 5099, 6083]
    return p


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
def test_an_organised_point_cloud2_keeps_its_grid_and_drops_its_drop_outs(
    tmp_path: Path, big_endian: bool
) -> None:
    """ouster-ros' layout, 2 x 3, rows padded: 4 returns (the 0 0 0 and the NaN pixel are
    drop-outs, not points at the origin), each with its ring and column, and the grid."""
    pytest.importorskip("rosbags")
    bag = cm.write_bag(
        tmp_path / "os.bag", [point_os_message(small_grid(), 2, big_endian, row_padding=8)]
    )
    cloud = read(bag)
    assert len(cloud) == 4
    assert cloud.meta["beam_grid"] == {"rows": 2, "columns": 3}
    assert cloud.meta["firings_per_ring"] == 3
    np.testing.assert_array_equal(
        cloud["xyz"], np.float32([[1, 0.5, 0], [3, 0, -1], [5, 1, 0], [6, 0, 1]])
    )
    np.testing.assert_array_equal(cloud["ring"], [0, 0, 1, 1])
    np.testing.assert_array_equal(cloud["column"], [0, 2, 1, 2])
    np.testing.assert_array_equal(cloud["intensity"], [7, 9, 258, 255])  # reflectivity
    np.testing.assert_array_equal(cloud["signal"], [10, 30, 50, 60])  # the raw intensity
    np.testing.assert_array_equal(cloud["time_s"], [0.0, 97_656e-9, 48_828e-9, 97_656e-9])
    np.testing.assert_array_equal(cloud["range_m"], np.float32([1.118, 3.162, 5.099, 6.083]))
    np.testing.assert_array_equal(cloud["ambient"], [100, 102, 104, 105])
    assert cloud.meta["stamp_ns"] == 1_700_000_000_000_000_000


def test_a_flat_point_cloud2_keeps_every_point(tmp_path: Path) -> None:
    """The same six points as one row (height 1): no grid, and only PCL's all-NaN point is
    no return; the point at 0 0 0 stays (an unorganised cloud does not mark drop-outs)."""
    pytest.importorskip("rosbags")
    bag = cm.write_bag(tmp_path / "flat.bag", [point_os_message(small_grid(), 1)])
    cloud = read(bag)
    assert len(cloud) == 5 and "beam_grid" not in cloud.meta and "column" not in cloud
    np.testing.assert_array_equal(cloud["ring"], [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(cloud["xyz"][1], [0, 0, 0])


def test_the_real_os1_frame_as_an_ouster_ros_bag_reads_as_the_pcap(tmp_path: Path) -> None:
    """Frame 0 of the OS1-128 capture, written as ouster-ros writes it (128 x 1024, every
    pixel, RANGE 0 at 0 0 0): the bag's cloud is the pcap reader's, point for point: the
    same 107,647 returns, rings, columns, coordinates, reflectivity and ranges."""
    _needs(cm.PCAP)
    pytest.importorskip("rosbags")
    sdk = pytest.importorskip("ouster.sdk")
    from ouster.sdk import core

    source = sdk.open_source(str(cm.PCAP), meta=[str(cm.PCAP_META)])
    info = source.sensor_info[0]
    scan = next(iter(source))[0]
    source.close()
    rows, columns = info.format.pixels_per_column, info.format.columns_per_frame
    rng = scan.field("RANGE")
    xyz = core.XYZLut(info)(scan).reshape(-1, 3)
    xyz[rng.reshape(-1) == 0] = 0.0  # ouster-ros: a pixel of no return at the origin
    stamps = np.asarray(scan.timestamp, dtype=np.int64)
    p = np.zeros(rows * columns, dtype=POINT_OS)
    p["x"], p["y"], p["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    p["reflectivity"] = scan.field("REFLECTIVITY").reshape(-1)
    p["t"] = np.tile(stamps - stamps.min(), rows)
    p["ring"] = np.repeat(np.arange(rows), columns)
    p["range"] = rng.reshape(-1)
    bag = cm.write_bag(tmp_path / "os1.bag", [point_os_message(p, rows)])
    got, want = read(bag), read(cm.PCAP)
    assert len(got) == len(want) == 107_647
    assert got.meta["beam_grid"] == want.meta["beam_grid"] == {"rows": 128, "columns": 1024}
    for field in ("ring", "column", "xyz", "intensity", "range_m"):
        np.testing.assert_array_equal(got[field], want[field], err_msg=field)
    np.testing.assert_array_equal(got["time_s"], want["time_s"])


@pytest.mark.parametrize("ascii_", [True, False], ids=["ascii", "binary"])
def test_a_ringless_organised_pcd_takes_its_rings_from_the_grid_rows(
    tmp_path: Path, ascii_: bool
) -> None:
    """3 beams x 4 firings, no ring field, two drop-outs: each point's ring is its row
    (index // 4), not index % 3; its column index % 4."""
    x = np.arange(1, 13, dtype=np.float32)
    x[[5, 10]] = 0.0  # beam 1 firing 1 and beam 2 firing 2 returned nothing
    f = {"x": x, "y": np.zeros(12, np.float32), "z": np.zeros(12, np.float32)}
    path = tmp_path / "ringless.pcd"
    _pcd(path, f, ascii_, height=3)
    cloud = read(path)
    assert cloud.meta["beam_grid"] == {"rows": 3, "columns": 4}
    np.testing.assert_array_equal(cloud["xyz"][:, 0], [1, 2, 3, 4, 5, 7, 8, 9, 10, 12])
    np.testing.assert_array_equal(cloud["ring"], [0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(cloud["column"], [0, 1, 2, 3, 0, 2, 3, 0, 1, 3])
    assert cloud["ring"].dtype == np.uint16


def test_ouster_times_are_the_sdk_column_timestamps() -> None:
    """Every point's ``time_s`` is its column's timestamp (ouster-sdk's ``LidarScan
    .timestamp``, ns) less the frame's first valid one, in seconds, exactly; the columns of
    the 1024 x 10 mode are 1 / 10,240 s apart (a factor of 1,000 would show)."""
    _needs(cm.PCAP)
    sdk = pytest.importorskip("ouster.sdk")
    source = sdk.open_source(str(cm.PCAP), meta=[str(cm.PCAP_META)])
    scans = [frame[0] for frame in source]
    source.close()
    frames = list(read_frames(cm.PCAP))
    assert len(frames) == len(scans) == 3
    for scan, cloud in zip(scans, frames, strict=True):
        stamps = np.asarray(scan.timestamp, dtype=np.int64)
        valid = (np.asarray(scan.status) & 1).astype(bool)
        t0 = int(stamps[valid].min())
        assert cloud.meta["time_origin_ns"] == t0
        want = (stamps[cloud["column"]] - t0).astype(np.float64) * 1e-9
        np.testing.assert_array_equal(cloud["time_s"], want)
        step = np.median(np.diff(np.unique(cloud["time_s"])))
        assert step == pytest.approx(1 / 10_240, rel=0.05)
        assert 0.099 < cloud["time_s"].max() < 0.1


def test_scanners_import_through_the_command(tmp_path: Path) -> None:
    """``lidar-sim scanners import OS1.json -o scanner.yaml`` in a child process: exit 0, the
    line it prints, and a scanner whose beams are the JSON's to the last digit; a damaged
    JSON is exit 2 and one line."""
    _needs(cm.PCAP_META)
    out = tmp_path / "scanner.yaml"
    env = {**os.environ, "COLUMNS": "400"}
    command = [sys.executable, "-m", "simulator.cli", "scanners", "import"]
    res = subprocess.run(
        [*command, str(cm.PCAP_META), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == (
        f"wrote {out} (os1-128-122201000998: 128 channels, 1024 firings a revolution)"
    )
    doc = json.loads(cm.PCAP_META.read_text())
    scanner = load_scanner(out)
    assert scanner.channels is not None
    assert scanner.channels.elevation_deg == doc["beam_altitude_angles"]
    assert scanner.channels.azimuth_offset_deg == [-a for a in doc["beam_azimuth_angles"]]
    assert (scanner.firings_per_revolution, scanner.rotation_hz) == (1024, 10.0)
    assert scanner.start_azimuth_deg == 180.0 and scanner.rotation == "clockwise"
    assert yaml.safe_load(out.read_text())["name"] == "os1-128-122201000998"
    bad = tmp_path / "cut.json"
    bad.write_text(cm.PCAP_META.read_text()[:500])
    res = subprocess.run(
        [*command, str(bad), "-o", str(tmp_path / "bad.yaml")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith(f"error: {bad}") and "Traceback" not in res.stderr
    assert not (tmp_path / "bad.yaml").exists()


@pytest.mark.parametrize("angle_deg", [30.0, -62.5])
def test_ouster_sensor_rotation_at_an_angle_a_transpose_would_misread(
    tmp_path: Path, angle_deg: float
) -> None:
    """The OS1-128's metadata with ``lidar_to_sensor_transform`` turned ``angle_deg`` about
    z (not 180, where the matrix is its own transpose): the imported scanner starts at that
    azimuth (a transposed matrix gives its negative), and every one of the 131,072 beams
    points where ouster-sdk's ``XYZLut`` of that metadata points it."""
    _needs(cm.PCAP_META)
    core = pytest.importorskip("ouster.sdk.core")
    doc = json.loads(cm.PCAP_META.read_text())
    a = math.radians(angle_deg)
    c, s = math.cos(a), math.sin(a)
    doc["lidar_to_sensor_transform"] = [c, -s, 0, 0, s, c, 0, 0, 0, 0, 1, 36.18, 0, 0, 0, 1]
    path = tmp_path / "turned.json"
    path.write_text(json.dumps(doc))
    mapping, _ = import_scanner([path])
    assert mapping["start_azimuth_deg"] == pytest.approx(angle_deg % 360.0, abs=1e-9)
    info = core.SensorInfo(path.read_text())
    rows, columns = info.format.pixels_per_column, info.format.columns_per_frame
    lut = core.XYZLut(info)
    xyz10 = lut(np.full((rows, columns), 10_000, np.uint32))
    xyz20 = lut(np.full((rows, columns), 20_000, np.uint32))
    sdk_dir = (xyz20 - xyz10) / 10.0
    direction, _ = _schedule_grid(mapping, rows, columns)
    assert _angle_rad(direction, sdk_dir).max() < 1e-9
    # The transposed matrix turns the beams the other way: off by about twice the angle.
    flipped = {**mapping, "start_azimuth_deg": -angle_deg % 360.0}
    wrong, _ = _schedule_grid(flipped, rows, columns)
    assert _angle_rad(wrong, sdk_dir).min() > math.radians(2 * abs(angle_deg)) * 0.5
