"""What a run of the pipeline takes and gives besides the cloud: which pulses it scans and
how it reports them (:class:`Window`), a survey's frames (:class:`Frame`), the running
totals of a written scan (:class:`ScanSummary`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from ..io.poses import kitti_line
from ..labels import count_labels, named_counts
from ..pointcloud import PointCloud

__all__ = ["Frame", "OutputFrame", "ProgressCallback", "ScanSummary", "Window"]

#: Called after each chunk with (pulses done, pulses in all).
ProgressCallback = Callable[[int, int], None]

#: Where points are reported: ``sensor`` (the sensor frame at each point's own firing),
#: ``world``, or ``sensor_compensated`` (the sensor frame at the window's reference time).
OutputFrame = Literal["sensor", "world", "sensor_compensated"]


@dataclass(frozen=True)
class Window:
    """Which pulses a run scans, and how it reports them.

    Attributes
    ----------
    start, stop : int
        Pulses ``start <= pulse_id < stop`` (``stop`` None: to the end of the survey).
    frame : OutputFrame, optional
        The output frame; None takes the survey's ``output.frame``.
    time_s : float
        The window's reference time: ``time_s`` of the points counts from it, and
        ``sensor_compensated`` reports in the sensor frame at that time.
    """

    start: int = 0
    stop: int | None = None
    frame: OutputFrame | None = None
    time_s: float = 0.0


@dataclass(frozen=True)
class Frame:
    """A frame of a survey: pulses ``start..stop``, its reference (first firing) time and
    the sensor's world-from-sensor pose then."""

    index: int
    start: int
    stop: int
    time_s: float
    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]

    @property
    def kitti_pose(self) -> str:
        """The pose as a KITTI poses.txt line (3x4 row-major)."""
        return kitti_line(self.rotation, self.position_m)

    def window(self, frame: OutputFrame | None = None) -> Window:
        """The frame's pulses, reported in ``frame`` with ``time_s`` from its first firing."""
        return Window(self.start, self.stop, frame, self.time_s)


@dataclass
class ScanSummary:
    """Running totals of a scan that is written chunk by chunk.

    Attributes
    ----------
    pulses : int
        Pulses fired.
    points : int
        Returns detected.
    seconds : float
        Wall time of scanning and writing.
    label_counts : dict of int to int
        Points per SemanticKITTI id.
    range_m, intensity : tuple of float
        (min, max) of the measured range and of the intensity.
    files : list of Path
        Files written.
    """

    pulses: int
    points: int = 0
    seconds: float = 0.0
    label_counts: dict[int, int] = field(default_factory=dict)
    range_m: tuple[float, float] = (float("inf"), float("-inf"))
    intensity: tuple[float, float] = (float("inf"), float("-inf"))
    files: list[Path] = field(default_factory=list)

    def add(self, chunk: PointCloud) -> None:
        """Count a chunk in."""
        if len(chunk) == 0:
            return
        self.points += len(chunk)
        count_labels(chunk["label"], self.label_counts)
        r, i = chunk["range_m"], chunk["intensity"]
        self.range_m = (min(self.range_m[0], float(r.min())), max(self.range_m[1], float(r.max())))
        self.intensity = (
            min(self.intensity[0], float(i.min())),
            max(self.intensity[1], float(i.max())),
        )

    def named_label_counts(self) -> dict[str, int]:
        """Points per class name, most common first."""
        return named_counts(self.label_counts)
