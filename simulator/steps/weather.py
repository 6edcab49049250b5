"""Weather: the medium between the sensor and the scene, from the physics of the beam.

A ``weather:`` section (:class:`~simulator.config.Weather`) adds three things to a scan.

1. **Extinction.** Every echo's received peak is multiplied by ``exp(-2 alpha R)``:
   fog and dust of meteorological optical range MOR have ``alpha = ln(20) / MOR``
   (Koschmieder); rain and snow the extinction of their particles, ``alpha = Q_ext
   integral(pi D^2 / 4 N(D) dD)`` with ``Q_ext = 2`` (particles much larger than the
   wavelength), which for an exponential size distribution ``N(D) = N0 exp(-Lambda D)``
   is ``pi N0 / Lambda^3``. Extinctions of several conditions add. The threshold stays
   the clear-air one, so the farthest detection of a target shrinks as
   ``rho cos exp(-2 alpha R) / R^2 = threshold`` says. With rain or snow the particles
   that are drawn (3.) shadow the beam themselves, so their share ``alpha_drawn(r)`` of
   the extinction (the part of the size distribution above the smallest drawn size at
   that range) is taken out of the continuum: hard targets receive
   ``exp(-2 integral(alpha - alpha_drawn(r) dr))`` times the drawn particles' shadows,
   the model's extinction relief (:attr:`simulator.steps.hits.ReturnModel.extinction_relief`),
   so that on average the beam loses ``exp(-2 alpha R)``, each particle counted once.

2. **Soft targets** (fog, dust). The medium backscatters ``beta`` per metre and
   steradian along the whole beam (fog: ``beta = 0.046 / MOR``, Rasshofer et al. 2011;
   dust: a lidar ratio of 45 sr). A slab ``dr`` at range ``r`` returns what a
   Lambertian target of reflectance ``pi beta dr`` would, so the received waveform, in
   the units of the hard targets' ``b / R^2``, is

   ``S(R) = integral(pi beta zeta(r) exp(-2 alpha r) / r^2 lit(r) h(R - r) dr)``

   where ``h`` is the pulse's shape in range (a Gaussian of FWHM the pulse length
   ``L``), ``zeta`` the receiver's near-field overlap (``overlap_m`` of the scanner)
   and ``lit(r)`` the share of the beam not yet stopped by the scene at ``r`` (1, or 0
   behind the hit; with footprints the energy share of the sub-rays that reach ``r``).
   The medium's echo is the waveform's peak: at range ``R*`` with received peak
   ``S(R*)``, detected when it reaches the threshold. Its reported intensity is the
   reflectivity a hard target there would have needed, ``S(R*) R*^2 exp(2 alpha R*)``
   times the intensity scale. With a pulse length of 0 the medium returns nothing.

3. **Particles** (rain, snow). Each pulse meets the drops or flakes that its beam's
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

Weather points carry a label of their own and instance 0 (:data:`MEDIUM_LABELS`): falling
snow is ``falling-snow`` (110, the class the WADS dataset adds to SemanticKITTI's), fog,
dust and rain are ``outlier`` (1). Their ``object_id`` (diagnostics) is one past the
scene's objects: fog, dust, rain, snow in that order.

This module is the specification: the pulses that weather touches are computed by
:func:`medium_returns` (numpy) or its kernel (:mod:`simulator.kernels.weather`: in a
scene without see-through surfaces one kernel a pulse, the particles drawn where they are
used, only the lit ones); the others keep the kernels' results, with the extinction in
the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import BeamPattern
from ..chunk import Hits, positions_in
from ..config import ScannerConfig, Weather
from ..constants import (
    DUST_LIDAR_RATIO_SR,
    FOG_BACKSCATTER_MOR,
    GOLDEN_GAMMA,
    HAZE_REFERENCE_WAVELENGTH_NM,
    KOSCHMIEDER,
    RAIN_BACKSCATTER_REFLECTANCE,
    RAIN_LAMBDA,
    RAIN_N0,
    SNOW_DENSITY_G_CM3,
    SNOW_EQUIVALENT_REFLECTANCE,
    SNOW_LAMBDA,
    SNOW_N0,
    STREAM_DUST,
    STREAM_FOG,
    STREAM_RAIN,
    STREAM_SNOW,
    stream_seed,
)
from ..labels import label_id
from .echoes import Behind, Echoes, Returns, of_pulses, surface_returns, transmittance_at
from .hits import HitResults, ReturnModel, Streams

__all__ = [
    "MEDIUM_BLOCK_PULSES",
    "MEDIUM_KINDS",
    "MEDIUM_LABELS",
    "SOFT_BLOCK_PULSES",
    "Medium",
    "Particles",
    "Population",
    "SoftTarget",
    "beam_area_m2",
    "count_particles",
    "draw_particles",
    "haze_wavelength_factor",
    "medium_entries",
    "medium_returns",
    "overlap",
    "weather_extinction_per_m",
]

#: The kinds of medium, in the order of their object ids after the scene's objects.
MEDIUM_KINDS = ("fog", "dust", "rain", "snow")
#: The label each kind's points get (SemanticKITTI ids; 110 is WADS' falling snow).
MEDIUM_LABELS = {"fog": "outlier", "dust": "outlier", "rain": "outlier", "snow": "falling-snow"}

#: Source samples per pulse length in the soft-target waveform.
_SOFT_SAMPLES_PER_PULSE = 100
#: Most samples of a soft-target waveform.
_SOFT_MAX_SAMPLES = 1500
#: Waveform values gathered at once for footprints that cut a soft target at several
#: places (bounds the memory: 32 MB).
_SOFT_BLOCK_VALUES = 4_000_000
#: Samples of the particle range table.
_PARTICLE_TABLE = 4096
#: The weather's pulses of a chunk are computed this many at a time (each pulse's returns
#: are its own), so that a snowfall's particles and echoes hold tens of megabytes, not
#: gigabytes.
MEDIUM_BLOCK_PULSES = 16384
#: The same for a medium without particles (fog, dust alone): a pulse's entries are then
#: its surfaces and the soft targets' peaks, a few values, so a default chunk is one block.
SOFT_BLOCK_PULSES = 1 << 18
#: Samples of the hard targets' extinction relief (uniform in range, to the maximum).
_RELIEF_TABLE = 2048
#: Gauss-Laguerre nodes of the drawn particles' extinction (exact for the drops' D^2).
_LAGUERRE_NODES = 24


#: A size distribution: (N0 m^-3 mm^-1, Lambda mm^-1, k, p): ``N(D) = N0 exp(-Lambda D)``
#: in the size variable D (mm), the particle's optical diameter ``k D^p`` mm.
Distribution = tuple[float, float, float, float]


def _rain_distribution(rate_mm_h: float) -> Distribution:
    """Marshall-Palmer rain: the drop's diameter is D."""
    return RAIN_N0, RAIN_LAMBDA[0] * rate_mm_h ** RAIN_LAMBDA[1], 1.0, 1.0


