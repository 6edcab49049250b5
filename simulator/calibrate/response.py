"""The sensor's intensity response and each surface's reflectance and Minnaert exponent,
fitted jointly by a likelihood that knows how a real sensor reports intensity.

The reading of point ``j`` (surface ``s``, ring ``r``, range ``R``, incidence cosine
``c``) is the true level rounded to whole steps ``q`` of the sensor::

    log v_j = log(scale g_r (R / R0)^p rho_s) + k_s log c_j + e_j,
    e_j ~ N(0, sigma0_s^2 + (k_s tan(theta_j) sigma_delta_s)^2)

``g_r`` the per-ring gain, ``p`` the range response's exponent (fitted only when the data
tell it from ``k``: on one plane ``R = D / c``), ``sigma_delta`` the micro-slope (a tilt
``delta`` moves ``log c`` by ``-tan(theta) delta``) and ``sigma0`` an intercept for any
other intensity noise. A reading ``n`` says only ``(n - 1/2) q <= v < (n + 1/2) q``:
each is interval-censored, a zero is ``v < q / 2`` (censored, not dropped), a reading at
the top is ``v >= max - q / 2``. A small uniform share (1 %) of outliers keeps clutter
from pulling the fit.

A ring's gain is fitted only when the ring meets a surface it sees at several incidences
(a wall): a plane a ring meets at one incidence (the ground) lets ``g_r`` trade against that
plane's ``rho`` and ``k`` (its readings fix ``log g_r + log rho + k log c_r`` only), so a ring that
meets only such planes keeps a gain of 1 and they take their law from the other rings.

Uncertainties are from a block bootstrap over azimuth sectors (the micro-slope and the
relief are fixed to places, so neighbouring points are not independent): the fit is
repeated on resampled sectors and the spread of the replicas is the standard error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from .fits import Fit
from .likelihood import (
    BOOTSTRAP_BLOCKS,
    CensoredReadings,
    NegLogLikelihood,
    bootstrap_replicas,
    newton_fit,
    reading_intervals,
)

__all__ = ["Response", "ResponseFitOptions", "fit_response"]

#: Fewest points a ring needs on a surface to link it to that surface.
RING_LINK_POINTS = 40
#: Most points of a surface used in the fit (a seeded random subset).
MAX_SURFACE_POINTS = 6000
#: The span of ``log cos`` (5th to 95th percentile) below which k is not constrained.
MIN_LOG_COS_SPAN = 0.25
#: The least spread (standard deviation) of ``log cos`` within a ring's points on a
#: surface, pooled over its rings, for the surface to tie the rings' gains together.
MIN_RING_LOG_COS_STD = 0.05
#: The span of ``log D`` (perpendicular distance) a surface needs to tell a range
#: response from the Minnaert exponent.
MIN_LOG_DISTANCE_SPAN = 0.3
#: The least intensity noise (log intensity) the fit allows: a floor that keeps the
#: likelihood smooth on unquantised readings.
MIN_NOISE = 0.001
#: tan(theta) is capped here in the micro-slope's spread (cos 0.15).
MAX_TAN = 6.6
#: The reflectance's bounds in the fit. Below: the darkest diffuse surfaces a scene holds
#: reflect a few per cent in the near infrared (black rubber, carbon-black paint and fresh
#: asphalt 2-5 % at 865-905 nm), and 0.005 is a quarter of the darkest, room for the
#: scanner's intensity scale to be off by a factor of four. Above: retroreflective sheeting
#: returns up to about a thousand times a white diffuse target near the source's axis;
#: beyond, every reading would sit at the top. A fit that ends at either bound has not
#: found the surface's level (its readings are all censored, mostly zeros): its
#: reflectance is left out with a note, never written at the bound.
RHO_BOUNDS = (0.005, 1000.0)
#: The block bootstrap's replicas (over BOOTSTRAP_BLOCKS azimuth sectors, :mod:`.likelihood`).
BOOTSTRAP_REPLICAS = 24
#: Most damped Newton steps of the fit (the BHHH Hessian can take a couple of hundred
#: steps when an intensity noise sits at its floor).
NEWTON_STEPS = 400


@dataclass
class Response:
    """The fitted intensity response and the surfaces' intensity laws.

    Attributes
    ----------
    surfaces : list of Fit
        Per surface: ``reflectance``, ``minnaert_k``, ``micro_slope_deg`` and
        ``intensity_noise`` (``sigma0``, in log intensity), each (value, standard error).
    gain, gain_se : (J,) float64
        Per-ring gains normalised to a median of 1 over the fitted rings (1 where not
        fitted), and their standard errors (nan where not fitted).
    gain_fitted : (J,) bool
    range_exponent : (value, standard error) or None
        ``p`` of ``(R / R0)^p``; None when the data do not constrain it.
    reference_m : float
        ``R0``, m.
    verdicts : list of str
    """

    surfaces: list[Fit]
    gain: NDArray[np.float64]
    gain_se: NDArray[np.float64]
    gain_fitted: NDArray[np.bool_]
    range_exponent: tuple[float, float] | None = None
    reference_m: float = 10.0
    verdicts: list[str] = field(default_factory=list)

    def overrides(self) -> dict[str, object]:
        """The scanner overrides' ``intensity_response``."""
        out: dict[str, object] = {}
        if self.gain_fitted.any():
            out["channel_gain"] = [round(float(g), 4) for g in self.gain]
        if self.range_exponent is None:
            out["range"] = {"form": "none"}
        else:
            out["range"] = {"form": "power", "reference_m": round(self.reference_m, 3),
                            "exponent": round(self.range_exponent[0], 4)}  # fmt: skip
        return out


