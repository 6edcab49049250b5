"""The clouds a command takes (:mod:`simulator.sources`): read or scanned, and two of them
made comparable (a scan on its beam grid, its rings numbered as the capture beside it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.config import load_scanner
from simulator.pointcloud import PointCloud
from simulator.sources import cloud_of, compare_sources, rings_as_the_capture

from .conftest import Workspace

#: The VLP-16's lasers, laser id 0 first (its preset's channel table).
LASERS_DEG = [-15.0, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15]
#: The ring a driver that numbers by elevation (lowest first) gives each laser id.
BY_ELEVATION = [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]


def _rings(ring_of_laser: list[int], points: int = 40) -> PointCloud:
    """Each laser's points at its elevation, 10 m out around the circle, its ``ring`` the
    number ``ring_of_laser`` gives it."""
    az = np.linspace(0, 2 * np.pi, points, endpoint=False)
    xyz, ring = [], []
    for laser, el in enumerate(np.radians(LASERS_DEG)):
        xyz.append(np.stack([10 * np.cos(el) * np.cos(az), 10 * np.cos(el) * np.sin(az),
                             np.full(points, 10 * np.sin(el))], axis=1))  # fmt: skip
        ring.append(np.full(points, ring_of_laser[laser]))
    return PointCloud({"xyz": np.concatenate(xyz).astype(np.float32),
                       "ring": np.concatenate(ring).astype(np.uint16)})  # fmt: skip


@pytest.mark.parametrize("scanned", [0, 1])
def test_a_scan_beside_a_capture_takes_the_captures_ring_numbers(scanned: int) -> None:
    """A scan (rings by laser id) beside a capture that numbers rings by elevation: the
    scan's rings become the capture's, point for point, and the line says which side."""
    vlp16 = load_scanner("vlp-16")
    clouds = [_rings(BY_ELEVATION), _rings(BY_ELEVATION)]
    clouds[scanned] = _rings(list(range(16)))
    scanners = [None, None]
    scanners[scanned] = vlp16
    said = rings_as_the_capture(clouds, scanners)
    side, other = "AB"[scanned], "AB"[1 - scanned]
    renumbered = f"{side}'s channels renumbered as {other} numbers its rings"
    assert said == f"{renumbered} (matched by elevation)"
    np.testing.assert_array_equal(clouds[scanned]["ring"], clouds[1 - scanned]["ring"])
    assert clouds[scanned]["ring"].dtype == np.uint16


def test_rings_are_left_alone_unless_a_scan_meets_a_capture_numbered_otherwise() -> None:
    """Nothing is renumbered (None, every ring as it was) for two captures, two scans, a
    capture numbered by laser id as the scanner is, or a scanner without a channel table."""
    vlp16 = load_scanner("vlp-16")
    by_laser = list(range(16))
    for rings, scanners in (
        ((BY_ELEVATION, by_laser), (None, None)),
        ((BY_ELEVATION, by_laser), (vlp16, vlp16)),
        ((by_laser, by_laser), (None, vlp16)),
        ((BY_ELEVATION, by_laser), (None, vlp16.model_copy(update={"channels": None}))),
    ):
        clouds = [_rings(r) for r in rings]
        before = [c["ring"].copy() for c in clouds]
        assert rings_as_the_capture(clouds, scanners) is None
        for cloud, ring in zip(clouds, before, strict=True):
            np.testing.assert_array_equal(cloud["ring"], ring)


@pytest.fixture
def ground(ws: Workspace) -> Path:
    """A quarter revolution of the Helios over a plane (the survey keeps diagnostics)."""
    return ws.survey(
        [{"name": "ground", "plane": {"size_m": [100, 100]}, "material": "asphalt"}],
        pose={"position_m": [0, 0, 1.8]},
        revolutions=0.25,
        output={"path": "out/scan.npz", "frame": "sensor"},
    )


def test_a_survey_is_scanned_and_a_file_read(ground: Path, tmp_path: Path) -> None:
    """``cloud_of``: a survey gives its scan and the simulation (diagnostics on request,
    overrides applied); a file gives its cloud and no simulation (overrides ignored)."""
    scanned, sim = cloud_of(ground, ["seed=3"])
    assert sim is not None and sim.survey.seed == 3 and len(scanned) > 1000
    assert "pulse_id" not in scanned.names
    with_diagnostics, _ = cloud_of(ground, diagnostics=True)
    assert "pulse_id" in with_diagnostics.names
    path = tmp_path / "points.npz"
    np.savez(path, xyz=scanned["xyz"], intensity=scanned["intensity"], ring=scanned["ring"])
    read_back, none = cloud_of(path, ["seed=3"])
    assert none is None
    np.testing.assert_array_equal(read_back["xyz"], scanned["xyz"])


def test_a_scan_compared_with_its_own_points_renumbered_agrees_ring_for_ring(
    ground: Path, tmp_path: Path
) -> None:
    """A capture made of a scan's own points with rings numbered by elevation, against
    the survey: the survey's scan is on its beam grid (a column per firing) and takes the
    capture's ring numbers, so every ring's share agrees and the points are the same."""
    scanned, sim = cloud_of(ground, diagnostics=True)
    assert sim is not None and sim.scanner.channels is not None
    elevation = np.asarray(sim.scanner.channels.elevation_deg)
    rank = np.argsort(np.argsort(elevation, kind="stable"), kind="stable")
    capture = tmp_path / "capture.npz"
    np.savez(capture, xyz=scanned["xyz"], intensity=scanned["intensity"],
             ring=rank[scanned["ring"]].astype(np.uint16))  # fmt: skip
    a, b, figures = compare_sources(capture, ground)
    assert figures["rings"]["renumbered"] == (
        "B's channels renumbered as A numbers its rings (matched by elevation)"
    )
    np.testing.assert_array_equal(b["ring"], a["ring"])
    assert figures["rings"]["max_abs_diff"] == 0.0
    assert figures["chamfer_m"] == 0.0
    np.testing.assert_array_equal(b["column"], sim.pattern.column(b["pulse_id"]))
    firings = int(sim.scanner.firings_per_revolution)
    assert b.meta["beam_grid"] == {"rows": sim.pattern.channels, "columns": firings}
    _, _, same = compare_sources(ground, ground)
    assert "renumbered" not in same["rings"] and same["same_beams"] is not None
