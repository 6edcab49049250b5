"""``calibrate --twin`` fits the receiver's laws back from a frame made with known ones.

A frame of the calibration yard scanned with speckle (M = 4), a soft threshold (width 0.3)
and, on a second frame, a near-range overlap: calibrate, then its twin's beam-by-beam fit
(:mod:`simulator.calibrate.receiver`), must find them again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.calibrate import receiver
from simulator.steps.receiver import gamma_unit_mean

from .conftest import REPO, lidar_sim

YARD = REPO / "scenes" / "calibration" / "scene.yaml"


def frame(tmp_path: Path, scanner: str, overlap: list[float] | None) -> Path:
    laws = {"speckle_cells": 4.0, "threshold_width": 0.3}
    over: dict = {"receiver": laws, "detection": {"reference_range_m": 25.0,
                                                  "reference_reflectance": 0.1}}  # fmt: skip
    if overlap is not None:
        laws["near_overlap"] = "detection_and_intensity"
        over["overlap_m"] = overlap
    survey = {"scanner": scanner, "scene": str(YARD), "pose": {"position_m": [0, 0, 1.8]},
              "revolutions": 1, "scanner_overrides": over,
              "output": {"path": "real.npz", "frame": "sensor"}}  # fmt: skip
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(survey))
    res = lidar_sim("scan", tmp_path / "s.yaml", "-o", tmp_path / "real.npz")
    assert res.returncode == 0, res.stderr
    return tmp_path / "real.npz"


def fitted(tmp_path: Path, scanner: str, overlap: list[float] | None,
           receiver: bool = True) -> tuple[dict, dict]:  # fmt: skip
    """The scanner overrides calibrate wrote, and its twin's figures (twin.json)."""
    import json

    tmp_path.mkdir(parents=True, exist_ok=True)
    scan = frame(tmp_path, scanner, overlap)
    res = lidar_sim("calibrate", scan, "--scanner", scanner, "-o", tmp_path / "lib.yaml",
                    "--twin", tmp_path / "twin", *(["--receiver"] if receiver else []))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert ("receiver: " in res.stdout) == receiver
    overrides = yaml.safe_load((tmp_path / "lib_scanner.yaml").read_text())
    return overrides, json.loads((tmp_path / "twin" / "twin.json").read_text())


def ring_misfit(twin: dict) -> float:
    """The mean over every surface's judged rings of |twin share - real share|."""
    diffs = []
    for f in twin.values():
        a = np.array(f["share_a"], dtype=float)
        b = np.array(f["share_b"], dtype=float)
        judged = np.array(f["beams_per_ring"]) >= 20
        diffs.append(np.abs(a - b)[judged & np.isfinite(a) & np.isfinite(b)])
    return float(np.concatenate(diffs).mean())


def test_speckle_and_soft_threshold_are_found_again(tmp_path: Path) -> None:
    """OS1-64 on the yard (its ground from 6 m), made with M 4 and width 0.3: M found
    within 10 % (measured 4.13), no near overlap where none was made, and the twin that
    scans with the fitted laws returns as the frame does: its rings' return shares differ
    from the real ones by at most 0.03 on average (two draws of the same law differ by
    about 0.015: a ring has 100-1,000 beams on a surface), and by 30 % less than the twin
    without the laws does (measured 0.027 against 0.044). The width alone is weakly fixed
    beside a speckle this strong (both spread the detection curve): measured 0.15-0.30 on
    two draws of the same yard, so only [0.1, 0.5] is asserted."""
    over, twin = fitted(tmp_path / "with", "os1-64", None)
    got = over["receiver"]
    assert abs(got["speckle_cells"] - 4.0) <= 0.4, got
    assert 0.1 <= got["threshold_width"] <= 0.5, got
    assert "near_overlap" not in got
    _, plain = fitted(tmp_path / "without", "os1-64", None, receiver=False)
    assert ring_misfit(twin) <= 0.03
    assert ring_misfit(twin) <= 0.7 * ring_misfit(plain), (ring_misfit(twin),
                                                               ring_misfit(plain))  # fmt: skip


def test_a_near_overlap_is_found_where_near_readings_dim(tmp_path: Path) -> None:
    """OS1-128 on the yard (its ground from 4.5 m), overlap [3, 9] m: an overlap is fitted
    that dims the same near range (start within 1 m of 3, full within 3 m of 9; measured
    2.2-6.5: calibrate's own per-ring fit takes up part of the near dimming), and speckle
    is found again beyond it."""
    got, _ = fitted(tmp_path, "os1-128", [3.0, 9.0])
    start, full = got["overlap_m"]
    assert abs(start - 3.0) <= 1.0 and abs(full - 9.0) <= 3.0, got["overlap_m"]
    assert got["receiver"]["near_overlap"] == "detection_and_intensity"
    assert abs(got["receiver"]["speckle_cells"] - 4.0) <= 0.6, got["receiver"]


@pytest.mark.parametrize("cells", [1.0, 2.0, 6.0, 30.0])
def test_speckle_cells_from_the_log_scatter_of_gamma_draws(cells: float) -> None:
    """``speckle_cells_of`` inverts the robust log spread on the spec's own Gamma(M, 1/M) draws
    (the robust variance of their logs: within 5 % of M)."""
    from simulator.physics import mix64

    keys = mix64(np.arange(200_000, dtype=np.uint64))
    draws = gamma_unit_mean(keys, cells)
    got = receiver.speckle_cells_of(np.log(draws))
    assert abs(got / cells - 1.0) < 0.05, got


def test_special_functions_against_known_values() -> None:
    """digamma and Phi against tabulated values."""
    np.testing.assert_allclose(receiver.digamma(np.array([1.0, 0.5, 10.0])),
                               [-0.5772156649, -1.9635100260, 2.2517525891], atol=1e-9)  # fmt: skip
    np.testing.assert_allclose(receiver.normal_cdf(np.array([-1.96, 0.0, 1.0])),
                               [0.0249978951, 0.5, 0.8413447461], atol=2e-7)  # fmt: skip
