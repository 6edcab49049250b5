"""Footprint sampling: sub-rays over the elliptical Gaussian beam, with their energy shares.

The beam's irradiance falls as ``exp(-2 r^2)`` with ``r`` the angle off the axis in
units of the 1/e^2 half-angle, which is half the stated full-angle divergence,
separately along the beam's horizontal and vertical axes (an elliptical beam).

The pattern is fixed (no random stream): a centre ray and ``J`` hexagonal rings, ring
``j`` holding ``6 j`` rays at radius ``j / J`` (the outer ring on the 1/e^2 contour),
ring ``j`` rotated by half a step when ``j`` is even. Each ring stands for the annulus
half-way to its neighbours (the centre for the disk of radius ``0.5 / J``, the outer
ring for everything beyond ``(J - 0.5) / J``), and its rays share the beam energy in
that annulus equally: ``exp(-2 r_in^2) - exp(-2 r_out^2)``. The shares sum to 1, and
by symmetry their centroid is the beam axis. 1, 7, 19, 37 and 61 rays (``J`` = 0-4)
are offered.

:class:`BeamOptics` holds what the steps read of a scanner's beam and receiver, computed
once from its configuration: the divergences, the pulse length, the beam's cross-section
along the range and the receiver's near-field overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from . import physics
from .config import ScannerConfig
from .constants import RING_COUNTS

__all__ = [
    "RING_COUNTS",
    "BeamOptics",
    "BeamPattern",
    "beam_pattern",
    "linear_overlap",
    "sub_ray_directions",
]


def linear_overlap(range_m: NDArray[np.float64], start_m: float, full_m: float) -> NDArray:
    """An overlap that rises linearly: (N,) float64 in [0, 1], 0 up to ``start_m``, 1 from
    ``full_m`` on (a step at ``start_m`` when ``full_m <= start_m``). The kernels' form is
    :func:`simulator.kernels.overlap.overlap_of` with the table ``[0, start, full]``."""
    r = np.asarray(range_m, dtype=np.float64)
    if full_m <= start_m:
        return (r >= start_m).astype(np.float64)
    return np.clip((r - start_m) / (full_m - start_m), 0.0, 1.0)


@dataclass(frozen=True)
class BeamOptics:
    """A scanner's beam and receiver optics, computed once from its configuration and read
    by every step that needs them (:meth:`of`).

    Attributes
    ----------
    divergence_h_mrad, divergence_v_mrad : float
        Full-angle divergences as the datasheet states them, mrad (the beam's
        cross-section, :meth:`area_m2`, multiplies them by the range first, then by 1e-3,
        as it always has: bit for bit).
    divergence_h_rad, divergence_v_rad : float
        The full-angle divergences, rad (the per-hit model's in-plane divergence).
    half_angle_h_rad, half_angle_v_rad : float
        The 1/e^2 half-angles, half the full-angle divergences, rad (the footprint's
        sub-rays, :class:`BeamPattern`).
    pulse_length_m : float
        ``c * FWHM / 2`` of the pulse (:func:`simulator.physics.pulse_length_m`).
    exit_diameter_m : float
        The beam's diameter where it leaves the sensor.
    overlap_given : bool
        The near-field overlap is the scanner's ``overlap_m`` (linear between its two
        ranges), not the geometric overlap of a biaxial sensor.
    overlap_range_m : (float, float)
        Where the overlap starts and where it is full
        (:attr:`simulator.config.ScannerConfig.overlap_range_m`).
    transmit_radius_mm : (float, float)
        The transmitted beam's radius at the exit, mm, and its growth, mm per m
        (:attr:`simulator.config.ScannerConfig.transmit_radius_mm`).
    receiver_aperture_mm, receiver_fov_mrad, axis_separation_mm : float
        The receiver's aperture, its full field of view and the distance between the
        transmitter's and the receiver's axes.
    range_min_m : float
        The receiver is blanked closer than this.
    """

    divergence_h_mrad: float
    divergence_v_mrad: float
    divergence_h_rad: float
    divergence_v_rad: float
    half_angle_h_rad: float
    half_angle_v_rad: float
    pulse_length_m: float
    exit_diameter_m: float
    overlap_given: bool
    overlap_range_m: tuple[float, float]
    transmit_radius_mm: tuple[float, float]
    receiver_aperture_mm: float
    receiver_fov_mrad: float
    axis_separation_mm: float
    range_min_m: float

    @classmethod
    def of(cls, scanner: ScannerConfig) -> BeamOptics:
        """The optics of a scanner."""
        div = scanner.divergence_mrad
        return cls(
            divergence_h_mrad=div.horizontal,
            divergence_v_mrad=div.vertical,
            divergence_h_rad=div.horizontal * 1e-3,
            divergence_v_rad=div.vertical * 1e-3,
            half_angle_h_rad=0.5e-3 * div.horizontal,
            half_angle_v_rad=0.5e-3 * div.vertical,
            pulse_length_m=float(physics.pulse_length_m(scanner.pulse_length_ns)),
            exit_diameter_m=scanner.beam_exit_diameter_mm * 1e-3,
            overlap_given=scanner.overlap_m is not None,
            overlap_range_m=scanner.overlap_range_m,
            transmit_radius_mm=scanner.transmit_radius_mm,
            receiver_aperture_mm=scanner.receiver_aperture_mm,
            receiver_fov_mrad=scanner.receiver_fov_mrad,
            axis_separation_mm=scanner.axis_separation_mm,
            range_min_m=scanner.range_min_m,
        )

    def area_m2(self, range_m: NDArray[np.float64]) -> NDArray[np.float64]:
        """Cross-section of the beam at a range: an ellipse of diameters ``d0 + r beta``
        (exit diameter, full divergences): (N,) float64, m^2."""
        d0 = self.exit_diameter_m
        r = np.asarray(range_m, dtype=np.float64)
        return (np.pi / 4.0 * (d0 + r * self.divergence_h_mrad * 1e-3)
                * (d0 + r * self.divergence_v_mrad * 1e-3))  # fmt: skip

    def area_args(self) -> NDArray[np.float64]:
        """:meth:`area_m2` as the kernels take it: ``[pi / 4, d0, divergence h mrad,
        divergence v mrad]``, (4,) float64."""
        return np.array([np.pi / 4.0, self.exit_diameter_m, self.divergence_h_mrad,
                         self.divergence_v_mrad])  # fmt: skip

    def overlap(self, range_m: NDArray[np.float64]) -> NDArray[np.float64]:
        """The receiver's near-field overlap at a range: (N,) float64 in [0, 1].

        With ``overlap_m = [start, full]`` given: 0 before ``start``, 1 beyond ``full``,
        linear between. Otherwise the geometric overlap of a biaxial sensor with parallel
        axes (Rasshofer et al. 2011, Fig. 2; Hahner et al. 2021, Sec. 3): the share of the
        transmitted beam's cross-section, a disc of radius ``a = rho_t + r theta_t / 2``
        (exit radius, geometric-mean divergence), inside the receiver's field of view, a
        disc of radius ``b = rho_r + r theta_r / 2`` (aperture radius, field of view)
        whose centre is ``s`` (``axis_separation_mm``) away: the two discs' intersection
        over ``pi a^2``. It is 0 up to ``(s - rho_t - rho_r) / (theta_t/2 + theta_r/2)``
        and 1 from ``(s + rho_t - rho_r) / (theta_r/2 - theta_t/2)`` on; 0 closer than
        ``range_min_m`` (the receiver is blanked there).
        """
        r = np.asarray(range_m, dtype=np.float64)
        if self.overlap_given:
            return linear_overlap(r, *self.overlap_range_m)
        rho_t, grow_t = self.transmit_radius_mm
        a = rho_t + r * grow_t
        b = 0.5 * self.receiver_aperture_mm + r * 0.5 * self.receiver_fov_mrad
        s = self.axis_separation_mm
        with np.errstate(divide="ignore", invalid="ignore"):
            cos_a = np.clip((s**2 + a**2 - b**2) / (2.0 * s * a), -1.0, 1.0)
            cos_b = np.clip((s**2 + b**2 - a**2) / (2.0 * s * b), -1.0, 1.0)
            kite = np.sqrt(np.maximum((-s + a + b) * (s + a - b) * (s - a + b) * (s + a + b),
                                      0.0))  # fmt: skip
            lens = a**2 * np.arccos(cos_a) + b**2 * np.arccos(cos_b) - 0.5 * kite
            share = np.where(s > 0.0, lens, np.pi * np.minimum(a, b) ** 2) / (np.pi * a**2)
        share = np.where(s >= a + b, 0.0, np.where(s <= b - a, 1.0, share))
        return np.where(r >= self.range_min_m, np.clip(share, 0.0, 1.0), 0.0)

    def overlap_args(self) -> NDArray[np.float64]:
        """:meth:`overlap` as the kernels take it, (7,) float64: ``[0, start, full, 0, 0,
        0, 0]`` with ``overlap_m`` given (linear between), else ``[1, rho_t, grow_t, half
        the aperture, the field of view, the separation, range_min]``."""
        if self.overlap_given:
            start, full = self.overlap_range_m
            return np.array([0.0, start, full, 0.0, 0.0, 0.0, 0.0])
        rho_t, grow_t = self.transmit_radius_mm
        return np.array([1.0, rho_t, grow_t, 0.5 * self.receiver_aperture_mm,
                         self.receiver_fov_mrad, self.axis_separation_mm,
                         self.range_min_m])  # fmt: skip


@dataclass(frozen=True)
class BeamPattern:
    """How a scanner's pulses are cast: the sub-rays of :func:`beam_pattern` over its beam.

    Attributes
    ----------
    samples : int
        Sub-rays per pulse (1: the central ray alone).
    offsets : (samples, 2) float64
        Horizontal and vertical offsets in units of the 1/e^2 half-angle.
    weights : (samples,) float64
        Energy shares, summing to 1.
    half_angle_h_rad, half_angle_v_rad : float
        The 1/e^2 half-angles (half the full-angle divergences).
    """

    samples: int
    offsets: NDArray[np.float64]
    weights: NDArray[np.float64]
    half_angle_h_rad: float
    half_angle_v_rad: float

    @classmethod
    def of(cls, samples: int, divergence_h_mrad: float, divergence_v_mrad: float) -> BeamPattern:
        """The pattern of ``samples`` sub-rays over a beam of the given full-angle
        divergences (mrad)."""
        offsets, weights = beam_pattern(samples)
        return cls(samples, offsets, weights, 0.5e-3 * divergence_h_mrad,
                   0.5e-3 * divergence_v_mrad)  # fmt: skip

    @classmethod
    def of_optics(cls, samples: int, optics: BeamOptics) -> BeamPattern:
        """The pattern of ``samples`` sub-rays over a scanner's beam (:class:`BeamOptics`):
        :meth:`of` its divergences, the same values."""
        offsets, weights = beam_pattern(samples)
        return cls(samples, offsets, weights, optics.half_angle_h_rad, optics.half_angle_v_rad)


def beam_pattern(samples: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The sampling pattern of a beam.

    Parameters
    ----------
    samples : int
        One of :data:`RING_COUNTS`.

    Returns
    -------
    offsets : (samples, 2) float64
        Horizontal and vertical offsets in units of the 1/e^2 half-angle along each
        axis; row 0 is the centre.
    weights : (samples,) float64
        Energy shares, summing to 1.
    """
    if samples not in RING_COUNTS:
        raise ValueError(f"samples must be one of {RING_COUNTS}, got {samples}")
    rings = RING_COUNTS.index(samples)
    offsets = [np.zeros((1, 2))]
    # math.exp, not np.exp: numpy's AVX-512 exp differs in the last bit on some scalars,
    # and the weights must be the same on any CPU (issue 49).
    energy = [1.0 - math.exp(-2.0 * (0.5 / rings) ** 2) if rings else 1.0]
    counts = [1]
    for j in range(1, rings + 1):
        n = 6 * j
        phase = 0.5 if j % 2 == 0 else 0.0
        angle = 2.0 * np.pi * (np.arange(n) + phase) / n
        radius = j / rings
        offsets.append(radius * np.stack([np.cos(angle), np.sin(angle)], axis=1))
        r_in = (j - 0.5) / rings
        outer = 0.0 if j == rings else math.exp(-2.0 * ((j + 0.5) / rings) ** 2)
        energy.append(math.exp(-2.0 * r_in**2) - outer)
        counts.append(n)
    weights = np.concatenate([np.full(c, e / c) for c, e in zip(counts, energy, strict=True)])
    return np.concatenate(offsets), weights / weights.sum()


