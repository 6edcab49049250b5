"""The receiver's laws (``receiver:``): near-range overlap, speckle, a soft threshold.

Each law is checked three ways: golden values of the specification, the kernel against
the specification, and the law recovered from scanned points (a wall seen by a
one-channel scanner, whose every pulse's range is known from geometry)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from scipy import stats

import simulator
from simulator import physics
from simulator.backend import KERNELS_AVAILABLE, NumpyBackend
from simulator.steps import hits, receiver

from .conftest import REPO, Workspace, lidar_sim, single_channel_scanner

#: A wall facing the sensor (front face at x = distance), wide enough for +-45 deg.
K0 = {"reflectance": 0.5, "minnaert_k": 0.0, "roughness_m": 0.0, "micro_slope_deg": 0.0,
      "micro_slope_cell_m": 0.1, "label": "building"}  # fmt: skip


def wall(distance_m: float, half_width_m: float) -> list[dict[str, Any]]:
    return [{"name": "wall", "box": {"size_m": [1.0, 2 * half_width_m, 50.0]},
             "position_m": [distance_m + 0.5, 0.0, 0.0], "material": K0}]  # fmt: skip


def wall_scan(ws: Workspace, distance_m: float, half_width_m: float, revolutions: int,
              **scanner: Any) -> simulator.PointCloud:  # fmt: skip
    return ws.scan(wall(distance_m, half_width_m), scanner=single_channel_scanner(**scanner),
                   revolutions=revolutions)  # fmt: skip


def keys(n: int) -> np.ndarray:
    return physics.mix64(np.arange(n, dtype=np.uint64) + np.uint64(12345))


# --------------------------------------------------------------------------- golden values


def test_golden_values_of_the_specification() -> None:
    """Frozen outputs of the three laws (any change to a draw changes these)."""
    g = receiver.gamma_unit_mean(keys(4), 4.0)
    golden = [0.7780393279406911, 2.0316759879939683, 1.3467040477402128, 1.2812875994372677]
    np.testing.assert_allclose(g, golden, rtol=1e-12)
    np.testing.assert_array_equal(
        receiver.near_overlap(np.array([0.5, 1.0, 3.0, 5.0, 9.0]), 1.0, 5.0),
        [0.0, 0.0, 0.5, 1.0, 1.0],
    )
    np.testing.assert_array_equal(receiver.near_overlap(np.array([0.9, 1.0]), 1.0, 1.0), [0, 1])
    laws = receiver.ReceiverLaws(noise_per_threshold=0.5)
    got = receiver.soft_detected(laws, np.array([0.5, 0.9, 1.0, 1.1, 2.0]), 1.0, keys(5))
    np.testing.assert_array_equal(got, [False, False, True, True, True])


def test_a_receiver_with_no_law_on_is_none_and_changes_nothing(ws: Workspace) -> None:
    """An empty ``receiver:`` (or every key null) makes no laws; the scan is bit-identical."""
    plain = wall_scan(ws, 20.0, 30.0, 1)
    empty = wall_scan(ws, 20.0, 30.0, 1, receiver={"near_overlap": "off"})
    for name in plain.fields:
        np.testing.assert_array_equal(plain[name], empty[name], err_msg=name)


@pytest.mark.parametrize("cells", [1.0, 2.5, 16.0])
def test_speckle_draws_are_gamma_with_unit_mean(cells: float) -> None:
    """A million draws against Gamma(M, 1/M): Kolmogorov-Smirnov p > 0.01 (the draws are
    fixed by their keys, so this cannot flake), mean 1 and variance 1/M to 1 %."""
    g = receiver.gamma_unit_mean(keys(1_000_000), cells)
    assert stats.kstest(g, stats.gamma(cells, scale=1.0 / cells).cdf).pvalue > 0.01
    assert abs(g.mean() - 1.0) < 3.0 / np.sqrt(1e6 * cells)
    assert abs(g.var() * cells - 1.0) < 0.02


@pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")
def test_kernels_match_the_specification_value_for_value() -> None:
    """The speckle kernel gives the specification's draws bit for bit, and a farm scan's
    per-hit model with every law on gives the specification's keep and intensity."""
    from numba import njit

    from simulator.kernels import hits as k_hits
    from simulator.kernels import receiver as k_receiver

    gamma = k_receiver.gamma_unit_mean

    @njit(cache=False)
    def draws(k, cells):  # type: ignore[no-untyped-def]
        out = np.empty(len(k))
        for i in range(len(k)):
            out[i] = gamma(k[i], cells)
        return out

    for cells in (1.0, 3.7):  # (the kernel's cos(2 pi u) is folded: equal to 1e-13)
        k = keys(200_000)
        np.testing.assert_allclose(draws(k, cells), receiver.gamma_unit_mean(k, cells),
                                   rtol=1e-13)  # fmt: skip

    laws = ('scanner_overrides={"receiver": {"near_overlap": "detection_and_intensity", '
            '"speckle_cells": 2.0, "threshold_width": 0.3}, "overlap_m": [2.0, 12.0]}')  # fmt: skip
    sim = simulator.Simulation.from_file(REPO / "scenes/farm/survey.yaml", [laws])
    assert sim.model.receiver == receiver.ReceiverLaws(2, 2.0, 12.0, 2.0, 0.3)
    sim.backend = NumpyBackend()
    try:
        chunk = sim.cast_pulses(0, sim.total_pulses)
    finally:
        sim.backend = simulator.backend.select_backend()
    args = (chunk, sim.tables, sim.model, sim.streams)
    ref, got = hits.evaluate_hits(*args), k_hits.evaluate_hits(*args)
    # The kernel tilts by the addition formulas (see test_fast): equal to 1e-9, and a
    # detection decided by less than that flips at most once in a scan.
    assert np.count_nonzero(got.keep != ref.keep) <= 1
    np.testing.assert_allclose(got.intensity, ref.intensity, rtol=1e-9, atol=1e-12)
    plain = simulator.Simulation.from_file(REPO / "scenes/farm/survey.yaml")
    base = hits.evaluate_hits(chunk, plain.tables, plain.model, plain.streams)
    # The laws drop some of the farm's returns (its near ground, its faint far ones).
    assert 0.99 < np.count_nonzero(ref.keep) / np.count_nonzero(base.keep) < 0.999


