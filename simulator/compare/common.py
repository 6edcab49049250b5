"""What the figures read of a cloud, shared by :mod:`.metrics`, :mod:`.nvs`, :mod:`.rings`
and the compare page (:mod:`simulator.viz.compare`).

A cloud's first returns, its ranges, the points usable at all (finite, within
:data:`RANGE_LIMIT_M`), its declared intensity scale, the beam grid two clouds share, a
cloud scattered onto such a grid (the nearest point winning a pixel), and nearest
neighbours between two clouds (Open3D).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import PointCloud

__all__ = [
    "AZIMUTH_COLUMNS",
    "DEFAULT_INTENSITY_MAX",
    "RANGE_LIMIT_M",
    "declared_intensity_max",
    "finite_values",
    "first_returns",
    "intensity_scales",
    "nearest_distance_m",
    "nearest_per_pixel",
    "ranges_m",
    "ratio_or_none",
    "shared_grid",
    "usable_points",
]

#: Azimuth columns of a range image drawn from a cloud without a ``column`` field.
AZIMUTH_COLUMNS = 1024
#: Intensity scale of a cloud whose ``meta`` has no ``intensity_max``.
DEFAULT_INTENSITY_MAX = 255.0
#: A coordinate or range beyond this, in metres, is no measurement (a sentinel such as
#: 1e30): the point is left out. It is far above any LiDAR's reach and any world frame's
#: coordinates (UTM northings reach 1e7 m), and its square stays finite in float64.
RANGE_LIMIT_M = 1e8


def first_returns(cloud: PointCloud) -> NDArray[np.bool_]:
    """(N,) bool: the first returns (every point when ``return_number`` is absent)."""
    if "return_number" in cloud:
        return np.asarray(cloud["return_number"]) == 1
    return np.ones(len(cloud), dtype=bool)


def ranges_m(cloud: PointCloud) -> NDArray[np.float64]:
    """(N,) float64 range in metres: ``range_m``, else the norm of ``xyz``."""
    if "range_m" in cloud:
        return np.asarray(cloud["range_m"], dtype=np.float64)
    return np.linalg.norm(np.asarray(cloud["xyz"], dtype=np.float64), axis=1)


def finite_values(x: NDArray) -> NDArray:
    """The finite values of ``x``."""
    return x[np.isfinite(x)]


def declared_intensity_max(cloud: PointCloud) -> float:
    """A cloud's intensity full scale: ``meta["intensity_max"]``, else
    :data:`DEFAULT_INTENSITY_MAX`."""
    return float(cloud.meta.get("intensity_max", DEFAULT_INTENSITY_MAX))


def usable_points(cloud: PointCloud) -> NDArray[np.bool_]:
    """(N,) bool: points whose coordinates, range (``range_m``, else the norm of ``xyz``)
    and intensity (where present) are finite, the norm and range within
    :data:`RANGE_LIMIT_M` and the range not negative."""
    xyz = np.asarray(cloud["xyz"], dtype=np.float64)
    ok = np.isfinite(xyz).all(axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        norm = np.sqrt(np.square(np.where(ok[:, None], xyz, 0.0)).sum(axis=1))
    ok &= norm <= RANGE_LIMIT_M
    if "range_m" in cloud:
        r = np.asarray(cloud["range_m"], dtype=np.float64)
        ok &= np.isfinite(r) & (r >= 0.0) & (r <= RANGE_LIMIT_M)
    if "intensity" in cloud:
        ok &= np.isfinite(np.asarray(cloud["intensity"], dtype=np.float64))
    return ok


def intensity_scales(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    """The one intensity full scale of the per-beam figures (A's ``intensity_max``),
    both clouds' ``meta["intensity_max"]`` (default 255) and whether they differ."""
    top = [declared_intensity_max(a), declared_intensity_max(b)]
    return {
        "intensity_full_scale": top[0],
        "intensity_max_declared": top,
        "intensity_scales_differ": top[0] != top[1],
    }


def ratio_or_none(num: int, den: int) -> float | None:
    """``num / den``, None when ``den`` is 0 (0/0 is no figure)."""
    return num / den if den else None


def nearest_distance_m(query: NDArray, points: NDArray) -> NDArray[np.float64]:
    """(Q,) float64 distance in metres from each ``query`` row (Q, 3) to its nearest
    ``points`` row (P, 3), by Open3D's KD-tree search in float64."""
    import open3d as o3d

    nns = o3d.core.nns.NearestNeighborSearch(
        o3d.core.Tensor(np.ascontiguousarray(points, dtype=np.float64))
    )
    nns.knn_index()
    _, sq = nns.knn_search(o3d.core.Tensor(np.ascontiguousarray(query, dtype=np.float64)), 1)
    return np.sqrt(np.maximum(sq.numpy()[:, 0], 0.0))


def shared_grid(a: PointCloud, b: PointCloud) -> tuple[int, int] | None:
    """(rows, columns) when A and B share one beam grid, else None."""
    ga, gb = a.meta.get("beam_grid"), b.meta.get("beam_grid")
    if not (ga and gb) or any(f not in c for c in (a, b) for f in ("ring", "column")):
        return None
    ka = (int(ga["rows"]), int(ga["columns"]))
    kb = (int(gb["rows"]), int(gb["columns"]))
    return ka if ka == kb else None


def nearest_per_pixel(
    ring: NDArray, column: NDArray, values: list[NDArray], shape: tuple[int, int]
) -> tuple[NDArray[np.bool_], list[NDArray[np.float64]]]:
    """Scatter points into a (rows, columns) image, the nearest point winning a pixel.

    Parameters
    ----------
    ring, column : (N,) int
        Pixel of each point; points outside ``shape`` are left out.
    values : list of (N,) float
        ``values[0]`` is the range in metres (the nearest point wins), then any others.
    shape : (int, int)
        Rows and columns.

    Returns
    -------
    returned : (rows, columns) bool
    images : list of (rows, columns) float64, NaN where nothing returned
    """
    h, w = shape
    ring = np.asarray(ring, dtype=np.int64)
    column = np.asarray(column, dtype=np.int64)
    inside = (ring >= 0) & (ring < h) & (column >= 0) & (column < w)
    pix = (ring * w + column)[inside]
    vals = [np.asarray(v, dtype=np.float64)[inside] for v in values]
    order = np.lexsort((vals[0], pix))  # by pixel, then nearest first
    pix, first = np.unique(pix[order], return_index=True)
    returned = np.zeros(h * w, dtype=bool)
    returned[pix] = True
    images = []
    for v in vals:
        img = np.full(h * w, np.nan)
        img[pix] = v[order][first]
        images.append(img.reshape(h, w))
    return returned.reshape(h, w), images