def _snow_distribution(rate_mm_h: float) -> Distribution:
    """Gunn-Marshall snow in melted diameter D; the flake's diameter from the density law
    of Brandes et al. 2007, ``rho = a d^b``: ``rho d^3 = D^3`` (g/cm^3, water 1) gives
    ``d = (D^3 / a)^(1 / (3 + b))``."""
    n0 = SNOW_N0[0] * rate_mm_h ** SNOW_N0[1]
    lam = SNOW_LAMBDA[0] * rate_mm_h ** SNOW_LAMBDA[1]
    a, b = SNOW_DENSITY_G_CM3
    return n0, lam, a ** (-1.0 / (3.0 + b)), 3.0 / (3.0 + b)


def particle_extinction_per_m(
    n0: float, lambda_per_mm: float, k: float, p: float, efficiency: float = 2.0
) -> float:
    """Extinction of particles of size distribution ``N0 exp(-Lambda D)`` whose diameter
    is ``k D^p`` (D, mm), each removing ``efficiency`` times its cross-section:
    ``Q pi/4 k^2 N0 Gamma(2p + 1) / Lambda^(2p + 1)``, 1/m."""
    mm2_per_m3 = efficiency * np.pi / 4.0 * k**2
    return float(mm2_per_m3 * math.gamma(2.0 * p + 1.0) * n0 / lambda_per_mm ** (2.0 * p + 1.0)
                 * 1e-6)  # fmt: skip


def haze_wavelength_factor(visibility_m: float, wavelength_nm: float | None) -> float:
    """The extinction of haze of a visibility at a wavelength over that at 550 nm (where
    the visibility is defined): ``(lambda / 550)^-q(V)`` of Kim, McArthur and Korevaar
    2001; 1 below 500 m (fog, whose drops are much larger than the wavelength) and when
    the wavelength is not known.

    Examples
    --------
    >>> round(haze_wavelength_factor(5000.0, 905.0), 3)
    0.567
    """
    v_km = visibility_m / 1000.0
    if wavelength_nm is None or v_km <= 0.5:
        return 1.0
    if v_km <= 1.0:
        q = v_km - 0.5
    elif v_km <= 6.0:
        q = 0.16 * v_km + 0.34
    elif v_km <= 50.0:
        q = 1.3
    else:
        q = 1.6
    return float((wavelength_nm / HAZE_REFERENCE_WAVELENGTH_NM) ** -q)


