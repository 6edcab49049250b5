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

from ..config import ScannerConfig

__all__ = [
    "FiringSchedule",
    "OscillatingPattern",
    "PatternSummary",
    "RasterPattern",
    "RisleyPattern",
    "ScanPattern",
    "SpinningPattern",
    "TablePattern",
    "pattern_for",
    "pattern_summary",
]


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
        assert ch is not None
        n = ch.count
        self.channels = n
        self.elevation_rad = np.radians(np.asarray(ch.elevation_deg, dtype=np.float64))
        self.azimuth_offset_rad = np.radians(
            np.asarray(ch.azimuth_offset_deg or [0.0] * n, dtype=np.float64)
        )
        self.firing_offset_s = np.asarray(ch.firing_offset_us or [0.0] * n, np.float64) * 1e-6
        self.period_s = scanner.firing_period_s
        self.sign = -1.0 if scanner.rotation == "clockwise" else 1.0
        self.pulses_per_second = n / self.period_s
        self.frame_pulses = int(scanner.firings_per_revolution or 1) * n

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

    def column(self, pulse_id: NDArray[np.uint64]) -> NDArray[np.int64]:
        """(N,) int64: each pulse's firing within its revolution, the column of the beam
        grid (an Ouster frame's ``measurement_id``)."""
        firing = np.asarray(pulse_id, dtype=np.uint64) // np.uint64(self.channels)
        return (firing % np.uint64(self.scanner.firings_per_revolution or 1)).astype(np.int64)

    def schedule(self, start: int, stop: int) -> FiringSchedule:
        """Firing schedule of pulses ``start <= pulse_id < stop``."""
        pulse_id = np.arange(start, stop, dtype=np.uint64)
        time_s, channel_u16 = self.time_and_channel(pulse_id)
        channel = channel_u16.astype(np.intp)
        # The head's azimuth when the channel fires, or at the firing's start (``block``).
        aim_s = (
            time_s
            if self.scanner.firing_azimuth == "physical"
            else time_s - self.firing_offset_s[channel]
        )
        head = np.radians(self.scanner.start_azimuth_deg) + self.sign * 2.0 * np.pi * (
            self.scanner.rotation_hz * aim_s
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


class _Pattern:
    """Shared machinery of the non-spinning patterns.

    A subclass sets ``channels``, ``pulses_per_second``, ``frame_pulses`` and implements
    :meth:`aim` (pulse ids to times, channels, sensor-frame origins and directions).
    """

    channels: int = 1
    pulses_per_second: float = 1.0
    frame_pulses: int = 1
    sign = 1.0

    def __init__(self, scanner: ScannerConfig) -> None:
        self.scanner = scanner

    def aim(self, pulse_id: NDArray[np.uint64]) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        """(time_s, channel, origin (N, 3), unit direction (N, 3)) of each pulse id."""
        raise NotImplementedError

    def pulses_for(self, revolutions: float | None, duration_s: float | None) -> int:
        """Pulses in a survey: ``duration_s`` of firing, or ``revolutions`` frames."""
        if duration_s is not None:
            return round(duration_s * self.pulses_per_second)
        return round(float(revolutions or 0.0) * self.frame_pulses)

    def time_and_channel(
        self, pulse_id: NDArray[np.uint64]
    ) -> tuple[NDArray[np.float64], NDArray[np.uint16]]:
        """Firing time (s from the survey start) and channel of each pulse id."""
        t, ch, _, _ = self.aim(np.asarray(pulse_id, dtype=np.uint64))
        return t, ch.astype(np.uint16)

    def schedule(self, start: int, stop: int) -> FiringSchedule:
        """Firing schedule of pulses ``start <= pulse_id < stop``."""
        pulse_id = np.arange(start, stop, dtype=np.uint64)
        t, ch, origin, d = self.aim(pulse_id)
        return FiringSchedule(
            pulse_id=pulse_id,
            time_s=t,
            channel=ch.astype(np.uint16),
            azimuth_rad=np.arctan2(d[:, 1], d[:, 0]),
            elevation_rad=np.arcsin(np.clip(d[:, 2], -1.0, 1.0)),
            origin_m=origin,
            direction=d,
        )


def _refract(d: NDArray, n: NDArray, eta: float) -> NDArray:
    """Refract unit rays ``d`` at surfaces of unit normal ``n`` (pointing along the ray),
    going from index 1 to index 1/eta (vector Snell's law). Where the ray would be
    totally reflected it keeps its direction (as HELIOS++ keeps the previous one)."""
    cos_i = np.einsum("ij,ij->i", d, n)
    k = 1.0 - eta * eta * (1.0 - cos_i * cos_i)
    t = eta * d + (np.sqrt(np.maximum(k, 0.0)) - eta * cos_i)[:, None] * n
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    return np.where((k < 0.0)[:, None], d, t)


class RisleyPattern(_Pattern):
    """Rotating wedge prisms (Livox Avia, Mid-70): a rosette that never repeats exactly.

    Each prism has a flat face square to the optical axis and a face tilted by its wedge
    angle; the beam meets the tilted face first (``tilted_face: entry``) or last
    (``exit``). The tilted face's normal leans towards the angle ``theta(t) = 2 pi f t +
    phase``, measured in the plane across the axis from the sensor's +y (left) towards
    +z (up), and turns with the prism. A shot is refracted by vector Snell's law at both
    faces of every prism in turn (``refraction: exact``, the default); total internal
    reflection keeps the direction the beam had before that face. ``refraction:
    paraxial`` is the thin-prism approximation instead: each prism adds a deviation of
    ``(n - 1) wedge`` towards ``theta``, which is only right for thin wedges.

    Channels (emitters) fire in turn, as the Livox drivers number them: pulse ``p`` is
    channel ``p mod C``, fired at ``p / (C shot_rate_hz)``, and starts tilted by its
    ``channel_offsets_deg`` (azimuth, elevation). The optical axis is the sensor's +x.
    """

    def __init__(self, scanner: ScannerConfig) -> None:
        super().__init__(scanner)
        spec = scanner.risley
        assert spec is not None
        self.spec = spec
        self.channels = len(spec.channel_offsets_deg)
        self.pulses_per_second = spec.shot_rate_hz * self.channels
        self.frame_pulses = round(spec.frame_period_s * self.pulses_per_second)
        offsets = np.radians(np.asarray(spec.channel_offsets_deg, dtype=np.float64))
        start = np.stack([np.tan(offsets[:, 0]), np.tan(offsets[:, 1]), np.ones(self.channels)], 1)
        self._start = start / np.linalg.norm(start, axis=1, keepdims=True)

    def aim(self, pulse_id: NDArray[np.uint64]) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        shot = pulse_id // np.uint64(self.channels)
        ch = (pulse_id - shot * np.uint64(self.channels)).astype(np.intp)
        t = pulse_id.astype(np.float64) / self.pulses_per_second
        d = self._start[ch]  # local frame: optical axis z', x' = sensor y, y' = sensor z
        d = self._paraxial(d, t) if self.spec.refraction == "paraxial" else self._exact(d, t)
        direction = np.stack([d[:, 2], d[:, 0], d[:, 1]], axis=1)
        return t, ch, np.zeros_like(direction), direction

    def _paraxial(self, d: NDArray, t: NDArray) -> NDArray:
        dev_x, dev_y = np.arctan(d[:, 0] / d[:, 2]), np.arctan(d[:, 1] / d[:, 2])
        for prism in self.spec.prisms:
            theta = 2.0 * np.pi * prism.rotation_hz * t + np.radians(prism.phase_deg)
            n_glass = prism.refractive_index or self.spec.refractive_index
            delta = (n_glass - 1.0) * np.radians(prism.wedge_deg)
            dev_x = dev_x + delta * np.cos(theta)
            dev_y = dev_y + delta * np.sin(theta)
        d = np.stack([np.tan(dev_x), np.tan(dev_y), np.ones_like(t)], axis=1)
        return d / np.linalg.norm(d, axis=1, keepdims=True)

    def _exact(self, d: NDArray, t: NDArray) -> NDArray:
        axis = np.broadcast_to(np.array([0.0, 0.0, 1.0]), d.shape)
        for prism in self.spec.prisms:
            theta = 2.0 * np.pi * prism.rotation_hz * t + np.radians(prism.phase_deg)
            a = np.radians(prism.wedge_deg)
            tilted = np.stack(
                [np.sin(a) * np.cos(theta), np.sin(a) * np.sin(theta), np.full_like(t, np.cos(a))],
                axis=1,
            )
            n_glass = prism.refractive_index or self.spec.refractive_index
            first, last = (tilted, axis) if prism.tilted_face == "entry" else (axis, tilted)
            d = _refract(d, first, 1.0 / n_glass)
            d = _refract(d, last, n_glass)
        return d


class OscillatingPattern(_Pattern):
    """An airborne line scanner: a mirror swings the beam across track below the sensor.

    Pulse ``k`` fires at ``k / pulse_rate_hz``; the scan angle is ``half_angle * w(f t)``
    with ``w`` a sine, a triangle or a sawtooth of the mirror's cycle; the beam points
    down (-z) tilted across track (towards +y for positive angles). The platform's
    motion (a trajectory) sweeps the lines along track. A frame is one mirror cycle.
    """

    def __init__(self, scanner: ScannerConfig) -> None:
        super().__init__(scanner)
        spec = scanner.oscillating
        assert spec is not None
        self.spec = spec
        self.pulses_per_second = spec.pulse_rate_hz
        self.frame_pulses = max(1, round(spec.pulse_rate_hz / spec.scan_rate_hz))

    def aim(self, pulse_id: NDArray[np.uint64]) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        t = pulse_id.astype(np.float64) / self.spec.pulse_rate_hz
        phase = self.spec.scan_rate_hz * t
        if self.spec.waveform == "sine":
            w = np.sin(2.0 * np.pi * phase)
        elif self.spec.waveform == "triangle":
            w = 2.0 / np.pi * np.arcsin(np.sin(2.0 * np.pi * phase))
        else:
            w = 2.0 * (phase - np.floor(phase + 0.5))
        angle = np.radians(self.spec.half_angle_deg) * w
        direction = np.stack([np.zeros_like(angle), np.sin(angle), -np.cos(angle)], axis=1)
        return t, np.zeros(len(t), dtype=np.intp), np.zeros_like(direction), direction


class RasterPattern(_Pattern):
    """A MEMS or solid-state grid: rows from the top, each line left to right (or
    alternately back, ``boustrophedon``), pixels evenly spread over the frame period.
    The ring (channel) of a pulse is its row."""

    def __init__(self, scanner: ScannerConfig) -> None:
        super().__init__(scanner)
        spec = scanner.raster
        assert spec is not None
        self.spec = spec
        self.channels = spec.rows
        self.frame_pulses = spec.rows * spec.columns
        self.pulses_per_second = self.frame_pulses * spec.frame_rate_hz

    def aim(self, pulse_id: NDArray[np.uint64]) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        spec = self.spec
        t = pulse_id.astype(np.float64) / self.pulses_per_second
        in_frame = (pulse_id % np.uint64(self.frame_pulses)).astype(np.intp)
        row, col = np.divmod(in_frame, spec.columns)
        if spec.boustrophedon:
            col = np.where(row % 2 == 1, spec.columns - 1 - col, col)

        def centre(i: NDArray, n: int, fov: float) -> NDArray:
            return np.radians(fov) * (0.5 - (i + 0.5) / n)

        az = centre(col, spec.columns, spec.horizontal_fov_deg)
        el = centre(row, spec.rows, spec.vertical_fov_deg)
        d = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], axis=1)
        return t, row, np.zeros_like(d), d


