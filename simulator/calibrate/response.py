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
from scipy.special import ndtr

from .fits import Fit

__all__ = ["Response", "ResponseFitOptions", "fit_response"]

#: The share of readings taken as outliers (uniform over the log readings).
OUTLIER_SHARE = 0.01
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
#: Azimuth sectors for the block bootstrap, and its replicas.
BOOTSTRAP_BLOCKS = 24
BOOTSTRAP_REPLICAS = 24
#: Most damped Newton steps of the fit (the BHHH Hessian can take a couple of hundred
#: steps when an intensity noise sits at its floor).
NEWTON_STEPS = 400
#: The fit has converged when a step lowers the negative log-likelihood by less than this
#: per point.
NEWTON_TOL = 1e-7
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)


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


@dataclass
class _Data:
    lo: NDArray[np.float64]  # log lower bound of the reading's interval (-inf: none)
    hi: NDArray[np.float64]  # log upper bound (+inf: none)
    u: NDArray[np.float64]  # outlier likelihood of the interval
    x: NDArray[np.float64]  # log cos
    t: NDArray[np.float64]  # tan theta (capped)
    lr: NDArray[np.float64]  # log(R / R0)
    s: NDArray[np.int64]  # surface index
    g: NDArray[np.int64]  # fitted gain index, -1: fixed at 1
    block: NDArray[np.int64]


