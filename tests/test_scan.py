"""End-to-end scans whose outcome the geometry and the physics predict exactly."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import simulator
from simulator import physics
from simulator.backend import Backend
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


def _wall_geometry(cloud: simulator.PointCloud, distance_m: float) -> tuple[np.ndarray, ...]:
    """Geometric range and incidence cosine of each point's ray on the wall x = distance,
    from the measured point's direction alone (the sensor sits at the origin)."""
    xyz = cloud["xyz"].astype(np.float64)
    direction = xyz / np.linalg.norm(xyz, axis=1, keepdims=True)
    cos = direction[:, 0]  # the wall's normal is -x
    return distance_m / cos, cos


ROUGH_M = 0.01


def _rough_wall_scan(ws: Workspace, exponent: float | None = None) -> simulator.PointCloud:
    rough = {**PLAIN, "roughness_m": ROUGH_M, "micro_slope_cell_m": 0.05}
    elevations = np.linspace(-8.0, 8.0, 17).tolist()  # rows 0.17 m apart or more
    scanner = single_channel_scanner(channels={"elevation_deg": elevations})
    return ws.scan([_wall(10.0, rough)], scanner=scanner, revolutions=2)


def test_surface_relief_is_fixed_in_place_and_follows_the_rough_law(ws: Workspace) -> None:
    """From the scanned ranges alone (the true range from the wall's geometry, the
    incidence from its normal): the range scatter's log-log slope against cos(incidence)
    is -1.5 and its scale at normal incidence is the roughness; the offsets repeat exactly
    on the second revolution (they are fixed in place)."""
    cloud = _rough_wall_scan(ws)
    range_true_m, cos = _wall_geometry(cloud, 10.0)
    err = cloud["range_m"].astype(np.float64) - range_true_m
    # Bins of incidence, each with hundreds of independent cells (0.05 m relief cells).
    first = cloud["pulse_id"] < 3600 * 17
    edges = np.linspace(np.log(0.12), 0.0, 9)
    centre, sigma = [], []
    for lo, hi in itertools.pairwise(edges):
        inside = first & (np.log(cos) >= lo) & (np.log(cos) < hi)
        assert inside.sum() > 300
        centre.append(np.mean(np.log(cos[inside])))
        sigma.append(np.std(err[inside]))
    slope, intercept = np.polyfit(centre, np.log(sigma), 1)
    print(f"rough law: slope {slope:.4f}, scale {np.exp(intercept):.5f} m")
    assert slope == pytest.approx(-1.5, abs=0.06)
    assert np.exp(intercept) == pytest.approx(ROUGH_M, rel=0.06)
    second = ~first
    pid = cloud["pulse_id"].astype(np.int64)
    _, i1, i2 = np.intersect1d(pid[first], pid[second] - 3600 * 17, return_indices=True)
    assert len(i1) > 20_000
    np.testing.assert_array_equal(err[first][i1], err[second][i2])


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


def _threshold_edge_m(rho: float, alpha_per_m: float, rho_ref: float, r_ref_m: float) -> float:
    """Range where rho exp(-2 alpha R) / R^2 falls to rho_ref exp(-2 alpha R_ref) / R_ref^2,
    by bisection on the logarithm (decreasing in R)."""
    target = np.log(rho_ref) - 2.0 * alpha_per_m * r_ref_m - 2.0 * np.log(r_ref_m)
    lo, hi = 1e-3, 1e5
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        above = np.log(rho) - 2.0 * alpha_per_m * mid - 2.0 * np.log(mid) >= target
        lo, hi = (mid, hi) if above else (lo, mid)
    return lo