# --------------------------------------------------------------------------- laws from points


def pulses_on_wall(distance_m: float, half_width_m: float, revolutions: int) -> np.ndarray:
    """The true range of every pulse of the one-channel scanner (3600 firings a turn,
    azimuth 0 first) that meets the wall: (n,) float64, m."""
    az = np.deg2rad(np.arange(3600) * 0.1)
    y = distance_m * np.tan(az)
    on = (np.cos(az) > 0) & (np.abs(y) <= half_width_m + 1e-9)
    return np.tile(distance_m / np.cos(az[on]), revolutions)


def test_soft_threshold_detects_with_the_probability_of_a_noisy_threshold(ws: Workspace) -> None:
    """A wall 200 m away and 400 m wide, rho 0.5, Minnaert k 0, no divergence: the received
    peak is ``0.5 / R^2`` against ``0.1 / 110^2``, so ``S / S_th = 5 (110 / R)^2`` runs
    from 1.51 (ahead) to 0.76 (45 deg off). With width 0.1 the share detected in each of
    12 range bins is ``Phi((S / S_th - 1) / 0.1)`` within 4 binomial sigmas; the hard
    threshold would keep every pulse nearer than 246 m and none beyond."""
    width, revs = 0.1, 20
    cloud = wall_scan(ws, 200.0, 200.0, revs, receiver={"threshold_width": width},
                      range_max_m=1000.0)  # fmt: skip
    every = pulses_on_wall(200.0, 200.0, revs)
    expect = stats.norm.cdf((5.0 * (110.0 / every) ** 2 - 1.0) / width)
    edges = np.linspace(every.min(), every.max() + 1e-6, 13)
    got = np.histogram(cloud["range_true_m"], edges)[0]
    bins = [expect[(every >= a) & (every < b)] for a, b in itertools.pairwise(edges)]
    want = np.array([p.sum() for p in bins])
    sigma = np.sqrt([np.sum(p * (1 - p)) for p in bins])
    assert np.all(np.abs(got - want) <= 4.0 * sigma + 1.0), (got, want.round(1))
    assert got[0] > 0.98 * np.count_nonzero(every < edges[1])  # near: all of them
    assert got[-1] < 0.05 * np.count_nonzero(every >= edges[-2])  # far: almost none
    # Hard threshold: all of them before 246 m, none after.
    hard = wall_scan(ws, 200.0, 200.0, 1, range_max_m=1000.0)
    assert hard["range_true_m"].max() < 110.0 * np.sqrt(5.0)
    assert len(hard["xyz"]) == np.count_nonzero(pulses_on_wall(200.0, 200.0, 1) < 110 * 5**0.5)


