"""Frame sinks: where the frames of a sequence go, one frame at a time.

:class:`FileFrameSink` writes each frame to ``frames/NNNNNN.EXT`` in any point format
(through the source's own chunked writer, bounded memory); :class:`RosbagFrameSink` writes
each as a ``PointCloud2`` with its pose as ``/tf`` to one ROS 2 bag (:mod:`.rosbag`).
:func:`open_frame_sink` picks one by format name. A sequence writer then runs one loop:
``write_frame`` per frame, ``close`` at the end, ``abort`` on failure.

The frame source is duck-typed (:class:`FrameSource`, what
:class:`simulator.pipeline.simulation.Simulation` offers), so that io does not import the pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from ..errors import OutputError
from ..pointcloud import PointCloud
from . import FORMATS
from .atomic import remove_stale_frame_temps, without_stale_sweep
from .pointcloud2 import BagOptions
from .rosbag import RosbagWriter

__all__ = [
    "FileFrameSink",
    "FrameLike",
    "FrameSink",
    "FrameSource",
    "RosbagFrameSink",
    "open_frame_sink",
]


class FrameLike(Protocol):
    """A frame: pulses ``start..stop``, reference time ``time_s`` (s from the survey
    start) and the world-from-sensor pose then (``rotation`` (3, 3), ``position_m`` (3,))."""

    index: int
    start: int
    stop: int
    time_s: float
    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]

    def window(self, frame: Any = None) -> Any:
        """The frame's pulses as a run's window, reported in ``frame``."""


class FrameSource(Protocol):
    """What makes a frame's points (``pipeline.Simulation``)."""

    def frame_cloud(self, frame: Any, output_frame: Any = None) -> PointCloud:
        """The frame's points in ``output_frame``, ``time_s`` relative to its reference time."""

    def write(self, paths: list[str | Path], *, window: Any) -> Any:
        """Write a window's pulses to ``paths``; returns totals with ``points`` and
        ``files``."""


class FrameSink(Protocol):
    """Where frames go."""

    def write_frame(
        self,
        source: FrameSource,
        frame: FrameLike,
        quaternion: NDArray[np.float64],
        output_frame: str | None = None,
    ) -> tuple[int, list[Path]]:
        """Write one frame, its points in ``output_frame`` (None: the survey's); returns
        its point count and the files finished with it."""

    def close(self) -> list[Path]:
        """Finish; returns the files finished only now."""

    def abort(self) -> None:
        """Stop after a failure, leaving no partial file of its own."""


class FileFrameSink:
    """Each frame to ``folder/NNNNNN.EXT`` (``.bin`` adds its ``.label``).

    Parameters
    ----------
    folder : Path
        Created if needed.
    ext : str
        A point format's extension without the dot (``npz``, ``bin``, ``pcd``, ...).
    """

    def __init__(self, folder: Path, ext: str) -> None:
        if f".{ext.lower()}" not in FORMATS:
            expected = ", ".join(e.lstrip(".") for e in FORMATS)
            raise OutputError(
                f"{folder}: unknown frame format {ext!r}; expected one of {expected}, rosbag2"
            )
        self.folder, self.ext = Path(folder), ext
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_stale_frame_temps(self.folder)  # once, not once a file (:meth:`write_frame`)

    def write_frame(
        self,
        source: FrameSource,
        frame: FrameLike,
        quaternion: NDArray[np.float64],
        output_frame: str | None = None,
    ) -> tuple[int, list[Path]]:
        """Write the frame's pulses, ``time_s`` relative to its reference time."""
        del quaternion
        path = self.folder / f"{frame.index:06d}.{self.ext}"
        with without_stale_sweep():  # (swept when the sink was opened)
            written = source.write([path], window=frame.window(output_frame))
        return written.points, list(written.files)

    def close(self) -> list[Path]:
        """Nothing left to finish: every frame file is complete when written."""
        return []

    def abort(self) -> None:
        """Nothing to drop: each frame file is written atomically on its own."""


class RosbagFrameSink:
    """Every frame into one ROS 2 bag at ``path`` (a new folder, renamed in on close).

    Parameters
    ----------
    path : Path
        The bag folder; must not exist. Its parent is created if needed.
    options : BagOptions, optional
        Storage, point layout and frame id (:class:`~.pointcloud2.BagOptions`).
    return_mode : str
        The scanner's return mode (Autoware's return types follow it).
    """

    def __init__(
        self, path: Path, options: BagOptions | None = None, return_mode: str = "strongest"
    ) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.bag = RosbagWriter(Path(path), options, return_mode)

    def write_frame(
        self,
        source: FrameSource,
        frame: FrameLike,
        quaternion: NDArray[np.float64],
        output_frame: str | None = None,
    ) -> tuple[int, list[Path]]:
        """Write the frame's cloud stamped with its reference time, and its pose."""
        cloud = source.frame_cloud(frame, output_frame)
        self.bag.write_frame(cloud, frame.time_s, frame.rotation, frame.position_m, quaternion)
        return len(cloud), []

    def close(self) -> list[Path]:
        """Finish the bag and rename it into place."""
        return [self.bag.close()]

    def abort(self) -> None:
        """Drop the bag."""
        self.bag.abort()


def open_frame_sink(
    out_dir: str | Path,
    fmt: str,
    bag: BagOptions | None = None,
    return_mode: str = "strongest",
) -> FrameSink:
    """The sink of a sequence folder: ``rosbag2`` -> ``out_dir/bag`` (written as ``bag``
    says, for a scanner of ``return_mode``), any point format ``EXT`` ->
    ``out_dir/frames/NNNNNN.EXT``."""
    out = Path(out_dir)
    if fmt == "rosbag2":
        return RosbagFrameSink(out / "bag", bag, return_mode)
    return FileFrameSink(out / "frames", fmt)
