"""Scan patterns and the preset library against datasheet figures and physical laws."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.config import ScannerConfig, load_scanner, scanner_presets
from simulator.sensor.scanner import pattern_for, pattern_summary

from .conftest import PLAIN, Workspace, single_channel_scanner

# name: (points/s, (min elevation, max elevation) deg, azimuth step deg or None), from the
# datasheets' headline figures. A preset built from a unit's calibration table may differ
# from the datasheet's nominal field of view by up to FOV_TOLERANCE_DEG (the exact tables
# are pinned by tests/test_presets_*.py).
DATASHEET = {
    "rs-helios-5515": (576_000, (-55.0, 15.0), 0.2),
    "rs-helios-1615": (576_000, (-16.0, 15.0), 0.2),
    "vlp-16": (289_000, (-15.0, 15.0), 0.2),
    "vlp-32c": (578_688, (-25.0, 15.0), 0.2),
    "vls-128": (2_401_498, (-25.0, 15.0), 0.192),  # manual 8.2.4; 53.3 us sequences at 10 Hz
    "hdl-32e": (694_400, (-30.67, 10.67), 0.166),
    "hdl-64e": (1_333_000, (-24.9, 2.0), None),  # "about 1.3 M"; VeloView's timing gives this
    "os1-64": (655_360, (-16.6, 16.6), 360 / 1024),
    "os1-128": (1_310_720, (-21.2, 21.2), 360 / 1024),  # 1024 x 10 mode; Rev C: 42.4 deg
    "os1-32": (163_840, (-21.2, 21.2), 360 / 512),  # 512 x 10 mode
    "os2-128": (1_310_720, (-11.25, 11.25), 360 / 1024),  # OS2: 22.5 deg
    "waymo-top": (1_696_000, (-17.55, 2.50), 360 / 2650),  # one segment's calibration
    "pandar64": (1_152_000, (-25.0, 15.0), 0.2),
    "pandar128": (2_304_000, (-25.0, 14.4), 0.2),
    "pandar-xt32": (640_000, (-16.0, 15.0), 0.18),
    "livox-avia": (240_000, None, None),
    "livox-mid70": (100_000, None, None),
    "livox-mid360": (200_000, (-7.0, 52.0), None),  # a synthetic table (see its YAML)
    "als-oscillating": (100_000, None, None),
}
FOV_TOLERANCE_DEG = {"hdl-64e": 0.2, "os1-64": 0.2, "os1-128": 0.65, "os1-32": 0.7,
                     "os2-128": 0.5, "pandar64": 0.15, "pandar128": 0.05,
                     "pandar-xt32": 0.05}  # fmt: skip


def test_every_preset_is_listed_with_its_figures() -> None:
    assert set(scanner_presets()) == set(DATASHEET)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_preset_matches_its_datasheet(name: str) -> None:
    scanner = load_scanner(name)
    pattern = pattern_for(scanner)
    rate, elevations, step = DATASHEET[name]
    assert pattern.pulses_per_second == pytest.approx(rate, rel=0.02)
    sched = pattern.schedule(0, min(pattern.frame_pulses, 300_000))
    if elevations is not None:
        el = np.degrees(sched.elevation_rad)
        tolerance = FOV_TOLERANCE_DEG.get(name, 0.01)
        assert el.min() == pytest.approx(elevations[0], abs=tolerance)
        assert el.max() == pytest.approx(elevations[1], abs=tolerance)
    if step is not None:
        assert 360.0 / scanner.firings_per_revolution == pytest.approx(step, rel=0.005)
    np.testing.assert_allclose(np.linalg.norm(sched.direction, axis=1), 1.0, atol=1e-12)


@pytest.mark.parametrize("name", ["livox-avia", "livox-mid70"])
def test_risley_field_of_view_and_growing_coverage(name: str) -> None:
    """The rosette fills its field of view more and more with integration time."""
    pattern = pattern_for(load_scanner(name))
    sched = pattern.schedule(0, round(1.0 * pattern.pulses_per_second))
    dev = np.degrees(np.arccos(np.clip(sched.direction[:, 0], -1, 1)))  # off the axis
    half_fov = dev.max()
    # Exact refraction through HELIOS++'s prisms: the Mid-70's 35.2 deg (70.4 circular), and
    # the Avia's 38.5 deg at the ends of its vertical fan (77.2 deg).
    assert half_fov == pytest.approx({"livox-avia": 38.5, "livox-mid70": 35.2}[name], abs=0.3)
    az = np.degrees(np.arctan2(sched.direction[:, 1], sched.direction[:, 0]))
    el = np.degrees(np.arcsin(sched.direction[:, 2]))
    cell = 1.0
    inside = np.hypot(*np.meshgrid(np.arange(-40, 40) + 0.5, np.arange(-40, 40) + 0.5)) < half_fov
    fractions = []
    for seconds in (0.1, 0.5, 1.0):
        n = round(seconds * pattern.pulses_per_second)
        hit = np.zeros((80, 80), bool)
        hit[np.floor(el[:n] / cell).astype(int) + 40, np.floor(az[:n] / cell).astype(int) + 40] = (
            True
        )
        fractions.append((hit & inside).sum() / inside.sum())
    assert fractions[0] < fractions[1] < fractions[2] <= 1.0
    assert fractions[2] > 0.9  # a second covers nearly all of it (non-repetitive)
    print(name, "coverage after 0.1, 0.5, 1 s:", [round(f, 3) for f in fractions])


def test_exact_refraction_obeys_snell() -> None:
    """One wedge at rest: the deviation is arcsin(n sin a) - a (minimum-deviation geometry)."""
    spec = single_channel_scanner(
        pattern="risley",
        risley={"prisms": [{"rotation_hz": 0.0, "wedge_deg": 20.0}], "refractive_index": 1.5,
                "shot_rate_hz": 1000},
    )  # fmt: skip
    del spec["channels"]
    pattern = pattern_for(ScannerConfig.model_validate(spec))
    d = pattern.schedule(0, 3).direction
    a = np.radians(20.0)
    expected = np.arcsin(1.5 * np.sin(a)) - a
    np.testing.assert_allclose(np.arccos(d[:, 0]), expected, atol=1e-12)


def _config(pattern: str, **section: object) -> ScannerConfig:
    spec = single_channel_scanner(pattern=pattern, **{pattern: section})
    del spec["channels"]
    return ScannerConfig.model_validate(spec)


def test_raster_grid_and_line_timing() -> None:
    cfg = _config("raster", rows=4, columns=5, horizontal_fov_deg=50, vertical_fov_deg=20,
                  frame_rate_hz=10, boustrophedon=True)  # fmt: skip
    p = pattern_for(cfg)
    s = p.schedule(0, 40)
    assert p.frame_pulses == 20 and p.pulses_per_second == 200
    np.testing.assert_allclose(s.time_s, np.arange(40) / 200.0)
    az = np.degrees(s.azimuth_rad[:20]).reshape(4, 5)
    el = np.degrees(s.elevation_rad[:20]).reshape(4, 5)
    np.testing.assert_allclose(az[0], [20, 10, 0, -10, -20], atol=1e-9)  # left to right
    np.testing.assert_allclose(az[1], [-20, -10, 0, 10, 20], atol=1e-9)  # and back
    np.testing.assert_allclose(el[:, 0], [7.5, 2.5, -2.5, -7.5], atol=1e-9)
    np.testing.assert_array_equal(s.channel[:20].reshape(4, 5)[:, 0], [0, 1, 2, 3])
    np.testing.assert_allclose(s.direction[20:], s.direction[:20], atol=1e-15)  # next frame


def test_table_pattern_replays_a_recorded_csv(tmp_path: Path) -> None:
    csv = tmp_path / "pattern.csv"
    csv.write_text("time_s,azimuth_deg,elevation_deg\n0.0,0,0\n0.001,10,5\n0.002,20,-5\n")
    cfg = _config("table", file=str(csv))
    p = pattern_for(cfg)
    s = p.schedule(0, 7)
    np.testing.assert_allclose(s.time_s, [0, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006])
    np.testing.assert_allclose(np.degrees(s.azimuth_rad), [0, 10, 20, 0, 10, 20, 0], atol=1e-9)
    np.testing.assert_allclose(np.degrees(s.elevation_rad), [0, 5, -5, 0, 5, -5, 0], atol=1e-9)


def test_oscillating_scanner_sweeps_the_predicted_swath(ws: Workspace) -> None:
    """Flying at 200 m over flat ground at +-20 deg: a swath of 2 h tan 20 deg."""
    survey = ws.survey(
        [{"name": "ground", "plane": {"size_m": [4000, 4000]}, "material": PLAIN}],
        scanner="als-oscillating",
        pose=None,
        trajectory={"start": {"position_m": [0, 0, 200]}, "velocity_mps": [60, 0, 0]},
        duration_s=0.2,
        revolutions=None,
        scanner_overrides={"range_noise_m": 0, "range_resolution_m": 0},
        output={"frame": "world", "diagnostics": True},
    )
    cloud = simulator.scan(survey)
    xyz = cloud["xyz"].astype(np.float64)
    np.testing.assert_allclose(xyz[:, 2], 0.0, atol=1e-3)
    half = 200 * np.tan(np.radians(20.0))
    assert np.abs(xyz[:, 1]).max() == pytest.approx(half, rel=1e-3)
    assert np.ptp(xyz[:, 0]) == pytest.approx(60 * 0.2, rel=0.01)  # along track by the flight
    assert len(cloud) == 20_000


@pytest.mark.parametrize("name", ["livox-avia", "als-oscillating"])
def test_non_spinning_schedules_are_chunk_invariant(name: str) -> None:
    p = pattern_for(load_scanner(name))
    whole = p.schedule(1000, 6000)
    part = p.schedule(3333, 4444)
    np.testing.assert_array_equal(part.direction, whole.direction[2333:3444])
    np.testing.assert_array_equal(part.time_s, whole.time_s[2333:3444])


def test_pattern_summary_of_a_spinning_and_a_non_spinning_scanner() -> None:
    """``lidar-sim scanners``'s row: the VLP-16 spins (360, a step per firing, its rate in
    Hz) with its lasers from -15 to +15 deg; the Avia's azimuth span is one frame's, within
    its field of view, with no step and a frame's duration."""
    vlp16 = load_scanner("vlp-16")
    s = pattern_summary(vlp16)
    assert (s.channels, s.rotation_hz) == (16, vlp16.rotation_hz)
    np.testing.assert_allclose(s.elevation_deg, (-15.0, 15.0), atol=1e-9)
    assert s.azimuth_step_deg == pytest.approx(360.0 / vlp16.firings_per_revolution)
    assert s.pulses_per_second == pattern_for(vlp16).pulses_per_second
    assert s.cells() == ("16", "-15.0..+15.0", "360", f"{s.azimuth_step_deg:.3f}",
                         f"{s.pulses_per_second:,.0f}", f"{vlp16.range_min_m:g}-"
                         f"{vlp16.range_max_m:g}", f"{vlp16.rotation_hz:g} Hz")  # fmt: skip
    avia = load_scanner("livox-avia")
    s = pattern_summary(avia)
    assert s.azimuth_step_deg is None and s.rotation_hz is None
    assert 60.0 < s.azimuth_fov_deg <= 70.4 + 1e-6  # the Avia's 70.4 deg horizontal FOV
    p = pattern_for(avia)
    assert s.frame_s == p.frame_pulses / p.pulses_per_second
    assert s.cells()[3] == "-" and s.cells()[6] == f"{s.frame_s:g} s"


