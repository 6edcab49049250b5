"""The sensor's intensity response (``intensity_response``): scanned points obey it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import simulator
from simulator.backend import KERNELS_AVAILABLE, Backend, NumpyBackend
from simulator.pipeline.layers import layers_of
from simulator.steps import echoes, hits
from simulator.steps.returns import DIAGNOSTIC_FIELDS
from simulator.steps.see_through import see_through_returns

from .conftest import PLAIN, REPO, Workspace, lidar_sim, single_channel_scanner

#: Ground-plane rings, deg: ranges from 2 m to 34 m at 1.8 m height.
ELEVATIONS = [-3.0, -5.0, -8.0, -12.0, -20.0, -35.0, -60.0]
GAINS = [1.25, 0.8, 1.1, 0.95, 1.4, 0.6, 1.05]
GROUND = [{"name": "ground", "plane": {"size_m": [200, 200]}, "material": PLAIN}]
SCALE = 100.0
RHO = PLAIN["reflectance"]


def _scan(ws: Workspace, response: dict[str, Any] | None, **scanner: Any) -> simulator.PointCloud:
    keys: dict[str, Any] = {"channels": {"elevation_deg": ELEVATIONS}, **scanner}
    if response is not None:
        keys["intensity_response"] = response
    return ws.scan(
        GROUND, scanner=single_channel_scanner(**keys), pose={"position_m": [0, 0, 1.8]},
        revolutions=0.1,
    )  # fmt: skip


def _expected_reflectivity(cloud: simulator.PointCloud) -> np.ndarray:
    """``intensity_scale * b`` of the plain Lambertian material (k = 1, no micro-slope):
    ``b = reflectance * cos_effective``, from the diagnostics, not from the model."""
    return SCALE * RHO * cloud["cos_effective"].astype(np.float64)


def test_channel_gain_is_recovered_ring_by_ring(ws: Workspace) -> None:
    """On a plane of known reflectance, intensity / (scale * b) is each ring's gain."""
    cloud = _scan(ws, {"channel_gain": GAINS})
    plain = _scan(ws, None)
    assert len(cloud) == len(plain) > 2000
    ratio = cloud["intensity"] / _expected_reflectivity(cloud)
    for ring, gain in enumerate(GAINS):
        mine = ratio[cloud["ring"] == ring]
        assert len(mine) > 300
        # float32 intensity and cosine: the gain to 1e-6
        np.testing.assert_allclose(mine, gain, rtol=1e-6, err_msg=f"ring {ring}")
    # detection is not the response's: the same points, the same ranges
    np.testing.assert_array_equal(cloud["range_m"], plain["range_m"])
    np.testing.assert_array_equal(cloud["ring"], plain["ring"])


def test_power_law_exponent_is_recovered_from_intensity_against_range(ws: Workspace) -> None:
    """``(R / reference_m) ** exponent``: the log-log slope of intensity / (scale * b)
    against the measured range is the exponent, the intercept at reference_m is 0."""
    exponent, reference_m = -0.73, 7.5
    cloud = _scan(ws, {"range": {"form": "power", "reference_m": reference_m,
                                 "exponent": exponent}})  # fmt: skip
    r = cloud["range_m"].astype(np.float64)
    assert r.min() < 2.5 and r.max() > 30.0
    ratio = cloud["intensity"] / _expected_reflectivity(cloud)
    slope, intercept = np.polyfit(np.log(r / reference_m), np.log(ratio), 1)
    assert slope == pytest.approx(exponent, abs=2e-6)
    assert intercept == pytest.approx(0.0, abs=2e-6)


def _driver_intensity(raw: np.ndarray, range_m: np.ndarray, focal_distance: float,
                      focal_slope: float) -> np.ndarray:  # fmt: skip
    """ros-drivers/velodyne rawdata.cc (RawData::unpack, @29abd0e1), as written there:
    ``focal_offset = 256 (1 - focal_distance / 13100)^2``, ``intensity += focal_slope *
    |focal_offset - 256 (1 - tmp.uint / 65535)^2|`` with ``tmp.uint`` the raw range count
    (2 mm)."""
    count = np.rint(range_m / 0.002)
    focal_offset = 256 * (1 - focal_distance / 13100) * (1 - focal_distance / 13100)
    return raw + focal_slope * np.abs(focal_offset - 256 * (1 - count / 65535) ** 2)


