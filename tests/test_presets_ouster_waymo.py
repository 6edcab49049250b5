"""The Ouster and Waymo presets against their primary sources, transcribed here on their own.

Each Ouster table below is copied from a real unit's metadata JSON in ouster-lidar/ouster-sdk
at commit 46b7bceee7995914e2f3f3facf4d78418335b2d7 (path named per table): beam_altitude_angles
and beam_azimuth_angles in the SDK's row order (row 0 = the top beam), as the file prints them.
The SDK turns them into directions with (python/src/ouster/sdk/examples/reference.py, lines
50-62; ouster_core/src/xyzlut.cpp, lines 35-75), in the lidar frame:

    theta_encoder = 2 pi (1 - measurement_id / W),  azimuth = theta_encoder - beam_azimuth,
    direction = (cos azimuth cos altitude, sin azimuth cos altitude, sin altitude),
    beam origin = n (cos theta_encoder, sin theta_encoder, 0),

and lidar_to_sensor_transform turns the lidar frame 180 deg about z into the sensor frame
(x forward, y left, z up), the frame of the presets. The tests rebuild those directions here
and compare them with the simulator's schedule.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.config import load_scanner
from simulator.sensor.scanner import pattern_for


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split()]


# ouster-sdk tests/metadata/2_1_2_os1-991913000010-64.json: OS-1-64 (Gen1), SN 991913000010,
# fw v2.1.2, lidar_mode 1024x10, lidar_origin_to_beam_origin_mm 12.163.
OS1_64_ALT = _floats(
    """
    16.729 16.118 15.543 14.995 14.526 13.937 13.381 12.837 12.378 11.801
    11.251 10.704 10.251 9.693 9.138 8.603 8.149 7.594 7.049 6.513
    6.056 5.504 4.961 4.419 3.967 3.424 2.881 2.328 1.88 1.337
    0.787 0.239 -0.205 -0.756 -1.39 -1.854 -2.3 -2.839 -3.386 -3.935
    -4.391 -4.929 -5.472 -6.028 -6.471 -7.02 -7.563 -8.116 -8.572 -9.112
    -9.66 -10.227 -10.687 -11.226 -11.777 -12.35 -12.807 -13.347 -13.902 -14.49
    -14.968 -15.504 -16.078 -16.679
"""
)
OS1_64_AZ = _floats(
    """
    3.073 0.904 -1.261 -3.384 3.048 0.9 -1.235 -3.335 3.029 0.915
    -1.2 -3.301 3.026 0.921 -1.179 -3.268 3.032 0.933 -1.156 -3.23
    3.028 0.953 -1.131 -3.209 3.059 0.976 -1.112 -3.182 3.071 0.99
    -1.087 -3.155 3.097 1.014 -1.103 -3.133 3.118 1.035 -1.039 -3.116
    3.144 1.061 -1.013 -3.101 3.178 1.092 -0.993 -3.089 3.217 1.125
    -0.972 -3.072 3.265 1.159 -0.949 -3.066 3.321 1.204 -0.921 -3.055
    3.381 1.252 -0.898 -3.071
"""
)

# ouster-sdk tests/pcaps/OS-1-128_v2.3.0_1024x10.json: OS-1-128, 840-103575-06 (Rev 06),
# SN 122201000998, fw v2.3.0, lidar_mode 1024x10, lidar_origin_to_beam_origin_mm 15.806.
OS1_128_ALT = _floats(
    """
    20.95 20.67 20.36 20.03 19.73 19.41 19.11 18.76 18.47 18.14
    17.82 17.5 17.19 16.86 16.53 16.2 15.89 15.56 15.23 14.9
    14.57 14.23 13.9 13.57 13.25 12.91 12.57 12.22 11.9 11.55
    11.2 10.87 10.54 10.18 9.84 9.51 9.15 8.81 8.47 8.11
    7.78 7.43 7.08 6.74 6.39 6.04 5.7 5.34 4.98 4.64
    4.29 3.93 3.58 3.24 2.88 2.53 2.17 1.82 1.47 1.12
    0.78 0.41 0.07 -0.28 -0.64 -0.99 -1.35 -1.7 -2.07 -2.4
    -2.75 -3.11 -3.46 -3.81 -4.15 -4.5 -4.86 -5.22 -5.57 -5.9
    -6.27 -6.61 -6.97 -7.3 -7.67 -8.01 -8.35 -8.69 -9.05 -9.38
    -9.71 -10.07 -10.42 -10.76 -11.09 -11.43 -11.78 -12.12 -12.46 -12.78
    -13.15 -13.46 -13.8 -14.12 -14.48 -14.79 -15.11 -15.46 -15.79 -16.12
    -16.45 -16.76 -17.11 -17.44 -17.74 -18.06 -18.39 -18.72 -19.02 -19.32
    -19.67 -19.99 -20.27 -20.57 -20.92 -21.22 -21.54 -21.82
