"""ROS 2 bags as ROS 2 and Autoware users record them: MCAP or sqlite3 storage, the drivers'
point layouts, each topic's offered QoS; read back with rosbags' AnyReader as a user
would, every layout holds the npz frames of the same survey, in its own types and units."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.io.pointcloud2 import (
    AUTOWARE_RETURN_TYPES,
    POINT_LAYOUTS,
    BagOptions,
    autoware_return_types,
)
from simulator.pointcloud import PointCloud

from .conftest import REPO, lidar_sim, refused_in_one_line

pytest.importorskip("rosbags", reason="rosbags is not installed (pip install -e '.[ros]')")

DRIVE = REPO / "scenes/farm/drive.yaml"
SETTINGS = ["duration_s=0.2", "scanner=vlp-16"]
#: sensor_msgs/PointField datatype codes.
TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}


@pytest.fixture(scope="module")
def npz_frames(tmp_path_factory: pytest.TempPathFactory) -> list[PointCloud]:
    """The survey's frames as npz files, read back."""
    from simulator.io.read import read

    out = tmp_path_factory.mktemp("npz")
    sim = simulator.Simulation.from_file(DRIVE, SETTINGS)
    simulator.sequence.write_sequence(sim, out, "npz")
    return [read(p) for p in sorted((out / "frames").glob("*.npz"))]


def messages(bag: Path) -> tuple[list, list, dict]:
    """The bag read with rosbags' AnyReader: the /points messages, the /tf ones, and each
    topic's connection."""
    from rosbags.highlevel import AnyReader

    points, tf, connections = [], [], {}
    with AnyReader([bag]) as reader:
        for c in reader.connections:
            connections[c.topic] = c
        for connection, _stamp, raw in reader.messages():
            msg = reader.deserialize(raw, connection.msgtype)
            (points if connection.topic == "/points" else tf).append(msg)
    return points, tf, connections


def decoded(msg: object) -> np.ndarray:
    """A PointCloud2's points as its own fields describe them (names, types, offsets)."""
    fields = msg.fields  # type: ignore[attr-defined]
    dtype = np.dtype({
        "names": [f.name for f in fields],
        "formats": [("<" if not msg.is_bigendian else ">") + TYPES[f.datatype] for f in fields],  # type: ignore[attr-defined]
        "offsets": [f.offset for f in fields],
        "itemsize": msg.point_step,  # type: ignore[attr-defined]
    })  # fmt: skip
    return np.frombuffer(msg.data.tobytes(), dtype=dtype)  # type: ignore[attr-defined]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("layout", POINT_LAYOUTS)
