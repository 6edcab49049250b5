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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .constants import RING_COUNTS

__all__ = ["RING_COUNTS", "BeamPattern", "beam_pattern", "sub_ray_directions"]


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
