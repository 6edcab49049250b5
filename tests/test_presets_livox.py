"""The Livox presets against their sources, and the Risley prisms' refraction.

Sources: HELIOS++'s scanner definitions (3dgeo-heidelberg/helios
python/pyhelios/data/scanners_tls.xml @ fd94d1ff: "livox-avia-non-repetitive",
"livox_mid-70") for the optics, Livox's specifications for the field of view and rates.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config import ScannerConfig, load_scanner
from simulator.sensor.scanner import pattern_for


def _directions(name_or_config: str | dict, seconds: float) -> np.ndarray:
    scanner = (
        load_scanner(name_or_config)
        if isinstance(name_or_config, str)
        else ScannerConfig.model_validate(name_or_config)
    )
    pattern = pattern_for(scanner)
    return pattern.schedule(0, round(seconds * pattern.pulses_per_second)).direction


def _fov_deg(direction: np.ndarray) -> tuple[float, float, float]:
    """Horizontal and vertical spans and the full cone angle about +x, deg."""
    az = np.degrees(np.arctan2(direction[:, 1], direction[:, 0]))
    el = np.degrees(np.arcsin(direction[:, 2]))
    cone = 2.0 * np.degrees(np.arccos(np.clip(direction[:, 0], -1.0, 1.0))).max()
    return float(np.ptp(az)), float(np.ptp(el)), float(cone)


def test_avia_matches_its_sources() -> None:
    """HELIOS++'s optics (3 prisms, entry faces tilted, n = 1.51, six emitters at 40 kHz)
    fill Livox's 70.4 x 77.2 deg to within 1 deg; 240,000 points/s in 6 lines."""
    s = load_scanner("livox-avia")
    r = s.risley
    assert [(p.rotation_hz, p.wedge_deg, p.tilted_face) for p in r.prisms] == [
        (-131.5463, 30.8856, "entry"),
        (40.8032, 29.7735, "entry"),
        (213.1611, 3.1351, "entry"),
    ]
    assert r.refractive_index == 1.51 and r.refraction == "exact"
    helios_fan_deg = [-2.990, -1.855, -0.619, 0.619, 1.855, 3.039]  # atan(x / y) of H's beams
    assert [o[1] for o in r.channel_offsets_deg] == [-a for a in helios_fan_deg]
    pattern = pattern_for(s)
    assert pattern.channels == 6 and pattern.pulses_per_second == 240_000
    h, v, _ = _fov_deg(_directions("livox-avia", 1.0))
    assert h == pytest.approx(70.4, abs=1.0)
    assert v == pytest.approx(77.2, abs=1.0)
    assert (s.range_noise_m, s.intensity_scale, s.intensity_step) == (0.02, 150.0, 1.0)


def test_mid70_matches_its_sources() -> None:
    """Two prisms tilted on opposite faces (HELIOS++'s -29.7 / +29.7 deg) fill Livox's
    70.4 deg circle to within 1 deg, reaching the centre; 100,000 points/s."""
    s = load_scanner("livox-mid70")
    assert [(p.rotation_hz, p.wedge_deg, p.tilted_face) for p in s.risley.prisms] == [
        (-77.733333333, 29.7, "exit"),
        (121.566666666, 29.7, "entry"),
    ]
    assert pattern_for(s).pulses_per_second == 100_000
    d = _directions("livox-mid70", 1.0)
    h, v, cone = _fov_deg(d)
    assert cone == pytest.approx(70.4, abs=1.0)
    assert h == pytest.approx(cone, abs=0.5) and v == pytest.approx(cone, abs=0.5)  # circular
    assert np.degrees(np.arccos(d[:, 0].max())) < 0.5  # the rosette passes the centre


def test_mid70_with_both_tilts_on_the_exit_face_is_not_the_sensor() -> None:
    """The old model's flat-face-first prisms give a cone far wider than 70.4 deg with these
    numbers: which face is tilted matters."""
    data = load_scanner("livox-mid70").model_dump()
    for prism in data["risley"]["prisms"]:
        prism["tilted_face"] = "exit"
    _, _, cone = _fov_deg(_directions(data, 0.2))
    assert abs(cone - 70.4) > 10.0


def _one_prism(face: str, wedge_deg: float, n: float) -> np.ndarray:
    config = load_scanner("livox-mid70").model_dump()
    config["risley"]["prisms"] = [
        {"rotation_hz": 0.0, "wedge_deg": wedge_deg, "tilted_face": face, "phase_deg": 90.0}
    ]
    config["risley"]["refractive_index"] = n
    return _directions(config, 1e-4)[0]


