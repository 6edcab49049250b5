"""The survey model: which scanner, where, looking at which scene, for how long."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .base import Model, PositiveFloat
from .ego import Ego
from .pose import Pose, TrajectorySpec
from .weather import Weather

__all__ = ["OutputSpec", "Survey"]


class OutputSpec(Model):
    path: str = "out/scan.npz"
    #: ``sensor``: each point in the sensor frame at its own firing (what a real sensor
    #: reports, distorted by motion); ``world``; ``sensor_compensated``: in the sensor frame
    #: at the survey start (for ``sequence``: at each frame's start), motion removed.
    frame: Literal["sensor", "world", "sensor_compensated"] = "sensor"
    diagnostics: bool = False


class Survey(Model):
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
    #: Most surfaces one ray meets: behind a see-through one (a material's
    #: ``transmittance``) the ray is cast on, up to this many surfaces in all.
    max_surfaces: Annotated[int, Field(ge=1, le=16)] = 4
    #: Fog, rain, snow or dust along the beams; absent or empty is clear air.
    weather: Weather = Field(default_factory=Weather)
    #: The vehicle under the sensor: boxes or a mesh in the sensor frame that block beams
    #: (with the scanner's own ``ego`` boxes, if any).
    ego: Ego = Field(default_factory=Ego)

    @model_validator(mode="after")
    def _length(self) -> Survey:
        if self.revolutions is not None and self.duration_s is not None:
            raise ValueError("give revolutions or duration_s, not both")
        if self.revolutions is None and self.duration_s is None:
            self.revolutions = 1.0
        if self.trajectory is not None and "pose" in self.model_fields_set:
            raise ValueError("give pose (a static sensor) or trajectory (a moving one), not both")
        return self
