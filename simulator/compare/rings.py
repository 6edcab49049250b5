"""Rings: how a capture numbers a scanner's channels, and how often each ring fired.

Drivers number rings their own way; :func:`match_rings` pairs a capture's rings with a
scanner's channels by where they point (:func:`ring_elevations_deg`).
:func:`firings_per_ring` is the denominator of the return share per ring, and
:func:`grouped_median` the per-group median the ring and bin figures use.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import PointCloud
from .common import first_returns

__all__ = [
    "firings_per_ring",
    "first_returns_per_ring",
    "grouped_median",
    "match_rings",
    "ring_elevations_deg",
]


def grouped_median(
    group: NDArray[np.integer], values: NDArray, groups: int, min_count: int = 1
) -> NDArray[np.float64]:
    """(groups,) median of ``values`` (N,) by ``group`` (N,) in ``0 .. groups - 1``; NaN for
    a group with fewer than ``min_count`` values (entries outside the range are ignored)."""
    group = np.asarray(group, dtype=np.int64)
    inside = (group >= 0) & (group < groups)
    group, values = group[inside], np.asarray(values, dtype=np.float64)[inside]
    order = np.argsort(group, kind="stable")
    keys, starts, counts = np.unique(group[order], return_index=True, return_counts=True)
    out = np.full(groups, np.nan)
    for g, s0, n in zip(keys.tolist(), starts.tolist(), counts.tolist(), strict=True):
        if n >= min_count:  # a loop over groups (rings, bins), each a vectorised median
            out[g] = float(np.median(values[order[s0 : s0 + n]]))
    return out


def ring_elevations_deg(cloud: PointCloud, min_points: int = 10) -> dict[int, float]:
    """Median elevation of each ring's points seen from the origin, deg (rings with at least
    ``min_points`` points)."""
    xyz = cloud["xyz"].astype(np.float64)
    elevation = np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1])))
    ring = cloud["ring"].astype(np.int64)
    medians = grouped_median(ring, elevation, int(ring.max()) + 1 if len(ring) else 0,
                             min_count=min_points)  # fmt: skip
    return {int(r): float(medians[r]) for r in np.flatnonzero(np.isfinite(medians))}


def match_rings(
    capture: PointCloud, elevation_deg: NDArray[np.float64]
) -> NDArray[np.int64] | None:
    """How a capture numbers a scanner's channels, from where its rings point.

    Drivers number rings their own way: the ROS Velodyne driver and tier4/nebula by
    elevation, lowest first; the simulator by channel (laser id), Ouster by row (highest
    first). With ``m_r`` the median elevation of ring ``r``'s points
    (:func:`ring_elevations_deg`):

    - ``m_r`` strictly rising (or falling) with ``r``: the capture numbers rings by
      elevation, so the channel of elevation rank ``k`` is ring ``k`` (or ``C - 1 - k``);
      rings with no points (a ceiling out of reach) are placed by that rule too;
    - otherwise every ring must have points, and rings pair with channels by elevation rank.

    Parameters
    ----------
    capture : PointCloud
        With ``xyz`` (sensor frame) and ``ring``.
    elevation_deg : (C,) float
        The scanner's channel elevations, channel 0 first.

    Returns
    -------
    (C,) int64 or None
        ``ring_of_channel[c]``: the capture's ring number of channel ``c``; None when the
        rings cannot be matched one to one (ring numbers beyond the channels, fewer than
        half the rings seen, or rings seen partly and not in elevation order).
    """
    elevation_deg = np.asarray(elevation_deg, dtype=np.float64)
    n = len(elevation_deg)
    if "ring" not in capture or len(capture) == 0 or int(capture["ring"].max()) >= n:
        return None
    medians = ring_elevations_deg(capture)
    if len(medians) < max(2, n // 2):
        return None
    rings = np.array(sorted(medians))
    seen = np.array([medians[r] for r in rings])
    rank = np.zeros(n, dtype=np.int64)  # each channel's elevation rank, lowest 0
    rank[np.argsort(elevation_deg, kind="stable")] = np.arange(n)
    step = np.diff(seen)
    if np.all(step > 0):
        return rank
    if np.all(step < 0):
        return n - 1 - rank
    if len(rings) < n:
        return None
    ring_of_channel = np.zeros(n, dtype=np.int64)
    ring_of_channel[np.argsort(elevation_deg, kind="stable")] = rings[
        np.argsort(seen, kind="stable")
    ]
    return ring_of_channel


def firings_per_ring(cloud: PointCloud) -> tuple[int, bool]:
    """The number of firings of each ring of ``cloud``, and whether it was estimated.

    In order: ``meta["firings_per_ring"]``; the columns of ``meta["beam_grid"]``;
    ``meta["pulses"]`` divided by the rows of ``meta["beam_grid"]`` or, without a grid, by
    ``max(ring) + 1``; else (estimated) the most first returns any ring has.

    Returns
    -------
    firings : int
        Firings per ring (at least 1).
    estimated : bool
        True when it is the estimate from the points.
    """
    meta = cloud.meta
    if meta.get("firings_per_ring"):
        return int(meta["firings_per_ring"]), False
    grid = meta.get("beam_grid")
    if grid and grid.get("columns"):
        return int(grid["columns"]), False
    if meta.get("pulses") and "ring" in cloud:
        rows = int(grid["rows"]) if grid and grid.get("rows") else int(cloud["ring"].max()) + 1
        return max(round(int(meta["pulses"]) / rows), 1), False
    ring = np.asarray(cloud["ring"])[first_returns(cloud)]
    return max(int(np.bincount(ring).max()) if len(ring) else 1, 1), True


def first_returns_per_ring(cloud: PointCloud, n_rings: int) -> NDArray[np.int64]:
    """(R,) int64 first returns per ring 0..R-1."""
    ring = np.asarray(cloud["ring"], dtype=np.int64)[first_returns(cloud)]
    return np.bincount(ring, minlength=n_rings)[:n_rings]
