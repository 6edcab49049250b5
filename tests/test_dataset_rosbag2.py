"""The rosbag2 dataset layout: one ROS 2 bag a sequence, as ``lidar-sim sequence --format
rosbag2`` writes its bag (the same bytes from the same simulation), read back with
rosbags' own reader and the project's: frame k of a bag holds frame k of the npz layout
of the same spec, field by field, in MCAP and sqlite3 and in two point layouts; the same
bytes from one process, two local workers and a Dask cluster; a killed run resumed keeps
its finished bags and redoes the unfinished sequence whole; bad sections refused in one
line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.config import DatasetSpec
from simulator.datasets import run_dataset
from simulator.datasets.tasks import sequence_frames, sequence_tasks
from simulator.io.layouts import DatasetLayout
from simulator.io.npz import read_npz
from simulator.io.pointcloud2 import AUTOWARE_RETURN_TYPES, BagOptions
from simulator.io.rosbag import read_bag_frames
from simulator.sensor.trajectory import quaternion_from_matrix

from .conftest import dataset_files, lidar_sim, refused_in_one_line

pytest.importorskip("rosbags", reason="rosbags is not installed (pip install -e '.[ros]')")

#: Two farm yards of two VLP-16 frames each, the sensor moving (so a compensated cloud
#: would differ from a raw one).
SPEC = {
    "seed": 11,
    "groups": [{
        "name": "farm", "generator": "farm_yard", "scanner": "vlp-16", "sequences": 2,
        "frames": 2, "trajectory": {"start": {"position_m": [-10, -4, 0]},
                                    "velocity_mps": [5, 0, 0]},
        "mount": {"position_m": [0, 0, 1.8]},
    }],
}  # fmt: skip
#: The bag runs: (storage, point layout).
BAGS = {"mcap-lidar-sim": ("mcap", "lidar-sim"), "sqlite3-autoware": ("sqlite3", "autoware")}
#: sensor_msgs/PointField datatype codes.
TYPES = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}


def _spec(tmp: Path, name: str, **top: object) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**SPEC, **top}))
    return path


def _bag_spec(tmp: Path, name: str) -> Path:
    storage, point_layout = BAGS[name]
    return _spec(tmp, name, layout="rosbag2",
                 rosbag2={"storage": storage, "point_layout": point_layout})  # fmt: skip


def _spec_model() -> DatasetSpec:
    """:data:`SPEC` as the model (its rosbag2 layout)."""
    return DatasetSpec.model_validate({**SPEC, "layout": "rosbag2"})


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Each run by one process, made when first asked: ``npz`` (the points as scanned:
    ``motion_compensated: false``, a bag's convention) and each of :data:`BAGS`."""
    tmp = tmp_path_factory.mktemp("rosbag2")
    runs: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in runs:
            if name == "npz":
                groups = [{**SPEC["groups"][0], "motion_compensated": False}]  # type: ignore[index]
                spec = _spec(tmp, name, layout="npz", groups=groups)
            else:
                spec = _bag_spec(tmp, name)
            manifest = run_dataset(spec, tmp / name, workers=1)
            assert manifest["errors"] == [] and manifest["frames"] == 4
            runs[name] = tmp / name
        return runs[name]

    return get


def _messages(bag: Path) -> tuple[dict[str, list], dict[str, object]]:
    """The bag read with rosbags' AnyReader, as a ROS user would: each topic's
    deserialised messages with their log times, and each topic's connection."""
    from rosbags.highlevel import AnyReader

    by_topic: dict[str, list] = {}
    connections = {}
    with AnyReader([bag]) as reader:
        for c in reader.connections:
            connections[c.topic] = c
        for connection, stamp, raw in reader.messages():
            msg = reader.deserialize(raw, connection.msgtype)
            by_topic.setdefault(connection.topic, []).append((stamp, msg))
    return by_topic, connections


