"""Per-hit radiometry of a calibrated LiDAR, as pure vectorised numpy functions.

These functions are the specification of the simulator's physics. They follow the
reference card of the RS-Helios calibration (Minnaert incidence law, elliptical-beam
divergence, footprint stretching of the echo, rough-surface range scatter and a
hashed, place-fixed micro-slope). Every function accepts numpy arrays of any
broadcastable shape, or Python scalars, and returns an array (a 0-d array, or a
numpy scalar, for scalar input). All clamps of the card are kept, so that the
functions are total: no finite input in their domain yields NaN or infinity.

NaN
---
A NaN in any floating-point argument gives NaN in that element of the result, in
every function here; no clamp turns it into a number. (IEEE arithmetic would
otherwise let ``NaN ** 0`` be 1 and a clamp hide the NaN.) The pipeline never
passes NaN, since a ray that hits has a finite range and normal; the rule is for
callers of these functions and is pinned by the tests. :func:`place_normal`
rejects a cell size that is not finite and positive (``ValueError``).

Units: angles in radians, lengths in metres. Cosines are of the incidence angle,
the angle between the beam and the surface normal.

Hashing
-------
Random quantities are hashes, never draws from a random stream, so results do not
depend on the order or the chunking of the work. :func:`mix64` is the SplitMix64
finalizer in wrapping uint64 arithmetic. :func:`place_normal` attaches a standard
normal number to each grid cell of a plane; the exact recipe is given in its
docstring and pinned by golden values in the tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .constants import (
    COS_FLOOR,
    GOLDEN_GAMMA,
    HALF_PI_BELOW,
    LARGEST_BELOW_ONE,
    MIX64_MUL1,
    MIX64_MUL2,
    ROUGH_COS_FLOOR,
    SPEED_OF_LIGHT_MPS,
    TWO_POW_M53,
)

__all__ = [
    "COS_FLOOR",
    "GOLDEN_GAMMA",
    "ROUGH_COS_FLOOR",
    "SPEED_OF_LIGHT_MPS",
    "footprint_range_spread_m",
    "hash_normal",
    "hash_normal_pair",
    "hash_uniform",
    "in_plane_divergence",
    "minnaert_backscatter",
    "mix64",
    "place_cell_hash",
    "place_normal",
    "place_normal_pair",
    "pulse_length_m",
    "pulse_peak_factor",
    "rough_range_sigma_m",
    "tilted_cos",
]

_MUL1 = np.uint64(MIX64_MUL1)
_MUL2 = np.uint64(MIX64_MUL2)
_TWO_POW_63 = 2.0**63


def _unit_cos(cos: ArrayLike, floor: float) -> NDArray[np.float64]:
    """Return ``|cos|`` clamped to ``[floor, 1]`` as float64."""
    return np.clip(np.abs(np.asarray(cos, dtype=np.float64)), floor, 1.0)


def minnaert_backscatter(rho: ArrayLike, cos: ArrayLike, exponent: ArrayLike) -> Any:
    """Diffuse backscatter of a surface under the Minnaert law ``rho |cos|^k``.

    ``k = 1`` is Lambertian; ``k = 0`` is a surface whose apparent reflectance does
    not change with incidence (what the calibrated Helios reports for asphalt,
    concrete, gravel and grass). Rough, porous surfaces tend to ``k < 1``.

    Parameters
    ----------
    rho : (...) float
        Diffuse reflectance at normal incidence, 0-1 (above 1 for retroreflectors).
    cos : (...) float
        Cosine of the incidence angle; its absolute value is clamped to [1e-4, 1].
    exponent : (...) float
        Minnaert exponent ``k >= 0``.

    Returns
    -------
    (...) float64
        ``rho * |cos|^k``.
    """
    c = _unit_cos(cos, COS_FLOOR)
    k = np.asarray(exponent, dtype=np.float64)
    out = np.asarray(rho, dtype=np.float64) * c**k
    return np.where(np.isnan(c) | np.isnan(k), np.nan, out)[()]  # pow(NaN, 0) = pow(1, NaN) = 1


def in_plane_divergence(beta_h_rad: ArrayLike, beta_v_rad: ArrayLike, cos_psi: ArrayLike) -> Any:
    """Full-angle divergence of an elliptical beam in the plane of incidence.

    The footprint is stretched along the direction in which the surface recedes from
    the beam (the part of the normal perpendicular to the beam). ``cos_psi`` is the
    cosine of the angle between that direction and the beam's vertical axis: 1 for
    level ground under a level sensor (the vertical divergence counts), 0 for a wall
    seen obliquely in azimuth (the horizontal divergence counts). The two widths
    combine as a Gaussian beam's do.

    Parameters
    ----------
    beta_h_rad, beta_v_rad : (...) float
        Horizontal and vertical full-angle divergence, rad.
    cos_psi : (...) float
        See above; clamped to [0, 1].

    Returns
    -------
    (...) float64
        ``sqrt((beta_v cos psi)^2 + (beta_h sin psi)^2)``, rad.
    """
    c = np.clip(np.asarray(cos_psi, dtype=np.float64), 0.0, 1.0)
    s2 = 1.0 - c * c
    bv = np.asarray(beta_v_rad, dtype=np.float64)
    bh = np.asarray(beta_h_rad, dtype=np.float64)
    return np.sqrt((bv * c) ** 2 + bh * bh * s2)


def footprint_range_spread_m(range_m: ArrayLike, cos: ArrayLike, beta_rad: ArrayLike) -> Any:
    """Range extent of the beam's footprint on a plane, ``R tan(theta) beta``.

    Across the footprint of a beam of full divergence ``beta`` meeting a plane at
    incidence ``theta``, the path length differs by about ``R beta tan(theta)``:
    about 3.1 m for a 6.9 mrad beam on ground 30 m away at 3.8 deg grazing.

    Parameters
    ----------
    range_m : (...) float
        Range to the surface, m.
    cos : (...) float
        Cosine of the incidence angle; its absolute value is clamped to [1e-4, 1].
    beta_rad : (...) float
        Full-angle divergence in the plane of incidence, rad.

    Returns
    -------
    (...) float64
        The range extent, m (0 at normal incidence).
    """
    c = _unit_cos(cos, COS_FLOOR)
    tan_theta = np.sqrt(1.0 - c * c) / c
    return np.asarray(range_m, dtype=np.float64) * tan_theta * np.asarray(beta_rad, np.float64)


def pulse_peak_factor(pulse_length_m: ArrayLike, spread_m: ArrayLike) -> Any:
    """Peak of an echo stretched by the footprint, relative to a normal-incidence echo.

    The received pulse is the emitted one (range length ``L``) convolved with the
    footprint's range profile (extent ``dR``): its energy stays, its width grows to
    about ``sqrt(L^2 + dR^2)`` and its peak, which the receiver thresholds, falls in
    proportion. It is computed from the ratio of the smaller to the larger of ``L`` and
    ``|dR|`` (``1 / hypot(1, dR / L)`` or ``r / hypot(r, 1)`` with ``r = L / |dR|``),
    which neither overflows nor underflows where ``L^2`` or ``dR^2`` would:
    ``L = 1e-170`` with no spread gives exactly 1, and a spread of ``1e200`` a tiny
    positive factor, not 0.

    Parameters
    ----------
    pulse_length_m : (...) float
        ``L = c * FWHM / 2``, m; ``L <= 0`` turns the stretching off (factor 1).
    spread_m : (...) float
        ``dR``, m.

    Returns
    -------
    (...) float64
        ``L / sqrt(L^2 + dR^2)`` within 2 ulp, in (0, 1] for finite input. It is 0 only
        for an infinite spread, or where the true factor is below the smallest float64
        (``L / dR`` under about 5e-324); NaN if either input is NaN.
    """
    length = np.asarray(pulse_length_m, dtype=np.float64)
    spread = np.asarray(spread_m, dtype=np.float64)
    positive = length > 0.0
    safe_length = np.where(positive, length, 1.0)
    size = np.abs(spread)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # in the unused branch
        narrow = 1.0 / np.hypot(1.0, size / safe_length)  # dR <= L: dR / L <= 1
        ratio = safe_length / size  # dR > L: L / dR < 1, towards 0 as the true factor does
        wide = ratio / np.hypot(ratio, 1.0)
    factor = np.where(positive, np.where(size <= safe_length, narrow, wide), 1.0)
    return np.where(np.isnan(length) | np.isnan(spread), np.nan, factor)


def pulse_length_m(pulse_length_ns: ArrayLike) -> Any:
    """Range length of a pulse of the given FWHM duration, ``c * FWHM / 2``.

    Parameters
    ----------
    pulse_length_ns : (...) float
        Pulse full width at half maximum, ns.

    Returns
    -------
    (...) float64
        Length in range, m (a 5 ns pulse is 0.749 m).
    """
    return SPEED_OF_LIGHT_MPS * np.asarray(pulse_length_ns, dtype=np.float64) * 1e-9 / 2.0


def rough_range_sigma_m(roughness_m: ArrayLike, cos: ArrayLike) -> Any:
    """Range scatter of a return from rough ground, ``roughness |cos|^-1.5``.

    A height offset along a beam at incidence ``theta`` moves the range by
    ``dz / cos(theta)``; the footprint also grows as ``1 / cos(theta)`` and on a
    self-affine (Brownian, Hurst 0.5) surface the rms relief over a patch grows as
    the square root of its size, hence the exponent 1.5.

    Parameters
    ----------
    roughness_m : (...) float
        Rms relief height seen by a footprint at normal incidence, m.
    cos : (...) float
        Cosine of the incidence angle; its absolute value is clamped to [0.05, 1].

    Returns
    -------
    (...) float64
        Standard deviation of the range, m.
    """
    c = _unit_cos(cos, ROUGH_COS_FLOOR)
    return np.asarray(roughness_m, dtype=np.float64) * c**-1.5


def tilted_cos(cos: ArrayLike, delta_rad: ArrayLike) -> Any:
    """Incidence cosine after tilting the surface by ``delta`` in the plane of incidence.

    ``theta' = theta + delta``, clamped to ``[0, pi/2)``.

    Parameters
    ----------
    cos : (...) float
        Cosine of the incidence angle; its absolute value is clamped to [0, 1].
    delta_rad : (...) float
        Tilt, rad; positive tilts make the incidence more grazing.

    Returns
    -------
    (...) float64
        ``cos(theta')``, in (0, 1].
    """
    c = np.clip(np.abs(np.asarray(cos, dtype=np.float64)), 0.0, 1.0)
    theta = np.arccos(c) + np.asarray(delta_rad, dtype=np.float64)
    return np.cos(np.clip(theta, 0.0, HALF_PI_BELOW))


def _as_uint64(x: ArrayLike) -> NDArray[np.uint64]:
    """Coerce integer keys to uint64; signed values wrap (two's complement)."""
    arr = np.asarray(x)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind in "iub":
        return arr.astype(np.int64).view(np.uint64)
    if arr.dtype == object:  # Python ints beyond the int64/uint64 range
        flat = [int(v) & 0xFFFFFFFFFFFFFFFF for v in arr.ravel()]
        return np.asarray(flat, dtype=np.uint64).reshape(arr.shape)
    raise TypeError(f"expected integer keys, got dtype {arr.dtype}")


def mix64(x: ArrayLike) -> Any:
    """SplitMix64 finalizer: a well-distributed 64-bit hash of an integer key.

    ``x ^= x >> 30; x *= 0xBF58476D1CE4E5B9; x ^= x >> 27; x *= 0x94D049BB133111EB;
    x ^= x >> 31``, all in wrapping uint64 arithmetic.

    Parameters
    ----------
    x : (...) int
        Keys; signed values are taken modulo 2^64.

    Returns
    -------
    (...) uint64
        The hashes. ``mix64(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF``.
    """
    z = np.array(_as_uint64(x), dtype=np.uint64, copy=True, ndmin=1)
    with np.errstate(over="ignore"):
        z ^= z >> np.uint64(30)
        z *= _MUL1
        z ^= z >> np.uint64(27)
        z *= _MUL2
        z ^= z >> np.uint64(31)
    return z.reshape(np.shape(x))[()]


def hash_uniform(h: ArrayLike) -> Any:
    """Uniform number in the open interval (0, 1) from the top 53 bits of a hash.

    ``u = ((h >> 11) + 0.5) / 2^53``; the top value, which float64 would round to 1,
    is held at ``1 - 2^-53``. The smallest value is ``2^-54``, so ``log(u)`` is finite.

    Parameters
    ----------
    h : (...) uint64
        Hashes, e.g. from :func:`mix64`.

    Returns
    -------
    (...) float64
        Uniform numbers in (0, 1).
    """
    k = (_as_uint64(h) >> np.uint64(11)).astype(np.float64)
    return np.minimum((k + 0.5) * TWO_POW_M53, LARGEST_BELOW_ONE)


def hash_normal(h: ArrayLike) -> Any:
    """Standard normal number from a hash, by Box-Muller on two hashed uniforms.

    ``u1 = hash_uniform(h)``, ``u2 = hash_uniform(mix64(h + GOLDEN_GAMMA))``,
    ``z = sqrt(-2 ln u1) cos(2 pi u2)``.

    Parameters
    ----------
    h : (...) uint64
        Hashes (already mixed).

    Returns
    -------
    (...) float64
        Standard normal numbers.
    """
    u1, u2 = _box_muller_uniforms(h)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def _box_muller_uniforms(h: ArrayLike) -> tuple[Any, Any]:
    """The two hashed uniforms of :func:`hash_normal` and :func:`hash_normal_pair`:
    ``hash_uniform(h)`` and ``hash_uniform(mix64(h + GOLDEN_GAMMA))``."""
    h = _as_uint64(h)
    with np.errstate(over="ignore"):
        h2 = mix64(h + np.uint64(GOLDEN_GAMMA))
    return hash_uniform(h), hash_uniform(h2)


def hash_normal_pair(h: ArrayLike) -> tuple[Any, Any]:
    """Two independent standard normal numbers from one hash: Box-Muller's pair.

    ``z1 = sqrt(-2 ln u1) cos(2 pi u2)`` is :func:`hash_normal` of ``h``, and ``z2 =
    sqrt(-2 ln u1) sin(2 pi u2)``, its sine taken as ``+-sqrt(1 - cos^2)`` (positive for
    ``u2 <= 1/2``), which keeps one transcendental call for two numbers (Box and Muller
    1958: ``z1`` and ``z2`` are independent N(0, 1)).

    Parameters
    ----------
    h : (...) uint64
        Hashes (already mixed).

    Returns
    -------
    z1, z2 : (...) float64
    """
    u1, u2 = _box_muller_uniforms(h)
    r = np.sqrt(-2.0 * np.log(u1))
    c = np.cos(2.0 * np.pi * u2)
    s = np.sqrt(np.maximum(1.0 - c * c, 0.0))
    return r * c, np.where(u2 <= 0.5, r * s, -(r * s))


def place_cell_hash(x_m: ArrayLike, y_m: ArrayLike, cell_m: ArrayLike, seed: ArrayLike) -> Any:
    """The hash of the place cell of each point (see :func:`place_normal`), and whether the
    point's cell index fits in int64: ``(h, inside)``."""
    cell = np.asarray(cell_m, dtype=np.float64)
    if not np.all(np.isfinite(cell) & (cell > 0.0)):
        bad = cell[~(np.isfinite(cell) & (cell > 0.0))] if cell.ndim else cell
        raise ValueError(
            f"place_normal: cell_m must be finite and > 0, got {float(bad.ravel()[0])!r}"
        )
    qx = np.floor(np.asarray(x_m, dtype=np.float64) / cell)
    qy = np.floor(np.asarray(y_m, dtype=np.float64) / cell)
    inside = (qx >= -_TWO_POW_63) & (qx < _TWO_POW_63) & (qy >= -_TWO_POW_63) & (qy < _TWO_POW_63)
    i = np.where(inside, qx, 0.0).astype(np.int64).view(np.uint64)
    j = np.where(inside, qy, 0.0).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = mix64(mix64(mix64(_as_uint64(seed) + np.uint64(GOLDEN_GAMMA)) + i) + j)
    return h, inside


def place_normal_pair(x_m: ArrayLike, y_m: ArrayLike, cell_m: ArrayLike, seed: ArrayLike) -> Any:
    """Two independent standard normal numbers fixed to a place: :func:`place_normal`'s
    cell hash through :func:`hash_normal_pair` (the first is :func:`place_normal`'s value).
    NaN where :func:`place_normal` gives NaN. Returns ``(z1, z2)``, each (...) float64."""
    h, inside = place_cell_hash(x_m, y_m, cell_m, seed)
    z1, z2 = hash_normal_pair(h)
    return np.where(inside, z1, np.nan)[()], np.where(inside, z2, np.nan)[()]


def place_normal(x_m: ArrayLike, y_m: ArrayLike, cell_m: ArrayLike, seed: ArrayLike) -> Any:
    """Standard normal number fixed to a place: one value per grid cell and seed.

    The plane is cut into square cells of side ``cell_m``. A point's cell indices are
    ``i = floor(x / cell)`` and ``j = floor(y / cell)`` (int64, taken as uint64 in
    two's complement). The cell's hash is

    ``h = mix64(mix64(mix64(seed + GOLDEN_GAMMA) + i) + j)`` (wrapping uint64 additions;
    the golden-ratio increment keeps seed 0 off mix64's fixed point ``mix64(0) == 0``),

    and its value is ``hash_normal(h)``. The same place therefore has the same value
    in every scan and every run, and no random stream is consumed.

    Parameters
    ----------
    x_m, y_m : (...) float
        The two in-plane coordinates, m.
    cell_m : (...) float
        Cell size, m; finite and > 0, else ``ValueError``.
    seed : (...) int
        Stream selector (uint64).

    Returns
    -------
    (...) float64
        Standard normal values; NaN where a coordinate is NaN or infinite, or so far out
        that its cell index does not fit in int64 (``|x / cell| >= 2^63``).

    Raises
    ------
    ValueError
        If any cell size is zero, negative, infinite or NaN.
    """
    h, inside = place_cell_hash(x_m, y_m, cell_m, seed)
    return np.where(inside, hash_normal(h), np.nan)[()]