"""
)
OS1_128_AZ = _floats(
    """
    4.21 1.41 -1.4 -4.22 4.22 1.41 -1.4 -4.23 4.21 1.4
    -1.42 -4.2 4.22 1.41 -1.4 -4.23 4.21 1.41 -1.41 -4.21
    4.22 1.4 -1.41 -4.2 4.22 1.42 -1.4 -4.2 4.22 1.41
    -1.42 -4.21 4.22 1.41 -1.4 -4.21 4.2 1.4 -1.4 -4.22
    4.21 1.41 -1.41 -4.21 4.22 1.41 -1.4 -4.21 4.21 1.41
    -1.4 -4.21 4.2 1.41 -1.4 -4.21 4.2 1.4 -1.41 -4.21
    4.22 1.4 -1.4 -4.21 4.22 1.42 -1.4 -4.2 4.2 1.42
    -1.4 -4.22 4.22 1.41 -1.4 -4.2 4.23 1.41 -1.4 -4.2
    4.21 1.41 -1.4 -4.21 4.21 1.41 -1.4 -4.21 4.22 1.41
    -1.39 -4.21 4.23 1.41 -1.39 -4.22 4.23 1.4 -1.4 -4.2
    4.21 1.41 -1.41 -4.2 4.22 1.42 -1.39 -4.22 4.24 1.41
    -1.41 -4.22 4.23 1.41 -1.39 -4.21 4.23 1.41 -1.39 -4.2
    4.23 1.4 -1.39 -4.2 4.22 1.42 -1.39 -4.2
"""
)

# ouster-sdk tests/metadata/2_0_rc2_os-992011000121-32U0_legacy.json: OS-1-32-U0, 840-102145-B,
# SN 992011000121, fw v2.0.0-rc.2, lidar_mode 512x10, lidar_origin_to_beam_origin_mm 15.806.
OS1_32_ALT = _floats(
    """
    20.5477 19.2919 18.0171 16.7242 15.4141 14.088 12.7466 11.3909 10.022 8.641
    7.249 5.8474 4.4377 3.0216 1.601 0.1779 -1.2454 -2.6668 -4.0842 -5.4956
    -6.8994 -8.2939 -9.6778 -11.0499 -12.409 -13.754 -15.0841 -16.3982 -17.6955 -18.975
    -20.2356 -21.4764
"""
)
OS1_32_AZ = _floats(
    """
    -4.252 -4.2518 -4.2517 -4.2518 -4.2521 -4.2526 -4.2534 -4.2543 -4.2555 -4.2568
    -4.2582 -4.2596 -4.2608 -4.2618 -4.2625 -4.2628 -4.2626 -4.262 -4.2611 -4.2599
    -4.2586 -4.2572 -4.2558 -4.2546 -4.2536 -4.2528 -4.2522 -4.2518 -4.2517 -4.2517
    -4.2519 -4.2521
