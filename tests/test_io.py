"""Writers: every format read back with an independent reader (numpy, Open3D, laspy)."""

from __future__ import annotations

from pathlib import Path

import laspy
import numpy as np
import open3d as o3d
import pytest

import simulator
from simulator.backend import Backend
from simulator.io import write
from simulator.io.kitti import read_kitti
from simulator.io.labels import pack_labels, unpack_labels
from simulator.io.npz import read_npz
from simulator.pointcloud import DIAGNOSTIC_FIELDS, FIELDS, PointCloud

from .conftest import REPO


@pytest.fixture(scope="module")
def cloud() -> PointCloud:
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    return simulator.scan(survey, ["revolutions=0.2", "output.diagnostics=true"])


def test_record_has_the_contract_fields_and_dtypes(cloud: PointCloud) -> None:
    assert cloud.names == [*FIELDS, *DIAGNOSTIC_FIELDS]
    for name, (dtype, shape) in {**FIELDS, **DIAGNOSTIC_FIELDS}.items():
        assert cloud[name].dtype == dtype and cloud[name].shape == (len(cloud), *shape), name
    assert len(cloud) > 5000
    assert set(np.unique(cloud["return_number"])) == {1}


def test_npz_round_trip_is_exact(cloud: PointCloud, tmp_path: Path) -> None:
    path = tmp_path / "scan.npz"
    assert write(cloud, path) == [path]
    back = read_npz(path)
    assert back.names == cloud.names
    for name in cloud.names:
        np.testing.assert_array_equal(back[name], cloud[name])