@pytest.mark.parametrize("rho", [0.05, 0.5])
@pytest.mark.parametrize(("fraction", "detected"), [(0.995, True), (1.005, False)])
def test_extinction_brings_the_detection_range_in_by_the_two_way_law(
    ws: Workspace, rho: float, fraction: float, detected: bool
) -> None:
    """With alpha = 0.01 / m, a wall is seen out to where rho exp(-2 alpha R) / R^2 meets
    the threshold, which is set by the datasheet's 10 % at 110 m in the same air; 0.5 %
    nearer it is seen, 0.5 % farther it is not. Its intensity (calibrated reflectivity)
    does not fade with the air."""
    alpha = 0.01
    edge_m = _threshold_edge_m(rho, alpha, 0.1, 110.0)
    clear_edge_m = 110.0 * np.sqrt(rho / 0.1)  # what the law without the air would give
    # 92.6 m against 77.8 m for 5 %, 155.7 m against 246.0 m for 50 %: the air costs the
    # far target range, and the near one gains (the threshold itself was set through
    # 110 m of the same air).
    assert abs(edge_m - clear_edge_m) > 0.15 * edge_m
    scanner = single_channel_scanner(atmospheric_extinction_per_m=alpha)
    cloud = ws.scan([_wall(fraction * edge_m, {**PLAIN, "reflectance": rho})], scanner=scanner)
    assert (len(cloud) > 0) == detected
    if detected:
        np.testing.assert_allclose(cloud["intensity"].max(), 100.0 * rho, rtol=1e-5)


def _predicted_detected(
    direction: np.ndarray, normal: np.ndarray, range_m: np.ndarray, divergence_mrad: tuple
) -> np.ndarray:
    """Which rays of a pencil-free elliptical beam are detected on a Lambertian 5 % plane,
    from the geometry: the receding direction's angle to the beam's vertical axis (world
    up, the sensor being level) sets the in-plane divergence."""
    beta_h, beta_v = (v * 1e-3 for v in divergence_mrad)
    cos_inc = np.abs(direction @ normal)
    receding = normal - (direction @ normal)[:, None] * direction
    up = np.array([0.0, 0.0, 1.0]) - direction[:, 2:3] * direction
    norms = np.linalg.norm(receding, axis=1) * np.linalg.norm(up, axis=1)
    cos_psi = np.where(norms > 1e-12, np.abs(np.sum(receding * up, axis=1)) / norms, 1.0)
    cos_psi = np.minimum(cos_psi, 1.0)
    beta = np.hypot(beta_v * cos_psi, beta_h * np.sqrt(1.0 - cos_psi**2))
    spread_m = range_m * np.sqrt(1.0 - cos_inc**2) / cos_inc * beta
    pulse_m = 299_792_458.0 * 5e-9 / 2.0
    peak = pulse_m / np.hypot(pulse_m, spread_m)
    return 0.05 * cos_inc * peak / range_m**2 >= 0.1 / 110.0**2


GROUND_ELEVATIONS_DEG = (-np.arange(3.0, 12.0, 0.05)).tolist()


@pytest.mark.parametrize("divergence_mrad", [(0.0, 20.0), (20.0, 0.0), (12.0, 8.0)])
def test_on_level_ground_the_vertical_divergence_stretches_the_echo(
    ws: Workspace, divergence_mrad: tuple
) -> None:
    """Level ground under a level sensor recedes along the beam's vertical axis (psi = 0):
    only the vertical divergence moves the ring at which a dark ground stops being seen.
    The edge ring is found in the scan and predicted from the geometry."""
    scanner = single_channel_scanner(
        channels={"elevation_deg": GROUND_ELEVATIONS_DEG},
        firings_per_revolution=90,
        divergence_mrad=dict(zip(("horizontal", "vertical"), divergence_mrad, strict=True)),
    )
    ground = _plane(size_m=2000.0, position_m=[0.0, 0.0, -H_M])
    ground["material"] = {**DARK, "label": "terrain"}
    cloud = ws.scan([ground], scanner=scanner)
    rings = np.unique(cloud["ring"])
    elevation = np.radians(np.array(GROUND_ELEVATIONS_DEG))
    direction = np.stack([np.cos(elevation), 0 * elevation, np.sin(elevation)], axis=1)
    range_m = H_M / -np.sin(elevation)
    predicted = np.flatnonzero(
        _predicted_detected(direction, np.array([0.0, 0.0, 1.0]), range_m, divergence_mrad)
    )
    np.testing.assert_array_equal(rings, predicted)
    assert np.all(np.bincount(cloud["ring"])[rings] == 90)  # every azimuth alike
    # The clear-beam edge: rho sin^3(e) / h^2 = 0.1 / 110^2 at e = 4.66 deg, the -4.7 ring.
    shallowest = GROUND_ELEVATIONS_DEG[rings.min()]
    clear_deg = np.degrees(np.arcsin((0.1 / 110.0**2 * H_M**2 / 0.05) ** (1 / 3)))
    if divergence_mrad[1] == 0.0:
        assert shallowest == pytest.approx(-clear_deg, abs=0.05)
    else:  # a vertical divergence (and only that) pulls the edge in by a degree or more
        assert shallowest < -clear_deg - 1.0


