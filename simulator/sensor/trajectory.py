"""Sensor poses over time: static, waypoints, constant motion, pose files; a mount.

A trajectory gives the world-from-sensor pose at any time, vectorised over times:
``poses(time_s) -> (R, t)`` with ``R`` (N, 3, 3) and ``t`` (N, 3). Every pulse is cast
from the pose at its own firing time, so a scan taken while moving is distorted as a
real one is.

Rotations are given as roll, pitch, yaw in degrees (``R = Rz Ry Rx``, see
:mod:`simulator.transforms`) or, in TUM files, as unit quaternions ``qx qy qz qw``
(Hamilton convention, world from body). Between waypoints, positions are interpolated
linearly or by a cubic Hermite spline with Catmull-Rom tangents, rotations by
spherical linear interpolation; before the first and after the last waypoint the end
pose is held.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..config import Pose, TrajectorySpec
from ..errors import ConfigError
from ..transforms import rotation_from_rpy_deg

__all__ = [
    "StaticTrajectory",
    "Swinging",
    "Trajectory",
    "WaypointTrajectory",
    "matrix_from_quaternion",
    "quaternion_from_matrix",
    "slerp",
    "trajectory_from_spec",
    "trajectory_from_survey",
]


def quaternion_from_matrix(rotation: NDArray[np.float64]) -> NDArray[np.float64]:
    """Unit quaternions ``(x, y, z, w)`` of rotation matrices, ``w >= 0``.

    Parameters
    ----------
    rotation : (..., 3, 3) float64

    Returns
    -------
    (..., 4) float64
    """
    m = np.asarray(rotation, dtype=np.float64)
    shape = m.shape[:-2]
    m = m.reshape(-1, 3, 3)
    q = np.zeros((len(m), 4))
    trace = np.trace(m, axis1=1, axis2=2)
    # Shepperd's method: pick the largest of w, x, y, z for stability.
    cand = np.stack([trace, m[:, 0, 0], m[:, 1, 1], m[:, 2, 2]], axis=1)
    pick = np.argmax(cand, axis=1)
    for k in range(4):
        s = pick == k
        if not s.any():
            continue
        a = m[s]
        if k == 0:
            r = np.sqrt(1.0 + trace[s]) * 2.0
            q[s] = np.stack(
                [(a[:, 2, 1] - a[:, 1, 2]) / r, (a[:, 0, 2] - a[:, 2, 0]) / r,
                 (a[:, 1, 0] - a[:, 0, 1]) / r, 0.25 * r], axis=1)  # fmt: skip
        else:
            i, j, h = (k - 1), k % 3, (k + 1) % 3
            r = np.sqrt(1.0 + a[:, i, i] - a[:, j, j] - a[:, h, h]) * 2.0
            qi = np.zeros((len(a), 4))
            qi[:, i] = 0.25 * r
            qi[:, j] = (a[:, j, i] + a[:, i, j]) / r
            qi[:, h] = (a[:, h, i] + a[:, i, h]) / r
            qi[:, 3] = (a[:, h, j] - a[:, j, h]) / r
            q[s] = qi
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 3] < 0] *= -1.0
    return q.reshape(*shape, 4)


def matrix_from_quaternion(q: NDArray[np.float64]) -> NDArray[np.float64]:
    """Rotation matrices of quaternions ``(x, y, z, w)`` (normalised first).

    Parameters
    ----------
    q : (..., 4) float64

    Returns
    -------
    (..., 3, 3) float64
    """
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        axis=-2,
    )


def slerp(
    q0: NDArray[np.float64], q1: NDArray[np.float64], u: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Spherical linear interpolation of unit quaternions, the short way round.

    Parameters
    ----------
    q0, q1 : (N, 4) float64
    u : (N,) float64
        Fractions in [0, 1].

    Returns
    -------
    (N, 4) float64
    """
    dot = np.einsum("ij,ij->i", q0, q1)
    q1 = np.where(dot[:, None] < 0.0, -q1, q1)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    small = theta < 1e-9
    sin_t = np.where(small, 1.0, np.sin(theta))
    a = np.where(small, 1.0 - u, np.sin((1.0 - u) * theta) / sin_t)
    b = np.where(small, u, np.sin(u * theta) / sin_t)
    out = a[:, None] * q0 + b[:, None] * q1
    return out / np.linalg.norm(out, axis=1, keepdims=True)


