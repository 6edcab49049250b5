"""Footprint sampling, echo formation and return modes."""

from __future__ import annotations

from pathlib import Path

import laspy
import numpy as np
import pytest

import simulator
from simulator import physics
from simulator.backend import Backend, NumpyBackend
from simulator.beam import RING_COUNTS, beam_pattern, sub_ray_directions
from simulator.config import ScannerConfig

from .conftest import PLAIN, REPO, Workspace, single_channel_scanner

# ----------------------------------------------------------------------------- the pattern


@pytest.mark.parametrize("n", RING_COUNTS)
def test_pattern_shares_sum_to_one_and_centre_on_the_axis(n: int) -> None:
    offsets, weights = beam_pattern(n)
    assert offsets.shape == (n, 2) and weights.shape == (n,)
    assert abs(weights.sum() - 1.0) < 1e-15
    assert np.all(weights > 0)
    np.testing.assert_allclose(weights @ offsets, 0.0, atol=1e-15)
    np.testing.assert_array_equal(offsets[0], [0.0, 0.0])
    assert np.abs(offsets).max() <= 1.0 + 1e-15  # out to the 1/e^2 contour


def test_seven_ray_pattern_energy_shares() -> None:
    """Centre: the energy inside half the ring radius, 1 - e^-0.5; the ring the rest."""
    offsets, weights = beam_pattern(7)
    assert weights[0] == pytest.approx(1.0 - np.exp(-0.5), abs=1e-15)
    np.testing.assert_allclose(weights[1:], np.exp(-0.5) / 6.0, atol=1e-15)
    np.testing.assert_allclose(np.hypot(*offsets[1:].T), 1.0, atol=1e-15)


def test_pattern_second_moment_approaches_the_gaussian() -> None:
    """Per axis, a Gaussian beam exp(-2 r^2) has variance 1/4 (in 1/e^2 half-angles)."""
    variances = [(beam_pattern(n)[1] * beam_pattern(n)[0][:, 0] ** 2).sum() for n in RING_COUNTS]
    assert variances[0] == 0.0
    assert all(abs(v - 0.25) < 0.06 for v in variances[1:])
    assert abs(variances[-1] - 0.25) < abs(variances[1] - 0.25)


def test_sub_rays_follow_the_beams_own_frame() -> None:
    """Horizontal offsets stay level for a level beam; vertical ones tilt it; sizes by axis."""
    offsets, _ = beam_pattern(19)
    az = np.radians(30.0)
    d = np.array([[np.cos(az), np.sin(az), 0.0]])
    sub = sub_ray_directions(d, np.array([0, 0, 1.0]), np.array([1.0, 0, 0]), 0.01, 0.002, offsets)
    assert sub.shape == (1, 19, 3)
    np.testing.assert_allclose(np.linalg.norm(sub, axis=2), 1.0, atol=1e-15)
    np.testing.assert_allclose(sub[0, 0], d[0], atol=1e-15)
    # sub = normalise(d + tan(a_h) e_h + tan(a_v) e_v), e_v = up, e_h = d x up (clockwise).
    t_h, t_v = np.tan(offsets[:, 0] * 0.01), np.tan(offsets[:, 1] * 0.002)
    elevation = np.arcsin(sub[0, :, 2])
    azimuth = np.arctan2(sub[0, :, 1], sub[0, :, 0]) - az
    np.testing.assert_allclose(elevation, np.arctan2(t_v, np.hypot(1.0, t_h)), atol=1e-15)
    np.testing.assert_allclose(azimuth, -np.arctan(t_h), atol=1e-15)


def test_bad_beam_settings_are_config_errors() -> None:
    with pytest.raises(ValueError, match="beam_samples must be one of 1, 7, 19, 37, 61"):
        ScannerConfig.model_validate(single_channel_scanner(beam_samples=5))
    with pytest.raises(ValueError, match="return_mode dual reports 2"):
        ScannerConfig.model_validate(single_channel_scanner(return_mode="dual", max_returns=3))


# ----------------------------------------------------------------------------- echoes

FLAT = {**PLAIN, "minnaert_k": 0.0, "reflectance": 0.5}  # backscatter = 0.5 at any angle


def _multi_scanner(samples: int = 19, **kw: object) -> dict:
    return single_channel_scanner(
        beam_samples=samples,
        divergence_mrad={"horizontal": 20.0, "vertical": 20.0},
        detection={"reference_range_m": 1000.0, "reference_reflectance": 0.1},
        **kw,
    )