def _start(
    model: NegLogLikelihood, level: NDArray[np.float64], fix_k: NDArray[np.bool_],
    present: NDArray[np.bool_],
) -> NDArray[np.float64]:  # fmt: skip
    """A starting point: least squares of the log readings (zeros at half a step) on the
    linear part of the model, the noise at 0.1 and the micro-slope at 0.02 rad."""
    d, S, G = model.d, model.S, model.G
    n = len(level)
    cols = [np.zeros((n, S)), np.zeros((n, S))]
    cols[0][np.arange(n), d.s] = 1.0
    cols[1][np.arange(n), d.s] = np.where(fix_k[d.s], 0.0, d.x)
    gains = np.zeros((n, G))
    fitted = d.g >= 0
    gains[np.flatnonzero(fitted), d.g[fitted]] = 1.0
    design = np.hstack([*cols, gains] + ([d.lr[:, None]] if model.fit_p else []))
    target = level - np.where(fix_k[d.s], d.x, 0.0)
    if G:  # the gauge: the mean log gain is 0
        row = np.zeros(design.shape[1])
        row[2 * S : 2 * S + G] = np.sqrt(n)
        design, target = np.vstack([design, row]), np.append(target, 0.0)
    keep = np.abs(design).sum(axis=0) > 0
    coef = np.zeros(design.shape[1])
    try:
        coef[keep] = np.linalg.lstsq(design[:, keep], target, rcond=None)[0]
    except np.linalg.LinAlgError:
        coef[:S] = [float(np.median(level[d.s == j])) if (d.s == j).any() else 0.0
                    for j in range(S)]  # fmt: skip
    theta = np.zeros(model.size)
    theta[:S] = coef[:S]
    theta[S : 2 * S] = np.where(fix_k | ~present, 1.0, np.clip(coef[S : 2 * S], 0.0, 3.0))
    theta[2 * S : 3 * S] = np.log(0.1)
    theta[3 * S : 4 * S] = np.log(0.02)
    theta[4 * S :] = coef[2 * S :]
    return theta


