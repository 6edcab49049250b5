"""Poses of a capture's frames: a KITTI poses file, the capture's own per-column poses, or
KISS-ICP odometry (``pip install 'lidar-sim[odometry]'``).

Every pose is world from sensor, a 4 x 4 homogeneous matrix (translation in m): the sensor
frame's points ``x`` of frame ``k`` are ``poses[k] @ [x, 1]`` in the world.

KISS-ICP (Vizzo et al., "KISS-ICP: In Defense of Point-to-Point ICP", RA-L 2023) registers
each frame to a local voxel map. It deskews a frame with a constant-velocity model: a point
at normalised time ``s`` (0 at the frame's first firing, 1 at its last) is moved by the
fraction ``s - 1/2`` of the motion it estimated over the previous frame, so the frame's pose
is the sensor's pose at mid-frame. Started cold, it has no motion to deskew the first two
frames with: they enter its map skewed, and the third frame, deskewed, is registered against
them. On the real OS1-128 capture the tests read (0.25 m a frame), that start costs 7-11 cm
on the step from frame 1 to frame 2, whatever the voxel size. :func:`estimate_poses`
therefore warms it up: a first run on the first two frames gives the motion over the first
step, and the run that counts starts with it, so every frame is deskewed. The steps then
agree with the capture's reference poses within 2.5 and 4.4 cm and 0.06 deg
(``tests/test_poses_estimate.py``); on the generated streets of ``tests/test_odometry.py``
the end error is 0.30 % (HDL-64E), 0.76 % (RS-Helios 1615) and 1.69 % (RS-Helios 5515) of
the 79 m drive, against 0.65, 0.99 and 1.73 % with KISS-ICP's default configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .errors import InputError, OutputError
from .io.poses import read_kitti_poses
from .pointcloud import PointCloud

__all__ = ["MAX_RANGE_PERCENTILE", "estimate_poses", "kiss_icp_config", "poses_for"]

#: KISS-ICP's ``max_range`` is this percentile of the frames' ranges: the sensor's reach in
#: this place, without the few stray far returns a real frame has (the OS1-128 capture's
#: farthest of 320,000 returns is 247 m, its 99.9th percentile 77 m).
MAX_RANGE_PERCENTILE = 99.9
#: KISS-ICP's own rule for its voxel size: ``max_range / 100``.
_VOXELS_PER_RANGE = 100.0


def _kiss_icp() -> tuple[Any, Any]:
    """KISS-ICP's ``KISSConfig`` and ``KissICP``, or a clear error."""
    try:
        from kiss_icp.config import KISSConfig
        from kiss_icp.kiss_icp import KissICP
    except ImportError:
        raise InputError(
            "kiss-icp",
            "estimating poses needs KISS-ICP (or give a poses file): "
            "pip install 'lidar-sim[odometry]'",
        ) from None
    return KISSConfig, KissICP


def _source(frames: list[PointCloud]) -> str:
    """The frames' capture, for messages."""
    return str(frames[0].meta.get("source", "frames")) if frames else "frames"


def _ranges_m(cloud: PointCloud) -> NDArray[np.float64]:
    """(N,) ranges of a frame's points, m: ``range_m`` where measured, else ``|xyz|``."""
    if "range_m" in cloud:
        return cloud["range_m"].astype(np.float64)
    return np.linalg.norm(cloud["xyz"].astype(np.float64), axis=1)


def kiss_icp_config(frames: list[PointCloud], *, deskew: bool = True) -> Any:
    """KISS-ICP's configuration suited to the frames' sensor and place.

    Parameters
    ----------
    frames : list of PointCloud
        The frames to register.
    deskew : bool
        KISS-ICP's own deskewing (``data.deskew``).

    Returns
    -------
    kiss_icp.config.KISSConfig
        ``data.max_range`` the :data:`MAX_RANGE_PERCENTILE` percentile of all the frames'
        ranges (m), ``data.min_range`` 0, ``mapping.voxel_size`` ``max_range / 100`` (m),
        KISS-ICP's defaults otherwise.
    """
    kiss_config, _ = _kiss_icp()
    ranges = np.concatenate([_ranges_m(f) for f in frames])
    ranges = ranges[np.isfinite(ranges) & (ranges > 0)]
    if len(ranges) == 0:
        raise InputError(_source(frames), "no point with a range: nothing to register")
    config = kiss_config()
    config.data.max_range = float(np.percentile(ranges, MAX_RANGE_PERCENTILE))
    config.data.min_range = 0.0
    config.data.deskew = deskew
    config.mapping.voxel_size = config.data.max_range / _VOXELS_PER_RANGE
    return config


def _normalised_times(cloud: PointCloud) -> NDArray[np.float64]:
    """(N,) the points' times scaled to [0, 1] over the frame (KISS-ICP's timestamps); 1/2
    for every point of a frame without times (deskewing then moves nothing)."""
    n = len(cloud)
    if "time_s" not in cloud or n == 0:
        return np.full(n, 0.5)
    t = cloud["time_s"].astype(np.float64)
    span = float(np.ptp(t))
    if not np.isfinite(span) or span <= 0.0:
        return np.full(n, 0.5)
    return (t - t.min()) / span


