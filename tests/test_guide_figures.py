"""The guide's figures that a command prints are that command's output: each is run here and
the page must say what it prints (a figure that drifted with the physics fails)."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import lidar_sim

ROOT = Path(__file__).resolve().parent.parent


def test_the_drive_sequence_of_the_motion_page(tmp_path: Path) -> None:
    """``motion.md``: the bundled drive (10 s of the Helios at 5 m/s) in frames and points,
    as ``lidar-sim sequence`` prints them."""
    page = (ROOT / "docs" / "motion.md").read_text(encoding="utf-8")
    said = re.search(r"(\d[\d,]*) frames, (\d[\d,]*) points \(`tests/test_guide_figures", page)
    assert said, "motion.md no longer gives the drive's frames and points"
    ran = lidar_sim(
        "sequence", ROOT / "scenes" / "farm" / "drive.yaml", "-o", tmp_path / "drive",
        "--format", "bin",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    printed = re.search(r"(\d[\d,]*) frames, (\d[\d,]*) points from", ran.stdout)
    assert printed, ran.stdout
    assert said.groups() == printed.groups(), (
        f"motion.md says {said[0]!r}; the command prints {printed[0]!r}"
    )