def weather_extinction_per_m(weather: Weather, wavelength_nm: float | None = None) -> float:
    """The extinction coefficient of the weather (its conditions' sum), 1/m; 0 in clear air.

    Fog and dust: Koschmieder's ``ln(20) / MOR`` times :func:`haze_wavelength_factor`
    (1 without a wavelength); rain and snow: :func:`particle_extinction_per_m` of every
    particle, with the condition's extinction efficiency.

    Examples
    --------
    >>> from simulator.config import Weather
    >>> round(weather_extinction_per_m(Weather.model_validate({"fog": {"visibility_m": 50}})), 5)
    0.05991
    """
    alpha = 0.0
    for medium in (weather.fog, weather.dust):
        if medium is not None:
            factor = haze_wavelength_factor(medium.visibility_m, wavelength_nm)
            alpha += KOSCHMIEDER / medium.visibility_m * factor
    for fall, law in ((weather.rain, _rain_distribution), (weather.snow, _snow_distribution)):
        if fall is not None:
            alpha += particle_extinction_per_m(*law(fall.rate_mm_h), fall.extinction_efficiency)
    return alpha


def beam_area_m2(range_m: NDArray[np.float64], scanner: ScannerConfig) -> NDArray[np.float64]:
    """Cross-section of the beam at a range: an ellipse of diameters ``d0 + r beta``
    (exit diameter, full divergences): (N,) float64, m^2."""
    d0 = scanner.beam_exit_diameter_mm * 1e-3
    div = scanner.divergence_mrad
    r = np.asarray(range_m, dtype=np.float64)
    return np.pi / 4.0 * (d0 + r * div.horizontal * 1e-3) * (d0 + r * div.vertical * 1e-3)


def overlap(range_m: NDArray[np.float64], scanner: ScannerConfig) -> NDArray[np.float64]:
    """The receiver's near-field overlap at a range: (N,) float64 in [0, 1].

    With ``overlap_m = [start, full]`` given: 0 before ``start``, 1 beyond ``full``, linear
    between. Otherwise the geometric overlap of a biaxial sensor with parallel axes
    (Rasshofer et al. 2011, Fig. 2; Hahner et al. 2021, Sec. 3): the share of the
    transmitted beam's cross-section, a disc of radius ``a = rho_t + r theta_t / 2``
    (exit radius, geometric-mean divergence), inside the receiver's field of view, a disc
    of radius ``b = rho_r + r theta_r / 2`` (aperture radius, field of view) whose centre is
    ``s`` (``axis_separation_mm``) away: the two discs' intersection over ``pi a^2``. It is
    0 up to ``(s - rho_t - rho_r) / (theta_t/2 + theta_r/2)`` and 1 from
    ``(s + rho_t - rho_r) / (theta_r/2 - theta_t/2)`` on; 0 closer than ``range_min_m``
    (the receiver is blanked there).
    """
    r = np.asarray(range_m, dtype=np.float64)
    if scanner.overlap_m is not None:
        start, full = scanner.overlap_range_m
        if full <= start:
            return (r >= start).astype(np.float64)
        return np.clip((r - start) / (full - start), 0.0, 1.0)
    rho_t, grow_t = scanner.transmit_radius_mm
    a = rho_t + r * grow_t
    b = 0.5 * scanner.receiver_aperture_mm + r * 0.5 * scanner.receiver_fov_mrad
    s = scanner.axis_separation_mm
    with np.errstate(divide="ignore", invalid="ignore"):
        cos_a = np.clip((s**2 + a**2 - b**2) / (2.0 * s * a), -1.0, 1.0)
        cos_b = np.clip((s**2 + b**2 - a**2) / (2.0 * s * b), -1.0, 1.0)
        kite = np.sqrt(np.maximum((-s + a + b) * (s + a - b) * (s - a + b) * (s + a + b), 0.0))
        lens = a**2 * np.arccos(cos_a) + b**2 * np.arccos(cos_b) - 0.5 * kite
        share = np.where(s > 0.0, lens, np.pi * np.minimum(a, b) ** 2) / (np.pi * a**2)
    share = np.where(s >= a + b, 0.0, np.where(s <= b - a, 1.0, share))
    return np.where(r >= scanner.range_min_m, np.clip(share, 0.0, 1.0), 0.0)