def _register(
    odometry: Any, points: list[NDArray[np.float64]], times: list[NDArray[np.float64]]
) -> NDArray[np.float64]:
    """(F, 4, 4) KISS-ICP's pose of each frame, registered in order."""
    poses = np.zeros((len(points), 4, 4))
    for k, (xyz, s) in enumerate(zip(points, times, strict=True)):  # one registration a frame
        odometry.register_frame(xyz, s)
        poses[k] = odometry.last_pose
    return poses


def estimate_poses(frames: list[PointCloud], *, deskew: bool = True) -> NDArray[np.float64]:
    """The frames' poses by KISS-ICP odometry (see the module).

    Parameters
    ----------
    frames : list of PointCloud
        The capture's frames, in time order: ``xyz`` (N, 3) in the sensor frame, m;
        ``time_s`` (N,) per point, s, for deskewing (a frame without it is not deskewed);
        ``range_m`` (N,) if measured (else ``|xyz|``), for the configuration
        (:func:`kiss_icp_config`).
    deskew : bool
        Deskew each frame by its points' times (KISS-ICP's constant-velocity model, warmed
        up on the first two frames). Without, KISS-ICP registers the frames as they are.

    Returns
    -------
    (F, 4, 4) ndarray of float64
        World-from-sensor poses (translation in m), the world being frame 0's sensor frame:
        ``poses[0]`` is the identity.

    Raises
    ------
    InputError
        If KISS-ICP is not installed (the message names the extra), there is no frame, or a
        frame has no point.
    """
    _, kiss_icp = _kiss_icp()
    if not frames:
        raise InputError("frames", "no frame to estimate poses of")
    empty = [k for k, f in enumerate(frames) if len(f) == 0]
    if empty:
        raise InputError(_source(frames), f"frame {empty[0]} has no point: nothing to register")
    points = [f["xyz"].astype(np.float64) for f in frames]
    times = [_normalised_times(f) for f in frames]
    config = kiss_icp_config(frames, deskew=deskew)
    odometry = kiss_icp(config)
    if deskew and len(frames) > 1:
        # KISS-ICP's motion over the first step, from the first two frames as they are,
        # deskews the first two frames of the run that counts.
        warm_up = kiss_icp(config)
        _register(warm_up, points[:2], times[:2])
        odometry.last_delta = warm_up.last_delta
    poses = _register(odometry, points, times)
    world = np.linalg.inv(poses[0]) @ poses  # frame 0's sensor frame (a warm start moves it)
    world[0] = np.eye(4)
    return world


def _file_poses(path: Path, count: int) -> NDArray[np.float64]:
    """(F, 4, 4) the poses of a KITTI file, checked against the number of frames."""
    try:
        rows = read_kitti_poses(path)
    except OutputError as exc:  # read_kitti_poses names the file itself
        raise InputError(path, str(exc).removeprefix(f"{path}: ")) from None
    if len(rows) != count:
        raise InputError(
            path,
            f"{len(rows)} poses for {count} frames; expected one pose (line) a frame",
        )
    if not np.all(np.isfinite(rows)):
        raise InputError(path, "a pose holds a value that is not a finite number")
    poses = np.tile(np.eye(4), (count, 1, 1))
    poses[:, :3, :] = rows
    return poses


def _is_identity(poses: list[NDArray[np.float64]]) -> bool:
    return all(np.array_equal(p, np.broadcast_to(np.eye(4), p.shape)) for p in poses)


def poses_for(
    frames: list[PointCloud],
    poses_file: str | Path | None = None,
    column_poses: list[NDArray[np.float64]] | None = None,
    *,
    deskew: bool = True,
) -> NDArray[np.float64]:
    """The frames' poses, from the best source there is.

    In order of preference: a KITTI poses file (one line a frame), the capture's own
    per-column poses (:func:`simulator.io.ouster.column_poses`) unless all are the identity,
    else KISS-ICP (:func:`estimate_poses`).

    Parameters
    ----------
    frames : list of PointCloud
        The capture's frames, in time order.
    poses_file : str or Path, optional
        A KITTI poses file: 12 numbers a line, the top 3 rows of the world-from-sensor 4 x 4.
    column_poses : list of (W, 4, 4) ndarray, optional
        Each frame's per-column world-from-sensor poses; a frame's pose is that of its
        middle column (column ``W // 2``, the mid-frame time KISS-ICP's poses also refer to).
    deskew : bool
        Passed to :func:`estimate_poses`.

    Returns
    -------
    (F, 4, 4) ndarray of float64
        World-from-sensor poses, translation in m: the file's or the capture's as they are,
        KISS-ICP's with frame 0 at the identity.

    Raises
    ------
    InputError
        If the poses file cannot be read, or its line count or the column poses' frame count
        is not the number of frames; as :func:`estimate_poses` otherwise.
    """
    if poses_file is not None:
        return _file_poses(Path(poses_file), len(frames))
    if column_poses is not None and not _is_identity(column_poses):
        if len(column_poses) != len(frames):
            raise InputError(
                _source(frames),
                f"{len(column_poses)} frames of column poses for {len(frames)} frames",
            )
        return np.stack([np.asarray(p, np.float64)[len(p) // 2] for p in column_poses])
    return estimate_poses(frames, deskew=deskew)
