"""See-through and porous surfaces: a material's ``transmittance`` lets the pulse on.

The expected values come from the law (the two-way transmittance ``T^2`` of every surface in
front) applied to the ray engine's own hits of the scene without the pane, not from the code
under test.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from simulator.backend import NumpyBackend
from simulator.labels import label_id
from simulator.pipeline.simulation import Simulation

from .conftest import (
    PLAIN,
    Workspace,
    count_cast_in_full,
    judged_in_full,
    single_channel_scanner,
)

THRESHOLD = 0.1 / 110.0**2
GLASS = {**PLAIN, "reflectance": 0.05, "minnaert_k": 0.0, "transmittance": 0.8,
         "label": "building"}  # fmt: skip
BACK = {**PLAIN, "label": "vegetation"}


def _wall(name: str, distance_m: float, material: dict, size_m: float = 4000.0) -> dict:
    """A vertical plane facing the sensor across x = distance_m."""
    return {"name": name, "plane": {"size_m": [size_m, size_m]},
            "position_m": [distance_m, 0.0, 0.0], "rotation_deg": [0.0, 90.0, 0.0],
            "material": material}  # fmt: skip


def _sim(ws: Workspace, objects: list[dict], scanner: dict, **keys) -> Simulation:
    return Simulation.from_file(ws.survey(objects, scanner, **keys))


def test_a_window_gives_a_weak_echo_and_the_wall_behind_a_stronger_one(ws: Workspace) -> None:
    """A pane (reflectance 0.05, transmittance 0.8) 5 m away before a wall at 10 m, multi
    returns: every pulse through the pane reports the pane and the wall; the wall at its
    own range, with the pane-less intensity times T^2 = 0.64; strongest return picks the
    wall (0.5 x 0.64 / 100 beats 0.05 / 25)."""
    scanner = single_channel_scanner(return_mode="multi", max_returns=3)
    pane = _wall("pane", 5.0, GLASS, size_m=4.0)
    back = _wall("back", 10.0, BACK, size_m=40.0)
    alone = _sim(ws, [back], scanner).run()
    both = _sim(ws, [pane, back], scanner).run()
    glass, wall = label_id("building"), label_id("vegetation")
    through = np.unique(both["pulse_id"][both["label"] == glass])
    assert len(through) > 100
    seen = np.isin(both["pulse_id"], through)
    assert np.all(both["num_returns"][seen] == 2)
    behind = seen & (both["label"] == wall)
    np.testing.assert_array_equal(both["pulse_id"][behind], through)
    ref = np.searchsorted(alone["pulse_id"], through)
    np.testing.assert_array_equal(alone["pulse_id"][ref], through)
    np.testing.assert_allclose(both["range_m"][behind], alone["range_m"][ref], rtol=1e-7)
    np.testing.assert_allclose(both["intensity"][behind], 0.64 * alone["intensity"][ref],
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(both["intensity"][seen & (both["label"] == glass)], 5.0, rtol=1e-6)
    # Pulses that miss the pane are the pane-less scan's.
    for name in ("xyz", "range_m", "intensity", "label"):
        np.testing.assert_array_equal(both[name][~seen], alone[name][~np.isin(alone["pulse_id"],
                                      through)], err_msg=name)  # fmt: skip
    strongest = _sim(ws, [pane, back], single_channel_scanner()).run()
    assert np.all(strongest["label"][np.isin(strongest["pulse_id"], through)] == wall)


@pytest.mark.parametrize("porous", [False, True], ids=["pane", "porous"])
def test_a_porous_layer_returns_by_the_gap_model_and_a_pane_by_its_two_passes(
    ws: Workspace, porous: bool
) -> None:
    """A sheet (reflectance 0.5, T 0.5) 5 m before a wall at 10 m, multi returns. A pane
    returns its full reflectance and passes T^2 = 0.25 to what is behind; a porous layer
    (foliage, wire mesh) returns (1 - T) rho = 0.25 and passes T = 0.5, once, through the
    gap both ways. Expected intensities from the sheet alone and the wall alone (the ray
    engine's own scans), not from the code under test."""
    scanner = single_channel_scanner(return_mode="multi", max_returns=3)
    leaf = {**PLAIN, "reflectance": 0.5, "minnaert_k": 0.0, "transmittance": 0.5,
            "label": "vegetation", "porous": porous}  # fmt: skip
    opaque = {**leaf, "transmittance": 0.0, "porous": False}
    sheet = _wall("sheet", 5.0, leaf, size_m=4.0)
    back = _wall("back", 10.0, {**BACK, "label": "building"}, size_m=40.0)
    both = _sim(ws, [sheet, back], scanner).run()
    alone = _sim(ws, [back], scanner).run()
    front_alone = _sim(ws, [_wall("sheet", 5.0, opaque, size_m=4.0)], scanner).run()
    veg, wall = label_id("vegetation"), label_id("building")
    through = np.unique(both["pulse_id"][both["label"] == veg])
    assert len(through) > 100
    front = both["label"] == veg
    behind = np.isin(both["pulse_id"], through) & (both["label"] == wall)
    np.testing.assert_array_equal(both["pulse_id"][behind], through)
    ref = np.searchsorted(alone["pulse_id"], through)
    front_share, back_share = (0.5, 0.5) if porous else (1.0, 0.25)
    np.testing.assert_allclose(both["intensity"][behind],
                               back_share * alone["intensity"][ref], rtol=1e-6)  # fmt: skip
    at = np.searchsorted(front_alone["pulse_id"], both["pulse_id"][front])
    np.testing.assert_allclose(both["intensity"][front],
                               front_share * front_alone["intensity"][at], rtol=1e-6)  # fmt: skip


@pytest.mark.parametrize("transmittance", [0.9, 0.5])
def test_what_lies_behind_glass_is_detected_by_the_threshold_law(
    ws: Workspace, transmittance: float
) -> None:
    """A pane 5 m away across the whole view, a Lambertian wall at 20 m: the wall is
    detected on exactly the pulses where ``0.5 cos T^2 / R^2 >= threshold`` (R and cos
    from the ray engine's hits of the wall alone)."""
    scanner = single_channel_scanner(pulse_length_ns=0.0, return_mode="last")
    pane = _wall("pane", 5.0, {**GLASS, "transmittance": transmittance})
    back = _wall("back", 20.0, BACK)
    sim = _sim(ws, [pane, back], scanner)
    cloud = sim.run()
    geometry = _sim(ws, [back], scanner)
    chunk = geometry.cast_pulses(0, geometry.total_pulses)
    r = chunk.hits.range_m.astype(np.float64)
    cos = np.abs(np.einsum("ij,ij->i", chunk.hits.normal.astype(np.float64),
                           chunk.cast[:, 3:].astype(np.float64)))  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):
        law = np.where(chunk.hits.hit, 0.5 * cos * transmittance**2 / r**2, 0.0) / THRESHOLD
    detected = np.zeros(sim.total_pulses, dtype=bool)
    detected[cloud["pulse_id"][cloud["label"] == label_id("vegetation")]] = True
    clear_cut = np.abs(law - 1.0) > 1e-6
    np.testing.assert_array_equal(detected[clear_cut], law[clear_cut] >= 1.0)
    assert 100 < detected.sum() < np.count_nonzero(chunk.hits.hit)


