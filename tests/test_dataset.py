"""Datasets: bit-identical across executors, resumable after a kill in every layout and
under a Dask scheduler, readable by the layout's own rules. One spec (the demo's two
sequences of three frames) serves every test; the runs are module fixtures."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.constants import sequence_seed
from simulator.datasets import SemanticKittiDataset, run_dataset, torch_dataset, worker
from simulator.datasets.dispatch import Dispatcher
from simulator.datasets.tasks import SequenceResult, sequence_tasks, share_cores
from simulator.errors import ConfigError
from simulator.generators import GENERATORS
from simulator.io.layouts import DatasetLayout
from simulator.io.npz import read_npz

from .conftest import REPO, dataset_files

DEMO = REPO / "configs" / "datasets" / "demo.yaml"
#: Files of the demo in the SemanticKITTI layout: per sequence 3 bins, labels and boxes,
#: poses.txt, times.txt, calib.txt and poses/NN.txt.
DEMO_FILES = 2 * (3 + 3 + 3 + 4)


def _cli(*args: str | Path) -> tuple[int, str]:
    """``lidar-sim ARGS`` in this process: its exit code and stderr."""
    from simulator.cli import main

    err = io.StringIO()
    code = 0
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, err.getvalue()


def _edited_demo(tmp: Path, name: str, edit: Callable[[dict], None]) -> Path:
    """The demo spec changed by ``edit``, written as ``tmp/NAME.yaml``."""
    spec = yaml.safe_load(DEMO.read_text())
    edit(spec)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _demo_as(tmp: Path, layout: str) -> Path:
    return _edited_demo(tmp, layout, lambda spec: spec.update(layout=layout))


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "ds"
    manifest = run_dataset(DEMO, out, workers=1)
    assert manifest["errors"] == [] and manifest["frames"] == 6
    # the machine, so that a user can tell two machines' datasets apart (issue 49)
    machine = json.loads((out / "manifest.json").read_text())["machine"]
    assert machine["cpu"]["machine"] and "numpy" in machine["libraries"]
    assert {"open3d", "numba"} <= set(machine["libraries"])
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, one_process: Path):  # type: ignore[no-untyped-def]
    """The demo in a layout, by one process (each layout made once, when first asked)."""
    made = {"semantickitti": one_process}
    tmp = tmp_path_factory.mktemp("layouts")

    def get(layout: str) -> Path:
        if layout not in made:
            out = tmp / layout
            assert run_dataset(_demo_as(tmp, layout), out, workers=1)["errors"] == []
            made[layout] = out
        return made[layout]

    return get


def test_a_dask_cluster_on_loopback_writes_the_files_of_one_process(
    one_process: Path, dask_cluster: str, tmp_path: Path
) -> None:
    """Two ``dask worker`` processes write the one process's files byte for byte; the
    frames are spread over both, and each worker builds a sequence once for its frames
    (6 frames of 2 sequences: at most one sequence built twice, when one worker takes
    frames of the other's, never once a frame)."""
    out = tmp_path / "cluster"
    manifest = run_dataset(DEMO, out, scheduler=dask_cluster)
    assert manifest["errors"] == []
    assert dataset_files(out) == dataset_files(one_process)
    assert len(dataset_files(out)) == DEMO_FILES
    workers = manifest["workers"]
    assert len(workers) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in workers)
    assert sum(w["frames"] for w in workers.values()) == 6
    assert all(w["frames"] >= 1 for w in workers.values())
    assert 2 <= sum(w["builds"] for w in workers.values()) <= 3


def test_local_workers_write_the_files_of_one_process(one_process: Path, tmp_path: Path) -> None:
    """Two local worker processes, one frame a task: the same bytes."""
    out = tmp_path / "two"
    manifest = run_dataset(DEMO, out, workers=2)
    assert manifest["errors"] == []
    assert dataset_files(out) == dataset_files(one_process)
    workers = manifest["workers"]
    assert len(workers) == 2 and sum(w["frames"] for w in workers.values()) == 6
    assert sum(w["builds"] for w in workers.values()) <= 3
    # the fixture ran the kernels in this process: its OpenMP threads forbid a fork
    assert manifest["start_method"] == "spawn"


