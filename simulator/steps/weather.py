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


2. **Soft targets** (fog, dust) backscatter all along the beam; their echo is the peak of
   the received waveform (:mod:`simulator.steps.soft_targets`).

3. **Particles** (rain, snow): each pulse meets the drops or flakes its beam's volume
   holds, which shadow the beam and give echoes of their own
   (:mod:`simulator.steps.particles`).

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
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..beam import BeamOptics, BeamPattern
from ..chunk import Hits
from ..config import ScannerConfig, Weather
from ..constants import (
    DUST_LIDAR_RATIO_SR,
    FOG_BACKSCATTER_MOR,
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
from .echoes import Echoes, of_pulses, surface_returns
from .hits import HitResults, ReturnModel, Streams
from .particles import Distribution, Particles, Population, count_particles, draw_particles
from .returns import Returns
from .soft_targets import SoftTarget, WaveformPeaks, peak_echoes
from .transmittance import Behind, transmittance_at

__all__ = [
    "MEDIUM_BLOCK_PULSES",
    "MEDIUM_KINDS",
    "MEDIUM_LABELS",
    "SOFT_BLOCK_PULSES",
    "Medium",
    "haze_wavelength_factor",
    "medium_entries",
    "medium_returns",
    "particle_extinction_per_m",
    "weather_extinction_per_m",
]


def __getattr__(name: str) -> Any:
    """``beam_area_m2(range_m, scanner)`` and ``overlap(range_m, scanner)``, which moved to
    :class:`~simulator.beam.BeamOptics` in release 0.2 (``BeamOptics.of(scanner).area_m2``,
    ``.overlap``): for one release, with a DeprecationWarning."""
    moved = {"beam_area_m2": "area_m2", "overlap": "overlap"}
    if name not in moved:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{__name__}.{name}(range_m, scanner) has moved to "
                  f"simulator.beam.BeamOptics.of(scanner).{moved[name]}(range_m); the old "
                  "name goes in the next release", DeprecationWarning, stacklevel=2)  # fmt: skip

    def old(range_m: NDArray[np.float64], scanner: ScannerConfig) -> NDArray[np.float64]:
        return getattr(BeamOptics.of(scanner), moved[name])(range_m)  # type: ignore[no-any-return]

    return old


#: The kinds of medium, in the order of their object ids after the scene's objects.
MEDIUM_KINDS = ("fog", "dust", "rain", "snow")


#: The label each kind's points get (SemanticKITTI ids; 110 is WADS' falling snow).
MEDIUM_LABELS = {"fog": "outlier", "dust": "outlier", "rain": "outlier", "snow": "falling-snow"}


#: The weather's pulses of a chunk are computed this many at a time (each pulse's returns
#: are its own), so that a snowfall's particles and echoes hold tens of megabytes, not
#: gigabytes.
MEDIUM_BLOCK_PULSES = 16384


#: The same for a medium without particles (fog, dust alone): a pulse's entries are then
#: its surfaces and the soft targets' peaks, a few values, so a default chunk is one block.
SOFT_BLOCK_PULSES = 1 << 18


#: Samples of the hard targets' extinction relief (uniform in range, to the maximum).
_RELIEF_TABLE = 2048


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


def _with_relief(model: ReturnModel, populations: Sequence[Population]) -> ReturnModel:
    """``model`` with the drawn particles' optical depth as its extinction relief, on
    :data:`_RELIEF_TABLE` ranges from 0 to the maximum range."""
    step = model.range_max_m / (_RELIEF_TABLE - 1)
    r = step * np.arange(_RELIEF_TABLE)
    relief = sum(p.drawn_depth(r) for p in populations)
    return replace(model, extinction_relief=np.asarray(relief, dtype=np.float64),
                   extinction_relief_step_m=float(step))  # fmt: skip


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
    optics : BeamOptics
        The scanner's beam (the particles' share of it, the overlap).
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
        Each object's transmittance law (:func:`simulator.steps.transmittance.transmittance_at`);
        None: all constant.
    """

    extinction_per_m: float
    soft: tuple[SoftTarget, ...]
    populations: tuple[Population, ...]
    first_object: int
    optics: BeamOptics
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
        any is see-through), for survey seed ``seed``. The beam's optics are the model's
        (:attr:`ReturnModel.optics`), made from the scanner where it has none."""

        optics = BeamOptics.of(scanner) if model.optics is None else model.optics

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
                        kind, law(fall.rate_mm_h), rho, fall.extinction_efficiency, optics,
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
                    soft.append(SoftTarget.of(kind, beta, optics, model, obj(kind), seed_k))
        alpha = weather_extinction_per_m(weather, scanner.wavelength_nm)
        return cls(alpha, tuple(soft), tuple(populations), objects, optics, model,
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

    def touches_every_pulse(self, threshold: float) -> bool:
        """Whether the weather may change every pulse beyond the extinction: a soft
        target's peak can be detected (``threshold``: the least detected received peak),
        so that no pulse keeps the returns of its first surfaces (as in fog)."""
        return any(s.peak_received >= threshold for s in self.soft)

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
        if self.touches_every_pulse(threshold):
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
    waveform_peaks: WaveformPeaks | None = None,
) -> tuple[list[NDArray[np.float64]], list[tuple[NDArray, ...]], list[tuple[Echoes, NDArray]]]:
    """What the weather adds to :func:`simulator.steps.echoes.surface_returns` for
    :func:`medium_returns`: the share of each sub-ray's light the particles in front of a
    surface take (two passes; a (P, S) array for the first surfaces, then one a row of
    each layer of ``behind``), the particles' own entries (its ``extra``) and each soft
    target's waveform-peak echo (its ``broad``, :func:`simulator.steps.soft_targets.peak_echoes`).

    A particle is lit when it lies in front of the first opaque surface its sub-ray meets
    (the light goes on through see-through ones), and its echo is seen through the
    see-through surfaces in front of it: ``T^2`` a pane, ``T`` a porous layer (the gap
    model), as the surfaces behind them are (``T`` by the material's
    ``transmittance_law`` at each ray's incidence, from ``results``, the first surfaces'
    per-hit model, and the layers'). A soft target's light goes on through
    see-through surfaces likewise: its waveform takes the medium behind each surface up to
    the first opaque one, weighted by the same factors (:meth:`SoftTarget.echoes`, or
    ``waveform_peaks`` with its arguments: a backend's kernel of the same values)."""
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
                # simulator.steps.transmittance.layers_behind takes it.
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
            np.pi / 4.0 * p.diameter_m[lit] ** 2 / medium.optics.area_m2(p_range), 1.0
        )
        # It removes Q times its cross-section of the sub-ray it lies in, out and back,
        # from the surfaces behind it.
        lost = np.minimum(population.efficiency * share / weights[k], 1.0)
        energy = population.reflectance * medium.optics.overlap(p_range)
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
        peak_echoes(
            soft, sub_range, beam, pulse_id, model, soft_behind, soft_two_way, waveform_peaks
        )
        for soft in medium.soft
    ]
    return shadow, extra, broad
