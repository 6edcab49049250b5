"""Datasets: bit-identical across executors, resumable, readable by the layout's own rules."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.constants import sequence_seed
from simulator.datasets import SemanticKittiDataset, run_dataset, torch_dataset
from simulator.generators import GENERATORS
from simulator.io.npz import read_npz

from .conftest import REPO

DEMO = REPO / "configs" / "datasets" / "demo.yaml"


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}  # fmt: skip


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "ds"
    manifest = run_dataset(DEMO, out, workers=1)
    assert manifest["errors"] == [] and manifest["frames"] == 6
    return out


def test_dask_two_workers_equal_one_process_bit_for_bit(one_process: Path, tmp_path: Path) -> None:
    out = tmp_path / "dask"
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "dataset", str(DEMO), "-o",
                          str(out), "--scheduler", "local:2", "-q"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert _files(out) == _files(one_process)
    assert len(_files(out)) == 2 * (3 + 3 + 3 + 4)  # bins, labels, boxes, poses/times/calib, NN


def test_odometry_poses_sit_where_kitti_tools_look(one_process: Path) -> None:
    """poses/NN.txt at the root: one 3x4 row-major pose (12 numbers) a frame, the same
    bytes as the sequence's poses.txt, the first frame's sensor at the trajectory start."""
    for seq in ("00", "01"):
        odometry = one_process / "poses" / f"{seq}.txt"
        assert odometry.read_bytes() == (one_process / "sequences" / seq / "poses.txt").read_bytes()
        poses = np.loadtxt(odometry).reshape(-1, 3, 4)
        assert poses.shape == (3, 3, 4)
        np.testing.assert_allclose(poses[:, :, :3] @ poses[:, :, :3].transpose(0, 2, 1),
                                   np.broadcast_to(np.eye(3), (3, 3, 3)), atol=1e-9)  # fmt: skip
    spec = yaml.safe_load(DEMO.read_text())
    start = spec["groups"][0]["trajectory"]["start"]["position_m"]
    first = np.loadtxt(one_process / "poses" / "00.txt").reshape(-1, 3, 4)[0]
    np.testing.assert_allclose(first[:, 3], np.add(start, [0, 0, 1.8]), atol=1e-9)


def test_semantickitti_files_read_back_by_the_layouts_rules(
    one_process: Path, tmp_path: Path
) -> None:
    """np.fromfile and the label bit split give the same points as the npz layout's record."""
    spec = yaml.safe_load(DEMO.read_text())
    spec["layout"] = "npz"
    npz_spec = tmp_path / "npz.yaml"
    npz_spec.write_text(yaml.safe_dump(spec))
    run_dataset(npz_spec, tmp_path / "npz", workers=1)
    for seq in ("00", "01"):
        for frame in range(3):
            name = f"{frame:06d}"
            points = np.fromfile(one_process / "sequences" / seq / "velodyne" / f"{name}.bin",
                                 dtype="<f4").reshape(-1, 4)  # fmt: skip
            raw = np.fromfile(one_process / "sequences" / seq / "labels" / f"{name}.label",
                              dtype="<u4")  # fmt: skip
            record = read_npz(tmp_path / "npz" / "sequences" / seq / "frames" / f"{name}.npz")
            assert len(points) == len(raw) == len(record) > 5000
            np.testing.assert_array_equal(points[:, :3], record["xyz"])
            np.testing.assert_allclose(points[:, 3], record["intensity"] / 255.0, rtol=1e-6)
            np.testing.assert_array_equal(raw & 0xFFFF, record["label"])
            np.testing.assert_array_equal(raw >> 16, record["instance"])
            assert record["time_s"].min() >= 0 and record["time_s"].max() < 0.1
    poses = np.loadtxt(one_process / "sequences" / "00" / "poses.txt").reshape(-1, 3, 4)
    np.testing.assert_allclose(poses[:, 0, 3], -10 + 5 * np.array([0.0, 0.1, 0.2]), atol=1e-9)


def test_per_label_counts_are_plausible(one_process: Path) -> None:
    data = SemanticKittiDataset(one_process)
    assert len(data) == 6
    street = [data[i]["label"] for i in range(len(data)) if data[i]["sequence"] == "01"]
    labels = np.concatenate(street)
    ids, counts = np.unique(labels, return_counts=True)
    share = dict(zip(ids.tolist(), (counts / counts.sum()).tolist(), strict=True))
    for name_id in (40, 48, 50):  # road, sidewalk, building
        assert share.get(name_id, 0) > 0.02, name_id
    assert share.get(10, 0) + share.get(252, 0) > 0.001  # cars, parked or moving
    item = data[0]
    assert item["points"].shape[1] == 4 and item["pose"].shape == (4, 4)


_KILL_BEFORE_RENAME = """
import os, signal, sys
from pathlib import Path

target = Path(sys.argv[1])
rename = os.replace


def replace(src, dst, *args, **kwargs):
    if Path(dst) == target:  # the event: frame 2's file is written, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(src, dst, *args, **kwargs)


os.replace = replace
from simulator.cli import main

sys.argv = ["lidar-sim", *sys.argv[2:]]
main()
"""


