"""Weather (simulator.steps.weather) against the laws it follows, recovered from scans.

Every expected value here is computed from the physics directly (scipy quadrature of the
soft-target equation, the size distributions integrated numerically, the ray engine's
own hits for the geometry), not from the module under test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, interpolate, optimize, special

import simulator
import simulator.pipeline.layers
from simulator.backend import Backend, NumpyBackend
from simulator.beam import BeamOptics
from simulator.labels import label_id
from simulator.pipeline.layers import layers_of
from simulator.pipeline.simulation import Simulation
from simulator.steps.soft_targets import SoftTarget

from .conftest import (
    PLAIN,
    REPO,
    Workspace,
    count_cast_in_full,
    judged_in_full,
    single_channel_scanner,
)
from .test_surfaces import _fresnel_pane

FARM = REPO / "scenes" / "farm" / "survey.yaml"
LN20 = np.log(20.0)
#: The test scanner's threshold: a 0.1 target at 110 m.
THRESHOLD = 0.1 / 110.0**2
#: Something for the scene to hold that no ray of a level channel meets.
FAR_BOX = {"name": "box", "box": {"size_m": [1.0, 1.0, 1.0]}, "position_m": [0.0, 0.0, -500.0],
           "material": PLAIN}  # fmt: skip


def _wall(distance_m: float, material: dict | None = None, size_m: float = 4000.0) -> dict:
    """A vertical wall facing the sensor across x = distance_m, 4 km wide and tall."""
    return {"name": "wall", "plane": {"size_m": [size_m, size_m]},
            "position_m": [distance_m, 0.0, 0.0], "rotation_deg": [0.0, 90.0, 0.0],
            "material": material or PLAIN}  # fmt: skip


def _sim(ws: Workspace, objects: list[dict], scanner: dict, **keys) -> Simulation:
    return Simulation.from_file(ws.survey(objects, scanner, **keys))


# --------------------------------------------------------------------------- extinction


def test_extinction_of_each_condition_from_its_definition() -> None:
    """Fog and dust: Koschmieder's ln(20) / MOR. Rain and snow: twice the geometric
    cross-section of every particle, integrated over the size distribution numerically."""
    from simulator.steps.weather import weather_extinction_per_m as alpha

    def weather(**kw):
        return simulator.config.Weather.model_validate(kw)

    assert alpha(weather()) == 0.0
    assert alpha(weather(fog={"visibility_m": 50.0})) == pytest.approx(LN20 / 50.0, rel=1e-15)
    assert alpha(weather(dust={"visibility_m": 400.0})) == pytest.approx(LN20 / 400, rel=1e-15)

    def particles(n0: float, lam: float, diameter_mm, q: float = 2.0) -> float:
        value, _ = integrate.quad(
            lambda d: q * np.pi / 4.0 * (diameter_mm(d) * 1e-3) ** 2 * n0 * np.exp(-lam * d),
            0, np.inf,
        )  # fmt: skip
        return value

    rate = 25.0
    rain = particles(8000.0, 4.1 * rate**-0.21, lambda d: d)
    assert alpha(weather(rain={"rate_mm_h": rate})) == pytest.approx(rain, rel=1e-9)
    one = alpha(weather(rain={"rate_mm_h": rate, "extinction_efficiency": 1.0}))
    assert one == pytest.approx(rain / 2.0, rel=1e-12)
    # Snow: a flake of melted diameter D has the density 0.178 d^-0.922 g/cm^3 of Brandes
    # et al. 2007, so rho d^3 = D^3.
    flake = optimize.brentq(lambda d: 0.178 * d**-0.922 * d**3 - 1.0, 0.1, 100.0)
    assert flake == pytest.approx((1 / 0.178) ** (1 / 2.078), rel=1e-9)
    snow = particles(3800.0 * 2.0**-0.87, 2.55 * 2.0**-0.48,
                     lambda d: (d**3 / 0.178) ** (1 / 2.078))  # fmt: skip
    assert alpha(weather(snow={"rate_mm_h": 2.0})) == pytest.approx(snow, rel=1e-7)
    both = alpha(weather(fog={"visibility_m": 50.0}, rain={"rate_mm_h": rate}))
    assert both == pytest.approx(LN20 / 50.0 + rain, rel=1e-12)
    # Heavy rain of 25 mm/h: about 2.8 /km, a visibility of about 1 km.
    assert 2.5e-3 < rain < 3.1e-3


@pytest.mark.parametrize("visibility_m", [None, 400.0, 120.0])
def test_fog_detection_follows_the_threshold_law_on_every_pulse(
    ws: Workspace, visibility_m: float | None
) -> None:
    """A Lambertian wall 20 m away: a pulse is detected exactly when
    ``rho cos exp(-2 alpha R) / R^2 >= threshold``, with R and cos from the ray engine's
    hits and alpha = ln(20) / MOR; the farthest detection shrinks accordingly."""
    scanner = single_channel_scanner(pulse_length_ns=0.0)  # no soft return, peak factor 1
    weather = {} if visibility_m is None else {"fog": {"visibility_m": visibility_m}}
    sim = _sim(ws, [_wall(20.0)], scanner, weather=weather)
    cloud = sim.run()
    spec = _sim(ws, [_wall(20.0)], scanner, weather=weather)
    spec.backend = NumpyBackend()  # the specification obeys the same law
    np.testing.assert_array_equal(spec.run()["pulse_id"], cloud["pulse_id"])
    chunk = sim.cast_pulses(0, sim.total_pulses)
    hit = chunk.hits.hit
    r = chunk.hits.range_m.astype(np.float64)
    cos = np.abs(np.einsum("ij,ij->i", chunk.hits.normal.astype(np.float64),
                           chunk.cast[:, 3:].astype(np.float64)))  # fmt: skip
    alpha = 0.0 if visibility_m is None else LN20 / visibility_m
    with np.errstate(divide="ignore", invalid="ignore"):
        law = np.where(hit, 0.5 * cos * np.exp(-2 * alpha * r) / r**2, 0.0) / THRESHOLD
    detected = np.zeros(sim.total_pulses, dtype=bool)
    detected[cloud["pulse_id"]] = True
    clear_cut = np.abs(law - 1.0) > 1e-9
    np.testing.assert_array_equal(detected[clear_cut], law[clear_cut] >= 1.0)
    # The farthest detection is where the law crosses the threshold (within one step of
    # the 0.1-degree azimuth sampling, about 2 % of the range there).
    far = optimize.brentq(
        lambda rr: 0.5 * (20.0 / rr) * np.exp(-2 * alpha * rr) / rr**2 - THRESHOLD, 20.0, 1e4
    )
    assert cloud["range_m"].max() == pytest.approx(far, rel=0.03)
    assert cloud["range_m"].max() <= far
    assert int(detected.sum()) > 100


# --------------------------------------------------------------------------- soft target


def _geometric_overlap(r: float, scanner) -> float:
    """The share of the beam's disc (radius a) inside the field of view's disc (radius b,
    centre s away), by quadrature of the chords across the separation: the law of
    Rasshofer et al. 2011 for parallel axes, independent of the module's closed form."""
    if r < scanner.range_min_m:
        return 0.0
    div = scanner.divergence_mrad
    a = scanner.beam_exit_diameter_mm / 2 + r * np.sqrt(div.horizontal * div.vertical) / 2
    b = scanner.receiver_aperture_mm / 2 + r * scanner.receiver_fov_mrad / 2
    s = scanner.axis_separation_mm

    def chord(x: float) -> float:
        inside = b**2 - (x - s) ** 2
        return 2.0 * min(np.sqrt(max(a**2 - x**2, 0.0)), np.sqrt(inside)) if inside > 0 else 0.0

    value, _ = integrate.quad(chord, -a, a, points=[s - b, s + b], epsabs=0, epsrel=1e-11,
                              limit=200)  # fmt: skip
    return min(value / (np.pi * a**2), 1.0)


_SPLINES: dict[str, interpolate.CubicSpline] = {}


def _overlap_spline(scanner) -> interpolate.CubicSpline:
    """:func:`_geometric_overlap` on 401 points, a cubic spline in ``u = sqrt((r -
    start) / (full - start))`` (the onset, a power 3/2 of ``r - start``, is smooth in
    it): within 1e-7 of the quadrature between the points, checked. Made once a scanner."""
    key = scanner.model_dump_json()
    if key in _SPLINES:
        return _SPLINES[key]
    start, full = scanner.overlap_range_m

    def at(u: np.ndarray) -> np.ndarray:
        return np.array([_geometric_overlap(start + (full - start) * x**2, scanner) for x in u])

    u = np.linspace(0.0, 1.0, 401)
    spline = interpolate.CubicSpline(u, at(u))
    mid = 0.5 * (u[1:] + u[:-1])[::20]
    np.testing.assert_allclose(spline(mid), at(mid), atol=1e-7)
    _SPLINES[key] = spline
    return spline