class TablePattern(_Pattern):
    """A recorded pattern replayed: CSV rows ``time_s, azimuth_deg, elevation_deg[, channel]``
    (a header line is skipped), repeated every ``period_s`` (by default the table's span
    plus one median step). A frame is one pass through the table."""

    def __init__(self, scanner: ScannerConfig) -> None:
        super().__init__(scanner)
        spec = scanner.table
        assert spec is not None
        try:
            data = np.loadtxt(
                spec.file, delimiter=",", ndmin=2, comments="#", skiprows=_header(spec.file)
            )
        except (OSError, ValueError) as exc:
            from ..errors import ConfigError

            raise ConfigError(spec.file, "table.file", f"cannot read the pattern ({exc})") from None
        if data.shape[1] not in (3, 4) or len(data) == 0 or np.any(np.diff(data[:, 0]) < 0):
            from ..errors import ConfigError

            raise ConfigError(
                spec.file, "table.file",
                "expected rows of time_s, azimuth_deg, elevation_deg[, channel], times rising",
            )  # fmt: skip
        self.t = data[:, 0] - data[0, 0]
        step = float(np.median(np.diff(self.t))) if len(self.t) > 1 else 1e-3
        self.period_s = spec.period_s or float(self.t[-1] + step)
        az, el = np.radians(data[:, 1]), np.radians(data[:, 2])
        self.d = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.sin(el)], axis=1)
        self.ch = data[:, 3].astype(np.intp) if data.shape[1] == 4 else np.zeros(len(az), np.intp)
        self.channels = int(self.ch.max()) + 1
        self.frame_pulses = len(self.t)
        self.pulses_per_second = len(self.t) / self.period_s

    def aim(self, pulse_id: NDArray[np.uint64]) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        cycle, i = np.divmod(pulse_id.astype(np.int64), self.frame_pulses)
        t = cycle * self.period_s + self.t[i]
        return t, self.ch[i], np.zeros((len(i), 3)), self.d[i]