def test_every_layout_and_storage_holds_the_npz_frames(
    layout: str, storage: str, npz_frames: list[PointCloud], tmp_path: Path
) -> None:
    """Written through the command, read with AnyReader: one cloud a frame, each the npz
    frame's points in the layout's fields, types and units; the poses on /tf; each topic
    with its type, the cdr serialization and the offered QoS; and the project's own reader
    gives the frames back."""
    from simulator.io.read import ReadOptions, read_frames

    out = tmp_path / "seq"
    sets = [a for s in SETTINGS for a in ("--set", s)]
    res = lidar_sim("sequence", DRIVE, "-o", out, "--format", "rosbag2", "--storage", storage,
                    "--point-layout", layout, "-q", *sets)  # fmt: skip
    assert res.returncode == 0, res.stderr
    bag = out / "bag"
    assert (bag / "metadata.yaml").is_file()
    assert len(list(bag.glob("*.mcap" if storage == "mcap" else "*.db3"))) == 1
    points, tf, connections = messages(bag)
    assert len(points) == len(tf) == len(npz_frames) == 2
    for topic, msgtype in (("/points", "sensor_msgs/msg/PointCloud2"),
                           ("/tf", "tf2_msgs/msg/TFMessage")):  # fmt: skip
        c = connections[topic]
        assert c.msgtype == msgtype and c.ext.serialization_format == "cdr"
        qos = c.ext.offered_qos_profiles
        assert len(qos) == 1 and qos[0].reliability.name == "RELIABLE"
        assert qos[0].durability.name == "VOLATILE" and qos[0].depth == 10
    for msg, frame in zip(points, npz_frames, strict=True):
        assert msg.header.frame_id == "lidar" and msg.height == 1 and not msg.is_bigendian
        data = decoded(msg)
        assert len(data) == msg.width == len(frame)
        xyz = frame["xyz"]
        for k, axis in enumerate("xyz"):
            np.testing.assert_array_equal(data[axis], xyz[:, k])
        time_ns = np.rint(frame["time_s"] * 1e9)
        if layout in ("lidar-sim", "velodyne"):
            assert msg.point_step == (28 if layout == "lidar-sim" else 22)
            np.testing.assert_array_equal(data["intensity"], frame["intensity"])
            np.testing.assert_array_equal(data["ring"], frame["ring"])
            np.testing.assert_array_equal(data["time"], frame["time_s"].astype(np.float32))
        if layout == "lidar-sim":
            for name in ("return_number", "num_returns", "label", "instance"):
                np.testing.assert_array_equal(data[name], frame[name])
        if layout == "autoware":
            assert msg.point_step == 32
            assert [(f.name, f.offset) for f in msg.fields] == [
                ("x", 0), ("y", 4), ("z", 8), ("intensity", 12), ("return_type", 13),
                ("channel", 14), ("azimuth", 16), ("elevation", 20), ("distance", 24),
                ("time_stamp", 28)]  # fmt: skip
            np.testing.assert_array_equal(data["intensity"], np.rint(frame["intensity"]))
            assert (data["return_type"] == AUTOWARE_RETURN_TYPES["single_strongest"]).all()
            np.testing.assert_array_equal(data["channel"], frame["ring"])
            np.testing.assert_array_equal(data["time_stamp"], time_ns)
            r = np.linalg.norm(xyz.astype(np.float64), axis=1)
            np.testing.assert_allclose(data["distance"], r, rtol=1e-6)
            assert ((data["azimuth"] >= 0) & (data["azimuth"] < 2 * np.pi)).all()
            horizontal = r * np.cos(data["elevation"])
            np.testing.assert_allclose(
                horizontal * np.cos(data["azimuth"]), xyz[:, 0], atol=2e-5 * r.max()
            )
            np.testing.assert_allclose(
                horizontal * np.sin(data["azimuth"]), xyz[:, 1], atol=2e-5 * r.max()
            )
            np.testing.assert_allclose(
                r * np.sin(data["elevation"]), xyz[:, 2], atol=2e-5 * r.max()
            )
        if layout == "ouster":
            assert msg.point_step == 48
            np.testing.assert_array_equal(data["t"], time_ns)
            np.testing.assert_array_equal(data["ring"], frame["ring"])
            np.testing.assert_array_equal(
                data["range"], np.rint(frame["range_m"].astype(np.float64) * 1e3)
            )
            np.testing.assert_array_equal(data["reflectivity"], np.rint(frame["intensity"]))
            np.testing.assert_array_equal(data["intensity"], frame["intensity"])
    back = list(read_frames(bag, ReadOptions(topic="/points")))
    for cloud, frame in zip(back, npz_frames, strict=True):
        np.testing.assert_array_equal(cloud["xyz"], frame["xyz"])
        np.testing.assert_array_equal(cloud["ring"], frame["ring"])
        np.testing.assert_allclose(cloud["time_s"], frame["time_s"], atol=1e-6)


def test_autoware_return_types_name_the_dual_returns() -> None:
    """Dual mode: a pulse's only return is dual-only; of two, the brighter is the strongest
    and the other the weak one, first and last by range order; single modes are single."""
    cloud = PointCloud({
        "return_number": np.array([1, 1, 2, 1, 2, 1], np.uint8),
        "num_returns": np.array([1, 2, 2, 2, 2, 1], np.uint8),
        "intensity": np.array([9, 30, 10, 5, 40, 7], np.float32),
        "xyz": np.zeros((6, 3), np.float32),
    })  # fmt: skip
    codes = AUTOWARE_RETURN_TYPES
    want = [codes["dual_only"], codes["dual_strongest_first"], codes["dual_weak_last"],
            codes["dual_weak_first"], codes["dual_strongest_last"], codes["dual_only"]]  # fmt: skip
    np.testing.assert_array_equal(autoware_return_types(cloud, "dual"), want)
    assert set(autoware_return_types(cloud, "last")) == {codes["single_last"]}
    assert set(autoware_return_types(cloud, "strongest")) == {codes["single_strongest"]}
    assert set(autoware_return_types(cloud, "multi")) == {codes["invalid"]}


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [("--storage", "bag", "--storage"), ("--point-layout", "pcl", "--point-layout")],
)
def test_a_bag_option_out_of_its_choices_is_refused(
    option: str, value: str, fragment: str, tmp_path: Path
) -> None:
    out = tmp_path / "seq"
    res = lidar_sim("sequence", DRIVE, "-o", out, "--format", "rosbag2", option, value)
    refused_in_one_line(res, fragment, out)


def test_bag_options_name_what_they_take() -> None:
    with pytest.raises(simulator.OutputError, match="expected mcap or sqlite3"):
        BagOptions(storage="db3")  # type: ignore[arg-type]
    with pytest.raises(simulator.OutputError, match="expected one of lidar-sim, velodyne"):
        BagOptions(point_layout="pcl")  # type: ignore[arg-type]
