"""Configuration: pydantic models of surveys, scanners, materials and scenes, and YAML loading.

Every model forbids unknown keys, so a misspelt key is an error rather than a
silently ignored default. Files are read with ``yaml.safe_load`` only. Any problem
is raised as :class:`~simulator.errors.ConfigError`, which names the file, the
dotted key path and what was expected.

Paths inside a YAML file are relative to that file.
"""

from __future__ import annotations

import copy
import itertools
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import ConfigError
from .labels import SEMANTIC_KITTI

__all__ = [
    "Channels",
    "Detection",
    "Divergence",
    "Material",
    "ObjectSpec",
    "OutputSpec",
    "Pose",
    "ScannerConfig",
    "SceneSpec",
    "Survey",
    "TrajectorySpec",
    "Waypoint",
    "apply_overrides",
    "config_dir",
    "deep_merge",
    "load_materials",
    "load_scanner",
    "load_scene_spec",
    "load_survey",
    "load_yaml",
    "scanner_presets",
    "validate_file",
]

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Vec3 = Annotated[list[FiniteFloat], Field(min_length=3, max_length=3)]
Vec2Pos = Annotated[list[PositiveFloat], Field(min_length=2, max_length=2)]
Vec3Pos = Annotated[list[PositiveFloat], Field(min_length=3, max_length=3)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


# --------------------------------------------------------------------------- scanner


class Channels(_Model):
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


class Divergence(_Model):
    """Full-angle beam divergence of the elliptical beam, mrad."""

    horizontal: NonNegFloat
    vertical: NonNegFloat


class Detection(_Model):
    """Detection threshold as a datasheet states it.

    A target of ``reference_reflectance`` at normal incidence is just detected at
    ``reference_range_m``.
    """

    reference_range_m: PositiveFloat
    reference_reflectance: PositiveFloat


class Prism(_Model):
    """One rotating wedge prism of a Risley scanner."""

    rotation_hz: FiniteFloat = Field(description="signed: the sign is the turning sense")
    wedge_deg: Annotated[float, Field(gt=0, lt=60, allow_inf_nan=False)]
    phase_deg: FiniteFloat = 0.0


class RisleySpec(_Model):
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


class OscillatingSpec(_Model):
    """An airborne line scanner: a mirror swings the beam across track, below the sensor."""

    pulse_rate_hz: Annotated[float, Field(gt=0, le=1e8, allow_inf_nan=False)]
    scan_rate_hz: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)] = Field(
        description="full mirror cycles per second"
    )
    half_angle_deg: Annotated[float, Field(gt=0, lt=90, allow_inf_nan=False)]
    waveform: Literal["sine", "triangle", "sawtooth"] = "sine"


class RasterSpec(_Model):
    """A MEMS or solid-state grid, scanned line by line."""

    rows: Annotated[int, Field(ge=1, le=4096)]
    columns: Annotated[int, Field(ge=1, le=8192)]
    horizontal_fov_deg: Annotated[float, Field(gt=0, le=360, allow_inf_nan=False)]
    vertical_fov_deg: Annotated[float, Field(gt=0, le=180, allow_inf_nan=False)]
    frame_rate_hz: Annotated[float, Field(gt=0, le=1e4, allow_inf_nan=False)]
    boustrophedon: bool = Field(default=False, description="alternate lines run backwards")


class TableSpec(_Model):
    """A recorded pattern replayed: a CSV of ``time_s, azimuth_deg, elevation_deg[, channel]``."""

    file: str
    period_s: PositiveFloat | None = None