@pytest.mark.skipif(sys.platform != "linux", reason="fork is the start method on Linux only")
@pytest.mark.parametrize("workers", [["--workers", "2"], ["--scheduler", "local:2"]])
def test_forked_workers_of_a_fresh_process_write_the_files_of_one_process(
    one_process: Path, tmp_path: Path, workers: list[str]
) -> None:
    """``lidar-sim dataset --workers 2`` (or on a two-worker LocalCluster) in a new
    process forks its workers before any kernel ran (they inherit the imports): the same
    bytes as one process."""
    out = tmp_path / "forked"
    command = [sys.executable, "-m", "simulator.cli", "dataset", str(DEMO), "-o", str(out),
               *workers, "-q"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["start_method"] == "fork" and manifest["errors"] == []
    assert len(manifest["workers"]) == 2
    assert dataset_files(out) == dataset_files(one_process)


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


def test_semantickitti_files_read_back_by_the_layouts_rules(one_process: Path, reference) -> None:  # type: ignore[no-untyped-def]
    """np.fromfile and the label bit split give the npz layout's record: both layouts
    compensate the motion, to the camera's time and to the first firing, which are one time
    here (the demo's heads start facing forward: the poses are the same)."""
    npz = reference("npz")
    for seq in ("00", "01"):
        poses = np.loadtxt(one_process / "sequences" / seq / "poses.txt").reshape(-1, 3, 4)
        first = np.loadtxt(npz / "sequences" / seq / "poses.txt").reshape(-1, 3, 4)
        np.testing.assert_array_equal(poses, first)
        for frame in range(3):
            name = f"{frame:06d}"
            points = np.fromfile(one_process / "sequences" / seq / "velodyne" / f"{name}.bin",
                                 dtype="<f4").reshape(-1, 4)  # fmt: skip
            raw = np.fromfile(one_process / "sequences" / seq / "labels" / f"{name}.label",
                              dtype="<u4")  # fmt: skip
            record = read_npz(npz / "sequences" / seq / "frames" / f"{name}.npz")
            assert len(points) == len(raw) == len(record) > 5000
            np.testing.assert_array_equal(points[:, :3], record["xyz"])
            np.testing.assert_allclose(points[:, 3], record["intensity"] / 255.0, rtol=1e-6)
            np.testing.assert_array_equal(raw & 0xFFFF, record["label"])
            np.testing.assert_array_equal(raw >> 16, record["instance"])
            assert record["time_s"].min() >= 0 and record["time_s"].max() < 0.1
    farm = np.loadtxt(npz / "sequences" / "00" / "poses.txt").reshape(-1, 3, 4)
    np.testing.assert_allclose(farm[:, 0, 3], -10 + 5 * np.array([0.0, 0.1, 0.2]), atol=1e-9)


def test_the_loader_gives_each_frame_as_its_files_hold_it(one_process: Path) -> None:
    """SemanticKittiDataset: the six frames in sequence then frame order, each item the
    frame's own bin, label split, poses.txt line and boxes; the manifest's label counts are
    the label files' own; and the street has the classes of a street."""
    data = SemanticKittiDataset(one_process)
    assert [(data[i]["sequence"], data[i]["frame"]) for i in range(len(data))] == [
        (s, k) for s in ("00", "01") for k in range(3)
    ]
    counts: Counter[str] = Counter()
    from simulator.labels import label_name

    for item in data:
        folder = one_process / "sequences" / item["sequence"]
        name = f"{item['frame']:06d}"
        points = np.fromfile(folder / "velodyne" / f"{name}.bin", "<f4").reshape(-1, 4)
        raw = np.fromfile(folder / "labels" / f"{name}.label", "<u4")
        np.testing.assert_array_equal(item["points"], points)
        np.testing.assert_array_equal(item["label"], raw & 0xFFFF)
        np.testing.assert_array_equal(item["instance"], raw >> 16)
        pose = np.loadtxt(folder / "poses.txt")[item["frame"]].reshape(3, 4)
        np.testing.assert_array_equal(item["pose"], np.vstack([pose, [0, 0, 0, 1]]))
        with np.load(folder / "boxes" / f"{name}.npz") as boxes:
            np.testing.assert_array_equal(item["boxes"].centre_m, boxes["centre_m"])
            np.testing.assert_array_equal(item["boxes"].instance, boxes["instance"])
        ids, n = np.unique(raw & 0xFFFF, return_counts=True)
        counts.update({label_name(int(i)): int(c) for i, c in zip(ids, n, strict=True)})
    manifest = json.loads((one_process / "manifest.json").read_text())
    assert manifest["label_counts_written"] == dict(counts)
    assert manifest["points_written"] == sum(counts.values())
    street = np.concatenate([data[i]["label"] for i in range(3, 6)])
    ids, n = np.unique(street, return_counts=True)
    share = dict(zip(ids.tolist(), (n / n.sum()).tolist(), strict=True))
    for name_id in (40, 48, 50):  # road, sidewalk, building
        assert share.get(name_id, 0) > 0.02, name_id
    assert share.get(10, 0) + share.get(252, 0) > 0.001  # cars, parked or moving


_KILL_BEFORE_RENAME = """
import os, signal, sys
from pathlib import Path

target = Path(sys.argv[1])
rename = os.replace


def replace(src, dst, *args, **kwargs):
    if Path(dst) == target:  # the event: the file is written, not yet renamed
        os.kill(os.getpid(), signal.SIGKILL)
    return rename(src, dst, *args, **kwargs)


os.replace = replace
from simulator.cli import main

sys.argv = ["lidar-sim", *sys.argv[2:]]
main()
"""

#: Per layout: the file of sequence 00's frame 2 whose rename is the kill, and a file of
#: the whole dataset (written at the end, from every sample on disk).
_KILLS = {
    "semantickitti": ("sequences/00/velodyne/000002.bin", "poses/00.txt"),
    "nuscenes": ("samples/LIDAR_TOP/00_000002.pcd.bin", "v1.0-trainval/sample.json"),
    "openpcdet": ("points/00_000002.npy", "ImageSets/train.txt"),
    "kitti": ("training/velodyne/000002.bin", "ImageSets/train.txt"),
}


@pytest.mark.parametrize("layout", list(_KILLS))
def test_resume_after_a_killed_run_completes_identically(
    reference, tmp_path: Path, layout: str
) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL at a fixed event (frame 2 of sequence 00 fully written under its temporary
    name, not yet renamed): frames 0 and 1 are complete, frame 2 is only a stale temporary,
    the dataset's own files (poses, nuScenes' tables, the splits) are not written yet; a
    resumed run finishes the dataset bit for bit as one uninterrupted run, without redoing
    a finished sample. SemanticKITTI resumes through the command's ``--resume``."""
    spec = DEMO if layout == "semantickitti" else _demo_as(tmp_path, layout)
    out = tmp_path / "killed"
    args = ["dataset", str(spec), "-o", str(out), "--workers", "1", "-q"]
    target, whole = (out / p for p in _KILLS[layout])
    proc = subprocess.run([sys.executable, "-c", _KILL_BEFORE_RENAME, str(target), *args],
                          capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert not target.exists() and not whole.exists()
    stale = [p for p in out.rglob("*") if p.is_file() and ".tmp" in p.name]
    assert stale, "the killed write left its temporary file"
    before = {
        p: p.stat().st_mtime_ns
        for p in out.rglob("*")
        if p.is_file() and p.name != ".lidar-sim.lock"
    }  # (the killed run's lock goes)
    files = DatasetLayout(layout, out)
    assert [files.has_sample(s, k) for s in (0, 1) for k in range(3)] == [True, True] + [False] * 4
    if layout == "semantickitti":
        code, err = _cli(*args, "--resume")
        assert code == 0, err
    else:
        manifest = run_dataset(spec, out, workers=1, resume=True)
        assert manifest["errors"] == []
        assert sum(s["frames_skipped"] for s in manifest["sequences"]) == 2
    assert dataset_files(out) == dataset_files(reference(layout))
    for p, mtime in before.items():
        if ".tmp" not in p.name:
            assert p.stat().st_mtime_ns == mtime, p  # finished samples were not redone
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]