def test_the_number_of_surfaces_a_ray_meets_is_bounded(ws: Workspace) -> None:
    """Three panes before a wall: with ``max_surfaces: 4`` the wall is seen through all
    three (at T^6 of its light); with 3 it is not, and the third pane is the last."""
    scanner = single_channel_scanner(return_mode="multi", max_returns=8)
    objects = [_wall(f"pane{k}", 3.0 + 2.0 * k, GLASS, size_m=4.0) for k in range(3)]
    objects.append(_wall("back", 12.0, BACK, size_m=40.0))
    counts = {}
    for bound in (4, 3):
        cloud = _sim(ws, objects, scanner, max_surfaces=bound).run()
        straight = cloud["pulse_id"] == 0
        counts[bound] = list(cloud["label"][straight])
        if bound == 4:
            wall = cloud["intensity"][straight][-1]
            assert wall == pytest.approx(50.0 * 0.8**6, rel=1e-6)
    glass, wall_label = label_id("building"), label_id("vegetation")
    assert counts[4] == [glass, glass, glass, wall_label]
    assert counts[3] == [glass, glass, glass]


@pytest.mark.parametrize("laws", [False, True], ids=["constant", "by_incidence"])
def test_see_through_scans_are_identical_for_any_chunk_size_backend_and_sampling(
    ws: Workspace, laws: bool
) -> None:
    """A pane, a wall and a crown (transmittance 0.5) with 7 sub-rays: bit for bit
    across chunk sizes and the numpy specification; adaptive sampling casts every
    footprint that meets a see-through surface in full, so there it equals full. Also
    with the laws by incidence (a ``fresnel`` pane, a porous ``path_length`` crown)."""
    leaves = {**PLAIN, "reflectance": 0.4, "transmittance": 0.5, "label": "vegetation"}
    glass = GLASS
    if laws:
        leaves = {**leaves, "porous": True, "transmittance_law": "path_length"}
        glass = {**GLASS, "transmittance_law": "fresnel"}
    objects = [
        _wall("pane", 4.0, glass, size_m=3.0),
        {"name": "crown", "sphere": {"radius_m": 1.5}, "position_m": [-6.0, 2.0, 0.0],
         "material": leaves},
        _wall("back", 12.0, {**BACK, "label": "building"}, size_m=60.0),
    ]  # fmt: skip
    scanner = single_channel_scanner(
        beam_samples=7, return_mode="dual", divergence_mrad={"horizontal": 4, "vertical": 4},
        channels={"elevation_deg": [-2.0, 0.0, 2.0]},
    )  # fmt: skip
    keys = {"output": {"path": "out/scan.npz", "frame": "sensor", "diagnostics": True}}
    ref = _sim(ws, objects, scanner, **keys).run()
    small = _sim(ws, objects, scanner, chunk_pulses=3001, **keys).run()
    spec_sim = _sim(ws, objects, scanner, **keys)
    spec_sim.backend = NumpyBackend()
    spec = spec_sim.run()
    for other in (small, spec):
        for name in ref.fields:
            if other is spec and name == "range_true_m":
                # An energy-weighted mean of the sub-rays' ranges: the weights carry the
                # last bits in which numba's and numpy's pow and cos differ, by CPU (up to
                # 5 ULP of 10 m, 1e-14 m, seen on this farm's Xeons).
                np.testing.assert_array_max_ulp(other[name], ref[name], maxulp=16)
                continue
            np.testing.assert_array_equal(other[name], ref[name], err_msg=name)
    adaptive_sim = _sim(ws, objects, {**scanner, "beam_sampling": "adaptive"}, **keys)
    adaptive, in_full = count_cast_in_full(adaptive_sim)
    sim = _sim(ws, objects, scanner, **keys)
    beams = sim.cast(sim.aim(0, sim.total_pulses, footprints=False))
    passed = sim.see_through.transmittance_of_object[beams.hits.object_index] > 0
    # Adaptive sampling casts in full exactly the footprints the specification judges
    # (every one whose beam meets a see-through surface among them), and not all.
    judged = judged_in_full(adaptive_sim)
    assert judged[passed].all()
    assert in_full == int(judged.sum()) < sim.total_pulses
    assert int(passed.sum()) > 100
    for name in ("xyz", "range_m", "intensity", "label", "num_returns"):
        a = adaptive[name][passed[adaptive["pulse_id"]]]
        b = ref[name][passed[ref["pulse_id"]]]
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert np.sum(ref["num_returns"][passed[ref["pulse_id"]]] == 2) > 100