def test_scanners_plot(tmp_path: Path) -> None:
    from .conftest import lidar_sim

    out = tmp_path / "avia.png"
    res = lidar_sim("scanners", "livox-avia", "--plot", out)
    assert res.returncode == 0, res.stderr
    assert out.stat().st_size > 20_000


def test_paraxial_refraction_is_the_thin_prism_deviation() -> None:
    """``refraction: paraxial``: one wedge at rest deviates the beam by exactly (n - 1) a,
    not Snell's arcsin(n sin a) - a."""
    spec = single_channel_scanner(
        pattern="risley",
        risley={"prisms": [{"rotation_hz": 0.0, "wedge_deg": 20.0}], "refractive_index": 1.5,
                "shot_rate_hz": 1000, "refraction": "paraxial"},
    )  # fmt: skip
    del spec["channels"]
    d = pattern_for(ScannerConfig.model_validate(spec)).schedule(0, 3).direction
    np.testing.assert_allclose(np.arccos(d[:, 0]), np.radians(0.5 * 20.0), atol=1e-12)
    snell = np.arcsin(1.5 * np.sin(np.radians(20.0))) - np.radians(20.0)
    assert abs(np.arccos(d[0, 0]) - snell) > 1e-3


@pytest.mark.parametrize("waveform", ["triangle", "sawtooth"])
def test_oscillating_waveforms_are_linear_sweeps(waveform: str) -> None:
    """A mirror cycle of 100 pulses at +-20 deg: the triangle rises 0 -> 20 -> 0 -> -20 deg
    in straight lines, the sawtooth from -20 to +20 deg and jumps back at half the cycle."""
    cfg = _config("oscillating", pulse_rate_hz=1000, scan_rate_hz=10, half_angle_deg=20,
                  waveform=waveform)  # fmt: skip
    s = pattern_for(cfg).schedule(0, 250)
    d = s.direction
    angle = np.degrees(np.arctan2(d[:, 1], -d[:, 2]))
    phase = np.arange(250) / 100.0
    if waveform == "triangle":
        want = 20.0 * (1.0 - 4.0 * np.abs(np.mod(phase + 0.25, 1.0) - 0.5))
    else:
        want = 20.0 * (2.0 * np.mod(phase + 0.5, 1.0) - 1.0)
    np.testing.assert_allclose(angle, want, atol=1e-9)
    np.testing.assert_allclose(s.time_s, np.arange(250) / 1000.0)


