"""Light through see-through surfaces: the surfaces one layer behind another
(:class:`Behind`, :func:`layers_behind`), each surface's transmittance by its material's
``transmittance_law`` (:func:`transmittance_at`), and the factor the law puts on the
see-through surface's own echo (:func:`front_echo_factor`, :func:`with_front_laws`).

Numpy on both backends: the echoes of the layers are formed by
:mod:`simulator.steps.echoes` and :mod:`simulator.steps.see_through`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from ..chunk import CastChunk, Hits, Layer
from ..config.scene import GLASS_REFRACTIVE_INDEX, TRANSMITTANCE_LAWS
from ..physics import mix64
from .hits import HitResults, ReturnModel, in_window, received_peak, reported_intensity
from .receiver import received_energies
from .tables import Streams

__all__ = [
    "LAW_CONSTANT",
    "LAW_FRESNEL",
    "LAW_PATH_LENGTH",
    "Behind",
    "fresnel_pane_ratio",
    "fresnel_pane_reflectance_ratio",
    "front_echo_factor",
    "layers_behind",
    "transmittance_at",
    "with_front_laws",
]


@dataclass(frozen=True)
class Behind:
    """The surfaces one layer further behind see-through surfaces, of the rays that met
    one there.

    Attributes
    ----------
    rays : (M,) int64
        The cast rays that met a surface in this layer, increasing.
    results : HitResults
        The per-hit model of those surfaces (every field; ``idx`` counts the layer's rays).
    hits : Hits
        The surfaces, (M,); ranges from the rays' origins.
    two_way : (M,) float64
        The share of each ray's light that reaches its surface and comes back: the
        product of ``transmittance^2`` of the surfaces in front.
    """

    rays: NDArray[np.int64]
    results: HitResults
    hits: Hits
    two_way: NDArray[np.float64]


def layers_behind(
    hits: Hits,
    layers: Sequence[Layer],
    results: Sequence[HitResults],
    transmittance_of_object: NDArray[np.float64],
    porous_of_object: NDArray[np.bool_] | None = None,
    law_of_object: NDArray[np.int8] | None = None,
    first: HitResults | None = None,
) -> list[Behind]:
    """The surfaces behind see-through ones, a :class:`Behind` a layer, with the two-way
    transmittance in front of each: ``T^2`` a pane in front, ``T`` a porous layer (the
    gap model: the light comes back through the gap it went through), ``T`` at each
    ray's incidence by its material's ``transmittance_law`` (:func:`transmittance_at`).

    Parameters
    ----------
    hits : Hits
        The first surfaces of the cast rays.
    layers : sequence of Layer
        The surfaces behind them, a layer each (a layer's rays are among the last's).
    results : sequence of HitResults
        The per-hit model of each layer.
    transmittance_of_object : (objects + 1,) float64
        Each object's transmittance, and 0 for a miss (object -1).
    porous_of_object : (objects + 1,) bool, optional
        Which objects are porous layers (none when not given).
    law_of_object : (objects + 1,) int8, optional
        Each object's transmittance law (codes of
        :data:`simulator.config.scene.TRANSMITTANCE_LAWS`; all constant when not given);
        ``first`` is then the per-hit model of the first surfaces.
    first : HitResults, optional
    """
    out = []
    # by the last layer's rays (None in front of the first: 1 for every ray, not an array
    # of ones a cast ray)
    two_way: NDArray[np.float64] | None = None
    front_object, front_rays = hits.object_index, None
    front_results = first
    for layer, layer_results in zip(layers, results, strict=True):
        at = layer.rays if front_rays is None else np.searchsorted(front_rays, layer.rays)
        t = transmittance_of_object[front_object[at]]
        if law_of_object is not None and front_results is not None:
            cos_front = np.ones(len(front_object))
            cos_front[front_results.idx] = front_results.cos_incidence
            t = transmittance_at(t, law_of_object[front_object[at]], cos_front[at])
        before = np.ones(len(at)) if two_way is None else two_way[at]
        two_way = before * t * t  # a pane: T each way
        if porous_of_object is not None:  # a porous layer: T, through one gap both ways
            two_way = np.where(porous_of_object[front_object[at]], before * t, two_way)
        out.append(Behind(layer.rays, layer_results, layer.hits, two_way))
        front_object, front_rays = layer.hits.object_index, layer.rays
        front_results = layer_results
    return out


#: The codes of the transmittance laws (``law_of_object``).
LAW_CONSTANT, LAW_FRESNEL, LAW_PATH_LENGTH = (
    TRANSMITTANCE_LAWS.index(law) for law in ("constant", "fresnel", "path_length")
)


def _fresnel_pane(c: NDArray[np.float64], n: float) -> NDArray[np.float64]:
    """What an uncoated glass pane passes at incidence cosine ``c`` (in [0, 1]): two
    faces, unpolarised light, the reflections between the faces summed incoherently."""
    cos_t = np.sqrt(1.0 - (1.0 - c * c) / (n * n))
    r_s = ((c - n * cos_t) / (c + n * cos_t)) ** 2
    r_p = ((n * c - cos_t) / (n * c + cos_t)) ** 2
    return 0.5 * ((1.0 - r_s) / (1.0 + r_s) + (1.0 - r_p) / (1.0 + r_p))


def fresnel_pane_ratio(
    cos_incidence: NDArray[np.float64], n: float = GLASS_REFRACTIVE_INDEX
) -> NDArray[np.float64]:
    """A glass pane's transmittance at an incidence over that at normal incidence:
    ``T(theta) / T(0)``, (N,) float64 in [0, 1].

    Two faces, unpolarised light, the reflections between the faces summed incoherently:
    each polarisation passes ``(1 - R)^2 / (1 - R^2) = (1 - R) / (1 + R)`` of the light,
    ``R`` the Fresnel reflectance of one face (air to glass of index ``n``, the same
    glass to air), and the pane the mean of the two: 0.923 at normal incidence for
    ``n = 1.5``, 0 at grazing incidence (Born & Wolf, Principles of Optics, 1.5.3).
    """
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    r_0 = ((n - 1.0) / (n + 1.0)) ** 2
    return _fresnel_pane(c, n) / ((1.0 - r_0) / (1.0 + r_0))


def fresnel_pane_reflectance_ratio(
    cos_incidence: NDArray[np.float64], n: float = GLASS_REFRACTIVE_INDEX
) -> NDArray[np.float64]:
    """What a glass pane reflects at an incidence over what it reflects at normal
    incidence: ``R(theta) / R(0)``, ``R = 1 - T`` of :func:`fresnel_pane_ratio`'s pane
    (the mean of ``2 R_face / (1 + R_face)`` of the two polarisations), (N,) float64 in
    [1, 1 / R(0)]: 1 at normal incidence, 1.35 at 50 deg, 4.96 at 75, 13 (all the light)
    at grazing incidence, for ``n = 1.5`` (``R(0)`` =
    :data:`simulator.config.scene.GLASS_PANE_REFLECTANCE`)."""
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    r_0 = ((n - 1.0) / (n + 1.0)) ** 2
    return (1.0 - _fresnel_pane(c, n)) / (2.0 * r_0 / (1.0 + r_0))


def transmittance_at(
    transmittance: NDArray[np.float64],
    law: NDArray[np.int8],
    cos_incidence: NDArray[np.float64],
) -> NDArray[np.float64]:
    """Each surface's transmittance ``T(theta)`` at its ray's incidence, by its material's
    ``transmittance_law`` (codes of :data:`simulator.config.scene.TRANSMITTANCE_LAWS`):
    ``constant`` ``T``; ``fresnel`` ``T T_F(theta) / T_F(0)``
    (:func:`fresnel_pane_ratio`); ``path_length`` ``T^(1 / cos theta)``, the gap
    probability of a slanted path through a porous layer whose gap probability along
    its normal is ``T`` (Beer-Lambert: ``exp(-G Omega LAI / cos theta)``, Nilson 1971;
    Ni-Meister, Jupp and Dubayah 2001), 0 at grazing incidence.

    Parameters
    ----------
    transmittance : (N,) float64
        Each surface's transmittance at normal incidence.
    law : (N,) int8
        Each surface's law.
    cos_incidence : (N,) float64
        The cosine of each ray's incidence on its surface.

    Returns
    -------
    (N,) float64
    """
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    t = np.where(law == LAW_FRESNEL, transmittance * fresnel_pane_ratio(c), transmittance)
    slant = law == LAW_PATH_LENGTH
    if slant.any():
        t = np.where(slant, transmittance ** (1.0 / np.maximum(c, 1e-12)), t)
    return t


def front_echo_factor(
    transmittance: NDArray[np.float64],
    law: NDArray[np.int8],
    cos_incidence: NDArray[np.float64],
) -> NDArray[np.float64]:
    """The factor on each see-through surface's own echo at its ray's incidence, by its
    material's ``transmittance_law``, over the echo at normal incidence (the material's
    ``reflectance``, a porous layer's ``(1 - T) rho``): ``constant`` 1; ``fresnel``
    ``R(theta) / R(0)``, what the pane reflects (:func:`fresnel_pane_reflectance_ratio`);
    ``path_length`` ``(1 - T(theta)) / (1 - T)``, the share of the beam that meets the
    layer's elements on its slanted path (:func:`transmittance_at`; 1 where ``T`` is 0
    or 1). (N,) float64; exactly 1 at normal incidence for ``path_length``."""
    c = np.clip(np.asarray(cos_incidence, dtype=np.float64), 0.0, 1.0)
    out = np.where(law == LAW_FRESNEL, fresnel_pane_reflectance_ratio(c), 1.0)
    slant = (law == LAW_PATH_LENGTH) & (transmittance > 0.0) & (transmittance < 1.0)
    if slant.any():
        t = transmittance[slant]
        out[slant] = (1.0 - transmittance_at(t, law[slant], c[slant])) / (1.0 - t)
    return out


def with_front_laws(
    results: HitResults,
    chunk: CastChunk,
    law_of_object: NDArray[np.int8],
    transmittance_of_object: NDArray[np.float64],
    model: ReturnModel,
    streams: Streams,
) -> HitResults:
    """The per-hit model of a chunk's hits with each see-through surface's own echo at its
    incidence by its ``transmittance_law`` (:func:`front_echo_factor` on its
    backscatter; its detection and its intensity as the pulse's only return again, as
    :func:`simulator.steps.hits.evaluate_hits` makes them). Hits of ``constant`` surfaces keep
    every bit.

    Parameters
    ----------
    results : HitResults
        Of ``chunk``'s hits, with every field.
    chunk : CastChunk
        ``hits`` and ``start`` (ray ``i`` as pulse ``start + i``).
    law_of_object : (objects + 1,) int8
        Each object's law and a 0 (constant) for a miss.
    transmittance_of_object : (objects + 1,) float64
    model : ReturnModel
    streams : Streams
        The survey's streams: the jitter keys of the receiver's draws.

    Returns
    -------
    HitResults
    """
    obj = chunk.hits.object_index[results.idx]
    law = law_of_object[obj]
    m = np.flatnonzero(law != LAW_CONSTANT)
    if len(m) == 0:
        return results
    cos = results.cos_incidence[m]
    backscatter = results.backscatter.copy()
    backscatter[m] *= front_echo_factor(transmittance_of_object[obj[m]], law[m], cos)
    r_true = chunk.hits.range_m[results.idx[m]].astype(np.float64)
    range_m = results.range_m[m]
    keep, intensity = results.keep.copy(), results.intensity.copy()
    pulse = np.uint64(chunk.start) + results.idx[m].astype(np.uint64)
    with np.errstate(over="ignore"):
        key = mix64(streams.sensor_noise + pulse)  # the pulses' jitter keys
    # the receiver's overlap and speckle
    energy, energy_read = received_energies(model.receiver, key, r_true, backscatter[m])
    received = received_peak(energy, results.peak_factor[m], r_true, model)
    keep[m] = in_window(received, range_m, model, key)
    intensity[m] = reported_intensity(energy_read, model, range_m, pulse)
    return replace(results, backscatter=backscatter, keep=keep, intensity=intensity)