_KILL_AFTER_SAMPLES = """
import os, signal, sys

import simulator.datasets as datasets

run = datasets.run_dataset
samples = int(sys.argv[1])


def killed(*args, progress=None, **kwargs):
    def hook(result, done):
        if done >= samples:  # the event: that many samples are done
            os.kill(os.getpid(), signal.SIGKILL)

    return run(*args, progress=hook, **kwargs)


datasets.run_dataset = killed
from simulator.cli import main

sys.argv = ["lidar-sim", *sys.argv[2:]]
main()
"""


def _wait_until_idle(address: str) -> None:
    """Until the scheduler holds no task and no worker is executing one (the killed
    client's last frames finish on their workers; its queued ones are dropped)."""
    from distributed import Client

    with Client(address, timeout=60) as client:
        deadline, quiet = time.monotonic() + 120, 0
        while quiet < 3 and time.monotonic() < deadline:
            tasks = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
            busy = client.run(lambda dask_worker: dask_worker.state.executing_count)
            quiet = quiet + 1 if tasks == 0 and not any(busy.values()) else 0
            time.sleep(0.3)


def test_resume_under_a_scheduler_after_the_client_is_killed(
    one_process: Path, dask_cluster: str, tmp_path: Path
) -> None:
    """``--scheduler`` on the loopback cluster, the command SIGKILLed once two samples are
    done: the samples on disk are kept (not redone) and a resumed run on the same cluster
    writes the files of one uninterrupted process."""
    out = tmp_path / "killed"
    args = ["dataset", str(DEMO), "-o", str(out), "--scheduler", dask_cluster, "-q"]
    proc = subprocess.run([sys.executable, "-c", _KILL_AFTER_SAMPLES, "2", *args],
                          capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    _wait_until_idle(dask_cluster)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.bin") if ".tmp" not in p.name}
    assert 2 <= len(before) < 6  # some frames done, some not
    assert not (out / "poses").exists()  # the sequences' files come at the end
    manifest = run_dataset(DEMO, out, scheduler=dask_cluster, resume=True)
    assert manifest["errors"] == []
    done = [p for p in before if (p.parent.parent / "labels").exists()
            and (p.parent.parent / "labels" / f"{p.stem}.label").exists()]  # fmt: skip
    assert sum(s["frames_skipped"] for s in manifest["sequences"]) <= len(done)
    assert dataset_files(out) == dataset_files(one_process)
    for p, mtime in before.items():
        assert p.stat().st_mtime_ns == mtime  # finished samples were not redone


def test_a_failing_sample_is_reported_and_the_others_finish(tmp_path: Path) -> None:
    """A sequence that fails while it runs (its trajectory file is missing) is reported
    with its sequence, frame and seed; the others finish."""
    spec = yaml.safe_load(DEMO.read_text())
    spec["groups"].append({"name": "broken", "generator": "farm_yard", "frames": 2,
                           "trajectory": {"file": "no-such-poses.txt"}})  # fmt: skip
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(spec))
    code, err = _cli("dataset", path, "-o", tmp_path / "out", "--workers", "1")
    assert code == 1
    seed = sequence_seed(0, 2)
    assert f"sequence 2 frame 0 (seed {seed})" in err
    assert f"sequence 2 frame 1 (seed {seed})" in err
    assert "no-such-poses.txt" in err and "Traceback" not in err
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
    code, err = _cli("dataset", path, "-o", out, "--workers", "1")
    assert code == 2, err
    assert f"{path}: {key}" in err.replace("\n", "") and words in err
    assert "Traceback" not in err
    assert not out.exists() or not list(out.rglob("*.bin"))


