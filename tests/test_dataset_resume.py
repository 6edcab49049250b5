"""Datasets that survive being killed: in every layout a run killed at seeded random points
and resumed gives the bytes of one uninterrupted run; a second run into the same folder is
refused while the first writes; a full disk stops the run with one line, keeps nothing
half-written, and ``--resume`` finishes once there is space again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.datasets.generate import run_dataset

from .conftest import dataset_files, lidar_sim

#: A small dataset: one farm sequence of three VLP-16 frames.
SPEC = {
    "seed": 7,
    "groups": [{
        "name": "farm", "generator": "farm_yard", "scanner": "vlp-16", "sequences": 1,
        "frames": 3, "trajectory": {"start": {"position_m": [-10, -4, 0]},
                                    "velocity_mps": [5, 0, 0]},
        "mount": {"position_m": [0, 0, 1.8]},
    }],
}  # fmt: skip
LAYOUTS = ["semantickitti", "npz", "kitti", "nuscenes", "openpcdet"]

#: The child: the dataset command, killed (SIGKILL) at the N-th file renamed into place
#: (every sample's and the dataset's own files are written under a temporary name and
#: renamed), or made to wait at it for a flag file.
_CHILD = """
import os, signal, sys, time
from pathlib import Path

stop_at, wait_for = int(sys.argv[1]), sys.argv[2]
rename, count = os.replace, [0]


def replace(src, dst, *args, **kwargs):
    count[0] += 1
    if count[0] == stop_at:
        if wait_for == "-":
            os.kill(os.getpid(), signal.SIGKILL)
        Path(wait_for + ".waiting").touch()
        while not Path(wait_for).exists():
            time.sleep(0.05)
    return rename(src, dst, *args, **kwargs)


os.replace = replace
from simulator.cli import main

sys.argv = ["lidar-sim", *sys.argv[3:]]
main()
"""


def _spec(tmp: Path, layout: str) -> Path:
    path = tmp / f"{layout}.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "layout": layout}))
    return path


def _child(stop_at: int, wait_for: str, spec: Path, out: Path) -> subprocess.Popen:
    args = ["dataset", str(spec), "-o", str(out), "--workers", "1", "-q"]
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(stop_at), wait_for, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    """Each layout written by one uninterrupted run: its folder and its count of renames."""
    tmp = tmp_path_factory.mktemp("whole")
    out = {}
    for layout in LAYOUTS:
        folder = tmp / layout
        assert run_dataset(_spec(tmp, layout), folder, workers=1)["errors"] == []
        files = [p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"]
        out[layout] = (folder, len(files))
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_run_killed_at_random_points_resumes_to_the_same_bytes(
    layout: str, whole: dict[str, tuple[Path, int]], tmp_path: Path
) -> None:
    """Killed at two seeded random renames (any sample's or the dataset's own files),
    then resumed: the folder holds exactly the uninterrupted run's files."""
    reference, files = whole[layout]
    rng = np.random.default_rng(sum(map(ord, layout)))
    for k, stop_at in enumerate(sorted(rng.choice(np.arange(1, files + 1), 2, replace=False))):
        out = tmp_path / f"killed{k}"
        spec = _spec(tmp_path, layout)
        proc = _child(int(stop_at), "-", spec, out)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == -signal.SIGKILL, err.decode()
        res = lidar_sim("dataset", spec, "-o", out, "--workers", "1", "-q", "--resume")
        assert res.returncode == 0, res.stderr
        assert dataset_files(out) == dataset_files(reference), (layout, stop_at)


def test_a_second_run_into_the_same_folder_is_refused(
    whole: dict[str, tuple[Path, int]], tmp_path: Path
) -> None:
    """While a run writes (held at its third file), a second run into its folder exits 2
    with one line naming the folder and writes nothing; the first then finishes with the
    uninterrupted run's bytes, and the folder is free again."""
    spec = _spec(tmp_path, "npz")
    out = tmp_path / "shared"
    flag = tmp_path / "go"
    first = _child(3, str(flag), spec, out)
    deadline = time.monotonic() + 120
    while not Path(str(flag) + ".waiting").exists():
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    before = dataset_files(out)
    res = lidar_sim("dataset", spec, "-o", out, "--workers", "1", "-q")
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(out) in lines[0] and "another dataset run" in lines[0]
    assert dataset_files(out) == before
    flag.touch()
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()
    assert dataset_files(out) == dataset_files(whole["npz"][0])
    assert run_dataset(spec, out, workers=1, resume=True)["errors"] == []


def test_a_full_disk_stops_the_run_and_resume_finishes_it(
    whole: dict[str, tuple[Path, int]], tmp_path: Path
) -> None:
    """On a small tmpfs filled but for half the dataset's size, the run stops with exit 2
    and one line saying the device is full; no temporary file is left and every sample on
    disk is complete; with the space back, --resume writes the uninterrupted run's bytes."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(disk)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.decode().strip()})")
    try:
        reference = dataset_files(whole["semantickitti"][0])
        need = sum(len(d) for d in reference.values())
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        assert free > need, (free, need)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * (free - need // 2))
        spec = _spec(tmp_path, "semantickitti")
        out = disk / "ds"
        res = lidar_sim("dataset", spec, "-o", out, "--workers", "1", "-q")
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "no space left" in lines[0] and str(out) in lines[0]
        assert not [p for p in out.rglob("*") if ".tmp" in p.name]
        for name, data in dataset_files(out).items():  # what is there is whole
            assert reference[name] == data, name
        assert len(dataset_files(out)) < len(reference)  # (the disk did fill)
        filler.unlink()
        res = lidar_sim("dataset", spec, "-o", out, "--workers", "1", "-q", "--resume")
        assert res.returncode == 0, res.stderr
        assert dataset_files(out) == reference
    finally:
        for _ in range(20):
            if subprocess.run(["umount", str(disk)], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        os.sync()
