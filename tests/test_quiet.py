"""Quiet by default: ``render`` prints what it wrote and nothing of the renderer's engine
(Open3D's and Filament's 9 lines of set-up), unless ``LIDAR_SIM_VERBOSE=1``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import simulator
from simulator.pointcloud import PointCloud


def _lidar_sim() -> str:
    exe = Path(sys.executable).parent / "lidar-sim"
    found = str(exe) if exe.exists() else shutil.which("lidar-sim")
    assert found, "lidar-sim is not installed"
    return found


def test_render_prints_one_line_and_the_engine_logs_on_request(tmp_path: Path) -> None:
    """In a child process (the offscreen renderer never lives in the test process), its
    standard output and error piped: one line, ``wrote PATH``; with the variable set the
    engine's lines are back, so they were there to leave out."""
    n = 200
    a = np.linspace(0, 2 * np.pi, n, endpoint=False)
    cloud = PointCloud(
        {
            "xyz": np.stack([8 * np.cos(a), 8 * np.sin(a), np.zeros(n)], axis=1).astype("f4"),
            "intensity": np.full(n, 50, np.float32),
        }
    )
    simulator.write(cloud, tmp_path / "ring.npz")
    out = tmp_path / "ring.png"
    command = [_lidar_sim(), "render", str(tmp_path / "ring.npz"), "-o", str(out),
               "--width", "160", "--height", "120"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "LIDAR_SIM_VERBOSE"}
    quiet = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert (quiet.stdout, quiet.stderr) == (f"wrote {out}\n", "")
    assert out.stat().st_size > 1000
    loud = subprocess.run(
        command, env={**env, "LIDAR_SIM_VERBOSE": "1"}, capture_output=True, text=True, timeout=300
    )
    assert loud.returncode == 0, loud.stderr
    engine = (loud.stdout + loud.stderr).splitlines()
    assert len(engine) > 2 and engine[-1] == f"wrote {out}", engine