@pytest.mark.parametrize("wedge_deg", [5.0, 18.0, 29.7])
def test_a_still_prism_deviates_the_beam_by_snells_law_at_both_faces(wedge_deg: float) -> None:
    """One still prism, the tilt towards +z: a beam along the axis leaves deviated in the
    x-z plane by the textbook angle. Exit face tilted: asin(n sin a) - a. Entry face
    tilted: in at a, refracted to b = asin(sin a / n), meets the flat face at a - b, leaves
    at asin(n sin(a - b)). The two differ, and neither is the thin prism's (n - 1) a."""
    a, n = np.radians(wedge_deg), 1.51
    exit_dev = np.arcsin(n * np.sin(a)) - a
    b = np.arcsin(np.sin(a) / n)
    entry_dev = np.arcsin(n * np.sin(a - b))
    for face, expected in (("exit", exit_dev), ("entry", entry_dev)):
        d = _one_prism(face, wedge_deg, n)
        assert abs(d[1]) < 1e-12  # stays in the x-z plane
        assert np.arctan2(abs(d[2]), d[0]) == pytest.approx(expected, rel=1e-12)
    assert abs(exit_dev - entry_dev) > 1e-4
    assert abs(entry_dev - (n - 1.0) * a) > 5e-5


def test_total_internal_reflection_keeps_the_direction_before_the_face() -> None:
    """A 45 deg exit face in glass of n = 1.51 reflects the beam totally (sin 45 > 1/1.51):
    it leaves along the axis as it arrived, as HELIOS++ keeps the previous direction."""
    d = _one_prism("exit", 45.0, 1.51)
    np.testing.assert_allclose(d, [1.0, 0.0, 0.0], atol=1e-15)
    assert np.isfinite(d).all()


def test_emitters_fire_in_turn() -> None:
    """Pulse p is emitter p mod 6, fired at p / 240 kHz (4.167 us apart, as the driver
    numbers the points), not all six at once."""
    pattern = pattern_for(load_scanner("livox-avia"))
    sched = pattern.schedule(0, 24)
    np.testing.assert_array_equal(sched.channel, np.arange(24) % 6)
    np.testing.assert_allclose(sched.time_s, np.arange(24) / 240_000.0, rtol=0, atol=1e-15)


def _mid360_model(pulses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The formula configs/scanners/livox-mid360.yaml states for its synthetic table."""
    k = pulses % 4
    t = pulses / 200_000.0
    az = np.mod(360.0 * 10.0 * t + 90.0 * k, 360.0)
    az = np.where(az > 180.0, az - 360.0, az)
    f_el = 10.0 * (5.0 + (1.0 + 5.0**0.5) / 2.0)
    el = -7.0 + 59.0 * 0.5 * (1.0 - np.cos(2.0 * np.pi * (f_el * t + k / 4.0)))
    return t, k, az, el


def test_mid360_covers_the_datasheet_fov_and_rate() -> None:
    """Livox Mid-360 User Manual v1.0 (as quoted): 360 x -7..+52 deg, 200,000 points/s,
    0.1-40 m at 10 % (70 m at 80 %), 1 sigma <= 2 cm, 905 nm. The synthetic table replays
    the YAML's formula; one 1 s frame reaches both elevation limits, the 1 x 1 deg grid over
    the field of view is 19.5 % hit in 0.1 s and 99.1 % in 1 s."""
    s = load_scanner("livox-mid360")
    assert s.pattern == "table" and s.table.period_s == 1.0
    assert (s.range_min_m, s.range_max_m, s.range_noise_m, s.wavelength_nm) == (
        0.1,
        70.0,
        0.02,
        905.0,
    )
    assert (s.detection.reference_range_m, s.detection.reference_reflectance) == (40.0, 0.1)
    pattern = pattern_for(s)
    assert pattern.pulses_per_second == 200_000
    assert pattern.channels == 4 and pattern.frame_pulses == 200_000

    sched = pattern.schedule(0, pattern.frame_pulses)
    t, k, az, el = _mid360_model(np.arange(200_000))
    np.testing.assert_allclose(sched.time_s, t, rtol=0, atol=5e-7)  # 1e-6 s in the table
    np.testing.assert_array_equal(sched.channel, k)
    got_az = np.degrees(np.arctan2(sched.direction[:, 1], sched.direction[:, 0]))
    got_el = np.degrees(np.arcsin(sched.direction[:, 2]))
    np.testing.assert_allclose(np.angle(np.exp(1j * np.radians(got_az - az))), 0, atol=1e-5)
    np.testing.assert_allclose(got_el, el, rtol=0, atol=6e-4)  # 1e-3 deg in the table
    assert got_el.min() == pytest.approx(-7.0, abs=1e-3)
    assert got_el.max() == pytest.approx(52.0, abs=1e-3)
    assert got_az.min() < -179.9 and got_az.max() > 179.9

    def covered(n: int) -> float:
        col = np.clip(np.floor(got_az[:n] + 180.0).astype(int), 0, 359)  # 1 deg cells
        row = np.clip(np.floor(got_el[:n] + 7.0).astype(int), 0, 58)
        cells = np.unique(col * 100 + row)
        return len(cells) / (360 * 59)

    assert covered(20_000) == pytest.approx(0.195, abs=0.002)  # 0.1 s
    assert covered(200_000) == pytest.approx(0.991, abs=0.002)  # 1 s
    # The table repeats after 1 s: the next second replays the first, 1 s later.
    again = pattern.schedule(200_000, 200_010)
    np.testing.assert_allclose(again.direction, sched.direction[:10], atol=1e-12)
    np.testing.assert_allclose(again.time_s, sched.time_s[:10] + 1.0, atol=1e-9)
