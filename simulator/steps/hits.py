"""The per-hit model, step by step: from a ray's hit to a measured, detected return.

The numpy specification of the per-hit model (the numba kernel of the same name is
:func:`simulator.kernels.hits.evaluate_hits`). For each ray that hits (origin ``o``, unit
direction ``d``, range ``R``, normal ``n`` turned to face the sensor):

1. ``cos_incidence = |n . d|``.
2. Micro-slope: the surface is tilted by ``delta = micro_slope * place_normal(u, v)``
   where ``(u, v)`` are the hit point's two world coordinates across the normal's
   dominant axis; ``cos_effective = tilted_cos(cos_incidence, delta)``.
3. Backscatter ``b = minnaert_backscatter(reflectance, cos_effective, k)``.
4. In-plane divergence from the angle between the direction in which the surface
   recedes (``n`` minus its part along ``d``) and the beam's vertical axis.
5. Footprint range spread and the echo's peak factor.
6. Detection: ``b * peak * exp(-2 alpha R) / R^2`` (:func:`received_peak`) against the
   threshold of a ``reference_reflectance`` target at normal incidence at
   ``reference_range_m``.
7. Range: true range + place-fixed relief (rough-surface law) + per-pulse sensor
   noise, quantised, kept inside the range window (:func:`measured_range`,
   :func:`in_window`).
8. Intensity: calibrated reflectivity ``intensity_scale * b``, through the sensor's
   intensity response if it has one (a channel's gain, a range response:
   :class:`SensorResponse`), clipped, in the sensor's steps (:func:`reported_intensity`).

Steps 6 and 7 are shared with the echoes of footprint sub-rays (:mod:`simulator.steps.echoes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import BeamOptics
from ..chunk import CastChunk, positions_in, world_rays
from ..config import ScannerConfig
from ..constants import RETURN_MODES
from ..errors import ConfigError
from ..sensor.scanner import RasterPattern, ScanPattern, TablePattern, pattern_for
from .receiver import NO_RECEIVER, ReceiverLaws, received_energies, soft_detected
from .tables import SceneTables, Streams

__all__ = [
    "RANGE_FORMS",
    "HitResults",
    "ReturnModel",
    "SceneTables",
    "SensorResponse",
    "Streams",
    "evaluate_hits",
    "in_window",
    "measured_range",
    "range_response",
    "received_peak",
    "relief_at",
    "reported_intensity",
    "sensor_jitter_m",
]


#: The range forms of the intensity response, as the kernels number them.
RANGE_FORMS = {"none": 0, "power": 1, "velodyne_focal": 2}
#: The HDL-64E focal correction's constants as ros-drivers/velodyne's rawdata.cc has them
#: (velodyne_pointcloud/src/lib/rawdata.cc, ``unpack``): the focal distance is divided by
#: 13100 (the manual's 131 m in cm) and the raw range count by 65535.
VELODYNE_FOCAL_SCALE = 13100.0
VELODYNE_RANGE_COUNTS = 65535.0


@dataclass(frozen=True)
class SensorResponse:
    """The sensor's intensity response, as the specification and the kernels apply it
    (:func:`reported_intensity`), made from the scanner's ``intensity_response``.

    Attributes
    ----------
    gain_of_slot : (S,) float64
        The channel gain of pulse id ``p`` is ``gain_of_slot[(p // pulses_per_slot) % S]``
        (spinning and risley patterns: ``S`` channels, one pulse a slot; raster: a row a
        slot of ``columns`` pulses; table: a row of the table a slot; all ones without
        ``channel_gain``).
    pulses_per_slot : int
    range_form : int
        :data:`RANGE_FORMS`.
    range_params : (3,) float64
        ``power``: ``(reference_m, exponent, 0)``; ``velodyne_focal``: ``(focal_offset,
        focal_slope, raw_range_max_m)``, ``focal_offset = 256 (1 - focal_distance /
        131 m)^2`` and ``raw_range_max_m = 65535 * distance_resolution_m``.
    """

    gain_of_slot: NDArray[np.float64]
    pulses_per_slot: int
    range_form: int
    range_params: NDArray[np.float64]

    @classmethod
    def of(cls, scanner: ScannerConfig, pattern: ScanPattern | None = None) -> SensorResponse:
        """The response of a scanner with an ``intensity_response`` section (``pattern``:
        its scan pattern, made if not given, for a table pattern's channels)."""
        resp = scanner.intensity_response
        assert resp is not None
        pattern = pattern_for(scanner) if pattern is None else pattern
        channels = int(pattern.channels)
        gains = np.ones(channels) if resp.channel_gain is None else np.array(resp.channel_gain)
        if len(gains) != channels:
            raise ConfigError(
                scanner.name, "intensity_response.channel_gain",
                f"has {len(gains)} entries; expected {channels}, one per channel of the pattern",
            )  # fmt: skip
        per_slot = 1
        if isinstance(pattern, RasterPattern):
            per_slot = pattern.spec.columns  # a row of pixels a slot
        elif isinstance(pattern, TablePattern):
            gains = gains[pattern.ch]  # a row of the table a slot
        rng = resp.range
        params = np.zeros(3)
        if rng.form == "power":
            assert rng.reference_m is not None and rng.exponent is not None
            params[:2] = rng.reference_m, rng.exponent
        elif rng.form == "velodyne_focal":
            assert rng.focal_distance_m is not None and rng.focal_slope is not None
            scale = VELODYNE_FOCAL_SCALE / (100.0 if rng.convention == "manual" else 1.0)
            params[0] = 256.0 * (1.0 - rng.focal_distance_m / scale) ** 2
            params[1] = rng.focal_slope
            params[2] = VELODYNE_RANGE_COUNTS * rng.distance_resolution_m
        return cls(np.ascontiguousarray(gains, np.float64), per_slot, RANGE_FORMS[rng.form],
                   params)  # fmt: skip

    def gain(self, pulse_id: NDArray[np.uint64]) -> NDArray[np.float64]:
        """(H,) float64: the channel gain of each pulse id."""
        slot = np.asarray(pulse_id, np.uint64) // np.uint64(self.pulses_per_slot)
        return self.gain_of_slot[(slot % np.uint64(len(self.gain_of_slot))).astype(np.intp)]

    def kernel_args(self) -> tuple[bool, NDArray[np.float64], int, int, NDArray[np.float64]]:
        """The response as the kernels take it: ``(on, gain_of_slot, pulses_per_slot,
        range_form, range_params)``."""
        return (True, self.gain_of_slot, self.pulses_per_slot, self.range_form,
                self.range_params)  # fmt: skip


#: What the kernels take for a sensor without an intensity response (``on`` false).
NO_RESPONSE = (False, np.ones(1), 1, 0, np.zeros(3))


@dataclass(frozen=True)
class ReturnModel:
    """Sensor constants of the per-hit model and of echo selection, in SI units."""

    beta_h_rad: float
    beta_v_rad: float
    pulse_length_m: float
    threshold: float
    extinction_per_m: float
    range_min_m: float
    range_max_m: float
    range_resolution_m: float
    range_noise_m: float
    intensity_scale: float
    intensity_max: float
    #: Reported intensity is rounded to whole steps of this; 0: unquantised.
    intensity_step: float
    #: Echoes of one pulse closer than this merge: ``max(min_return_separation_m, pulse
    #: length)``.
    separation_m: float = 0.0
    return_mode: str = "strongest"
    #: Most returns reported for one pulse.
    returns_per_pulse: int = 1
    #: The sensor's intensity response; None: the reflectivity as it is.
    response: SensorResponse | None = field(default=None, compare=False)
    #: Weather with drawn particles (:mod:`simulator.steps.weather`): the one-way optical depth
    #: their share of ``extinction_per_m`` contributes out to ranges ``0, step, 2 step,
    #: ...`` (the last value beyond), given back because their shadows are drawn; None:
    #: the extinction is uniform. ``exp(-2 alpha R + 2 relief(R))`` is the transmission.
    extinction_relief: NDArray[np.float64] | None = field(default=None, compare=False)
    extinction_relief_step_m: float = 0.0
    #: The receiver's near-range overlap, speckle and soft threshold; None: none
    #: (:mod:`simulator.steps.receiver`).
    receiver: ReceiverLaws | None = field(default=None, compare=False)
    #: The scanner's beam optics the model was made with (:meth:`from_scanner`), which the
    #: weather reads; ``beta_h_rad``, ``beta_v_rad`` and ``pulse_length_m`` are its values.
    optics: BeamOptics | None = field(default=None, compare=False)

    @classmethod
    def from_scanner(
        cls,
        scanner: ScannerConfig,
        weather_extinction_per_m: float = 0.0,
        pattern: ScanPattern | None = None,
        optics: BeamOptics | None = None,
    ) -> ReturnModel:
        """Constants of a scanner, in clear air or with a weather's extinction added
        (``pattern``: the scanner's scan pattern, if made already: the intensity response's
        channels; ``optics``: its :class:`~simulator.beam.BeamOptics`, made if not given).

        The threshold is the received peak of a ``reference_reflectance`` target at
        normal incidence (backscatter = reflectance, peak factor 1) at
        ``reference_range_m``, the scanner's clear atmosphere included, so the
        datasheet statement holds; weather attenuates the echoes, not the threshold.
        """
        det = scanner.detection
        optics = BeamOptics.of(scanner) if optics is None else optics
        alpha = scanner.atmospheric_extinction_per_m
        threshold = (
            det.reference_reflectance
            * np.exp(-2.0 * alpha * det.reference_range_m)
            / det.reference_range_m**2
        )
        pulse_m = optics.pulse_length_m
        return cls(
            beta_h_rad=optics.divergence_h_rad,
            beta_v_rad=optics.divergence_v_rad,
            pulse_length_m=pulse_m,
            threshold=float(threshold),
            extinction_per_m=alpha + weather_extinction_per_m,
            range_min_m=scanner.range_min_m,
            range_max_m=scanner.range_max_m,
            range_resolution_m=scanner.range_resolution_m,
            range_noise_m=scanner.range_noise_m,
            intensity_scale=scanner.intensity_scale,
            intensity_max=scanner.intensity_max,
            intensity_step=scanner.intensity_step,
            separation_m=max(scanner.min_return_separation_m, pulse_m),
            return_mode=scanner.return_mode,
            returns_per_pulse=scanner.returns_per_pulse,
            response=(
                None if scanner.intensity_response is None else SensorResponse.of(scanner, pattern)
            ),
            receiver=ReceiverLaws.of(scanner),
            optics=optics,
        )

    @property
    def response_args(self) -> tuple[bool, NDArray[np.float64], int, int, NDArray[np.float64]]:
        """The intensity response as the kernels take it (:meth:`SensorResponse.kernel_args`;
        ``on`` false without one)."""
        return NO_RESPONSE if self.response is None else self.response.kernel_args()

    def kernel_args(self) -> tuple[Any, ...]:
        """The model as the kernels take it, one flat tuple of 26 (the kernels unpack it by
        position, slices of it in this order): ``(beta_h_rad, beta_v_rad, pulse_length_m,
        threshold, extinction, range_min_m, range_max_m, range_resolution_m,
        range_noise_m, intensity_scale, intensity_max, intensity_step, *response,
        separation_m, return_mode, returns_per_pulse, *receiver)``, with ``extinction``
        :attr:`extinction_args`, ``response`` the five of :attr:`response_args` (at 12-16),
        ``return_mode`` :attr:`return_mode_number` and ``receiver`` the six of
        :attr:`receiver_args` (at 20-25). Flat, not nested: numba's parallel loops cannot
        take a tuple within a tuple."""
        return (
            self.beta_h_rad, self.beta_v_rad, self.pulse_length_m, self.threshold,
            self.extinction_args, self.range_min_m, self.range_max_m, self.range_resolution_m,
            self.range_noise_m, self.intensity_scale, self.intensity_max, self.intensity_step,
            *self.response_args, self.separation_m, self.return_mode_number,
            self.returns_per_pulse, *self.receiver_args,
        )  # fmt: skip

    @property
    def detection_floor(self) -> float:
        """The least received peak an echo can have and be detected: the threshold, or
        with the receiver's laws :meth:`~simulator.steps.receiver.ReceiverLaws.floor_factor`
        of it (what the weather culls its particles and soft targets by)."""
        if self.receiver is None:
            return self.threshold
        return self.threshold * self.receiver.floor_factor()

    @property
    def receiver_args(self) -> tuple[float, ...]:
        """The receiver's laws as the kernels take them
        (:meth:`~simulator.steps.receiver.ReceiverLaws.kernel_args`; ``on`` 0 without)."""
        return NO_RECEIVER if self.receiver is None else self.receiver.kernel_args()

    @property
    def extinction_args(self) -> NDArray[np.float64]:
        """The extinction as the kernels take it: ``[alpha, step, relief...]`` (no relief
        after the first two when the extinction is uniform)."""
        relief = np.zeros(0) if self.extinction_relief is None else self.extinction_relief
        head = [self.extinction_per_m, self.extinction_relief_step_m]
        return np.ascontiguousarray(np.concatenate([head, relief]), dtype=np.float64)

    def two_way_transmission(self, range_m: NDArray[np.float64]) -> NDArray[np.float64]:
        """``exp(-2 alpha R)``, or ``exp(2 relief(R) - 2 alpha R)`` with a relief (linear
        between its samples, as the kernels interpolate it): (N,) float64."""
        r = np.asarray(range_m, dtype=np.float64)
        if self.extinction_relief is None:
            return np.exp(-2.0 * self.extinction_per_m * r)
        return np.exp(2.0 * relief_at(r, self.extinction_relief, self.extinction_relief_step_m)
                      - 2.0 * self.extinction_per_m * r)  # fmt: skip

    @property
    def return_mode_number(self) -> int:
        """The return mode as the echo kernel numbers it."""
        return RETURN_MODES[self.return_mode]

    def max_range_m(self, backscatter: float) -> float:
        """Farthest range at which a target of this backscatter and peak 1 is detected."""
        if self.extinction_per_m == 0.0:
            return float(np.sqrt(backscatter / self.threshold))
        # Solve b exp(-2 a R) / R^2 = S_th by bisection (monotone in R).
        lo, hi = 1e-6, 1e7
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            s = backscatter * float(self.two_way_transmission(np.array(mid))) / mid**2
            lo, hi = (mid, hi) if s >= self.threshold else (lo, mid)
        return lo


@dataclass
class HitResults:
    """The per-hit model's results for the rays of a chunk that hit something.

    Attributes
    ----------
    idx : (H,) int64
        Positions of the hits among the cast rays.
    keep : (H,) bool
        Detected and inside the range window.
    range_m : (H,) float64
        Measured range (relief, jitter unless left out, quantisation).
    intensity : (H,) float64
        Reported intensity (:func:`reported_intensity`) of the hit as its pulse's only
        return: with an intensity response, ray ``i`` is taken as pulse ``start + i`` (a
        chunk cast one ray a pulse, the only case that reports it; echoes of sub-rays and
        of surfaces behind report their own).
    cos_incidence, cos_effective, spread_m, peak_factor : (H,) float64
        Diagnostics (empty when the kernel was asked for the record's fields only).
        ``keep``, ``range_m``, ``intensity`` and ``peak_factor`` are empty when the kernel
        was asked for what echo formation reads only (``detect=False``).
    backscatter : (H,) float64
        Minnaert backscatter (before the intensity scale and clip).
    relief_m : (H,) float64
        The place-fixed relief offset of the range.
    """

    idx: NDArray[np.int64]
    keep: NDArray[np.bool_]
    range_m: NDArray[np.float64]
    intensity: NDArray[np.float64]
    cos_incidence: NDArray[np.float64]
    cos_effective: NDArray[np.float64]
    spread_m: NDArray[np.float64]
    peak_factor: NDArray[np.float64]
    backscatter: NDArray[np.float64]
    relief_m: NDArray[np.float64]
    #: The per-hit model of the surfaces behind see-through ones, a layer each (aligned
    #: with the chunk's ``behind``).
    behind: tuple[HitResults, ...] = ()

    def take_rays(self, rays: NDArray[np.intp]) -> HitResults:
        """The results of the hits among the cast rays ``rays`` (increasing), with
        ``idx`` counting positions in ``rays``."""
        pos, mask = positions_in(np.asarray(rays, dtype=np.int64), self.idx)
        rows = np.flatnonzero(mask)  # (an index array: nine gathers by it beat nine masks)
        n = len(self.idx)
        out = {
            f.name: (v[rows] if len(v) == n else v)
            for f in fields(self)
            if f.name != "behind"
            for v in [getattr(self, f.name)]
        }
        out["idx"] = pos[rows]
        return HitResults(**out, behind=tuple(b.take_rays(rays) for b in self.behind))


def _rowdot(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.einsum("ij,ij->i", a, b)


def _in_plane_coords(
    point_m: NDArray[np.float64], normal: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two world coordinates across the normal's dominant axis: (x, y) for ground,
    (y, z) for a wall facing x, (x, z) for a wall facing y."""
    axis = np.argmax(np.abs(normal), axis=1)
    u = np.where(axis == 0, point_m[:, 1], point_m[:, 0])
    v = np.where(axis == 2, point_m[:, 1], point_m[:, 2])
    return u, v


def range_response(
    raw: NDArray[np.float64], range_m: NDArray[np.float64], response: SensorResponse
) -> NDArray[np.float64]:
    """A reading ``raw`` through the sensor's range response at the measured range ``R``.

    * ``none``: ``raw``.
    * ``power`` (multiplicative): ``raw * (max(R, 1 um) / reference_m) ** exponent``.
    * ``velodyne_focal`` (additive, in the reported intensity's units: the driver adds it
      to the raw 8-bit count): ``raw + focal_slope * |focal_offset - 256 (1 - R /
      raw_range_max_m)^2|``, ``focal_offset = 256 (1 - focal_distance / 131 m)^2``,
      ``raw_range_max_m = 65535 * distance_resolution_m`` (131.07 m at 2 mm): the HDL-64E
      S2/S3 correction as ros-drivers/velodyne applies it
      (velodyne_pointcloud/src/lib/rawdata.cc@29abd0e1, ``RawData::unpack``; the range
      term there is the raw range count ``tmp.uint / 65535``).

    Parameters
    ----------
    raw : (H,) float64
        ``intensity_scale * b * channel_gain``, the reported intensity's units.
    range_m : (H,) float64
        Measured range, m.
    response : SensorResponse

    Returns
    -------
    (H,) float64
    """
    p = response.range_params
    if response.range_form == RANGE_FORMS["power"]:
        return raw * (np.maximum(range_m, 1e-6) / p[0]) ** p[1]
    if response.range_form == RANGE_FORMS["velodyne_focal"]:
        near = 1.0 - range_m / p[2]
        return raw + p[1] * np.abs(p[0] - 256.0 * (near * near))
    return raw


def reported_intensity(
    backscatter: NDArray[np.float64],
    model: ReturnModel,
    range_m: NDArray[np.float64] | None = None,
    pulse_id: NDArray[np.uint64] | None = None,
) -> NDArray[np.float64]:
    """The intensity the sensor reports.

    Without an intensity response: ``intensity_scale * b`` clipped to ``[0,
    intensity_max]``, then rounded to whole ``intensity_step``s (half to even) and held at
    the maximum. With one (``model.response``), in this order: the reflectivity times the
    channel's gain, ``raw = intensity_scale * b * channel_gain[channel of the pulse]``;
    the range response at the measured range, ``f(R, raw)`` (:func:`range_response`:
    a factor for ``power``, an added term for ``velodyne_focal``); then the same clip and
    rounding. Detection does not see the response (it is the receiver's reading, not the
    received power).

    Parameters
    ----------
    backscatter : (H,) float64
        Minnaert backscatter (or an echo's energy), dimensionless.
    model : ReturnModel
    range_m : (H,) float64, optional
        Measured range, m (needed with a response).
    pulse_id : (H,) uint64, optional
        Global pulse id of each, which gives its channel (needed with a response).

    Returns
    -------
    (H,) float64
    """
    response = model.response
    if response is None:
        value = model.intensity_scale * backscatter
    else:
        assert range_m is not None and pulse_id is not None, "a response needs R and pulses"
        raw = model.intensity_scale * backscatter * response.gain(pulse_id)
        value = range_response(raw, range_m, response)
    value = np.clip(value, 0.0, model.intensity_max)
    step = model.intensity_step
    if step > 0.0:
        value = np.minimum(np.rint(value / step) * step, model.intensity_max)
    return value


def received_peak(
    backscatter: NDArray[np.float64],
    peak_factor: NDArray[np.float64],
    range_true_m: NDArray[np.float64],
    model: ReturnModel,
) -> NDArray[np.float64]:
    """Received peak of an extended target, ``b * peak * exp(-2 alpha R) / R^2`` (R >= 1 um).

    Parameters
    ----------
    backscatter, peak_factor, range_true_m : (H,) float64

    Returns
    -------
    (H,) float64
        Compared with ``model.threshold`` for detection.
    """
    r_safe = np.maximum(range_true_m, 1e-6)
    received = backscatter * peak_factor / (r_safe * r_safe)
    if model.extinction_per_m > 0.0:
        received *= model.two_way_transmission(range_true_m)
    return received


def relief_at(
    range_m: NDArray[np.float64], relief: NDArray[np.float64], step_m: float
) -> NDArray[np.float64]:
    """A table sampled at ``0, step, 2 step, ...`` at some ranges, linear between samples
    and its last value beyond (the arithmetic of the kernels' ``relief_at``): (N,) float64."""
    x = np.minimum(np.asarray(range_m, dtype=np.float64) / step_m, len(relief) - 1.0)
    i = np.minimum(x.astype(np.intp), len(relief) - 2)
    between = relief[i] + (x - i) * (relief[i + 1] - relief[i])
    return np.where(x >= len(relief) - 1.0, relief[-1], between)


def sensor_jitter_m(key: NDArray[np.uint64], model: ReturnModel) -> NDArray[np.float64]:
    """Sensor range jitter, ``range_noise_m * hash_normal(key)``: (H,) float64, m."""
    return model.range_noise_m * physics.hash_normal(key)


def measured_range(
    range_true_m: NDArray[np.float64],
    relief_m: NDArray[np.float64],
    jitter_m: NDArray[np.float64] | float,
    model: ReturnModel,
) -> NDArray[np.float64]:
    """True range + relief + jitter, quantised to ``range_resolution_m``: (H,) float64, m."""
    range_meas = range_true_m + relief_m + jitter_m
    if model.range_resolution_m > 0.0:
        range_meas = np.round(range_meas / model.range_resolution_m) * model.range_resolution_m
    return range_meas


def in_window(
    received: NDArray[np.float64],
    range_m: NDArray[np.float64],
    model: ReturnModel,
    jitter_key: NDArray[np.uint64] | None = None,
) -> NDArray[np.bool_]:
    """(H,) bool: detected (``received >= threshold``, or the receiver's soft threshold
    drawn from each echo's ``jitter_key``: :func:`simulator.steps.receiver.soft_detected`)
    and inside the range window."""
    if model.receiver is None or jitter_key is None:
        assert model.receiver is None or model.receiver.noise_per_threshold == 0.0, (
            "a soft threshold draws from the echoes' jitter keys"
        )
        detected = received >= model.threshold
    else:
        detected = soft_detected(model.receiver, received, model.threshold, jitter_key)
    return detected & (range_m >= model.range_min_m) & (range_m <= model.range_max_m)


def evaluate_hits(
    chunk: CastChunk,
    tables: SceneTables,
    model: ReturnModel,
    streams: Streams,
    *,
    full: bool = True,
    jitter: bool = True,
    detect: bool = True,
) -> HitResults:
    """Apply the per-hit model to every hit of a chunk's cast rays (the specification).

    Parameters
    ----------
    chunk : CastChunk
        ``cast`` (the rays as cast: the geometry's truth), ``shift_m``, ``cast_up`` (the
        sensor's up axis at each cast ray, the beam's vertical reference), ``hits`` and
        ``start`` (cast ray ``i`` of a single-ray chunk is pulse ``start + i``).
    tables : SceneTables
    model : ReturnModel
    streams : Streams
    full : bool
        Ignored here (every field is computed); the kernel fills only ``keep``,
        ``range_m`` and ``intensity`` when false.
    jitter : bool
        Add the per-pulse sensor jitter to ``range_m`` (and so to ``keep``). Footprint
        sub-rays leave it out: their echoes are jittered once formed.
    detect : bool
        Ignored here; the kernel leaves ``keep``, ``range_m``, ``intensity`` and
        ``peak_factor`` empty when false (footprint sub-rays: echo formation reads none
        of them, their echoes are detected once formed).

    Returns
    -------
    HitResults
    """
    del full, detect
    rays, hits = chunk.cast, chunk.hits
    origins_m, directions = world_rays(rays, chunk.shift_m)
    idx = np.flatnonzero(hits.hit)
    d = directions[idx]
    range_true = hits.range_m[idx].astype(np.float64)
    rows, material_of = tables.material_rows(hits)
    mat = material_of[rows[idx]]  # (the object's material, or its face's own row)
    mt = tables.materials
    hit_normal = hits.normal[idx].astype(np.float64)

    # 1. incidence, with the normal turned to face the sensor
    n_dot_d = _rowdot(hit_normal, d)
    normal = hit_normal * np.where(n_dot_d > 0.0, -1.0, 1.0)[:, None]
    cos_inc = np.minimum(np.abs(n_dot_d), 1.0)

    # 2. micro-slope tilt, fixed to the place (with the relief's normal: one pair a place)
    point = origins_m[idx] + range_true[:, None] * d
    u, v = _in_plane_coords(point, normal)
    cell = mt.micro_slope_cell_m[mat]
    slope_z, relief_z = physics.place_normal_pair(u, v, cell, streams.micro_slope)
    delta = mt.micro_slope_rad[mat] * slope_z
    cos_eff = physics.tilted_cos(cos_inc, delta)

    # 3. backscatter
    backscatter = physics.minnaert_backscatter(mt.reflectance[mat], cos_eff, mt.minnaert_k[mat])

    # 4. in-plane divergence: angle between the receding direction and the beam's vertical
    recede = normal + cos_inc[:, None] * d  # n minus its part along d (n . d = -cos_inc)
    sensor_up = chunk.cast_up
    up = np.broadcast_to(sensor_up, d.shape) if len(sensor_up) == 1 else sensor_up[idx]
    beam_v = up - _rowdot(up, d)[:, None] * d
    recede_len = np.linalg.norm(recede, axis=1)
    beam_v_len = np.linalg.norm(beam_v, axis=1)
    ok = (recede_len > 1e-12) & (beam_v_len > 1e-12)
    cos_psi = np.ones_like(recede_len)
    np.divide(np.abs(_rowdot(recede, beam_v)), recede_len * beam_v_len, out=cos_psi, where=ok)
    beta = physics.in_plane_divergence(model.beta_h_rad, model.beta_v_rad, cos_psi)

    # 5. footprint spread and peak factor
    spread = physics.footprint_range_spread_m(range_true, cos_eff, beta)
    peak = physics.pulse_peak_factor(model.pulse_length_m, spread)

    # 6. detection, through the receiver's overlap and speckle where it has them
    pulse_of_ray = np.uint64(chunk.start) + idx.astype(np.uint64)
    with np.errstate(over="ignore"):
        key = physics.mix64(streams.sensor_noise + pulse_of_ray)  # the pulse's jitter key
    energy, energy_read = received_energies(model.receiver, key, range_true, backscatter)
    received = received_peak(energy, peak, range_true, model)

    # 7. measured range: place-fixed relief, per-pulse jitter, quantisation, window
    relief = physics.rough_range_sigma_m(mt.roughness_m[mat], cos_eff) * relief_z
    noise = sensor_jitter_m(key, model) if jitter else 0.0
    range_meas = measured_range(range_true, relief, noise, model)
    keep = in_window(received, range_meas, model, key)

    # 8. intensity (calibrated reflectivity, an energy measure: no range, no peak factor),
    # through the sensor's response as the pulse's only return (ray i is pulse start + i)
    intensity = reported_intensity(energy_read, model, range_meas, pulse_of_ray)
    return HitResults(
        idx, keep, range_meas, intensity, cos_inc, cos_eff, spread, peak, backscatter, relief
    )