def test_transmittance_is_checked(ws: Workspace) -> None:
    import simulator

    path = ws.survey([_wall("pane", 5.0, {**GLASS, "transmittance": 1.5})],
                     single_channel_scanner())  # fmt: skip
    with pytest.raises(simulator.errors.ConfigError) as caught:
        Simulation.from_file(path)
    # The inline material's own key and the bound, not the union's other branch (a
    # library name: "material.str: Input should be a valid string").
    message = str(caught.value)
    assert re.search(r"objects\[\d+\]\.material\.transmittance: .*less than or equal to 1", message)
    assert ".str" not in message and "Material" not in message, message


def _fresnel_faces(theta_rad: np.ndarray, n: float = 1.5) -> tuple[np.ndarray, np.ndarray, float]:
    """One face's Fresnel reflectances ``R_s``, ``R_p`` from the amplitudes in Stokes's
    sine and tangent forms, and ``R`` at normal incidence; ``theta`` above 0."""
    theta_t = np.arcsin(np.sin(theta_rad) / n)
    r_s = (np.sin(theta_rad - theta_t) / np.sin(theta_rad + theta_t)) ** 2
    r_p = (np.tan(theta_rad - theta_t) / np.tan(theta_rad + theta_t)) ** 2
    return r_s, r_p, ((n - 1) / (n + 1)) ** 2