def _components(links: NDArray[np.bool_]) -> NDArray[np.int64]:
    """Connected components of the rings (rows) through the surfaces (columns) they share;
    -1 for a ring with no link."""
    n_rings = links.shape[0]
    label = np.full(n_rings, -1, dtype=np.int64)
    current = 0
    for start in range(n_rings):
        if label[start] >= 0 or not links[start].any():
            continue
        frontier = np.zeros(n_rings, dtype=bool)
        frontier[start] = True
        while True:
            surfaces = links[frontier].any(axis=0)
            reach = links[:, surfaces].any(axis=1)
            if (reach == frontier).all():
                break
            frontier = reach
        label[frontier] = current
        current += 1
    return label


@dataclass(frozen=True)
class ResponseFitOptions:
    """What :func:`fit_response` fits against: how many surfaces and rings the readings
    fall in, how the scanner reports intensity, and the bootstrap.

    Attributes
    ----------
    n_surfaces, n_rings : int
        The surfaces (``0 .. n_surfaces - 1``) and rings (``0 .. n_rings - 1``) of the
        readings.
    scale, intensity_max, intensity_step : float
        The scanner's ``intensity_scale``, top reading and step (0: unquantised).
    replicas : int
        Bootstrap replicas (0: no uncertainties).
    seed : int
        The seed of the subsets and of the bootstrap.
    """

    n_surfaces: int
    n_rings: int
    scale: float
    intensity_max: float
    intensity_step: float
    replicas: int = BOOTSTRAP_REPLICAS
    seed: int = 0