"""
)

# ouster-sdk tests/pcaps/OS-2-128-U1_v2.3.0_1024x10.json: OS-2-128, 840-103576-06 (Rev 06),
# SN 992210000957, fw v2.3.0, lidar_mode 1024x10, lidar_origin_to_beam_origin_mm 13.762.
OS2_128_ALT = _floats(
    """
    10.76 10.58 10.42 10.24 10.1 9.93 9.76 9.57 9.41 9.24
    9.09 8.91 8.75 8.57 8.41 8.23 8.08 7.9 7.74 7.55
    7.39 7.21 7.03 6.86 6.7 6.53 6.35 6.18 6.02 5.83
    5.67 5.5 5.32 5.14 4.97 4.81 4.63 4.46 4.28 4.11
    3.95 3.76 3.58 3.43 3.24 3.07 2.9 2.72 2.55 2.37
    2.21 2.03 1.87 1.69 1.51 1.32 1.16 0.98 0.81 0.63
    0.46 0.29 0.11 -0.05 -0.25 -0.42 -0.58 -0.76 -0.93 -1.11
    -1.28 -1.45 -1.63 -1.81 -1.97 -2.16 -2.32 -2.5 -2.68 -2.85
    -3.02 -3.19 -3.37 -3.55 -3.73 -3.9 -4.07 -4.25 -4.4 -4.58
    -4.75 -4.94 -5.11 -5.28 -5.46 -5.64 -5.8 -5.96 -6.15 -6.32
    -6.49 -6.66 -6.84 -7.0 -7.17 -7.35 -7.51 -7.69 -7.86 -8.04
    -8.22 -8.38 -8.55 -8.72 -8.89 -9.06 -9.23 -9.4 -9.57 -9.74
    -9.91 -10.07 -10.24 -10.41 -10.58 -10.75 -10.92 -11.09
"""
)
OS2_128_AZ = _floats(
    """
    2.07 0.66 -0.71 -2.08 2.07 0.69 -0.7 -2.09 2.06 0.67
    -0.71 -2.06 2.06 0.69 -0.71 -2.07 2.07 0.69 -0.71 -2.07
    2.07 0.69 -0.7 -2.08 2.05 0.68 -0.69 -2.06 2.06 0.69
    -0.69 -2.07 2.08 0.69 -0.69 -2.06 2.08 0.69 -0.69 -2.07
    2.08 0.69 -0.69 -2.05 2.08 0.7 -0.68 -2.06 2.09 0.7
    -0.67 -2.05 2.08 0.7 -0.68 -2.05 2.08 0.71 -0.67 -2.06
    2.08 0.71 -0.68 -2.05 2.07 0.71 -0.67 -2.05 2.08 0.7
    -0.68 -2.05 2.09 0.71 -0.66 -2.05 2.09 0.71 -0.67 -2.05
    2.09 0.71 -0.66 -2.05 2.1 0.71 -0.66 -2.05 2.09 0.73
    -0.67 -2.05 2.1 0.72 -0.66 -2.05 2.09 0.72 -0.66 -2.05
    2.11 0.73 -0.69 -2.03 2.1 0.72 -0.65 -2.04 2.11 0.72
    -0.67 -2.05 2.1 0.72 -0.66 -2.04 2.11 0.72 -0.66 -2.04
    2.1 0.72 -0.65 -2.03 2.11 0.73 -0.66 -2.04
"""
)

# waymo-open-dataset @ 99a4cb3ff07e2fe06c2ce73da001f850f628e45a,
# src/waymo_open_dataset/utils/testdata/pvps_data_one_frame.tfrecord (blob a0306f9c7ae6): the
# Frame's Context.laser_calibrations, TOP (name 1), beam_inclinations in radians, in the file's
# order (ascending: the bottom beam first), every float64 as Python's repr prints it.
WAYMO_TOP_INCLINATIONS_RAD = _floats(
    """
    -0.3062496301683044 -0.29516893681303036 -0.28449344065521887 -0.2738296176840642
    -0.26313358188635294 -0.25372659188569746 -0.2440640640990024 -0.2345344897853754
    -0.225296834730498 -0.21580022272035237 -0.20634880274115197 -0.19778418616273097
    -0.18901440446153273 -0.18097437867597632 -0.17253043625263098 -0.1644357579306479
    -0.15633346596078224 -0.1487457268120973 -0.14105385093618628 -0.13343975875184566
    -0.12650199856453948 -0.11947037211004607 -0.11270063862125146 -0.1063099263181444
    -0.09975420854649997 -0.09356426735422207 -0.08768368105944369 -0.08170518141526317
    -0.07619334777022346 -0.07100080722501634 -0.06581034306492084 -0.0604799188917613
    -0.05600400918923287 -0.05105926130557581 -0.046572362230800524 -0.04254147875366732
    -0.03821293431478101 -0.034294609174740254 -0.03066653441035938 -0.02689425708927229
    -0.023857607169294193 -0.020745472812761845 -0.01779799770194912 -0.014747666226994971
    -0.011916447844428468 -0.0088217165929656 -0.00596922589343496 -0.0033035380142032444
    -0.00020284092259315045 0.0028732110061144844 0.0055878271187523865 0.008436397490958703
    0.01131329618399568 0.014139782550373736 0.017302758221248382 0.020302563899257553
    0.023075982893805413 0.02607291412428836 0.02880215294252597 0.031781309964403315
    0.03471180364289794 0.03770246734582772 0.04051627836095428 0.04368278080575827