def _fresnel_pane(theta_rad: np.ndarray, n: float = 1.5) -> np.ndarray:
    """An uncoated pane's transmittance over its value at normal incidence (two faces,
    unpolarised light, the reflections between the faces summed incoherently: ``(1 - R)
    / (1 + R)`` a polarisation); ``theta`` above 0."""
    r_s, r_p, r_0 = _fresnel_faces(theta_rad, n)
    pane = 0.5 * ((1 - r_s) / (1 + r_s) + (1 - r_p) / (1 + r_p))
    return pane / ((1 - r_0) / (1 + r_0))


def _fresnel_pane_reflectance(theta_rad: np.ndarray, n: float = 1.5) -> np.ndarray:
    """What the same pane reflects over what it reflects at normal incidence: the mean of
    ``R + (1 - R)^2 R / (1 - R^2)`` (the first face, then every path that leaves by it
    after bouncing between the faces) of the two polarisations; ``theta`` above 0."""
    r_s, r_p, r_0 = _fresnel_faces(theta_rad, n)

    def pane(r: np.ndarray | float) -> np.ndarray | float:
        return r + (1 - r) ** 2 * r / (1 - r * r)

    return 0.5 * (pane(r_s) + pane(r_p)) / pane(r_0)


def test_a_fresnel_pane_passes_less_light_at_oblique_incidence(ws: Workspace) -> None:
    """A glass pane (T 0.8 and reflectance 0.05 at normal incidence, ``transmittance_law:
    fresnel``) 5 m away before a wall at 10 m, both facing the sensor, scanned from 0 to
    75 degrees: the wall behind it receives the constant pane's intensity times ``(T(theta)
    / T(0))^2`` of the Fresnel equations (n 1.5), to float32 rounding; the pane's own echo
    is the constant pane's times what the pane reflects, ``R(theta) / R(0)`` (1 to 5 from
    0 to 75 degrees), and what it reflects and passes never exceeds the light."""
    scanner = single_channel_scanner(return_mode="multi", max_returns=3)
    back = _wall("back", 10.0, BACK)
    clouds = []
    for law in ("constant", "fresnel"):
        pane = _wall("pane", 5.0, {**GLASS, "transmittance_law": law}, size_m=40.0)
        clouds.append(_sim(ws, [pane, back], scanner).run())
    constant, fresnel = clouds
    for name in ("pulse_id", "range_m", "label", "return_number"):
        np.testing.assert_array_equal(fresnel[name], constant[name], err_msg=name)
    wall = fresnel["label"] == label_id("vegetation")
    x, y = fresnel["xyz"][wall, 0].astype(np.float64), fresnel["xyz"][wall, 1]
    theta = np.arctan2(np.abs(y), x)
    through = (theta > 1e-3) & (theta < np.arctan(4.0))  # through the pane, off normal
    assert np.degrees(theta[through].max()) > 70 and through.sum() > 1000
    ratio = fresnel["intensity"][wall][through] / constant["intensity"][wall][through]
    want = _fresnel_pane(theta[through]) ** 2
    np.testing.assert_allclose(ratio, want, rtol=2e-6)
    assert want.min() < 0.6  # the law has power: 0.56 at 75 degrees
    glass = ~wall
    xg, yg = fresnel["xyz"][glass, 0].astype(np.float64), fresnel["xyz"][glass, 1]
    theta_g = np.arctan2(np.abs(yg), xg)
    off = theta_g > 1e-3
    assert np.degrees(theta_g.max()) > 75 and off.sum() > 1000
    echo = fresnel["intensity"][glass][off] / constant["intensity"][glass][off]
    reflects = _fresnel_pane_reflectance(theta_g[off])
    np.testing.assert_allclose(echo, reflects, rtol=2e-6)
    assert reflects.max() > 4.5  # the law has power: 5.0 at 76 degrees
    np.testing.assert_allclose(fresnel["intensity"][glass][~off], 5.0, rtol=1e-6)
    # What the pane reflects (0.05 R/R(0)) and passes (0.8 T/T(0)) stays within the light.
    assert np.all(0.05 * reflects + 0.8 * _fresnel_pane(theta_g[off]) <= 1.0)