@pytest.mark.parametrize(
    "layout", ["in place", "in place, copied out", "spooled", "spooled, no holes"]
)
def test_npz_layouts_write_the_same_archive(
    cloud: PointCloud, tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks written in place (holes cut out, or the members copied out where the file
    system cannot cut), or spooled: a valid zip (every CRC checked) of the same arrays,
    no larger than its contents, with no temporary file left."""
    import zipfile

    from simulator.io import npz, open_writer

    if layout == "in place, copied out":

        def refuse(fd: int, offset: int, length: int) -> None:
            raise OSError(95, "Operation not supported")

        monkeypatch.setattr(npz, "_collapse", refuse)
    if layout == "spooled, no holes":  # a file system without sparse files (FAT)
        monkeypatch.setattr(npz, "_holes_are_free", lambda folder: False)
    meta = {} if layout == "spooled" else {"max_points": 3 * len(cloud) + 12_345}
    path = tmp_path / "scan.npz"
    writer = open_writer(path, cloud.spec, meta)
    third = np.arange(len(cloud)) % 3
    parts = [cloud.select(third == k) for k in range(3)]
    empty = PointCloud.empty(diagnostics=True)
    assert empty.spec == cloud.spec
    for part in [*parts, empty, *parts]:
        writer.write(part)
    assert (writer.inner._direct is not None) == layout.startswith("in place")
    assert writer.close() == [path]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.npz"]
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None
        payload = sum(i.file_size for i in zf.infolist())
    assert path.stat().st_size < payload + 4096 * len(cloud.names) + 4096
    back = read_npz(path)
    for name in cloud.names:
        expected = np.concatenate([p[name] for p in parts] * 2)
        np.testing.assert_array_equal(back[name], expected, err_msg=name)


@pytest.mark.parametrize("layout", ["in place", "spooled"])
def test_npz_bytes_are_the_same_whenever_they_are_written(
    cloud: PointCloud, tmp_path: Path, layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same cloud written at two different times (the clock moved by a day) gives the
    same bytes, in place and spooled: every member is stamped 1980-01-01 00:00:00, or
    with ``SOURCE_DATE_EPOCH`` when it is set (UTC), which also gives a LAS header its
    creation day. The boxes file's writer too."""
    import time
    import zipfile

    from simulator.io import npz, open_writer

    def written(name: str, clock_s: float) -> bytes:
        monkeypatch.setattr(time, "time", lambda: clock_s)
        monkeypatch.setattr(time, "localtime", lambda *a: time.gmtime(clock_s))
        meta = {} if layout == "spooled" else {"max_points": len(cloud)}
        writer = open_writer(tmp_path / name, cloud.spec, meta)
        writer.write(cloud)
        writer.close()
        return (tmp_path / name).read_bytes()

    first, second = written("a.npz", 1.7e9), written("b.npz", 1.7e9 + 86_400)
    assert first == second
    with zipfile.ZipFile(tmp_path / "a.npz") as zf:
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764806403")  # 2025-12-04 00:00:03 UTC
    written("c.npz", 1.7e9)
    with zipfile.ZipFile(tmp_path / "c.npz") as zf:
        assert {i.date_time for i in zf.infolist()} == {(2025, 12, 4, 0, 0, 2)}  # 2 s steps
    writer = open_writer(tmp_path / "c.las", cloud.spec, {})  # a LAS header's creation day
    writer.write(cloud)
    writer.close()
    header = laspy.read(tmp_path / "c.las").header
    assert header.creation_date.isoformat() == "2025-12-04"
    assert header.generating_software == f"lidar-sim {simulator.__version__}"
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    arrays = {"a": np.arange(5.0), "b": np.ones((2, 3), np.int32)}
    boxes = []
    for clock_s in (1.7e9, 1.8e9):
        monkeypatch.setattr(time, "time", lambda c=clock_s: c)
        monkeypatch.setattr(time, "localtime", lambda *a, c=clock_s: time.gmtime(c))
        out = tmp_path / f"boxes-{clock_s:.0f}.npz"
        npz.savez(out, **arrays)
        boxes.append(out.read_bytes())
    assert boxes[0] == boxes[1]
    with np.load(tmp_path / "boxes-1700000000.npz") as back:
        for name, value in arrays.items():
            np.testing.assert_array_equal(back[name], value)
            assert back[name].dtype == value.dtype


def test_npz_in_place_refuses_more_points_than_it_was_made_for(
    cloud: PointCloud, tmp_path: Path
) -> None:
    from simulator.io import open_writer

    writer = open_writer(tmp_path / "scan.npz", cloud.spec, {"max_points": len(cloud) - 1})
    with pytest.raises(RuntimeError, match="more points than"):
        writer.write(cloud)
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_crc32_combine_is_the_crc_of_the_concatenation() -> None:
    import zlib

    from simulator.io.npz import crc32_combine

    rng = np.random.default_rng(5)
    for size_a, size_b in [(0, 0), (0, 7), (5, 0), (1, 1), (300, 4097), (64, 1 << 16),
                           (9, 3_000_001)]:  # fmt: skip
        a, b = rng.bytes(size_a), rng.bytes(size_b)
        assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@pytest.mark.parametrize("ext", ["pcd", "ply"])
def test_pcd_and_ply_keep_every_field(cloud: PointCloud, tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"scan.{ext}"
    write(cloud, path)
    back = o3d.t.io.read_point_cloud(str(path))
    np.testing.assert_array_equal(back.point.positions.numpy(), cloud["xyz"])
    names = {"time_s": "time", "range_m": "range"}
    for name in cloud.names:
        if name == "xyz":
            continue
        values = back.point[names.get(name, name)].numpy().ravel()
        np.testing.assert_array_equal(values, cloud[name].astype(values.dtype), err_msg=name)
    # PCD keeps the record's own dtypes (PLY stores uint64 pulse ids as float64).
    if ext == "pcd":
        assert back.point["ring"].dtype == o3d.core.uint16
        assert back.point["time"].dtype == o3d.core.float64
    # The legacy API (what most tools use) reads the positions too.
    legacy = o3d.io.read_point_cloud(str(path))
    assert len(legacy.points) == len(cloud)


@pytest.mark.parametrize("ext", ["las", "laz"])
def test_las_and_laz_point_format_6(cloud: PointCloud, tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"scan.{ext}"
    write(cloud, path)
    las = laspy.read(str(path))
    assert las.header.version.major == 1 and las.header.version.minor == 4
    assert las.header.point_format.id == 6
    assert las.header.point_count == len(cloud)
    xyz = np.stack([las.x, las.y, las.z], axis=1)
    np.testing.assert_allclose(xyz, cloud["xyz"], atol=0.6e-4)
    np.testing.assert_array_equal(las.intensity, np.round(cloud["intensity"]).astype(np.uint16))
    np.testing.assert_array_equal(las.gps_time, cloud["time_s"])
    np.testing.assert_array_equal(las.return_number, cloud["return_number"])
    np.testing.assert_array_equal(las.number_of_returns, cloud["num_returns"])
    np.testing.assert_array_equal(las.classification, cloud["label"])
    np.testing.assert_array_equal(las.ring, cloud["ring"])
    np.testing.assert_array_equal(las.label, cloud["label"])
    np.testing.assert_array_equal(las.instance, cloud["instance"])
    np.testing.assert_array_equal(las.range, cloud["range_m"])


def test_las_packing_kernel_is_byte_identical_to_numpy(cloud: PointCloud, backend: Backend) -> None:
    """The numba record packer and the numpy one give the same bytes, edge values too
    (intensity over 65535 and below 0, halves rounding to even, labels over a byte)."""
    from simulator.backend import NumpyBackend
    from simulator.io import las

    edge = PointCloud({k: np.array(v) for k, v in cloud.fields.items()})
    edge.fields["intensity"][:6] = [70000.0, -3.0, 2.5, 3.5, 255.49, 65535.6]
    edge.fields["label"][:3] = [300, 255, 256]
    edge.fields["num_returns"][:2] = [3, 15]
    edge.fields["return_number"][:2] = [2, 15]
    header = las.las_header(np.floor(edge["xyz"].min(axis=0).astype(np.float64)))
    kernel = las.packed_records(edge, header, backend).array
    reference = las.packed_records(edge, header, NumpyBackend()).array
    assert kernel.tobytes() == reference.tobytes()
    assert kernel["intensity"][:6].tolist() == [65535, 0, 2, 4, 255, 65535]
    assert kernel["classification"][:3].tolist() == [0, 255, 0]


def test_kitti_bin_and_semantic_kitti_label(cloud: PointCloud, tmp_path: Path) -> None:
    path = tmp_path / "000000.bin"
    assert write(cloud, path) == [path, tmp_path / "000000.label"]
    assert path.stat().st_size == 16 * len(cloud)
    points, labels = read_kitti(path)
    np.testing.assert_array_equal(points[:, :3], cloud["xyz"])
    np.testing.assert_allclose(points[:, 3], cloud["intensity"] / 255.0, rtol=1e-6)
    assert labels is not None
    np.testing.assert_array_equal(labels & 0xFFFF, cloud["label"])
    np.testing.assert_array_equal(labels >> 16, cloud["instance"])


def test_label_codec_packs_semantic_low_and_instance_high() -> None:
    label = np.array([0, 40, 252, 0xFFFF], dtype=np.uint16)
    instance = np.array([0, 1, 7, 0xFFFF], dtype=np.uint16)
    raw = pack_labels(label, instance)
    assert raw.dtype == np.dtype("<u4")
    assert raw.tobytes() == np.array([0, 0x10028, 0x700FC, 0xFFFFFFFF], "<u4").tobytes()
    back_label, back_instance = unpack_labels(raw)
    assert back_label.dtype == back_instance.dtype == np.uint16
    np.testing.assert_array_equal(back_label, label)
    np.testing.assert_array_equal(back_instance, instance)


def test_label_counts_most_common_first_ties_in_first_appearance_order() -> None:
    from collections import Counter

    from simulator.labels import count_labels, label_name

    labels = np.array([72, 40, 40, 10, 72, 999, 10, 40], dtype=np.uint16)
    n = len(labels)
    cloud = PointCloud({"xyz": np.zeros((n, 3), np.float32), "label": labels})
    expected = {label_name(k): v for k, v in Counter(labels.tolist()).most_common()}
    assert list(cloud.label_counts().items()) == list(expected.items())
    assert list(cloud.label_counts()) == ["road", "terrain", "car", "id 999"]
    running = count_labels(labels[:4])
    assert list(running.items()) == [(10, 1), (40, 2), (72, 1)]
    assert count_labels(labels[4:], into=running) is running
    assert running == {10: 2, 40: 3, 72: 2, 999: 1}


def test_empty_cloud_writes_valid_files(tmp_path: Path) -> None:
    empty = PointCloud.empty(meta={"intensity_max": 255.0})
    for ext in ("npz", "pcd", "ply", "las", "bin"):
        write(empty, tmp_path / f"e.{ext}")
    assert len(read_npz(tmp_path / "e.npz")) == 0
    back = o3d.t.io.read_point_cloud(str(tmp_path / "e.ply"))
    assert "positions" not in back.point or back.point.positions.shape[0] == 0
    # Open3D cannot write or read a PCD without points; ours has PCL's header with POINTS 0.
    header = (tmp_path / "e.pcd").read_text().splitlines()
    assert "FIELDS x y z intensity range ring time return_number" in " ".join(header)
    assert "POINTS 0" in header and header[-1] == "DATA binary"
    assert laspy.read(str(tmp_path / "e.las")).header.point_count == 0


def test_failed_write_leaves_neither_partial_file_nor_old_file_damaged(
    cloud: PointCloud, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writers write to a temporary name and rename: a crash midway leaves the old file."""
    path = tmp_path / "scan.npz"
    path.write_bytes(b"previous result")

    def explode(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    from simulator.io import npz

    monkeypatch.setattr(npz, "_pwrite_all", explode)  # the disk fills midway
    with pytest.raises(simulator.OutputError, match="No space left"):
        write(cloud, path)
    assert path.read_bytes() == b"previous result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.npz"]


def test_unknown_extension_is_rejected_before_writing(cloud: PointCloud, tmp_path: Path) -> None:
    with pytest.raises(simulator.OutputError, match="unknown output format"):
        write(cloud, tmp_path / "scan.xyz")
    assert list(tmp_path.iterdir()) == []


def test_chunked_writing_equals_the_whole_cloud(cloud: PointCloud, tmp_path: Path) -> None:
    """Writing chunk by chunk (small chunks) gives the same file contents as one cloud."""
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    sim = simulator.Simulation.from_file(
        survey, ["revolutions=0.2", "output.diagnostics=true", "chunk_pulses=999"]
    )
    paths = [tmp_path / f"c.{ext}" for ext in ("npz", "pcd", "ply", "las", "bin")]
    summary = sim.write(paths)
    assert summary.points == len(cloud)
    assert summary.label_counts == {
        int(k): int(v) for k, v in zip(*np.unique(cloud["label"], return_counts=True), strict=True)
    }
    back = read_npz(paths[0])
    for name in cloud.names:
        np.testing.assert_array_equal(back[name], cloud[name], err_msg=name)
    pcd = o3d.t.io.read_point_cloud(str(paths[1]))
    np.testing.assert_array_equal(pcd.point["time"].numpy().ravel(), cloud["time_s"])
    ply = o3d.t.io.read_point_cloud(str(paths[2]))
    np.testing.assert_array_equal(ply.point.positions.numpy(), cloud["xyz"])
    las = laspy.read(str(paths[3]))
    np.testing.assert_array_equal(las.label, cloud["label"])
    np.testing.assert_allclose(las.x, cloud["xyz"][:, 0], atol=0.6e-4)
    points, labels = read_kitti(paths[4])
    np.testing.assert_array_equal(points[:, :3], cloud["xyz"])
    assert labels is not None
    np.testing.assert_array_equal(labels >> 16, cloud["instance"])


def test_interrupted_scan_leaves_no_file(tmp_path: Path) -> None:
    """A scan stopped midway (Ctrl-C) removes its temporary files and writes nothing."""
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    sim = simulator.Simulation.from_file(survey, ["revolutions=1", "chunk_pulses=5000"])
    paths = [tmp_path / f"i.{ext}" for ext in ("npz", "pcd", "las", "laz", "bin")]

    def stop_midway(done: int, total: int) -> None:
        if done > total // 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sim.write(paths, progress=stop_midway)
    assert list(tmp_path.iterdir()) == []


_KILL_AT = """
import os, signal, sys
from pathlib import Path

event, target = sys.argv[1], Path(sys.argv[2])
rename, pwrite = os.replace, os.pwrite
writes = []


def replace(src, dst, *args, **kwargs):
    if event == "before_rename" and Path(dst) == target:
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(src, dst, *args, **kwargs)


def pwrite_then_die(fd, data, offset):
    writes.append(offset)
    if event == "mid_write" and len(writes) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return pwrite(fd, data, offset)


os.replace, os.pwrite = replace, pwrite_then_die
from simulator.cli import main

sys.argv = ["lidar-sim", *sys.argv[3:]]
main()
"""


@pytest.mark.parametrize("event", ["mid_write", "before_rename"])
def test_a_scan_killed_while_writing_leaves_the_previous_file_intact(
    tmp_path: Path, event: str
) -> None:
    """SIGKILL at a fixed point of the write (the third block of the npz, or with the file
    complete under its temporary name): the earlier file under the target's name is
    untouched, bit for bit; the next run replaces it and leaves no temporary behind."""
    import signal
    import subprocess
    import sys

    survey = str(REPO / "scenes" / "farm" / "survey.yaml")
    target = tmp_path / "scan.npz"
    scan = ["scan", survey, "-o", str(target), "-q", "--set", "revolutions=0.5"]
    from .conftest import lidar_sim

    # The runs before and after in this process; the killed one in a child.
    first = lidar_sim(*scan, "--set", "seed=1", "--set", "chunk_pulses=4000")
    assert first.returncode == 0, first.stderr
    before = target.read_bytes()
    killed = subprocess.run(
        [sys.executable, "-c", _KILL_AT, event, str(target), *scan, "--set", "seed=2",
         "--set", "chunk_pulses=4000"], capture_output=True, text=True)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]  # the killed write's
    again = lidar_sim(*scan, "--set", "seed=2")
    assert again.returncode == 0, again.stderr
    assert target.read_bytes() != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scan.npz"]
