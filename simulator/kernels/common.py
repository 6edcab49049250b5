"""Inline numba helpers the kernels share: SplitMix64 hashing, hashed normals, the tilted
cosine, and detection and range measurement (:mod:`simulator.steps.hits`' steps 6 and 7);
and :func:`read_only`, how the kernels are given the arrays they only read."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import ArrayLike, DTypeLike, NDArray

from ..constants import (
    GOLDEN_GAMMA,
    HALF_PI_BELOW,
    LARGEST_BELOW_ONE,
    MIX64_MUL1,
    MIX64_MUL2,
    TWO_POW_M53,
)

U = np.uint64
_M1 = U(MIX64_MUL1)
_M2 = U(MIX64_MUL2)
GAMMA = U(GOLDEN_GAMMA)
_S30, _S27, _S31, _S11 = U(30), U(27), U(31), U(11)
HALF_PI = 0.5 * math.pi
TWO_PI = 2.0 * math.pi
COS_HALF_PI_BELOW = math.cos(HALF_PI_BELOW)


def read_only(values: ArrayLike, dtype: DTypeLike = np.float64) -> NDArray[Any]:
    """``values`` as a C-contiguous array of ``dtype``, marked read-only: for an argument a
    kernel only reads. numba compiles a kernel once for each type of its arguments, and a
    read-only array is another type than a writable one; the sensor's poses come either
    way (a broadcast pose is a read-only view, an interpolated one a new array), so each
    kernel took two or three machine codes for one (``_record`` three, ``_into_frame``
    three, ``_spinning_rays`` two). Passed read-only always, they take one. A view: no
    copy where ``values`` is C-contiguous of ``dtype`` already.

    Parameters
    ----------
    values : array_like
    dtype : numpy dtype, optional
        float64 by default.

    Returns
    -------
    ndarray
        The same shape and values, read-only.
    """
    view = np.ascontiguousarray(values, dtype).view()
    view.flags.writeable = False
    return view


@njit(inline="always", cache=True)
def mix64(x):  # type: ignore[no-untyped-def]
    """:func:`simulator.physics.mix64` of one uint64."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


@njit(inline="always", cache=True)
def firing_time(pid, channels, period_s, offset_s):  # type: ignore[no-untyped-def]
    """Pulse ``pid``'s firing time and channel in a spinning pattern: its firing
    ``pid // channels`` times the period, plus its channel's firing offset (as
    :meth:`simulator.sensor.scanner.SpinningPattern.time_and_channel`: the same float64
    product and sum)."""
    firing = pid // channels
    channel = pid - firing * channels
    return np.float64(firing) * period_s + offset_s[channel], channel


@njit(inline="always", cache=True)
def uniform(h):  # type: ignore[no-untyped-def]
    """:func:`simulator.physics.hash_uniform` of one hash."""
    return min((float(h >> _S11) + 0.5) * TWO_POW_M53, LARGEST_BELOW_ONE)


@njit(inline="always", cache=True)
def cos_turns(u):  # type: ignore[no-untyped-def]
    """``cos(2 pi u)`` for ``u`` in [0, 1), folded by symmetry so that libm only sees
    angles in [0, pi/2], where it is fastest: with ``w = |u - 1/2|`` (exact where it
    matters), ``cos(2 pi u) = -cos(2 pi w)``, and past a quarter turn
    ``cos(2 pi w) = -cos(2 pi (1/2 - w))``. One cosine, no unpredictable branch."""
    w = abs(u - 0.5)
    c = math.cos(TWO_PI * min(w, 0.5 - w))
    return c if w > 0.25 else -c


@njit(inline="always", cache=True)
def hash_normal(h):  # type: ignore[no-untyped-def]
    """:func:`simulator.physics.hash_normal` of one hash."""
    u1 = uniform(h)
    u2 = uniform(mix64(h + GAMMA))
    return math.sqrt(-2.0 * math.log(u1)) * cos_turns(u2)


@njit(inline="always", cache=True)
def hash_normal_pair(h):  # type: ignore[no-untyped-def]
    """:func:`simulator.physics.hash_normal_pair` of one hash: ``(hash_normal(h), its
    Box-Muller partner)``, the sine's magnitude from the cosine."""
    u1 = uniform(h)
    u2 = uniform(mix64(h + GAMMA))
    r = math.sqrt(-2.0 * math.log(u1))
    c = cos_turns(u2)
    s = math.sqrt(max(1.0 - c * c, 0.0))
    return r * c, (r * s if u2 <= 0.5 else -(r * s))