def _soft_law(beta: float, alpha: float, length_m: float, overlap,
              cut_m: float = np.inf, seen_behind: float = 0.0) -> tuple[float, float]:  # fmt: skip
    """The soft-target equation by quadrature: the peak (range, received) of
    ``integral(pi beta zeta(r) exp(-2 alpha r) / r^2 h(R - r) dr)`` for r < cut, plus
    ``seen_behind`` times the same integral beyond the cut (the medium seen through a
    see-through surface there). ``overlap``: ``(start, full)`` of a linear ramp, or a
    scanner (its geometric overlap)."""
    if isinstance(overlap, tuple):
        start, full = overlap

        def zeta(r: float) -> float:
            return float(np.clip((r - start) / (full - start), 0.0, 1.0))
    else:
        start, full = overlap.overlap_range_m
        # The geometric overlap by quadrature on a fine grid, interpolated by a cubic
        # spline in u = sqrt((r - start) / (full - start)), in which the onset (a power
        # 3/2 of r - start) is smooth: within 1e-7 of the quadrature, checked below.
        spline = _overlap_spline(overlap)

        def zeta(r: float) -> float:
            if r < start or r >= full:
                return 0.0 if r < start else 1.0
            return float(spline(np.sqrt((r - start) / (full - start))))

    def wave(big_r: float) -> float:
        def f(r: float) -> float:
            h = np.exp(-4 * np.log(2) * ((big_r - r) / length_m) ** 2)
            return np.pi * beta * zeta(r) * np.exp(-2 * alpha * r) / r**2 * h

        def part(lo: float, hi: float) -> float:
            if hi <= lo:
                return 0.0
            return integrate.quad(f, lo, hi, points=[full] if lo < full < hi else None,
                                  epsabs=0, epsrel=1e-10, limit=200)[0]  # fmt: skip

        end = big_r + 6 * length_m
        front = part(start, min(cut_m, end))
        return front + (seen_behind * part(cut_m, end) if seen_behind else 0.0)

    best = optimize.minimize_scalar(
        lambda x: -wave(x), bounds=(start, full + 4 * length_m), method="bounded",
        options={"xatol": 1e-6},
    )  # fmt: skip
    return float(best.x), float(-best.fun)


def test_fog_returns_at_the_peak_of_the_soft_target_equation(ws: Workspace) -> None:
    """Fog of 50 m MOR around a sensor that sees nothing else: every pulse returns at the
    range where the soft-target equation peaks, with the intensity a hard target there
    would need for that peak; labelled outlier, instance 0."""
    scanner = single_channel_scanner(intensity_scale=1e5, intensity_max=65535.0,
                                     overlap_m=[0.1, 1.1])  # fmt: skip
    sim = _sim(ws, [FAR_BOX], scanner, weather={"fog": {"visibility_m": 50.0}})
    cloud = sim.run()
    alpha = LN20 / 50.0
    length = simulator.physics.pulse_length_m(5.0)
    peak_r, peak_s = _soft_law(0.046 / 50.0, alpha, float(length), (0.1, 1.1))
    assert len(cloud) == sim.total_pulses
    np.testing.assert_allclose(cloud["range_m"], peak_r, atol=1e-3)
    energy = peak_s * peak_r**2 * np.exp(2 * alpha * peak_r)
    np.testing.assert_allclose(cloud["intensity"], 1e5 * energy, rtol=1e-3)
    assert set(np.unique(cloud["label"])) == {label_id("outlier")}
    assert not cloud["instance"].any()
    assert np.all(cloud["object_id"] == 1)  # one past the scene's single object: fog


def test_the_soft_target_table_equals_the_equation_for_cut_beams() -> None:
    """The tabulated waveform of a beam stopped by a surface at 0.5, 0.9, 1.6 m or never,
    against quadrature (peak range within 1 mm, peak within 0.1 %)."""
    scanner = simulator.config.load_scanner("rs-helios-5515")
    alpha = LN20 / 30.0
    model = simulator.steps.hits.ReturnModel.from_scanner(scanner, alpha)
    beta = 0.046 / 30.0
    soft = SoftTarget.of("fog", beta, BeamOptics.of(scanner), model, 0, np.uint64(1))
    cuts = np.array([[1.2], [1.8], [2.6], [np.inf]])  # the overlap: 0.87-4.4 m
    got_r, got_s = soft.echoes(cuts, np.ones(1))
    for cut, r, s in zip(cuts[:, 0], got_r, got_s, strict=True):
        want_r, want_s = _soft_law(beta, alpha, model.pulse_length_m, scanner, cut)
        assert r == pytest.approx(want_r, abs=1e-3), cut
        assert s == pytest.approx(want_s, rel=1e-3), cut


def test_fog_is_detected_exactly_when_its_peak_reaches_the_threshold(ws: Workspace) -> None:
    """The threshold set 1 % above and below the equation's peak: all pulses or none."""
    length = float(simulator.physics.pulse_length_m(5.0))
    _, peak_s = _soft_law(0.046 / 300.0, LN20 / 300.0, length, (0.1, 1.1))
    counts = []
    for factor in (0.99, 1.01):
        ref_range = float(np.sqrt(0.1 / (peak_s * factor)))
        scanner = single_channel_scanner(
            detection={"reference_range_m": ref_range, "reference_reflectance": 0.1},
            overlap_m=[0.1, 1.1],
        )
        counts.append(len(_sim(ws, [FAR_BOX], scanner,
                               weather={"fog": {"visibility_m": 300.0}}).run()))  # fmt: skip
    assert counts == [3600, 0]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("strongest", ["wall"]), ("first", ["fog"]), ("last", ["wall"]),
     ("dual", ["fog", "wall"]), ("multi", ["fog", "wall"])],
)  # fmt: skip
def test_fog_and_a_wall_by_return_mode(ws: Workspace, mode: str, expected: list[str]) -> None:
    """A bright wall 8 m away in 50 m fog: the wall's echo is the stronger, the fog's the
    first; each return mode picks as the sensor would."""
    bright = {**PLAIN, "reflectance": 0.9, "label": "building"}
    scanner = single_channel_scanner(return_mode=mode)
    cloud = _sim(ws, [_wall(8.0, bright)], scanner, weather={"fog": {"visibility_m": 50.0}}).run()
    straight = cloud["pulse_id"] % 3600 == 0  # the pulse along +x, at normal incidence
    names = {label_id("outlier"): "fog", label_id("building"): "wall"}
    got = [names[int(v)] for v in cloud["label"][straight]]
    assert got == expected
    assert list(cloud["return_number"][straight]) == list(range(1, len(expected) + 1))


