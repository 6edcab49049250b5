"""The point layouts of a ``sensor_msgs/PointCloud2`` as the drivers publish them, and a
cloud encoded in each.

Every layout is little-endian, one row (``height`` 1), with the fields, types, offsets,
point step and time unit of its driver:

``lidar-sim``
    The ROS 2 velodyne driver's fields (below), then the ground truth this simulator
    knows: ``return_number`` and ``num_returns`` uint8 at 22 and 23, ``label`` and
    ``instance`` uint16 at 24 and 26 (SemanticKITTI ids); 28 bytes. A tool that looks its
    fields up by name reads it as a velodyne cloud.
``velodyne``
    ros-drivers/velodyne (ROS 2), ``velodyne_pointcloud/src/lib/pointcloudXYZIRT.cpp``:
    ``x y z intensity`` float32 at 0, 4, 8, 12, ``ring`` uint16 at 16, ``time`` float32
    at 18 (seconds after the message stamp), packed by ``addPointField``: 22 bytes.
``autoware``
    Autoware's and nebula's ``PointXYZIRCAEDT`` (tier4/nebula,
    ``nebula_common/include/nebula_common/point_types.hpp``): ``x y z`` float32 at 0, 4,
    8, ``intensity`` uint8 at 12, ``return_type`` uint8 at 13, ``channel`` uint16 at 14,
    ``azimuth`` and ``elevation`` float32 at 16 and 20 (radians: ``atan2(y, x)`` in
    [0, 2 pi) and ``atan2(z, hypot(x, y))``, as ouster-ros' Autoware adapter writes them),
    ``distance`` float32 at 24 (m from the cloud frame's origin), ``time_stamp`` uint32 at
    28 (nanoseconds after the message stamp): 32 bytes. ``return_type`` follows
    ``autoware::point_types::ReturnType`` (:data:`AUTOWARE_RETURN_TYPES`).
``ouster``
    ouster-ros' ``ouster_ros::Point`` (``ouster-ros/include/ouster_ros/os_point.h``, a
    PCL point of ``PCL_ADD_POINT4D`` aligned to 16 bytes): ``x y z`` float32 at 0, 4, 8,
    ``intensity`` float32 at 16 (the signal), ``t`` uint32 at 20 (nanoseconds after the
    message stamp), ``reflectivity`` uint16 at 24, ``ring`` uint16 at 26, ``ambient``
    uint16 at 28, ``range`` uint32 at 32 (millimetres): 48 bytes. The simulator has no
    photon counts: ``intensity`` and ``reflectivity`` both carry its reading (the latter
    rounded), ``ambient`` is 0. The driver publishes an organised image (one row a beam);
    these clouds are one row of the detected points.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..config.rosbag import BAG_STORAGES, POINT_LAYOUTS, BagStorage, PointLayout, Rosbag2Spec
from ..errors import OutputError
from ..pointcloud import PointCloud

__all__ = [
    "AUTOWARE_RETURN_TYPES",
    "BAG_STORAGES",
    "POINT_LAYOUTS",
    "BagOptions",
    "PointLayout",
    "encode",
    "layout_dtype",
]

#: ``autoware::point_types::ReturnType``, the codes of ``PointXYZIRCAEDT.return_type``.
AUTOWARE_RETURN_TYPES = {
    "invalid": 0, "single_strongest": 1, "single_last": 2, "dual_strongest_first": 3,
    "dual_strongest_last": 4, "dual_weak_first": 5, "dual_weak_last": 6, "dual_only": 7,
}  # fmt: skip

_VELODYNE = [("x", "<f4", 0), ("y", "<f4", 4), ("z", "<f4", 8), ("intensity", "<f4", 12),
             ("ring", "<u2", 16), ("time", "<f4", 18)]  # fmt: skip
_FIELDS: dict[str, tuple[list[tuple[str, str, int]], int]] = {
    "velodyne": (_VELODYNE, 22),
    "lidar-sim": ([*_VELODYNE, ("return_number", "u1", 22), ("num_returns", "u1", 23),
                   ("label", "<u2", 24), ("instance", "<u2", 26)], 28),
    "autoware": ([("x", "<f4", 0), ("y", "<f4", 4), ("z", "<f4", 8), ("intensity", "u1", 12),
                  ("return_type", "u1", 13), ("channel", "<u2", 14), ("azimuth", "<f4", 16),
                  ("elevation", "<f4", 20), ("distance", "<f4", 24),
                  ("time_stamp", "<u4", 28)], 32),
    "ouster": ([("x", "<f4", 0), ("y", "<f4", 4), ("z", "<f4", 8), ("intensity", "<f4", 16),
                ("t", "<u4", 20), ("reflectivity", "<u2", 24), ("ring", "<u2", 26),
                ("ambient", "<u2", 28), ("range", "<u4", 32)], 48),
}  # fmt: skip


@dataclass(frozen=True)
class BagOptions:
    """How a ROS 2 bag is written.

    Attributes
    ----------
    storage : BagStorage
        The storage plugin (:data:`~simulator.config.rosbag.BAG_STORAGES`): MCAP, ROS 2's
        default since Iron, or sqlite3 (Humble's).
    point_layout : PointLayout
        The point layout of the ``PointCloud2`` messages (the module's table).
    frame_id : str
        The clouds' ``header.frame_id`` and the child frame of the poses on ``/tf``.
    """

    storage: BagStorage = "mcap"
    point_layout: PointLayout = "lidar-sim"
    frame_id: str = "lidar"

    def __post_init__(self) -> None:
        if self.storage not in BAG_STORAGES:
            expected = " or ".join(BAG_STORAGES)
            raise OutputError(f"storage {self.storage!r}: expected {expected}")
        if self.point_layout not in POINT_LAYOUTS:
            expected = ", ".join(POINT_LAYOUTS)
            raise OutputError(f"point layout {self.point_layout!r}: expected one of {expected}")

    @property
    def storage_suffix(self) -> str:
        """The extension of the storage file rosbag2 (and rosbags) names for the bag's
        folder: ``.mcap``, or ``.db3`` for sqlite3."""
        return {"mcap": ".mcap", "sqlite3": ".db3"}[self.storage]

    @classmethod
    def of(cls, spec: Rosbag2Spec | None) -> BagOptions:
        """The options of a dataset spec's ``rosbag2:`` section (None: the defaults)."""
        spec = spec or Rosbag2Spec()
        return cls(spec.storage, spec.point_layout, spec.frame_id)


def layout_dtype(layout: PointLayout) -> np.dtype:
    """The numpy dtype of one point of ``layout`` (names, types, offsets, point step)."""
    fields, step = _FIELDS[layout]
    return np.dtype(
        {
            "names": [f[0] for f in fields],
            "formats": [f[1] for f in fields],
            "offsets": [f[2] for f in fields],
            "itemsize": step,
        }
    )


def _ns(time_s: NDArray[np.floating]) -> NDArray[np.uint32]:
    """Seconds after the stamp as uint32 nanoseconds (rounded; at least 0)."""
    return np.clip(np.rint(np.asarray(time_s, np.float64) * 1e9), 0, 2**32 - 1).astype(np.uint32)


def autoware_return_types(cloud: PointCloud, return_mode: str) -> NDArray[np.uint8]:
    """(N,) uint8: each point's ``autoware::point_types::ReturnType`` under the scanner's
    ``return_mode``.

    ``strongest`` -> single strongest; ``last`` -> single last; ``first`` -> single
    strongest (the enum has no single-first code: a single-return sensor's one return);
    ``dual``: a pulse's only return -> dual only, else its nearer and farther returns are
    the strongest and the weak one by their intensity (the reading ranks them as the
    echoes' energy does); ``multi`` -> invalid (no code for a third return).
    """
    codes = AUTOWARE_RETURN_TYPES
    n = len(cloud)
    if return_mode in ("strongest", "first"):
        return np.full(n, codes["single_strongest"], np.uint8)
    if return_mode == "last":
        return np.full(n, codes["single_last"], np.uint8)
    if return_mode != "dual":
        return np.full(n, codes["invalid"], np.uint8)
    out = np.full(n, codes["dual_only"], np.uint8)
    number, total = cloud["return_number"], cloud["num_returns"]
    first = np.flatnonzero((total == 2) & (number == 1))
    first = first[first + 1 < n]
    first = first[number[first + 1] == 2]  # (a pulse's returns are consecutive)
    second = first + 1
    intensity = cloud["intensity"]
    near_strong = intensity[first] >= intensity[second]
    out[first] = np.where(near_strong, codes["dual_strongest_first"], codes["dual_weak_first"])
    out[second] = np.where(near_strong, codes["dual_weak_last"], codes["dual_strongest_last"])
    return out


def encode(cloud: PointCloud, layout: PointLayout, return_mode: str = "strongest") -> NDArray:
    """The points of ``cloud`` (sensor frame, ``time_s`` after the message stamp) as a
    structured array of ``layout`` (:func:`layout_dtype`), ready to be the message's data.
    ``return_mode`` (the scanner's) sets Autoware's return types."""
    data = np.zeros(len(cloud), dtype=layout_dtype(layout))
    xyz = cloud["xyz"]
    data["x"], data["y"], data["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    intensity = cloud["intensity"]
    if layout in ("velodyne", "lidar-sim"):
        data["intensity"], data["ring"], data["time"] = intensity, cloud["ring"], cloud["time_s"]
    if layout == "lidar-sim":
        for name in ("return_number", "num_returns", "label", "instance"):
            data[name] = cloud[name]
    if layout == "autoware":
        x, y, z = (xyz[:, k].astype(np.float64) for k in range(3))
        data["intensity"] = np.clip(np.rint(intensity), 0, 255)
        data["return_type"] = autoware_return_types(cloud, return_mode)
        data["channel"] = cloud["ring"]
        azimuth = np.mod(np.arctan2(y, x), 2.0 * np.pi).astype(np.float32)
        data["azimuth"] = np.where(azimuth >= np.float32(2.0 * np.pi), 0.0, azimuth)
        data["elevation"] = np.arctan2(z, np.hypot(x, y))
        data["distance"] = np.sqrt(x * x + y * y + z * z)
        data["time_stamp"] = _ns(cloud["time_s"])
    if layout == "ouster":
        data["intensity"] = intensity
        data["t"] = _ns(cloud["time_s"])
        data["reflectivity"] = np.clip(np.rint(intensity), 0, 65535)
        data["ring"] = cloud["ring"]
        data["range"] = np.clip(np.rint(cloud["range_m"].astype(np.float64) * 1e3), 0, 2**32 - 1)
    return data