def fit_response(
    intensity: NDArray,
    cos: NDArray,
    range_m: NDArray,
    surface: NDArray,
    ring: NDArray | None,
    azimuth_rad: NDArray,
    options: ResponseFitOptions,
) -> Response:
    """Fit the per-ring gains, the range response and each surface's reflectance, k,
    micro-slope and intensity noise (see the module's docstring).

    Parameters
    ----------
    intensity : (N,) float
        The readings, in the sensor's units.
    cos : (N,) float
        Incidence cosine of each point on its surface.
    range_m : (N,) float
        Measured range, m.
    surface : (N,) int
        The surface of each point, ``0 .. n_surfaces - 1``.
    ring : (N,) int or None
        The ring of each point (``0 .. n_rings - 1``); None: no per-ring gains.
    azimuth_rad : (N,) float
        Each point's azimuth about the sensor, rad (the bootstrap's blocks).
    options : ResponseFitOptions
        The surfaces' and rings' counts, the scanner's intensity scale, top and step,
        the bootstrap's replicas and the seed.

    Returns
    -------
    Response
    """
    n_surfaces, n_rings, scale = options.n_surfaces, options.n_rings, options.scale
    intensity_max, intensity_step = options.intensity_max, options.intensity_step
    replicas = options.replicas
    rng = np.random.default_rng(options.seed)
    i = np.asarray(intensity, dtype=np.float64)
    c = np.asarray(cos, dtype=np.float64)
    r_m = np.asarray(range_m, dtype=np.float64)
    s_all = np.asarray(surface, dtype=np.int64)
    fits = [Fit() for _ in range(n_surfaces)]
    verdicts: list[str] = []
    ok = np.isfinite(i) & (i >= 0) & np.isfinite(c) & (c > 1e-3) & np.isfinite(r_m) & (r_m > 0)
    # per surface: the steeper points when enough (grazing readings are biased by the
    # dropout of the weakest echoes), then a subset
    use = np.zeros(len(i), dtype=bool)
    fix_k = np.zeros(n_surfaces, dtype=bool)
    for j in range(n_surfaces):
        on = ok & (s_all == j)
        steep = on & (c >= 0.15)
        if steep.sum() >= 200 and np.ptp(np.log(c[steep])) >= MIN_LOG_COS_SPAN:
            on = steep
        idx = np.flatnonzero(on)
        if len(idx) < 20:
            fits[j].verdicts.append("too few usable intensities: reflectance and k not fitted")
            continue
        if len(idx) > MAX_SURFACE_POINTS:
            idx = np.sort(rng.choice(idx, MAX_SURFACE_POINTS, replace=False))
        x = np.log(c[idx])
        lo, hi = np.percentile(x, [5, 95])
        if hi - lo < MIN_LOG_COS_SPAN:
            fix_k[j] = True
            fits[j].verdicts.append(
                f"incidence spans only cos {np.exp(lo):.2f}-{np.exp(hi):.2f}: k cannot be told "
                "from rho; k = 1 assumed"
            )
        use[idx] = True
    sel = np.flatnonzero(use)
    empty = Response(fits, np.ones(n_rings), np.full(n_rings, np.nan), np.zeros(n_rings, bool))
    if len(sel) == 0:
        empty.verdicts.append("no surface has usable intensities")
        return empty
    s = s_all[sel]
    present = np.bincount(s, minlength=n_surfaces) > 0
    # which rings' gains the data constrain: a ring linked to a surface seen at several
    # incidences within its rings, in the largest connected group of rings and surfaces
    gain_index = np.full(len(sel), -1, dtype=np.int64)
    gain_rings = np.zeros(0, dtype=np.int64)
    if ring is not None and n_rings > 1:
        rr = np.asarray(ring, dtype=np.int64)[sel]
        inside = (rr >= 0) & (rr < n_rings)
        counts = np.zeros((n_rings, n_surfaces))
        np.add.at(counts, (rr[inside], s[inside]), 1.0)
        links = counts >= RING_LINK_POINTS
        # a surface ties its rings' gains together only when its k is told from its
        # incidence spread within rings (a ring meeting a plane at one incidence, the
        # ground, lets that ring's gain trade against the plane's reflectance and k)
        x_sel = np.log(c[sel])
        pair = np.where(inside, rr, 0) * n_surfaces + s
        n_pair = np.bincount(pair, minlength=n_rings * n_surfaces).astype(np.float64)
        mean_pair = np.bincount(pair, x_sel, n_rings * n_surfaces) / np.maximum(n_pair, 1.0)
        dev = (x_sel - mean_pair[pair]) ** 2
        within = np.sqrt(np.bincount(s, dev, n_surfaces)
                         / np.maximum(np.bincount(s, minlength=n_surfaces), 1))  # fmt: skip
        spanning = within >= MIN_RING_LOG_COS_STD
        for j in np.flatnonzero(present & ~spanning & links.any(axis=0)):
            fits[j].verdicts.append(
                f"seen at one incidence per ring (log cos spreads by {within[j]:.3f} within "
                f"a ring, < {MIN_RING_LOG_COS_STD}): no ring's gain is fitted from it; its "
                "reflectance and k come from the rings whose gains other surfaces fix"
            )
        comp = _components(links & spanning[None, :])
        if (comp >= 0).any():
            biggest = np.bincount(comp[comp >= 0], weights=counts.sum(axis=1)[comp >= 0])
            gain_rings = np.flatnonzero(comp == int(np.argmax(biggest)))
        if len(gain_rings) >= 2:
            lookup = np.full(n_rings, -1, dtype=np.int64)
            lookup[gain_rings] = np.arange(len(gain_rings))
            gain_index = np.where(inside, lookup[np.clip(rr, 0, n_rings - 1)], -1)
            seen = np.flatnonzero(counts.sum(axis=1) > 0)
            left = np.setdiff1d(seen, gain_rings)
            if len(left):
                verdicts.append(
                    f"gains of rings {_ranges(left)} not fitted (1 written): none meets a "
                    "surface seen at several incidences within the ring (or none linked to the "
                    "others); on a plane a ring meets at one incidence, the ground, a ring's "
                    "gain trades against the plane's reflectance and k"
                )
        else:
            gain_rings = np.zeros(0, dtype=np.int64)
            verdicts.append("per-ring gains not fitted: no two rings share a surface seen at "
                            "several incidences within each")  # fmt: skip
    # the range response: only when a surface spans perpendicular distances
    dist = np.log(r_m[sel] * c[sel])
    spans = [np.ptp(np.percentile(dist[s == j], [5, 95])) for j in range(n_surfaces) if present[j]]
    fit_p = bool(spans) and max(spans) >= MIN_LOG_DISTANCE_SPAN
    reference_m = float(np.round(np.median(r_m[sel]), 1))
    if not fit_p:
        verdicts.append(
            "range response not fitted (form: none): every surface lies at one distance from "
            "the sensor, where R = D / cos ties a range exponent to k (a range response is "
            "then in the fitted k); pool one material's surfaces at several distances "
            "(--surface) to fit it"
        )
    lo, hi, u = reading_intervals(i[sel], intensity_step, intensity_max)
    tan = np.minimum(np.sqrt(1.0 / c[sel] ** 2 - 1.0), MAX_TAN)
    data = CensoredReadings(lo, hi, u, np.log(c[sel]), tan, np.log(r_m[sel] / reference_m), s,
                            gain_index,
                            (((np.asarray(azimuth_rad)[sel] + np.pi) / (2 * np.pi)
                              * BOOTSTRAP_BLOCKS).astype(np.int64)
                             .clip(0, BOOTSTRAP_BLOCKS - 1)))  # fmt: skip
    n_g = len(gain_rings)
    model = NegLogLikelihood(data, n_surfaces, n_g, fit_p)
    level = np.log(np.maximum(i[sel], 0.5 * max(intensity_step, 1e-3)))
    theta0 = _start(model, level, fix_k, present)
    bounds = (
        [(np.log(scale * RHO_BOUNDS[0]), np.log(scale * RHO_BOUNDS[1]))] * n_surfaces
        + [(1.0, 1.0) if fix_k[j] or not present[j] else (0.0, 3.0) for j in range(n_surfaces)]
        + [(np.log(MIN_NOISE), np.log(3.0))] * n_surfaces
        + [(np.log(1e-4), np.log(0.5))] * n_surfaces
        + [(-3.0, 3.0)] * n_g
        + [(-4.0, 4.0)] * int(fit_p)
    )  # fmt: skip
    w = np.ones(len(sel))
    theta0 = np.clip(theta0, [b[0] for b in bounds], [b[1] for b in bounds])

    lower = np.array([b[0] for b in bounds])
    upper = np.array([b[1] for b in bounds])

    def solve(theta: NDArray, weights: NDArray, maxiter: int) -> tuple[NDArray, bool, str]:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            x, good, message = newton_fit(model, theta, weights, lower, upper, maxiter)
        return x, good and bool(np.all(np.isfinite(x))), message

    theta, good, message = solve(theta0, w, NEWTON_STEPS)

    def at_bound(t: NDArray) -> NDArray[np.bool_]:
        """(S,) whether a surface's level ended at a bound of its reflectance."""
        a = t[:n_surfaces]
        tol = 1e-6
        return present & ((a <= lower[:n_surfaces] + tol) | (a >= upper[:n_surfaces] - tol))

    def held(t: NDArray) -> NDArray[np.bool_]:
        """(S,) whether a surface's law ran where the likelihood is flat, which holds it
        there: most of its readings left to the outliers (a noise so narrow that it covers
        one reading's interval), or its level at a bound (its zeros certain, the rest
        outliers: a plateau)."""
        model(t, w)
        share = np.bincount(s, model.inlier, n_surfaces) / np.maximum(
            np.bincount(s, minlength=n_surfaces), 1
        )
        return present & ((share < 0.5) | at_bound(t))

    stuck = np.flatnonzero(held(theta)) if good else np.zeros(0, dtype=np.int64)
    if len(stuck):  # started again from the least-squares level with a wide noise
        for j in stuck:
            theta[j::n_surfaces][:4] = theta0[j::n_surfaces][:4]
            theta[2 * n_surfaces + j] = np.log(0.5)
        theta, good, message = solve(theta, w, NEWTON_STEPS)
        bound = at_bound(theta)
        for j in np.flatnonzero(held(theta)) if good else []:
            if bound[j]:
                rho_j = float(np.exp(theta[j]) / scale)
                fits[j].verdicts.append(
                    f"the intensity fit ends at the reflectance's bound {rho_j:.3g} "
                    f"(physical range {RHO_BOUNDS[0]:g}-{RHO_BOUNDS[1]:g}): its readings do "
                    "not fix its level (mostly zeros or all at the top); reflectance and k "
                    "not fitted"
                )
            else:
                fits[j].verdicts.append("the intensity fit leaves most readings to the "
                                        "outliers: reflectance and k not fitted")  # fmt: skip
            fits[j].settled = True
            present[j] = False
    if not good:
        empty.verdicts.append(f"the intensity fit did not converge ({message})")
        return empty
    draws = bootstrap_replicas(model, theta, lower, upper, replicas, rng)
    boot = draws if len(draws) >= 5 else np.empty((0, model.size))
    if replicas and not len(boot):
        verdicts.append("the bootstrap failed: no standard errors")

    def outputs(t: NDArray) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray, float]:
        a, k, ls0, lsd, gamma, p = model.unpack(t)
        shift = float(np.median(gamma)) if n_g else 0.0  # gains to a median of 1
        rho = np.exp(a + shift) / scale
        return rho, k, np.exp(ls0), np.degrees(np.exp(lsd)), np.exp(gamma - shift), float(p)

    best = outputs(theta)
    reps = [outputs(t) for t in boot]

    def se(index: int, j: int | slice) -> NDArray | float:
        if not reps:
            return np.nan
        return np.std([r[index][j] for r in reps], axis=0, ddof=1)

    for j in range(n_surfaces):
        if not present[j]:
            continue
        f = fits[j]
        rho, k = float(best[0][j]), float(best[1][j])
        f.values["reflectance"] = (rho, float(se(0, j)))
        f.values["minnaert_k"] = (k, float(se(1, j)) if not fix_k[j] else np.nan)
        f.values["intensity_noise"] = (float(best[2][j]), float(se(2, j)))
        if not fix_k[j] and (k <= 1e-3 or k >= 3.0 - 1e-3):
            f.verdicts.append(f"k at the bound of [0, 3] ({k:.2f}): the law does not fit well")
        if k < 0.2:
            f.verdicts.append(f"k = {k:.2f}: the intensity hardly depends on the tilt, so the "
                              "micro-slope cannot be fitted from it (0 written)")  # fmt: skip
            f.values["micro_slope_deg"] = (0.0, np.nan)
        else:
            f.values["micro_slope_deg"] = (float(best[3][j]), float(se(3, j)))
        on = s == j
        grid = np.linspace(float(c[sel][on].min()), 1.0, 100)
        f.curve = {"cos": grid, "intensity": scale * rho * grid**k}
    gain = np.ones(n_rings)
    gain_se = np.full(n_rings, np.nan)
    fitted = np.zeros(n_rings, dtype=bool)
    if n_g:
        gain[gain_rings] = best[4]
        gain_se[gain_rings] = se(4, slice(None)) if reps else np.nan
        fitted[gain_rings] = True
    out = Response(fits, gain, gain_se, fitted, None, reference_m, verdicts)
    if fit_p:
        p_se = float(np.std([r[5] for r in reps], ddof=1)) if reps else np.nan
        out.range_exponent = (best[5], p_se)
    if n_g:
        verdicts.append(
            f"per-ring gains of {n_g} rings fitted, normalised to a median of 1: the absolute "
            "scale is in the reflectances"
        )
    return out


def _ranges(values: NDArray) -> str:
    """``0-3, 7, 9-10``."""
    v = sorted(int(x) for x in values)
    parts, start = [], v[0]
    for a, b in zip(v, [*v[1:], None], strict=True):
        if b is None or b != a + 1:
            parts.append(f"{start}-{a}" if a > start else f"{a}")
            start = b if b is not None else a
    return ", ".join(parts)