@pytest.mark.parametrize("elevation_deg", [-30.0, -40.0])
def test_at_an_intermediate_psi_both_divergences_count(ws: Workspace, elevation_deg: float) -> None:
    """A wall seen at elevation -30 or -40 deg across azimuth recedes partly along the
    beam's vertical axis and partly across it: the detection edge in azimuth is where the
    combined in-plane divergence predicts (56.2 and 49.5 deg), and neither divergence
    alone predicts it (each is 1.4 deg or more away)."""
    d_m = 20.0
    divergence = (10.0, 30.0)
    scanner = single_channel_scanner(
        channels={"elevation_deg": [elevation_deg]},
        divergence_mrad={"horizontal": divergence[0], "vertical": divergence[1]},
    )
    cloud = ws.scan([_wall(d_m, DARK)], scanner=scanner)
    measured = _max_angle_deg(cloud)

    def edge(div: tuple) -> float:
        azimuth = np.radians(np.arange(0.0, 89.0, 0.001))
        e = np.radians(elevation_deg)
        direction = np.stack(
            [
                np.cos(e) * np.cos(azimuth),
                np.cos(e) * np.sin(azimuth),
                np.full_like(azimuth, np.sin(e)),
            ],
            axis=1,
        )
        range_m = d_m / direction[:, 0]
        ok = _predicted_detected(direction, np.array([-1.0, 0.0, 0.0]), range_m, div)
        return float(np.degrees(azimuth[ok].max()))

    assert measured == pytest.approx(edge(divergence), abs=0.1)  # one azimuth step
    for alone in ((divergence[0], 0.0), (0.0, divergence[1])):
        assert abs(measured - edge(alone)) > 1.0


@pytest.mark.parametrize(
    ("rho", "intensity_max", "expected"),
    [(2.0, 255.0, 200.0), (3.0, 255.0, 255.0), (2.0, 150.0, 150.0), (0.5, 40.0, 40.0)],
)
def test_intensity_clips_at_intensity_max(
    ws: Workspace, rho: float, intensity_max: float, expected: float
) -> None:
    """At normal incidence on a k = 0 target, intensity = scale * rho, held at
    intensity_max: a retroreflector at 3.0 reads 255, not 300; one at 2.0 reads 200, or
    150 where the sensor tops out at 150."""
    scanner = single_channel_scanner(intensity_max=intensity_max)
    material = {**PLAIN, "reflectance": rho, "minnaert_k": 0.0}
    cloud = ws.scan([_wall(10.0, material)], scanner=scanner)
    assert len(cloud) > 1000
    np.testing.assert_array_equal(cloud["intensity"], np.float32(expected))


@pytest.mark.parametrize("step", [1.0, 5.0])
def test_intensity_is_reported_in_the_sensors_steps(
    ws: Workspace, backend: Backend, step: float
) -> None:
    """With intensity_step, every reading is a whole number of steps: the unquantised
    reading rounded (half to even), never above intensity_max; on a Lambertian slope the
    readings take many values, each a multiple of the step."""
    material = {**PLAIN, "reflectance": 2.4, "minnaert_k": 1.0}
    scanner = single_channel_scanner(channels={"elevation_deg": [-10.0, -20.0, -30.0]})
    plane = _plane(200.0, position_m=[0.0, 0.0, -2.0], rotation_deg=[0.0, 25.0, 0.0])
    plane["material"] = material
    runs = {}
    for quantum in (0.0, step):
        survey = ws.survey([plane], scanner={**scanner, "intensity_step": quantum})
        sim = simulator.Simulation.from_file(survey)
        sim.backend = backend
        runs[quantum] = sim.run()
    raw, stepped = runs[0.0]["intensity"], runs[step]["intensity"]
    assert len(raw) == len(stepped) > 1000
    np.testing.assert_array_equal(stepped, np.minimum(np.rint(raw / step) * step, 255.0))
    assert np.all(np.mod(stepped, step) == 0.0)
    assert len(np.unique(stepped)) > 10 and stepped.max() <= 255.0
    assert np.any(raw != np.rint(raw))  # the unquantised readings were not whole already
