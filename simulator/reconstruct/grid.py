"""Frames on their scanner's beam grid: one row a channel, one column a firing.

A capture that records its beam grid (an Ouster frame: ``ring`` = row, ``column`` =
measurement id, ``meta["beam_grid"]``) is taken as it is. A capture without one (a PCD of
a ROS driver, nuScenes, KITTI) is organised by the scanner's beams: the ring from its
``ring`` field (matched to the channels by elevation, :func:`simulator.compare.match_rings`)
or, without one, from each point's elevation; the column from its azimuth, the head's
start azimuth, the channel's azimuth offset and firing delay. The nearest return of a
pixel wins it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..compare import match_rings
from ..errors import InputError
from ..io.drivers import grid_meta
from ..pointcloud import PointCloud
from ..sensor.scanner import SpinningPattern

__all__ = [
    "BeamGrid",
    "beam_indices",
    "beam_rays",
    "cloud_of_grid",
    "organize",
    "sensor_offset_m",
    "with_beam_grid",
]


@dataclass(frozen=True)
class BeamGrid:
    """One frame as its scanner's beam grid.

    Attributes
    ----------
    range_m : (C, W) float64
        Measured range of each beam's first return; NaN where the beam returned nothing.
    xyz_m : (C, W, 3) float64
        The return's point in the sensor frame; NaN where none.
    intensity : (C, W) float64
        Its reported intensity; NaN where none.
    label : (C, W) int64 or None
        Its SemanticKITTI label where the capture has labels (-1 where none).
    fired : (W,) bool
        Columns that were fired and received (a capture's lost packets are False).
    """

    range_m: NDArray[np.float64]
    xyz_m: NDArray[np.float64]
    intensity: NDArray[np.float64]
    label: NDArray[np.int64] | None
    fired: NDArray[np.bool_]

    @property
    def shape(self) -> tuple[int, int]:
        """(channels, columns)."""
        return self.range_m.shape  # type: ignore[return-value]

    @property
    def returned(self) -> NDArray[np.bool_]:
        """(C, W) bool: beams with a return."""
        return np.isfinite(self.range_m)


def beam_indices(
    cloud: PointCloud, pattern: SpinningPattern, origin_m: NDArray[np.float64] | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each point's (channel, column) on one revolution of ``pattern``'s grid.

    Parameters
    ----------
    cloud : PointCloud
        ``xyz`` (N, 3) in the sensor frame; ``ring`` and ``column`` used when present.
    pattern : SpinningPattern
    origin_m : (3,) float, optional
        The sensor origin in the cloud's frame (default 0).

    Returns
    -------
    channel, column : (N,) int64
        -1 for a point whose ring matches no channel.

    Raises
    ------
    InputError
        When the cloud's rings cannot be matched to the scanner's channels.
    """
    channels = pattern.channels
    columns = int(pattern.scanner.firings_per_revolution or 1)
    elevation = np.degrees(pattern.elevation_rad)
    origin = np.zeros(3) if origin_m is None else np.asarray(origin_m, dtype=np.float64)
    xyz = cloud["xyz"].astype(np.float64) - origin
    if "ring" in cloud.names:
        ring_of_channel = match_rings(cloud, elevation)
        if ring_of_channel is None:
            raise InputError(
                cloud.meta.get("source", "capture"),
                f"its rings (up to {int(cloud['ring'].max()) + 1 if len(cloud) else 0}) "
                f"cannot be matched to the scanner's {channels} channels",
            )
        channel_of_ring = np.full(int(ring_of_channel.max()) + 1, -1, dtype=np.int64)
        channel_of_ring[ring_of_channel] = np.arange(channels)
        ring = cloud["ring"].astype(np.int64)
        channel = np.where(
            ring < len(channel_of_ring),
            channel_of_ring[np.minimum(ring, len(channel_of_ring) - 1)],
            -1,
        )
    else:
        el = np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1])))
        channel = np.argmin(np.abs(el[:, None] - elevation[None, :]), axis=1).astype(np.int64)
    grid = cloud.meta.get("beam_grid") or {}
    if "column" in cloud.names and grid.get("columns") == columns:
        return channel, cloud["column"].astype(np.int64)
    safe = np.maximum(channel, 0)
    azimuth = np.arctan2(xyz[:, 1], xyz[:, 0])
    head = azimuth - pattern.azimuth_offset_rad[safe]
    turns = (head - np.radians(pattern.scanner.start_azimuth_deg)) / (2.0 * np.pi) * pattern.sign
    if pattern.scanner.firing_azimuth == "physical":  # the head turned during the delay
        turns = turns - pattern.scanner.rotation_hz * pattern.firing_offset_s[safe]
    column = np.mod(np.rint(turns * columns), columns).astype(np.int64)
    return channel, column