def test_bad_spec_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("groups: [{name: a, generator: moon_base}]\n")
    code, err = _cli("dataset", path, "-o", tmp_path / "o")
    assert code == 2 and "groups[0].generator" in err


def test_generators_are_seeded() -> None:
    for gen in GENERATORS.values():
        assert gen(5) == gen(5)
        assert gen(5) != gen(6)


def test_torch_dataset_feeds_a_dataloader(
    one_process: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``torch_dataset`` through a ``torch.utils.data.DataLoader`` (items not batched, as
    frames differ in size): every frame once, in order, each tensor the frame's files (points,
    labels and instances as int64, pose, the (B, 7) boxes and their classes). Without
    PyTorch the call says what to install."""
    import torch
    from torch.utils.data import DataLoader

    from simulator.datasets.read import boxes_7

    data = SemanticKittiDataset(one_process)
    loader = DataLoader(torch_dataset(one_process), batch_size=None, shuffle=False)
    items = list(loader)
    assert len(items) == len(data) == 6
    for got, want in zip(items, data, strict=True):
        assert got["points"].dtype == torch.float32 and got["label"].dtype == torch.int64
        np.testing.assert_array_equal(got["points"].numpy(), want["points"])
        np.testing.assert_array_equal(got["label"].numpy(), want["label"].astype(np.int64))
        np.testing.assert_array_equal(got["instance"].numpy(), want["instance"])
        np.testing.assert_array_equal(got["pose"].numpy(), want["pose"])
        np.testing.assert_array_equal(got["boxes"].numpy(), boxes_7(want["boxes"]))
        np.testing.assert_array_equal(got["box_label"].numpy(), want["boxes"].label)
        assert got["boxes"].shape == (len(want["boxes"]), 7)
    assert sum(len(it["boxes"]) for it in items) > 0
    monkeypatch.setitem(sys.modules, "torch", None)  # PyTorch absent
    with pytest.raises(ImportError, match="PyTorch"):
        torch_dataset(one_process)


def test_a_worker_keeps_what_it_built_keyed_by_content(tmp_path: Path) -> None:
    """The same sequence asked again is the same build, from the cache (0 s building); an
    edited scene file is built anew; the cache keeps at most CACHE_ENTRIES sequences."""
    scene = tmp_path / "scene.yaml"
    ground = {"name": "ground", "plane": {"size_m": [20, 20]}, "material": "asphalt"}
    scene.write_text(yaml.safe_dump({"objects": [ground]}))
    group = {"name": "g", "scene": "scene.yaml", "scanner": "vlp-16", "frames": 2}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"groups": [group]}))
    from simulator.config import load_dataset_spec

    task = sequence_tasks(load_dataset_spec(spec), tmp_path / "o", tmp_path, False)[0]
    worker.clear_cache()
    try:
        first, built_s = worker.prepared(task)
        again, cached_s = worker.prepared(task)
        assert again is first and built_s > 0 and cached_s == 0.0
        other = worker.prepared(dataclasses.replace(task, seed=task.seed + 1))[0]
        assert other is not first
        os.utime(scene, ns=(scene.stat().st_atime_ns, scene.stat().st_mtime_ns + 10**9))
        edited, edited_s = worker.prepared(task)
        assert edited is not first and edited_s > 0
        assert worker.cached_sequences() == worker.CACHE_ENTRIES
    finally:
        worker.clear_cache()


def _simulate(dispatcher: Dispatcher, workers: int, frame_s: dict[int, float],
              build_s: float) -> dict[str, list[tuple[int, int]]]:  # fmt: skip
    """Run a dispatcher on ``workers`` simulated workers (a frame of sequence s takes
    frame_s[s], a build build_s): what each ran, in order."""
    clock = {f"w{k}": 0.0 for k in range(workers)}
    ran: dict[str, list[tuple[int, int]]] = {w: [] for w in clock}
    held: dict[str, set[int]] = {w: set() for w in clock}
    idle = set()
    while len(idle) < workers:
        w = min((w for w in clock if w not in idle), key=lambda w: clock[w])
        job = dispatcher.next(w)
        if job is None:
            idle.add(w)
            continue
        s, _ = job
        build = 0.0 if s in held[w] else build_s
        held[w].add(s)
        clock[w] += build + frame_s[s]
        ran[w].append(job)
        dispatcher.done(SequenceResult(s, 0, frames_written=1, worker=w,
                                       build_s=build, scan_s=frame_s[s]), w)  # fmt: skip
    return ran


def test_the_dispatcher_keeps_workers_on_their_sequences_and_balances_the_rest() -> None:
    """Every frame exactly once. Four equal sequences of six frames on two workers: each
    worker runs two whole sequences, each built once (whole sequences balance). One
    sequence on two workers: both run frames of it. Three
    sequences of twelve, the third twice as long a frame: the worker done first starts the
    third, the other takes frames from its end (eleven frames left outweigh a build)."""
    plan = {s: list(range(6)) for s in range(4)}
    ran = _simulate(Dispatcher(plan), 2, dict.fromkeys(range(4), 1.0), 2.0)
    assert sorted(j for r in ran.values() for j in r) == [
        (s, k) for s in range(4) for k in range(6)
    ]
    for r in ran.values():
        assert len({s for s, _ in r}) == 2 and len(r) == 12
        for s in {s for s, _ in r}:
            assert [k for q, k in r if q == s] == list(range(6))
    ran = _simulate(Dispatcher({0: list(range(6))}), 2, {0: 1.0}, 0.5)
    assert sorted(j for r in ran.values() for j in r) == [(0, k) for k in range(6)]
    assert all(len(r) >= 2 for r in ran.values())  # both work on it
    ran = _simulate(Dispatcher({s: list(range(12)) for s in range(3)}), 2,
                    {0: 1.0, 1: 1.0, 2: 2.0}, 2.0)  # fmt: skip
    everything = [(s, k) for s in range(3) for k in range(12)]
    assert sorted(j for r in ran.values() for j in r) == everything
    by = [{s for s, _ in r} for r in ran.values()]
    assert by[0] & by[1] == {2}  # the third sequence split, the first two whole on one each


def test_a_specs_sample_count_is_what_a_run_writes(one_process: Path) -> None:
    """``DatasetSpec.sample_count`` (the ``dataset`` command's progress total): every frame
    of every sequence of every group, the samples a run writes."""
    from simulator.config import load_dataset_spec

    spec = load_dataset_spec(DEMO)
    manifest = json.loads((one_process / "manifest.json").read_text())
    assert spec.sample_count == manifest["frames"] == 6
    two = spec.model_copy(update={"groups": [g.model_copy(update={"sequences": 3})
                                             for g in spec.groups]})  # fmt: skip
    assert two.sample_count == 2 * 3 * 3


def _files(folder: Path) -> dict[Path, tuple[bytes, int]]:
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("key", "edit", "was", "now"),
    [
        ("seed", lambda s: s.update(seed=7), "0", "7"),
        ("layout", lambda s: s.update(layout="kitti"), '"semantickitti"', '"kitti"'),
        ("groups[1].scanner", lambda s: s["groups"][1].update(scanner="vlp-32c"), '"vlp-16"',
         '"vlp-32c"'),
        # a farm sequence put where the street one was: index 1 now from group 0
        ("groups[0].generator", lambda s: s["groups"][0].update(sequences=2), '"street"',
         '"farm_yard"'),
    ],
)  # fmt: skip
def test_resume_with_a_spec_that_would_make_other_samples_is_refused(
    one_process: Path, tmp_path: Path, key: str, edit: Callable[[dict], None], was: str, now: str
) -> None:
    """``--resume`` keeps the samples on disk, so a spec that would make them otherwise (a
    seed, a layout, a group's scanner, a sequence's group) is refused in one line naming
    the spec, the key and both values, exit 2, before anything in the folder changes."""
    out = tmp_path / "ds"
    shutil.copytree(one_process, out)
    before = _files(out)
    spec = _edited_demo(tmp_path, "edited", edit)
    code, err = _cli("dataset", spec, "-o", out, "--workers", "1", "-q", "--resume")
    assert code == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {spec}: {key}: "), line
    assert f": {key}: {now}, and the samples in {out} were made with {was} " in line, line
    assert _files(out) == before


def test_resume_may_add_sequences_and_frames(one_process: Path, tmp_path: Path) -> None:
    """A spec that only adds samples (more sequences in the last group, more frames, a
    group after the others) resumes: the samples on disk are what it makes. A manifest
    that cannot be read is refused, naming it."""
    from simulator.config import load_dataset_spec
    from simulator.datasets.tasks import check_resumable

    def more(s: dict) -> None:
        s["groups"][1].update(sequences=3, frames=5)
        s["groups"][0].update(frames=4)
        s["groups"].append({**s["groups"][0], "name": "farm2"})

    spec = _edited_demo(tmp_path, "more", more)
    check_resumable(load_dataset_spec(spec), spec, one_process)  # does not raise
    check_resumable(load_dataset_spec(DEMO), DEMO, tmp_path)  # no manifest: not checked
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"manifest\.json: spec: unreadable"):
        check_resumable(load_dataset_spec(DEMO), DEMO, tmp_path)


def test_parallel_workers_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """N local workers each cast and compute on cores // N threads (at least one), so they
    do not oversubscribe the machine; one in-process run keeps all cores (threads 0)."""
    from simulator.config import load_dataset_spec

    tasks = sequence_tasks(load_dataset_spec(DEMO), Path("/tmp/x"), DEMO.parent, False)
    assert {t.threads for t in tasks} == {0}
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert {t.threads for t in share_cores(tasks, 2)} == {4}
    assert {t.threads for t in share_cores(tasks, 3)} == {2}
    assert {t.threads for t in share_cores(tasks, 16)} == {1}
    shared = share_cores(tasks, 2)
    assert [(t.index, t.seed) for t in shared] == [(t.index, t.seed) for t in tasks]


def test_a_datasets_generated_scenes_are_not_kept_in_the_mesh_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each sequence's generated scene is built once: the dataset writes nothing to the
    mesh cache (a thousand sequences would write gigabytes and evict the scene files'
    entries), while a scene file scanned after it is kept there."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LIDAR_SIM_CACHE", str(cache))
    manifest = run_dataset(DEMO, tmp_path / "ds", workers=1)
    assert manifest["errors"] == [] and manifest["frames"] == 6
    assert not cache.exists() or not any(cache.rglob("*.npz"))
    from simulator.world.scene import load_scene

    load_scene(REPO / "scenes" / "farm" / "scene.yaml")
    assert len(list(cache.rglob("*.npz"))) == 1


@pytest.mark.parametrize("scheduler", [None, "local:2"])
def test_two_workers_sharing_a_sequence_write_its_files_as_one_process(
    tmp_path: Path, scheduler: str | None
) -> None:
    """One sequence of four frames on two local workers (or a two-worker Dask cluster):
    both scan frames of it (each builds it once), and the sequence's own files (poses,
    times), written from the frames each worker scanned, hold one process's bytes."""
    if scheduler is not None:
        pytest.importorskip("distributed", reason="dask.distributed is not installed")
    spec = yaml.safe_load(DEMO.read_text())
    street = {**spec["groups"][1], "frames": 4}
    path = tmp_path / "one.yaml"
    path.write_text(yaml.safe_dump({**spec, "groups": [street]}))
    one = run_dataset(path, tmp_path / "one", workers=1)
    two = run_dataset(path, tmp_path / "two", workers=2, scheduler=scheduler)
    assert one["errors"] == two["errors"] == []
    workers = two["workers"].values()
    assert len(workers) == 2 and all(w["frames"] >= 1 and w["builds"] == 1 for w in workers)
    assert dataset_files(tmp_path / "two") == dataset_files(tmp_path / "one")
    assert len(dataset_files(tmp_path / "one")) == 3 * 4 + 4


