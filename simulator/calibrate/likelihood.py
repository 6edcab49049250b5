"""The likelihood of the readings that :func:`~simulator.calibrate.response.fit_response`
maximises, and how: each reading an interval (rounded to the sensor's step, censored at
zero and at the top) under a normal law of its log with a small share of uniform
outliers; damped Newton steps on the BHHH Hessian within bounds; and the one-step block
bootstrap over azimuth sectors for the standard errors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import ndtr

__all__ = [
    "BOOTSTRAP_BLOCKS",
    "NEWTON_TOL",
    "OUTLIER_SHARE",
    "CensoredReadings",
    "NegLogLikelihood",
    "bootstrap_replicas",
    "newton_fit",
    "outer_sum",
    "reading_grid",
    "reading_intervals",
]

#: The share of readings taken as outliers (uniform over the log readings).
OUTLIER_SHARE = 0.01
#: Azimuth sectors for the block bootstrap.
BOOTSTRAP_BLOCKS = 24
#: The fit has converged when a step lowers the negative log-likelihood by less than this
#: per point.
NEWTON_TOL = 1e-7
_INV_SQRT_2PI = 1.0 / np.sqrt(2.0 * np.pi)


@dataclass
class CensoredReadings:
    """The readings as the likelihood sees them, one entry a point (n,): its interval, its
    geometry and which parameters it reads."""

    lo: NDArray[np.float64]  # log lower bound of the reading's interval (-inf: none)
    hi: NDArray[np.float64]  # log upper bound (+inf: none)
    u: NDArray[np.float64]  # outlier likelihood of the interval
    x: NDArray[np.float64]  # log cos
    t: NDArray[np.float64]  # tan theta (capped)
    lr: NDArray[np.float64]  # log(R / R0)
    s: NDArray[np.int64]  # surface index
    g: NDArray[np.int64]  # fitted gain index, -1: fixed at 1
    block: NDArray[np.int64]


#: Readings count as on a grid when every one lies within this share of a step of it.
GRID_TOLERANCE = 0.01


def reading_grid(reading: NDArray, step: float) -> float:
    """The step the file's readings are quantised to: ``step`` (the scanner's), or a
    coarser grid every positive reading lies on.

    A KITTI ``.bin`` stores reflectance 0-1 in hundredths (0.00, 0.01, ...), which the
    reader maps to 0-255: readings 2.55 apart, each meaning an interval 2.55 wide, and a
    zero meaning "below 1.275", not "below 0.5". Taken as whole counts, a dark surface's
    zeros (most of its readings) pull its law to the bottom of the fit (reflectance
    0.0001 on a KITTI frame); taken on their own grid, they are what they say.

    Parameters
    ----------
    reading : (N,) float
        The readings, in the scanner's units.
    step : float
        The scanner's ``intensity_step`` (0: unquantised).

    Returns
    -------
    float
        The smallest gap between distinct positive readings when every positive reading
        is a whole multiple of it (within :data:`GRID_TOLERANCE` of a step) and it is
        coarser than ``step``; else ``step``.
    """
    r = np.asarray(reading, dtype=np.float64)
    r = r[np.isfinite(r) & (r > 0)]
    if not len(r):
        return step

    def on(grid: float) -> bool:
        return bool(np.all(np.abs(r / grid - np.rint(r / grid)) <= GRID_TOLERANCE))

    if step > 0 and on(step):  # whole steps of the scanner's: its own grid
        return step
    values = np.unique(np.round(np.append(r, 0.0), 4))  # zero anchors the grid
    grid = float(np.diff(values).min())
    return grid if grid > step and on(grid) else step


def reading_intervals(
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
    """The standard normal density at ``z`` (0 at +-inf)."""
    out = np.zeros_like(z)
    ok = np.isfinite(z)
    out[ok] = _INV_SQRT_2PI * np.exp(-0.5 * z[ok] ** 2)
    return out


class NegLogLikelihood:
    """The negative log-likelihood and its gradient over the parameter vector
    ``[a (S), k (S), log sigma0 (S), log sigma_delta (S), gamma (G), p (0 or 1)]``,
    ``a = log(scale rho)`` and ``gamma = log g``."""

    def __init__(self, d: CensoredReadings, n_surfaces: int, n_gains: int, fit_p: bool) -> None:
        self.d, self.S, self.G, self.fit_p = d, n_surfaces, n_gains, fit_p
        self.size = 4 * n_surfaces + n_gains + int(fit_p)
        # a point's gradient has one value a slot, each slot a block of columns:
        # (first column, width) of a, k, log sigma0, log sigma_delta, the gains, p
        S = n_surfaces
        self.slots = [(0, S), (S, S), (2 * S, S), (3 * S, S)]
        self.slots += [(4 * S, n_gains)] * bool(n_gains) + [(self.size - 1, 1)] * bool(fit_p)

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
        # each point's gradient, sparse: one value a slot (n, L) at columns (n, L)
        fitted = d.g >= 0
        cols = [d.s, S + d.s, 2 * S + d.s, 3 * S + d.s]
        vals = [gm, gm * (d.x - sd**2 * curv) + gs * ks * (d.t * sd) ** 2 / sig,
                gs * s0**2 / sig,
                gs * (ks * d.t * sd) ** 2 / sig - gm * 2.0 * ks * sd**2 * curv]  # fmt: skip
        if G:  # a point whose gain is fixed: 0 at the first gain's column
            cols.append(np.where(fitted, 4 * S + d.g, 4 * S))
            vals.append(np.where(fitted, gm, 0.0))
        if self.fit_p:
            cols.append(np.full(len(m), self.size - 1))
            vals.append(gm * d.lr)
        self.cols, self.vals = np.stack(cols, axis=1), np.stack(vals, axis=1)  # the bootstrap's
        grad = np.bincount(self.cols.ravel(), (w[:, None] * self.vals).ravel(), self.size)
        if G:  # the gauge: the mean log gain is 0 (the scale goes into the reflectances)
            lam = float(w.sum())
            mean = float(gamma.mean())
            nll += lam * mean**2
            grad[4 * S : 4 * S + G] += 2.0 * lam * mean / G
        return nll, grad, self.outer(w) if outer else None

    def outer(self, w: NDArray) -> NDArray[np.float64]:
        """(P, P) the BHHH Hessian at the parameters of the last call: the sum of the
        points' gradients' outer products (weights ``w`` (n,)), and the gauge's term."""
        S, G = self.S, self.G
        hess = outer_sum(self.cols, self.vals, w, self.slots, np.zeros(len(w), np.int64), 1)[0]
        if G:
            hess[4 * S : 4 * S + G, 4 * S : 4 * S + G] += 2.0 * float(w.sum()) / G**2
        return hess