class ScannerConfig(_Model):
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
    channels: Channels | None = None
    risley: RisleySpec | None = None
    oscillating: OscillatingSpec | None = None
    raster: RasterSpec | None = None
    table: TableSpec | None = None
    beam_origin_offset_m: NonNegFloat = 0.0
    range_min_m: NonNegFloat
    range_max_m: Annotated[float, Field(gt=0, le=1e5, allow_inf_nan=False)]
    range_resolution_m: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]
    divergence_mrad: Divergence
    pulse_length_ns: NonNegFloat
    wavelength_nm: PositiveFloat | None = None
    detection: Detection
    atmospheric_extinction_per_m: NonNegFloat = 0.0
    range_noise_m: NonNegFloat
    intensity_scale: PositiveFloat
    intensity_max: PositiveFloat = 255.0
    #: Sub-rays per pulse over the elliptical Gaussian beam (1, 7, 19, 37, 61: hexagonal rings).
    beam_samples: Annotated[int, Field(ge=1)] = 1
    #: Echoes closer than this merge into one (the pulse length is the physical floor).
    min_return_separation_m: NonNegFloat = 0.0
    return_mode: Literal["strongest", "last", "first", "dual", "multi"] = "strongest"
    #: Returns reported per pulse in ``multi`` mode (the other modes fix it: 1, or 2 for dual).
    max_returns: Annotated[int, Field(ge=1, le=255)] | None = None

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
    def _returns(self) -> ScannerConfig:
        from .beam import RING_COUNTS

        if self.beam_samples not in RING_COUNTS:
            raise ValueError(
                f"beam_samples must be one of {', '.join(map(str, RING_COUNTS))} "
                f"(a centre and hexagonal rings); got {self.beam_samples}"
            )
        fixed = {"strongest": 1, "first": 1, "last": 1, "dual": 2}.get(self.return_mode)
        if fixed is not None and self.max_returns not in (None, fixed):
            raise ValueError(
                f"return_mode {self.return_mode} reports {fixed} return(s); max_returns "
                f"{self.max_returns} applies to return_mode multi"
            )
        return self

    @property
    def returns_per_pulse(self) -> int:
        """Most returns reported for one pulse."""
        fixed = {"strongest": 1, "first": 1, "last": 1, "dual": 2}
        return fixed.get(self.return_mode) or self.max_returns or 3

    @property
    def firing_period_s(self) -> float:
        """Time between two firings of one channel (spinning pattern), s."""
        assert self.rotation_hz is not None and self.firings_per_revolution is not None
        return 1.0 / (self.rotation_hz * self.firings_per_revolution)

    @property
    def pulses_per_second(self) -> float:
        """Pulses fired per second (single return)."""
        from .scanner import pattern_for

        return pattern_for(self).pulses_per_second


# --------------------------------------------------------------------------- materials


class Material(_Model):
    """Surface properties that the per-hit model needs."""

    reflectance: NonNegFloat = Field(description="diffuse reflectance at normal incidence")
    minnaert_k: NonNegFloat
    roughness_m: NonNegFloat = 0.0
    micro_slope_deg: Annotated[float, Field(ge=0, lt=90, allow_inf_nan=False)] = 0.0
    micro_slope_cell_m: PositiveFloat = 0.1
    label: str = "unlabeled"
    description: str = ""

    @field_validator("label")
    @classmethod
    def _known_label(cls, v: str) -> str:
        if v not in SEMANTIC_KITTI:
            raise ValueError(
                f"unknown SemanticKITTI class {v!r}; expected one of {', '.join(SEMANTIC_KITTI)}"
            )
        return v


# --------------------------------------------------------------------------- scenes


class PlaneSpec(_Model):
    size_m: Vec2Pos


class BoxSpec(_Model):
    size_m: Vec3Pos


class CylinderSpec(_Model):
    radius_m: PositiveFloat
    height_m: PositiveFloat
    sections: Annotated[int, Field(ge=3, le=4096)] = 32


class SphereSpec(_Model):
    radius_m: PositiveFloat
    subdivisions: Annotated[int, Field(ge=0, le=6)] = 3


_GEOMETRY_KEYS = ("mesh", "plane", "box", "cylinder", "sphere")