@pytest.mark.parametrize("law", ["pane", "porous", "fresnel"])
def test_fog_is_seen_through_a_window_and_a_fence(ws: Workspace, law: str) -> None:
    """Fog of 50 m MOR with a see-through sheet (T 0.8) 2.2 m ahead and a wall 40 m away,
    an opaque sheet 2.2 m behind (overlap 2-10 m, 1 ns pulses, all returns): on every
    pulse through the see-through sheet within 2.3 m the fog returns behind it, at the
    peak of the soft-target equation whose sources beyond the sheet are weighted by its
    two-way factor (``T^2`` a pane, ``T`` a porous layer, ``(T F(theta))^2`` a pane of
    Fresnel's law, turned 60 degrees; quadrature, 1 mm and 0.1 %); no fog point lies
    behind the opaque sheet."""
    t = 0.8
    porous = law == "porous"
    sheet = {**PLAIN, "reflectance": 0.02, "transmittance": t, "porous": porous,
             "transmittance_law": "fresnel" if law == "fresnel" else "constant",
             "label": "building"}  # fmt: skip
    turned = {"rotation_deg": [0.0, 90.0, 60.0]} if law == "fresnel" else {}
    objects = [{**_wall(2.2, sheet, size_m=4.0), "name": "sheet", **turned},
               {**_wall(-2.2, {**PLAIN, "reflectance": 0.02}, size_m=4.0), "name": "opaque"},
               _wall(40.0, {**PLAIN, "label": "vegetation"})]  # fmt: skip
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
    # Within 2.3 m of the sensor the sheet leaves less fog in front of it than the fog
    # behind it returns (farther, the waveform peaks at the sheet and merges with it).
    through = np.flatnonzero((first_o == 0) & (first_r < 2.3))
    assert len(through) > 300 and np.sum(first_o == 1) > 300
    # One fog point on every such pulse, behind the sheet; none behind the opaque sheet
    # (its fog, cut there, peaks at it: in front where the sheet is far enough to part
    # the two echoes, else merged with its echo).
    got = pid[fog & (first_o[pid] == 0) & (first_r[pid] < 2.3)]
    np.testing.assert_array_equal(np.sort(got), through)
    on_sheet = fog & (first_o[pid] == 0) & (first_r[pid] < 2.3)
    assert np.all(cloud["range_m"][on_sheet] > first_r[pid[on_sheet]] + 0.5)
    on_opaque = fog & (first_o[pid] == 1)
    assert np.all(cloud["range_m"][on_opaque] < first_r[pid[on_opaque]])
    alpha = LN20 / 50.0
    length = float(simulator.physics.pulse_length_m(1.0))
    cos = np.abs(np.sum(chunk.hits.normal * chunk.cast[:, 3:6], axis=1))
    theta = np.arccos(np.clip(cos[through], 0.0, 1.0))
    picks = through[[0, len(through) // 2, -1]]
    if law == "fresnel":  # 0 to 61 degrees: T(theta) / T(0) from 1 to 0.90
        assert theta.min() < np.radians(5) and theta.max() > np.radians(60)
        picks = through[[np.argmin(np.abs(theta - np.radians(a))) for a in (5, 40, 61)]]
    for p in picks:
        at = np.flatnonzero(fog & (pid == p))
        assert len(at) == 1, p
        one_way = t
        if law == "fresnel":
            one_way = t * float(_fresnel_pane(np.arccos(min(float(cos[p]), 1.0))))
        want_r, want_s = _soft_law(0.046 / 50.0, alpha, length, (2.0, 10.0), first_r[p],
                                   one_way if porous else one_way**2)  # fmt: skip
        assert cloud["range_m"][at[0]] == pytest.approx(want_r, abs=1e-3), p
        energy = want_s * want_r**2 * np.exp(2 * alpha * want_r)
        assert cloud["intensity"][at[0]] == pytest.approx(1e5 * energy, rel=1e-3), p


def test_fog_behind_a_window_is_identical_for_any_chunk_size(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fog and a pane turned 60 degrees, a wall behind part of it and the sky behind the
    rest, seven sub-rays: bit for bit across chunk sizes (a chunk whose pulses meet
    nothing behind the pane has no layer behind), the weather's blocks and the numpy
    specification."""
    glass = {**PLAIN, "reflectance": 0.02, "transmittance": 0.8, "label": "building"}
    objects = [{**_wall(1.5, glass, size_m=4.0), "name": "pane",
                "rotation_deg": [0.0, 90.0, 60.0]}, _wall(6.0, PLAIN)]  # fmt: skip
    scanner = single_channel_scanner(
        return_mode="multi", max_returns=4, beam_samples=7, range_min_m=0.3,
        divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
    )  # fmt: skip
    path = ws.survey(objects, scanner, revolutions=1, weather={"fog": {"visibility_m": 40.0}})
    ref = Simulation.from_file(path).run()
    sim = Simulation.from_file(path, ["chunk_pulses=200"])
    chunk = sim.cast_pulses(2500, 2700)  # through the pane to the sky: no layer behind
    assert np.any(chunk.hits.object_index == 0) and not chunk.behind
    fog = ref["object_id"] == 2
    assert np.sum(fog & (ref["range_m"] > 1.6)) > 500  # fog behind the pane
    # The fog's echoes in float64, of those pulses cast alone and in the whole scan.
    from simulator.steps.weather import medium_entries

    def fog_echoes(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        cast = sim.cast_pulses(start, stop)
        results = sim.evaluate(cast)
        behind = layers_of(sim, cast, results)
        echoes = medium_entries(cast.hits, cast.pulse_ids, sim.beam, sim.model, sim.medium,
                                None, behind, results)[2][0][0]  # fmt: skip
        return echoes.range_true_m, echoes.energy

    alone, whole = fog_echoes(2500, 2700), fog_echoes(0, sim.total_pulses)
    for a, b in zip(alone, whole, strict=True):
        np.testing.assert_array_equal(a, b[2500:2700])
    others = [sim.run(), Simulation.from_file(path, ["chunk_pulses=997"]).run()]
    spec = Simulation.from_file(path)
    spec.backend = NumpyBackend()
    others.append(spec.run())
    monkeypatch.setattr(simulator.pipeline.layers, "SOFT_BLOCK_PULSES", 401)  # (fog: no particles)
    others.append(Simulation.from_file(path).run())
    for other in others:
        for name in ("pulse_id", "range_m", "intensity", "label", "return_number"):
            np.testing.assert_array_equal(other[name], ref[name], err_msg=name)


# --------------------------------------------------------------------------- particles


def _fall(rate_mm_h: float, kind: str) -> tuple[float, float, float, object]:
    """``(N0, Lambda, rho, diameter(D) mm)`` of rain (Marshall-Palmer, the drop's Mie
    backscatter 0.05 5-20 mrad off the backward direction) or snow (Gunn-Marshall, Brandes
    et al. 2007 flakes: rho d^3 = D^3 with rho = 0.178 d^-0.922, albedo 0.9: 0.6)."""
    if kind == "rain":
        return 8000.0, 4.1 * rate_mm_h**-0.21, 0.05, lambda d: d
    return (3800.0 * rate_mm_h**-0.87, 2.55 * rate_mm_h**-0.48, 0.6,
            lambda d: (d**3 / 0.178) ** (1 / 2.078))  # fmt: skip


def _drawn_law(rate_mm_h: float, kind: str, scanner: dict, q: float = 2.0) -> dict:
    """The particles drawn (those a pulse detects alone) and the extinction they leave to
    the continuum, from the size distribution by quadrature on a range grid: returns the
    grid ``r``, the smallest drawn size ``size_mm``, the drawn particles per metre of
    beam, the drawn share of the extinction ``alpha_drawn`` and the two-way
    transmission ``exp(-2 integral(alpha - alpha_drawn))``. The drawn set depends on the
    transmission and the transmission on it: solved by iterating to a fixed point."""
    n0, lam, rho, diameter = _fall(rate_mm_h, kind)

    # What particles of size D > lo remove, 1/m: Q pi/4 k^2 N0 Gamma(2p + 1, Lambda lo) /
    # Lambda^(2p + 1) for a diameter k D^p (the upper incomplete gamma function).
    k, p = (1.0, 1.0) if kind == "rain" else ((1 / 0.178) ** (1 / 2.078), 3 / 2.078)

    def ext(lo):
        lo = np.asarray(lo, dtype=np.float64)
        tail = special.gammaincc(2 * p + 1, lam * np.where(np.isfinite(lo), lo, 0.0))
        value = q * np.pi / 4 * k**2 * n0 * special.gamma(2 * p + 1) / lam ** (2 * p + 1) * tail
        return np.where(np.isfinite(lo), value * 1e-6, 0.0)

    assert float(ext(0.0)) == pytest.approx(integrate.quad(
        lambda d: q * np.pi / 4 * (diameter(d) * 1e-3) ** 2 * n0 * np.exp(-lam * d), 0, np.inf
    )[0], rel=1e-9)  # fmt: skip
    alpha = float(ext(0.0))
    if isinstance(scanner, str):
        config = simulator.config.load_scanner(scanner)
    else:
        config = simulator.config.ScannerConfig.model_validate(scanner)
    assert config.atmospheric_extinction_per_m == 0.0
    det = config.detection
    th = det.reference_reflectance / det.reference_range_m**2
    d0 = config.beam_exit_diameter_mm * 1e-3
    bh = config.divergence_mrad.horizontal * 1e-3
    bv = config.divergence_mrad.vertical * 1e-3
    start, full = config.overlap_range_m
    r = np.concatenate(
        [np.linspace(start, 3 * full, 300), np.geomspace(3 * full, config.range_max_m, 300)[1:]]
    )
    area = np.pi / 4 * (d0 + r * bh) * (d0 + r * bv)
    u = np.sqrt(np.clip((r - start) / (full - start), 0.0, 1.0))
    zeta = np.where(r < start, 0.0, np.where(r >= full, 1.0, _overlap_spline(config)(u)))
    transmission = np.exp(-2 * alpha * r)
    for _ in range(4):
        size = np.full(len(r), np.inf)
        for i in np.flatnonzero(zeta > 0):
            # rho (pi d^2/4) / area * zeta * transmission / r^2 >= th
            d_m = np.sqrt(4 * th * r[i] ** 2 * area[i] / (np.pi * rho * zeta[i] * transmission[i]))
            size[i] = optimize.brentq(lambda x, d=d_m: diameter(x) - d * 1e3, 0.0, 1e4)
        drawn = ext(size)
        depth = integrate.cumulative_trapezoid(drawn, r, initial=0.0)
        transmission = np.exp(-2 * alpha * r + 2 * depth)
    per_metre = np.where(
        np.isfinite(size), area * n0 / lam * np.exp(-lam * np.minimum(size, 1e3)), 0.0
    )
    return {"r": r, "size_mm": size, "per_metre": per_metre, "alpha": alpha,
            "alpha_drawn": drawn, "depth": depth, "transmission": transmission}  # fmt: skip


def _expected_particle_pulses(
    rate_mm_h: float, kind: str, scanner: dict, pulses: int
) -> tuple[float, float]:
    """Mean and standard deviation of the number of pulses with a detected particle in
    the sky, from the size distribution integrated over the beam (:func:`_drawn_law`)."""
    law = _drawn_law(rate_mm_h, kind, scanner)
    mu = integrate.trapezoid(law["per_metre"], law["r"])
    p = 1.0 - np.exp(-mu)
    return pulses * p, np.sqrt(pulses * p * (1 - p))


@pytest.mark.parametrize(("kind", "rate"), [("rain", 25.0), ("rain", 10.0), ("snow", 1.0)])
def test_particle_returns_per_revolution_match_the_size_distribution(
    ws: Workspace, kind: str, rate: float
) -> None:
    """Rain or snow in an empty sky: the pulses that see a particle are as many as the size
    distribution and the beam's volume predict, within 4 Poisson sigmas."""
    scanner = single_channel_scanner(
        divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
        detection={"reference_range_m": 40.0, "reference_reflectance": 0.1},
        range_min_m=0.5, range_max_m=200.0,
    )  # fmt: skip
    sim = _sim(ws, [FAR_BOX], scanner, revolutions=10, weather={kind: {"rate_mm_h": rate}})
    cloud = sim.run()
    mean, sigma = _expected_particle_pulses(rate, kind, scanner, sim.total_pulses)
    label = label_id("falling-snow" if kind == "snow" else "outlier")
    assert np.all(cloud["label"] == label)
    assert len(np.unique(cloud["pulse_id"])) == len(cloud)  # strongest: one a pulse
    assert abs(len(cloud) - mean) < 4 * sigma + 1, (len(cloud), mean, sigma)
    assert mean > 300  # the test has power
    assert cloud["range_m"].min() >= 0.5


def test_a_wall_behind_rain_receives_the_extinction_of_the_particles_not_drawn(
    ws: Workspace,
) -> None:
    """Particles are counted once. A dark wall 30 m away in a 50 mm/h downpour, seen in
    last-return mode (the wall is the last echo when it is detected): on every pulse the
    wall is detected exactly when ``rho cos / R^2 exp(-2 integral(alpha - alpha_drawn))
    prod (1 - Q s)^2 >= threshold``, where alpha is every drop's extinction and
    alpha_drawn that of the drops large enough to be drawn (detectable alone), both by
    quadrature of Marshall-Palmer (:func:`_drawn_law`), and the product runs over the
    drawn drops in front of the wall (shares ``s`` of the beam, two passes). The wall's
    reflectance puts its normal-incidence law midway between counting the drawn drops
    once and twice, so the double count loses the centre of the wall (over 60 pulses in
    two revolutions); and on average the drawn shadows are what the relief gives back: the
    mean of the product over 200,000 pulses is ``exp(-2 integral(alpha_drawn))``, so the
    wall receives Beer-Lambert's ``exp(-2 alpha R)`` on average."""
    scanner = single_channel_scanner(
        return_mode="last", pulse_length_ns=0.0, range_min_m=0.5, range_max_m=200.0,
        divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
    )  # fmt: skip
    rate, distance = 50.0, 30.0
    law = _drawn_law(rate, "rain", scanner)
    alpha = law["alpha"]
    depth = float(np.interp(distance, law["r"], law["depth"]))
    assert 0.01 < depth < 0.03  # the drawn drops' share: a few percent of the two passes
    rho = THRESHOLD * distance**2 * np.exp(2 * alpha * distance - depth)
    wall = _wall(distance, {**PLAIN, "reflectance": float(rho), "label": "building"})
    sim = _sim(ws, [wall], scanner, revolutions=2, weather={"rain": {"rate_mm_h": rate}})
    cloud = sim.run()
    chunk = sim.cast_pulses(0, sim.total_pulses)
    r = chunk.hits.range_m.astype(np.float64)
    cos = np.abs(np.einsum("ij,ij->i", chunk.hits.normal.astype(np.float64),
                           chunk.cast[:, 3:].astype(np.float64)))  # fmt: skip
    # The drawn drops in front of the wall, each taking Q = 2 times its share, twice.
    assert sim.medium is not None
    drops = sim.medium.draw(np.arange(sim.total_pulses, dtype=np.uint64))[0]
    area = np.pi / 4 * (0.010 + drops.range_m * 3e-3) ** 2
    share = np.minimum(np.pi / 4 * drops.diameter_m**2 / area, 1.0)
    lit = drops.range_m < r[drops.pulse]
    shadow = np.ones(sim.total_pulses)
    np.multiply.at(shadow, drops.pulse[lit], (1.0 - np.minimum(2 * share[lit], 1.0)) ** 2)
    once = np.exp(-2 * alpha * r + 2 * np.interp(r, law["r"], law["depth"]))
    received = rho * cos / r**2 * once * shadow / THRESHOLD
    detected = np.zeros(sim.total_pulses, dtype=bool)
    detected[cloud["pulse_id"][cloud["label"] == label_id("building")]] = True
    clear_cut = np.abs(received - 1.0) > 1e-3
    assert np.sum(~clear_cut) < 10
    np.testing.assert_array_equal(detected[clear_cut], received[clear_cut] >= 1.0)
    # Counting the drawn drops twice would lose these pulses of the wall.
    twice = received * np.exp(-2 * np.interp(r, law["r"], law["depth"]))
    assert np.sum(detected & (twice < 1.0)) > 60, np.sum(detected & (twice < 1.0))
    # On average the drawn drops take what their share of the extinction says.
    ids = np.arange(200_000, dtype=np.uint64)
    drops = sim.medium.draw(ids)[0]
    near = drops.range_m < distance
    area = np.pi / 4 * (0.010 + drops.range_m[near] * 3e-3) ** 2
    share = np.minimum(np.pi / 4 * drops.diameter_m[near] ** 2 / area, 1.0)
    shadow = np.ones(len(ids))
    np.multiply.at(shadow, drops.pulse[near], (1.0 - np.minimum(2 * share, 1.0)) ** 2)
    lost, expected = 1.0 - shadow.mean(), 1.0 - np.exp(-2 * depth)
    assert lost == pytest.approx(expected, rel=0.05), (lost, expected)


def test_drizzle_rarely_and_a_snowstorm_often_gives_points_near_the_sensor(
    ws: Workspace,
) -> None:
    """Big flakes near the sensor are seen; fine drizzle mostly is not: on the Helios
    preset the pulses with a drop at 0.3 mm/h and with a flake at 3 mm/h are each as many
    as the size distribution and the beam predict (4 Poisson sigmas), drizzle's share
    under half the snow's and not zero."""
    shares = {}
    for kind, rate in (("rain", 0.3), ("snow", 3.0)):
        sim = _sim(ws, [FAR_BOX], "rs-helios-5515", weather={kind: {"rate_mm_h": rate}},
                   revolutions=0.2)  # fmt: skip
        cloud = sim.run()
        seen = len(np.unique(cloud["pulse_id"]))
        mean, sigma = _expected_particle_pulses(rate, kind, "rs-helios-5515", sim.total_pulses)
        assert abs(seen - mean) < 4 * sigma + 1, (kind, seen, mean, sigma)
        assert mean > 20, (kind, mean)  # the test has power
        shares[kind] = seen / sim.total_pulses
    assert 0.0 < shares["rain"] < 0.5 * shares["snow"], shares


def test_footprints_let_the_rest_of_the_beam_reach_the_wall(ws: Workspace) -> None:
    """Seven sub-rays, heavy snow, a wall 6 m away, up to three returns a pulse: pulses without a
    flake give exactly the clear-air points; pulses with one give the flake and still the
    wall, darker by the share the flake took."""
    wall = _wall(6.0, {**PLAIN, "label": "building"}, size_m=12.0)  # all of it well seen
    scanner = single_channel_scanner(
        beam_samples=7, return_mode="multi", max_returns=3,
        divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
    )  # fmt: skip
    clear = _sim(ws, [wall], scanner).run()
    sim = _sim(ws, [wall], scanner, weather={"snow": {"rate_mm_h": 0.5}})
    snowy = sim.run()
    assert sim.medium is not None
    ids = np.arange(sim.total_pulses, dtype=np.uint64)
    has_flake = np.zeros(sim.total_pulses, dtype=bool)
    has_flake[sim.medium.populations[0].draw(ids).pulse] = True
    flake = snowy["label"] == label_id("falling-snow")
    touched = np.unique(snowy["pulse_id"][flake])
    assert len(touched) > 50
    assert has_flake[touched].all()
    for name in ("xyz", "range_m", "intensity", "return_number", "num_returns", "label"):
        a = clear[name][~has_flake[clear["pulse_id"]]]
        b = snowy[name][~has_flake[snowy["pulse_id"]]]
        np.testing.assert_array_equal(a, b, err_msg=name)
    flakes = np.bincount(snowy["pulse_id"][flake], minlength=sim.total_pulses)
    # Pulses on the wall whose first three returns are not all flakes.
    on_wall = np.intersect1d(touched, clear["pulse_id"])
    on_wall = on_wall[flakes[on_wall] < 3]
    both = np.intersect1d(on_wall, snowy["pulse_id"][~flake])
    assert len(on_wall) > 100
    assert len(both) == len(on_wall)  # the rest of the beam still reaches the wall
    # Where no flake is close enough to the wall to merge with its echo, the wall's echo
    # only loses the light the flakes in front took.
    drawn = sim.medium.populations[0].draw(ids)
    wall_range = np.full(sim.total_pulses, np.inf)
    wall_range[clear["pulse_id"]] = clear["range_m"]
    merging = drawn.pulse[np.abs(drawn.range_m - wall_range[drawn.pulse]) < 1.0]
    shadowed = np.setdiff1d(both, merging)
    assert len(shadowed) > 50
    wall_after = snowy["intensity"][np.isin(snowy["pulse_id"], shadowed) & ~flake]
    before = clear["intensity"][np.searchsorted(clear["pulse_id"], shadowed)]
    assert np.all(wall_after <= before)
    assert np.sum(wall_after < before) > 0.5 * len(shadowed)
    # Adaptive sampling casts the whole footprint of every pulse with a particle, so
    # there it gives what full sampling gives.
    adaptive_sim = _sim(ws, [wall], {**scanner, "beam_sampling": "adaptive"},
                        weather={"snow": {"rate_mm_h": 0.5}})  # fmt: skip
    adaptive, in_full = count_cast_in_full(adaptive_sim)
    # It casts in full the footprints the specification judges and those with a flake,
    # exactly, and not all of them.
    expected = judged_in_full(adaptive_sim) | has_flake
    assert in_full == int(expected.sum()) < sim.total_pulses
    assert in_full >= int(has_flake.sum()) > 50
    for name in ("xyz", "range_m", "intensity", "return_number", "num_returns", "label"):
        a = adaptive[name][has_flake[adaptive["pulse_id"]]]
        b = snowy[name][has_flake[snowy["pulse_id"]]]
        np.testing.assert_array_equal(a, b, err_msg=name)


@pytest.mark.parametrize("porous", [False, True], ids=["pane", "porous"])
def test_snow_falls_behind_a_window_and_a_fence_too(ws: Workspace, porous: bool) -> None:
    """Snow before a see-through sheet (T 0.6) 2 m away and a wall 8 m away, all returns:
    flakes behind the sheet are lit and seen through it. Each flake point between the
    sheet and the wall is a drawn flake of its pulse, reported with the reflectivity of
    its share of the beam, ``0.6 share zeta(r)`` (Brandes flakes, albedo 0.9), times the
    sheet's two-way transmittance: ``T^2`` a pane, ``T`` a porous layer (the gap
    model); none lies behind the wall."""
    t = 0.6
    sheet = {**PLAIN, "reflectance": 0.05, "transmittance": t, "porous": porous,
             "label": "building"}  # fmt: skip
    objects = [{**_wall(2.0, sheet, size_m=40.0), "name": "sheet"},
               {**_wall(8.0, {**PLAIN, "label": "vegetation"}), "name": "back"}]  # fmt: skip
    scanner = single_channel_scanner(
        return_mode="multi", max_returns=8, range_min_m=0.3, intensity_scale=1e4,
        pulse_length_ns=0.0, intensity_max=65535.0,
        divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
    )  # fmt: skip
    sim = _sim(ws, objects, scanner, revolutions=1, weather={"snow": {"rate_mm_h": 2.0}})
    cloud = sim.run()
    chunk = sim.cast_pulses(0, sim.total_pulses)
    on_sheet = chunk.hits.object_index == 0
    sheet_r = np.where(on_sheet, chunk.hits.range_m, np.inf)
    wall_r = np.full(sim.total_pulses, np.inf)
    wall_r[chunk.behind[0].rays] = chunk.behind[0].hits.range_m
    flake = cloud["label"] == label_id("falling-snow")
    pid = cloud["pulse_id"]
    between = flake & (cloud["range_m"] > sheet_r[pid])
    assert int(between.sum()) > 100, int(between.sum())  # the test has power
    assert np.all(cloud["range_m"][flake] < wall_r[pid][flake])  # none behind the wall
    assert sim.medium is not None
    drops = sim.medium.draw(np.arange(sim.total_pulses, dtype=np.uint64))[0]
    config = sim.scanner
    area = np.pi / 4 * (config.beam_exit_diameter_mm * 1e-3 + drops.range_m * 3e-3) ** 2
    share = np.minimum(np.pi / 4 * drops.diameter_m**2 / area, 1.0)  # (a flake fills it)
    two_way = t if porous else t * t
    # Each point's flake: the drawn one of its pulse at its range (keys pulse * 1000 +
    # range, ranges under 1 km).
    key = drops.pulse * 1000.0 + drops.range_m
    order = np.argsort(key)
    point = cloud["pulse_id"][between].astype(np.float64) * 1000.0 + cloud["range_m"][between]
    at = np.clip(np.searchsorted(key[order], point), 1, len(key) - 1)
    near = np.where(np.abs(key[order][at - 1] - point) < np.abs(key[order][at] - point),
                    at - 1, at)  # fmt: skip
    j = order[near]
    np.testing.assert_allclose(key[j], point, atol=1e-5)  # one of its pulse's flakes
    start, full = config.overlap_range_m
    r_j = drops.range_m[j]
    u = np.sqrt(np.clip((r_j - start) / (full - start), 0.0, 1.0))
    zeta = np.where(r_j < start, 0.0, np.where(r_j >= full, 1.0, _overlap_spline(config)(u)))
    want = 1e4 * 0.6 * share[j] * zeta * two_way
    # float32 intensities, and the overlap's spline within 1e-7 of its quadrature
    np.testing.assert_allclose(cloud["intensity"][between], want, rtol=1e-6, atol=1e4 * 1e-7)


# --------------------------------------------------------------------------- invariants


@pytest.mark.parametrize(
    "conditions",
    [["weather.rain.rate_mm_h=10"], ["weather.snow.rate_mm_h=0.1"],
     ["weather.fog.visibility_m=150"], ["weather.dust.visibility_m=300"],
     ["weather.fog.visibility_m=150", "weather.rain.rate_mm_h=10",
      "weather.dust.visibility_m=300", "weather.snow.rate_mm_h=1"]],
    ids=["rain", "snow", "fog", "dust", "all"],
)  # fmt: skip
def test_weather_scans_are_identical_for_any_chunk_size_threads_and_backend(
    conditions: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each condition alone and all together on the farm: bit for bit across chunk sizes
    (six chunks and four), threads, the numpy specification and blocks of the weather's
    pulses. Rain and snow alone touch
    only some pulses (rain 10 mm/h 28 %, snow 0.1 mm/h 69 %), so the
    kernels' returns and the medium's are merged in every chunk."""
    sets = ["revolutions=0.1", "output.diagnostics=true", *conditions]
    sim = Simulation.from_file(FARM, sets)
    ref = sim.run()
    assert sim.medium is not None
    ids = np.arange(sim.total_pulses, dtype=np.uint64)
    touched = sim.medium.touched(ids, sim.model.threshold, sim.medium.draw(ids)).mean()
    falling = any("rain" in c or "snow" in c for c in conditions)
    soft = any("fog" in c or "dust" in c for c in conditions)
    assert (0.01 < touched < 0.9) if falling and not soft else touched == 1.0, touched
    chunk = 997
    assert sim.total_pulses > 4 * chunk
    small = Simulation.from_file(FARM, [*sets, f"chunk_pulses={chunk}"]).run()
    one = Simulation.from_file(FARM, [*sets, "chunk_pulses=1500"])
    one.limit_threads(1)
    single_thread = one.run()
    spec_sim = Simulation.from_file(FARM, [*sets, "chunk_pulses=1500"])
    spec_sim.backend = NumpyBackend()
    spec = spec_sim.run()
    # The weather's pulses in blocks of 401 (the pipeline's bound on their memory).
    monkeypatch.setattr(simulator.pipeline.layers, "MEDIUM_BLOCK_PULSES", 401)
    blocks = Simulation.from_file(FARM, sets).run()
    monkeypatch.undo()
    labels = set(np.unique(ref["label"]).tolist())
    medium = label_id("falling-snow") if conditions == ["weather.snow.rate_mm_h=0.1"] else 1
    assert medium in labels
    assert np.sum(ref["object_id"] >= sim.medium.first_object) > 20
    for other in (small, single_thread, spec, blocks):
        assert other.fields.keys() == ref.fields.keys()
        for name in ref.fields:
            if other is spec and name == "range_true_m":
                # Minnaert's power differs in the last bit between numba and numpy, and
                # an echo's energy-weighted range carries it (a diagnostic only).
                np.testing.assert_array_max_ulp(other[name], ref[name], maxulp=4)
                continue
            np.testing.assert_array_equal(other[name], ref[name], err_msg=name)


@pytest.mark.parametrize("fog", [True, False], ids=["fog", "no-fog"])
@pytest.mark.parametrize("mode", ["strongest", "last", "dual", "multi"])
def test_the_medium_kernel_equals_its_specification(
    ws: Workspace, mode: str, fog: bool, backend: Backend
) -> None:
    """``simulator.kernels.weather.medium_returns`` has the specification's name and
    signature and returns the same, every field value for value: seven sub-rays through
    a pane to a wall, in snow and rain, with fog or without (particles in front of both
    surfaces, drops and flakes merging with them, the fog's peak resolved against them,
    its waveform going on behind the pane; without a soft target the kernel also
    selects the returns)."""
    import dataclasses
    import inspect

    from simulator.steps import weather

    spec, kernel = weather.medium_returns, backend.medium_returns
    assert spec.__name__ == kernel.__name__
    assert inspect.signature(spec) == inspect.signature(kernel)
    glass = {**PLAIN, "reflectance": 0.1, "transmittance": 0.8, "label": "building"}
    pane = {**_wall(1.5, glass, size_m=2.0), "name": "pane"}
    objects = [pane, _wall(4.0, {**PLAIN, "label": "vegetation"}, size_m=40.0)]
    scanner = single_channel_scanner(
        beam_samples=7, return_mode=mode, range_min_m=0.3, range_noise_m=0.02,
        range_resolution_m=0.002, divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
        channels={"elevation_deg": [-1.0, 0.0, 1.0]},
        **({"max_returns": 4} if mode == "multi" else {}),
    )  # fmt: skip
    conditions = {"snow": {"rate_mm_h": 3.0}, "rain": {"rate_mm_h": 30.0},
                  **({"fog": {"visibility_m": 60.0}} if fog else {})}  # fmt: skip
    sim = _sim(ws, objects, scanner, revolutions=0.5, weather=conditions)
    chunk = sim.cast_pulses(0, sim.total_pulses)
    results = sim.evaluate(chunk)
    ids = chunk.pulse_ids
    assert sim.medium is not None
    particles = sim.medium.draw(ids)
    behind = layers_of(sim, chunk, results)
    assert behind and sum(len(p.pulse) for p in particles) > 1000
    args = (results, chunk.hits, ids, sim.beam, sim.model, sim.streams, sim.medium)
    if fog:  # the fog behind the pane moves its peak on many pulses (the test has power)
        entries = (chunk.hits, ids, sim.beam, sim.model, sim.medium, particles)
        through = weather.medium_entries(*entries, behind)[2][0][0].range_true_m
        cut = weather.medium_entries(*entries)[2][0][0].range_true_m
        assert np.sum(through != cut) > 0.1 * sim.total_pulses
    want = spec(*args, particles, behind)
    got = kernel(*args, particles, behind)
    several = mode in ("dual", "multi")
    assert len(want.pulse) > (1.0 if several else 0.9) * sim.total_pulses
    for f in dataclasses.fields(want):
        a, b = getattr(want, f.name), getattr(got, f.name)
        if a is None:
            assert b is None, f.name
            continue
        np.testing.assert_array_equal(b, a, err_msg=f.name)


def test_the_particle_draw_kernel_equals_its_specification(backend: Backend) -> None:
    """``simulator.kernels.particles.draw_particles`` has the specification's name and
    signature and draws the same particles, value for value: drops and flakes of the
    Helios at 10 and 2 mm/h, 60,000 pulses of ids from 0 and from 2^40; its
    ``count_particles`` counts each pulse's as both draw them."""
    import inspect

    from simulator.steps import particles

    spec, kernel = particles.draw_particles, backend.draw_particles
    assert spec.__name__ == kernel.__name__
    assert inspect.signature(spec) == inspect.signature(kernel)
    sim = Simulation.from_file(FARM, ["revolutions=0.01", "weather.rain.rate_mm_h=10",
                                      "weather.snow.rate_mm_h=2"])  # fmt: skip
    assert sim.medium is not None and len(sim.medium.populations) == 2
    ids = np.concatenate([np.arange(30_000), 2**40 + np.arange(30_000)]).astype(np.uint64)
    for population in sim.medium.populations:
        want, got = spec(population, ids), kernel(population, ids)
        assert len(want.pulse) > 10_000
        for name in ("pulse", "range_m", "diameter_m", "place"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), name)
        # The count alone, as the pipeline finds the pulses the weather touches.
        count = backend.count_particles(population, ids)
        assert count.dtype == np.int64
        np.testing.assert_array_equal(count, particles.count_particles(population, ids))
        np.testing.assert_array_equal(count, np.bincount(want.pulse, minlength=len(ids)))


def _two_walls_in_weather(ws: Workspace, samples: int, mode: str, **more: object) -> Simulation:
    """A 2 m wall 3 m away in front of a 40 m one 10 m away, the rest of the turn sky,
    in snow, rain and fog: no see-through surface (the medium kernel's one-surface path)."""
    near = {**_wall(3.0, {**PLAIN, "reflectance": 0.3}, size_m=2.0), "name": "near"}
    objects = [near, _wall(10.0, {**PLAIN, "label": "vegetation"}, size_m=40.0)]
    scanner = single_channel_scanner(
        beam_samples=samples, return_mode=mode, range_min_m=0.3, range_noise_m=0.02,
        range_resolution_m=0.002, divergence_mrad={"horizontal": 3.0, "vertical": 3.0},
        channels={"elevation_deg": [-1.0, 0.0, 1.0]},
        **({"max_returns": 4} if mode == "multi" else {}),
    )  # fmt: skip
    conditions = {"snow": {"rate_mm_h": 3.0}, "rain": {"rate_mm_h": 30.0},
                  "fog": {"visibility_m": 60.0}}  # fmt: skip
    sim = _sim(ws, objects, scanner, weather=conditions, **{"revolutions": 0.5, **more})
    assert sim.medium is not None and sim.medium.transmittance_of_object is None
    return sim


@pytest.mark.parametrize("samples", [1, 7])
@pytest.mark.parametrize("mode", ["strongest", "dual", "multi"])
def test_the_medium_kernel_of_one_surface_a_ray_equals_its_specification(
    ws: Workspace, mode: str, samples: int, backend: Backend
) -> None:
    """Without see-through surfaces ``simulator.kernels.weather.medium_returns`` computes
    a pulse in one kernel (the flakes' and drops' shadows and echoes, the fog's peak
    resolved against them, the selection), drawing only the lit particles when none are
    given: both equal the specification every field, value for value, with one ray a
    pulse and seven; every kind of echo is among the returns (the test has power)."""
    import dataclasses

    from simulator.steps import weather

    sim = _two_walls_in_weather(ws, samples, mode)
    assert sim.medium is not None
    chunk = sim.cast_pulses(0, sim.total_pulses)
    results = sim.evaluate(chunk)
    ids = chunk.pulse_ids
    particles = sim.medium.draw(ids)
    args = (results, chunk.hits, ids, sim.beam, sim.model, sim.streams, sim.medium)
    want = weather.medium_returns(*args, particles)
    objects = set(np.unique(want.object_index).tolist())
    first = sim.medium.first_object
    assert {0, 1, first, first + 2, first + 3} <= objects, objects  # walls, fog, rain, snow
    for got in (backend.medium_returns(*args, particles), backend.medium_returns(*args)):
        for f in dataclasses.fields(want):
            a, b = getattr(want, f.name), getattr(got, f.name)
            assert a is not None and b is not None, f.name
            np.testing.assert_array_equal(b, a, err_msg=f.name)


def test_the_lit_particle_draw_is_the_specifications_draw_of_the_lit_ones() -> None:
    """The kernels' fused draw (``_lit_particles``) keeps of
    :func:`simulator.steps.particles.draw_particles` exactly the particles in front of their
    sub-ray's surface and the maximum range, each with the specification's range,
    diameter and sub-ray, and :meth:`simulator.beam.BeamOptics.overlap` at its range (the kernel
    computes it where it is 0 or 1, numpy the rest): drops and flakes of the Helios, one
    and seven sub-rays, surfaces from 0.5 to 15 m and misses."""
    from simulator.beam import BeamPattern
    from simulator.kernels import particles as k_particles
    from simulator.steps import particles

    sim = Simulation.from_file(FARM, ["revolutions=0.01", "weather.rain.rate_mm_h=10",
                                      "weather.snow.rate_mm_h=2"])  # fmt: skip
    assert sim.medium is not None and len(sim.medium.populations) == 2
    ids = np.concatenate([np.arange(20_000), 2**40 + np.arange(20_000)]).astype(np.uint64)
    for samples in (1, 7):
        beam = BeamPattern.of(samples, 3.0, 0.5)
        rays = np.arange(len(ids) * samples)
        ray_range = 0.5 + 14.5 * ((rays * 0.6180339887498949) % 1.0)
        ray_range[rays % 11 == 0] = np.inf
        for population in sim.medium.populations:
            p = particles.draw_particles(population, ids)
            cumulative = np.cumsum(beam.weights)
            sub = np.minimum(np.searchsorted(cumulative, p.place * cumulative[-1]), samples - 1)
            lit = (p.range_m < ray_range[p.pulse * samples + sub]) & (
                p.range_m < sim.model.range_max_m
            )
            assert 0.2 < lit.mean() < 0.9, lit.mean()  # some behind their surfaces
            starts, range_m, diameter_m, got_sub, got_overlap = k_particles.lit_particles(
                population, ids, ray_range, beam, sim.model, sim.medium.optics
            )
            per_pulse = np.bincount(p.pulse[lit], minlength=len(ids))
            np.testing.assert_array_equal(np.diff(starts), per_pulse)
            np.testing.assert_array_equal(range_m, p.range_m[lit])
            np.testing.assert_array_equal(diameter_m, p.diameter_m[lit])
            np.testing.assert_array_equal(got_sub, sub[lit])
            np.testing.assert_array_equal(got_overlap, sim.medium.optics.overlap(range_m))
            assert 0.0 < np.mean(got_overlap == 1.0) < 1.0  # both the exact and numpy's


@pytest.mark.parametrize(
    "optics",
    [
        {},  # the defaults: a partial zone from 0.3 to 5.7 m
        {"axis_separation_mm": 0.0, "receiver_fov_mrad": 1.0},  # coaxial, narrow field
        {"axis_separation_mm": 60.0, "receiver_aperture_mm": 5.0, "range_min_m": 2.0},
    ],
)
def test_the_overlap_kernels_give_the_specifications_overlap(optics: dict) -> None:
    """``partial_overlap`` (two kernels about numpy's ``arccos``) is
    :meth:`simulator.beam.BeamOptics.overlap` value for value, bit for bit, at 3 million ranges
    from 0 to 300 m, with the default optics, coaxial axes with a field narrower than
    the beam, and wide-apart axes blanked to 2 m; each case has ranges in every zone."""
    from simulator.config import load_scanner
    from simulator.kernels.overlap import partial_overlap

    beam = BeamOptics.of(load_scanner("rs-helios-5515", optics))
    r = np.concatenate([np.linspace(0.0, 60.0, 2_000_003),
                        np.random.default_rng(5).uniform(0.0, 300.0, 1_000_000)])  # fmt: skip
    want = beam.overlap(r)
    got = partial_overlap(r, beam)
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))
    partial = (want > 0.0) & (want < 1.0)
    assert np.sum(partial) > 10_000
    assert np.any(want == 0.0) and (np.any(want == 1.0) or optics.get("receiver_fov_mrad"))


def test_the_soft_target_kernel_equals_its_specification() -> None:
    """``simulator.kernels.soft_targets.soft_echoes`` gives :meth:`SoftTarget.echoes`'s
    waveform peaks value for value, for one and seven sub-rays cut anywhere from before
    the overlap to beyond the waveform's reach, and not at all."""
    import inspect

    from simulator.kernels import soft_targets as k_soft

    # The method's parameters after its target (``self``, the kernel's ``soft``).
    spec_parameters = list(inspect.signature(SoftTarget.echoes).parameters.values())[1:]
    assert list(inspect.signature(k_soft.soft_echoes).parameters.values())[1:] == (spec_parameters)
    sim = Simulation.from_file(FARM, ["revolutions=0.01", "weather.fog.visibility_m=50"])
    assert sim.medium is not None
    soft = sim.medium.soft[0]
    for samples in (1, 7):
        n = 20_000
        cells = np.arange(n * samples)
        sub = (1.5 * soft.reach_m * ((cells * 0.7548776662466927) % 1.0)).reshape(n, samples)
        sub[cells.reshape(n, samples) % 13 == 0] = np.inf
        weights = 1.0 + (np.arange(samples) % 3)
        want = soft.echoes(sub, weights)
        got = k_soft.soft_echoes(soft, sub, weights)
        assert np.mean(want[0] != soft.peak_range_m) > 0.3  # cut beams move the peak
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(b, a)


def test_a_cut_beams_first_maximum_lies_in_the_bins_its_rows_give() -> None:
    """:func:`simulator.steps.soft_targets.cut_peak_bins`: for every pair of rows of the
    fog's and the dust's waveforms and cuts at eleven fractions between them (both rows
    themselves included), the first maximum of the cut (the interpolation as the kernel
    makes it) lies in the row pair's bins, and every bin outside them is strictly below
    that maximum; the bins are few (what makes the one-ray kernel fast)."""
    from simulator.steps.soft_targets import cut_peak_bins

    sim = Simulation.from_file(
        FARM, ["revolutions=0.01", "weather.fog.visibility_m=50", "weather.dust.visibility_m=80"]
    )
    assert sim.medium is not None and len(sim.medium.soft) == 2
    for soft in sim.medium.soft:
        waveform = soft.waveform
        bins = cut_peak_bins(waveform)
        assert bins.shape == (len(waveform) - 1, 2) and bins.dtype == np.int64
        assert np.all(bins[:, 0] <= bins[:, 1])
        assert np.mean(bins[:, 1] - bins[:, 0] + 1) < 0.1 * waveform.shape[1]
        np.testing.assert_array_equal(soft.peak_bins, bins)
        below, above = waveform[:-1], waveform[1:]
        columns = np.arange(waveform.shape[1])
        outside = (columns < bins[:, :1]) | (columns > bins[:, 1:])
        for frac in np.linspace(0.0, 1.0, 11):
            cut = 0.0 + 1.0 * (below + frac * (above - below))
            top = np.argmax(cut, axis=1)
            assert np.all((bins[:, 0] <= top) & (top <= bins[:, 1]))
            best = cut.max(axis=1, keepdims=True)
            assert np.all(cut[outside] < np.broadcast_to(best, cut.shape)[outside])


def test_the_layered_soft_target_kernel_equals_its_specification() -> None:
    """With layers behind (the light going on through see-through surfaces):
    ``soft_echoes`` gives :meth:`SoftTarget.echoes`'s peaks value for value, for one, seven
    and nineteen sub-rays (numpy's row sum both ways: one after the other, and its eight
    partial sums), two layers behind, factors from 0 (opaque) to 1, and layers that meet
    nothing."""
    from simulator.kernels import soft_targets as k_soft

    sim = Simulation.from_file(FARM, ["revolutions=0.01", "weather.fog.visibility_m=50"])
    assert sim.medium is not None
    soft = sim.medium.soft[0]
    for samples in (1, 7, 19):
        n = 8_000
        cells = np.arange(n * samples)
        first = (1.2 * soft.reach_m * ((cells * 0.7548776662466927) % 1.0)).reshape(n, samples)
        first[cells.reshape(n, samples) % 11 == 0] = np.inf
        behind = np.stack([first + 3.0 + (cells.reshape(n, samples) % 5),
                           first + 9.0 + (cells.reshape(n, samples) % 7)])  # fmt: skip
        behind[0][cells.reshape(n, samples) % 3 == 0] = np.inf
        behind[1][cells.reshape(n, samples) % 2 == 0] = np.inf
        two_way = np.stack([((cells * 0.5698402909980532 + k * 0.3) % 1.0).reshape(n, samples)
                            for k in range(3)])  # fmt: skip
        two_way[0][cells.reshape(n, samples) % 4 == 0] = 0.0
        weights = 1.0 + (np.arange(samples) % 3)
        want = soft.echoes(first, weights, behind, two_way)
        got = k_soft.soft_echoes(soft, first, weights, behind, two_way)
        assert np.mean(want[0] != soft.peak_range_m) > 0.3
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(b, a)


def test_weather_scans_of_one_surface_a_ray_are_identical_for_any_chunk_and_backend(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two walls in snow, rain and fog, seven sub-rays (the kernels' one-surface
    path, the particles drawn where they are used): bit for bit across chunk sizes, the
    numpy specification and blocks of the weather's pulses."""
    sim = _two_walls_in_weather(ws, 7, "dual", revolutions=0.2)
    ref = sim.run()
    path = ws.root / "survey.yaml"
    small = Simulation.from_file(path, ["chunk_pulses=397"]).run()
    spec_sim = Simulation.from_file(path, ["chunk_pulses=1000"])
    spec_sim.backend = NumpyBackend()
    spec = spec_sim.run()
    monkeypatch.setattr(simulator.pipeline.layers, "MEDIUM_BLOCK_PULSES", 301)
    blocks = Simulation.from_file(path).run()
    monkeypatch.undo()
    assert np.sum(ref["object_id"] >= sim.medium.first_object) > 200
    for other in (small, spec, blocks):
        assert other.fields.keys() == ref.fields.keys()
        for name in ref.fields:
            if other is spec and name == "range_true_m":  # (as the farm's test says)
                np.testing.assert_array_max_ulp(other[name], ref[name], maxulp=4)
                continue
            np.testing.assert_array_equal(other[name], ref[name], err_msg=name)


def test_in_fog_the_beams_are_not_detected_alone_and_the_scan_is_the_same() -> None:
    """Fog touches every pulse, so no pulse keeps its first surface's single-ray return:
    the per-hit model leaves out the beams' detection, measured range and intensity
    (``detects_beams``), and the scan is bit for bit the one made with them. Rain
    (some pulses keep their first surfaces' returns) and clear air keep it."""
    sets = ["revolutions=0.05", "output.diagnostics=true"]
    fog = Simulation.from_file(FARM, [*sets, "weather.fog.visibility_m=50"])
    assert not fog.detects_beams
    results = fog.evaluate(fog.cast_pulses(0, 4000))
    assert len(results.idx) > 2000 and len(results.keep) == len(results.range_m) == 0
    assert len(results.cos_effective) == len(results.idx)
    ref = fog.run()
    detecting = Simulation.from_file(FARM, [*sets, "weather.fog.visibility_m=50"])
    detecting.detects_beams = True
    assert len(detecting.evaluate(detecting.cast_pulses(0, 4000)).keep) == len(results.idx)
    again = detecting.run()
    assert ref.fields.keys() == again.fields.keys() and len(ref["xyz"]) > 2000
    for name in ref.fields:
        np.testing.assert_array_equal(again[name], ref[name], err_msg=name)
    for other in ([*sets, "weather.rain.rate_mm_h=10"], sets):
        assert Simulation.from_file(FARM, other).detects_beams


def test_clear_air_is_the_scan_without_a_weather_section() -> None:
    """An empty weather section changes nothing (no medium, the same scan), while a
    light rain on the same survey does change it (drop points, labelled outlier)."""
    a = Simulation.from_file(FARM, ["revolutions=0.05"]).run()
    empty = Simulation.from_file(FARM, ["revolutions=0.05", "weather={}"])
    assert empty.medium is None
    b = empty.run()
    for name in a.fields:
        np.testing.assert_array_equal(a[name], b[name])
    wet = Simulation.from_file(FARM, ["revolutions=0.05", "weather.rain.rate_mm_h=2"]).run()
    assert np.sum(wet["label"] == label_id("outlier")) > 10
    assert len(wet) != len(a) or not np.array_equal(wet["range_m"], a["range_m"])


def test_bad_weather_is_a_config_error(ws: Workspace, tmp_path: Path) -> None:
    path = ws.survey([FAR_BOX], "rs-helios-5515", weather={"fog": {"visibility_m": -5}})
    with pytest.raises(simulator.errors.ConfigError, match=r"weather\.fog\.visibility_m"):
        Simulation.from_file(path)
    path = ws.survey([FAR_BOX], "rs-helios-5515", weather={"hail": {"rate_mm_h": 5}})
    with pytest.raises(simulator.errors.ConfigError, match=r"weather\.hail"):
        Simulation.from_file(path)


def test_a_dataset_mixes_conditions_per_group_bit_for_bit_across_workers(
    tmp_path: Path, dask_cluster: str
) -> None:
    """The demo dataset with snow and fog on its street group: the farm group stays clear,
    the street group has points of each condition (flakes are falling-snow, fog outlier),
    and two Dask workers (the run's cluster, :func:`conftest.dask_cluster`) write the same
    bytes as one process."""
    import yaml

    from simulator.datasets import run_dataset

    spec = yaml.safe_load((REPO / "configs" / "datasets" / "demo.yaml").read_text())
    spec["groups"][1]["weather"] = {"snow": {"rate_mm_h": 2.0}, "fog": {"visibility_m": 40.0}}
    spec["groups"][0]["frames"] = spec["groups"][1]["frames"] = 1
    path = tmp_path / "wet.yaml"
    path.write_text(yaml.safe_dump(spec))
    one = tmp_path / "one"
    assert run_dataset(path, one, workers=1)["errors"] == []
    assert run_dataset(path, tmp_path / "dask", scheduler=dask_cluster)["errors"] == []

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != "manifest.json"}  # fmt: skip

    assert files(tmp_path / "dask") == files(one)
    labels = {}
    for seq in ("00", "01"):
        raw = np.fromfile(one / "sequences" / seq / "labels" / "000000.label", dtype="<u4")
        labels[seq] = raw & 0xFFFF
    snow, fog = label_id("falling-snow"), label_id("outlier")
    assert not np.isin(labels["00"], [snow, fog]).any()  # the farm: clear air
    assert np.sum(labels["01"] == snow) > 100, np.sum(labels["01"] == snow)  # flakes
    assert np.sum(labels["01"] == fog) > 100, np.sum(labels["01"] == fog)  # fog


def test_the_report_compares_the_weather_with_clear_air(tmp_path: Path) -> None:
    """``write_report`` of a scan in snow adds the detection panel, counts the weather
    points apart, and keeps them out of the materials' plots."""
    from simulator.viz.report import write_report

    sim = Simulation.from_file(
        FARM, ["revolutions=0.1", "weather.snow.rate_mm_h=2", "output.diagnostics=true"]
    )
    cloud = sim.run()
    summary = write_report(cloud, tmp_path, simulation=sim)
    assert (tmp_path / "weather.png").stat().st_size > 10_000
    weather = summary["weather"]
    assert weather["clear air"]["weather_points"] == 0
    snowy = weather["snow 2 mm/h"]
    flakes = int(np.sum(cloud["label"] == label_id("falling-snow")))
    assert snowy["weather_points"] == flakes > 100
    assert snowy["scene_points"] == len(cloud) - flakes
    assert sum(m["points"] for m in summary["materials"].values()) <= len(cloud) - flakes


# --------------------------------------------------------------------------- optics, haze


def test_haze_leaves_no_ring_and_thick_fog_still_returns_on_every_sky_pulse(
    ws: Workspace,
) -> None:
    """The VLP-16 on the farm: 5 km haze adds under 0.5 % points to clear air (the linear
    overlap of before added 86 %: 28,928 against 15,517 on the whole survey); fog of 30 m
    around a sensor that sees nothing else returns on every pulse, from where the
    geometric overlap lets the soft-target equation peak (between its start and 2 m past
    its end)."""
    sets = ["scanner=vlp-16", "revolutions=0.2"]
    clear = len(Simulation.from_file(FARM, sets).run())
    haze = len(Simulation.from_file(FARM, [*sets, "weather.fog.visibility_m=5000"]).run())
    assert clear < haze * 1.005 and haze < clear * 1.005, (clear, haze)
    sim = _sim(ws, [FAR_BOX], "vlp-16", revolutions=0.05, weather={"fog": {"visibility_m": 30.0}})
    cloud = sim.run()
    assert len(cloud) == sim.total_pulses
    start, full = sim.scanner.overlap_range_m
    assert start < cloud["range_m"].min() and cloud["range_m"].max() < full + 2.0


def test_haze_extinction_scales_with_the_wavelength_above_500_m() -> None:
    """Kim et al. 2001: (lambda / 550 nm)^-q with q(V) piecewise in the visibility."""
    from simulator.steps.weather import haze_wavelength_factor as factor

    assert factor(300.0, 905.0) == 1.0
    assert factor(5000.0, None) == 1.0
    for v_km, q in ((0.8, 0.3), (3.0, 0.16 * 3 + 0.34), (20.0, 1.3), (80.0, 1.6)):
        assert factor(v_km * 1e3, 905.0) == pytest.approx((905 / 550) ** -q, rel=1e-12)
    # Continuous where the pieces meet.
    for v in (1000.0, 6000.0):
        assert factor(v - 1e-6, 905.0) == pytest.approx(factor(v + 1e-6, 905.0), rel=1e-6)


@pytest.mark.parametrize(
    ("preset", "revolutions", "share", "median_m", "within_m"),
    [("vlp-16", 0.5, 0.299, 2.65, 6.43), ("hdl-64e", 0.2, 0.0417, 2.20, 4.13)],
)  # fmt: skip
def test_drop_clutter_of_spinning_sensors_at_10_mm_h(
    ws: Workspace,
    preset: str,
    revolutions: float,
    share: float,
    median_m: float,
    within_m: float,
) -> None:
    """Drop clutter of the VLP-16 and the HDL-64E in an empty sky at 10 mm/h, first
    returns: the share of pulses with a drop point is the law's ``1 - exp(-mu)`` (4
    Poisson sigmas; mu the detectable drops a beam holds: 0.355 and 0.0426, from
    Marshall-Palmer, the drop's Mie backscatter 0.05, the beam and the geometric
    overlap by quadrature, :func:`_drawn_law`), and the first drop's range follows the
    law's distribution (Kolmogorov-Smirnov at the 1 % level): the clutter lies within a
    few metres (median 2.65 and 2.20 m, 99 % within 6.4 and 4.1 m), none beyond where the
    law expects a thousandth of a point. ASSUMPTION: no published per-pulse rate or range
    histogram of drop returns for a spinning sensor was found (searched: Filgueira et al.
    2017 (VLP-16 in rain: fewer points and less intensity, no drop clutter figure),
    Goodin et al. 2019, Heinzler et al. 2019/2020, Montalban et al. 2021, Haider et al.
    2023, Karlsson et al. 2021, Kutila et al. 2018); what is asserted is what the physics
    implies, with the figures in the parameters."""
    sim = _sim(ws, [FAR_BOX], preset, revolutions=revolutions,
               scanner_overrides={"return_mode": "first"},
               weather={"rain": {"rate_mm_h": 10.0}})  # fmt: skip
    cloud = sim.run()
    assert np.all(cloud["label"] == label_id("outlier"))
    assert len(np.unique(cloud["pulse_id"])) == len(cloud)
    law = _drawn_law(10.0, "rain", preset)
    cum = integrate.cumulative_trapezoid(law["per_metre"], law["r"], initial=0.0)
    mu, n = cum[-1], sim.total_pulses
    p = 1.0 - np.exp(-mu)
    assert p == pytest.approx(share, rel=0.01)
    assert abs(len(cloud) - n * p) < 4 * np.sqrt(n * p * (1 - p)) + 1, (len(cloud), n * p)
    first = (1.0 - np.exp(-cum)) / p  # the first drop's range distribution
    assert np.interp(0.5, first, law["r"]) == pytest.approx(median_m, abs=0.05)
    assert np.interp(0.99, first, law["r"]) == pytest.approx(within_m, abs=0.1)
    r = np.sort(cloud["range_m"].astype(np.float64))
    ks = np.max(np.abs(np.interp(r, law["r"], first) - np.arange(1, len(r) + 1) / len(r)))
    assert ks < 1.63 / np.sqrt(len(r)), ks
    far = np.interp(1.0 - 1e-3 / len(r), first, law["r"])
    assert r[-1] < far, (r[-1], far)
    assert len(r) > 300  # the test has power
