"""Dataset models: a root seed, a layout, and groups of sequences."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from .base import Model, NonNegFloat
from .pose import Pose, TrajectorySpec
from .rosbag import Rosbag2Spec
from .weather import Weather

__all__ = ["DATASET_LAYOUTS", "DatasetSpec", "LayoutName", "SequenceGroup"]

#: A dataset's layout (:mod:`simulator.io.layouts` writes each).
LayoutName = Literal["semantickitti", "nuscenes", "npz", "openpcdet", "kitti", "rosbag2"]
DATASET_LAYOUTS: tuple[LayoutName, ...] = typing.get_args(LayoutName)


class SequenceGroup(Model):
    """Sequences of one kind: a scene source, a scanner, a trajectory, a length."""

    name: Annotated[str, Field(min_length=1)]
    generator: Literal["farm_yard", "street"] | None = None
    scene: str | None = None
    scanner: str = "rs-helios-5515"
    scanner_overrides: dict[str, Any] = Field(default_factory=dict)
    sequences: Annotated[int, Field(ge=1, le=100_000)] = 1
    frames: Annotated[int, Field(ge=1, le=100_000)] = 3
    trajectory: TrajectorySpec = Field(
        default_factory=lambda: TrajectorySpec(start=Pose(), velocity_mps=[5.0, 0.0, 0.0])
    )
    mount: Pose = Field(default_factory=lambda: Pose(position_m=[0.0, 0.0, 1.8]))
    start_jitter_m: NonNegFloat = 0.0
    #: The group's conditions (groups may differ, so one dataset mixes them).
    weather: Weather = Field(default_factory=Weather)
    #: Points in the sensor frame at each frame's reference time (motion-compensated, as
    #: KITTI's and nuScenes' are) instead of at each pulse's own time; None: the layout's
    #: convention (``openpcdet`` compensates, the others do not).
    motion_compensated: bool | None = None


class DatasetSpec(Model):
    """A dataset: a root seed, a layout, and groups of sequences."""

    seed: Annotated[int, Field(ge=0, lt=2**64)] = 0
    layout: LayoutName = "semantickitti"
    range_images: bool = False
    #: ``nuscenes`` layout: every this many frames is an annotated key frame (a sample);
    #: the frames between are sweeps (nuScenes itself: key frames at 2 Hz, so 5 at 10 Hz).
    keyframe_every: Annotated[int, Field(ge=1, le=1000)] = 1
    #: ``rosbag2`` layout: the bags' storage, point layout and frame id (absent: MCAP,
    #: ``lidar-sim``, ``lidar``); refused with another layout.
    rosbag2: Rosbag2Spec | None = None
    groups: Annotated[list[SequenceGroup], Field(min_length=1)]

    @field_validator("rosbag2")
    @classmethod
    def _only_for_bags(cls, value: Rosbag2Spec | None, info: ValidationInfo) -> Rosbag2Spec | None:
        layout = info.data.get("layout")
        if value is not None and layout is not None and layout != "rosbag2":
            raise ValueError(
                f"a rosbag2 section is for layout rosbag2, and this spec's layout is {layout}; "
                "expected layout: rosbag2, or no rosbag2 section"
            )
        return value

    @model_validator(mode="after")
    def _bags_in_full(self) -> DatasetSpec:
        """A rosbag2 dataset's section with its defaults, so the manifest records them."""
        if self.layout == "rosbag2" and self.rosbag2 is None:
            self.rosbag2 = Rosbag2Spec()
        return self

    @field_validator("range_images")
    @classmethod
    def _not_in_bags(cls, value: bool, info: ValidationInfo) -> bool:
        if value and info.data.get("layout") == "rosbag2":
            raise ValueError(
                "true with layout rosbag2; expected false (a rosbag2 dataset holds bags "
                "only: range images come with the other layouts)"
            )
        return value

    @property
    def sample_count(self) -> int:
        """The samples the dataset holds: every frame of every sequence of every group."""
        return sum(g.sequences * g.frames for g in self.groups)