def outer_sum(
    cols: NDArray[np.int64], vals: NDArray, w: NDArray, slots: list[tuple[int, int]],
    group: NDArray[np.int64], n_groups: int,
) -> NDArray[np.float64]:  # fmt: skip
    """(n_groups, P, P): per group, the weighted sum of the points' gradients' outer products.

    The gradients are sparse: a point has one value a slot, ``vals[:, a]`` at column
    ``cols[:, a]`` of slot ``a``, and slot ``a`` owns the columns ``slots[a] = (first,
    width)`` (a surface's four parameters, the gains, the range exponent). So each pair of
    slots fills one block of the matrix, summed by one ``bincount`` over that block's own
    ``width_a * width_b`` cells (and a slot with itself only its diagonal: a point has one
    column in it): no (n, L, L) index arrays, no bins over all P * P cells.

    Parameters
    ----------
    cols : (n, L) int64
        Each point's column in each slot.
    vals : (n, L) float
        Each point's gradient value in each slot.
    w : (n,) float
        The points' weights.
    slots : list of (int, int)
        ``(first column, width)`` of each of the L slots; disjoint, within ``0 .. P - 1``.
    group : (n,) int64
        Each point's group (``0 .. n_groups - 1``).
    n_groups : int
    """
    size = max(first + width for first, width in slots)
    out = np.zeros((n_groups, size, size))
    wv = w[:, None] * vals
    local = [cols[:, a] - first for a, (first, _) in enumerate(slots)]
    for a, (fa, na) in enumerate(slots):
        key_a = group * na + local[a]
        diagonal = np.bincount(key_a, wv[:, a] * vals[:, a], n_groups * na)
        cells = np.arange(fa, fa + na)
        out[:, cells, cells] += diagonal.reshape(n_groups, na)
        for b in range(a + 1, len(slots)):
            fb, nb = slots[b]
            block = np.bincount(key_a * nb + local[b], wv[:, a] * vals[:, b], n_groups * na * nb)
            block = block.reshape(n_groups, na, nb)
            out[:, fa : fa + na, fb : fb + nb] += block
            out[:, fb : fb + nb, fa : fa + na] += block.transpose(0, 2, 1)
    return out


def newton_fit(
    model: NegLogLikelihood,
    theta: NDArray,
    w: NDArray,
    lower: NDArray,
    upper: NDArray,
    maxiter: int,
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
            t_nll, t_grad, _ = model(trial, w)  # the Hessian only of a step taken
            if np.isfinite(t_nll) and t_nll <= nll:
                improved = True
                t_hess = model.outer(w)
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


def bootstrap_replicas(
    model: NegLogLikelihood, theta: NDArray, lower: NDArray, upper: NDArray, replicas: int,
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
    hess_b = outer_sum(model.cols, model.vals, w, model.slots, blocks, n_b)
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