class Trajectory:
    """World-from-sensor poses over time (base class).

    Subclasses implement :meth:`poses`; :attr:`is_static` tells the pipeline that one pose
    holds for every pulse.
    """

    is_static = False

    def poses(self, time_s: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        """Rotations (N, 3, 3) and positions (N, 3) at the given times (N,)."""
        raise NotImplementedError

    def pose_at(self, time_s: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Rotation (3, 3) and position (3,) at one time."""
        rot, pos = self.poses(np.array([float(time_s)]))
        return rot[0], pos[0]


@dataclass
class StaticTrajectory(Trajectory):
    """A sensor that does not move.

    Attributes
    ----------
    rotation : (3, 3) float64
        World from sensor; its columns are the sensor axes in the world.
    position_m : (3,) float64
        Sensor origin in the world.
    """

    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]
    is_static = True

    @classmethod
    def from_pose(cls, pose: Pose) -> StaticTrajectory:
        """Build from a survey's ``pose``."""
        return cls(rotation_from_rpy_deg(pose.rotation_deg), np.asarray(pose.position_m, float))

    def poses(self, time_s: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        n = len(np.atleast_1d(time_s))
        return (
            np.broadcast_to(self.rotation, (n, 3, 3)),
            np.broadcast_to(self.position_m, (n, 3)),
        )


@dataclass
class WaypointTrajectory(Trajectory):
    """Poses interpolated between timed waypoints.

    Attributes
    ----------
    times_s : (K,) float64
        Increasing.
    positions_m : (K, 3) float64
    quaternions : (K, 4) float64
        ``(x, y, z, w)``, world from platform.
    spline : bool
        Cubic Hermite positions with Catmull-Rom tangents instead of linear.
    """

    times_s: NDArray[np.float64]
    positions_m: NDArray[np.float64]
    quaternions: NDArray[np.float64]
    spline: bool = False

    def poses(self, time_s: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        t = np.clip(np.atleast_1d(np.asarray(time_s, dtype=np.float64)), *self.times_s[[0, -1]])
        k = len(self.times_s)
        if k == 1:
            n = len(t)
            rot = matrix_from_quaternion(self.quaternions[0])
            return np.broadcast_to(rot, (n, 3, 3)), np.broadcast_to(self.positions_m[0], (n, 3))
        i = np.clip(np.searchsorted(self.times_s, t, side="right") - 1, 0, k - 2)
        t0, t1 = self.times_s[i], self.times_s[i + 1]
        u = (t - t0) / (t1 - t0)
        p0, p1 = self.positions_m[i], self.positions_m[i + 1]
        if self.spline:
            tangents = np.gradient(self.positions_m, self.times_s, axis=0, edge_order=1)
            dt = (t1 - t0)[:, None]
            uu = u[:, None]
            h00 = 2 * uu**3 - 3 * uu**2 + 1
            h10 = uu**3 - 2 * uu**2 + uu
            h01 = -2 * uu**3 + 3 * uu**2
            h11 = uu**3 - uu**2
            pos = h00 * p0 + h10 * dt * tangents[i] + h01 * p1 + h11 * dt * tangents[i + 1]
        else:
            pos = p0 + u[:, None] * (p1 - p0)
        q = slerp(self.quaternions[i], self.quaternions[i + 1], u)
        return matrix_from_quaternion(q), pos


def _times_matrix(stack: NDArray[np.float64], matrix: NDArray[np.float64]) -> NDArray[np.float64]:
    """``stack @ matrix`` for an (N, 3, 3) stack and one (3, 3) matrix, as a single
    (3N, 3) x (3, 3) product (a batched matmul of 3x3 matrices is ~20x slower)."""
    return (np.reshape(stack, (-1, 3)) @ matrix).reshape(-1, 3, 3)


@dataclass
class ConstantMotion(Trajectory):
    """``position(t) = p0 + v t``, ``rotation(t) = Rz(yaw_rate t) R0`` (world frame)."""

    rotation0: NDArray[np.float64]
    position0_m: NDArray[np.float64]
    velocity_mps: NDArray[np.float64]
    yaw_rate_rad_s: float

    def poses(self, time_s: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        t = np.atleast_1d(np.asarray(time_s, dtype=np.float64))
        n = len(t)
        pos = np.empty((n, 3))
        for k in range(3):  # column by column: numpy is slow at broadcasting into rows of 3
            pos[:, k] = self.position0_m[k] + t * self.velocity_mps[k]
        if self.yaw_rate_rad_s == 0.0:
            return np.broadcast_to(self.rotation0, (n, 3, 3)), pos
        yaw = self.yaw_rate_rad_s * t
        c, s = np.cos(yaw), np.sin(yaw)
        rz = np.zeros((n, 3, 3))
        rz[:, 0, 0], rz[:, 0, 1], rz[:, 1, 0], rz[:, 1, 1], rz[:, 2, 2] = c, -s, s, c, 1.0
        return _times_matrix(rz, self.rotation0), pos


@dataclass
class Swinging(Trajectory):
    """A trajectory with an oscillating rotation in its own frame:
    ``world_from_body(t) = motion(t) . R_axis(A sin(2 pi t / T + phase))``."""

    motion: Trajectory
    axis: int  # 0 roll (x), 1 pitch (y), 2 yaw (z)
    amplitude_rad: float
    period_s: float
    phase_rad: float

    def poses(self, time_s: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        t = np.atleast_1d(np.asarray(time_s, dtype=np.float64))
        rot, pos = self.motion.poses(t)
        angle = self.amplitude_rad * np.sin(2.0 * np.pi * t / self.period_s + self.phase_rad)
        c, s = np.cos(angle), np.sin(angle)
        i, j = [(1, 2), (2, 0), (0, 1)][self.axis]  # the plane the rotation turns
        local = np.zeros((len(t), 3, 3))
        local[:, self.axis, self.axis] = 1.0
        local[:, i, i], local[:, i, j], local[:, j, i], local[:, j, j] = c, -s, s, c
        return np.matmul(rot, local), pos


@dataclass
class Mounted(Trajectory):
    """A sensor mounted on a moving platform: world_from_sensor = platform(t) . mount."""

    platform: Trajectory
    mount_rotation: NDArray[np.float64]
    mount_position_m: NDArray[np.float64]

    def poses(self, time_s: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
        rot, pos = self.platform.poses(time_s)
        if rot.ndim == 3 and len(rot) and rot.strides[0] == 0:  # one rotation, broadcast
            one = rot[0]
            rotation = np.broadcast_to(one @ self.mount_rotation, rot.shape)
            return rotation, pos + one @ self.mount_position_m
        rotation = _times_matrix(rot, self.mount_rotation)
        return rotation, (rot.reshape(-1, 3) @ self.mount_position_m).reshape(-1, 3) + pos


def _read_pose_file(
    spec: TrajectorySpec, path: Path, source: str | Path, key: str
) -> WaypointTrajectory:
    try:
        data = np.loadtxt(path, comments="#", ndmin=2)
    except FileNotFoundError:
        raise ConfigError(source, f"{key}.file", f"pose file not found: {path}") from None
    except ValueError as exc:
        raise ConfigError(
            source, f"{key}.file", f"{path}: not a table of numbers ({exc})"
        ) from None
    fmt = spec.format or {8: "tum", 12: "kitti"}.get(data.shape[1])
    expected = {"tum": 8, "kitti": 12}
    if fmt is None or data.shape[1] != expected[fmt]:
        raise ConfigError(
            source, f"{key}.file",
            f"{path}: {data.shape[1]} columns; expected 8 (TUM: t x y z qx qy qz qw) or "
            "12 (KITTI: a 3x4 row-major matrix)",
        )  # fmt: skip
    if not np.all(np.isfinite(data)):
        raise ConfigError(source, f"{key}.file", f"{path}: NaN or infinite values")
    if fmt == "tum":
        times, positions, quats = data[:, 0], data[:, 1:4], data[:, 4:8]
    else:
        if spec.period_s is None:
            raise ConfigError(
                source, f"{key}.period_s", "a KITTI pose file needs period_s (s per line)"
            )
        m = data.reshape(-1, 3, 4)
        times = spec.start_time_s + spec.period_s * np.arange(len(m))
        positions, quats = m[:, :, 3], quaternion_from_matrix(m[:, :, :3])
    if np.any(np.diff(times) <= 0):
        raise ConfigError(source, f"{key}.file", f"{path}: times must increase")
    return WaypointTrajectory(times, positions, quats, spline=spec.interpolation == "spline")


def _motionless_pose(spec: TrajectorySpec) -> Pose | None:
    """The pose of a trajectory spec that never moves (it then takes the static path and
    gives the static scan bit for bit), else None."""
    if spec.swing is not None and spec.swing.amplitude_deg > 0:
        return None
    if spec.waypoints is not None:
        first = spec.waypoints[0]
        if all(
            w.position_m == first.position_m and w.rotation_deg == first.rotation_deg
            for w in spec.waypoints
        ):
            return Pose(position_m=first.position_m, rotation_deg=first.rotation_deg)
    elif spec.file is None and not any(spec.velocity_mps or [0.0]) and not spec.yaw_rate_deg_s:
        return spec.start or Pose()
    return None


def trajectory_from_spec(
    spec: TrajectorySpec, base_dir: Path, source: str | Path = "", key: str = "trajectory"
) -> Trajectory:
    """The trajectory a :class:`TrajectorySpec` describes (paths relative to ``base_dir``);
    ``key`` is where the spec sits in ``source``, for error messages."""
    return trajectory_from_survey(Pose(), spec, None, base_dir, source, key)


def trajectory_from_survey(
    pose: Pose,
    spec: TrajectorySpec | None,
    mount: Pose | None,
    base_dir: Path,
    source: str | Path = "survey",
    key: str = "trajectory",
) -> Trajectory:
    """The sensor's trajectory described by a survey's ``pose``/``trajectory`` and ``mount``
    (``key``: where the trajectory sits in ``source``, for error messages)."""
    still = _motionless_pose(spec) if spec is not None else pose
    if still is not None:
        platform: Trajectory = StaticTrajectory.from_pose(still)
    elif spec is not None and spec.waypoints is not None:
        w = spec.waypoints
        rot = np.stack([rotation_from_rpy_deg(p.rotation_deg) for p in w])
        platform = WaypointTrajectory(
            np.array([p.time_s for p in w]),
            np.array([p.position_m for p in w], dtype=np.float64),
            quaternion_from_matrix(rot),
            spline=spec.interpolation == "spline",
        )
    elif spec is not None and spec.file is not None:
        path = Path(spec.file)
        platform = _read_pose_file(
            spec, path if path.is_absolute() else base_dir / path, source, key
        )
    else:
        assert spec is not None
        start = spec.start or Pose()
        platform = ConstantMotion(
            rotation_from_rpy_deg(start.rotation_deg),
            np.asarray(start.position_m, dtype=np.float64),
            np.asarray(spec.velocity_mps or [0.0, 0.0, 0.0], dtype=np.float64),
            float(np.radians(spec.yaw_rate_deg_s)),
        )
    if spec is not None and spec.swing is not None and spec.swing.amplitude_deg > 0:
        sw = spec.swing
        platform = Swinging(
            platform,
            ("roll", "pitch", "yaw").index(sw.axis),
            float(np.radians(sw.amplitude_deg)),
            sw.period_s,
            float(np.radians(sw.phase_deg)),
        )
    if mount is None:
        return platform
    mount_rot = rotation_from_rpy_deg(mount.rotation_deg)
    mount_pos = np.asarray(mount.position_m, dtype=np.float64)
    if isinstance(platform, StaticTrajectory):
        return StaticTrajectory(platform.rotation @ mount_rot,
                                platform.rotation @ mount_pos + platform.position_m)  # fmt: skip
    return Mounted(platform, mount_rot, mount_pos)
