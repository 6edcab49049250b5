"""The RoboSense presets against their sources.

Firing offsets: tier4/nebula nebula_decoders/include/nebula_decoders/nebula_decoders_robosense/
decoders/helios.hpp @ 07d898f8, ``firing_time_offset_ns_[0]`` (block 0), in ns.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config import load_scanner
from simulator.sensor.scanner import pattern_for

NEBULA_HELIOS_BLOCK0_NS = [
    0, 1570, 3150, 4720, 6300, 7870, 9450, 11360, 13260, 15170, 17080,
    18990, 20560, 22140, 23710, 25290, 26530, 29010, 27770, 30250, 31490, 32730,
    33980, 35220, 36460, 37700, 38940, 40180, 41420, 42670, 43910, 45150,
]  # fmt: skip
# Laser-id order (nebula's Helios5515.csv; settled on nebula's real frame in
# tests/test_real_beams.py): lasers 18/19 are -16/-13 and 22/23 are -28/-25.
HELIOS_5515_DEG = [
    15.0, 13.0, 11.0, 9.0, 7.0, 5.5, 4.0, 2.67, 1.33, 0.0, -1.33, -2.67, -4.0, -5.33, -6.67,
    -8.0, -10.0, -16.0, -13.0, -19.0, -22.0, -28.0, -25.0, -31.0, -34.0, -37.0, -40.0, -43.0,
    -46.0, -49.0, -52.0, -55.0,
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "elevations", "fov"),
    [("rs-helios-5515", HELIOS_5515_DEG, (-55.0, 15.0)),
     ("rs-helios-1615", [15.0 - k for k in range(32)], (-16.0, 15.0))],
)  # fmt: skip
def test_helios_presets_match_their_sources(name: str, elevations: list, fov: tuple) -> None:
    """Angles in channel order, nebula's firing offsets, 18,000 blocks/s clockwise, the
    0.2-150 m window, uint8 reflectivity, and the vertical FOV the pattern spans."""
    s = load_scanner(name)
    assert s.channels.elevation_deg == elevations
    np.testing.assert_allclose(
        s.channels.firing_offset_us, np.array(NEBULA_HELIOS_BLOCK0_NS) / 1000.0, rtol=0, atol=1e-12
    )
    pattern = pattern_for(s)
    assert pattern.period_s == pytest.approx(1.0 / 18_000.0)
    assert pattern.pulses_per_second == pytest.approx(576_000.0)
    assert (s.range_min_m, s.range_max_m) == (0.2, 150.0)
    assert (s.intensity_scale, s.intensity_max, s.intensity_step) == (100.0, 255.0, 1.0)
    sched = pattern.schedule(0, 32 * 1800)
    el = np.degrees(sched.elevation_rad)
    assert (el.min(), el.max()) == pytest.approx(fov, abs=1e-9)
    head = np.unwrap(sched.azimuth_rad[sched.channel == 0])
    assert np.all(np.diff(head) < 0)  # clockwise: the azimuth falls
    assert np.degrees(head[0] - head[-1]) == pytest.approx(360.0 - 0.2, abs=1e-6)
