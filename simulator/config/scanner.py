"""Scanner models: the scan pattern's section and the sensor's radiometry."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ..constants import RETURNS_PER_PULSE, RING_COUNTS
from .base import FiniteFloat, Model, NonNegFloat, PositiveFloat
from .ego import Ego

__all__ = [
    "Channels",
    "Detection",
    "Divergence",
    "IntensityResponse",
    "OscillatingSpec",
    "Prism",
    "RangeResponse",
    "RasterSpec",
    "Receiver",
    "RisleySpec",
    "ScannerConfig",
    "TableSpec",
]


class Channels(Model):
    """Per-channel tables of a spinning scanner, ring 0 first."""

    elevation_deg: Annotated[list[FiniteFloat], Field(min_length=1)]
    azimuth_offset_deg: list[FiniteFloat] | None = None
    firing_offset_us: list[NonNegFloat] | None = None

    @field_validator("elevation_deg")
    @classmethod
    def _elevations_in_range(cls, v: list[float]) -> list[float]:
        for e in v:
            if not -90.0 <= e <= 90.0:
                raise ValueError(f"elevation {e} deg is outside [-90, 90]")
        return v

    @model_validator(mode="after")
    def _same_lengths(self) -> Channels:
        n = len(self.elevation_deg)
        for key in ("azimuth_offset_deg", "firing_offset_us"):
            table = getattr(self, key)
            if table is not None and len(table) != n:
                raise ValueError(
                    f"{key} has {len(table)} entries; expected {n}, one per elevation_deg entry"
                )
        return self

    @property
    def count(self) -> int:
        """Number of channels."""
        return len(self.elevation_deg)


#: The keys each range form takes (required, then optional).
_RANGE_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "none": ((), ()),
    "power": (("reference_m", "exponent"), ()),
    "velodyne_focal": (
        ("focal_distance_m", "focal_slope"),
        ("distance_resolution_m", "convention"),
    ),
}


class RangeResponse(Model):
    """The sensor's range response of the reported intensity (``intensity_response.range``).

    ``none``: no range response. ``power``: a gain ``(R / reference_m) ** exponent``
    (multiplicative). ``velodyne_focal``: the HDL-64E S2/S3 focal correction as the
    ros-drivers velodyne driver adds it to the raw intensity count (additive; see
    :func:`simulator.steps.hits.range_response`).
    """

    form: Literal["none", "power", "velodyne_focal"] = "none"
    reference_m: PositiveFloat | None = None
    exponent: FiniteFloat | None = None
    #: The laser's focal distance, m (the calibration's ``focal_distance``).
    focal_distance_m: NonNegFloat | None = None
    #: The calibration's ``focal_slope``: intensity counts per unit of the focal term.
    focal_slope: FiniteFloat | None = None
    #: The raw range count's step (the calibration's ``distance_resolution``; 2 mm on the
    #: HDL-64E): the driver's range term uses ``R / (65535 * distance_resolution_m)``.
    distance_resolution_m: PositiveFloat = 0.002
    #: ``manual``: ``focal_distance_m`` in metres against the manual's 131 m (13100 cm);
    #: ``ros_driver``: the number divided by 13100 as rawdata.cc does with the calibration
    #: YAML's metres (ros-drivers/velodyne issue #499), to reproduce that driver's output.
    convention: Literal["manual", "ros_driver"] = "manual"

    @model_validator(mode="after")
    def _keys_of_form(self) -> RangeResponse:
        required, optional = _RANGE_KEYS[self.form]
        missing = [k for k in required if getattr(self, k) is None]
        if missing:
            raise ValueError(f"range form {self.form} needs {', '.join(missing)}")
        given = self.model_fields_set - {"form", *required, *optional}
        if given:
            raise ValueError(f"{', '.join(sorted(given))} does not apply to range form {self.form}")
        return self


class IntensityResponse(Model):
    """The sensor's intensity response, applied to the per-hit model's reflectivity
    before clipping and rounding (:func:`simulator.steps.hits.reported_intensity`).

    ``channel_gain`` multiplies each channel's (ring's) reading: one entry per channel of
    the pattern (spinning: per channel; raster: per row; risley: per emitter; table: per
    channel index of the table; oscillating: one). ``range`` is the range response.
    """

    channel_gain: Annotated[list[PositiveFloat], Field(min_length=1)] | None = None
    range: RangeResponse = Field(default_factory=RangeResponse)


class Divergence(Model):
    """Full-angle beam divergence of the elliptical beam, mrad."""

    horizontal: NonNegFloat
    vertical: NonNegFloat


class Detection(Model):
    """Detection threshold as a datasheet states it.

    A target of ``reference_reflectance`` at normal incidence is just detected at
    ``reference_range_m``.
    """

    reference_range_m: PositiveFloat
    reference_reflectance: PositiveFloat


class Receiver(Model):
    """The receiver's laws beyond the hard threshold; each is off unless given, and a
    scanner without the section scans exactly as before (:mod:`simulator.steps.receiver`).

    ``near_overlap``: the receiver's near-field overlap (the same ``[start, full]`` the
    weather's returns see: ``overlap_m``, or where the receiver optics' field of view meets
    the beam, :attr:`ScannerConfig.overlap_range_m`), a linear rise from 0 to 1, applied
    to the energy of surface echoes for ``detection``, and to their reported intensity
    as well for ``detection_and_intensity`` (a sensor whose reflectivity calibration
    assumes the full overlap). ``speckle_cells``: the number ``M`` of speckle cells the
    receiver averages; each echo's energy is multiplied by a Gamma(M, 1/M) number, mean
    1, relative spread ``1/sqrt(M)`` (Goodman 1976). ``threshold_width``: the receiver
    noise at the peak, as a fraction of the threshold; an echo is detected when its
    peak plus that Gaussian noise reaches the threshold, so the detection probability is
    ``Phi((S / S_th - 1) / width)`` (a threshold receiver in Gaussian noise, North 1963;
    Skolnik, *Introduction to Radar Systems*, 3rd ed., sec. 2.5)."""

    near_overlap: Literal["off", "detection", "detection_and_intensity"] = "off"
    speckle_cells: Annotated[float, Field(ge=1, le=1e6, allow_inf_nan=False)] | None = None
    threshold_width: Annotated[float, Field(gt=0, le=10, allow_inf_nan=False)] | None = None

    @property
    def on(self) -> bool:
        """Whether any law is on."""
        return (
            self.near_overlap != "off"
            or self.speckle_cells is not None
            or self.threshold_width is not None
        )


class Prism(Model):
    """One rotating wedge prism of a Risley scanner: one flat face square to the optical
    axis and one face tilted by ``wedge_deg``, the beam meeting ``tilted_face`` first
    (``entry``) or last (``exit``)."""

    rotation_hz: FiniteFloat = Field(description="signed: the sign is the turning sense")
    wedge_deg: Annotated[float, Field(gt=0, lt=60, allow_inf_nan=False)]
    phase_deg: FiniteFloat = 0.0
    tilted_face: Literal["entry", "exit"] = "exit"
    #: This prism's glass; the ``risley`` section's ``refractive_index`` if not given.
    refractive_index: Annotated[float, Field(gt=1, lt=4, allow_inf_nan=False)] | None = None


class RisleySpec(Model):
    """Rotating prisms (Livox): every shot is refracted through the prisms' current angles."""

    prisms: Annotated[list[Prism], Field(min_length=1, max_length=3)]
    refractive_index: Annotated[float, Field(gt=1, lt=4, allow_inf_nan=False)]
    shot_rate_hz: Annotated[float, Field(gt=0, le=1e8, allow_inf_nan=False)] = Field(
        description="shots per second per channel"
    )
    #: Per channel (emitter): a small (azimuth, elevation) tilt before the prisms, deg.
    channel_offsets_deg: Annotated[
        list[Annotated[list[FiniteFloat], Field(min_length=2, max_length=2)]], Field(min_length=1)
    ] = Field(default_factory=lambda: [[0.0, 0.0]])
    frame_period_s: Annotated[float, Field(gt=1e-6, le=3600, allow_inf_nan=False)] = 0.1
    #: ``exact``: vector Snell's law at both faces of every prism; ``paraxial``: the thin-prism
    #: model, each prism deviating the ray by (n - 1) x wedge towards its current angle.
    refraction: Literal["exact", "paraxial"] = "exact"