@pytest.mark.parametrize("cells", [1.0, 4.0])
def test_speckle_spreads_the_intensity_as_a_gamma_law(ws: Workspace, cells: float) -> None:
    """A wall 5 m away, rho 0.5, scale 100, no clip, no rounding: the intensities over 50
    of its front face are Gamma(M, 1/M), KS p > 0.001, mean 1 to 3 sigma; speckle drops
    only the pulses whose draw is below ``S_th / S``, 1/2420 here (M = 1: 0.04 %)."""
    cloud = wall_scan(ws, 5.0, 5.0, 4, receiver={"speckle_cells": cells},
                      intensity_max=65535.0)  # fmt: skip
    front = cloud["xyz"][:, 0] < 5.001
    g = cloud["intensity"][front].astype(np.float64) / 50.0
    every = len(pulses_on_wall(5.0, 5.0, 4))
    assert every * (1.0 - stats.gamma(cells, scale=1 / cells).cdf(1 / 2420) - 0.002) < len(g)
    assert len(g) <= every
    assert stats.kstest(g, stats.gamma(cells, scale=1.0 / cells).cdf).pvalue > 1e-3
    assert abs(g.mean() - 1.0) < 3.0 / np.sqrt(len(g) * cells)
    # float32 intensities: the reading is 50 g to float32's precision
    assert np.unique(cloud["intensity"]).size > 0.99 * len(g)


def test_near_overlap_dims_near_returns_linearly(ws: Workspace) -> None:
    """A wall 3 m away seen out to 12 m, overlap [2, 10] m: with ``detection_and_intensity``
    each reading is ``50 (R - 2) / 8`` below 10 m and 50 beyond, where R is the point's
    own true range; with ``detection`` the readings stay 50."""
    both = wall_scan(ws, 3.0, 12.0, 1, receiver={"near_overlap": "detection_and_intensity"},
                     overlap_m=[2.0, 10.0], intensity_max=65535.0)  # fmt: skip
    r = both["range_true_m"].astype(np.float64)
    want = 50.0 * np.clip((r - 2.0) / 8.0, 0.0, 1.0)
    np.testing.assert_allclose(both["intensity"], want, rtol=2e-6)
    assert r.min() < 3.01 and r.max() > 11.9
    detect = wall_scan(ws, 3.0, 12.0, 1, receiver={"near_overlap": "detection"},
                       overlap_m=[2.0, 10.0])  # fmt: skip
    assert np.all(detect["intensity"] == 50.0)
    assert len(detect["xyz"]) == len(both["xyz"])


def test_near_overlap_drops_what_it_dims_below_the_threshold(ws: Workspace) -> None:
    """A dark wall (rho 0.5 x overlap) near the threshold's range: with overlap [0, 300] m
    the received peak ``0.5 (R / 300) / R^2`` falls below ``0.1 / 110^2`` beyond
    ``R = 5 x 110^2 / 300 = 201.7 m``, so a wall at 150 m (S/S_th 1.34 x) keeps
    pulses out to 201.7 m and loses every one beyond."""
    cloud = wall_scan(ws, 150.0, 200.0, 1, receiver={"near_overlap": "detection"},
                      overlap_m=[0.0, 300.0], range_max_m=1000.0)  # fmt: skip
    edge = 5.0 * 110.0**2 / 300.0
    every = pulses_on_wall(150.0, 200.0, 1)
    assert cloud["range_true_m"].max() < edge
    assert len(cloud["xyz"]) == np.count_nonzero(every < edge)


def test_receiver_section_is_checked(ws: Workspace) -> None:
    """A bad value names the scanner file, the key and the rule, exit 2."""
    path = ws.survey(wall(20.0, 20.0),
                     scanner=single_channel_scanner(receiver={"speckle_cells": 0.5}))  # fmt: skip
    res = lidar_sim("scan", path, "-o", ws.root / "x.npz")
    assert res.returncode == 2
    assert "receiver.speckle_cells" in res.stderr and "greater than or equal to 1" in res.stderr
    assert "Traceback" not in res.stderr


LAWS = ('scanner_overrides={"receiver": {"near_overlap": "detection_and_intensity", '
        '"speckle_cells": 1.5, "threshold_width": 0.5}, "overlap_m": [1.0, 30.0], '
        '"detection": {"reference_range_m": 40.0, "reference_reflectance": 0.1}}')  # fmt: skip


@pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize(
    ("survey", "extra"),
    [
        ("scenes/farm/survey.yaml", ["scanner_overrides.beam_samples=7",
                                     "scanner_overrides.return_mode=dual"]),
        ("scenes/street/drive.yaml", ["scanner=rs-helios-5515",
                                      "scanner_overrides.return_mode=dual"]),
    ],
    ids=["footprint-echoes", "see-through"],
)  # fmt: skip
def test_every_returns_plan_applies_the_laws_as_the_specification(
    survey: str, extra: list[str]
) -> None:
    """Footprint echoes and surfaces behind glass and foliage, dual returns, every law on
    and a threshold that makes them matter: the kernels' points are the specification's
    (the kernels' hashed normals equal the spec's to 1e-13, so at most a few decisions
    flip), and the laws drop a share of the returns and dim the near ones."""
    args = [*extra, "revolutions=0.2", "output.diagnostics=true"]
    sim = simulator.Simulation.from_file(REPO / survey, [*args, LAWS])
    got = sim.run()
    sim.backend = NumpyBackend()
    ref = sim.run()
    plain = simulator.Simulation.from_file(REPO / survey, args).run()
    assert len(ref) > 5_000
    assert abs(len(got) - len(ref)) <= 3
    ours = {(int(p), int(n)) for p, n in zip(got["pulse_id"], got["return_number"], strict=True)}
    theirs = {(int(p), int(n)) for p, n in zip(ref["pulse_id"], ref["return_number"], strict=True)}
    assert len(ours ^ theirs) <= 6
    both = sorted(ours & theirs)
    at_got = {
        k: i
        for i, k in enumerate(
            zip(got["pulse_id"].tolist(), got["return_number"].tolist(), strict=True)
        )
    }
    at_ref = {
        k: i
        for i, k in enumerate(
            zip(ref["pulse_id"].tolist(), ref["return_number"].tolist(), strict=True)
        )
    }
    i_got = np.array([at_got[k] for k in both])
    i_ref = np.array([at_ref[k] for k in both])
    close = np.isclose(got["intensity"][i_got], ref["intensity"][i_ref], rtol=1e-6)
    assert np.count_nonzero(~close) <= 6
    same = np.isin(ref["pulse_id"], got["pulse_id"])
    assert 0.5 < len(ref) / len(plain) < 0.98
    # near returns read dimmer than the same surfaces without the laws
    near = ref["range_true_m"][same] < 5.0
    assert np.median(ref["intensity"][same][near]) < 0.5 * np.median(plain["intensity"][
        plain["range_true_m"] < 5.0])  # fmt: skip


def test_weather_refuses_the_near_overlap_only() -> None:
    """The weather's particles see the overlap already: ``near_overlap`` is refused in one
    line rather than applied twice; speckle and the soft threshold are applied."""
    with pytest.raises(simulator.errors.ConfigError, match="near_overlap"):
        simulator.Simulation.from_file(REPO / "scenes/farm/survey.yaml",
                                       [LAWS, "weather.fog.visibility_m=200"])  # fmt: skip


NOISE_LAWS = (
    'scanner_overrides={"receiver": {"speckle_cells": 8.0, "threshold_width": 0.15}, '
    '"detection": {"reference_range_m": 40.0, "reference_reflectance": 0.1}}'
)


@pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")
@pytest.mark.parametrize("weather", ["weather.rain.rate_mm_h=25", "weather.fog.visibility_m=80"])
def test_weather_applies_speckle_and_the_soft_threshold_as_the_specification(
    weather: str,
) -> None:
    """Rain (drawn particles: the weather's own kernel) and fog (a soft target: the echo
    kernels), speckle and a soft threshold on: the kernels' points are the specification's
    (at most a few decisions flip, as above), fewer than without the laws, and read
    otherwise. (Single returns: a pulse's first return is its only one.)"""
    args = ["revolutions=0.05", "output.diagnostics=true", weather]
    sim = simulator.Simulation.from_file(REPO / "scenes/farm/survey.yaml", [*args, NOISE_LAWS])
    # (the least peak an echo may have and be detected: 0.25 / the largest speckle draw)
    assert sim.model.detection_floor == pytest.approx(0.0306 * sim.model.threshold, rel=1e-2)
    got = sim.run()
    sim.backend = NumpyBackend()
    ref = sim.run()
    plain = simulator.Simulation.from_file(REPO / "scenes/farm/survey.yaml", args).run()
    assert len(ref) > 1_000
    assert abs(len(got) - len(ref)) <= 3
    ours = {(int(p), int(n)) for p, n in zip(got["pulse_id"], got["return_number"], strict=True)}
    theirs = {(int(p), int(n)) for p, n in zip(ref["pulse_id"], ref["return_number"], strict=True)}
    assert len(ours ^ theirs) <= 6
    # the laws drop echoes and scatter the readings of those kept
    assert len(ref) < len(plain)
    same, a, b = np.intersect1d(ref["pulse_id"], plain["pulse_id"], return_indices=True)
    assert len(same) > 1_000
    assert np.mean(ref["intensity"][a] != plain["intensity"][b]) > 0.5
