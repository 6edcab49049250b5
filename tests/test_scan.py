"""End-to-end scans whose outcome the geometry and the physics predict exactly."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator import physics
from simulator.config import load_scanner

from .conftest import PLAIN, REPO, Workspace, single_channel_scanner

H_M = 1.8


def _plane(size_m: float = 4000.0, **kw: object) -> dict[str, object]:
    return {"name": "ground", "plane": {"size_m": [size_m, size_m]}, "material": PLAIN, **kw}


def _wall(distance_m: float, material: dict[str, object], **kw: object) -> dict[str, object]:
    """A 2 km square wall at x = distance, its normal facing the origin (-x)."""
    return {
        "name": "wall",
        "plane": {"size_m": [2000.0, 2000.0]},
        "position_m": [distance_m, 0.0, 0.0],
        "rotation_deg": [0.0, -90.0, 0.0],
        "material": material,
        **kw,
    }


def test_rings_on_a_plane_lie_on_their_circles(ws: Workspace) -> None:
    """A sensor at height h puts ring e on the circle r0 + h / tan|e|, one point per firing."""
    cloud = ws.scan(
        [_plane()],
        pose={"position_m": [0.0, 0.0, H_M], "rotation_deg": [0.0, 0.0, 0.0]},
        scanner_overrides={
            "range_noise_m": 0.0,
            "range_resolution_m": 0.0,
            "range_max_m": 1000.0,
            "detection": {"reference_range_m": 1e5},
        },
    )
    scanner = load_scanner("rs-helios-5515")
    r0 = scanner.beam_origin_offset_m
    xyz = cloud["xyz"].astype(np.float64)
    np.testing.assert_allclose(xyz[:, 2], 0.0, atol=2e-5)
    radius = np.hypot(xyz[:, 0], xyz[:, 1])
    for ring, elevation in enumerate(scanner.channels.elevation_deg):
        on_ring = cloud["ring"] == ring
        if elevation >= 0.0:
            assert not on_ring.any(), f"ring {ring} at {elevation} deg cannot hit the ground"
            continue
        assert on_ring.sum() == scanner.firings_per_revolution  # exactly one point per firing
        expected = r0 + H_M / np.tan(np.radians(-elevation))
        np.testing.assert_allclose(radius[on_ring], expected, rtol=2e-6, atol=2e-5)
    # The first firing of every channel happens once, in time order within the block.
    assert len(np.unique(cloud["time_s"])) == len(cloud)


def test_ranges_are_quantised_to_the_resolution(ws: Workspace) -> None:
    """Measured ranges are whole multiples of range_resolution_m."""
    cloud = ws.scan([_plane()], pose={"position_m": [0.0, 0.0, H_M]})
    steps = cloud["range_m"].astype(np.float64) / 0.0025
    np.testing.assert_allclose(steps, np.round(steps), atol=2e-3)


def _max_angle_deg(cloud: simulator.PointCloud) -> float:
    xyz = cloud["xyz"].astype(np.float64)
    return float(np.degrees(np.abs(np.arctan2(xyz[:, 1], xyz[:, 0]))).max())


DARK = {**PLAIN, "reflectance": 0.05}
R_MAX_M = 110.0 * (0.05 / 0.1) ** 0.5  # reference 10 % at 110 m; a 5 % target


@pytest.mark.parametrize(("fraction", "detected"), [(0.99, True), (1.01, False)])
def test_dark_wall_detected_out_to_the_threshold_range(
    ws: Workspace, fraction: float, detected: bool
) -> None:
    """A 5 % wall at normal incidence is seen out to R_ref sqrt(rho / rho_ref), not beyond."""
    cloud = ws.scan([_wall(fraction * R_MAX_M, DARK)], scanner=single_channel_scanner())
    assert (len(cloud) > 0) == detected


def test_detection_edge_on_a_lambertian_wall(ws: Workspace) -> None:
    """With a pencil beam, S = rho cos^3(phi) / D^2, so hits end at cos^3 phi = (D / R_max)^2."""
    d_m = 0.8 * R_MAX_M
    cloud = ws.scan([_wall(d_m, DARK)], scanner=single_channel_scanner())
    phi_max = np.degrees(np.arccos((d_m / R_MAX_M) ** (2.0 / 3.0)))
    assert abs(_max_angle_deg(cloud) - phi_max) <= 0.1  # one azimuth step


def _edge_with_divergence(d_m: float, beta_rad: float, pulse_m: float) -> float:
    """Angle where rho cos^3 phi * L / sqrt(L^2 + (R tan phi beta)^2) / D^2 meets the threshold."""
    phi = np.radians(np.linspace(0.0, 89.0, 890001))
    r = d_m / np.cos(phi)
    peak = pulse_m / np.sqrt(pulse_m**2 + (r * np.tan(phi) * beta_rad) ** 2)
    ok = 0.05 * np.cos(phi) ** 3 * peak / d_m**2 >= 0.1 / 110.0**2
    return float(np.degrees(phi[ok].max()))


@pytest.mark.parametrize(
    ("divergence", "governing_mrad"),
    [({"horizontal": 20.0, "vertical": 0.0}, 20.0), ({"horizontal": 0.0, "vertical": 20.0}, 0.0)],
)
def test_elliptical_beam_uses_the_divergence_in_the_plane_of_incidence(
    ws: Workspace, divergence: dict[str, float], governing_mrad: float
) -> None:
    """On a wall seen across azimuth, the horizontal divergence stretches the echo, not the
    vertical one; the stretched echo's lower peak brings the detection edge in."""
    d_m = 0.5 * R_MAX_M
    scanner = single_channel_scanner(divergence_mrad=divergence)
    cloud = ws.scan([_wall(d_m, DARK)], scanner=scanner)
    pulse_m = float(physics.pulse_length_m(5.0))
    expected = _edge_with_divergence(d_m, governing_mrad * 1e-3, pulse_m)
    assert abs(_max_angle_deg(cloud) - expected) <= 0.1
    assert cloud["peak_factor"].min() < 1.0 if governing_mrad else cloud["peak_factor"].min() == 1