class OscillatingSpec(Model):
    """An airborne line scanner: a mirror swings the beam across track, below the sensor."""

    pulse_rate_hz: Annotated[float, Field(gt=0, le=1e8, allow_inf_nan=False)]
    scan_rate_hz: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)] = Field(
        description="full mirror cycles per second"
    )
    half_angle_deg: Annotated[float, Field(gt=0, lt=90, allow_inf_nan=False)]
    waveform: Literal["sine", "triangle", "sawtooth"] = "sine"


class RasterSpec(Model):
    """A MEMS or solid-state grid, scanned line by line."""

    rows: Annotated[int, Field(ge=1, le=4096)]
    columns: Annotated[int, Field(ge=1, le=8192)]
    horizontal_fov_deg: Annotated[float, Field(gt=0, le=360, allow_inf_nan=False)]
    vertical_fov_deg: Annotated[float, Field(gt=0, le=180, allow_inf_nan=False)]
    frame_rate_hz: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)]
    boustrophedon: bool = Field(default=False, description="alternate lines run backwards")


class TableSpec(Model):
    """A recorded pattern replayed: a CSV (or ``.csv.gz``) of ``time_s, azimuth_deg,
    elevation_deg[, channel]``."""

    file: str
    period_s: PositiveFloat | None = None


