"""The receiver's laws fitted to a real frame, beam by beam (``calibrate --twin``).

The twin aims every beam of one revolution at the surfaces calibrate found, so each beam
on a surface has a predicted received peak over the threshold, ``x = S / S_th``, and a
predicted reading (the fitted law, with no noise). Against what the real beam did
(returned or not, and its reading), three laws of :mod:`simulator.steps.receiver` are
fitted, each only where the data constrain it, otherwise left out with the reason:

1. **Near-range overlap** ``[start, full]``: the median of ``real / predicted`` per range
   bin below 20 m against the linear ramp, by least squares over a grid, when at least
   :data:`MIN_NEAR_BEAMS` beams lie within 8 m and the nearest bins read below
   :data:`NEAR_DIM` of the far ones.
2. **Speckle** ``M``, from the scatter of the readings about the law. For ``g ~ Gamma(M,
   1/M)`` the variance of ``log g`` is the trigamma function ``psi1(M)``, but ``log g`` is
   skewed, so its robust variance is tabulated from the model's own draws
   (:func:`speckle_cells_of`); the readings'
   robust variance of ``log(real / predicted)`` on beams far above the threshold (``x >=
   8``, where dropping the weak draws does not narrow the spread) and beyond the near
   overlap (when one is fitted), less the quantisation's share, is set equal to it. A
   law fitted on log readings gives ``exp(E log reading)``, which is ``exp(psi(M) - log
   M)`` times the mean reading; the overrides make up the difference
   (:meth:`ReceiverFit.overrides`).
3. **Soft threshold**: the width ``w`` and a scale ``c`` of the threshold, by the binomial
   likelihood of the beams' returns, with the detection probability
   ``P(x) = E_g[Phi((g O x / c - 1) / w)]`` (speckle included, the expectation over
   :data:`SPECKLE_DRAWS` hashed draws), over beams binned by ``log x``; fitted when at
   least :data:`MIN_UNDETECTED` beams on surfaces did not return.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..config import ScannerConfig
from ..physics import mix64
from ..steps.receiver import gamma_unit_mean, near_overlap

__all__ = [
    "BeamEvidence",
    "ReceiverFit",
    "digamma",
    "fit_receiver",
    "normal_cdf",
    "speckle_cells_of",
]

#: Beams within 8 m a near-range fit needs.
MIN_NEAR_BEAMS = 200
#: The nearest range bins must read below this share of the far ones for an overlap.
NEAR_DIM = 0.8
#: Beams on surfaces that did not return, for the soft threshold to be fitted.
MIN_UNDETECTED = 200
#: The soft threshold's width is fitted within these: a threshold at least one noise sigma
#: above the noise (a false-alarm probability below 0.16: ``width = 1 / Q^-1(P_fa)``),
#: and no finer than the fit's range of ``log x`` bins can tell.
MIN_WIDTH, MAX_WIDTH = 0.02, 1.0
#: Hashed speckle draws the detection probability averages over.
SPECKLE_DRAWS = 256
#: Readings above this many quantisation steps, for the scatter (coarser ones are steps).
MIN_STEPS = 4.0


def digamma(x: NDArray | float) -> NDArray:
    """The digamma function psi(x), x > 0 (recurrence to x >= 6, then the asymptotic
    series; error below 1e-10)."""
    x = np.asarray(x, dtype=np.float64).copy()
    out = np.zeros_like(x)
    for _ in range(6):
        small = x < 6.0
        out[small] -= 1.0 / x[small]
        x[small] += 1.0
    inv2 = 1.0 / (x * x)
    return out + np.log(x) - 0.5 / x - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 / 252))


def normal_cdf(z: NDArray) -> NDArray:
    """Phi(z), the standard normal CDF (Abramowitz and Stegun 7.1.26 for erf: error below
    1.5e-7)."""
    z = np.asarray(z, dtype=np.float64)
    t = np.abs(z) / math.sqrt(2.0)
    k = 1.0 / (1.0 + 0.3275911 * t)
    poly = k * (
        0.254829592 + k * (-0.284496736 + k * (1.421413741 + k * (-1.453152027 + k * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-t * t)
    return 0.5 * (1.0 + np.sign(z) * erf)


@dataclass(frozen=True)
class BeamEvidence:
    """The beams of one frame on the surfaces, predicted and real.

    Attributes
    ----------
    x : (B,) float64
        Predicted received peak over the threshold (no overlap, no speckle).
    range_m : (B,) float64
        Predicted range.
    predicted : (B,) float64
        Predicted reading (the fitted law, before the sensor's clip and rounding).
    returned : (B,) bool
        Whether the real beam returned from the surface.
    reading : (B,) float64
        The real reading where it returned (else 0).
    step : float
        The sensor's reading step (0: unquantised).
    """

    x: NDArray[np.float64]
    range_m: NDArray[np.float64]
    predicted: NDArray[np.float64]
    returned: NDArray[np.bool_]
    reading: NDArray[np.float64]
    step: float = 1.0


@dataclass
class ReceiverFit:
    """What was fitted, and why a law was left out."""

    speckle_cells: float | None = None
    threshold_width: float | None = None
    threshold_scale: float = 1.0
    overlap_m: tuple[float, float] | None = None
    #: The share of beams that drop whatever their energy (fitted beside the threshold).
    drop_share: float = 0.0
    #: ``exp(log M - psi(M))``: the reflectances' factor under speckle.
    reflectance_factor: float = 1.0
    notes: list[str] = field(default_factory=list)

    def overrides(self, scanner: ScannerConfig) -> dict[str, Any]:
        """The scanner overrides that carry the fit (deep-merged into the calibrated ones):
        ``receiver:`` and ``overlap_m``; and, since the library's reflectances are the
        readings' geometric level (their log-mean) while speckle scatters about the mean,
        ``intensity_scale`` times :attr:`reflectance_factor` ``F`` and the threshold's
        reference range times ``sqrt(F / c)`` (the same readings and detections as every
        reflectance raised by ``F`` and the threshold scaled by ``c``)."""
        receiver: dict[str, Any] = {}
        out: dict[str, Any] = {}
        factor = self.reflectance_factor
        if self.speckle_cells is not None:
            receiver["speckle_cells"] = round(self.speckle_cells, 3)
            out["intensity_scale"] = round(scanner.intensity_scale * factor, 6)
        if self.threshold_width is not None:
            receiver["threshold_width"] = round(self.threshold_width, 4)
        if self.speckle_cells is not None or self.threshold_width is not None:
            reference = scanner.detection.reference_range_m
            out["detection"] = {
                "reference_range_m": round(reference * math.sqrt(factor / self.threshold_scale), 4)
            }
        if self.overlap_m is not None:
            receiver["near_overlap"] = "detection_and_intensity"
            out["overlap_m"] = [round(v, 3) for v in self.overlap_m]
        if receiver:
            out["receiver"] = receiver
        return out

    def lines(self) -> list[str]:
        """What was fitted, and the notes."""
        got = []
        if self.speckle_cells is not None:
            got.append(f"speckle cells {self.speckle_cells:.2f} (reflectance factor "
                       f"{self.reflectance_factor:.3f})")  # fmt: skip
        if self.overlap_m is not None:
            got.append(f"near overlap {self.overlap_m[0]:.1f}-{self.overlap_m[1]:.1f} m")
        if self.threshold_width is not None:
            got.append(f"threshold width {self.threshold_width:.3f}, scale "
                       f"{self.threshold_scale:.3f}")  # fmt: skip
        head = "receiver: " + ("; ".join(got) if got else "no law fitted")
        return [head, *(f"  note: {n}" for n in self.notes)]


def _robust_var(r: NDArray[np.float64]) -> float:
    """The robust variance ``(1.4826 MAD)^2`` of values."""
    mad = 1.4826 * np.median(np.abs(r - np.median(r)))
    return float(mad * mad)


@functools.cache
def _speckle_table() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``M`` on a log grid from 1 to 1e4, and the robust variance of ``log g`` for each
    (20,000 of the model's draws a value), made once a process."""
    cells = np.exp(np.linspace(0.0, math.log(1e4), 49))
    keys = mix64(np.arange(20_000, dtype=np.uint64) + np.uint64(0xC0FFEE))
    return cells, np.array([_robust_var(np.log(gamma_unit_mean(keys, m))) for m in cells])


def speckle_cells_of(log_ratio: NDArray[np.float64], quantisation_var: float = 0.0) -> float:
    """``M`` whose ``log g``, ``g ~ Gamma(M, 1/M)``, has the robust variance of
    ``log_ratio`` (less ``quantisation_var``); in [1, 1e4].

    ``log g`` is skewed for small ``M``, where its robust variance is not ``psi1(M)``; so
    the law is tabulated from the model's own draws (:func:`gamma_unit_mean`, 20,000 a
    value of ``M``) and inverted by interpolation in ``log M``."""
    var = _robust_var(np.asarray(log_ratio, dtype=np.float64)) - quantisation_var
    cells, table = _speckle_table()
    if var >= table[0]:
        return 1.0
    if var <= table[-1]:
        return 1e4
    return float(np.exp(np.interp(-var, -table, np.log(cells))))


def _near_overlap_of(ev: BeamEvidence, fit: ReceiverFit) -> None:
    """Fit ``fit.overlap_m`` from the readings below 20 m (see the module)."""
    ok = ev.returned & (ev.predicted > 0) & (ev.reading > 0)
    near = ok & (ev.range_m < 8.0)
    if np.count_nonzero(near) < MIN_NEAR_BEAMS:
        fit.notes.append(f"near-range overlap left out: {np.count_nonzero(near)} beams within "
                         f"8 m (< {MIN_NEAR_BEAMS})")  # fmt: skip
        return
    edges = np.arange(0.0, 20.5, 0.5)
    ratio = ev.reading[ok] / ev.predicted[ok]
    which = np.digitize(ev.range_m[ok], edges) - 1
    counts = np.bincount(which[which < len(edges) - 1], minlength=len(edges) - 1)
    order = np.argsort(which, kind="stable")
    med = np.full(len(edges) - 1, np.nan)
    starts = np.searchsorted(which[order], np.arange(len(edges) - 1))
    for b in np.flatnonzero(counts >= 20):  # (bins, not beams)
        med[b] = np.median(ratio[order[starts[b] : starts[b] + counts[b]]])
    far = np.median(ratio[ev.range_m[ok] >= 20.0]) if np.any(ev.range_m[ok] >= 20.0) else 1.0
    centre = 0.5 * (edges[:-1] + edges[1:])
    have = np.isfinite(med)
    rel = med[have] / far
    if rel[: max(1, np.count_nonzero(centre[have] < 8.0))].min() >= NEAR_DIM:
        fit.notes.append(f"near-range overlap left out: the readings within 8 m are not dimmed "
                         f"(least {rel.min():.2f}x the far ones)")  # fmt: skip
        return
    best = (np.inf, 0.0, 0.0)
    w = np.sqrt(counts[have])
    for start in np.arange(0.0, 10.01, 0.1):  # (every full of a start at once)
        fulls = np.arange(start + 0.5, 40.01, 0.25)
        ramps = np.clip((centre[have][None, :] - start) / (fulls[:, None] - start), 0.0, 1.0)
        err = np.sum(w * (rel - ramps) ** 2, axis=1)
        j = int(np.argmin(err))  # (the first of equals, as one at a time)
        if err[j] < best[0]:
            best = (float(err[j]), start, fulls[j])
    fit.overlap_m = (float(best[1]), float(best[2]))


def _detection_law_of(ev: BeamEvidence, fit: ReceiverFit) -> None:
    """Fit ``fit.threshold_width`` and ``threshold_scale`` (see the module)."""
    missed = np.count_nonzero(~ev.returned)
    if missed < MIN_UNDETECTED:
        fit.notes.append(f"soft threshold left out: {missed} beams on the surfaces did not "
                         f"return (< {MIN_UNDETECTED})")  # fmt: skip
        return
    overlap = 1.0
    if fit.overlap_m is not None:
        overlap = near_overlap(ev.range_m, *fit.overlap_m)
    x = np.maximum(ev.x * overlap, 1e-12)
    edges = np.linspace(np.log(x).min(), np.log(x).max() + 1e-9, 241)
    which = np.digitize(np.log(x), edges) - 1
    n = np.bincount(which, minlength=240).astype(float)
    k = np.bincount(which, weights=ev.returned.astype(float), minlength=240)
    used = n > 0
    # The law's level is exp(E log reading); the mean energy, which speckle scatters
    # about, is reflectance_factor times it.
    xb = fit.reflectance_factor * np.exp(0.5 * (edges[:-1] + edges[1:]))[used]
    n, k = n[used], k[used]
    cells = fit.speckle_cells
    keys = mix64(np.arange(SPECKLE_DRAWS, dtype=np.uint64) + np.uint64(0x51ED))
    g = gamma_unit_mean(keys, cells) if cells is not None else np.ones(1)

    drop = np.linspace(0.0, 0.5, 26)  # the share that drops whatever its energy

    def loglik(scale: float, width: float) -> NDArray[np.float64]:
        p = normal_cdf((g[None, :] * xb[:, None] / scale - 1.0) / width).mean(axis=1)
        p = np.clip(p[None, :] * (1.0 - drop[:, None]), 1e-9, 1 - 1e-9)
        return np.sum(k * np.log(p) + (n - k) * np.log1p(-p), axis=1)

    best = (-np.inf, 1.0, 0.0, 0.0)
    for log_c in np.linspace(-3.0, 3.0, 61):
        for log_w in np.linspace(math.log(MIN_WIDTH), math.log(MAX_WIDTH), 40):
            ll = loglik(math.exp(log_c), math.exp(log_w))
            j = int(np.argmax(ll))
            if ll[j] > best[0]:
                best = (float(ll[j]), math.exp(log_c), math.exp(log_w), float(drop[j]))
    fit.threshold_scale, fit.threshold_width, fit.drop_share = best[1], best[2], best[3]
    if fit.threshold_width >= MAX_WIDTH * 0.999:
        fit.notes.append(f"threshold width at its bound {MAX_WIDTH}: the beams' returns follow "
                         "their predicted energy less than a receiver's noise can make them "
                         "(the surfaces' reflectance varies within them)")  # fmt: skip
    if fit.drop_share > 0.0:
        fit.notes.append(f"{100 * fit.drop_share:.0f} % of the beams on surfaces drop whatever "
                         "their energy (edges, dark spots, what the twin's planes do not "
                         "have): no law of the receiver, so not in the twin")  # fmt: skip


def fit_receiver(ev: BeamEvidence) -> ReceiverFit:
    """The receiver's laws of one frame's beams (see the module): the near overlap, then
    speckle beyond it, then the soft threshold (which sees both)."""
    fit = ReceiverFit()
    _near_overlap_of(ev, fit)
    beyond = 0.0 if fit.overlap_m is None else fit.overlap_m[1]
    far = ev.returned & (ev.x >= 8.0) & (ev.range_m >= beyond) & (ev.predicted > 0)
    far &= ev.reading >= MIN_STEPS * max(ev.step, 1e-12)
    if np.count_nonzero(far) >= 200:
        ratio = np.log(ev.reading[far] / ev.predicted[far])
        quant = float(np.median((ev.step / ev.reading[far]) ** 2 / 12.0)) if ev.step else 0.0
        fit.speckle_cells = speckle_cells_of(ratio, quant)
        m = fit.speckle_cells
        fit.reflectance_factor = float(math.exp(math.log(m) - digamma(m).item()))
    else:
        fit.notes.append(f"speckle left out: {np.count_nonzero(far)} readings far above the "
                         f"threshold beyond the near range (< 200)")  # fmt: skip
    _detection_law_of(ev, fit)
    return fit
