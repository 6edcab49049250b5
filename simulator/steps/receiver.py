"""The receiver's laws beyond the hard threshold: near-range overlap, speckle and a soft
threshold (the numba kernels: :mod:`simulator.kernels.receiver`).

Real frames show three things the per-hit model's hard threshold cannot make: the
reflectivity of near ground rolling off (the receiver sees a near target only in part),
readings that scatter far more than the surface's micro-slope makes them, and ground rings
that lose their beams gradually with range instead of all at once. Each is a law of the
receiver, applied to every surface echo (a pulse's only return, an echo of footprint
sub-rays, a surface behind a see-through one) and off unless the scanner's ``receiver:``
section turns it on (:class:`simulator.config.Receiver`).

1. **Near-range overlap** ``O(R)``: 0 up to ``start``, 1 from ``full`` on, linear between,
   at the echo's true range. The same ``[start, full]`` the weather's returns see.
2. **Speckle**: the echo's energy times ``g ~ Gamma(M, 1/M)`` (mean 1, variance ``1/M``),
   the sum of ``M`` independent speckle cells' exponential intensities over ``M``
   (Goodman 1976, *Some fundamental properties of speckle*, JOSA 66(11)). The draw is
   Marsaglia and Tsang's (2000) method on hashed numbers, so it is fixed by the echo.
3. **Soft threshold**: the echo is detected when its received peak plus Gaussian receiver
   noise of ``width x threshold`` reaches the threshold, i.e. with probability
   ``Phi((S / S_th - 1) / width)``, the detection probability of a threshold receiver in
   Gaussian noise (North 1963; Skolnik, *Introduction to Radar Systems*, 3rd ed., 2.5).
   For a threshold set to a false-alarm probability ``P_fa``, ``width = 1 / Q^-1(P_fa)``.

The energy ``b`` of an echo becomes ``b x O x g`` for detection, and ``b x g`` (or ``b x O
x g`` with ``near_overlap: detection_and_intensity``) for the reported intensity, an
energy measure. The draws come from the echo's range-jitter key (the survey seed, the
pulse id and the echo's rank), mixed with a salt of their own, so they are the same for
any chunk size, thread count or worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import linear_overlap
from ..config import ScannerConfig
from ..constants import GOLDEN_GAMMA, SALT_DETECTION, SALT_SPECKLE

__all__ = [
    "NEAR_MODES",
    "SPECKLE_ROUNDS",
    "ReceiverLaws",
    "gamma_unit_mean",
    "near_overlap",
    "received_energies",
    "receiver_gains",
    "soft_detected",
]

#: ``near_overlap`` as the kernels number it.
NEAR_MODES = {"off": 0, "detection": 1, "detection_and_intensity": 2}
#: Rounds of Marsaglia and Tsang's rejection tried before a draw gives up and takes the mean
#: (each round accepts with probability above 0.95 for M >= 1: never reached in practice).
SPECKLE_ROUNDS = 64


@dataclass(frozen=True)
class ReceiverLaws:
    """The receiver's laws of a scanner, in the numbers the model applies.

    Attributes
    ----------
    near_mode : int
        :data:`NEAR_MODES`.
    near_start_m, near_full_m : float
        The overlap's ramp.
    speckle_cells : float
        ``M``; 0: no speckle.
    noise_per_threshold : float
        The soft threshold's width; 0: the hard threshold.
    """

    near_mode: int = 0
    near_start_m: float = 0.0
    near_full_m: float = 0.0
    speckle_cells: float = 0.0
    noise_per_threshold: float = 0.0

    @classmethod
    def of(cls, scanner: ScannerConfig) -> ReceiverLaws | None:
        """The laws of a scanner's ``receiver:`` section; None when every one is off."""
        rec = scanner.receiver
        if not rec.on:
            return None
        start, full = scanner.overlap_range_m
        return cls(
            near_mode=NEAR_MODES[rec.near_overlap],
            near_start_m=start,
            near_full_m=full,
            speckle_cells=0.0 if rec.speckle_cells is None else float(rec.speckle_cells),
            noise_per_threshold=0.0 if rec.threshold_width is None else rec.threshold_width,
        )

    def floor_factor(self) -> float:
        """The least received peak, over the threshold, of an echo these laws can still
        detect: the speckle's largest draw (the hashed normal's bound, 8.66, through
        Marsaglia and Tsang's cube) lifts it, and the receiver noise at 5 of its deviations
        (an echo below it is detected with probability under 3e-7). What culls the
        weather's particles and soft targets that cannot be seen."""
        gain = 1.0
        if self.speckle_cells > 0.0:
            d = self.speckle_cells - 1.0 / 3.0
            most = 1.0 + NORMAL_BOUND / math.sqrt(9.0 * d)
            gain = d * most**3 / self.speckle_cells
        return max(1.0 - NOISE_CUT * self.noise_per_threshold, NOISE_FLOOR) / gain

    def kernel_args(self) -> tuple[float, float, float, float, float, float]:
        """The laws as the kernels take them: ``(on, near_mode, near_start_m, near_full_m,
        speckle_cells, noise_per_threshold)`` (``on`` 1.0)."""
        return (1.0, float(self.near_mode), self.near_start_m, self.near_full_m,
                self.speckle_cells, self.noise_per_threshold)  # fmt: skip


