"""How a ROS 2 bag is written: its storage and its clouds' point layout, the one home of
both lists of choices (the ``sequence`` command's options, a dataset spec's ``rosbag2:``
section and :class:`simulator.io.pointcloud2.BagOptions` all take them from here)."""

from __future__ import annotations

import typing
from typing import Annotated, Literal

from pydantic import Field, field_validator

from .base import Model

__all__ = [
    "BAG_STORAGES",
    "POINT_LAYOUTS",
    "WORLD_FRAME_ID",
    "BagStorage",
    "PointLayout",
    "Rosbag2Spec",
]

#: A bag's storage plugin: MCAP (ROS 2's default since Iron) or sqlite3 (Humble's).
BagStorage = Literal["mcap", "sqlite3"]
#: A ``PointCloud2``'s point layout: this simulator's own (the velodyne driver's fields and
#: the ground truth), or a driver's (:mod:`simulator.io.pointcloud2` has the table).
PointLayout = Literal["lidar-sim", "velodyne", "autoware", "ouster"]
BAG_STORAGES: tuple[BagStorage, ...] = typing.get_args(BagStorage)
POINT_LAYOUTS: tuple[PointLayout, ...] = typing.get_args(PointLayout)
#: The parent frame of the poses on ``/tf``.
WORLD_FRAME_ID = "map"


class Rosbag2Spec(Model):
    """A dataset's bags (``layout: rosbag2``): storage, point layout and the clouds'
    ``frame_id`` (the child frame of the poses on ``/tf``, whose parent is ``map``)."""

    storage: BagStorage = "mcap"
    point_layout: PointLayout = "lidar-sim"
    frame_id: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_/]*$")] = "lidar"

    @field_validator("frame_id")
    @classmethod
    def _not_the_world(cls, value: str) -> str:
        if value == WORLD_FRAME_ID:
            raise ValueError(
                f"{value!r} is the poses' parent frame on /tf; expected the sensor's own "
                "frame (e.g. lidar, velodyne_top)"
            )
        return value
