"""Pose files: TUM and KITTI trajectories, ``times.txt`` and an identity ``calib.txt``.

Every pose is world from sensor. A TUM line is ``t x y z qx qy qz qw`` (quaternion
scalar last); a KITTI line is the 3x4 matrix ``[R | p]`` row-major. Each file holds one
line per frame, ends with a newline, and is written atomically.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import OutputError
from .atomic import atomic_path, write_atomic

__all__ = [
    "CALIB_KEYS",
    "PoseStreams",
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


class PoseStreams:
    """The pose files of a sequence, written a frame at a time: ``poses_tum.txt``,
    ``poses_kitti.txt`` and ``times.txt`` in ``folder``, the same bytes as
    :func:`write_tum_poses`, :func:`write_kitti_poses` and :func:`write_times` give for
    the whole list, with nothing held per frame (an hour's drive of 36,000 frames keeps
    no list of poses). Each file grows under a temporary name and is renamed in by
    :meth:`close`; :meth:`abort` drops them.

    Parameters
    ----------
    folder : Path
        Where the three files go (created if needed).
    """

    NAMES = ("poses_tum.txt", "poses_kitti.txt", "times.txt")

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"{folder}: cannot create the folder ({exc.strerror})") from None
        self.paths = [folder / name for name in self.NAMES]
        # Each file under atomic_path, as the frame writers' (a killed run's leftovers of
        # the same names go first; renamed in on close, dropped on abort).
        self.stack = ExitStack()
        self.handles: list[TextIO] = [
            self.stack.enter_context(open(self.stack.enter_context(atomic_path(p)), "w",  # noqa: SIM115
                                          encoding="utf-8"))
            for p in self.paths
        ]  # fmt: skip
        self.lines = 0

    def add(
        self,
        time_s: float,
        rotation: NDArray[np.float64],
        position_m: NDArray[np.float64],
        quaternion: NDArray[np.float64],
    ) -> None:
        """Append one frame's pose: time (s), world-from-sensor rotation (3, 3), position
        (3,) in m and the rotation as ``qx qy qz qw`` (4,)."""
        tum, kitti, times = self.handles
        tum.write(tum_line(time_s, position_m, quaternion) + "\n")
        kitti.write(kitti_line(rotation, position_m) + "\n")
        times.write(format(time_s, ".9f") + "\n")
        self.lines += 1

    def close(self) -> list[Path]:
        """Finish the three files and rename them into place; returns their paths."""
        if self.lines == 0:  # (as the whole-list writers write an empty list)
            for handle in self.handles:
                handle.write("\n")
        self.stack.close()
        return list(self.paths)

    def abort(self) -> None:
        """Drop the unfinished files."""
        err = RuntimeError("aborted")
        self.stack.__exit__(RuntimeError, err, None)


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
