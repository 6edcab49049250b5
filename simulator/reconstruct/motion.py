"""The sensor's motion within a frame, from one pose a frame.

A spinning scanner fires its columns over a whole revolution while the vehicle moves (an
OS1 at 10 Hz on a car at 2.5 m/s: 0.25 m from the first column to the last), so every
return is in the sensor frame of its own firing time. A frame's pose is taken to hold at
a fixed share ``tau`` of the frame's period (``pose_time_share``), and the sensor's pose
at any time is interpolated between the frames' poses (linearly in position, by slerp in
rotation, :class:`simulator.sensor.trajectory.WaypointTrajectory`), and extrapolated by the last
step beyond the first and last frame. The same waypoints go into the frame's survey, so
the scan back moves as the real sensor moved and its returns are skewed as the real
ones are.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..config import Survey
from ..sensor.trajectory import Trajectory, trajectory_from_survey
from ..transforms import rpy_deg_from_rotation

__all__ = ["frame_trajectory", "frame_waypoints", "pixel_poses"]


def _step(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    """The pose one step beyond ``b`` by the motion from ``a`` to ``b``."""
    return b @ np.linalg.inv(a) @ b


def frame_waypoints(
    poses: NDArray[np.float64], k: int, period_s: float, pose_time_share: float
) -> list[dict[str, object]]:
    """A frame's survey waypoints: the poses of frames ``k - 1``, ``k``, ``k + 1`` at
    their times, in the frame's own time (0 at its first column).

    Parameters
    ----------
    poses : (F, 4, 4) float64
        World from sensor, one a frame (at its ``pose_time_share`` of the period).
    k : int
        The frame.
    period_s : float
        Time from one frame to the next, s.
    pose_time_share : float
        When in its frame a pose holds, as a share of the period (0: the first column,
        0.5: the middle).

    Returns
    -------
    list of dict
        ``time_s``, ``position_m``, ``rotation_deg`` (the survey's ``waypoints``).
    """
    n = len(poses)
    if n == 1:
        around = {0: poses[0]}
    else:
        before = poses[k - 1] if k > 0 else _step(poses[k + 1], poses[k])
        after = poses[k + 1] if k + 1 < n else _step(poses[k - 1], poses[k])
        around = {-1: before, 0: poses[k], 1: after}
    return [
        {
            "time_s": round((j + pose_time_share) * period_s, 12),
            "position_m": [round(float(x), 9) for x in p[:3, 3]],
            "rotation_deg": [round(float(x), 9) for x in rpy_deg_from_rotation(p[:3, :3])],
        }
        for j, p in around.items()
    ]


def frame_trajectory(waypoints: list[dict[str, object]]) -> Trajectory:
    """The sensor frame's trajectory the waypoints describe (as a survey reads them)."""
    survey = Survey.model_validate(
        {"scanner": "-", "scene": "-", "trajectory": {"waypoints": waypoints}}
    )
    return trajectory_from_survey(survey.pose, survey.trajectory, None, base_dir=".")


def pixel_poses(
    trajectory: Trajectory, time_s: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """World-from-sensor rotation (..., 3, 3) and position (..., 3) at each time (...)."""
    shape = np.shape(time_s)
    rot, pos = trajectory.poses(np.asarray(time_s, dtype=np.float64).reshape(-1))
    return np.asarray(rot).reshape(*shape, 3, 3), np.asarray(pos).reshape(*shape, 3)