def _decoded(msg: object) -> np.ndarray:
    """A PointCloud2's points as its own fields describe them."""
    fields = msg.fields  # type: ignore[attr-defined]
    dtype = np.dtype({
        "names": [f.name for f in fields],
        "formats": ["<" + TYPES[f.datatype] for f in fields],
        "offsets": [f.offset for f in fields],
        "itemsize": msg.point_step,  # type: ignore[attr-defined]
    })  # fmt: skip
    assert not msg.is_bigendian  # type: ignore[attr-defined]
    return np.frombuffer(msg.data.tobytes(), dtype=dtype)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(BAGS))
def test_each_bag_holds_its_sequences_npz_frames_field_by_field(made, name: str) -> None:  # type: ignore[no-untyped-def]
    """One bag a sequence (and the manifest, nothing else); read with rosbags' AnyReader,
    frame k on /points is frame k of the npz layout of the same spec in the point
    layout's fields, types and units, stamped with the frame's first firing; its pose on
    /tf (map -> lidar) is the trajectory's then; the project's reader gives the same
    points back."""
    storage, point_layout = BAGS[name]
    out, npz = made(name), made("npz")
    ext = "mcap" if storage == "mcap" else "db3"
    assert sorted(dataset_files(out)) == [f"bags/{s}/{f}" for s in ("00", "01")
                                          for f in (f"{s}.{ext}", "metadata.yaml")]  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "rosbag2"
    assert manifest["spec"]["rosbag2"] == {"storage": storage, "point_layout": point_layout,
                                           "frame_id": "lidar"}  # fmt: skip
    tasks = sequence_tasks(_spec_model(), out, out, resume=False)
    for s in (0, 1):
        bag = out / "bags" / f"{s:02d}"
        by_topic, connections = _messages(bag)
        assert sorted(by_topic) == ["/points", "/tf"]
        assert connections["/points"].msgtype == "sensor_msgs/msg/PointCloud2"  # type: ignore[attr-defined]
        assert connections["/tf"].msgtype == "tf2_msgs/msg/TFMessage"  # type: ignore[attr-defined]
        frames = sequence_frames(tasks[s])
        assert len(by_topic["/points"]) == len(by_topic["/tf"]) == len(frames) == 2
        back = list(read_bag_frames(bag))
        for k, ((stamp, msg), (tf_stamp, tf)) in enumerate(
            zip(by_topic["/points"], by_topic["/tf"], strict=True)
        ):
            want = read_npz(npz / "sequences" / f"{s:02d}" / "frames" / f"{k:06d}.npz")
            stamp_ns = round(frames[k].time_s * 1e9)
            assert stamp == tf_stamp == stamp_ns
            assert msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec == stamp_ns
            assert msg.header.frame_id == "lidar" and msg.height == 1
            (t,) = tf.transforms
            assert (t.header.frame_id, t.child_frame_id) == ("map", "lidar")
            v, q = t.transform.translation, t.transform.rotation
            assert [v.x, v.y, v.z] == frames[k].position_m.tolist()
            assert [q.x, q.y, q.z, q.w] == quaternion_from_matrix(frames[k].rotation).tolist()
            data = _decoded(msg)
            assert len(data) == msg.width == len(want) > 1000
            for axis, column in zip("xyz", want["xyz"].T, strict=True):
                np.testing.assert_array_equal(data[axis], column)
            time_ns = np.rint(want["time_s"] * 1e9)
            if point_layout == "lidar-sim":
                assert msg.point_step == 28
                np.testing.assert_array_equal(data["intensity"], want["intensity"])
                np.testing.assert_array_equal(data["ring"], want["ring"])
                np.testing.assert_array_equal(data["time"], want["time_s"].astype(np.float32))
                for field in ("return_number", "num_returns", "label", "instance"):
                    np.testing.assert_array_equal(data[field], want[field])
                assert len(np.unique(want["label"])) > 2  # labels that can tell a mix-up
            else:
                assert msg.point_step == 32
                np.testing.assert_array_equal(data["intensity"], np.rint(want["intensity"]))
                np.testing.assert_array_equal(data["channel"], want["ring"])
                np.testing.assert_array_equal(data["time_stamp"], time_ns)
                assert (data["return_type"] == AUTOWARE_RETURN_TYPES["single_strongest"]).all()
                r = np.linalg.norm(want["xyz"].astype(np.float64), axis=1)
                np.testing.assert_allclose(data["distance"], r, rtol=1e-6)
            cloud = back[k]
            assert cloud.meta["stamp_ns"] == stamp_ns
            np.testing.assert_array_equal(cloud["xyz"], want["xyz"])
            np.testing.assert_array_equal(cloud["ring"], want["ring"])
            np.testing.assert_allclose(cloud["time_s"], want["time_s"], atol=1e-6)
            if point_layout == "lidar-sim":
                np.testing.assert_array_equal(cloud["label"], want["label"])
                np.testing.assert_array_equal(cloud["instance"], want["instance"])