def beam_rays(pattern: SpinningPattern) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Every beam of one revolution: (C, W, 3) origins (m) and unit directions, in the
    scanner model's frame."""
    c, w = pattern.channels, int(pattern.scanner.firings_per_revolution or 1)
    sched = pattern.schedule(0, c * w)
    origin = sched.origin_m.reshape(w, c, 3).transpose(1, 0, 2)
    direction = sched.direction.reshape(w, c, 3).transpose(1, 0, 2)
    return origin, direction


def sensor_offset_m(cloud: PointCloud, pattern: SpinningPattern) -> NDArray[np.float64]:
    """Where the scanner model's origin sits in the capture's sensor frame, (3,) m.

    A capture that records its beam grid and ranges says it exactly: each point is its
    beam's origin plus the range along the beam's direction, so the median of
    ``xyz - origin - (R - r0) d`` over the points is the offset (Ouster's
    ``lidar_to_sensor_transform`` puts the lidar origin 36.18 mm above the sensor frame's
    on an OS1; ``r0`` is ``beam_origin_offset_m`` when ranges count from the lidar origin).
    Without a grid, or when the spread of that estimate exceeds 1 cm (the grid is not this
    scanner's), zero.
    """
    grid = cloud.meta.get("beam_grid") or {}
    columns = int(pattern.scanner.firings_per_revolution or 1)
    need = ("ring", "column", "range_m")
    if (
        len(cloud) == 0
        or any(f not in cloud.names for f in need)
        or grid.get("columns") != columns
        or grid.get("rows") != pattern.channels
    ):
        return np.zeros(3)
    origin, direction = beam_rays(pattern)
    c, w = cloud["ring"].astype(np.int64), cloud["column"].astype(np.int64)
    r0 = (
        pattern.scanner.beam_origin_offset_m
        if pattern.scanner.range_reference == "lidar_origin"
        else 0.0
    )
    r = cloud["range_m"].astype(np.float64) - r0
    lift = cloud["xyz"].astype(np.float64) - origin[c, w] - r[:, None] * direction[c, w]
    offset = np.median(lift, axis=0)
    spread = np.percentile(np.linalg.norm(lift - offset, axis=1), 90)
    return offset if spread <= 0.01 else np.zeros(3)