@njit(inline="always", cache=True)
def tilted_cos(cos_theta, delta):  # type: ignore[no-untyped-def]
    """``cos(clip(acos(cos_theta) + delta, 0, pi/2 below))`` without acos: cosine and
    sine of the sum by the addition formulas (the sine's sign tells a sum below 0;
    the clamp at pi/2 is a floor on the cosine). Four times faster than acos + cos."""
    if abs(delta) >= HALF_PI:  # beyond the formulas' unambiguous range
        theta = math.acos(cos_theta) + delta
        return math.cos(min(max(theta, 0.0), HALF_PI_BELOW))
    return tilted_cos_by(cos_theta, math.cos(delta), math.sin(delta))


@njit(inline="always", cache=True)
def tilted_cos_by(cos_theta, cos_delta, sin_delta):  # type: ignore[no-untyped-def]
    """:func:`tilted_cos` of a tilt ``delta`` below pi/2 in size, given its cosine and
    sine (a place's, made once for the hits that share it)."""
    sin_theta = math.sqrt(max(1.0 - cos_theta * cos_theta, 0.0))
    if sin_theta * cos_delta + cos_theta * sin_delta < 0.0:
        return 1.0
    return max(cos_theta * cos_delta - sin_theta * sin_delta, COS_HALF_PI_BELOW)


@njit(inline="always", cache=True)
def cell_of(x, cell):  # type: ignore[no-untyped-def]
    """The index of the grid cell of size ``cell`` that holds coordinate ``x``, as
    place_normal's hash takes it (uint64)."""
    return U(np.int64(math.floor(x / cell)))


@njit(inline="always", cache=True)
def cell_hash_of(i, j, seed_mixed):  # type: ignore[no-untyped-def]
    """place_normal's hash of the cell of indices ``i, j`` (:func:`cell_of`);
    ``seed_mixed`` is ``mix64(seed + GAMMA)``, made once."""
    return mix64(mix64(seed_mixed + i) + j)


@njit(inline="always", cache=True)
def peak_factor(pulse_m, spread):  # type: ignore[no-untyped-def]
    """:func:`simulator.physics.pulse_peak_factor` of one echo."""
    if pulse_m <= 0.0:
        return 1.0
    size = abs(spread)
    if size <= pulse_m:
        return 1.0 / math.hypot(1.0, size / pulse_m)
    ratio = pulse_m / size
    return ratio / math.hypot(ratio, 1.0)


@njit(inline="always", cache=True)
def received_peak(b, peak, r, extinction):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.hits.received_peak` of one echo; ``extinction``: the model's
    ``extinction_args`` (alpha, the relief's step, its samples)."""
    rs = max(r, 1e-6)
    received = b * peak / (rs * rs)
    ext = extinction[0]
    if ext > 0.0:
        if len(extinction) > 2:
            received *= math.exp(2.0 * relief_at(r, extinction) - 2.0 * ext * r)
        else:
            received *= math.exp(-2.0 * ext * r)
    return received


@njit(inline="always", cache=True)
def relief_at(r, ext):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.hits.relief_at` of one range, the table in ``ext[2:]``."""
    last = len(ext) - 3
    x = min(r / ext[1], float(last))
    if x >= last:
        return ext[2 + last]
    i = min(int(x), last - 1)
    return ext[2 + i] + (x - i) * (ext[3 + i] - ext[2 + i])


@njit(inline="always", cache=True)
def measured_range(r, relief, jitter, res):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.hits.measured_range` of one echo."""
    rm = r + relief + jitter
    if res > 0.0:
        rm = np.rint(rm / res) * res
    return rm


@njit(inline="always", cache=True)
def range_response(raw, r, form, params):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.hits.range_response` of one reading ``raw`` at measured range ``r``
    (``form``: :data:`simulator.steps.hits.RANGE_FORMS`)."""
    if form == 1:  # power: a factor
        return raw * (max(r, 1e-6) / params[0]) ** params[1]
    if form == 2:  # velodyne_focal: an added term
        near = 1.0 - r / params[2]
        return raw + params[1] * abs(params[0] - 256.0 * (near * near))
    return raw


@njit(inline="always", cache=True)
def reported_intensity(b, r, pid, scale, maximum, step, response):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.hits.reported_intensity` of one backscatter (or echo energy) ``b``
    of pulse id ``pid`` (int64) at measured range ``r``; ``response`` is
    :attr:`simulator.steps.hits.ReturnModel.response_args` (``on`` false: none)."""
    on, gains, per_slot, form, params = response
    if on:
        slot = (pid // per_slot) % gains.shape[0]
        value = range_response(scale * b * gains[slot], r, form, params)
    else:
        value = scale * b
    value = min(max(value, 0.0), maximum)
    if step > 0.0:
        value = min(np.rint(value / step) * step, maximum)
    return value