def _intervals(
    reading: NDArray[np.float64], step: float, intensity_max: float
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Log bounds of each reading's interval and its outlier likelihood."""
    with np.errstate(divide="ignore"):
        if step > 0:
            n = np.rint(reading / step)
            lo = np.log(np.maximum(n - 0.5, 0.0) * step)
            hi = np.log((n + 0.5) * step)
            floor = np.log(0.5 * step)
        else:  # unquantised: a narrow interval about the reading (a density)
            positive = reading[reading > 0]
            small = float(positive.min()) if len(positive) else 1e-3
            lo = np.where(reading > 0, np.log(np.maximum(reading, 1e-300)) - 1e-4, -np.inf)
            hi = np.where(reading > 0, lo + 2e-4, np.log(0.5 * small))
            floor = np.log(0.5 * small)
    top = reading >= intensity_max - 0.5 * max(step, 1e-9)
    hi = np.where(top, np.inf, hi)
    lmin, lmax = floor - 2.0, np.log(intensity_max) + 1.0
    u = (np.minimum(hi, lmax) - np.maximum(lo, lmin)) / (lmax - lmin)
    return lo, hi, np.maximum(u, 1e-12)


def _phi(z: NDArray[np.float64]) -> NDArray[np.float64]:
    out = np.zeros_like(z)
    ok = np.isfinite(z)
    out[ok] = _INV_SQRT_2PI * np.exp(-0.5 * z[ok] ** 2)
    return out


class _Model:
    """The negative log-likelihood and its gradient over the parameter vector
    ``[a (S), k (S), log sigma0 (S), log sigma_delta (S), gamma (G), p (0 or 1)]``,
    ``a = log(scale rho)`` and ``gamma = log g``."""

    def __init__(self, d: _Data, n_surfaces: int, n_gains: int, fit_p: bool) -> None:
        self.d, self.S, self.G, self.fit_p = d, n_surfaces, n_gains, fit_p
        self.size = 4 * n_surfaces + n_gains + int(fit_p)

    def unpack(self, theta: NDArray) -> tuple[NDArray, ...]:
        S, G = self.S, self.G
        a, k, ls0, lsd = theta[:S], theta[S : 2 * S], theta[2 * S : 3 * S], theta[3 * S : 4 * S]
        gamma = theta[4 * S : 4 * S + G]
        p = theta[4 * S + G] if self.fit_p else 0.0
        return a, k, ls0, lsd, gamma, p

    def __call__(
        self, theta: NDArray, w: NDArray, outer: bool = False
    ) -> tuple[float, NDArray, NDArray | None]:
        """The negative log-likelihood, its gradient (P,) and, with ``outer``, the sum of
        the points' gradients' outer products (P, P): the BHHH estimate of the Hessian."""
        d, S, G = self.d, self.S, self.G
        a, k, ls0, lsd, gamma, p = self.unpack(theta)
        gam = np.where(d.g >= 0, np.append(gamma, 0.0)[d.g], 0.0)
        ks = k[d.s]
        s0, sd = np.exp(ls0)[d.s], np.exp(lsd)[d.s]
        # the tilts' mean: E[log cos(theta + delta)] = log cos - sd^2 sec^2 / 2 (+ O(sd^4))
        curv = 0.5 * (1.0 + d.t**2)
        m = a[d.s] + ks * (d.x - sd**2 * curv) + gam + p * d.lr
        var = s0**2 + (ks * d.t * sd) ** 2
        sig = np.sqrt(var)
        zl, zh = (d.lo - m) / sig, (d.hi - m) / sig
        upper = zl > 0  # both in the upper tail: take the difference there
        prob = np.where(upper, ndtr(-zl) - ndtr(-zh), ndtr(zh) - ndtr(zl))
        prob = np.maximum(prob, 0.0)
        like = (1.0 - OUTLIER_SHARE) * prob + OUTLIER_SHARE * d.u
        self.inlier = (1.0 - OUTLIER_SHARE) * prob > OUTLIER_SHARE * d.u  # (n,) bool
        nll = -float(np.sum(w * np.log(like)))
        pl, ph = _phi(zl), _phi(zh)
        zph = np.where(np.isfinite(zh), zh, 0.0) * ph
        zpl = np.where(np.isfinite(zl), zl, 0.0) * pl
        c = (1.0 - OUTLIER_SHARE) / like / sig
        gm = c * (ph - pl)  # d nll_j / d m_j
        gs = c * (zph - zpl)  # d nll_j / d sigma_j
        # each point's gradient, sparse: L values (n, L) at columns (n, L)
        fitted = d.g >= 0
        cols = [d.s, S + d.s, 2 * S + d.s, 3 * S + d.s,
                np.where(fitted, 4 * S + d.g, 0)]  # fmt: skip
        vals = [gm, gm * (d.x - sd**2 * curv) + gs * ks * (d.t * sd) ** 2 / sig,
                gs * s0**2 / sig,
                gs * (ks * d.t * sd) ** 2 / sig - gm * 2.0 * ks * sd**2 * curv,
                np.where(fitted, gm, 0.0)]  # fmt: skip
        if self.fit_p:
            cols.append(np.full(len(m), self.size - 1))
            vals.append(gm * d.lr)
        self.cols, self.vals = np.stack(cols, axis=1), np.stack(vals, axis=1)  # the bootstrap's
        grad = np.bincount(self.cols.ravel(), (w[:, None] * self.vals).ravel(), self.size)
        hess = None
        if outer:
            hess = _outer_sum(self.cols, self.vals, w, self.size, np.zeros(len(m), np.int64), 1)[0]
        if G:  # the gauge: the mean log gain is 0 (the scale goes into the reflectances)
            lam = float(w.sum())
            mean = float(gamma.mean())
            nll += lam * mean**2
            grad[4 * S : 4 * S + G] += 2.0 * lam * mean / G
            if hess is not None:
                hess[4 * S : 4 * S + G, 4 * S : 4 * S + G] += 2.0 * lam / G**2
        return nll, grad, hess


def _outer_sum(
    cols: NDArray[np.int64], vals: NDArray, w: NDArray, size: int, group: NDArray[np.int64],
    n_groups: int,
) -> NDArray[np.float64]:  # fmt: skip
    """(n_groups, P, P): per group, the weighted sum of the points' gradients' outer products,
    the gradients sparse (values ``vals`` (n, L) at columns ``cols`` (n, L))."""
    idx = (group[:, None, None] * size + cols[:, :, None]) * size + cols[:, None, :]
    outer = w[:, None, None] * vals[:, :, None] * vals[:, None, :]
    flat = np.bincount(idx.ravel(), outer.ravel(), n_groups * size * size)
    return flat.reshape(n_groups, size, size)


def _newton(
    model: _Model, theta: NDArray, w: NDArray, lower: NDArray, upper: NDArray, maxiter: int
) -> tuple[NDArray, bool, str]:
    """Minimise the negative log-likelihood within bounds: damped Newton steps on the BHHH
    Hessian (Levenberg-Marquardt damping), projected onto the bounds; the parameters
    held at a bound by the gradient are left out of a step. Returns the parameters,
    whether it converged, and why it stopped."""
    free = upper > lower
    theta = np.clip(theta, lower, upper)
    nll, grad, hess = model(theta, w, outer=True)
    damping = 1e-3
    tol = NEWTON_TOL * max(float(w.sum()), 1.0)
    for _ in range(maxiter):
        assert hess is not None
        held = ~free | ((theta <= lower) & (grad > 0)) | ((theta >= upper) & (grad < 0))
        act = np.flatnonzero(~held)
        if not len(act):
            return theta, True, "all parameters at their bounds"
        h = hess[np.ix_(act, act)]
        g = grad[act]
        improved = False
        for _ in range(12):
            try:
                step = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-9), -g)
            except np.linalg.LinAlgError:
                damping *= 10.0
                continue
            trial = theta.copy()
            trial[act] += step
            trial = np.clip(trial, lower, upper)
            t_nll, t_grad, t_hess = model(trial, w, outer=True)
            if np.isfinite(t_nll) and t_nll <= nll:
                improved = True
                break
            damping *= 10.0
        if not improved:
            return (
                theta,
                bool(np.max(np.abs(g)) < 1e-3 * max(float(w.sum()), 1.0)),
                "no step lowers it",
            )
        gain = nll - t_nll
        theta, nll, grad, hess = trial, t_nll, t_grad, t_hess
        damping = max(damping / 10.0, 1e-7)
        if gain < tol:
            return theta, True, "converged"
    return theta, False, f"no convergence in {maxiter} steps"