@pytest.mark.parametrize(
    ("convention", "focal_distance_m", "driver_focal"),
    [("manual", 12.0, 1200.0), ("ros_driver", 12.0, 12.0)],
)
def test_velodyne_focal_matches_the_drivers_formula(
    ws: Workspace, convention: str, focal_distance_m: float, driver_focal: float
) -> None:
    """The HDL-64E focal correction, added to the raw count: ``manual`` reads the focal
    distance in metres (the driver's formula fed centimetres), ``ros_driver`` passes the
    number as the driver does with its YAML's metres."""
    slope = 1.4
    rng = {"form": "velodyne_focal", "focal_distance_m": focal_distance_m,
           "focal_slope": slope, "convention": convention}  # fmt: skip
    cloud = _scan(ws, {"channel_gain": GAINS, "range": rng}, range_resolution_m=0.002,
                  intensity_max=1000.0)  # fmt: skip
    raw = _expected_reflectivity(cloud) * np.asarray(GAINS)[cloud["ring"]]
    want = _driver_intensity(raw, cloud["range_m"].astype(np.float64), driver_focal, slope)
    assert np.ptp(want - raw) > 20.0  # the correction varies over the rings' ranges
    np.testing.assert_allclose(cloud["intensity"], want, rtol=2e-6)


def test_the_clip_and_the_step_come_after_the_response(ws: Workspace) -> None:
    """A gain that takes the reading past intensity_max is clipped there; readings are
    whole steps of the response's output."""
    cloud = _scan(ws, {"channel_gain": [10.0] * len(ELEVATIONS)}, intensity_step=1.0)
    want = np.minimum(np.rint(10.0 * _expected_reflectivity(cloud)), 255.0)
    assert np.count_nonzero(want == 255.0) > 100 and np.count_nonzero(want < 255.0) > 100
    # (float32 cosines: a reading at a half step may round the other way)
    assert np.mean(cloud["intensity"] == want) > 0.999


def test_a_raster_patterns_gain_is_per_row(ws: Workspace) -> None:
    """Other patterns: the gain of the channel (ring) they report, here a raster's row."""
    rows = 4
    scanner = single_channel_scanner(
        pattern="raster", channels=None, rotation_hz=None, firings_per_revolution=None,
        raster={"rows": rows, "columns": 50, "horizontal_fov_deg": 40.0,
                "vertical_fov_deg": 20.0, "frame_rate_hz": 10.0},
        intensity_response={"channel_gain": [0.5, 1.5, 0.9, 1.2]},
    )  # fmt: skip
    scanner = {k: v for k, v in scanner.items() if v is not None}
    wall = {"name": "wall", "plane": {"size_m": [100, 100]}, "position_m": [10, 0, 0],
            "rotation_deg": [0, -90, 0], "material": PLAIN}  # fmt: skip
    cloud = ws.scan([wall], scanner=scanner)
    assert set(np.unique(cloud["ring"])) == set(range(rows))
    ratio = cloud["intensity"] / _expected_reflectivity(cloud)
    for ring, gain in enumerate([0.5, 1.5, 0.9, 1.2]):
        np.testing.assert_allclose(ratio[cloud["ring"] == ring], gain, rtol=1e-6)


RESPONSE = (
    "scanner_overrides.intensity_response={channel_gain: [%s], range: {form: power, "
    "reference_m: 10.0, exponent: -0.5}}"
)


def _gains(n: int) -> str:
    return ", ".join(f"{0.7 + 0.05 * (k % 13)}" for k in range(n))


@pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")
def test_numpy_and_numba_backends_agree_with_a_response(ws: Workspace, backend: Backend) -> None:
    """The plane scans above, every field, both backends: equal."""
    for response in ({"channel_gain": GAINS, "range": {"form": "power", "reference_m": 7.5,
                                                      "exponent": -0.73}},
                     {"channel_gain": GAINS, "range": {"form": "velodyne_focal",
                                                      "focal_distance_m": 12.0,
                                                      "focal_slope": 1.4}}):  # fmt: skip
        keys = {"channels": {"elevation_deg": ELEVATIONS}, "intensity_response": response}
        survey = ws.survey(GROUND, scanner=single_channel_scanner(**keys),
                           pose={"position_m": [0, 0, 1.8]}, revolutions=0.1)  # fmt: skip
        sim = simulator.Simulation.from_file(survey)
        sim.backend = backend
        fast = sim.run()
        sim.backend = NumpyBackend()
        ref = sim.run()
        assert len(ref) > 2000
        for name in ref.names:
            np.testing.assert_array_equal(fast[name], ref[name], err_msg=name)


@pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")
def test_echo_and_see_through_kernels_apply_the_response(backend: Backend) -> None:
    """Footprint echoes and the see-through kernel (a generated street: glass, foliage),
    given the same per-hit model: the kernels' returns equal the specification's, and the
    response changed the intensities."""
    street = REPO / "scenes" / "street" / "drive.yaml"
    cases = (("hdl-64e", 64, 7, "multi", 20_000), ("rs-helios-5515", 32, 1, "dual", 60_000))
    for scanner, channels, samples, return_mode, pulses in cases:
        overrides = ["revolutions=0.3", f"scanner={scanner}",
                     f"scanner_overrides.beam_samples={samples}",
                     f"scanner_overrides.return_mode={return_mode}"]  # fmt: skip
        plain = simulator.Simulation.from_file(street, overrides)
        sim = simulator.Simulation.from_file(street, [*overrides, RESPONSE % _gains(channels)])
        assert sim.model.response is not None and plain.model.response is None
        chunk = sim.cast_pulses(0, pulses)
        assert len(chunk.behind) == 3
        results = sim.evaluate(chunk)
        behind = layers_of(sim, chunk, results)
        ids = chunk.pulse_ids
        args = (results, chunk.hits, ids, sim.beam, sim.model, sim.streams, behind)
        plain_results = plain.evaluate(chunk)
        plain_args = (plain_results, chunk.hits, ids, sim.beam, plain.model, sim.streams,
                      layers_of(plain, chunk, plain_results))  # fmt: skip
        if samples == 1:
            want = see_through_returns(*args, diagnostics=True)
            got = backend.see_through_returns(*args, diagnostics=True)
            base = see_through_returns(*plain_args, diagnostics=True)
        else:
            want = echoes.echo_returns(*args)
            got = backend.echo_returns(*args)
            base = echoes.echo_returns(*plain_args)
        assert len(want) > 5000 and (want.num_returns > 1).sum() > 100
        for f in ("pulse", "range_m", "intensity", "object_index", "return_number",
                  "num_returns", *DIAGNOSTIC_FIELDS):  # fmt: skip
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
        np.testing.assert_array_equal(base.range_m, want.range_m)  # detection unchanged
        assert np.mean(base.intensity != want.intensity) > 0.5


def test_weather_returns_carry_the_response() -> None:
    """Through fog (the medium's numpy path): the same points and ranges as without the
    response, intensities through it (the target's gain and range factor)."""
    fog = ["revolutions=0.05", "scanner=hdl-64e", "weather={fog: {visibility_m: 50}}",
           "scanner_overrides.intensity_step=0",
           "output.diagnostics=true"]  # fmt: skip
    farm = REPO / "scenes" / "farm" / "survey.yaml"
    plain = simulator.Simulation.from_file(farm, fog).run()
    sim = simulator.Simulation.from_file(farm, [*fog, RESPONSE % _gains(64)])
    cloud = sim.run()
    np.testing.assert_array_equal(cloud["range_m"], plain["range_m"])
    response = sim.model.response
    assert response is not None
    r = cloud["range_m"].astype(np.float64)
    factor = response.gain(cloud["pulse_id"]) * (np.maximum(r, 1e-6) / 10.0) ** -0.5
    below = (plain["intensity"] > 0) & (plain["intensity"] * factor < 250)
    assert np.count_nonzero(below) > 1000
    np.testing.assert_allclose(
        cloud["intensity"][below], (plain["intensity"] * factor)[below], rtol=1e-5
    )


@pytest.mark.parametrize(
    ("response", "fragments"),
    [
        ({"channel_gain": [1.0, 1.0]}, ["intensity_response.channel_gain", "2 entries", "7"]),
        ({"channel_gain": [1.0] * 6 + [0.0]}, ["intensity_response.channel_gain[6]"]),
        ({"channel_gain": [1.0] * 6 + [".inf"]}, ["intensity_response.channel_gain[6]"]),
        ({"range": {"form": "power", "reference_m": 0.0, "exponent": 1.0}},
         ["intensity_response.range.reference_m"]),
        ({"range": {"form": "power", "reference_m": 10.0}},
         ["intensity_response.range", "needs exponent"]),
        ({"range": {"form": "power", "reference_m": 10.0, "exponent": ".nan"}},
         ["intensity_response.range.exponent"]),
        ({"range": {"form": "cubic"}}, ["intensity_response.range.form"]),
        ({"gain": [1.0]}, ["intensity_response.gain", "unknown key"]),
    ],
)  # fmt: skip
def test_validate_names_the_bad_key(
    ws: Workspace, response: dict[str, Any], fragments: list[str]
) -> None:
    """``lidar-sim validate`` on a scanner YAML with a bad response: exit 2, one line."""
    keys = {"channels": {"elevation_deg": ELEVATIONS}, "intensity_response": response}
    text = ws.write("scanner.yaml", single_channel_scanner(**keys)).read_text()
    path = ws.root / "scanner.yaml"
    path.write_text(text.replace("'.inf'", ".inf").replace("'.nan'", ".nan"))
    res = lidar_sim("validate", path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1
    for fragment in fragments:
        assert fragment in res.stderr, (fragment, res.stderr)


def test_absent_section_is_todays_model() -> None:
    """No section, no response: the model carries none (the kernels skip it)."""
    sim = simulator.Simulation.from_file(REPO / "scenes" / "farm" / "survey.yaml")
    assert sim.model.response is None and sim.model.response_args[0] is False
    assert hits.ReturnModel.from_scanner(sim.scanner).response is None