def test_raster_without_boustrophedon_scans_every_row_the_same_way() -> None:
    cfg = _config("raster", rows=4, columns=5, horizontal_fov_deg=50, vertical_fov_deg=20,
                  frame_rate_hz=10, boustrophedon=False)  # fmt: skip
    s = pattern_for(cfg).schedule(0, 20)
    az = np.degrees(s.azimuth_rad).reshape(4, 5)
    np.testing.assert_allclose(az, np.tile([20.0, 10.0, 0.0, -10.0, -20.0], (4, 1)), atol=1e-9)


def test_table_pattern_replays_its_channel_column(tmp_path: Path) -> None:
    """A fourth CSV column numbers the channels: replayed as each pulse's channel (and the
    pattern has as many channels as the highest number says)."""
    csv = tmp_path / "pattern.csv"
    csv.write_text("time_s,azimuth_deg,elevation_deg,channel\n"
                   "0.0,0,0,0\n0.001,10,5,2\n0.002,20,-5,1\n")  # fmt: skip
    p = pattern_for(_config("table", file=str(csv)))
    s = p.schedule(0, 7)
    assert p.channels == 3
    np.testing.assert_array_equal(s.channel, [0, 2, 1, 0, 2, 1, 0])
    np.testing.assert_allclose(np.degrees(s.azimuth_rad), [0, 10, 20, 0, 10, 20, 0], atol=1e-9)