def test_fresnel_is_a_pane_law(ws: Workspace) -> None:
    """``transmittance_law: fresnel`` on a porous layer is a config error (the material
    model says why; an object's inline material reports its string branch first)."""
    import pydantic

    import simulator
    from simulator.config.scene import Material

    leaf = {**GLASS, "porous": True, "transmittance_law": "fresnel"}
    with pytest.raises(pydantic.ValidationError, match="law of a glass pane; expected porous"):
        Material(**leaf)
    Material(**{**leaf, "porous": False})
    path = ws.survey([_wall("crown", 5.0, leaf)], single_channel_scanner())
    with pytest.raises(simulator.errors.ConfigError):
        Simulation.from_file(path)


def test_a_porous_layer_of_path_length_law_passes_its_gap_probability_on_a_slant(
    ws: Workspace,
) -> None:
    """A porous sheet (rho 0.5, T 0.5 along its normal, ``transmittance_law:
    path_length``) 5 m away before a wall at 10 m, both facing the sensor, scanned from 0
    to 76 degrees: the gap probability along the slanted path, recovered from the scan
    twice, is Beer-Lambert's ``T^(1 / cos theta)`` (Nilson 1971): from the wall (its
    intensity over the wall alone's) and from the sheet (1 minus its echo over the opaque
    sheet's), to float32 rounding; the two shares sum to the beam. With the ``constant``
    law both stay 0.5 at every angle."""
    scanner = single_channel_scanner(return_mode="multi", max_returns=3)
    leaf = {**PLAIN, "reflectance": 0.5, "minnaert_k": 0.0, "transmittance": 0.5,
            "label": "vegetation", "porous": True}  # fmt: skip
    back = _wall("back", 10.0, {**BACK, "label": "building"})
    opaque = {**leaf, "transmittance": 0.0, "porous": False}
    alone = _sim(ws, [back], scanner).run()
    front_alone = _sim(ws, [_wall("sheet", 5.0, opaque, size_m=40.0)], scanner).run()
    veg, wall = label_id("vegetation"), label_id("building")
    gaps = {}
    for law in ("constant", "path_length"):
        sheet = _wall("sheet", 5.0, {**leaf, "transmittance_law": law}, size_m=40.0)
        cloud = _sim(ws, [sheet, back], scanner).run()
        # The sheet's echo on every pulse that meets it, the wall's behind it where the
        # wall is still detected (beyond 70 degrees it is not, at T 0.5^3 of 34 m).
        front = cloud["label"] == veg
        np.testing.assert_array_equal(cloud["pulse_id"][front], front_alone["pulse_id"])
        behind = (cloud["label"] == wall) & np.isin(cloud["pulse_id"], front_alone["pulse_id"])
        pulses = cloud["pulse_id"][behind]
        xyz = cloud["xyz"].astype(np.float64)
        cos = xyz[:, 0] / np.linalg.norm(xyz, axis=1)  # the sheet's normal is x
        from_wall = cloud["intensity"][behind] / alone["intensity"][np.searchsorted(
            alone["pulse_id"], pulses)]  # fmt: skip
        from_sheet = 1.0 - cloud["intensity"][front] / front_alone["intensity"]
        gaps[law] = (cos[front], from_sheet, cos[behind], from_wall)
    cos_f, from_sheet, cos_b, from_wall = gaps["path_length"]
    assert np.degrees(np.arccos(cos_f.min())) > 75 and np.degrees(np.arccos(cos_b.min())) > 60
    assert len(cos_b) > 1000
    np.testing.assert_allclose(from_wall, 0.5 ** (1.0 / cos_b), rtol=1e-5)
    np.testing.assert_allclose(from_sheet, 0.5 ** (1.0 / cos_f), rtol=1e-5, atol=1e-7)
    assert from_wall.min() < 0.1 and from_sheet.min() < 0.07  # the law has power
    _, const_sheet, _, const_wall = gaps["constant"]
    np.testing.assert_allclose(const_wall, 0.5, rtol=1e-6)
    np.testing.assert_allclose(const_sheet, 0.5, rtol=1e-6)