def test_each_frames_reference_time_is_computed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run computes each frame's reference time (a pass over its firings) once: the
    worker for the frame it scans, and it hands the frame to the sequence's files; only
    a frame kept on disk (resume) is computed by the run itself."""
    from simulator.datasets import generate, tasks

    calls: list[int] = []

    def counted(sim, frame, layout):  # type: ignore[no-untyped-def]
        calls.append(frame.index)
        return reference_frame(sim, frame, layout)

    reference_frame = worker.reference_frame
    for module in (worker, generate, tasks):
        monkeypatch.setattr(module, "reference_frame", counted)
    out = tmp_path / "ds"
    assert run_dataset(DEMO, out, workers=1)["errors"] == []
    assert sorted(calls) == [0, 0, 1, 1, 2, 2]
    calls.clear()
    (out / "sequences" / "01" / "velodyne" / "000001.bin").unlink()
    assert run_dataset(DEMO, out, workers=1, resume=True)["frames"] == 6
    assert sorted(calls) == [0, 0, 1, 1, 2, 2]  # the kept five by the run, frame 1 by a worker


def test_a_frame_sent_ahead_is_the_next_of_the_same_sequence() -> None:
    """A worker process holds its frame and the next one of the same sequence (so it
    never waits for the hand-out); the frames sent ahead are never another sequence's,
    and every frame is still handed out once."""
    dispatcher = Dispatcher({0: [0, 1, 2], 1: [0, 1, 2]})
    assert dispatcher.next("a") == (0, 0) and dispatcher.ahead("a", 0) == (0, 1)
    assert dispatcher.next("b") == (1, 0) and dispatcher.ahead("b", 1) == (1, 1)
    dispatcher.done(SequenceResult(0, 0, frames_written=1, worker="a", build_s=1.0), "a")
    assert dispatcher.ahead("a", 0) == (0, 2)
    assert dispatcher.ahead("a", 0) is None  # sequence 0 has no frame left
    dispatcher.done(SequenceResult(1, 0, frames_written=1, worker="b", build_s=1.0), "b")
    assert dispatcher.ahead("b", 1) == (1, 2) and dispatcher.ahead("b", 1) is None
    assert not dispatcher


def test_nuscenes_with_range_images_writes_both(reference, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The nuScenes layout with range images: every sample's JSON record where the tables
    read it and its (6, rings, 1024) range image beside it; the other files are those of
    the layout without range images, byte for byte."""
    spec = yaml.safe_load(_demo_as(tmp_path, "nuscenes").read_text())
    path = tmp_path / "nuri.yaml"
    path.write_text(yaml.safe_dump({**spec, "range_images": True}))
    out = tmp_path / "nuri"
    assert run_dataset(path, out, workers=1)["errors"] == []
    files = dataset_files(out)
    images = sorted(k for k in files if "/range_images/" in k)
    assert len(images) == 6
    for name in images:
        stack = np.load(out / name)
        assert stack.shape[0] == 6 and stack.shape[2] == 1024 and stack.shape[1] in (16, 32)
    assert {k: v for k, v in files.items() if k not in images} == dataset_files(
        reference("nuscenes")
    )


