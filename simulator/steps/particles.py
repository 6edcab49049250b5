"""Falling particles of the weather (rain, snow), drawn per pulse.

**Particles** (rain, snow). Each pulse meets the drops or flakes that its beam's
volume holds: a Poisson number, each at a range and of a size from the size
distribution, hashed from the pulse id and the survey seed (the same drops in every
run and every chunking). A particle of cross-section ``a`` at range ``r`` takes the
share ``f = a / A(r)`` of the beam (``A``: the beam's area there, from the exit
diameter and the divergences, uniform across), and returns it as a disc of its
equivalent reflectance (drops: 0.05, Mie backscatter at 905 nm off the glory;
flakes: Lambertian spheres of albedo 0.9, ``0.6``) times the overlap: an echo of
energy ``f rho zeta(r)``. It shadows the beam behind it by ``(1 - Q f)^2`` (two
passes, ``Q`` the extinction efficiency; with footprints: the sub-ray it lies in).
Its echo is grouped, detected and selected with the scene's echoes, so a particle
closer than the separation to a surface makes a mixed point, and a large flake near
the sensor gives a point while drizzle mostly does not.

Only particles that could be detected on their own (``S >= threshold`` with full
overlap) are made discrete; the smaller ones act through the extinction alone. For a
size distribution ``N0 exp(-Lambda D)`` their number per metre of beam at range
``r`` is ``A(r) N0 / Lambda exp(-Lambda D_min(r))``, where ``D_min`` is the smallest
detectable size there; given the range, the size beyond ``D_min`` is exponential
with rate ``Lambda`` again. Both are drawn exactly.

The weather (:mod:`simulator.steps.weather`) tabulates a :class:`Population` a kind of
particle; the numba kernels (:mod:`simulator.kernels.particles`) count and draw the same
particles, value for value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import BeamOptics
from ..chunk import positions_in
from ..constants import GOLDEN_GAMMA
from .hits import ReturnModel

__all__ = ["Distribution", "Particles", "Population", "count_particles", "draw_particles"]


#: Samples of the particle range table.
_PARTICLE_TABLE = 4096


#: Gauss-Laguerre nodes of the drawn particles' extinction (exact for the drops' D^2).
_LAGUERRE_NODES = 24


#: A size distribution: (N0 m^-3 mm^-1, Lambda mm^-1, k, p): ``N(D) = N0 exp(-Lambda D)``
#: in the size variable D (mm), the particle's optical diameter ``k D^p`` mm.
Distribution = tuple[float, float, float, float]


@dataclass(frozen=True)
class Population:
    """Falling particles (rain drops, snow flakes) of one size distribution, tabulated for
    a scanner: only those that could be detected alone are drawn.

    Attributes
    ----------
    kind : str
        ``rain`` or ``snow``.
    n0_per_m3_mm, lambda_per_mm : float
        The size distribution ``N0 exp(-Lambda D)`` in its size variable D (mm).
    diameter_k, diameter_p : float
        The particle's optical diameter is ``k D^p`` mm (drops: 1, 1; flakes from their
        melted drops by the density law).
    reflectance : float
        The equivalent reflectance of its cross-section in the backscatter direction.
    efficiency : float
        Its extinction efficiency Q: it removes ``Q`` times its cross-section from the
        beam on each pass.
    object_index : int
    stream : np.uint64
        Hash seed of its particles.
    range_m : (T,) float64
        Table ranges, 0 to the scanner's maximum range.
    min_size_mm : (T,) float64
        The smallest D detectable there (with the overlap; ``inf`` where it is 0).
    cumulative : (T,) float64
        Expected number of drawn particles per pulse closer than each range.
    poisson_cdf : (K,) float64
        The Poisson CDF of the count per pulse, up to the most a pulse may meet.
    """

    kind: str
    n0_per_m3_mm: float
    lambda_per_mm: float
    diameter_k: float
    diameter_p: float
    reflectance: float
    efficiency: float
    object_index: int
    stream: np.uint64
    range_m: NDArray[np.float64]
    min_size_mm: NDArray[np.float64]
    cumulative: NDArray[np.float64]
    poisson_cdf: NDArray[np.float64]

    @property
    def mean_per_pulse(self) -> float:
        """Expected number of drawn particles in one beam, out to the maximum range."""
        return float(self.cumulative[-1])

    def drawn_extinction_per_m(self) -> NDArray[np.float64]:
        """The drawn particles' share of the extinction at the table's ranges, 1/m: (T,)
        float64. What those larger than ``D_min(r)`` remove, ``Q pi/4 k^2 N0 integral
        from D_min to infinity of D^(2p) exp(-Lambda D) dD``, by Gauss-Laguerre
        quadrature of ``exp(-Lambda D_min) / Lambda integral((D_min + x / Lambda)^(2p)
        exp(-x) dx)``; 0 where none is drawn."""
        x, w = np.polynomial.laguerre.laggauss(_LAGUERRE_NODES)
        smallest = np.where(np.isfinite(self.min_size_mm), self.min_size_mm, 0.0)
        lam = self.lambda_per_mm
        tail = (smallest[:, None] + x[None, :] / lam) ** (2.0 * self.diameter_p) @ w
        per_m = (self.efficiency * np.pi / 4.0 * self.diameter_k**2 * self.n0_per_m3_mm
                 * np.exp(-lam * smallest) / lam * tail * 1e-6)  # fmt: skip
        return np.where(np.isfinite(self.min_size_mm), per_m, 0.0)

    def drawn_depth(self, range_m: NDArray[np.float64]) -> NDArray[np.float64]:
        """The one-way optical depth of the drawn particles out to some ranges (the
        integral of :meth:`drawn_extinction_per_m`, trapezoids on the table): (N,)
        float64; what a beam expects to lose to them, ``Q`` times their shares."""
        per_m = self.drawn_extinction_per_m()
        depth = np.concatenate(
            [[0.0], np.cumsum(0.5 * (per_m[1:] + per_m[:-1]) * np.diff(self.range_m))]
        )
        return np.interp(range_m, self.range_m, depth)

    @classmethod
    def of(
        cls,
        kind: str,
        distribution: Distribution,
        reflectance: float,
        efficiency: float,
        optics: BeamOptics,
        model: ReturnModel,
        object_index: int,
        stream: np.uint64,
    ) -> Population:
        """Tabulate a size distribution ``(N0, Lambda, k, p)`` for a scanner's beam."""
        n0, lam, k, p = distribution
        r = model.range_max_m * np.linspace(0.0, 1.0, _PARTICLE_TABLE) ** 2
        area = optics.area_m2(r)
        seen = optics.overlap(r) * model.two_way_transmission(r)
        # rho zeta (pi d^2 / 4) / A exp(-2 alpha r) / r^2 = threshold, d = k D^p 1e-3 m
        with np.errstate(divide="ignore", invalid="ignore"):
            d_min_mm = 1e3 * np.sqrt(4.0 * model.detection_floor * r**2 * area
                                     / (np.pi * reflectance * seen))  # fmt: skip
        d_min_mm = np.where(seen > 0.0, d_min_mm, np.inf)
        size_mm = (d_min_mm / k) ** (1.0 / p)
        density = area * n0 / lam * np.exp(-lam * size_mm)
        cumulative = np.concatenate(
            [[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(r))]
        )
        mean = float(cumulative[-1])
        most = int(np.ceil(mean + 12.0 * np.sqrt(mean) + 12.0))
        counts = np.arange(most + 1)
        log_pmf = counts * np.log(max(mean, 1e-300)) - mean - _log_factorial(counts)
        cdf = np.minimum(np.cumsum(np.exp(log_pmf)), 1.0)
        cdf[-1] = 1.0
        return cls(kind, n0, lam, k, p, reflectance, efficiency, object_index, stream, r,
                   size_mm, cumulative, cdf)  # fmt: skip

    def count(self, pulse_id: NDArray[np.uint64]) -> NDArray[np.int64]:
        """How many particles :meth:`draw` draws in each beam of pulses ``pulse_id``: (P,)
        int64."""
        with np.errstate(over="ignore"):
            key = physics.mix64(self.stream + np.asarray(pulse_id, dtype=np.uint64))
        return np.searchsorted(self.poisson_cdf, physics.hash_uniform(key), side="left")

    def draw(self, pulse_id: NDArray[np.uint64]) -> Particles:
        """The particles in the beams of pulses ``pulse_id`` (every one, lit or not).

        Each pulse's count is a Poisson draw from ``hash_uniform(mix64(stream + id))``;
        particle ``j`` of it takes its range, size and place in the footprint from three
        hashes of ``mix64(that key + (j + 1) GOLDEN_GAMMA)``.
        """
        ids = np.asarray(pulse_id, dtype=np.uint64)
        with np.errstate(over="ignore"):
            key = physics.mix64(self.stream + ids)
        count = np.searchsorted(self.poisson_cdf, physics.hash_uniform(key), side="left")
        pulse = np.repeat(np.arange(len(ids)), count)
        first = np.cumsum(count) - count
        j = np.arange(len(pulse)) - np.repeat(first, count)
        with np.errstate(over="ignore"):
            h = physics.mix64(
                key[pulse] + (j.astype(np.uint64) + np.uint64(1)) * np.uint64(GOLDEN_GAMMA)
            )
            u_range = physics.hash_uniform(physics.mix64(h + np.uint64(1)))
            u_size = physics.hash_uniform(physics.mix64(h + np.uint64(2)))
            u_place = physics.hash_uniform(physics.mix64(h + np.uint64(3)))
        range_m = np.interp(u_range * self.mean_per_pulse, self.cumulative, self.range_m)
        finite = np.isfinite(self.min_size_mm)
        smallest = np.interp(range_m, self.range_m[finite], self.min_size_mm[finite])
        size = smallest - np.log(u_size) / self.lambda_per_mm
        diameter_m = self.diameter_k * size**self.diameter_p * 1e-3
        return Particles(pulse, range_m, diameter_m, u_place)


