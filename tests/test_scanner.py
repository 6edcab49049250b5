"""Scanner presets and the spinning pattern's firing schedule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import ScannerConfig, load_scanner, scanner_presets
from simulator.sensor.scanner import SpinningPattern, pattern_for

from .conftest import single_channel_scanner

# Laser-id order: lasers 18/19 are -16/-13 and 22/23 are -28/-25 (nebula's Helios5515.csv,
# settled on nebula's real frame in tests/test_real_beams.py).
HELIOS_ELEVATIONS = [
    15, 13, 11, 9, 7, 5.5, 4, 2.67, 1.33, 0, -1.33, -2.67, -4, -5.33, -6.67, -8,
    -10, -16, -13, -19, -22, -28, -25, -31, -34, -37, -40, -43, -46, -49, -52, -55,
]  # fmt: skip
VLP16_ELEVATIONS = [-15, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15]


def test_presets_are_bundled() -> None:
    assert {"rs-helios-5515", "vlp-16"} <= set(scanner_presets())


def test_helios_preset_matches_the_manual() -> None:
    s = load_scanner("rs-helios-5515")
    assert s.channels.elevation_deg == HELIOS_ELEVATIONS
    assert pattern_for(s).pulses_per_second == pytest.approx(576_000.0)
    assert s.firing_period_s == pytest.approx(55.56e-6, abs=0.01e-6)
    assert s.rotation == "clockwise"
    assert s.divergence_mrad.vertical == 6.9
    assert (s.range_min_m, s.range_max_m, s.range_resolution_m) == (0.2, 150.0, 0.0025)
    assert s.beam_origin_offset_m == 0.03498
    offsets = s.channels.firing_offset_us
    assert offsets is not None and len(offsets) == 32
    assert offsets[:20] == [
        0.0,
        1.57,
        3.15,
        4.72,
        6.30,
        7.87,
        9.45,
        11.36,
        13.26,
        15.17,
        17.08,
        18.99,
        20.56,
        22.14,
        23.71,
        25.29,
        26.53,
        29.01,
        27.77,
        30.25,
    ]
    assert offsets[-1] == 45.15 and max(offsets) < s.firing_period_s * 1e6


def test_vlp16_preset_matches_the_manual() -> None:
    s = load_scanner("vlp-16")
    assert s.channels.elevation_deg == VLP16_ELEVATIONS
    assert pattern_for(s).pulses_per_second == pytest.approx(289_000, rel=0.002)
    assert 360.0 / s.firings_per_revolution == pytest.approx(0.2, rel=0.005)
    offsets = np.asarray(s.channels.firing_offset_us)
    np.testing.assert_allclose(np.diff(offsets), 2.304, atol=1e-9)


def _pattern(**kw: object) -> SpinningPattern:
    return SpinningPattern(ScannerConfig.model_validate(single_channel_scanner(**kw)))


def test_schedule_times_channels_and_clockwise_azimuth() -> None:
    s = load_scanner("rs-helios-5515")
    p = SpinningPattern(s)
    sched = p.schedule(0, 32 * 4)
    firing = np.arange(32 * 4) // 32
    ring = np.arange(32 * 4) % 32
    np.testing.assert_array_equal(sched.channel, ring)
    expected_t = firing / 18_000.0 + np.asarray(s.channels.firing_offset_us)[ring] * 1e-6
    np.testing.assert_allclose(sched.time_s, expected_t, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.degrees(sched.elevation_rad), np.asarray(HELIOS_ELEVATIONS)[ring])
    # Clockwise seen from above: the head azimuth falls by 0.2 deg per firing.
    az0 = np.unwrap(sched.azimuth_rad[ring == 0])
    np.testing.assert_allclose(np.degrees(np.diff(az0)), -0.2, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(sched.direction, axis=1), 1.0, atol=1e-15)
    # Beam origins sit on the 34.98 mm circle round the spin axis, in the head's direction.
    np.testing.assert_allclose(np.linalg.norm(sched.origin_m, axis=1), 0.03498, atol=1e-15)


def test_counter_clockwise_and_offsets() -> None:
    p = _pattern(
        rotation="counter_clockwise",
        start_azimuth_deg=90.0,
        channels={
            "elevation_deg": [0.0, 10.0],
            "azimuth_offset_deg": [0.0, 5.0],
            "firing_offset_us": [0.0, 10.0],
        },
    )
    sched = p.schedule(0, 4)
    period = 1.0 / (10.0 * 3600)
    np.testing.assert_allclose(sched.time_s, [0, 10e-6, period, period + 10e-6], atol=1e-15)
    head_deg = 90.0 + 360.0 * 10.0 * sched.time_s
    offsets = np.array([0.0, 5.0, 0.0, 5.0])
    np.testing.assert_allclose(np.degrees(sched.azimuth_rad), head_deg + offsets, atol=1e-9)


def test_survey_length_in_revolutions_or_seconds() -> None:
    p = SpinningPattern(load_scanner("rs-helios-5515"))
    assert p.pulses_for(1, None) == 1800 * 32
    assert p.pulses_for(None, 0.025) == 450 * 32
    assert p.pulses_for(2.5, None) == 4500 * 32


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**9), st.integers(1, 5000))
def test_any_chunk_of_the_schedule_equals_the_slice_of_a_longer_one(start: int, n: int) -> None:
    """Pulse ids are global: a chunk generated alone equals the same pulses generated in bulk."""
    p = SpinningPattern(load_scanner("rs-helios-5515"))
    whole = p.schedule(start, start + n + 100)
    part = p.schedule(start + 50, start + 50 + n)
    for name in ("pulse_id", "time_s", "channel", "azimuth_rad", "direction", "origin_m"):
        np.testing.assert_array_equal(getattr(part, name), getattr(whole, name)[50 : 50 + n])


def test_channel_tables_must_match_in_length() -> None:
    with pytest.raises(ValueError, match="firing_offset_us has 1 entries; expected 2"):
        ScannerConfig.model_validate(
            single_channel_scanner(channels={"elevation_deg": [0, 1], "firing_offset_us": [0]})
        )


def test_range_window_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="range_min_m"):
        ScannerConfig.model_validate(single_channel_scanner(range_min_m=5.0, range_max_m=2.0))


def test_block_firing_azimuth_leaves_out_the_turn_during_the_firing_delay() -> None:
    """``firing_azimuth: block`` (a decoder's view) aims channel c of firing f at the head's
    azimuth at the firing's start plus c's offset; ``physical`` (the default) turns it on
    by the spin during c's firing delay, 2 pi x rotation_hz x firing_offset (Pandar64:
    up to 0.187 deg at 10 Hz). Firing times are the same."""
    scanner = load_scanner("pandar64")
    physical = pattern_for(scanner).schedule(0, 64 * 5)
    block = pattern_for(scanner.model_copy(update={"firing_azimuth": "block"})).schedule(0, 64 * 5)
    np.testing.assert_array_equal(block.time_s, physical.time_s)
    p = pattern_for(scanner)
    firing = np.arange(64 * 5) // 64
    channel = np.arange(64 * 5) % 64
    head = np.radians(scanner.start_azimuth_deg) - 2 * np.pi * scanner.rotation_hz * (
        firing * p.period_s
    )
    expected = np.mod(head, 2 * np.pi) + p.azimuth_offset_rad[channel]

    def wrapped(a: np.ndarray) -> np.ndarray:
        return np.angle(np.exp(1j * a))

    np.testing.assert_allclose(wrapped(block.azimuth_rad - expected), 0.0, rtol=0, atol=1e-12)
    turn = np.degrees(wrapped(block.azimuth_rad - physical.azimuth_rad))
    lag = 360.0 * scanner.rotation_hz * p.firing_offset_s[channel]
    np.testing.assert_allclose(turn, lag, rtol=0, atol=1e-9)  # clockwise: physical is behind
    assert round(lag.max(), 6) == 0.186984  # 51.94 us after the firing's start, at 10 Hz