@dataclass(frozen=True)
class SoftTarget:
    """A medium that backscatters all along the beam (fog, dust), tabulated for a scanner.

    Attributes
    ----------
    kind : str
        ``fog`` or ``dust``.
    backscatter_per_m_sr : float
        ``beta``.
    object_index : int
        The object id its points get.
    stream : np.uint64
        Hash seed of its points' range jitter.
    range_m : (G,) float64
        Where the medium is sampled, from the overlap's start to 12 pulse lengths beyond
        its end; the waveform is received at the first ``W`` of them.
    source : (G,) float64
        ``pi beta zeta(r) exp(-2 alpha r) / r^2 dr`` of each sample.
    waveform : (G + 1, W) float64
        Row ``c``: the waveform at ``range_m[:W]`` of a beam cut after its first ``c``
        samples (the sum of their sources times the pulse shape); row ``G`` is uncut.
        ``W`` ends just beyond the uncut peak, beyond which no cut beam peaks.
    peak_range_m, peak_received : float
        The waveform's peak when nothing cuts the beam.
    reach_m : float
        A beam cut beyond this leaves the peak as it is (the pulse shape has fallen to
        1e-19 of its peak four pulse lengths away).
    """

    kind: str
    backscatter_per_m_sr: float
    object_index: int
    stream: np.uint64
    range_m: NDArray[np.float64]
    source: NDArray[np.float64]
    waveform: NDArray[np.float64]
    peak_range_m: float
    peak_received: float
    reach_m: float

    @classmethod
    def of(
        cls,
        kind: str,
        beta: float,
        scanner: ScannerConfig,
        model: ReturnModel,
        object_index: int,
        stream: np.uint64,
    ) -> SoftTarget:
        """Tabulate the waveform of a medium of backscatter ``beta`` for a scanner."""
        length = model.pulse_length_m
        start, full = scanner.overlap_range_m
        end = full + 12.0 * length
        step = max(length / _SOFT_SAMPLES_PER_PULSE, (end - start) / _SOFT_MAX_SAMPLES)
        first = max(start, step)
        r = first + step * np.arange(int(np.ceil((end - first) / step)) + 1)
        src = np.pi * beta * overlap(r, scanner) * model.two_way_transmission(r)
        src = src / r**2 * step
        shape = np.exp(-4.0 * np.log(2.0) * ((r[:, None] - r[None, :]) / length) ** 2)
        uncut = shape @ src
        peak_r, peak_s = _peak(r, uncut[None, :])
        reach = float(peak_r[0]) + 4.0 * length
        # A cut beam's waveform peaks no farther than the uncut one (what the cut removes
        # grows towards the cut), so the receiving ranges stop just beyond that peak.
        receiving = int(np.searchsorted(r, peak_r[0])) + 4
        waveform = np.zeros((len(r) + 1, receiving))
        np.cumsum(shape[:receiving].T * src[:, None], axis=0, out=waveform[1:])
        return cls(kind, beta, object_index, stream, r, src, waveform, float(peak_r[0]),
                   float(peak_s[0]), reach)  # fmt: skip

    def echoes(
        self,
        sub_range_m: NDArray[np.float64],
        weights: NDArray[np.float64],
        behind_m: NDArray[np.float64] | None = None,
        two_way: NDArray[np.float64] | None = None,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The waveform peak of each pulse, its beam cut by the scene.

        Without ``behind_m`` the light stops at each sub-ray's first surface. With it, it
        goes on through see-through surfaces to the first opaque one, and the medium
        behind each surface is seen through it: its sources are weighted by the two-way
        factors of the surfaces in front (``T^2`` a pane, ``T`` a porous layer), as the
        surfaces behind them are. The waveform is then ``sum_k P_k (1 - f_k) W(c_k) +
        P_L W(inf)``, with ``W(c)`` the waveform of a beam cut at ``c``, ``c_k`` the
        ``k``-th surface, ``f_k`` its factor and ``P_k`` the product of the factors in
        front of it.

        Parameters
        ----------
        sub_range_m : (P, S) float64
            Range of each sub-ray's hit (``inf``: a miss); the light stops there unless
            ``behind_m`` is given.
        weights : (S,) float64
            The sub-rays' energy shares.
        behind_m : (L, P, S) float64, optional
            Range of each sub-ray's surface in each layer behind the first (``inf``:
            none), increasing along the layers.
        two_way : (L + 1, P, S) float64, optional
            The two-way factor of seeing through each of those surfaces (the first, then
            one a layer behind); 0 for an opaque surface or none. Given with ``behind_m``.

        Returns
        -------
        range_m, received : (P,) float64
        """
        n_pulses = len(sub_range_m)
        range_m = np.full(n_pulses, self.peak_range_m)
        received = np.full(n_pulses, self.peak_received)
        rows = np.flatnonzero((sub_range_m < self.reach_m).any(axis=1))
        if len(rows) == 0:
            return range_m, received
        g, receiving = self.waveform.shape[0] - 1, self.waveform.shape[1]
        step = self.range_m[1] - self.range_m[0]
        share = weights / weights.sum()
        layers = 1 if behind_m is None else len(behind_m) + 2
        block = max(1, _SOFT_BLOCK_VALUES // (len(weights) * receiving * layers))

        def cut(at_m: NDArray[np.float64]) -> NDArray[np.float64]:
            # Cell j spans r_j -+ step / 2; the beam lights the cells before the cut,
            # and the cut cell in part: (n, S, receiving).
            x = np.clip((at_m - self.range_m[0]) / step + 0.5, 0.0, float(g))
            full = np.minimum(np.floor(x).astype(np.int64), g - 1)
            frac = (x - full)[:, :, None]
            below, above = self.waveform[full], self.waveform[full + 1]
            return below + frac * (above - below)

        for lo in range(0, len(rows), block):
            part = rows[lo : lo + block]
            if behind_m is None or two_way is None:
                wave = np.einsum("s,psg->pg", share, cut(sub_range_m[part]))
            else:
                # The share of each sub-ray's sources up to its k-th surface:
                # P_k (1 - f_k); what passes its last surface is uncut. A layer where a
                # sub-ray meets nothing adds exactly nothing, so the sum does not depend
                # on how many layers a chunk has.
                passing = np.ones((len(part), len(weights)))
                wave = np.zeros((len(part), receiving))
                for k in range(len(behind_m) + 1):
                    at = sub_range_m[part] if k == 0 else behind_m[k - 1][part]
                    met = np.isfinite(at)
                    f = two_way[k][part]
                    up_to = np.where(met, share * passing * (1.0 - f), 0.0)
                    wave += np.einsum("ps,psg->pg", up_to, cut(at))
                    passing = np.where(met, passing * f, passing)
                uncut = (passing * share).sum(axis=1)
                wave += uncut[:, None] * self.waveform[g][None, :receiving]
            range_m[part], received[part] = _peak(self.range_m[:receiving], wave)
        return range_m, received


def _peak(r: NDArray[np.float64], wave: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
    """Peak of sampled waveforms (rows), refined by the parabola through the top three
    samples: (range, value), each (rows,) float64."""
    i = np.clip(np.argmax(wave, axis=1), 1, wave.shape[1] - 2)
    rows = np.arange(len(wave))
    a, b, c = wave[rows, i - 1], wave[rows, i], wave[rows, i + 1]
    denom = a - 2.0 * b + c
    shift = np.where(denom < 0.0, 0.5 * (a - c) / np.where(denom < 0.0, denom, -1.0), 0.0)
    shift = np.clip(shift, -0.5, 0.5)
    step = r[1] - r[0]
    return r[i] + shift * step, b - 0.25 * (a - c) * shift


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
        scanner: ScannerConfig,
        model: ReturnModel,
        object_index: int,
        stream: np.uint64,
    ) -> Population:
        """Tabulate a size distribution ``(N0, Lambda, k, p)`` for a scanner."""
        n0, lam, k, p = distribution
        r = model.range_max_m * np.linspace(0.0, 1.0, _PARTICLE_TABLE) ** 2
        area = beam_area_m2(r, scanner)
        seen = overlap(r, scanner) * model.two_way_transmission(r)
        # rho zeta (pi d^2 / 4) / A exp(-2 alpha r) / r^2 = threshold, d = k D^p 1e-3 m
        with np.errstate(divide="ignore", invalid="ignore"):
            d_min_mm = 1e3 * np.sqrt(4.0 * model.threshold * r**2 * area
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


def _with_relief(model: ReturnModel, populations: Sequence[Population]) -> ReturnModel:
    """``model`` with the drawn particles' optical depth as its extinction relief, on
    :data:`_RELIEF_TABLE` ranges from 0 to the maximum range."""
    step = model.range_max_m / (_RELIEF_TABLE - 1)
    r = step * np.arange(_RELIEF_TABLE)
    relief = sum(p.drawn_depth(r) for p in populations)
    return replace(model, extinction_relief=np.asarray(relief, dtype=np.float64),
                   extinction_relief_step_m=float(step))  # fmt: skip


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


@dataclass(frozen=True)
class Medium:
    """A survey's weather, made ready for a scanner: what :func:`medium_returns` needs.

    Attributes
    ----------
    extinction_per_m : float
        The weather's extinction (the model's includes it).
    soft : tuple of SoftTarget
    populations : tuple of Population
    first_object : int
        Object id of the first kind of :data:`MEDIUM_KINDS` (the scene's object count).
    scanner : ScannerConfig
    model : ReturnModel
        The model the scan uses: the one given, with the drawn particles' share of the
        extinction given back as a relief (:attr:`ReturnModel.extinction_relief`) when
        there are particles.
    transmittance_of_object : (objects + 1,) float64, optional
        Each object's transmittance and a 0 for a miss (the scene's see-through
        surfaces: particles behind them); None: every surface opaque.
    porous_of_object : (objects + 1,) bool, optional
        Which objects are porous layers.
    law_of_object : (objects + 1,) int8, optional
        Each object's transmittance law (:func:`simulator.steps.echoes.transmittance_at`);
        None: all constant.
    """

    extinction_per_m: float
    soft: tuple[SoftTarget, ...]
    populations: tuple[Population, ...]
    first_object: int
    scanner: ScannerConfig
    model: ReturnModel
    transmittance_of_object: NDArray[np.float64] | None = None
    porous_of_object: NDArray[np.bool_] | None = None
    law_of_object: NDArray[np.int8] | None = None

    @classmethod
    def of(
        cls,
        weather: Weather,
        scanner: ScannerConfig,
        model: ReturnModel,
        seed: int,
        objects: int,
        transmittance_of_object: NDArray[np.float64] | None = None,
        porous_of_object: NDArray[np.bool_] | None = None,
        law_of_object: NDArray[np.int8] | None = None,
    ) -> Medium:
        """Tabulate a weather for a scanner whose model already includes its extinction,
        in a scene of ``objects`` objects (their transmittances and which are porous, if
        any is see-through), for survey seed ``seed``."""

        def obj(kind: str) -> int:
            return objects + MEDIUM_KINDS.index(kind)

        def falling(model: ReturnModel) -> list[Population]:
            out = []
            for kind, fall, law, rho, stream in (
                ("rain", weather.rain, _rain_distribution, RAIN_BACKSCATTER_REFLECTANCE,
                 STREAM_RAIN),
                ("snow", weather.snow, _snow_distribution, SNOW_EQUIVALENT_REFLECTANCE,
                 STREAM_SNOW),
            ):  # fmt: skip
                if fall is not None:
                    seed_k = np.uint64(stream_seed(seed, stream))
                    out.append(Population.of(
                        kind, law(fall.rate_mm_h), rho, fall.extinction_efficiency, scanner,
                        model, obj(kind), seed_k,
                    ))  # fmt: skip
            return out

        # The drawn particles' shadows are drawn, so their share of the extinction is
        # given back to the continuous medium; which are drawn depends on the
        # transmission, so the relief is found twice (the second changes the first's
        # smallest drawn sizes by far less than a part in a thousand).
        populations = falling(model)
        if populations:
            for _ in range(2):
                model = _with_relief(model, populations)
                populations = falling(model)
            model = _with_relief(model, populations)
        soft = []
        if model.pulse_length_m > 0.0:
            for kind, medium, ratio, stream in (
                ("fog", weather.fog, KOSCHMIEDER / FOG_BACKSCATTER_MOR, STREAM_FOG),
                ("dust", weather.dust, DUST_LIDAR_RATIO_SR, STREAM_DUST),
            ):
                if medium is not None:
                    # The lidar ratio kept at the scanner's wavelength (Kim et al. 2001).
                    factor = haze_wavelength_factor(medium.visibility_m, scanner.wavelength_nm)
                    beta = KOSCHMIEDER / medium.visibility_m / ratio * factor
                    seed_k = np.uint64(stream_seed(seed, stream))
                    soft.append(SoftTarget.of(kind, beta, scanner, model, obj(kind), seed_k))
        alpha = weather_extinction_per_m(weather, scanner.wavelength_nm)
        return cls(alpha, tuple(soft), tuple(populations), objects, scanner, model,
                   transmittance_of_object, porous_of_object, law_of_object)  # fmt: skip

    @property
    def labels(self) -> NDArray[np.uint16]:
        """The label of each medium object, in :data:`MEDIUM_KINDS` order."""
        return np.array([label_id(MEDIUM_LABELS[k]) for k in MEDIUM_KINDS], dtype=np.uint16)

    def draw(
        self,
        pulse_id: NDArray[np.uint64],
        draw: Callable[[Population, NDArray[np.uint64]], Particles] | None = None,
    ) -> list[Particles]:
        """The particles of each population in the beams of pulses ``pulse_id``, drawn by
        ``draw`` (default :func:`draw_particles`; a backend's kernel gives the same)."""
        draw = draw_particles if draw is None else draw
        return [draw(population, pulse_id) for population in self.populations]

    def touched(
        self,
        pulse_id: NDArray[np.uint64],
        threshold: float,
        particles: list[Particles] | None = None,
        count: Callable[[Population, NDArray[np.uint64]], NDArray[np.int64]] | None = None,
    ) -> NDArray[np.bool_]:
        """(P,) bool: pulses the weather may change beyond the extinction: every pulse
        when a soft target's peak can be detected, else those with a particle (of
        ``particles``, drawn for ``pulse_id``; without them, counted by ``count``, default
        :func:`count_particles`; a backend's kernel gives the same)."""
        n = len(pulse_id)
        if any(s.peak_received >= threshold for s in self.soft):
            return np.ones(n, dtype=bool)
        out = np.zeros(n, dtype=bool)
        if particles is None:
            count = count_particles if count is None else count
            for population in self.populations:
                out |= count(population, pulse_id) > 0
            return out
        for drawn in particles:
            out[drawn.pulse] = True
        return out


def medium_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    medium: Medium,
    particles: list[Particles] | None = None,
    behind: Sequence[Behind] = (),
    pulses: NDArray[np.intp] | None = None,
) -> Returns:
    """The returns of pulses through the weather: the scene's sub-ray hits shadowed by the
    particles in front of them, the particles' own echoes, grouped with them as in
    :func:`simulator.steps.echoes.echo_returns`, and each soft target's waveform peak; all
    measured, detected and selected together.

    Parameters
    ----------
    results : HitResults
        The per-hit model of the rays (sub-ray ``k`` of pulse ``p`` is ray ``p *
        beam.samples + k``; one ray a pulse when ``beam.samples`` is 1), every field.
    hits : Hits
        The rays' hits.
    pulse_id : (P,) uint64
        Global id of each pulse.
    beam : BeamPattern
        The sub-rays' energy shares.
    model : ReturnModel
        With the weather's extinction.
    streams : Streams
    medium : Medium
    particles : list of Particles, optional
        Each population's particles in these pulses, if drawn already
        (:meth:`Medium.draw`).
    behind : sequence of Behind
        The surfaces behind see-through ones (:func:`simulator.steps.echoes.surface_returns`).
    pulses : (Q,) intp, optional
        Only these pulses (increasing indices into ``pulse_id``); ``particles`` are then
        theirs, and the returns' ``pulse`` indexes ``pulses``.

    Returns
    -------
    Returns
        With every diagnostic field.
    """
    pulse_id = np.asarray(pulse_id, dtype=np.uint64)
    if pulses is not None:
        results, hits, behind = of_pulses(results, hits, behind, pulses, beam.samples)
        pulse_id = pulse_id[pulses]
    shadow, extra, broad = medium_entries(
        hits, pulse_id, beam, model, medium, particles, behind, results
    )
    return surface_returns(
        results, hits, pulse_id, beam, model, streams,
        behind=behind, shadow=shadow, extra=extra, broad=broad,
    )  # fmt: skip