def test_the_transmittance_laws_belong_to_their_kind_of_surface() -> None:
    """``path_length`` is a porous layer's law, ``fresnel`` a pane's; a fresnel pane may
    not reflect more than the pane's Fresnel reflectance at normal incidence (it would
    return more than the light at grazing incidence) nor reflect and pass more than 1."""
    import pydantic

    from simulator.config.scene import GLASS_PANE_REFLECTANCE, Material

    assert pytest.approx(2 * 0.04 / 1.04, rel=1e-12) == GLASS_PANE_REFLECTANCE
    leaf = {**PLAIN, "transmittance": 0.5, "porous": True, "transmittance_law": "path_length"}
    Material(**leaf)
    with pytest.raises(pydantic.ValidationError, match="law of a porous layer; expected porous"):
        Material(**{**leaf, "porous": False})
    pane = {**GLASS, "transmittance_law": "fresnel"}
    Material(**{**pane, "reflectance": 0.0769, "transmittance": 0.9231})
    with pytest.raises(pydantic.ValidationError, match=r"expected reflectance at most 0\.0769"):
        Material(**{**pane, "reflectance": 0.08})
    with pytest.raises(pydantic.ValidationError, match=r"reflectance 0\.07 \+ transmittance 0\.95"):
        Material(**{**pane, "reflectance": 0.07, "transmittance": 0.95})


def test_fog_behind_a_porous_layer_is_seen_through_its_slanted_gaps(ws: Workspace) -> None:
    """Fog of 50 m MOR behind a porous sheet (T 0.8 along its normal, ``transmittance_law:
    path_length``) turned 60 degrees, 2.2 m ahead (overlap 2-10 m, 1 ns pulses, all
    returns): the fog behind it peaks where the soft-target equation puts it with the
    sources beyond the sheet weighted by ``T^(1 / cos theta)`` (once: the gap model), at
    5, 40 and 61 degrees (quadrature, 1 mm and 0.1 %); the constant law's ``T`` is 0.63
    of that at 61 degrees."""
    import simulator

    from .test_weather import LN20, _soft_law

    t = 0.8
    sheet = {**PLAIN, "reflectance": 0.02, "transmittance": t, "porous": True,
             "transmittance_law": "path_length", "label": "building"}  # fmt: skip
    objects = [{**_wall("sheet", 2.2, sheet, size_m=4.0), "rotation_deg": [0.0, 90.0, 60.0]},
               _wall("back", 40.0, BACK)]  # fmt: skip
    scanner = single_channel_scanner(
        return_mode="multi", max_returns=4, overlap_m=[2.0, 10.0], pulse_length_ns=1.0,
        intensity_scale=1e5, intensity_max=65535.0,
        detection={"reference_range_m": 300.0, "reference_reflectance": 0.1},
    )  # fmt: skip
    sim = _sim(ws, objects, scanner, revolutions=1, weather={"fog": {"visibility_m": 50.0}})
    cloud = sim.run()
    assert sim.medium is not None
    chunk = sim.cast_pulses(0, sim.total_pulses)
    first_r, first_o = chunk.hits.range_m.astype(np.float64), chunk.hits.object_index
    fog = cloud["object_id"] == sim.medium.first_object
    pid = cloud["pulse_id"]
    through = np.flatnonzero((first_o == 0) & (first_r < 2.3))
    cos = np.abs(np.sum(chunk.hits.normal * chunk.cast[:, 3:6], axis=1)).astype(np.float64)
    theta = np.arccos(np.clip(cos[through], 0.0, 1.0))
    assert theta.min() < np.radians(5) and theta.max() > np.radians(60)
    alpha = LN20 / 50.0
    length = float(simulator.physics.pulse_length_m(1.0))
    for a in (5, 40, 61):
        p = through[np.argmin(np.abs(theta - np.radians(a)))]
        at = np.flatnonzero(fog & (pid == p))
        assert len(at) == 1 and cloud["range_m"][at[0]] > first_r[p] + 0.5, p
        gap = t ** (1.0 / min(float(cos[p]), 1.0))
        want_r, want_s = _soft_law(0.046 / 50.0, alpha, length, (2.0, 10.0), first_r[p], gap)
        assert cloud["range_m"][at[0]] == pytest.approx(want_r, abs=1e-3), p
        energy = want_s * want_r**2 * np.exp(2 * alpha * want_r)
        assert cloud["intensity"][at[0]] == pytest.approx(1e5 * energy, rel=1e-3), p
