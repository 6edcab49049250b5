"""The vehicle under the sensor: boxes or a mesh fixed in the sensor frame that block the
beams meeting them (the car a sensor is mounted on, its rack, the housing's own base)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import Model, PositiveFloat, Vec3
from .pose import Pose

__all__ = ["Ego", "EgoBox"]


class EgoBox(Model):
    """A box fixed in the sensor frame (x forward, y left, z up; metres)."""

    size_m: Annotated[list[PositiveFloat], Field(min_length=3, max_length=3)]
    #: The box's centre in the sensor frame.
    position_m: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    #: Roll, pitch, yaw of the box about its centre.
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])


class Ego(Model):
    """What the sensor's own platform puts in the way of its beams. A beam that meets it
    before the scene gives no return (the body is dark, or nearer than the sensor's
    minimum range, or cut by the driver's own filter): the drop-outs a real sensor shows
    behind and below itself; with ``returns: true`` the body returns as a surface of
    ``reflectance`` (label ``unlabeled``), as it does for a sensor whose driver keeps it.
    Empty (the default): nothing blocks, and every output is what it was without the
    section."""

    boxes: list[EgoBox] = Field(default_factory=list)
    #: Whether the body returns points (a Lambertian surface of ``reflectance``) instead of
    #: only blocking the beams.
    returns: bool = False
    reflectance: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.1
    #: A mesh file of the platform (a survey's section only; relative to the survey),
    #: placed in the sensor frame by ``mesh_pose``.
    mesh: str | None = None
    mesh_pose: Pose = Field(default_factory=Pose)

    @property
    def empty(self) -> bool:
        """Whether nothing blocks."""
        return not self.boxes and self.mesh is None