def test_dask_workers_sharing_a_machine_share_its_cores() -> None:
    """A Dask worker's task casts and computes on its machine's cores over the tasks the
    workers on that machine run at once: two single-threaded workers on a 2-core machine
    one thread each, a lone worker on an 8-core machine all eight, two workers of two
    threads on 8 cores two each; an unknown core count gives one."""
    from simulator.datasets.dispatch import machine_shares

    workers = {
        "tcp://a:1": {"host": "a", "nthreads": 1},
        "tcp://a:2": {"host": "a", "nthreads": 1},
        "tcp://b:1": {"host": "b", "nthreads": 1},
        "tcp://c:1": {"host": "c", "nthreads": 2},
        "tcp://c:2": {"host": "c", "nthreads": 2},
        "tcp://d:1": {"host": "d", "nthreads": 1},
    }
    cores = {"tcp://a:1": 2, "tcp://a:2": 2, "tcp://b:1": 8, "tcp://c:1": 8, "tcp://c:2": 8,
             "tcp://d:1": None}  # fmt: skip
    assert machine_shares(workers, cores) == {
        "tcp://a:1": 1, "tcp://a:2": 1, "tcp://b:1": 8, "tcp://c:1": 2, "tcp://c:2": 2,
        "tcp://d:1": 1,
    }  # fmt: skip