def _bootstrap(
    model: _Model, theta: NDArray, lower: NDArray, upper: NDArray, replicas: int,
    rng: np.random.Generator,
) -> NDArray[np.float64]:  # fmt: skip
    """(B, P) block-bootstrap replicas of the parameters: the azimuth sectors resampled
    with replacement, each replica one Newton step from the fit on the resampled points'
    gradient and BHHH Hessian (the one-step bootstrap; the parameters at a bound stay)."""
    if replicas <= 0:
        return np.empty((0, model.size))
    w = np.ones(len(model.d.s))
    model(theta, w, outer=False)
    blocks = model.d.block
    n_b = BOOTSTRAP_BLOCKS
    grad_b = np.bincount((blocks[:, None] * model.size + model.cols).ravel(),
                         model.vals.ravel(), n_b * model.size).reshape(n_b, model.size)  # fmt: skip
    hess_b = _outer_sum(model.cols, model.vals, w, model.size, blocks, n_b)
    free = (upper > lower) & (theta > lower + 1e-9) & (theta < upper - 1e-9)
    act = np.flatnonzero(free)
    S, G = model.S, model.G
    out = np.repeat(theta[None], replicas, axis=0)
    for r in range(replicas):
        counts = np.bincount(rng.integers(0, n_b, n_b), minlength=n_b).astype(np.float64)
        g = counts @ grad_b
        h = np.tensordot(counts, hess_b, axes=1)
        if G:
            gamma = theta[4 * S : 4 * S + G]
            lam = float(counts @ np.bincount(blocks, minlength=n_b))
            g[4 * S : 4 * S + G] += 2.0 * lam * float(gamma.mean()) / G
            h[4 * S : 4 * S + G, 4 * S : 4 * S + G] += 2.0 * lam / G**2
        try:
            step = np.linalg.pinv(h[np.ix_(act, act)], rcond=1e-10, hermitian=True) @ -g[act]
        except np.linalg.LinAlgError:
            out[r] = np.nan
            continue
        out[r, act] += step
    out = out[np.isfinite(out).all(axis=1)]
    return np.clip(out, lower, upper)


def _start(
    model: _Model, level: NDArray[np.float64], fix_k: NDArray[np.bool_],
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
    lo, hi, u = _intervals(i[sel], intensity_step, intensity_max)
    data = _Data(lo, hi, u, np.log(c[sel]), np.minimum(np.sqrt(1.0 / c[sel] ** 2 - 1.0), MAX_TAN),
                 np.log(r_m[sel] / reference_m), s, gain_index,
                 (((np.asarray(azimuth_rad)[sel] + np.pi) / (2 * np.pi) * BOOTSTRAP_BLOCKS)
                  .astype(np.int64).clip(0, BOOTSTRAP_BLOCKS - 1)))  # fmt: skip
    n_g = len(gain_rings)
    model = _Model(data, n_surfaces, n_g, fit_p)
    level = np.log(np.maximum(i[sel], 0.5 * max(intensity_step, 1e-3)))
    theta0 = _start(model, level, fix_k, present)
    bounds = (
        [(np.log(scale * 1e-4), np.log(scale * 1e3))] * n_surfaces
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
            x, good, message = _newton(model, theta, weights, lower, upper, maxiter)
        return x, good and bool(np.all(np.isfinite(x))), message

    theta, good, message = solve(theta0, w, NEWTON_STEPS)

    def held(t: NDArray) -> NDArray[np.bool_]:
        """(S,) whether most of a surface's readings are left to the outliers: its law ran
        where the likelihood is flat (a level at its bound, or a noise so narrow that it
        covers one reading's interval), which holds it there."""
        model(t, w)
        share = np.bincount(s, model.inlier, n_surfaces) / np.maximum(
            np.bincount(s, minlength=n_surfaces), 1
        )
        return present & (share < 0.5)

    stuck = np.flatnonzero(held(theta)) if good else np.zeros(0, dtype=np.int64)
    if len(stuck):  # started again from the least-squares level with a wide noise
        for j in stuck:
            theta[j::n_surfaces][:4] = theta0[j::n_surfaces][:4]
            theta[2 * n_surfaces + j] = np.log(0.5)
        theta, good, message = solve(theta, w, NEWTON_STEPS)
        for j in np.flatnonzero(held(theta)) if good else []:
            fits[j].verdicts.append("the intensity fit leaves most readings to the outliers: "
                                    "reflectance and k not fitted")  # fmt: skip
            present[j] = False
    if not good:
        empty.verdicts.append(f"the intensity fit did not converge ({message})")
        return empty
    draws = _bootstrap(model, theta, lower, upper, replicas, rng)
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
