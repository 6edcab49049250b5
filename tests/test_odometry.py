"""Odometry as a test of usefulness: a real odometry client (KISS-ICP, as
:func:`simulator.odometry.estimate_poses` runs it: its range from the points, deskewing on)
tracks sequences that ``lidar-sim sequence`` wrote of a generated street.

The drive is 100 frames (10 s) at 8 m/s down the ego lane of ``scenes/street``. KISS-ICP
reaches about 0.5 % on real KITTI streets; here the end error (the distance between the
estimated and the true last pose, over the path length) must stay under 1 % with the
HDL-64E (KITTI's sensor) and under 2 % with both RS-Helios models (1615 and 5515).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from .conftest import lidar_sim

kiss_icp = pytest.importorskip(
    "kiss_icp", reason="KISS-ICP is not installed (pip install -e '.[odometry]')"
)

STREET = Path(__file__).resolve().parents[1] / "scenes" / "street" / "drive.yaml"


def _end_error(scanner: str, out: Path) -> tuple[float, float]:
    """Write the sequence with the CLI (in this process), track it with KISS-ICP; (end error
    m, path m)."""
    from simulator.io.read import read
    from simulator.odometry import estimate_poses

    res = lidar_sim("sequence", STREET, "-o", out, "--format", "npz", "--set", f"scanner={scanner}",
                    "--set", "revolutions=100", "-q")  # fmt: skip
    assert res.returncode == 0, res.stderr
    estimated = estimate_poses([read(path) for path in sorted((out / "frames").glob("*.npz"))])
    true = np.tile(np.eye(4), (100, 1, 1))
    true[:, :3, :] = np.loadtxt(out / "poses_kitti.txt").reshape(-1, 3, 4)
    relative = np.linalg.inv(true[0]) @ true  # the estimate starts at the identity
    path_m = float(np.linalg.norm(np.diff(relative[:, :3, 3], axis=0), axis=1).sum())
    return float(np.linalg.norm(estimated[-1, :3, 3] - relative[-1, :3, 3])), path_m


@pytest.mark.parametrize(
    ("scanner", "bound"), [("hdl-64e", 0.01), ("rs-helios-1615", 0.02), ("rs-helios-5515", 0.02)]
)
def test_kiss_icp_tracks_a_generated_street(scanner: str, bound: float, tmp_path: Path) -> None:
    error_m, path_m = _end_error(scanner, tmp_path / scanner)
    assert 79.0 < path_m < 79.5  # 99 frame steps of 0.8 m
    assert error_m / path_m < bound, f"{scanner}: end error {error_m:.2f} m of {path_m:.1f} m"