def test_an_mcap_bag_reads_in_foxglove_s_mcap_client_as_in_rosbags(made) -> None:  # type: ignore[no-untyped-def]
    """A second, independent client: Foxglove's ``mcap`` reader (with ``mcap-ros2-support``,
    what Foxglove and MCAP tooling decode ROS 2 bags with) reads each MCAP bag (CRCs are
    checked where recorded; rosbags' writer records none), finds the ROS 2 profile, a
    summary whose statistics count what is there, each topic's schema as ``ros2msg``
    text, and decodes every message (from that schema, not from rosbags' types) to what
    rosbags' AnyReader gives: the same topics and log times, the same PointCloud2 fields,
    layout and point bytes, the same transforms."""
    mcap_reader = pytest.importorskip("mcap.reader", reason="mcap is not installed")
    ros2_decoder = pytest.importorskip("mcap_ros2.decoder", reason="mcap-ros2-support absent")
    out = made("mcap-lidar-sim")
    for s in (0, 1):
        bag = out / "bags" / f"{s:02d}"
        by_topic, _ = _messages(bag)
        with (bag / f"{s:02d}.mcap").open("rb") as f:
            factories = [ros2_decoder.DecoderFactory()]
            reader = mcap_reader.make_reader(f, validate_crcs=True, decoder_factories=factories)
            assert reader.get_header().profile == "ros2"
            summary = reader.get_summary()
            assert summary is not None and summary.statistics.message_count == 4
            schemas = {c.topic: summary.schemas[c.schema_id] for c in summary.channels.values()}
            assert {t: (sc.name, sc.encoding) for t, sc in schemas.items()} == {
                "/points": ("sensor_msgs/msg/PointCloud2", "ros2msg"),
                "/tf": ("tf2_msgs/msg/TFMessage", "ros2msg"),
            }
            assert all(c.message_encoding == "cdr" for c in summary.channels.values())
            read = [(channel.topic, message.log_time, decoded)
                    for _, channel, message, decoded in reader.iter_decoded_messages()]  # fmt: skip
        for topic in ("/points", "/tf"):
            theirs = [(t, m) for topic_, t, m in read if topic_ == topic]
            ours = by_topic[topic]
            assert [t for t, _ in theirs] == [t for t, _ in ours]
            for (_, a), (_, b) in zip(theirs, ours, strict=True):
                if topic == "/points":
                    stamp = (a.header.stamp.sec, a.header.stamp.nanosec)
                    assert stamp == (b.header.stamp.sec, b.header.stamp.nanosec)
                    assert (a.header.frame_id, a.height, a.width, a.point_step, a.row_step) == (
                        b.header.frame_id,
                        b.height,
                        b.width,
                        b.point_step,
                        b.row_step,
                    )
                    assert [(f.name, f.offset, f.datatype, f.count) for f in a.fields] == [
                        (f.name, f.offset, f.datatype, f.count) for f in b.fields
                    ]
                    assert (a.is_bigendian, a.is_dense) == (b.is_bigendian, b.is_dense)
                    assert bytes(a.data) == b.data.tobytes() and len(a.data) > 28_000
                else:
                    (ta,), (tb,) = a.transforms, b.transforms
                    assert (ta.header.frame_id, ta.child_frame_id) == ("map", "lidar")
                    stamp = (ta.header.stamp.sec, ta.header.stamp.nanosec)
                    assert stamp == (tb.header.stamp.sec, tb.header.stamp.nanosec)
                    va, vb = ta.transform.translation, tb.transform.translation
                    qa, qb = ta.transform.rotation, tb.transform.rotation
                    assert [va.x, va.y, va.z, qa.x, qa.y, qa.z, qa.w] == [
                        vb.x,
                        vb.y,
                        vb.z,
                        qb.x,
                        qb.y,
                        qb.z,
                        qb.w,
                    ]