class ScannerConfig(Model):
    """A scanner: the pattern that aims its pulses, and the sensor's radiometry.

    ``pattern: spinning`` takes ``rotation_hz``, ``firings_per_revolution`` and
    ``channels``; the other patterns take a section of their own (``risley``,
    ``oscillating``, ``raster``, ``table``).
    """

    name: str
    pattern: Literal["spinning", "risley", "oscillating", "raster", "table"] = "spinning"
    description: str = ""
    rotation_hz: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] | None = None
    rotation: Literal["clockwise", "counter_clockwise"] = "clockwise"
    start_azimuth_deg: FiniteFloat = 0.0
    firings_per_revolution: Annotated[int, Field(gt=0, le=1_000_000)] | None = None
    #: Which azimuth a channel's pulse takes (spinning pattern): ``physical``, the head's at
    #: the moment the channel fires (its firing offset later than the firing's start), which
    #: is where the beam went; ``block``, the head's at the firing's start, as a decoder that
    #: leaves the rotation during the firing delay out reports the points (the decoded
    #: cloud, e.g. tier4/nebula's Hesai decoder). Firing times are the same either way.
    firing_azimuth: Literal["physical", "block"] = "physical"
    channels: Channels | None = None
    risley: RisleySpec | None = None
    oscillating: OscillatingSpec | None = None
    raster: RasterSpec | None = None
    table: TableSpec | None = None
    beam_origin_offset_m: NonNegFloat = 0.0
    #: Where ``range_m`` is measured from: the beam's exit point (``beam_origin``: the ray's
    #: start, ``beam_origin_offset_m`` off the spin axis) or the lidar origin on the axis
    #: (``lidar_origin``: ``beam_origin_offset_m`` more, the way Ouster reports RANGE, whose
    #: points are ``beam origin + (RANGE - offset) * direction``). ``xyz`` is the same either way.
    range_reference: Literal["beam_origin", "lidar_origin"] = "beam_origin"
    range_min_m: NonNegFloat
    range_max_m: Annotated[float, Field(gt=0, le=1e5, allow_inf_nan=False)]
    range_resolution_m: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
    divergence_mrad: Divergence
    pulse_length_ns: NonNegFloat
    wavelength_nm: PositiveFloat | None = None
    detection: Detection
    atmospheric_extinction_per_m: NonNegFloat = 0.0
    #: Diameter of the beam where it leaves the sensor (its footprint is this plus range
    #: times divergence); what a raindrop or flake near the sensor is compared with.
    beam_exit_diameter_mm: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 10.0
    #: The receiver's near-field overlap ``[start, full]``, m: it sees none of the light
    #: scattered closer than ``start`` and all of it beyond ``full``, linearly between.
    #: Applied to the returns of the medium (fog, rain, snow, dust), which fills every
    #: range. Given, it replaces the geometric overlap of the receiver's optics below.
    overlap_m: Annotated[list[NonNegFloat], Field(min_length=2, max_length=2)] | None = None
    #: The receiver's optics, from which the geometric overlap follows when ``overlap_m``
    #: is not given (:meth:`simulator.beam.BeamOptics.overlap`; Rasshofer et al. 2011, Fig. 2, as
    #: Hahner et al. 2021 state it): the receiving lens' clear aperture, mm; its full-angle
    #: field of view, mrad (it must exceed the beam's divergences); the distance between
    #: the transmitting and the receiving optical axes (parallel), mm. Defaults: a typical
    #: biaxial spinning sensor (ASSUMPTION: no vendor publishes them): a 20 mm lens, a
    #: 16 mrad field of view (a 0.8 mm detector behind a 50 mm focal length), 25 mm apart.
    receiver_aperture_mm: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 20.0
    receiver_fov_mrad: Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)] = 16.0
    axis_separation_mm: Annotated[float, Field(ge=0, le=1000, allow_inf_nan=False)] = 25.0
    range_noise_m: NonNegFloat
    intensity_scale: PositiveFloat
    #: The top reading; LAS stores intensity as uint16, so at most 65535.
    intensity_max: Annotated[float, Field(gt=0, le=65535, allow_inf_nan=False)] = 255.0
    #: The sensor reports intensity in whole steps of this (1: an integer reading such as
    #: uint8 reflectivity); 0 reports it unquantised.
    intensity_step: Annotated[float, Field(ge=0, le=65535, allow_inf_nan=False)] = 0.0
    #: The sensor's intensity response (per-channel gain, range response); absent: none.
    intensity_response: IntensityResponse | None = None
    #: The receiver's near-range overlap, speckle and soft threshold; absent: none.
    receiver: Receiver = Field(default_factory=Receiver)
    #: Sub-rays per pulse over the elliptical Gaussian beam (1, 7, 19, 37, 61: hexagonal rings).
    beam_samples: Annotated[int, Field(ge=1)] = 1
    #: ``full`` casts every sub-ray of every pulse (the reference); ``adaptive`` casts them
    #: only where a pulse's footprint may cross an edge or meet a second surface, and
    #: reports the single-ray result elsewhere (:mod:`simulator.steps.footprint`).
    beam_sampling: Literal["full", "adaptive"] = "full"
    #: Echoes closer than this merge into one (the pulse length is the physical floor).
    min_return_separation_m: NonNegFloat = 0.0
    return_mode: Literal["strongest", "last", "first", "dual", "multi"] = "strongest"
    #: Returns reported per pulse in ``multi`` mode (the other modes fix it: 1, or 2 for dual).
    max_returns: Annotated[int, Field(ge=1, le=255)] | None = None
    #: The unit's own parts that block its beams (a bracket, the housing's base), as boxes
    #: in the sensor frame; a survey's ``ego`` adds the vehicle's.
    ego: Ego = Field(default_factory=Ego)

    @model_validator(mode="after")
    def _ego_boxes_only(self) -> ScannerConfig:
        if self.ego.mesh is not None:
            raise ValueError("a scanner's ego section takes boxes; give a mesh in the survey's")
        return self

    @model_validator(mode="after")
    def _pattern_section(self) -> ScannerConfig:
        if self.pattern == "spinning":
            missing = [
                k for k in ("rotation_hz", "firings_per_revolution", "channels")
                if getattr(self, k) is None
            ]  # fmt: skip
            if missing:
                raise ValueError(f"pattern spinning needs {', '.join(missing)}")
        elif getattr(self, self.pattern) is None:
            raise ValueError(f"pattern {self.pattern} needs a {self.pattern}: section")
        return self

    @model_validator(mode="after")
    def _range_window(self) -> ScannerConfig:
        if self.range_min_m >= self.range_max_m:
            raise ValueError(
                f"range_min_m ({self.range_min_m}) must be below range_max_m ({self.range_max_m})"
            )
        return self

    @model_validator(mode="after")
    def _overlap(self) -> ScannerConfig:
        if self.overlap_m is not None and self.overlap_m[0] > self.overlap_m[1]:
            raise ValueError(f"overlap_m [start, full] needs start <= full; got {self.overlap_m}")
        return self

    @property
    def transmit_radius_mm(self) -> tuple[float, float]:
        """The transmitted beam as a disc of the ellipse's area: (radius at the exit, mm;
        growth, mm per m, i.e. half the geometric-mean divergence in mrad)."""
        div = self.divergence_mrad
        return 0.5 * self.beam_exit_diameter_mm, 0.5 * (div.horizontal * div.vertical) ** 0.5

    @property
    def overlap_range_m(self) -> tuple[float, float]:
        """The near-field overlap ``(start, full)``, m: ``overlap_m`` when given, else where
        the receiver's field of view starts to meet the beam and where it holds all of it
        (Rasshofer et al. 2011, eqs. 11-12), the start no closer than ``range_min_m``; a field
        of view narrower than the beam never holds all of it (``full`` is ``range_max_m``,
        and the share the receiver sees tends to ``(fov / divergence)^2``)."""
        if self.overlap_m is not None:
            return float(self.overlap_m[0]), float(self.overlap_m[1])
        rho_t, grow_t = self.transmit_radius_mm
        rho_r, grow_r = 0.5 * self.receiver_aperture_mm, 0.5 * self.receiver_fov_mrad
        sep = self.axis_separation_mm
        start = max(0.0, sep - rho_t - rho_r) / (grow_t + grow_r)
        if grow_r <= grow_t:  # a field of view narrower than the beam never holds all of it
            return max(start, self.range_min_m), self.range_max_m
        full = max(0.0, sep + rho_t - rho_r) / (grow_r - grow_t)
        return max(start, self.range_min_m), max(full, start, self.range_min_m)

    @model_validator(mode="after")
    def _returns(self) -> ScannerConfig:
        if self.beam_samples not in RING_COUNTS:
            raise ValueError(
                f"beam_samples must be one of {', '.join(map(str, RING_COUNTS))} "
                f"(a centre and hexagonal rings); got {self.beam_samples}"
            )
        fixed = RETURNS_PER_PULSE.get(self.return_mode)
        if fixed is not None and self.max_returns not in (None, fixed):
            raise ValueError(
                f"return_mode {self.return_mode} reports {fixed} return(s); max_returns "
                f"{self.max_returns} applies to return_mode multi"
            )
        return self

    @model_validator(mode="after")
    def _channel_gains(self) -> ScannerConfig:
        resp = self.intensity_response
        if resp is None or resp.channel_gain is None:
            return self
        want = self.channel_count
        got = len(resp.channel_gain)
        if want is not None and got != want:
            raise ValueError(
                f"intensity_response.channel_gain has {got} entries; expected {want}, one per "
                f"channel of the {self.pattern} pattern"
            )
        return self

    @property
    def channel_count(self) -> int | None:
        """Channels (rings) the pattern reports; None for a table (read from its file)."""
        if self.pattern == "spinning":
            return self.channels.count if self.channels is not None else None
        if self.pattern == "risley":
            return len(self.risley.channel_offsets_deg) if self.risley is not None else None
        if self.pattern == "raster":
            return self.raster.rows if self.raster is not None else None
        if self.pattern == "oscillating":
            return 1
        return None

    @property
    def returns_per_pulse(self) -> int:
        """Most returns reported for one pulse."""
        return RETURNS_PER_PULSE.get(self.return_mode) or self.max_returns or 3

    @property
    def firing_period_s(self) -> float:
        """Time between two firings of one channel (spinning pattern), s."""
        assert self.rotation_hz is not None and self.firings_per_revolution is not None
        return 1.0 / (self.rotation_hz * self.firings_per_revolution)