"""
)

FWHM_TO_1E2 = 1.0 / math.sqrt(math.log(2.0) / 2.0)  # Gaussian: full angle at 1/e^2 over FWHM


def _frame(name: str):
    scanner = load_scanner(name)
    pattern = pattern_for(scanner)
    return scanner, pattern, pattern.schedule(0, pattern.frame_pulses)


def _check_ouster(
    name: str,
    alt: list[float],
    az: list[float],
    columns: int,
    rate_hz: float,
    origin_mm: float,
) -> None:
    """What every Ouster preset owes its metadata JSON: tables, mode, spin, start, origin."""
    scanner, pattern, sched = _frame(name)
    n = len(alt)
    ch = scanner.channels
    assert ch.count == n == len(az)
    assert ch.elevation_deg == alt  # exactly, in the SDK's row order
    assert ch.azimuth_offset_deg == [-a for a in az]  # the SDK's azimuth is -beam_azimuth
    assert ch.firing_offset_us == [0.0] * n  # one timestamp per column
    assert scanner.firings_per_revolution == columns
    assert scanner.rotation_hz == rate_hz
    assert scanner.rotation == "clockwise"
    assert scanner.start_azimuth_deg == 180.0
    assert scanner.beam_origin_offset_m == pytest.approx(origin_mm / 1000.0, abs=1e-12)
    assert pattern.pulses_per_second == pytest.approx(columns * rate_hz * n, rel=1e-12)
    assert pattern.frame_pulses == columns * n

    # The SDK's own directions and beam origins (lidar frame, then turned 180 deg about z).
    col = np.repeat(np.arange(columns), n)
    row = np.tile(np.arange(n), columns)
    theta_e = 2.0 * np.pi * (1.0 - col / columns)
    azimuth = theta_e - np.radians(np.asarray(az))[row]
    altitude = np.radians(np.asarray(alt))[row]
    d_lidar = np.stack(
        [np.cos(azimuth) * np.cos(altitude), np.sin(azimuth) * np.cos(altitude), np.sin(altitude)],
        axis=1,
    )
    o_lidar = (
        origin_mm
        / 1000.0
        * np.stack([np.cos(theta_e), np.sin(theta_e), np.zeros_like(theta_e)], axis=1)
    )
    to_sensor = np.array([-1.0, -1.0, 1.0])  # lidar_to_sensor_transform's rotation
    np.testing.assert_allclose(sched.direction, d_lidar * to_sensor, atol=1e-9)
    np.testing.assert_allclose(sched.origin_m, o_lidar * to_sensor, atol=1e-12)

    # Spin: the head azimuth of consecutive columns DEcreases by 360 / W (clockwise from above).
    for c in (0, n - 1):
        a = np.unwrap(sched.azimuth_rad[c::n])
        np.testing.assert_allclose(np.diff(a), -2.0 * np.pi / columns, atol=1e-9)
    # Column 0 looks at the connector, sensor -x (the lidar frame's encoder angle 0).
    head0 = sched.azimuth_rad[:n] - np.radians(ch.azimuth_offset_deg)
    np.testing.assert_allclose(np.cos(head0), -1.0, atol=1e-12)

    # The vertical field of view the schedule sweeps is the table's.
    el = np.degrees(sched.elevation_rad)
    assert el.max() == pytest.approx(max(alt), abs=1e-9)
    assert el.min() == pytest.approx(min(alt), abs=1e-9)
    assert scanner.intensity_max == 255.0 and scanner.intensity_step == 1.0  # 8-bit field


def test_os1_64_gen1_unit() -> None:
    """OS1-64 Gen1, unit 991913000010: 1024 x 10, 12.163 mm, Gen1 datasheet figures."""
    _check_ouster("os1-64", OS1_64_ALT, OS1_64_AZ, 1024, 10.0, 12.163)
    scanner, pattern, sched = _frame("os1-64")
    # Datasheet "OS1 High Resolution Imaging LIDAR" (Gen1): 1,310,720 points/s for 64 channels,
    # the 2048-column mode at 10 Hz; this unit runs 1024 x 10: half of it.
    assert pattern.pulses_per_second * 2 == 1_310_720
    # Gen1 datasheet: vertical FOV +16.6 to -16.6 (33.2 deg); the unit's calibration: 33.408.
    span = np.ptp(np.degrees(sched.elevation_rad))
    assert span == pytest.approx(16.729 + 16.679, abs=1e-9)
    assert span == pytest.approx(33.2, abs=0.25)
    # Gen1 datasheet: 850 nm, 0.13 deg FWHM divergence (64 channel).
    assert scanner.wavelength_nm == 850.0
    full = math.radians(0.13) * 1000.0 * FWHM_TO_1E2
    assert scanner.divergence_mrad.horizontal == pytest.approx(full, abs=1e-3)
    assert scanner.divergence_mrad.vertical == pytest.approx(full, abs=1e-3)
    assert (scanner.detection.reference_range_m, scanner.detection.reference_reflectance) == (
        40.0,
        0.1,
    )


def test_os1_128_rev06_unit() -> None:
    """OS1-128 Rev 06, unit 122201000998: 1024 x 10, 15.806 mm, Rev C datasheet figures."""
    _check_ouster("os1-128", OS1_128_ALT, OS1_128_AZ, 1024, 10.0, 15.806)
    scanner, pattern, sched = _frame("os1-128")
    # Datasheet "OS1 Mid-Range High-Resolution Imaging Lidar" Rev C (09/29/22): 2,621,440
    # points/s for 128 channels, the 2048 x 10 mode; this unit runs 1024 x 10.
    assert pattern.pulses_per_second * 2 == 2_621_440
    # Rev C datasheet: vertical FOV 45 deg (+22.5 to -22.5); the unit's calibration spans 42.77.
    el = np.degrees(sched.elevation_rad)
    assert np.ptp(el) == pytest.approx(20.95 + 21.82, abs=1e-9)
    assert el.min() >= -22.5 and el.max() <= 22.5 and np.ptp(el) > 42.0
    full = math.radians(0.18) * 1000.0 * FWHM_TO_1E2  # Rev C: 0.18 deg FWHM
    assert scanner.divergence_mrad.horizontal == pytest.approx(full, abs=1e-3)
    assert scanner.wavelength_nm == 865.0
    # Rev C: 55 m at 10 % Lambertian, >50 % detection probability; 1-sigma 1 cm at 1-20 m.
    assert scanner.detection.reference_range_m == 55.0
    assert scanner.detection.reference_reflectance == 0.1
    assert scanner.range_noise_m == 0.01
    assert scanner.range_resolution_m == 0.008  # RNG15_RFL8_NIR8, the low data rate profile


def test_os1_32_u0_unit() -> None:
    """OS1-32 U0, unit 992011000121: 512 x 10, 15.806 mm, one azimuth offset for all beams."""
    _check_ouster("os1-32", OS1_32_ALT, OS1_32_AZ, 512, 10.0, 15.806)
    scanner, pattern, sched = _frame("os1-32")
    # Rev C datasheet: 655,360 points/s for 32 channels (2048 x 10); this unit runs 512 x 10.
    assert pattern.pulses_per_second * 4 == 655_360
    el = np.degrees(sched.elevation_rad)
    assert np.ptp(el) == pytest.approx(20.5477 + 21.4764, abs=1e-9)
    assert el.min() >= -22.5 and el.max() <= 22.5 and np.ptp(el) > 42.0
    # Every beam of this unit sits 4.25 deg ahead in the clockwise sweep: a smaller azimuth.
    assert all(4.25 < o < 4.27 for o in scanner.channels.azimuth_offset_deg)


def test_os2_128_rev06_unit() -> None:
    """OS2-128 Rev 06, unit 992210000957: 1024 x 10, 13.762 mm (no OS2 datasheet found)."""
    _check_ouster("os2-128", OS2_128_ALT, OS2_128_AZ, 1024, 10.0, 13.762)
    scanner, pattern, sched = _frame("os2-128")
    assert pattern.pulses_per_second == 1024 * 10 * 128
    # Only a secondary source gives the OS2 vertical FOV (22.5 deg); the unit spans 21.85.
    el = np.degrees(sched.elevation_rad)
    assert np.ptp(el) == pytest.approx(10.76 + 11.09, abs=1e-9)
    assert np.ptp(el) < 22.5
    assert scanner.wavelength_nm == 865.0


def test_waymo_top() -> None:
    """Waymo Open Dataset TOP lidar: 64 rows, +2.50 to -17.55 deg, 2650 columns, 10 Hz, 75 m.

    Sun et al., CVPR 2020, Table 2 (75 m); waymo-research/waymo-open-dataset @ 99a4cb3f:
    TOP range image [64, 2650] (v2/perception/compat_v1/lidar_test.py), column azimuths from
    utils/range_image_utils.py compute_range_image_polar,
    az(c) = (2 (W - c - 0.5) / W - 1) pi, vehicle frame; row 0 the highest inclination
    (utils/frame_utils.py reverses beam_inclinations); the inclinations of the test frame's
    TOP calibration (WAYMO_TOP_INCLINATIONS_RAD above).
    """
    rows, width, rate = 64, 2650, 10.0
    scanner, pattern, sched = _frame("waymo-top")
    assert scanner.channels.count == rows
    assert scanner.firings_per_revolution == width and scanner.rotation_hz == rate
    assert pattern.pulses_per_second == pytest.approx(rows * width * rate, rel=1e-12)
    assert scanner.range_max_m == 75.0
    assert scanner.returns_per_pulse == 2  # ri_return1, ri_return2

    # The file lists the beams bottom first; the range image's row 0 is the top beam.
    source = WAYMO_TOP_INCLINATIONS_RAD
    assert len(source) == rows and source == sorted(source)  # ascending in the file
    expected_el = np.degrees(source[::-1])  # row order: top row first
    got_el = np.asarray(scanner.channels.elevation_deg)
    assert scanner.channels.elevation_deg == [round(float(e), 6) for e in expected_el]
    np.testing.assert_allclose(got_el, expected_el, rtol=0, atol=5e-7)  # rounded to 1e-6 deg
    assert (round(got_el[0], 2), round(got_el[-1], 2)) == (2.50, -17.55)
    # Non-uniform: neighbouring rows 0.153 to 0.635 deg apart (the spread of the spacing is
    # about half its mean), up to 4.27 deg off a uniform spread between the same ends.
    spacing = -np.diff(got_el)
    assert spacing.min() > 0.0  # strictly descending rows
    assert (round(spacing.min(), 3), round(spacing.max(), 3)) == (0.153, 0.635)
    assert np.std(spacing) / np.mean(spacing) == pytest.approx(0.481, abs=0.001)
    uniform = np.linspace(got_el[0], got_el[-1], rows)
    assert np.abs(got_el - uniform).max() == pytest.approx(4.273, abs=0.001)
    assert scanner.channels.azimuth_offset_deg == [0.0] * rows
    el = np.degrees(sched.elevation_rad)
    assert el.max() == pytest.approx(got_el[0], abs=1e-9)
    assert el.min() == pytest.approx(got_el[-1], abs=1e-9)
    np.testing.assert_allclose(el[:rows], got_el, atol=1e-9)  # ring c fires row c

    c = np.arange(width)
    expected_az = (2.0 * (width - c - 0.5) / width - 1.0) * np.pi
    for ring in (0, rows - 1):
        got = sched.azimuth_rad[ring::rows]
        np.testing.assert_allclose(np.angle(np.exp(1j * (got - expected_az))), 0.0, atol=1e-6)
        # Clockwise: the azimuth of consecutive columns decreases.
        np.testing.assert_allclose(np.diff(np.unwrap(got)), -2.0 * np.pi / width, atol=1e-9)
    # Column 0 at the rear (+179.93 deg), the front (0 deg) between columns 1324 and 1325.
    az0 = np.degrees(sched.azimuth_rad[0])
    assert az0 == pytest.approx(180.0 - 180.0 / width, abs=1e-6)
    front = np.degrees(np.angle(np.exp(1j * sched.azimuth_rad[[1324 * rows, 1325 * rows]])))
    np.testing.assert_allclose(front, [180.0 / width, -180.0 / width], atol=1e-6)