class ObjectSpec(_Model):
    """One object of a scene: a mesh file or a primitive, placed and given a material."""

    name: Annotated[str, Field(min_length=1)]
    mesh: str | None = None
    plane: PlaneSpec | None = None
    box: BoxSpec | None = None
    cylinder: CylinderSpec | None = None
    sphere: SphereSpec | None = None
    position_m: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    scale: PositiveFloat | Vec3Pos = 1.0
    material: str | Material | None = None
    label: str | None = None
    instance: Annotated[int, Field(ge=0, le=65535)] | None = None
    #: A moving object: its pose over time (world from object); the placement above is
    #: then within the object's own frame.
    trajectory: TrajectorySpec | None = None

    @model_validator(mode="after")
    def _one_geometry(self) -> ObjectSpec:
        given = [k for k in _GEOMETRY_KEYS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of {', '.join(_GEOMETRY_KEYS)}; got "
                f"{', '.join(given) if given else 'none'}"
            )
        if self.mesh is None and self.material is None:
            raise ValueError("a primitive needs a material (a library name or a mapping)")
        return self

    @field_validator("label")
    @classmethod
    def _known_label(cls, v: str | None) -> str | None:
        if v is not None and v not in SEMANTIC_KITTI:
            raise ValueError(f"unknown SemanticKITTI class {v!r}")
        return v

    @property
    def geometry_kind(self) -> str:
        """Which of mesh, plane, box, cylinder, sphere this object is."""
        return next(k for k in _GEOMETRY_KEYS if getattr(self, k) is not None)


class SceneSpec(_Model):
    """A scene file: an optional material library and a list of objects."""

    materials: dict[str, Material] = Field(default_factory=dict)
    default_material: str | None = None
    objects: Annotated[list[ObjectSpec], Field(min_length=1)]


# --------------------------------------------------------------------------- survey


class Pose(_Model):
    """A static sensor pose: position and roll, pitch, yaw (x forward, y left, z up)."""

    position_m: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])


class Waypoint(_Model):
    """A timed pose of the platform."""

    time_s: FiniteFloat
    position_m: Vec3
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])


class TrajectorySpec(_Model):
    """A moving platform: waypoints, constant motion, or a pose file (exactly one).

    - ``waypoints``: positions interpolated linearly (or by a Catmull-Rom spline with
      ``interpolation: spline``), rotations by spherical linear interpolation; the first
      and last pose are held outside their times.
    - ``start`` + ``velocity_mps`` (world frame) + ``yaw_rate_deg_s``: constant motion.
    - ``file``: TUM (``t x y z qx qy qz qw``) or KITTI (12 numbers, 3x4 row-major, one line
      per pose at ``period_s`` intervals from ``start_time_s``); ``format`` says which, or
      it is told by the number of columns.
    """

    waypoints: Annotated[list[Waypoint], Field(min_length=1)] | None = None
    interpolation: Literal["linear", "spline"] = "linear"
    start: Pose | None = None
    velocity_mps: Vec3 | None = None
    yaw_rate_deg_s: FiniteFloat = 0.0
    file: str | None = None
    format: Literal["tum", "kitti"] | None = None
    period_s: PositiveFloat | None = None
    start_time_s: FiniteFloat = 0.0

    @model_validator(mode="after")
    def _one_kind(self) -> TrajectorySpec:
        kinds = [
            k
            for k, given in (
                ("waypoints", self.waypoints is not None),
                ("start", self.start is not None or self.velocity_mps is not None),
                ("file", self.file is not None),
            )
            if given
        ]
        if len(kinds) != 1:
            raise ValueError(
                "give exactly one of waypoints, start (+ velocity_mps) or file; got "
                + (", ".join(kinds) or "none")
            )
        if self.waypoints is not None:
            times = [w.time_s for w in self.waypoints]
            if any(b <= a for a, b in itertools.pairwise(times)):
                raise ValueError("waypoint times must increase")
        return self


class OutputSpec(_Model):
    path: str = "out/scan.npz"
    #: ``sensor``: each point in the sensor frame at its own firing (what a real sensor
    #: reports, distorted by motion); ``world``; ``sensor_compensated``: in the sensor frame
    #: at the survey start (for ``sequence``: at each frame's start), motion removed.
    frame: Literal["sensor", "world", "sensor_compensated"] = "sensor"
    diagnostics: bool = False