def _wall(x_m: float, material: dict, name: str = "wall", **kw: object) -> dict:
    return {
        "name": name,
        "plane": {"size_m": [200.0, 200.0]},
        "position_m": [x_m, 0.0, 0.0],
        "rotation_deg": [0.0, -90.0, 0.0],
        "material": material,
        **kw,
    }


def _edge_box(x_m: float, material: dict) -> dict:
    """A box whose face at x covers y < 0: its edge is at azimuth 0 seen from the origin."""
    return {
        "name": "box",
        "box": {"size_m": [1.0, 10.0, 10.0]},
        "position_m": [x_m + 0.5, -5.0, 0.0],
        "material": material,
    }


def test_one_plane_gives_the_single_ray_result(ws: Workspace) -> None:
    """A footprint wholly on one plane: one return, range and intensity as the single ray."""
    lambert = {**PLAIN, "reflectance": 0.5, "minnaert_k": 1.0}
    plane = _wall(20.0, lambert)
    plane["rotation_deg"] = [0.0, -90.0, 30.0]  # turned 30 deg about z: oblique incidence
    single = ws.scan([plane], scanner=_multi_scanner(1, range_resolution_m=0.0025))
    multi = ws.scan([plane], scanner=_multi_scanner(19, range_resolution_m=0.0025))
    np.testing.assert_array_equal(multi["num_returns"], 1)

    def central(cloud: simulator.PointCloud) -> simulator.PointCloud:
        """Pulses within 60 deg of the plane's normal: far from its edges."""
        xyz = cloud["xyz"].astype(np.float64)
        off_normal = np.degrees(np.arctan2(xyz[:, 1], xyz[:, 0])) - 30.0
        return cloud.select(np.abs(off_normal) < 60.0)

    single, multi = central(single), central(multi)
    assert len(single) > 1000
    np.testing.assert_array_equal(multi["pulse_id"], single["pulse_id"])
    steps = np.round((multi["range_m"] - single["range_m"]).astype(np.float64) / 0.0025)
    # Equal within the quantisation; where not, the footprint's mean range is the longer
    # (range over a plane is convex in the beam angle).
    assert set(np.unique(steps)) <= {0.0, 1.0}
    np.testing.assert_allclose(multi["intensity"], single["intensity"], rtol=2e-3)
    np.testing.assert_array_equal(multi["energy_fraction"], 1.0)


def _share_on_box(azimuth_rad: np.ndarray, half_angle_rad: float) -> np.ndarray:
    """Energy share of the footprint on the box side of the edge, from the pattern alone.

    Sub-ray k points at azimuth phi - atan(tan(a_k)) (a_k its horizontal offset); it
    meets the box (y < 0) when that azimuth is negative.
    """
    offsets, weights = beam_pattern(19)
    a = np.arctan(np.tan(offsets[:, 0] * half_angle_rad))
    on_box = azimuth_rad[:, None] - a[None, :] < 0.0
    return (on_box * weights[None, :]).sum(axis=1)


def test_edge_before_a_wall_gives_two_returns_in_proportion(ws: Workspace) -> None:
    """A box edge 3 m before a wall: pulses straddling it report both, with the energy
    shares the footprint puts on each side."""
    scanner = _multi_scanner(19, return_mode="multi", max_returns=3, min_return_separation_m=1.0)
    cloud = ws.scan([_edge_box(10.0, FLAT), _wall(13.0, FLAT)], scanner=scanner)
    xyz = cloud["xyz"].astype(np.float64)
    # The edge at azimuth 0 (the box's far corners make other edges, away from it).
    cloud = cloud.select(np.abs(np.arctan2(xyz[:, 1], xyz[:, 0])) < 0.05)
    xyz = cloud["xyz"].astype(np.float64)
    two = cloud["num_returns"] == 2
    first = two & (cloud["return_number"] == 1)
    second = two & (cloud["return_number"] == 2)
    assert first.sum() == second.sum() >= 5
    assert set(np.unique(cloud["num_returns"])) == {1, 2}
    np.testing.assert_array_equal(cloud["pulse_id"][first], cloud["pulse_id"][second])
    assert np.all(np.abs(cloud["range_m"][first] - 10.0) < 0.01)
    assert np.all(np.abs(cloud["range_m"][second] - 13.0) < 0.02)
    # The azimuth of each straddling pulse's beam axis gives the expected shares.
    azimuth = np.arctan2(xyz[first, 1], xyz[first, 0])
    share = _share_on_box(azimuth, 0.010)
    np.testing.assert_allclose(cloud["intensity"][first], 100 * 0.5 * share, rtol=1e-5)
    np.testing.assert_allclose(cloud["intensity"][second], 100 * 0.5 * (1 - share), rtol=1e-5)
    # Pulses whose footprint lies on one side only: one full-energy return.
    single = cloud["num_returns"] == 1
    all_azimuth = np.arctan2(xyz[:, 1], xyz[:, 0])
    one_sided = _share_on_box(all_azimuth, 0.010)
    np.testing.assert_array_equal(single, (one_sided == 0.0) | (one_sided == 1.0))
    np.testing.assert_allclose(cloud["intensity"][single], 50.0, rtol=1e-6)