def sub_ray_directions(
    directions: NDArray[np.float64],
    sensor_up: NDArray[np.float64],
    sensor_forward: NDArray[np.float64],
    half_angle_h_rad: float,
    half_angle_v_rad: float,
    offsets: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Directions of every sub-ray of every beam.

    The beam's vertical axis is the sensor's up direction less its part along the
    beam (for a beam along the up axis, the sensor's forward axis is used); the
    horizontal axis completes the frame.

    Parameters
    ----------
    directions : (P, 3) float64
        Unit beam axes (world).
    sensor_up, sensor_forward : (3,) or (P, 3) float64
        The sensor's z and x axes in the world.
    half_angle_h_rad, half_angle_v_rad : float
        1/e^2 half-angles (half the full-angle divergences).
    offsets : (N, 2) float64
        From :func:`beam_pattern`.

    Returns
    -------
    (P, N, 3) float64
        Unit sub-ray directions; sub-ray 0 is the beam axis.
    """
    d = np.asarray(directions, dtype=np.float64)
    up = np.broadcast_to(np.asarray(sensor_up, dtype=np.float64), d.shape)
    fwd = np.broadcast_to(np.asarray(sensor_forward, dtype=np.float64), d.shape)
    e_v = up - np.einsum("ij,ij->i", up, d)[:, None] * d
    norm = np.linalg.norm(e_v, axis=1)
    degenerate = norm < 1e-9
    if degenerate.any():
        f = fwd[degenerate]
        dd = d[degenerate]
        e_v[degenerate] = f - np.einsum("ij,ij->i", f, dd)[:, None] * dd
        norm[degenerate] = np.linalg.norm(e_v[degenerate], axis=1)
    e_v /= norm[:, None]
    e_h = np.cross(d, e_v)
    tan_h = np.tan(offsets[:, 0] * half_angle_h_rad)
    tan_v = np.tan(offsets[:, 1] * half_angle_v_rad)
    sub = (
        d[:, None, :]
        + tan_h[None, :, None] * e_h[:, None, :]
        + tan_v[None, :, None] * e_v[:, None, :]
    )
    return sub / np.linalg.norm(sub, axis=2, keepdims=True)