class Survey(_Model):
    """A survey: which scanner, where, looking at which scene, for how long."""

    scanner: Annotated[str, Field(min_length=1)]
    scanner_overrides: dict[str, Any] = Field(default_factory=dict)
    scene: Annotated[str, Field(min_length=1)]
    pose: Pose = Field(default_factory=Pose)
    trajectory: TrajectorySpec | None = None
    #: The sensor's mounting on the platform that the trajectory moves (extrinsic).
    mount: Pose | None = None
    revolutions: PositiveFloat | None = None
    duration_s: PositiveFloat | None = None
    seed: Annotated[int, Field(ge=0, lt=2**64)] = 0
    chunk_pulses: Annotated[int, Field(ge=1, le=2**26)] = 2**18
    output: OutputSpec = Field(default_factory=OutputSpec)

    @model_validator(mode="after")
    def _length(self) -> Survey:
        if self.revolutions is not None and self.duration_s is not None:
            raise ValueError("give revolutions or duration_s, not both")
        if self.revolutions is None and self.duration_s is None:
            self.revolutions = 1.0
        if self.trajectory is not None and "pose" in self.model_fields_set:
            raise ValueError("give pose (a static sensor) or trajectory (a moving one), not both")
        return self


ObjectSpec.model_rebuild()
SceneSpec.model_rebuild()

# --------------------------------------------------------------------------- loading


def config_dir() -> Path:
    """Directory of the bundled configuration (scanner presets, materials)."""
    source_tree = Path(__file__).resolve().parent.parent / "configs"
    if (source_tree / "materials.yaml").is_file():
        return source_tree
    return Path(str(resources.files("simulator") / "presets"))


