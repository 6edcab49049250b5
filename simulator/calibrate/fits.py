"""The fits of the per-hit model's laws to a surface's points, each with an uncertainty
and a verdict where the data cannot constrain a parameter.

- Intensity (the calibrated reflectivity ``scale rho cos^k``): a robust straight line in
  ``log I`` against ``log cos`` (Huber weights by iterated reweighting), saturated and
  zero readings left out; the intercept gives ``rho``, the slope ``k``.
- Range scatter: the variance of the residuals to the plane in bins of incidence is
  ``roughness^2 E[cos_eff^-3] + noise^2 + q^2 / 12`` (relief grows as ``cos^-1.5`` of the
  micro-slope's tilted incidence, sensor jitter does not, ``q`` the range resolution); a
  non-negative least-squares line.
- Micro-slope: a tilt ``delta`` of the surface moves ``log I`` by ``-k tan(theta) delta``,
  so the spread of ``log I`` about the law at fixed incidence is ``k tan(theta) sigma``.

Spreads are robust: clipped at 3.5 standard deviations (iterated), which keeps the
variance of a bin that mixes scatters and works on coarsely quantised readings;
uncertainties are one standard error from the fits' covariances (the bins' scatter for
the spreads). The micro-slope is fitted first: the range scatter's law needs its tilts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Fit",
    "RingCounts",
    "detected_share",
    "fit_detection",
    "fit_intensity",
    "fit_micro_slope",
    "fit_range_scatter",
    "ring_counts",
    "robust_sigma",
]

#: Fewest points in an incidence bin.
BIN_POINTS = 60
#: The intensity law is fitted where the incidence cosine is above this, when it can be.
INTENSITY_MIN_COS = 0.15
#: The range scatter is fitted where the incidence cosine is at least this when enough
#: remains (the cosine spans a factor 3 in cos^-3): more grazing, the tilts' mixture of
#: scatters loses its widest part (the most grazing tilts drop out first, and the
#: clipped variance cuts the tails), so its variance falls below the law's by 10-20 %.
RANGE_MIN_COS = 0.2
#: Quantiles of the micro-slope tilt over which a pulse's detection is averaged.
TILT_SAMPLES = 64
#: The micro-slope is fitted where the incidence cosine is above this (tan theta < 4).
MICRO_SLOPE_MIN_COS = 0.25
#: The span of ``log cos`` below which the Minnaert exponent is not constrained.
MIN_LOG_COS_SPAN = 0.25


@dataclass
class Fit:
    """Fitted values (name -> (value, standard error)) and verdicts on what is weak."""

    values: dict[str, tuple[float, float]] = field(default_factory=dict)
    verdicts: list[str] = field(default_factory=list)
    curve: dict[str, NDArray[np.float64]] = field(default_factory=dict)  # for the report
    #: The fit ran and left its values out on purpose (its verdicts say why): no cruder
    #: fit is tried in its place.
    settled: bool = False

    def value(self, name: str) -> float:
        return self.values[name][0]


def robust_sigma(x: NDArray) -> float:
    """1.4826 times the median absolute deviation: the standard deviation of the normal
    part of ``x``, unmoved by outliers."""
    x = np.asarray(x, dtype=np.float64)
    return float(1.4826 * np.median(np.abs(x - np.median(x)))) if len(x) else float("nan")


def _huber_line(
    x: NDArray, y: NDArray, c: float = 1.345, rounds: int = 30
) -> tuple[NDArray, NDArray, NDArray]:
    """Robust ``y = a + b x``: coefficients (a, b), their covariance, and the weights."""
    a_mat = np.stack([np.ones_like(x), x], axis=1)
    w = np.ones_like(x)
    coef = np.zeros(2)
    for _ in range(rounds):
        sw = np.sqrt(w)
        coef_new, *_ = np.linalg.lstsq(a_mat * sw[:, None], y * sw, rcond=None)
        r = y - a_mat @ coef_new
        s = max(robust_sigma(r), 1e-12)
        w = np.minimum(1.0, c * s / np.maximum(np.abs(r), 1e-300))
        if np.allclose(coef_new, coef, rtol=0, atol=1e-12):
            coef = coef_new
            break
        coef = coef_new
    r = y - a_mat @ coef
    s = max(robust_sigma(r), 1e-12)
    normal = (a_mat * w[:, None]).T @ a_mat
    cov = s**2 * np.linalg.pinv(normal)
    return coef, cov, w


def fit_intensity(intensity: NDArray, cos: NDArray, *, scale: float, intensity_max: float) -> Fit:
    """``rho`` and ``k`` of ``I = scale rho cos^k``; saturated (at ``intensity_max``) and
    zero readings are left out."""
    fit = Fit()
    i = np.asarray(intensity, dtype=np.float64)
    c = np.asarray(cos, dtype=np.float64)
    ok = (i > 0) & (i < 0.999 * intensity_max) & (c > 1e-3)
    # Near grazing incidence the micro-slope's tilts and the dropout of the weakest echoes
    # (only the footprints tilted towards the sensor stay) bias log I up: leave it out
    # where enough is left.
    steep = ok & (c >= INTENSITY_MIN_COS)
    if steep.sum() >= 200 and np.ptp(np.log(c[steep])) >= MIN_LOG_COS_SPAN:
        ok = steep
    saturated = int(np.sum(i >= 0.999 * intensity_max))
    if saturated:
        fit.verdicts.append(f"{saturated} saturated readings left out")
    if ok.sum() < 20:
        fit.verdicts.append("too few usable intensities: reflectance and k not fitted")
        return fit
    x, y = np.log(c[ok]), np.log(i[ok] / scale)
    span = float(np.percentile(x, 95) - np.percentile(x, 5))
    if span < MIN_LOG_COS_SPAN:
        # one incidence: only rho cos^k is seen; report it as rho with k = 1 (Lambert)
        level = float(np.exp(np.median(y)))
        cos_mid = float(np.exp(np.median(x)))
        fit.values["reflectance"] = (level / cos_mid, float("nan"))
        fit.values["minnaert_k"] = (1.0, float("nan"))
        fit.verdicts.append(
            f"incidence spans only cos {np.exp(np.percentile(x, 5)):.2f}-"
            f"{np.exp(np.percentile(x, 95)):.2f}: k cannot be told from rho; k = 1 assumed"
        )
        return fit
    coef, cov, _ = _huber_line(x, y)
    rho = float(np.exp(coef[0]))
    fit.values["reflectance"] = (rho, rho * float(np.sqrt(cov[0, 0])))
    fit.values["minnaert_k"] = (float(coef[1]), float(np.sqrt(cov[1, 1])))
    if coef[1] < 0:
        fit.verdicts.append(f"k fitted below 0 ({coef[1]:.3f}): brighter at grazing incidence")
    grid = np.linspace(c[ok].min(), 1.0, 100)
    fit.curve = {"cos": grid, "intensity": scale * rho * grid ** coef[1]}
    return fit


def _bins(cos: NDArray, per_bin: int = BIN_POINTS, max_bins: int = 24) -> list[NDArray]:
    """Indices of quantile bins of ``cos`` with at least ``per_bin`` points each."""
    n = len(cos)
    count = int(min(max_bins, n // per_bin))
    if count < 2:
        return []
    order = np.argsort(cos, kind="stable")
    return list(np.array_split(order, count))


def _tilt_quantiles() -> NDArray[np.float64]:
    from statistics import NormalDist

    q = (np.arange(TILT_SAMPLES) + 0.5) / TILT_SAMPLES
    return np.array([NormalDist().inv_cdf(v) for v in q])


def fit_range_scatter(
    residual_m: NDArray, cos: NDArray, *, resolution_m: float, slope_rad: float = 0.0
) -> Fit:
    """``roughness_m`` and the sensor's ``range_noise_m`` from the residuals' spread per
    incidence bin: ``var = roughness^2 E[cos_eff^-3] + noise^2 + q^2/12``, the mean over
    the micro-slope's tilts (``slope_rad``) of the tilted incidence. Each bin's variance is
    a clipped one (3.5 sigma): the tilts make a bin a mixture of scatters, whose median
    deviation would understate its variance.
    """
    from ..physics import tilted_cos

    fit = Fit()
    r = np.asarray(residual_m, dtype=np.float64)
    c = np.asarray(cos, dtype=np.float64)
    finite = np.isfinite(r) & np.isfinite(c)
    r, c = r[finite], np.clip(c[finite], 0.05, 1.0)
    steep = c >= RANGE_MIN_COS
    if len(_bins(c[steep])) >= 4 and (c[steep].max() / c[steep].min()) ** 3 >= 3.0:
        r, c = r[steep], c[steep]
    bins = _bins(c)
    if not bins:
        fit.verdicts.append("too few points for the range scatter")
        return fit
    z = _tilt_quantiles()
    x = np.array([
        np.mean(np.clip(tilted_cos(c[b][:, None], slope_rad * z[None, :]), 0.05, 1.0) ** -3.0)
        for b in bins
    ])  # fmt: skip
    var = np.array([_clipped_sigma(r[b], clip=3.5) ** 2 for b in bins])
    n = np.array([len(b) for b in bins], dtype=np.float64)
    var_q = resolution_m**2 / 12.0
    target = var - var_q
    # the variance of a variance estimate: 2 var^2 / n (x 1.36 for the MAD); weights 1/that
    w = n / (2.0 * 1.36 * np.maximum(var, 1e-12) ** 2)
    a_mat = np.stack([x, np.ones_like(x)], axis=1)
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(a_mat * sw[:, None], target * sw, rcond=None)
    if coef[0] < 0 or coef[1] < 0:  # non-negative: refit with the other term alone
        if coef[0] < 0:
            coef = np.array([0.0, float(np.sum(w * target) / np.sum(w))])
        else:
            coef = np.array([float(np.sum(w * x * target) / np.sum(w * x * x)), 0.0])
    cov = np.linalg.pinv((a_mat * w[:, None]).T @ a_mat)
    chi2 = float(np.sum(w * (target - a_mat @ coef) ** 2)) / max(len(x) - 2, 1)
    cov *= max(chi2, 1.0)
    a, b = max(coef[0], 0.0), max(coef[1], 0.0)
    rough = float(np.sqrt(a))
    noise = float(np.sqrt(b))
    fit.values["roughness_m"] = (rough, float(np.sqrt(cov[0, 0])) / (2 * max(rough, 1e-6)))
    fit.values["range_noise_m"] = (noise, float(np.sqrt(cov[1, 1])) / (2 * max(noise, 1e-6)))
    if x.max() / x.min() < 3.0:
        fit.verdicts.append(
            f"incidence spans too little (cos^-3 from {x.min():.1f} to {x.max():.1f}) to tell "
            "roughness from sensor noise"
        )
    if a * x.max() < 0.25 * (b + var_q):
        fit.verdicts.append(
            "the relief's scatter stays below the sensor noise here: roughness is an upper "
            f"bound ({np.sqrt(0.25 * (b + var_q) / x.max()):.4f} m)"
        )
    fit.curve = {"cos": np.array([np.mean(c[b]) for b in bins]), "sigma_m": np.sqrt(var),
                 "model_m": np.sqrt(np.maximum(a_mat @ np.array([a, b]) + var_q, 0))}  # fmt: skip
    return fit


def fit_micro_slope(
    intensity: NDArray, cos: NDArray, *, scale: float, rho: float, k: float,
    intensity_max: float, intensity_step: float,
) -> Fit:  # fmt: skip
    """``micro_slope_deg`` from the spread of ``log I`` about the law at fixed incidence:
    ``sigma_logI = k tan(theta) sigma_delta`` (plus the reading's quantisation)."""
    fit = Fit()
    i = np.asarray(intensity, dtype=np.float64)
    c = np.asarray(cos, dtype=np.float64)
    # Away from grazing incidence, where a tilt moves log cos linearly (tan theta < 4).
    ok = (i > 0) & (i < 0.999 * intensity_max) & (c > MICRO_SLOPE_MIN_COS) & (c < 0.999)
    if k < 0.2:
        fit.verdicts.append(f"k = {k:.2f}: the intensity hardly depends on the tilt, so the "
                            "micro-slope cannot be fitted from it (0 written)")  # fmt: skip
        fit.values["micro_slope_deg"] = (0.0, float("nan"))
        return fit
    resid = np.log(i[ok] / scale) - (np.log(rho) + k * np.log(c[ok]))
    bins = _bins(c[ok])
    if not bins:
        fit.verdicts.append("too few points for the micro-slope")
        return fit
    tan = np.array([np.mean(np.tan(np.arccos(c[ok][b]))) for b in bins])
    level = np.array([np.mean(i[ok][b]) for b in bins])
    quant = (intensity_step / np.maximum(level, 1e-9)) ** 2 / 12.0
    spread2 = np.array([_clipped_sigma(resid[b]) ** 2 for b in bins]) - quant
    x = k * tan
    slope2 = float(np.sum(x**2 * spread2) / np.sum(x**4))  # sigma_delta^2 by least squares
    sigma = float(np.sqrt(max(slope2, 0.0)))
    per_bin = np.sqrt(np.maximum(spread2, 0)) / np.maximum(x, 1e-9)
    err = float(np.std(per_bin) / np.sqrt(len(per_bin)))
    fit.values["micro_slope_deg"] = (float(np.degrees(sigma)), float(np.degrees(err)))
    fit.curve = {"cos": np.array([np.mean(c[ok][b]) for b in bins]),
                 "spread": np.sqrt(np.maximum(spread2, 0)), "model": x * sigma}  # fmt: skip
    return fit


def _clipped_sigma(x: NDArray, clip: float = 3.0, rounds: int = 5) -> float:
    """Standard deviation after clipping at ``clip`` sigmas (iterated): robust to outliers,
    and unlike the MAD it works on coarsely quantised readings."""
    x = np.asarray(x, dtype=np.float64)
    keep = np.ones(len(x), dtype=bool)
    for _ in range(rounds):
        m, sd = x[keep].mean(), x[keep].std()
        new = np.abs(x - m) <= clip * max(sd, 1e-12)
        if (new == keep).all():
            break
        keep = new
    return float(x[keep].std())


@dataclass
class RingCounts:
    """Pulses and detections per ring on a surface (from :func:`ring_counts`).

    Attributes
    ----------
    ring : (J,) int
    pulses, detected : (J,) float
        Pulses aimed at the surface (in azimuth bins where the ring met nothing else) and
        points on it.
    range_m, cos : (J,) float
        Where the ring meets the plane (median over its bins).
    """

    ring: NDArray[np.int64]
    pulses: NDArray[np.float64]
    detected: NDArray[np.float64]
    range_m: NDArray[np.float64]
    cos: NDArray[np.float64]
    #: Per azimuth bin (J, B): the bins where the ring's pulses met the plane, the points
    #: on it there, and the pulses a bin holds (the block bootstrap's data).
    meets: NDArray[np.bool_] | None = None
    on: NDArray[np.float64] | None = None
    per_bin: float = 0.0


def ring_counts(
    xyz_m: NDArray, ring: NDArray, on_surface: NDArray[np.bool_], origin_m: NDArray,
    normal: NDArray, offset_m: float, elevation_rad: NDArray, *, bins: int = 360,
) -> RingCounts:  # fmt: skip
    """How many of each ring's pulses met the plane, and how many were detected.

    The scan is cut into azimuth bins. A ring's pulses in a bin where it has a point off
    the surface went elsewhere; in the other bins, where its beam meets the plane in front
    of the sensor, every pulse went to the plane, detected or not. The pulses a bin holds
    are the median count of the bins of the rings detected all round.
    """
    d = np.asarray(xyz_m, dtype=np.float64) - origin_m
    az = np.arctan2(d[:, 1], d[:, 0])
    b = np.clip(((az + np.pi) / (2 * np.pi) * bins).astype(np.int64), 0, bins - 1)
    rings = np.arange(len(elevation_rad))
    on = np.zeros((len(rings), bins))
    off = np.zeros((len(rings), bins), dtype=bool)
    ok = ring < len(rings)
    np.add.at(on, (ring[ok & on_surface], b[ok & on_surface]), 1.0)
    off[ring[ok & ~on_surface], b[ok & ~on_surface]] = True
    centre = -np.pi + (np.arange(bins) + 0.5) * 2 * np.pi / bins
    el = np.asarray(elevation_rad)[:, None]
    dirs = np.stack([np.cos(el) * np.cos(centre), np.cos(el) * np.sin(centre),
                     np.sin(el) * np.ones_like(centre)], axis=-1)  # fmt: skip
    n_dot_d = dirs @ normal
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -(origin_m @ normal + offset_m) / n_dot_d
    meets = (t > 0) & np.isfinite(t) & ~off
    full = meets.sum(axis=1) > 0
    complete = full & ((on > 0) | ~meets).all(axis=1) & (on.sum(axis=1) > 0)
    per_bin = float(np.median(on[complete][meets[complete]])) if complete.any() else float(
        np.median(on[on > 0]))  # fmt: skip
    pulses = meets.sum(axis=1) * per_bin
    detected = np.where(meets, on, 0.0).sum(axis=1)
    t_med = np.array([np.median(t[j][meets[j]]) if meets[j].any() else np.nan for j in rings])
    cos = np.array([np.median(np.abs(n_dot_d[j][meets[j]])) if meets[j].any() else np.nan
                    for j in rings])  # fmt: skip
    keep = meets.any(axis=1)
    return RingCounts(rings[keep], pulses[keep], detected[keep], t_med[keep], cos[keep],
                      meets[keep], np.where(meets, on, 0.0)[keep], per_bin)  # fmt: skip


def _tilted_levels(
    counts: RingCounts, *, beta_rad: float, rho: float, k: float, slope_rad: float,
    pulse_length_m: float,
) -> NDArray[np.float64]:  # fmt: skip
    """(J, TILT_SAMPLES): ``rho cos_eff^k peak / R^2`` of each ring at each quantile of the
    micro-slope's tilt (normal, ``slope_rad``), which moves the footprint's incidence."""
    from ..physics import (
        footprint_range_spread_m,
        minnaert_backscatter,
        pulse_peak_factor,
        tilted_cos,
    )

    c = tilted_cos(counts.cos[:, None], slope_rad * _tilt_quantiles()[None, :])
    r = counts.range_m[:, None]
    peak = pulse_peak_factor(pulse_length_m, footprint_range_spread_m(r, c, beta_rad))
    return minnaert_backscatter(rho, c, k) * peak / r**2


def detected_share(
    counts: RingCounts, *, s_th: float, beta_rad: float, rho: float, k: float,
    slope_rad: float, pulse_length_m: float,
) -> NDArray[np.float64]:  # fmt: skip
    """The model's detected share of each ring's pulses: a pulse is detected when its
    level (:func:`_tilted_levels`) reaches ``s_th``."""
    levels = _tilted_levels(counts, beta_rad=beta_rad, rho=rho, k=k, slope_rad=slope_rad,
                            pulse_length_m=pulse_length_m)  # fmt: skip
    return _shares(levels, np.array([s_th]))[:, 0]


def _shares(levels: NDArray[np.float64], s_th: NDArray[np.float64]) -> NDArray[np.float64]:
    """(J, S): each ring's share of levels (J, Q) at or above each threshold ``s_th`` (S,),
    continuous in the threshold: the levels' distribution function is interpolated
    (linearly in log level) between its quantiles, so the share does not move in steps of
    1/Q and the threshold's fit has no flat stretches between the quantiles."""
    q = levels.shape[1]
    cdf = (np.arange(q) + 0.5) / q
    ramp = np.arange(q) * 1e-12  # equal levels (no micro-slope): a step, still increasing
    log_s = np.log(s_th)
    out = np.empty((len(levels), len(s_th)))
    for j, row in enumerate(np.log(np.maximum(levels, 1e-300))):  # one ring at a time
        out[j] = 1.0 - np.interp(log_s, np.sort(row) + ramp, cdf, left=0.0, right=1.0)
    return out


#: Thresholds tried, as reference ranges from 5 to 2000 m (0.25 % apart).
THRESHOLD_GRID = 2401
#: The threshold's block bootstrap: azimuth sectors resampled, and its replicas.
THRESHOLD_SECTORS = 24
THRESHOLD_REPLICAS = 48


def _bootstrap_threshold(
    counts: RingCounts, model: NDArray[np.float64], ref_m: NDArray[np.float64]
) -> float:
    """The threshold's standard error (m) from a block bootstrap over azimuth sectors.

    The detected shares are recounted on sectors drawn with replacement (the draws from
    hashes, no random state) and each replica's threshold is the best of ``model`` (J, S),
    the shares at the fitted divergence for each reference range ``ref_m`` (S,). Pulses
    that meet one micro-slope cell share its tilt, so the shares scatter more than a
    binomial's: the chi-square's error understates it. 0 without the per-bin counts."""
    from ..physics import hash_uniform, mix64

    if counts.meets is None or counts.on is None or counts.per_bin <= 0:
        return 0.0
    n_bins = counts.meets.shape[1]
    sector = np.arange(n_bins) * THRESHOLD_SECTORS // n_bins
    draws = (hash_uniform(mix64(np.arange(THRESHOLD_REPLICAS * THRESHOLD_SECTORS)))
             * THRESHOLD_SECTORS).astype(np.int64).reshape(THRESHOLD_REPLICAS, -1)  # fmt: skip
    p = np.clip(model, 0.02, 0.98)
    var = p * (1.0 - p)
    picks = []
    for row in draws:
        weight = np.bincount(row, minlength=THRESHOLD_SECTORS)[sector].astype(np.float64)
        pulses = (counts.meets * weight).sum(axis=1) * counts.per_bin
        share = (counts.on * weight).sum(axis=1) / np.maximum(pulses, 1.0)
        chi2 = np.sum(pulses[:, None] * (model - share[:, None]) ** 2 / var, axis=0)
        picks.append(float(ref_m[int(np.argmin(chi2))]))
    return float(np.std(picks, ddof=1))


#: A divergence other than the scanner's is taken only when it lowers the dropout's
#: chi-square by this much (3 sigma for one parameter).
CHI2_BETTER = 9.0


def fit_detection(
    counts: RingCounts, *, rho: float, k: float, slope_rad: float, pulse_length_m: float,
    divergence_rad: float, reference_reflectance: float,
) -> Fit:  # fmt: skip
    """The detection threshold (as ``reference_range_m`` at ``reference_reflectance``) and
    the beam's in-plane divergence, from the detected share of each ring's pulses.

    The shares are fitted by least squares (each ring weighted by its pulses) over a
    grid of thresholds and divergences. Rings detected all round or not at all only
    bound the threshold; the rings in between, where the dropout happens, fix it. The
    divergence is fitted when the dropout spans rings at several incidences, else the
    scanner's is kept.
    """
    fit = Fit()
    share = counts.detected / np.maximum(counts.pulses, 1.0)
    partial = (share > 0.03) & (share < 0.97)
    if partial.sum() == 0 and not ((share < 0.03).any() and (share > 0.97).any()):
        fit.verdicts.append("no ring drops out on this surface: the threshold is not constrained")
        return fit
    ref = np.geomspace(5.0, 2000.0, THRESHOLD_GRID)
    s_grid = reference_reflectance / ref**2
    fit_beta = partial.sum() >= 3
    # 3 ** [-1 .. 1]: the scanner's own divergence is the grid's middle, exactly.
    factors = 3.0 ** np.linspace(-1.0, 1.0, 25) if fit_beta else np.ones(1)
    betas = divergence_rad * factors
    middle = len(factors) // 2
    chi2 = np.empty((len(betas), len(ref)))
    models = []
    for bi, beta in enumerate(betas):
        levels = _tilted_levels(counts, beta_rad=beta, rho=rho, k=k, slope_rad=slope_rad,
                                pulse_length_m=pulse_length_m)  # fmt: skip
        model = _shares(levels, s_grid)  # (J, S)
        models.append(model)
        # chi-square of the detected shares: binomial, each ring's variance p (1 - p) / n
        p = np.clip(model, 0.02, 0.98)
        chi2[bi] = np.sum(counts.pulses[:, None] * (model - share[:, None]) ** 2
                          / (p * (1.0 - p)), axis=0)  # fmt: skip
    best_bi = int(np.argmin(chi2.min(axis=1)))
    # Where the model misses the shares by more than their binomial noise, the noise is
    # scaled by the misfit (the Birge ratio: chi-square per degree of freedom of the best fit).
    dof = max(int(partial.sum()) - 2, 1)
    birge = max(float(chi2.min()) / dof, 1.0)
    gain = (float(chi2[middle].min()) - float(chi2.min())) / birge
    if fit_beta and gain < CHI2_BETTER:
        # the data do not prefer another divergence clearly: keep the scanner's
        fit.verdicts.append(
            f"the divergence is the scanner's: another fits the dropout better by chi-square "
            f"{gain:.1f} only (misfit-scaled; < {CHI2_BETTER:g})"
        )
        best_bi, fit_beta = middle, False
    bi = best_bi
    row = chi2[bi]
    si = int(np.argmin(row))
    # a stretch of equal chi-square (no ring between two thresholds): its middle
    flat = row <= row[si] + 1e-9 * (1.0 + row[si])
    lo_i, hi_i = si, si
    while lo_i > 0 and flat[lo_i - 1]:
        lo_i -= 1
    while hi_i < len(row) - 1 and flat[hi_i + 1]:
        hi_i += 1
    if lo_i == 0 or hi_i == len(ref) - 1:
        fit.verdicts.append(
            f"the threshold fit ends at the edge of its grid ({ref[si]:g} m): not constrained"
        )
        return fit
    si = (lo_i + hi_i) // 2
    # one standard error: where the (misfit-scaled) chi-square rises by 1, or the block
    # bootstrap's spread if wider (neighbouring pulses share a micro-slope cell)
    inside = np.flatnonzero(row <= row[si] + birge)
    step = float(np.log(ref[1] / ref[0]))
    se = max(0.5 * float(ref[inside.max()] - ref[inside.min()]), float(ref[si]) * step,
             _bootstrap_threshold(counts, models[bi], ref))  # fmt: skip
    fit.values["reference_range_m"] = (float(ref[si]), se)
    if fit_beta:
        beta_mrad = 1e3 * float(betas[bi])
        fit.values["divergence_mrad"] = (beta_mrad, beta_mrad * float(np.log(betas[1] / betas[0])))
    elif partial.sum() < 3:
        fit.verdicts.append(f"{int(partial.sum())} ring(s) in the dropout: the divergence is "
                            "the scanner's")  # fmt: skip
    model = detected_share(counts, s_th=float(s_grid[si]), beta_rad=float(betas[bi]), rho=rho,
                           k=k, slope_rad=slope_rad, pulse_length_m=pulse_length_m)  # fmt: skip
    fit.curve = {"range_m": counts.range_m, "share": share, "model": model}
    return fit