def medium_entries(
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    medium: Medium,
    particles: list[Particles] | None = None,
    behind: Sequence[Behind] = (),
    results: HitResults | None = None,
) -> tuple[list[NDArray[np.float64]], list[tuple[NDArray, ...]], list[tuple[Echoes, NDArray]]]:
    """What the weather adds to :func:`simulator.steps.echoes.surface_returns` for
    :func:`medium_returns`: the share of each sub-ray's light the particles in front of a
    surface take (two passes; a (P, S) array for the first surfaces, then one a row of
    each layer of ``behind``), the particles' own entries (its ``extra``) and each soft
    target's waveform-peak echo (its ``broad``).

    A particle is lit when it lies in front of the first opaque surface its sub-ray meets
    (the light goes on through see-through ones), and its echo is seen through the
    see-through surfaces in front of it: ``T^2`` a pane, ``T`` a porous layer (the gap
    model), as the surfaces behind them are (``T`` by the material's
    ``transmittance_law`` at each ray's incidence, from ``results``, the first surfaces'
    per-hit model, and the layers'). A soft target's light goes on through
    see-through surfaces likewise: its waveform takes the medium behind each surface up to
    the first opaque one, weighted by the same factors (:meth:`SoftTarget.echoes`)."""
    if particles is None:
        particles = medium.draw(pulse_id)
    n_pulses, samples = len(pulse_id), beam.samples
    rays = n_pulses * samples
    sub_range = hits.range_m.astype(np.float64).reshape(n_pulses, samples)
    # Each layer's surface of each ray (inf and no object where it meets none), the
    # two-way factor of seeing through it, and where each ray's light stops.
    ranges, factors = [sub_range.ravel()], []
    objects = [hits.object_index]
    for b in behind:
        r, o = np.full(rays, np.inf), np.full(rays, -1, dtype=np.int32)
        r[b.rays], o[b.rays] = b.hits.range_m, b.hits.object_index
        ranges.append(r)
        objects.append(o)
    t_of, porous_of = medium.transmittance_of_object, medium.porous_of_object
    reach = ranges[0]
    if t_of is not None:
        law_of = medium.law_of_object
        for layer, o in enumerate(objects):
            t = t_of[o]
            if law_of is not None and results is not None:
                # Each surface's transmittance at its ray's incidence (its law), as
                # simulator.steps.echoes.layers_behind takes it.
                cos = np.ones(rays)
                if layer == 0:
                    cos[results.idx] = results.cos_incidence
                else:
                    front = behind[layer - 1]
                    cos[front.rays[front.results.idx]] = front.results.cos_incidence
                t = transmittance_at(t, law_of[o], cos)
            factors.append(np.where(porous_of[o], t, t * t) if porous_of is not None else t * t)
        reach = np.full(rays, np.inf)
        for r, o in zip(reversed(ranges), reversed(objects), strict=True):
            reach = np.where(np.isfinite(r) & (t_of[o] == 0.0), r, reach)
    extra: list[tuple[NDArray, ...]] = []
    cumulative = np.cumsum(beam.weights)
    weights = (beam.weights / cumulative[-1]).astype(np.float64)
    passed = [np.ones(rays) for _ in ranges]  # the sub-rays' one-way transmission
    for population, p in zip(medium.populations, particles, strict=True):
        k = np.minimum(np.searchsorted(cumulative, p.place * cumulative[-1]), samples - 1)
        ray = p.pulse * samples + k
        lit = (p.range_m < reach[ray]) & (p.range_m < model.range_max_m)
        p_pulse, p_range, k, ray = p.pulse[lit], p.range_m[lit], k[lit], ray[lit]
        share = np.minimum(
            np.pi / 4.0 * p.diameter_m[lit] ** 2 / beam_area_m2(p_range, medium.scanner), 1.0
        )
        # It removes Q times its cross-section of the sub-ray it lies in, out and back,
        # from the surfaces behind it.
        lost = np.minimum(population.efficiency * share / weights[k], 1.0)
        energy = population.reflectance * overlap(p_range, medium.scanner)
        for layer, r in enumerate(ranges):
            front = p_range < r[ray]
            np.multiply.at(passed[layer], ray[front], 1.0 - lost[front])
            if factors and layer < len(factors):
                behind_it = ~front & np.isfinite(r[ray])
                energy = np.where(behind_it, energy * factors[layer][ray], energy)
        seen = energy > 0.0  # the receiver sees none of those short of the overlap
        m = int(seen.sum())
        extra.append((
            p_pulse[seen], share[seen], p_range[seen], np.zeros(m), energy[seen], np.zeros(m),
            np.full(m, population.object_index, dtype=np.int32), np.ones(m), np.ones(m),
        ))  # fmt: skip
    w = beam.weights.astype(np.float64)
    shadow = [w[None, :] * (1.0 - passed[0].reshape(n_pulses, samples) ** 2)]
    for b, layer_passed in zip(behind, passed[1:], strict=True):
        shadow.append(w[b.rays % samples] * (1.0 - layer_passed[b.rays] ** 2))
    soft_behind = soft_two_way = None
    if factors:
        # The soft targets' light goes on through see-through surfaces too (also where
        # nothing lies behind them: then no layer behind).
        soft_behind = np.reshape(ranges[1:], (len(ranges) - 1, n_pulses, samples))
        soft_two_way = np.reshape(factors, (len(factors), n_pulses, samples))
    broad = [
        _soft_echoes(soft, sub_range, beam, pulse_id, model, soft_behind, soft_two_way)
        for soft in medium.soft
    ]
    return shadow, extra, broad