def scanner_presets() -> dict[str, Path]:
    """Bundled scanner presets by name."""
    folder = config_dir() / "scanners"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _raise_validation(source: str | Path, err: ValidationError, prefix: str = "") -> NoReturn:
    errors = err.errors(include_url=False)
    first = errors[0]
    # Tagged unions and "after" validators add locations that read badly; drop them.
    loc = tuple(p for p in first["loc"] if p not in ("function-after", "function-before"))
    key = _format_loc(loc)
    if prefix:
        key = f"{prefix}.{key}" if key else prefix
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown key (misspelt?); it is not one this section accepts"
    elif first["type"] == "missing":
        msg = "required key is missing"
    if loc and "input" in first and first["type"] not in ("missing", "extra_forbidden"):
        shown = repr(first["input"])
        if len(shown) > 60:
            shown = shown[:57] + "..."
        msg = f"{msg} (got {shown})"
    if len(errors) > 1:
        msg += f" [and {len(errors) - 1} more problem(s)]"
    raise ConfigError(source, key, msg) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with the safe loader.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    dict
        Its top-level mapping.

    Raises
    ------
    ConfigError
        If the file is missing, unreadable, not valid YAML or not a mapping.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read ({exc})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(path, "", f"not valid YAML{where}: {problem}") from None
    if data is None:
        raise ConfigError(path, "", "file is empty; expected a mapping of keys")
    if not isinstance(data, dict):
        raise ConfigError(path, "", f"expected a mapping of keys, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(path, str(bad[0]), "keys must be strings")
    return data


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``extra`` merged in: mappings recursively, the rest replaced."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides (values parsed as YAML) to a mapping.

    Parameters
    ----------
    data : dict
        The parsed file.
    overrides : list of str
        E.g. ``["seed=3", "scanner_overrides.range_noise_m=0", "pose.position_m=[0,0,2]"]``.

    Returns
    -------
    dict
        A new mapping.
    """
    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError("--set", item, "expected dotted.key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError("--set", key, f"{part!r} is not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def _scanner_path(name: str, base_dir: Path, source: str | Path) -> Path:
    looks_like_path = name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name
    if looks_like_path:
        path = Path(name)
        return path if path.is_absolute() else base_dir / path
    presets = scanner_presets()
    if name not in presets:
        raise ConfigError(
            source,
            "scanner",
            f"unknown scanner preset {name!r}; choose one of {', '.join(presets)}",
        )
    return presets[name]


def load_scanner(
    name_or_path: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    base_dir: Path | None = None,
    source: str | Path = "",
) -> ScannerConfig:
    """Load a scanner preset by name, or a scanner YAML by path, with overrides merged in.

    Parameters
    ----------
    name_or_path : str or Path
        A preset name (see :func:`scanner_presets`) or a path.
    overrides : dict, optional
        Deep-merged into the file's mapping before validation.
    base_dir : Path, optional
        Directory that a relative path is taken from (the survey's).
    source : str or Path
        The file that named the scanner, for error messages.
    """
    base = base_dir if base_dir is not None else Path.cwd()
    path = _scanner_path(str(name_or_path), base, source or str(name_or_path))
    data = load_yaml(path)
    table = data.get("table")
    if isinstance(table, dict) and isinstance(table.get("file"), str):
        table_path = Path(table["file"])
        if not table_path.is_absolute():
            data = {**data, "table": {**table, "file": str(path.parent / table_path)}}
    label: str | Path = path
    if overrides:
        data = deep_merge(data, overrides)
        label = f"{path} (with scanner_overrides)"
    try:
        return ScannerConfig.model_validate(data)
    except ValidationError as err:
        _raise_validation(label, err)


def load_materials(path: str | Path | None = None) -> dict[str, Material]:
    """Load a material library (by default the bundled ``configs/materials.yaml``)."""
    path = Path(path) if path is not None else config_dir() / "materials.yaml"
    data = load_yaml(path)
    out: dict[str, Material] = {}
    for name, entry in data.items():
        try:
            out[name] = Material.model_validate(entry)
        except ValidationError as err:
            _raise_validation(path, err, prefix=name)
    return out


def load_scene_spec(path: str | Path) -> SceneSpec:
    """Load and validate a scene YAML (meshes are not read here)."""
    data = load_yaml(path)
    try:
        return SceneSpec.model_validate(data)
    except ValidationError as err:
        _raise_validation(path, err)


def load_survey(path: str | Path, overrides: list[str] | None = None) -> tuple[Survey, Path]:
    """Load and validate a survey YAML, with ``--set`` style overrides applied.

    Returns
    -------
    survey : Survey
        The validated survey.
    base_dir : Path
        The survey file's directory, which relative paths inside it start from.
    """
    path = Path(path)
    data = load_yaml(path)
    # An override of one of two alternatives replaces the other one given in the file.
    alternatives = {"duration_s": "revolutions", "revolutions": "duration_s",
                    "trajectory": "pose", "pose": "trajectory"}  # fmt: skip
    given = {o.partition("=")[0].strip().split(".")[0] for o in overrides or []}
    for key in given:
        other = alternatives.get(key)
        if other is not None and other not in given:
            data.pop(other, None)
    data = apply_overrides(data, overrides or [])
    try:
        survey = Survey.model_validate(data)
    except ValidationError as err:
        _raise_validation(path, err)
    return survey, path.resolve().parent


def validate_file(path: str | Path) -> str:
    """Validate a survey, scanner, scene or material file; return what it was found to be.

    A survey is checked in depth: its scanner (with overrides) and scene file too.
    """
    from .scene import load_scene  # local import: scene loading pulls in trimesh

    path = Path(path)
    data = load_yaml(path)
    if "scene" in data and "scanner" in data:
        survey, base = load_survey(path)
        scanner = load_scanner(survey.scanner, survey.scanner_overrides, base_dir=base, source=path)
        scene = load_scene(base / survey.scene)
        from .scanner import pattern_for

        return (
            f"survey: scanner {scanner.name} ({pattern_for(scanner).channels} channels), "
            f"scene with {len(scene.objects)} objects, {scene.triangle_count} triangles"
        )
    if "pattern" in data or "channels" in data:
        scanner = load_scanner(path)
        from .scanner import pattern_for

        return f"scanner: {scanner.name}, {pattern_for(scanner).channels} channels"
    if "groups" in data:
        from .dataset import load_dataset_spec

        spec = load_dataset_spec(path)
        count = sum(g.sequences * g.frames for g in spec.groups)
        return f"dataset: {len(spec.groups)} groups, {count} samples, {spec.layout} layout"
    if "objects" in data:
        scene = load_scene(path)
        return f"scene: {len(scene.objects)} objects, {scene.triangle_count} triangles"
    if all(isinstance(v, dict) and "reflectance" in v for v in data.values()):
        return f"materials: {len(load_materials(path))} entries"
    raise ConfigError(
        path,
        "",
        "not a recognised file: a survey has 'scanner' and 'scene', a scanner 'pattern', "
        "a scene 'objects', a material library maps names to entries with 'reflectance'",
    )