def test_targets_closer_than_the_separation_give_one_mixed_point(ws: Workspace) -> None:
    """0.3 m between box and wall, 1 m separation: one point between them, energy-weighted,
    whose peak factor carries the spread between the two surfaces."""
    scanner = _multi_scanner(
        19, return_mode="multi", max_returns=3, min_return_separation_m=1.0, range_resolution_m=0.0
    )
    cloud = ws.scan([_edge_box(10.0, FLAT), _wall(10.3, FLAT)], scanner=scanner)
    xyz = cloud["xyz"].astype(np.float64)
    cloud = cloud.select(np.abs(np.arctan2(xyz[:, 1], xyz[:, 0])) < 0.05)
    np.testing.assert_array_equal(cloud["num_returns"], 1)
    xyz = cloud["xyz"].astype(np.float64)
    azimuth = np.arctan2(xyz[:, 1], xyz[:, 0])
    share = _share_on_box(azimuth, 0.010)
    mixed = (share > 0.01) & (share < 0.99)
    assert mixed.sum() >= 5
    r = cloud["range_true_m"][mixed]
    assert np.all((r > 10.0) & (r < 10.3 + 0.01))
    np.testing.assert_allclose(r, 10.0 + 0.3 * (1.0 - share[mixed]), atol=3e-3)
    np.testing.assert_allclose(cloud["intensity"][mixed], 50.0, rtol=1e-6)
    np.testing.assert_allclose(
        cloud["energy_fraction"][mixed], np.maximum(share, 1 - share)[mixed], rtol=1e-5
    )
    between = 2.0 * 0.3 * np.sqrt(share * (1.0 - share))[mixed]
    length = float(physics.pulse_length_m(5.0))
    expected_peak = length / np.sqrt(length**2 + between**2)
    np.testing.assert_allclose(cloud["peak_factor"][mixed], expected_peak, rtol=1e-3)
    unmixed = (share == 0.0) | (share == 1.0)
    assert cloud["peak_factor"][unmixed].min() > 0.999


def _returns_by_pulse(cloud: simulator.PointCloud) -> dict[int, list[tuple[float, float]]]:
    """pulse id -> [(range, received peak)], from a diagnostics cloud."""
    received = (
        cloud["intensity"].astype(np.float64)
        / 100.0
        * cloud["peak_factor"]
        / cloud["range_true_m"] ** 2
    )
    out: dict[int, list[tuple[float, float]]] = {}
    for pid, r, s in zip(
        cloud["pulse_id"].tolist(), cloud["range_m"].tolist(), received.tolist(), strict=True
    ):
        out.setdefault(pid, []).append((r, s))
    return out


def _helios_rule(echoes: list[tuple[float, float]], mode: str) -> list[float]:
    """Ranges a sensor reports, from all its echoes (independent of the simulator's code)."""
    by_range = sorted(echoes)
    strongest = max(echoes, key=lambda e: e[1])
    if mode == "strongest":
        return [strongest[0]]
    if mode == "first":
        return [by_range[0][0]]
    if mode == "last":
        return [by_range[-1][0]]
    if strongest == by_range[-1]:  # dual: strongest + second strongest
        second = sorted(echoes, key=lambda e: -e[1])[1:2]
        return sorted([strongest[0]] + [e[0] for e in second])
    return sorted({strongest[0], by_range[-1][0]})