def _soft_echoes(
    soft: SoftTarget,
    sub_range: NDArray[np.float64],
    beam: BeamPattern,
    pulse_id: NDArray[np.uint64],
    model: ReturnModel,
    behind_m: NDArray[np.float64] | None = None,
    two_way: NDArray[np.float64] | None = None,
) -> tuple[Echoes, NDArray[np.uint64]]:
    """One echo a pulse: the soft target's waveform peak (:meth:`SoftTarget.echoes`, its
    beam going on through see-through surfaces when ``behind_m`` and ``two_way`` are
    given), as an echo of peak factor 1 whose energy gives that received peak; and its
    jitter keys."""
    weights = beam.weights.astype(np.float64)
    range_m, received = soft.echoes(sub_range, weights, behind_m, two_way)
    if model.extinction_relief is None:
        back = np.exp(2.0 * model.extinction_per_m * range_m)
    else:
        back = 1.0 / model.two_way_transmission(range_m)
    energy = received * range_m**2 * back
    n = len(pulse_id)
    zeros, ones = np.zeros(n), np.ones(n)
    echoes = Echoes(
        pulse=np.arange(n, dtype=np.int64), rank=np.zeros(n, dtype=np.int64), energy=energy,
        range_true_m=range_m, relief_m=zeros, spread_m=zeros, peak_factor=ones,
        object_index=np.full(n, soft.object_index, dtype=np.int32), energy_fraction=ones,
        cos_incidence=ones, cos_effective=ones,
    )  # fmt: skip
    with np.errstate(over="ignore"):
        key = physics.mix64(soft.stream + pulse_id)
    return echoes, key
