"""Sensor poses over time. Today a static pose; moving trajectories plug in here.

A trajectory maps sensor-frame rays at their firing times to world-frame rays. The
interface is per pulse (times in, arrays out) so that a moving platform, whose pose
differs for every pulse, needs no change elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .config import Pose
from .transforms import rotation_from_rpy_deg

__all__ = ["StaticTrajectory", "Trajectory"]


@dataclass
class StaticTrajectory:
    """A sensor that does not move.

    Attributes
    ----------
    rotation : (3, 3) float64
        World from sensor rotation; its columns are the sensor axes in the world.
    position_m : (3,) float64
        Sensor origin in the world.
    """

    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]

    @classmethod
    def from_pose(cls, pose: Pose) -> StaticTrajectory:
        """Build from a survey's ``pose``."""
        return cls(rotation_from_rpy_deg(pose.rotation_deg), np.asarray(pose.position_m, float))

    def to_world(
        self,
        origins_sensor_m: NDArray[np.float64],
        directions_sensor: NDArray[np.float64],
        time_s: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Move rays from the sensor frame at their firing times to the world frame.

        Parameters
        ----------
        origins_sensor_m, directions_sensor : (N, 3) float64
        time_s : (N,) float64
            Firing times (unused by a static pose).

        Returns
        -------
        origins_m, directions : (N, 3) float64
            World-frame rays.
        sensor_up : (N, 3) or (1, 3) float64
            The sensor's z axis in the world at each firing (one row if it is constant).
        """
        del time_s
        origins = origins_sensor_m @ self.rotation.T + self.position_m
        directions = directions_sensor @ self.rotation.T
        return origins, directions, self.sensor_up()

    def sensor_up(self) -> NDArray[np.float64]:
        """(1, 3) the sensor's z axis in the world."""
        return self.rotation[:, 2].reshape(1, 3).copy()

    def to_sensor(self, points_m: NDArray[np.float64], time_s: NDArray[np.float64]) -> NDArray:
        """Move world points to the sensor frame at the given times.

        Parameters
        ----------
        points_m : (N, 3) float64
        time_s : (N,) float64
            Times of the points (unused by a static pose).

        Returns
        -------
        (N, 3) float64
        """
        del time_s
        return (points_m - self.position_m) @ self.rotation


Trajectory = StaticTrajectory