def _header(path: str) -> int:
    """1 if the CSV's first line is not numbers (a header), else 0 (``.csv.gz`` too)."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        first = fh.readline()
    try:
        [float(v) for v in first.split(",")]
    except ValueError:
        return 1
    return 0


ScanPattern = SpinningPattern | RisleyPattern | OscillatingPattern | RasterPattern | TablePattern


def pattern_for(scanner: ScannerConfig) -> ScanPattern:
    """The scan pattern generator named by ``scanner.pattern``."""
    patterns: dict[str, type] = {
        "spinning": SpinningPattern,
        "risley": RisleyPattern,
        "oscillating": OscillatingPattern,
        "raster": RasterPattern,
        "table": TablePattern,
    }
    return patterns[scanner.pattern](scanner)


@dataclass(frozen=True)
class PatternSummary:
    """A scanner's field of view, steps and rates, from one frame of its pattern (what
    ``lidar-sim scanners`` lists; :func:`pattern_summary`).

    Attributes
    ----------
    channels : int
    elevation_deg : (float, float)
        The lowest and highest beam's elevation.
    azimuth_fov_deg : float
        360 for a spinning scanner; else the azimuth span of one frame's pulses.
    azimuth_step_deg : float or None
        A spinning scanner's azimuth between firings; None for the others.
    pulses_per_second : float
    range_m : (float, float)
        The scanner's minimum and maximum range.
    rotation_hz : float or None
        A spinning scanner's rotation rate; None for the others.
    frame_s : float
        One frame's duration.
    """

    channels: int
    elevation_deg: tuple[float, float]
    azimuth_fov_deg: float
    azimuth_step_deg: float | None
    pulses_per_second: float
    range_m: tuple[float, float]
    rotation_hz: float | None
    frame_s: float

    def cells(self) -> tuple[str, ...]:
        """The summary as text: channels, elevation, azimuth, azimuth step, points/s,
        range and frame (a spinning scanner's rate, or a frame's duration)."""
        spinning = self.rotation_hz is not None
        return (
            str(self.channels),
            f"{self.elevation_deg[0]:+.1f}..{self.elevation_deg[1]:+.1f}",
            "360" if spinning else f"{self.azimuth_fov_deg:.1f}",
            "-" if self.azimuth_step_deg is None else f"{self.azimuth_step_deg:.3f}",
            f"{self.pulses_per_second:,.0f}",
            f"{self.range_m[0]:g}-{self.range_m[1]:g}",
            f"{self.rotation_hz:g} Hz" if spinning else f"{self.frame_s:g} s",
        )


def pattern_summary(scanner: ScannerConfig) -> PatternSummary:
    """FOV, angular step and rate of a scanner, from one frame of its pattern (a spinning
    scanner's elevations from one firing of every channel; at most 400,000 pulses of any
    other's frame)."""
    pattern = pattern_for(scanner)
    spinning = isinstance(pattern, SpinningPattern)
    pulses = pattern.channels if spinning else min(pattern.frame_pulses, 400_000)
    sched = pattern.schedule(0, pulses)
    elevation = np.degrees(sched.elevation_rad)
    return PatternSummary(
        channels=pattern.channels,
        elevation_deg=(float(elevation.min()), float(elevation.max())),
        azimuth_fov_deg=360.0 if spinning else float(np.ptp(np.degrees(sched.azimuth_rad))),
        azimuth_step_deg=360.0 / (scanner.firings_per_revolution or 1) if spinning else None,
        pulses_per_second=pattern.pulses_per_second,
        range_m=(scanner.range_min_m, scanner.range_max_m),
        rotation_hz=scanner.rotation_hz if spinning else None,
        frame_s=pattern.frame_pulses / pattern.pulses_per_second,
    )
