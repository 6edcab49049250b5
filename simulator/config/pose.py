"""Poses and trajectories: where a sensor or an object is, and how it moves."""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import Field, model_validator

from .base import FiniteFloat, Model, PositiveFloat, Vec3

__all__ = ["Pose", "Swing", "TrajectorySpec", "Waypoint"]


class Pose(Model):
    """A static sensor pose: position and roll, pitch, yaw (x forward, y left, z up)."""

    position_m: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])


class Waypoint(Model):
    """A timed pose of the platform."""

    time_s: FiniteFloat
    position_m: Vec3
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])


class Swing(Model):
    """An oscillating rotation about one axis of the moving frame, on top of its motion:
    ``angle(t) = amplitude_deg sin(2 pi t / period_s + phase_deg)`` about the frame's own
    origin (a walker's leg about the hip, a pendulum, a nodding sensor)."""

    axis: Literal["roll", "pitch", "yaw"] = "pitch"
    amplitude_deg: Annotated[float, Field(ge=0, le=180, allow_inf_nan=False)]
    period_s: PositiveFloat
    phase_deg: FiniteFloat = 0.0


class TrajectorySpec(Model):
    """A moving platform: waypoints, constant motion, or a pose file (exactly one).

    - ``waypoints``: positions interpolated linearly (or by a Catmull-Rom spline with
      ``interpolation: spline``), rotations by spherical linear interpolation; the first
      and last pose are held outside their times.
    - ``start`` + ``velocity_mps`` (world frame) + ``yaw_rate_deg_s``: constant motion.
    - ``file``: TUM (``t x y z qx qy qz qw``) or KITTI (12 numbers, 3x4 row-major, one line
      per pose at ``period_s`` intervals from ``start_time_s``); ``format`` says which, or
      it is told by the number of columns.

    ``swing`` adds an oscillating rotation in the moving frame to any of the three.
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
    swing: Swing | None = None

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
