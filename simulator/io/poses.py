"""Pose files: TUM and KITTI trajectories, ``times.txt`` and an identity ``calib.txt``.

Every pose is world from sensor. A TUM line is ``t x y z qx qy qz qw`` (quaternion
scalar last); a KITTI line is the 3x4 matrix ``[R | p]`` row-major. Each file holds one
line per frame, ends with a newline, and is written atomically.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import OutputError
from .atomic import write_atomic

__all__ = [
    "CALIB_KEYS",
    "kitti_line",
    "read_kitti_poses",
    "tum_line",
    "write_identity_calib",
    "write_kitti_poses",
    "write_times",
    "write_tum_poses",
]

#: The keys of a KITTI ``calib.txt`` (four camera projections and the velodyne-to-camera
#: transform).
CALIB_KEYS = ("P0", "P1", "P2", "P3", "Tr")
_IDENTITY_3X4 = "1 0 0 0 0 1 0 0 0 0 1 0"


def kitti_line(rotation: ArrayLike, position_m: ArrayLike) -> str:
    """A pose as a KITTI ``poses.txt`` line.

    Parameters
    ----------
    rotation : (3, 3) array of float
        World-from-sensor rotation.
    position_m : (3,) array of float
        Sensor position in the world, m.

    Returns
    -------
    str
        The 12 entries of ``[R | p]`` row-major, each ``{:.9e}``, space-separated.
    """
    rotation = np.asarray(rotation, dtype=np.float64)
    position_m = np.asarray(position_m, dtype=np.float64)
    matrix = np.hstack([rotation, position_m[:, None]])
    return " ".join(f"{v:.9e}" for v in matrix.ravel())


def tum_line(time_s: float, position_m: ArrayLike, quaternion: ArrayLike) -> str:
    """A pose as a TUM line ``t x y z qx qy qz qw``, every number ``{:.9f}``.

    Parameters
    ----------
    time_s : float
        Time of the pose, s.
    position_m : (3,) array of float
        Sensor position in the world, m.
    quaternion : (4,) array of float
        World-from-sensor rotation as ``qx qy qz qw``.
    """
    values = [*np.asarray(position_m, dtype=np.float64), *np.asarray(quaternion, np.float64)]
    return f"{time_s:.9f} " + " ".join(f"{v:.9f}" for v in values)


def _write_lines(path: Path, lines: list[str]) -> Path:
    return write_atomic(path, "\n".join(lines) + "\n")


def write_kitti_poses(path: str | Path, rotations: ArrayLike, positions_m: ArrayLike) -> Path:
    """Write a KITTI pose file, one :func:`kitti_line` per frame.

    Parameters
    ----------
    path : str or Path
        The file (``poses.txt``, ``poses_kitti.txt``).
    rotations : (F, 3, 3) array of float
        World-from-sensor rotations.
    positions_m : (F, 3) array of float
        Sensor positions in the world, m.
    """
    rot = np.asarray(rotations, dtype=np.float64).reshape(-1, 3, 3)
    pos = np.asarray(positions_m, dtype=np.float64).reshape(-1, 3)
    return _write_lines(Path(path), [kitti_line(r, p) for r, p in zip(rot, pos, strict=True)])


def write_tum_poses(
    path: str | Path, times_s: ArrayLike, positions_m: ArrayLike, quaternions: ArrayLike
) -> Path:
    """Write a TUM pose file, one :func:`tum_line` per frame.

    Parameters
    ----------
    path : str or Path
        The file (``poses_tum.txt``).
    times_s : (F,) array of float
        Times of the poses, s.
    positions_m : (F, 3) array of float
        Sensor positions in the world, m.
    quaternions : (F, 4) array of float
        World-from-sensor rotations as ``qx qy qz qw``.
    """
    t = np.asarray(times_s, dtype=np.float64).reshape(-1)
    pos = np.asarray(positions_m, dtype=np.float64).reshape(-1, 3)
    q = np.asarray(quaternions, dtype=np.float64).reshape(-1, 4)
    lines = [tum_line(ti, p, qi) for ti, p, qi in zip(t, pos, q, strict=True)]
    return _write_lines(Path(path), lines)


def write_times(path: str | Path, times_s: ArrayLike, number_format: str = ".9f") -> Path:
    """Write ``times.txt``: one time a line.

    Parameters
    ----------
    path : str or Path
        The file.
    times_s : (F,) array of float
        Frame times, s.
    number_format : str
        Format spec of a time: ``".9f"`` in a sequence folder, ``".9e"`` in a dataset's
        SemanticKITTI sequence (as SemanticKITTI's own ``times.txt``).
    """
    t = np.asarray(times_s, dtype=np.float64).reshape(-1)
    return _write_lines(Path(path), [format(v, number_format) for v in t])


def write_identity_calib(path: str | Path) -> Path:
    """Write a KITTI ``calib.txt`` whose projections and ``Tr`` are all the identity 3x4
    (the points are already in the frame the poses are of)."""
    return write_atomic(path, "".join(f"{k}: {_IDENTITY_3X4}\n" for k in CALIB_KEYS))


def read_kitti_poses(path: str | Path) -> NDArray[np.float64]:
    """Read a KITTI pose file.

    Returns
    -------
    (F, 3, 4) ndarray of float64
        World-from-sensor ``[R | p]`` per line.

    Raises
    ------
    OutputError
        If the file is missing or a line does not hold 12 numbers.
    """
    path = Path(path)
    try:
        values = np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as exc:
        raise OutputError(
            f"{path}: cannot read the poses ({exc}); expected 12 numbers a line"
        ) from None
    if values.size and values.shape[1] != 12:
        raise OutputError(f"{path}: {values.shape[1]} columns; expected 12 (a 3x4 pose a line)")
    return values.reshape(-1, 3, 4)