@dataclass
class Particles:
    """Particles drawn in a chunk's beams.

    Attributes
    ----------
    pulse : (M,) int64
        Pulse (index in the chunk) each lies in.
    range_m : (M,) float64
        Its distance from the sensor along the beam.
    diameter_m : (M,) float64
        Its optical diameter.
    place : (M,) float64
        Uniform in (0, 1): where across the footprint it lies (which sub-ray's share).
    """

    pulse: NDArray[np.int64]
    range_m: NDArray[np.float64]
    diameter_m: NDArray[np.float64]
    place: NDArray[np.float64]

    def of_pulses(self, pulses: NDArray[np.intp]) -> Particles:
        """The particles of some pulses (increasing indices), ``pulse`` counting in them."""
        pos, found = positions_in(pulses, self.pulse)
        keep = np.flatnonzero(found)
        return Particles(pos[keep], self.range_m[keep], self.diameter_m[keep], self.place[keep])

    def of_span(self, start: int, stop: int) -> Particles:
        """The particles of pulses ``start..stop`` (``pulse`` increasing, as drawn),
        ``pulse`` counting from ``start``: :meth:`of_pulses` of ``arange(start, stop)``."""
        a, b = np.searchsorted(self.pulse, [start, stop])
        return Particles(self.pulse[a:b] - start, self.range_m[a:b], self.diameter_m[a:b],
                         self.place[a:b])  # fmt: skip


def draw_particles(population: Population, pulse_id: NDArray[np.uint64]) -> Particles:
    """:meth:`Population.draw` (the specification the backends' kernel mirrors)."""
    return population.draw(pulse_id)


def count_particles(population: Population, pulse_id: NDArray[np.uint64]) -> NDArray[np.int64]:
    """:meth:`Population.count` (the specification the backends' kernel mirrors): how
    many particles :func:`draw_particles` draws in each beam of pulses ``pulse_id``, (P,)
    int64."""
    return population.count(pulse_id)


def _log_factorial(n: NDArray[np.int64]) -> NDArray[np.float64]:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, int(n.max()) + 1)))])[n]