@pytest.mark.parametrize("name", sorted(BAGS))
def test_a_datasets_bag_is_the_bag_the_sequence_writer_writes(
    made, name: str, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The sequence built as a worker builds it, written by ``write_sequence`` (the
    ``sequence --format rosbag2`` command's writer) with the same options: every message
    the same bytes at the same time on the same topic, with the same types and QoS, and
    the same metadata but for the bag's name (which the storage file records too, so its
    bytes differ there)."""
    from rosbags.rosbag2 import Reader

    from simulator.datasets.worker import build_sequence
    from simulator.sequence import write_sequence

    storage, point_layout = BAGS[name]
    out = made(name)
    spec = _bag_spec(tmp_path, name)
    task = sequence_tasks(_spec_model(), out, spec.parent, resume=False)[1]
    prep = build_sequence(task)
    write_sequence(prep.sim, tmp_path / "seq", "rosbag2", bag=BagOptions(storage, point_layout))
    ext = "mcap" if storage == "mcap" else "db3"
    ours, theirs = out / "bags" / "01", tmp_path / "seq" / "bag"
    meta = (theirs / "metadata.yaml").read_text().replace(f"bag.{ext}", f"01.{ext}")
    assert (ours / "metadata.yaml").read_text() == meta
    held = []
    for bag in (ours, theirs):
        with Reader(bag) as reader:
            held.append([(c.topic, c.msgtype, c.ext, t, bytes(raw))
                         for c, t, raw in reader.messages()])  # fmt: skip
    assert len(held[0]) == 4 and held[0] == held[1]


@pytest.mark.parametrize(
    ("name", "how"),
    [("mcap-lidar-sim", "workers"), ("sqlite3-autoware", "workers"),
     ("mcap-lidar-sim", "local:2")],
)  # fmt: skip
def test_workers_write_the_bags_of_one_process(made, name: str, how: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two local worker processes, or a 2-worker Dask LocalCluster: the same bytes (no
    wall-clock time or random id in a bag); each worker writes one sequence whole (its
    two frames, one build): a bag is never split between workers."""
    out = tmp_path / "two"
    spec = _bag_spec(tmp_path, name)
    if how == "workers":
        manifest = run_dataset(spec, out, workers=2)
    else:
        manifest = run_dataset(spec, out, scheduler=how)
    assert manifest["errors"] == []
    assert dataset_files(out) == dataset_files(made(name))
    workers = manifest["workers"]
    assert len(workers) == 2
    assert sorted((w["frames"], w["builds"]) for w in workers.values()) == [(2, 1), (2, 1)]


#: The child: the dataset command, SIGKILLed as it writes frame 1 of sequence 01's bag
#: (sequence 00's bag finished, 01's half-written under its temporary name).
_KILL_IN_BAG = """
import os, signal, sys

from simulator.io import rosbag

write = rosbag.RosbagWriter.write_frame


def write_frame(self, *args, **kwargs):
    self.frames_in = getattr(self, "frames_in", 0) + 1
    if self.path.name == "01" and self.frames_in == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return write(self, *args, **kwargs)


rosbag.RosbagWriter.write_frame = write_frame
from simulator.cli import main

sys.argv = ["lidar-sim", *sys.argv[1:]]
main()
"""


def test_a_killed_run_resumes_keeping_finished_bags_and_redoing_the_rest(
    made, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL in the middle of sequence 01's bag: 00's bag is complete, 01 is only a
    temporary folder. ``--resume`` keeps 00 (not rewritten: same modification times),
    redoes 01 whole, removes the temporary, and the folder holds the uninterrupted run's
    bytes."""
    name = "mcap-lidar-sim"
    spec = _bag_spec(tmp_path, name)
    out = tmp_path / "killed"
    args = ["dataset", str(spec), "-o", str(out), "--workers", "1", "-q"]
    proc = subprocess.run([sys.executable, "-c", _KILL_IN_BAG, *args], capture_output=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    layout = DatasetLayout("rosbag2", out)
    assert [layout.has_sample(s, k) for s in (0, 1) for k in (0, 1)] == [True, True, False, False]
    assert (out / "bags" / ".01.tmp" / "01").is_dir()  # the killed bag, half-written
    kept = {p: p.stat().st_mtime_ns for p in (out / "bags" / "00").iterdir()}
    res = lidar_sim(*args, "--resume")
    assert res.returncode == 0, res.stderr
    assert dataset_files(out) == dataset_files(made(name))
    assert {p: p.stat().st_mtime_ns for p in (out / "bags" / "00").iterdir()} == kept
    assert sorted(p.name for p in (out / "bags").iterdir()) == ["00", "01"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [(s["frames_skipped"], s["frames_written"]) for s in manifest["sequences"]] == [
        (2, 0), (0, 2)]  # fmt: skip


def test_a_failed_frame_drops_its_sequences_bag_and_the_others_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame that fails in sequence 01 (its cloud cannot be encoded): both of 01's
    frames are reported (the failure, and the other frame lost with the bag), no bag or
    temporary of 01 is left, and 00's bag is written."""
    from simulator.io import rosbag

    write = rosbag.RosbagWriter.write_frame

    def failing(self, cloud, stamp_s, *args):  # type: ignore[no-untyped-def]
        if self.path.name == "01" and stamp_s > 0.05:
            raise ValueError("no such point layout today")
        return write(self, cloud, stamp_s, *args)

    monkeypatch.setattr(rosbag.RosbagWriter, "write_frame", failing)
    out = tmp_path / "out"
    manifest = run_dataset(_bag_spec(tmp_path, "mcap-lidar-sim"), out, workers=1)
    errors = [(e["sequence"], e["frame"], e["error"]) for e in manifest["errors"]]
    assert errors == [
        (1, 0, "not written: frame 1 failed, and the sequence's bag with it"),
        (1, 1, "ValueError: no such point layout today"),
    ]
    assert [s["frames_written"] for s in manifest["sequences"]] == [2, 0]
    assert sorted(p.name for p in (out / "bags").iterdir()) == ["00"]


def test_validate_checks_a_rosbag2_spec(tmp_path: Path) -> None:
    res = lidar_sim("validate", _bag_spec(tmp_path, "sqlite3-autoware"))
    assert res.returncode == 0, res.stderr
    said = " ".join(res.stdout.split())  # (the console wraps long lines)
    assert (
        "dataset: 1 groups, 4 samples, rosbag2 layout (sqlite3, autoware points, frame lidar)"
        in said
    )


@pytest.mark.parametrize(
    ("top", "fragment"),
    [({"layout": "npz", "rosbag2": {"storage": "mcap"}},
      "rosbag2: a rosbag2 section is for layout rosbag2, and this spec's layout is npz"),
     ({"layout": "rosbag2", "rosbag2": {"storage": "db3"}},
      "rosbag2.storage: Input should be 'mcap' or 'sqlite3' (got 'db3')"),
     ({"layout": "rosbag2", "rosbag2": {"point_layout": "pcl"}},
      "rosbag2.point_layout: Input should be 'lidar-sim', 'velodyne', 'autoware' or 'ouster'"),
     ({"layout": "rosbag2", "rosbag2": {"frame_id": "map"}},
      "rosbag2.frame_id: 'map' is the poses' parent frame on /tf"),
     ({"layout": "rosbag2", "range_images": True},
      "range_images: true with layout rosbag2; expected false")],
    ids=["another-layout", "storage", "point-layout", "frame-id", "range-images"],
)  # fmt: skip
def test_a_bad_rosbag2_spec_is_refused_in_one_line(
    top: dict, fragment: str, tmp_path: Path
) -> None:
    """Through the command: exit code 2, one line naming the file and the key, nothing
    written; ``validate`` says the same."""
    spec = _spec(tmp_path, "bad", **top)
    out = tmp_path / "out"
    res = lidar_sim("dataset", spec, "-o", out, "--workers", "1")
    refused_in_one_line(res, f"{spec}: {fragment}", out)
    res = lidar_sim("validate", spec)
    refused_in_one_line(res, f"{spec}: {fragment}", out)


def test_a_run_without_resume_replaces_the_bags_whole(made, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A second run into a finished folder (no ``--resume``) writes every bag again and
    renames each over the old one: the same bytes, new files, nothing left aside."""
    import shutil

    name = "sqlite3-autoware"
    out = tmp_path / "again"
    shutil.copytree(made(name), out)
    before = {p: p.stat().st_ino for p in out.rglob("*") if p.is_file()}
    manifest = run_dataset(_bag_spec(tmp_path, name), out, workers=1)
    assert manifest["errors"] == [] and manifest["frames"] == 4
    assert dataset_files(out) == dataset_files(made(name))
    assert sorted(p.name for p in (out / "bags").iterdir()) == ["00", "01"]
    for p, inode in before.items():
        assert p.stat().st_ino != inode, p  # written again, not kept


def test_the_commands_options_choose_the_bags_over_the_spec(made, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``--storage`` and ``--point-layout`` over the spec's section: the bags of a spec
    that says so (the manifest records the choice), and a finished bag counts as done
    only in its own storage (a resume in the other writes it again)."""
    out = tmp_path / "chosen"
    res = lidar_sim("dataset", _bag_spec(tmp_path, "mcap-lidar-sim"), "-o", out, "--workers",
                    "1", "-q", "--storage", "sqlite3", "--point-layout", "autoware")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert dataset_files(out) == dataset_files(made("sqlite3-autoware"))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["rosbag2"] == {"storage": "sqlite3", "point_layout": "autoware",
                                           "frame_id": "lidar"}  # fmt: skip
    assert DatasetLayout("rosbag2", out, bag=BagOptions("sqlite3")).has_sample(1, 1)
    assert not DatasetLayout("rosbag2", out, bag=BagOptions("mcap")).has_sample(1, 1)


@pytest.mark.parametrize(
    ("layout", "option", "fragment"),
    [("npz", ["--storage", "sqlite3"],
      "layout: npz, and --storage sqlite3 is for layout rosbag2 only"),
     ("rosbag2", ["--storage", "db3"], "--storage: 'db3' is not one of mcap, sqlite3"),
     ("rosbag2", ["--point-layout", "pcl"],
      "--point-layout: 'pcl' is not one of lidar-sim, velodyne, autoware, ouster")],
)  # fmt: skip
def test_a_bag_option_the_spec_cannot_take_is_refused_in_one_line(
    layout: str, option: list[str], fragment: str, tmp_path: Path
) -> None:
    spec = _spec(tmp_path, "spec", layout=layout)
    out = tmp_path / "out"
    res = lidar_sim("dataset", spec, "-o", out, "--workers", "1", *option)
    refused_in_one_line(res, fragment, out)
