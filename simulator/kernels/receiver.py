"""The receiver's laws in numba, one echo at a time (the specification:
:mod:`simulator.steps.receiver`). ``rec`` is
:meth:`simulator.steps.receiver.ReceiverLaws.kernel_args` (or ``NO_RECEIVER``): ``(on,
near_mode, near_start_m, near_full_m, speckle_cells, noise_per_threshold)``."""

from __future__ import annotations

import math

from numba import njit

from ..constants import GOLDEN_GAMMA, SALT_DETECTION, SALT_SPECKLE
from ..steps.receiver import SPECKLE_ROUNDS
from .common import U, hash_normal, mix64, uniform
from .overlap import overlap_of

__all__ = ["gamma_unit_mean", "received_energies", "receiver_gains", "soft_detected"]

_SALT_S = U(SALT_SPECKLE)
_SALT_D = U(SALT_DETECTION)
_TWO_GAMMA = U((2 * GOLDEN_GAMMA) % 2**64)


@njit(inline="always", cache=True)
def gamma_unit_mean(key, cells):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.receiver.gamma_unit_mean` of one key."""
    d = cells - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    for t in range(SPECKLE_ROUNDS):
        h = mix64(key + U(t))
        u = uniform(mix64(h + _TWO_GAMMA))
        z = hash_normal(h)
        v = 1.0 + c * z
        if v <= 0.0:
            continue
        v3 = v * v * v
        if math.log(u) < 0.5 * (z * z) + d - d * v3 + d * math.log(v3):
            return d * v3 / cells
    return 1.0


@njit(inline="always", cache=True)
def receiver_gains(rec, key, r):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.receiver.receiver_gains` of one echo (jitter key ``key``,
    true range ``r``): ``(detection, intensity)``."""
    speckle = 1.0
    if rec[4] > 0.0:
        speckle = gamma_unit_mean(mix64(key ^ _SALT_S), rec[4])
    if rec[1] == 0.0:
        return speckle, speckle
    ramp = (0.0, rec[2], rec[3], 0.0, 0.0, 0.0, 0.0)  # overlap_args' form of a given [start, full]
    detection = overlap_of(r, ramp) * speckle
    return detection, detection if rec[1] == 2.0 else speckle


@njit(inline="always", cache=True)
def received_energies(rec, key, r, energy):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.receiver.received_energies` of one echo: ``(detected,
    read)``, ``energy`` itself for both without laws (``rec[0]`` 0)."""
    if rec[0] == 0.0:
        return energy, energy
    gain, gain_read = receiver_gains(rec, key, r)
    return energy * gain, energy * gain_read


@njit(inline="always", cache=True)
def soft_detected(rec, received, threshold, key):  # type: ignore[no-untyped-def]
    """:func:`simulator.steps.receiver.soft_detected` of one echo."""
    if rec[0] == 0.0 or rec[5] == 0.0:
        return received >= threshold
    sigma = rec[5] * threshold
    return received + sigma * hash_normal(mix64(key ^ _SALT_D)) >= threshold
