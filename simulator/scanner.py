"""Scan patterns: from a scanner model to its firing schedule.

A firing schedule lists, for a range of global pulse ids, each pulse's firing time,
channel, and beam origin and direction in the sensor frame. Pulse ids are global
and dense (``pulse_id = firing * channels + channel`` for a spinning scanner), so
any chunk of the survey can be generated on its own: this is what makes the output
independent of chunk size and of the order of the work.

Sensor frame: x forward, y left, z up; azimuth is measured from +x towards +y
(counter-clockwise seen from above) and elevation up from the xy plane. A
``clockwise`` scanner's azimuth decreases with time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .config import ScannerConfig

__all__ = ["FiringSchedule", "SpinningPattern", "pattern_for"]


@dataclass
class FiringSchedule:
    """A chunk of pulses, in firing order.

    Attributes
    ----------
    pulse_id : (N,) uint64
        Global pulse ids.
    time_s : (N,) float64
        Firing time from the survey start, s.
    channel : (N,) uint16
        Channel (ring) index.
    azimuth_rad, elevation_rad : (N,) float64
        Beam direction angles in the sensor frame.
    origin_m : (N, 3) float64
        Beam origin in the sensor frame.
    direction : (N, 3) float64
        Unit beam direction in the sensor frame.
    """

    pulse_id: NDArray[np.uint64]
    time_s: NDArray[np.float64]
    channel: NDArray[np.uint16]
    azimuth_rad: NDArray[np.float64]
    elevation_rad: NDArray[np.float64]
    origin_m: NDArray[np.float64]
    direction: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.pulse_id)


class SpinningPattern:
    """A rotating head with a column of channels (Velodyne, Ouster, RoboSense, Hesai).

    Firing ``k`` of channel ``c`` happens at ``t = k * T + offset[c]``, where ``T`` is
    the firing period ``1 / (rotation_hz * firings_per_revolution)``. The head's
    azimuth turns continuously, ``a(t) = start +- 2 pi rotation_hz t``, so channels that
    fire later in a block point a little further round; a channel's azimuth offset
    is added to its beam direction. The beam origin sits ``beam_origin_offset_m`` from
    the spin axis, in the direction of the head's azimuth.
    """

    def __init__(self, scanner: ScannerConfig) -> None:
        self.scanner = scanner
        ch = scanner.channels
        n = ch.count
        self.channels = n
        self.elevation_rad = np.radians(np.asarray(ch.elevation_deg, dtype=np.float64))
        self.azimuth_offset_rad = np.radians(
            np.asarray(ch.azimuth_offset_deg or [0.0] * n, dtype=np.float64)
        )
        self.firing_offset_s = np.asarray(ch.firing_offset_us or [0.0] * n, np.float64) * 1e-6
        self.period_s = scanner.firing_period_s
        self.sign = -1.0 if scanner.rotation == "clockwise" else 1.0

    def pulses_for(self, revolutions: float | None, duration_s: float | None) -> int:
        """Number of pulses in a survey of the given length (whole firings)."""
        s = self.scanner
        if duration_s is not None:
            firings = round(duration_s * s.rotation_hz * s.firings_per_revolution)
        else:
            firings = round(float(revolutions or 0.0) * s.firings_per_revolution)
        return int(firings) * self.channels

    def time_and_channel(
        self, pulse_id: NDArray[np.uint64]
    ) -> tuple[NDArray[np.float64], NDArray[np.uint16]]:
        """Firing time (s from the survey start) and channel of each pulse id."""
        pulse_id = np.asarray(pulse_id, dtype=np.uint64)
        firing = pulse_id // np.uint64(self.channels)
        channel = (pulse_id - firing * np.uint64(self.channels)).astype(np.intp)
        time_s = firing.astype(np.float64) * self.period_s + self.firing_offset_s[channel]
        return time_s, channel.astype(np.uint16)

    def schedule(self, start: int, stop: int) -> FiringSchedule:
        """Firing schedule of pulses ``start <= pulse_id < stop``."""
        pulse_id = np.arange(start, stop, dtype=np.uint64)
        time_s, channel_u16 = self.time_and_channel(pulse_id)
        channel = channel_u16.astype(np.intp)
        head = np.radians(self.scanner.start_azimuth_deg) + self.sign * 2.0 * np.pi * (
            self.scanner.rotation_hz * time_s
        )
        head = np.mod(head, 2.0 * np.pi)
        azimuth = head + self.azimuth_offset_rad[channel]
        elevation = self.elevation_rad[channel]
        cos_el = np.cos(elevation)
        direction = np.stack(
            [cos_el * np.cos(azimuth), cos_el * np.sin(azimuth), np.sin(elevation)], axis=1
        )
        r0 = self.scanner.beam_origin_offset_m
        origin = np.stack([r0 * np.cos(head), r0 * np.sin(head), np.zeros_like(head)], axis=1)
        return FiringSchedule(
            pulse_id=pulse_id,
            time_s=time_s,
            channel=channel_u16,
            azimuth_rad=azimuth,
            elevation_rad=elevation,
            origin_m=origin,
            direction=direction,
        )


def pattern_for(scanner: ScannerConfig) -> SpinningPattern:
    """The scan pattern generator named by ``scanner.pattern``."""
    patterns = {"spinning": SpinningPattern}
    return patterns[scanner.pattern](scanner)