def test_intensity_follows_minnaert_on_a_tilted_plane(ws: Workspace) -> None:
    """Intensity = scale * rho * cos^k, with cos from the plane's known normal."""
    k, rho = 0.6, 0.4
    material = {**PLAIN, "reflectance": rho, "minnaert_k": k}
    scanner = single_channel_scanner(channels={"elevation_deg": [-10.0, -20.0, -30.0, -45.0]})
    plane = _plane(200.0, position_m=[0.0, 0.0, -2.0], rotation_deg=[0.0, 25.0, 0.0])
    plane["material"] = material
    cloud = ws.scan([plane], scanner=scanner)
    normal = np.array([np.sin(np.radians(25.0)), 0.0, np.cos(np.radians(25.0))])
    xyz = cloud["xyz"].astype(np.float64)
    cos = np.abs(xyz @ normal) / np.linalg.norm(xyz, axis=1)
    assert cos.max() - cos.min() > 0.5  # a wide span of incidence
    np.testing.assert_allclose(cloud["intensity"], 100.0 * rho * cos**k, rtol=1e-4)
    fitted_k = np.polyfit(np.log(cos), np.log(cloud["intensity"].astype(np.float64)), 1)[0]
    assert fitted_k == pytest.approx(k, abs=1e-3)


def test_sensor_noise_statistics_and_renewal(ws: Workspace) -> None:
    """Range jitter has the configured sigma, zero mean, and is new on every pulse."""
    sigma = 0.02
    scanner = single_channel_scanner(range_noise_m=sigma)
    cloud = ws.scan([_wall(20.0, PLAIN)], scanner=scanner, revolutions=2)
    err = cloud["range_m"].astype(np.float64) - cloud["range_true_m"]
    n = len(err)
    assert n > 3000
    assert abs(err.mean()) < 4 * sigma / np.sqrt(n)
    assert err.std() == pytest.approx(sigma, rel=0.06)
    # The same azimuth in revolution 1 and 2: independent draws.
    per_rev = 3600
    first = cloud["pulse_id"] < per_rev
    pid = cloud["pulse_id"].astype(np.int64)
    _, i1, i2 = np.intersect1d(pid[first], pid[~first] - per_rev, return_indices=True)
    assert len(i1) > 1500
    assert abs(np.corrcoef(err[first][i1], err[~first][i2])[0, 1]) < 0.1


def test_surface_relief_is_fixed_in_place_and_follows_the_rough_law(ws: Workspace) -> None:
    """Relief offsets scale as roughness cos^-1.5 and repeat exactly on a second revolution."""
    rough = {**PLAIN, "roughness_m": 0.01, "micro_slope_cell_m": 0.05}
    cloud = ws.scan([_wall(10.0, rough)], scanner=single_channel_scanner(), revolutions=2)
    err = cloud["range_m"].astype(np.float64) - cloud["range_true_m"]
    z = err / physics.rough_range_sigma_m(0.01, cloud["cos_incidence"].astype(np.float64))
    assert z.std() == pytest.approx(1.0, rel=0.08)
    per_rev = 3600
    first = cloud["pulse_id"] < per_rev
    np.testing.assert_array_equal(err[first], err[~first])


def test_micro_slope_tilts_the_incidence_by_the_configured_spread(ws: Workspace) -> None:
    """theta_eff - theta has the configured rms tilt (away from the clamps) and mean zero."""
    slope_deg = 2.0
    material = {**PLAIN, "micro_slope_deg": slope_deg, "micro_slope_cell_m": 0.02}
    cloud = ws.scan([_wall(10.0, material)], scanner=single_channel_scanner())
    theta = np.degrees(np.arccos(cloud["cos_incidence"].astype(np.float64)))
    theta_eff = np.degrees(np.arccos(cloud["cos_effective"].astype(np.float64)))
    inside = (theta > 10.0) & (theta < 70.0)
    delta = (theta_eff - theta)[inside]
    assert delta.std() == pytest.approx(slope_deg, rel=0.08)
    assert abs(delta.mean()) < 0.2


def test_range_window_drops_returns_outside_it(ws: Workspace) -> None:
    """Returns beyond range_max_m or closer than range_min_m are not reported."""
    far = ws.scan([_wall(30.0, PLAIN)], scanner=single_channel_scanner(range_max_m=29.0))
    assert len(far) == 0
    near = ws.scan([_wall(30.0, PLAIN)], scanner=single_channel_scanner(range_min_m=35.0))
    assert near["range_m"].min() >= 35.0


def test_same_seed_is_bit_identical_for_any_chunk_size() -> None:
    """Every random quantity is a hash: chunking the pulses changes nothing, bit for bit."""
    survey = REPO / "scenes" / "farm" / "survey.yaml"
    base = ["seed=3", "revolutions=0.5", "output.diagnostics=true"]
    reference = simulator.scan(survey, base)
    assert len(reference) > 10_000
    for chunk in (1000, 7777):
        other = simulator.scan(survey, [*base, f"chunk_pulses={chunk}"])
        assert other.names == reference.names
        for name in reference.names:
            np.testing.assert_array_equal(other[name], reference[name], err_msg=name)
    different = simulator.scan(survey, ["seed=4", "revolutions=0.5"])
    assert not np.array_equal(different["range_m"][:1000], reference["range_m"][:1000])