def organize(
    cloud: PointCloud, pattern: SpinningPattern, origin_m: NDArray[np.float64] | None = None
) -> BeamGrid:
    """A frame on ``pattern``'s beam grid (first returns; the nearest wins a pixel).

    Parameters
    ----------
    cloud : PointCloud
        ``xyz`` (N, 3) in the sensor frame, with ``intensity``; ``range_m``, ``ring``,
        ``column``, ``label`` and ``return_number`` are used when present.
    pattern : SpinningPattern
        The scanner's beams.
    origin_m : (3,) float, optional
        The scanner model's origin in the cloud's frame (:func:`sensor_offset_m`), from
        which a point's elevation and azimuth are seen (default 0).

    Returns
    -------
    BeamGrid

    Raises
    ------
    InputError
        When the frame cannot be organised: no intensity, rings that match no channel, or
        a recorded grid whose rows differ from the scanner's channels.
    """
    source = cloud.meta.get("source", "capture")
    if "intensity" not in cloud.names:
        raise InputError(source, "it has no intensity field: a scene needs its readings")
    channels = pattern.channels
    columns = int(pattern.scanner.firings_per_revolution or 1)
    grid = cloud.meta.get("beam_grid") or {}
    if grid and int(grid.get("rows", channels)) != channels:
        raise InputError(
            source,
            f"its beam grid has {grid['rows']} rows but the scanner has {channels} channels "
            "(--scanner: the unit that recorded it)",
        )
    channel, column = beam_indices(cloud, pattern, origin_m)
    first = (
        cloud["return_number"] <= 1 if "return_number" in cloud.names else np.ones(len(cloud), bool)
    )
    xyz = cloud["xyz"].astype(np.float64)
    r = (
        cloud["range_m"].astype(np.float64)
        if "range_m" in cloud.names
        else np.linalg.norm(xyz, axis=1)
    )
    ok = first & (channel >= 0) & np.isfinite(r) & (r > 0) & np.isfinite(xyz).all(axis=1)
    pix = channel[ok] * columns + column[ok]
    order = np.lexsort((r[ok], pix))
    pix_sorted = pix[order]
    keep = np.ones(len(order), dtype=bool)
    keep[1:] = pix_sorted[1:] != pix_sorted[:-1]
    rows = np.flatnonzero(ok)[order[keep]]
    pix = pix_sorted[keep]
    n = channels * columns
    range_m = np.full(n, np.nan)
    range_m[pix] = r[rows]
    xyz_m = np.full((n, 3), np.nan)
    xyz_m[pix] = xyz[rows]
    intensity = np.full(n, np.nan)
    intensity[pix] = cloud["intensity"][rows]
    label = None
    if "label" in cloud.names:
        label = np.full(n, -1, dtype=np.int64)
        label[pix] = cloud["label"][rows]
        label = label.reshape(channels, columns)
    fired = np.ones(columns, dtype=bool)
    if grid and "column" in cloud.names and cloud.meta.get("firings_per_ring", columns) < columns:
        fired[:] = False
        fired[np.unique(column[ok])] = True
    return BeamGrid(
        range_m.reshape(channels, columns),
        xyz_m.reshape(channels, columns, 3),
        intensity.reshape(channels, columns),
        label,
        fired,
    )


def cloud_of_grid(grid: BeamGrid, meta: dict | None = None) -> PointCloud:
    """The returns of a beam grid as a cloud that records the grid (``ring`` = channel,
    ``column``, ``meta["beam_grid"]``), as :func:`simulator.compare.compare_clouds` pairs
    two clouds beam by beam."""
    c, w = grid.shape
    ring, column = np.nonzero(grid.returned)
    fields = {
        "xyz": grid.xyz_m[ring, column].astype(np.float32),
        "intensity": grid.intensity[ring, column].astype(np.float32),
        "range_m": grid.range_m[ring, column].astype(np.float32),
        "ring": ring.astype(np.uint16),
        "column": column.astype(np.uint16),
        "return_number": np.ones(len(ring), dtype=np.uint8),
    }
    if grid.label is not None:
        fields["label"] = np.maximum(grid.label[ring, column], 0).astype(np.uint16)
    return PointCloud(fields, {**(meta or {}), **grid_meta(c, w, int(grid.fired.sum()))})


def with_beam_grid(cloud: PointCloud, pattern: SpinningPattern, pulses: int) -> PointCloud:
    """A scanned cloud (with ``pulse_id``) with its beam grid: firing ``f`` of the
    revolution is column ``f``, as a capture's measurement id is.

    Parameters
    ----------
    cloud : PointCloud
        A scan of ``pattern`` with the diagnostic ``pulse_id``.
    pattern : SpinningPattern
    pulses : int
        Pulses the survey fired.
    """
    firings = int(pattern.scanner.firings_per_revolution or 1)
    cloud.fields["column"] = pattern.column(cloud["pulse_id"]).astype(np.uint16)
    cloud.meta.update(grid_meta(pattern.channels, firings, pulses // pattern.channels))
    return cloud