def test_resume_after_a_killed_run_completes_identically(one_process: Path, tmp_path: Path) -> None:
    """SIGKILL at a fixed event (frame 2 of sequence 00 fully written under its temporary
    name, not yet renamed): frames 0 and 1 are complete, frame 2 is only a stale temporary,
    and a resumed run finishes the dataset bit for bit as one uninterrupted run, without
    redoing a finished frame."""
    out = tmp_path / "killed"
    args = ["dataset", str(DEMO), "-o", str(out), "--workers", "1", "-q"]
    target = out / "sequences" / "00" / "velodyne" / "000002.bin"
    proc = subprocess.run([sys.executable, "-c", _KILL_BEFORE_RENAME, str(target), *args],
                          capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.bin") if ".tmp" not in p.name}
    assert sorted(p.name for p in before) == ["000000.bin", "000001.bin"]
    assert not target.exists()
    stale = [p for p in out.rglob("*") if p.is_file() and ".tmp" in p.name]
    assert stale, "the killed write left its temporary file"
    cmd = [sys.executable, "-m", "simulator.cli", *args]
    res = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert _files(out) == _files(one_process)
    for p, mtime in before.items():
        assert p.stat().st_mtime_ns == mtime  # finished samples were not redone
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]


def test_a_failing_sample_is_reported_and_the_others_finish(tmp_path: Path) -> None:
    """A sequence that fails while it runs (its trajectory file is missing) is reported
    with its sequence, frame and seed; the others finish."""
    spec = yaml.safe_load(DEMO.read_text())
    spec["groups"].append({"name": "broken", "generator": "farm_yard", "frames": 2,
                           "trajectory": {"file": "no-such-poses.txt"}})  # fmt: skip
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(spec))
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "dataset", str(path), "-o",
                          str(tmp_path / "out"), "--workers", "1"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 1
    seed = sequence_seed(0, 2)
    assert f"sequence 2 frame 0 (seed {seed})" in res.stderr
    assert "no-such-poses.txt" in res.stderr and "Traceback" not in res.stderr
    assert len(list((tmp_path / "out").rglob("*.bin"))) == 6


@pytest.mark.parametrize(
    ("group", "key", "words"),
    [({"scanner": "rs-helios-9999"}, "groups[2].scanner", "unknown scanner preset"),
     ({"scanner_overrides": {"range_max_m": -1}}, "groups[2].scanner_overrides.range_max_m",
      "greater than 0"),
     ({"scene": "no-such-scene.yaml", "generator": None}, "groups[2].scene", "no-such-scene"),
     ({"scene": "scene.yaml", "generator": None}, "groups[2].scene", "unknown material")],
)  # fmt: skip
def test_a_spec_is_checked_whole_before_any_sample_runs(
    tmp_path: Path, group: dict, key: str, words: str
) -> None:
    """A bad third group is one error line naming the spec and the group's key, exit 2,
    and nothing is written: not even the good groups' samples."""
    (tmp_path / "scene.yaml").write_text(yaml.safe_dump(
        {"objects": [{"name": "x", "box": {"size_m": [1, 1, 1]}, "material": "unobtainium"}]}
    ))  # fmt: skip
    spec = yaml.safe_load(DEMO.read_text())
    bad = {"name": "bad", "generator": "farm_yard", "frames": 1, **group}
    spec["groups"].append({k: v for k, v in bad.items() if v is not None})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "dataset", str(path), "-o",
                          str(out), "--workers", "1"], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert f"{path}: {key}" in res.stderr.replace("\n", "") and words in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() or not list(out.rglob("*.bin"))


def test_bad_spec_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("groups: [{name: a, generator: moon_base}]\n")
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "dataset", str(path), "-o",
                          str(tmp_path / "o")], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2 and "groups[0].generator" in res.stderr


def test_generators_are_seeded() -> None:
    for gen in GENERATORS.values():
        assert gen(5) == gen(5)
        assert gen(5) != gen(6)


def test_torch_dataset_needs_torch_only_when_asked(one_process: Path) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="PyTorch"):
            torch_dataset(one_process)
    else:
        ds = torch_dataset(one_process)
        assert len(ds) == 6 and ds[0]["points"].shape[1] == 4


def test_parallel_workers_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """N local workers each cast and compute on cores // N threads (at least one), so they
    do not oversubscribe the machine; one in-process run keeps all cores (threads 0)."""
    from simulator.config import load_dataset_spec
    from simulator.datasets import generate

    tasks = generate._tasks(load_dataset_spec(DEMO), Path("/tmp/x"), DEMO.parent, False)
    assert {t.threads for t in tasks} == {0}
    monkeypatch.setattr(generate.os, "cpu_count", lambda: 8)
    assert {t.threads for t in generate._share_cores(tasks, 2)} == {4}
    assert {t.threads for t in generate._share_cores(tasks, 3)} == {2}
    assert {t.threads for t in generate._share_cores(tasks, 16)} == {1}
    shared = generate._share_cores(tasks, 2)
    assert [(t.index, t.seed) for t in shared] == [(t.index, t.seed) for t in tasks]