@pytest.mark.skipif(sys.platform != "linux", reason="reads a process's children from /proc")
def test_a_killed_worker_process_stops_the_run_in_one_line_and_resume_finishes(
    tmp_path: Path,
) -> None:
    """A local worker process killed mid-run (as the system's out-of-memory killer
    would): the run does not hang, it exits 2 with one line naming the worker and
    ``--resume``, and a resumed run writes one process's bytes."""
    spec = yaml.safe_load(DEMO.read_text())
    street = {**spec["groups"][1], "frames": 40}
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump({**spec, "groups": [street]}))
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "simulator.cli", "dataset", str(path), "-o", str(out),
               "--workers", "2", "-q"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline, pids = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None:
        pids = children.read_text().split() if children.exists() else []
        if pids and any((out / "sequences" / "00" / "velodyne").glob("*.bin")):
            os.kill(int(pids[0]), signal.SIGKILL)
            break
        time.sleep(0.01)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"dataset worker pid:{pids[0]} stopped" in lines[0], err
    assert "--resume" in lines[0]
    code, err = _cli("dataset", path, "-o", out, "--workers", "1", "--resume", "-q")
    assert code == 0, err
    assert run_dataset(path, tmp_path / "one", workers=1)["errors"] == []
    assert dataset_files(out) == dataset_files(tmp_path / "one")