@pytest.fixture(scope="module")
def farm_echoes() -> dict[str, simulator.PointCloud]:
    """The farm scanned with a wide 19-ray beam, once per return mode."""
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    base = [
        "revolutions=0.5", "output.diagnostics=true", "scanner_overrides.beam_samples=19",
        "scanner_overrides.min_return_separation_m=0.5", "scanner_overrides.range_noise_m=0",
        "scanner_overrides.divergence_mrad.horizontal=30",
        "scanner_overrides.divergence_mrad.vertical=30",
        "scanner_overrides.intensity_step=0",  # the received peak is read back from intensity
    ]  # fmt: skip
    clouds = {
        "multi": simulator.scan(
            survey,
            [*base, "scanner_overrides.return_mode=multi", "scanner_overrides.max_returns=255"],
        )
    }
    for mode in ("strongest", "first", "last", "dual"):
        clouds[mode] = simulator.scan(survey, [*base, f"scanner_overrides.return_mode={mode}"])
    return clouds


@pytest.mark.parametrize("mode", ["strongest", "first", "last", "dual"])
def test_return_modes_follow_the_sensor_rules(
    farm_echoes: dict[str, simulator.PointCloud], mode: str
) -> None:
    """Every pulse reports what the rule picks from all its echoes (the multi scan)."""
    every = _returns_by_pulse(farm_echoes["multi"])
    assert sum(len(e) >= 3 for e in every.values()) >= 20  # the rules are exercised
    got = _returns_by_pulse(farm_echoes[mode])
    assert set(got) == set(every)
    for pid, echoes in every.items():
        assert sorted(r for r, _ in got[pid]) == pytest.approx(_helios_rule(echoes, mode)), pid
    cloud = farm_echoes[mode]
    expected_count = {pid: len(v) for pid, v in got.items()}
    counts = np.array([expected_count[p] for p in cloud["pulse_id"].tolist()])
    np.testing.assert_array_equal(cloud["num_returns"], counts)
    if mode == "dual":  # one or two returns a pulse, numbered 1 and 2, both kinds seen
        assert set(np.unique(cloud["num_returns"])) == {1, 2}
        np.testing.assert_array_equal(
            np.unique(cloud["return_number"][cloud["num_returns"] == 2], return_counts=True)[1],
            [np.sum(cloud["num_returns"] == 2) // 2] * 2,
        )
        assert set(np.unique(cloud["return_number"][cloud["num_returns"] == 1])) == {1}
    else:  # a single-return mode: one return a pulse, number 1 of 1
        assert np.all(cloud["return_number"] == 1) and np.all(cloud["num_returns"] == 1)


def test_multi_returns_are_numbered_by_range(farm_echoes: dict[str, simulator.PointCloud]) -> None:
    cloud = farm_echoes["multi"]
    pid = cloud["pulse_id"]
    same = pid[1:] == pid[:-1]
    assert np.all(cloud["range_m"][1:][same] > cloud["range_m"][:-1][same])
    np.testing.assert_array_equal(
        cloud["return_number"][1:][same], cloud["return_number"][:-1][same] + 1
    )
    assert np.all(cloud["return_number"] <= cloud["num_returns"])


def test_multi_echo_scans_are_identical_for_any_chunk_size_and_path() -> None:
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    base = [
        "revolutions=0.2",
        "scanner_overrides.beam_samples=7",
        "output.diagnostics=true",
        "scanner_overrides.return_mode=dual",
        "scanner_overrides.min_return_separation_m=1",
    ]
    ref = simulator.scan(survey, base)
    other = simulator.scan(survey, [*base, "chunk_pulses=3333"])
    for name in ref.names:
        np.testing.assert_array_equal(other[name], ref[name], err_msg=name)
    sim = simulator.Simulation.from_file(survey, base)
    sim.backend = NumpyBackend()
    numpy_cloud = sim.run()
    assert numpy_cloud.names == ref.names and len(ref) > 5000
    assert np.sum(ref["num_returns"] == 2) > 100  # two-return pulses are compared too
    # Every field the same, bit for bit; the float64 true range (a sum in another order)
    # to its last digits.
    for name in ref.names:
        if name == "range_true_m":
            np.testing.assert_allclose(numpy_cloud[name], ref[name], rtol=1e-14, atol=0)
        else:
            np.testing.assert_array_equal(numpy_cloud[name], ref[name], err_msg=name)


def test_las_carries_return_numbers(
    farm_echoes: dict[str, simulator.PointCloud], tmp_path: Path
) -> None:
    cloud = farm_echoes["dual"]
    simulator.write(cloud, tmp_path / "dual.las")
    las = laspy.read(str(tmp_path / "dual.las"))
    np.testing.assert_array_equal(las.return_number, cloud["return_number"])
    np.testing.assert_array_equal(las.number_of_returns, cloud["num_returns"])
    assert (las.number_of_returns == 2).sum() > 0


# ----------------------------------------------------------------- merging and positions


def _returns(rng: np.random.Generator, pulses: np.ndarray, diagnostics: bool) -> object:
    """Random returns of ``pulses`` (1 to 3 a pulse, in pulse order)."""
    from simulator.steps.returns import Returns

    pulse = np.repeat(pulses, rng.integers(1, 4, len(pulses))).astype(np.int64)
    k = len(pulse)
    from simulator.steps.returns import DIAGNOSTIC_FIELDS

    extra = {name: rng.random(k) for name in DIAGNOSTIC_FIELDS} if diagnostics else {}
    return Returns(pulse=pulse, range_m=rng.random(k), intensity=rng.random(k) * 255,
                   object_index=rng.integers(-1, 9, k).astype(np.int32),
                   return_number=rng.integers(1, 3, k).astype(np.uint8),
                   num_returns=rng.integers(1, 3, k).astype(np.uint8), **extra)  # fmt: skip


@pytest.mark.parametrize("touched_share", [0.0, 0.02, 0.3, 0.97, 1.0])
@pytest.mark.parametrize("diagnostics", [False, True])
def test_merged_returns_are_the_kept_and_the_recomputed_in_pulse_order(
    touched_share: float, diagnostics: bool, backend: Backend
) -> None:
    """``merge_returns`` (the specification and the kernels' merge, a walk and a gather a
    field) of a chunk's single-ray returns (those of untouched pulses kept) and the
    returns recomputed for the touched pulses equals a stable sort of the two by pulse,
    field for field and dtype for dtype: with none, few, some, most and every pulse
    touched (the paths with one source only)."""
    from simulator.steps.returns import DIAGNOSTIC_FIELDS

    merge_returns = backend.merge_returns
    rng = np.random.default_rng(7)
    n = 5000
    touched = rng.random(n) < touched_share
    single = _returns(rng, np.arange(n), diagnostics)
    pulses = np.flatnonzero(touched)
    recomputed = _returns(rng, np.arange(len(pulses)), diagnostics)
    kept = ~touched[single.pulse]
    merged = merge_returns(single, kept, recomputed, pulses, diagnostics=diagnostics)
    names = ["pulse", "range_m", "intensity", "object_index", "return_number", "num_returns"]
    names += list(DIAGNOSTIC_FIELDS) if diagnostics else []
    a = {k: getattr(single, k)[kept] for k in names}
    b = {k: getattr(recomputed, k) for k in names}
    b["pulse"] = pulses[recomputed.pulse]
    order = np.argsort(np.concatenate([a["pulse"], b["pulse"]]), kind="stable")
    assert 0 < len(merged) == len(order)
    for k in names:
        want = np.concatenate([a[k], b[k]]).astype(np.result_type(a[k], b[k]))[order]
        got = getattr(merged, k)
        assert got.dtype == (np.int64 if k == "pulse" else want.dtype), k
        np.testing.assert_array_equal(got, want, k)
    assert (merged.cos_incidence is None) is not diagnostics
    if touched_share == 1.0:  # (what the pipeline passes when no pulse keeps its own)
        alone = merge_returns(None, None, recomputed, pulses, diagnostics=diagnostics)
        for k in names:
            np.testing.assert_array_equal(getattr(alone, k), getattr(merged, k), k)


@pytest.mark.parametrize("spread", [1, 10, 10**6])
def test_positions_in_finds_each_value_by_its_rank_or_by_search(spread: int) -> None:
    """``chunk.positions_in``: where each value stands among increasing keys, and whether
    it is there, the same from its rank table (small indices) as from binary searches
    (keys spread far apart), values in any order and with repeats."""
    from simulator.chunk import positions_in

    rng = np.random.default_rng(3)
    keys = np.unique(rng.integers(0, 2000, 700)) * spread
    values = rng.integers(0, 2000, 3000) * spread
    pos, found = positions_in(keys, values)
    want = np.isin(values, keys)
    np.testing.assert_array_equal(found, want)
    np.testing.assert_array_equal(keys[pos[found]], values[found])
    empty_pos, empty_found = positions_in(keys[:0], values)
    assert not empty_found.any() and len(empty_pos) == len(values)