#: The largest hashed normal, ``sqrt(-2 ln(2^-54))`` (the least hashed uniform is 2^-54).
NORMAL_BOUND = math.sqrt(-2.0 * math.log(2.0**-54))
#: The receiver noise's deviations below the threshold past which no echo is looked for, and
#: the floor of that reach (a share of the threshold).
NOISE_CUT, NOISE_FLOOR = 5.0, 0.05

#: What the kernels take for a receiver with no law on (``on`` 0.0).
NO_RECEIVER = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


#: The near-range overlap: the weather's linear ramp, ``[start, full]`` (one function for
#: both: :func:`simulator.beam.linear_overlap`).
near_overlap = linear_overlap


def gamma_unit_mean(key: NDArray[np.uint64], cells: float) -> NDArray[np.float64]:
    """Gamma(cells, 1 / cells) numbers, mean 1, one per hashed key (``cells`` >= 1).

    Marsaglia and Tsang (2000): with ``d = M - 1/3``, ``c = 1 / sqrt(9 d)``, a standard
    normal ``z`` and a uniform ``u``, ``v = (1 + c z)^3`` is accepted when ``v > 0`` and
    ``ln u < z^2 / 2 + d - d v + d ln v``, and ``d v`` is Gamma(M, 1). Round ``t`` draws
    ``z = hash_normal(h)`` and ``u = hash_uniform(mix64(h + 2 gamma))`` from ``h =
    mix64(key + t)`` (wrapping). After :data:`SPECKLE_ROUNDS` rejections: 1.

    Parameters
    ----------
    key : (N,) uint64
    cells : float

    Returns
    -------
    (N,) float64
    """
    key = np.asarray(key, dtype=np.uint64)
    d = cells - 1.0 / 3.0
    c = 1.0 / np.sqrt(9.0 * d)
    out = np.ones(len(key))
    todo = np.arange(len(key))
    two_gamma = np.uint64((2 * GOLDEN_GAMMA) % 2**64)
    for t in range(SPECKLE_ROUNDS):
        if len(todo) == 0:
            break
        with np.errstate(over="ignore"):
            h = physics.mix64(key[todo] + np.uint64(t))
            u = physics.hash_uniform(physics.mix64(h + two_gamma))
        z = physics.hash_normal(h)
        v = 1.0 + c * z
        ok = v > 0.0
        v3 = v * v * v
        with np.errstate(invalid="ignore", divide="ignore"):
            ok &= np.log(u) < 0.5 * (z * z) + d - d * v3 + d * np.log(v3)
        out[todo[ok]] = d * v3[ok] / cells
        todo = todo[~ok]
    return out


def receiver_gains(
    laws: ReceiverLaws, jitter_key: NDArray[np.uint64], range_true_m: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The factors on echoes' energies: for detection and for the reported intensity.

    Parameters
    ----------
    laws : ReceiverLaws
    jitter_key : (N,) uint64
        Each echo's range-jitter key (:func:`simulator.steps.echoes.jitter_keys`).
    range_true_m : (N,) float64

    Returns
    -------
    detection, intensity : (N,) float64
        ``O x g`` and ``g`` (``O x g`` with the near mode 2); 1 where a law is off.
    """
    n = len(range_true_m)
    speckle = np.ones(n)
    if laws.speckle_cells > 0.0:
        key = physics.mix64(np.asarray(jitter_key, np.uint64) ^ np.uint64(SALT_SPECKLE))
        speckle = gamma_unit_mean(key, laws.speckle_cells)
    if laws.near_mode == 0:
        return speckle, speckle
    overlap = near_overlap(range_true_m, laws.near_start_m, laws.near_full_m)
    detection = overlap * speckle
    return detection, detection if laws.near_mode == 2 else speckle


def received_energies(
    laws: ReceiverLaws | None,
    jitter_key: NDArray[np.uint64],
    range_true_m: NDArray[np.float64],
    energy: NDArray[np.float64],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Echoes' energies as the receiver detects and reads them: ``energy`` times
    :func:`receiver_gains`' two factors; ``energy`` itself for both without laws."""
    if laws is None:
        return energy, energy
    gain, gain_read = receiver_gains(laws, jitter_key, range_true_m)
    return energy * gain, energy * gain_read


def soft_detected(
    laws: ReceiverLaws | None,
    received: NDArray[np.float64],
    threshold: float,
    jitter_key: NDArray[np.uint64],
) -> NDArray[np.bool_]:
    """(N,) bool: ``received + width x threshold x n >= threshold``, ``n =
    hash_normal(mix64(jitter_key ^ salt))``; ``received >= threshold`` without a width."""
    if laws is None or laws.noise_per_threshold == 0.0:
        return received >= threshold
    key = physics.mix64(np.asarray(jitter_key, np.uint64) ^ np.uint64(SALT_DETECTION))
    sigma = laws.noise_per_threshold * threshold
    return received + sigma * physics.hash_normal(key) >= threshold
