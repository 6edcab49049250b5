"""Rigid transforms: roll-pitch-yaw rotations and homogeneous matrices."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["compose", "rotation_from_rpy_deg", "rpy_deg_from_rotation"]


def rotation_from_rpy_deg(rpy_deg: ArrayLike) -> NDArray[np.float64]:
    """Rotation matrix from roll, pitch, yaw in degrees.

    Roll is about x, pitch about y, yaw about z, applied in that order to a vector in
    the body frame (``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``), the aerospace and ROS
    convention. The columns of ``R`` are the body axes in the parent frame.

    Parameters
    ----------
    rpy_deg : (3,) float
        Roll, pitch, yaw, degrees.

    Returns
    -------
    (3, 3) float64
    """
    roll, pitch, yaw = np.radians(np.asarray(rpy_deg, dtype=np.float64).reshape(3))
    cr, sr = np.cos(roll), np.sin(roll)
    cp, sp = np.cos(pitch), np.sin(pitch)
    cy, sy = np.cos(yaw), np.sin(yaw)
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    return rz @ ry @ rx


def rpy_deg_from_rotation(rotation: ArrayLike) -> NDArray[np.float64]:
    """Roll, pitch, yaw in degrees of a rotation matrix: the inverse of
    :func:`rotation_from_rpy_deg` (pitch in [-90, 90] deg; at +-90 deg the roll is 0 and the
    yaw takes the whole turn about z).

    Parameters
    ----------
    rotation : (3, 3) float

    Returns
    -------
    (3,) float64
    """
    r = np.asarray(rotation, dtype=np.float64).reshape(3, 3)
    pitch = np.arcsin(np.clip(-r[2, 0], -1.0, 1.0))
    if abs(r[2, 0]) < 1.0 - 1e-12:
        roll = np.arctan2(r[2, 1], r[2, 2])
        yaw = np.arctan2(r[1, 0], r[0, 0])
    else:  # gimbal lock: only yaw - roll (or yaw + roll) is defined
        roll = 0.0
        yaw = np.arctan2(-r[0, 1], r[1, 1])
    return np.degrees(np.array([roll, pitch, yaw]))


def compose(
    position_m: ArrayLike, rotation_deg: ArrayLike, scale: float | ArrayLike = 1.0
) -> NDArray[np.float64]:
    """Homogeneous matrix ``T @ R @ S``: scale, then rotate (roll, pitch, yaw), then move.

    Parameters
    ----------
    position_m : (3,) float
    rotation_deg : (3,) float
    scale : float or (3,) float

    Returns
    -------
    (4, 4) float64
    """
    out = np.eye(4)
    out[:3, :3] = rotation_from_rpy_deg(rotation_deg) @ np.diag(
        np.broadcast_to(np.asarray(scale, dtype=np.float64), (3,))
    )
    out[:3, 3] = np.asarray(position_m, dtype=np.float64).reshape(3)
    return out
