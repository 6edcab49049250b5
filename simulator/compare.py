"""Compare two point clouds, typically a real capture (A) against a simulated scan (B).

:func:`compare_clouds` gives the figures (a JSON-ready dict of fixed keys): geometric
agreement (chamfer distance, F-score from nearest neighbours found with Open3D), the
return share per ring, the distance between the intensity and range distributions and,
when both clouds share one beam grid, the per-beam agreement (``same_beams``: ray drop,
depth and intensity errors). The ``nvs`` block gives the measures of the neural LiDAR
novel-view-synthesis papers computed as LiDAR4D's evaluation code computes them
(:func:`nvs_figures`; its definitions differ from ours, see there).
:func:`write_compare_page` draws A and B overlaid or side by side into PNG files with an
``index.html`` that shows them under a table of the figures; :func:`format_compare` is the
short terminal summary.

Fields a cloud lacks (a real capture may hold only ``xyz``) make the figures that need
them ``None`` and the plots say "not in A" (or B).

Bad values: the ``compare`` command refuses them. It reads its clouds with
:func:`simulator.io.read.read`, which refuses a file holding a non-finite or out-of-range
coordinate, range or intensity (one line naming the file, the field and how many points:
:func:`simulator.io.read.check_values`), and a survey's scan holds none. A cloud handed to
:func:`compare_clouds` in code is not refused: its points with a non-finite coordinate, range
or intensity, or a coordinate or range beyond :data:`RANGE_LIMIT_M`, are left out of every
figure (as if they had not returned), never binned, and counted in ``nvs["points_left_out"]``.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .errors import SimulatorError
from .io.atomic import write_atomic, write_figure
from .labels import label_name
from .pointcloud import PointCloud

#: The papers' headline measures of the ``nvs`` block, in the order their tables (and
#: reconstruct's summary table and page) give them.
NVS_TABLE_KEYS = ("ray_drop_accuracy", "ray_drop_f1", "depth_medae_m", "depth_rmse_m", "cd",
                  "f_score", "intensity_rmse")  # fmt: skip

__all__ = [
    "AZIMUTH_COLUMNS",
    "INTENSITY_BINS",
    "LIDAR4D_COMMIT",
    "NVS_TABLE_KEYS",
    "RANGE_BIN_M",
    "RANGE_LIMIT_M",
    "compare_clouds",
    "firings_per_ring",
    "format_compare",
    "grouped_median",
    "match_rings",
    "nvs_figures",
    "write_compare_page",
]

#: Bins of the intensity histogram over ``[0, scale_max]``.
INTENSITY_BINS = 64
#: Width of the range histogram's bins, in metres.
RANGE_BIN_M = 0.25
#: Azimuth columns of a range image drawn from a cloud without a ``column`` field.
AZIMUTH_COLUMNS = 1024
#: Intensity scale of a cloud whose ``meta`` has no ``intensity_max``.
DEFAULT_INTENSITY_MAX = 255.0
#: A coordinate or range beyond this, in metres, is no measurement (a sentinel such as
#: 1e30): the point is left out. It is far above any LiDAR's reach and any world frame's
#: coordinates (UTM northings reach 1e7 m), and its square stays finite in float64.
RANGE_LIMIT_M = 1e8

# The ``nvs`` block: LiDAR4D's evaluation code, ispc-lab/LiDAR4D utils/metrics.py.
#: The LiDAR4D commit whose ``utils/metrics.py`` :func:`nvs_figures` follows (the file is
#: unchanged from it to 4d6abbd9, the newest commit read).
LIDAR4D_COMMIT = "0ba91dcaa1510546828402e5a8c8d0f7ffac1e2a"
#: ``compute_depth_errors``: depths are clipped to ``[min_depth, max_depth]``, in metres.
NVS_MIN_DEPTH_M = 1e-6
NVS_MAX_DEPTH_M = 80.0
#: ``compute_intensity_errors``: intensities (0-1) are clipped to ``[1e-6, 1]``.
NVS_MIN_INTENSITY = 1e-6
#: ``PointsMeter``: a point counts as matched when its *squared* distance is below this,
#: in m² (0.224 m).
NVS_F_SCORE_THRESHOLD_M2 = 0.05
#: ``RaydropMeter``: a pixel counts as returned where the predicted mask exceeds this.
NVS_RAY_DROP_RATIO = 0.5
#: ``structural_similarity``'s default window (a side), which images must reach.
SSIM_WINDOW = 7


# --------------------------------------------------------------------------- rings


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


# --------------------------------------------------------------------------- helpers


def _check(a: PointCloud, b: PointCloud) -> None:
    for side, cloud in (("A", a), ("B", b)):
        if "xyz" not in cloud:
            raise SimulatorError(f"compare: cloud {side} has no xyz coordinates")
        if len(cloud) == 0:
            raise SimulatorError(f"compare: cloud {side} is empty (no points)")


def _first(cloud: PointCloud) -> NDArray[np.bool_]:
    """(N,) bool: the first returns (every point when ``return_number`` is absent)."""
    if "return_number" in cloud:
        return np.asarray(cloud["return_number"]) == 1
    return np.ones(len(cloud), dtype=bool)


def _range_m(cloud: PointCloud) -> NDArray[np.float64]:
    """(N,) float64 range in metres: ``range_m``, else the norm of ``xyz``."""
    if "range_m" in cloud:
        return np.asarray(cloud["range_m"], dtype=np.float64)
    return np.linalg.norm(np.asarray(cloud["xyz"], dtype=np.float64), axis=1)


def _finite(x: NDArray) -> NDArray:
    """The finite values of ``x``."""
    return x[np.isfinite(x)]


def _intensity_max(cloud: PointCloud) -> float:
    return float(cloud.meta.get("intensity_max", DEFAULT_INTENSITY_MAX))


def _usable(cloud: PointCloud) -> NDArray[np.bool_]:
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


def _scales(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    """The one intensity full scale of the per-beam figures (A's ``intensity_max``),
    both clouds' ``meta["intensity_max"]`` (default 255) and whether they differ."""
    top = [_intensity_max(a), _intensity_max(b)]
    return {
        "intensity_full_scale": top[0],
        "intensity_max_declared": top,
        "intensity_scales_differ": top[0] != top[1],
    }


def _ratio(num: int, den: int) -> float | None:
    """``num / den``, None when ``den`` is 0 (0/0 is no figure)."""
    return num / den if den else None


def _nn_distance_m(query: NDArray, points: NDArray) -> NDArray[np.float64]:
    """(Q,) float64 distance in metres from each ``query`` row (Q, 3) to its nearest
    ``points`` row (P, 3), by Open3D's KD-tree search in float64."""
    import open3d as o3d

    nns = o3d.core.nns.NearestNeighborSearch(
        o3d.core.Tensor(np.ascontiguousarray(points, dtype=np.float64))
    )
    nns.knn_index()
    _, sq = nns.knn_search(o3d.core.Tensor(np.ascontiguousarray(query, dtype=np.float64)), 1)
    return np.sqrt(np.maximum(sq.numpy()[:, 0], 0.0))


def _tv(p_counts: NDArray, q_counts: NDArray) -> float:
    """Total-variation distance ``0.5 * sum |p - q|`` of two histograms on shared bins."""
    p = p_counts / max(p_counts.sum(), 1)
    q = q_counts / max(q_counts.sum(), 1)
    return float(0.5 * np.abs(p - q).sum())


def _float(x: float | None) -> float | None:
    """A JSON-safe float: ``None`` for None or NaN."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


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
    ring = np.asarray(cloud["ring"])[_first(cloud)]
    return max(int(np.bincount(ring).max()) if len(ring) else 1, 1), True


def _ring_counts(cloud: PointCloud, n_rings: int) -> NDArray[np.int64]:
    """(R,) int64 first returns per ring 0..R-1."""
    ring = np.asarray(cloud["ring"], dtype=np.int64)[_first(cloud)]
    return np.bincount(ring, minlength=n_rings)[:n_rings]


def _same_grid(a: PointCloud, b: PointCloud) -> tuple[int, int] | None:
    """(rows, columns) when A and B share one beam grid, else None."""
    ga, gb = a.meta.get("beam_grid"), b.meta.get("beam_grid")
    if not (ga and gb) or any(f not in c for c in (a, b) for f in ("ring", "column")):
        return None
    ka = (int(ga["rows"]), int(ga["columns"]))
    kb = (int(gb["rows"]), int(gb["columns"]))
    return ka if ka == kb else None


def _pixels(
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


# --------------------------------------------------------------------------- figures


def compare_clouds(a: PointCloud, b: PointCloud, f_score_threshold_m: float = 0.1) -> dict:
    """The figures that say how far cloud B is from cloud A.

    Parameters
    ----------
    a, b : PointCloud
        The two clouds, ``xyz`` (N, 3) in their sensor frames (A is typically the real
        capture, B the simulation). Other fields are optional: ``ring``, ``intensity``,
        ``range_m`` (else the norm of ``xyz``), ``return_number`` (first returns are
        those equal to 1; all points when absent), ``column`` and ``meta["beam_grid"]``.
        Points with a non-finite coordinate, range or intensity, or a coordinate or range
        beyond :data:`RANGE_LIMIT_M`, are left out of every figure (as if they had not
        returned); ``nvs["points_left_out"]`` counts them. (A file holding such points is
        refused by the reader, :func:`simulator.io.read.check_values`: this is for clouds
        made in code.)
    f_score_threshold_m : float
        Distance in metres within which a point counts as matched for the F-score.

    Returns
    -------
    dict
        Exactly these keys (``None`` where a needed field is absent):

        ``points``: ``[n_a, n_b]``, the points each cloud holds (left-out ones included).
        ``chamfer_m``: symmetric chamfer distance in metres, the mean over A of the
        distance to the nearest point of B and the mean over B of the distance to A,
        averaged.
        ``f_score``: ``2PR / (P + R)`` with precision P the share of B within
        ``f_score_threshold_m`` (inclusive) of A and recall R the share of A within it of
        B (0 when both are 0).
        ``f_score_threshold_m``: the threshold, metres.
        ``rings``: ``share_a``, ``share_b`` (first returns of each ring 0..max ring of
        either, divided by the ring's firings, see :func:`firings_per_ring`),
        ``max_abs_diff`` and the extras ``firings_per_ring`` ``[f_a, f_b]`` and
        ``firings_estimated`` (true if either side's firings were estimated from the
        points, which makes its shares relative to its busiest ring).
        ``intensity``: ``tv_distance`` of the two normalised histograms
        (:data:`INTENSITY_BINS` shared bins over ``[0, scale_max]``, on the scanners' own
        intensity scale), ``median_a``, ``median_b``, and the extra ``scale_max``, the
        larger of both ``meta["intensity_max"]`` (default 255) and the largest reading.
        ``range``: ``tv_distance`` of the range histograms (bins of :data:`RANGE_BIN_M`
        from 0 up to the larger maximum range), and the extra ``bin_m``.
        ``same_beams``: ``None`` unless A and B both have ``ring`` and ``column`` and an
        equal ``meta["beam_grid"]`` ``{"rows", "columns"}``; then, over the pixels
        (ring, column) of that grid, from first returns (the nearest one where several
        fall on a pixel): ``ray_drop_accuracy`` (share of pixels where A and B agree on
        returned or not); ``ray_drop_precision``, ``ray_drop_recall`` and
        ``ray_drop_f1`` of the *drop* class (no first return), A the truth (precision:
        share of B's drops that A dropped; recall: share of A's drops that B dropped;
        F1 ``2 TP / (2 TP + FP + FN)``; None for 0/0); ``range_median_abs_m`` and
        ``depth_medae_m`` (the same figure: median ``|r_a - r_b|`` over pixels returned
        in both, metres) and ``depth_rmse_m`` (their RMS); ``intensity_rmse`` and
        ``intensity_medae``, RMS and median of ``|i_a - i_b|`` over those pixels divided
        by ``intensity_full_scale``, A's ``meta["intensity_max"]`` (default 255), the one
        scale of both clouds (``intensity_max_declared`` ``[a, b]``;
        ``intensity_scales_differ`` when they differ); extras ``pixels`` and
        ``returned_both``.
        ``nvs``: the neural LiDAR simulation papers' measures as LiDAR4D computes them
        (:func:`nvs_figures`), and ``points_left_out`` ``[n_a, n_b]``.

    Raises
    ------
    SimulatorError
        If either cloud is empty (the message names which), has no ``xyz``, or has no
        point left once the unusable ones are left out.
    """
    _check(a, b)
    n_points = [len(a), len(b)]
    left_out = []
    used = []
    for side, cloud in (("A", a), ("B", b)):
        ok = _usable(cloud)
        if not ok.any():
            finite = np.isfinite(np.asarray(cloud["xyz"], dtype=np.float64)).all(axis=1)
            what = ("finite coordinates" if not finite.any() else
                    "usable points (each has a non-finite or out-of-range coordinate, "
                    "range or intensity)")  # fmt: skip
            raise SimulatorError(f"compare: cloud {side} has no {what}")
        left_out.append(int(len(cloud) - np.count_nonzero(ok)))
        used.append(cloud if ok.all() else cloud.select(ok))
    a, b = used
    xa = np.asarray(a["xyz"], dtype=np.float64)
    xb = np.asarray(b["xyz"], dtype=np.float64)
    d_ab = _nn_distance_m(xa, xb)  # A -> nearest of B
    d_ba = _nn_distance_m(xb, xa)
    t = float(f_score_threshold_m)
    chamfer = 0.5 * (float(d_ab.mean()) + float(d_ba.mean()))
    precision = float(np.count_nonzero(d_ba <= t)) / len(d_ba)
    recall = float(np.count_nonzero(d_ab <= t)) / len(d_ab)
    f = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0

    return {
        "points": n_points,
        "chamfer_m": chamfer,
        "f_score": f,
        "f_score_threshold_m": t,
        "rings": _ring_figures(a, b),
        "intensity": _intensity_figures(a, b),
        "range": _range_figures(a, b),
        "same_beams": _same_beam_figures(a, b),
        "nvs": {**nvs_figures(a, b), "points_left_out": left_out},
    }


def _ring_figures(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    if "ring" not in a or "ring" not in b:
        share = {}
        for side, c in (("a", a), ("b", b)):
            if "ring" in c:
                fc, _ = firings_per_ring(c)
                n = int(np.asarray(c["ring"]).max()) + 1
                share[side] = (_ring_counts(c, n) / fc).tolist()
        return {"share_a": share.get("a"), "share_b": share.get("b"), "max_abs_diff": None,
                "firings_per_ring": None, "firings_estimated": None}  # fmt: skip
    n = int(max(a["ring"].max(), b["ring"].max())) + 1
    fa, ea = firings_per_ring(a)
    fb, eb = firings_per_ring(b)
    sa = _ring_counts(a, n) / fa
    sb = _ring_counts(b, n) / fb
    return {
        "share_a": sa.tolist(),
        "share_b": sb.tolist(),
        "max_abs_diff": float(np.abs(sa - sb).max()),
        "firings_per_ring": [fa, fb],
        "firings_estimated": bool(ea or eb),
    }


def _intensity_scale(a: PointCloud, b: PointCloud) -> float:
    top = [_intensity_max(c) for c in (a, b)]
    top += [float(np.max(c["intensity"])) for c in (a, b) if "intensity" in c]
    return max(top)


def _intensity_figures(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    med = {s: float(np.median(c["intensity"])) if "intensity" in c else None
           for s, c in (("a", a), ("b", b))}  # fmt: skip
    scale = _intensity_scale(a, b)
    tv = None
    if "intensity" in a and "intensity" in b:
        edges = np.linspace(0.0, scale, INTENSITY_BINS + 1)
        ha, _ = np.histogram(np.asarray(a["intensity"], dtype=np.float64), edges)
        hb, _ = np.histogram(np.asarray(b["intensity"], dtype=np.float64), edges)
        tv = _tv(ha, hb)
    return {"tv_distance": tv, "median_a": med["a"], "median_b": med["b"], "scale_max": scale}


def _range_edges(ra: NDArray, rb: NDArray) -> NDArray[np.float64]:
    top = max(float(ra.max(initial=0.0)), float(rb.max(initial=0.0)))
    n = max(int(np.ceil(top / RANGE_BIN_M)), 1)
    if n * RANGE_BIN_M <= top:  # the maximum itself in the last bin, not past it
        n += 1
    return np.arange(n + 1) * RANGE_BIN_M


def _range_figures(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    ra, rb = _finite(_range_m(a)), _finite(_range_m(b))
    edges = _range_edges(ra, rb)
    tv = _tv(np.histogram(ra, edges)[0], np.histogram(rb, edges)[0])
    return {"tv_distance": tv, "bin_m": RANGE_BIN_M}


def _beam_image(
    c: PointCloud, shape: tuple[int, int], full_scale: float
) -> tuple[NDArray, NDArray, NDArray]:
    """(returned, range_m, intensity / ``full_scale``) images (rows, columns) of a cloud's
    first returns on its grid, the nearest return winning a pixel; NaN where nothing
    returned (and everywhere in the intensity image without ``intensity``)."""
    sel = _first(c)
    inten = (np.asarray(c["intensity"], dtype=np.float64) / full_scale
             if "intensity" in c else np.full(len(c), np.nan))  # fmt: skip
    ret, (rng, inn) = _pixels(
        c["ring"][sel], c["column"][sel], [_range_m(c)[sel], inten[sel]], shape
    )
    return ret, rng, inn


def _same_beam_figures(a: PointCloud, b: PointCloud) -> dict[str, Any] | None:
    """The per-pixel figures of A and B on their shared beam grid (None without one).

    Returns
    -------
    dict or None
        ``ray_drop_accuracy``: share of pixels where A and B agree on returned or not.
        ``ray_drop_precision``, ``ray_drop_recall``, ``ray_drop_f1``: of the *drop*
        class (a pixel with no first return), A the truth: precision the share of B's
        dropped pixels that A dropped, recall the share of A's dropped pixels that B
        dropped (None when the cloud divided by dropped none), F1 ``2 TP / (2 TP + FP +
        FN)`` (None when neither dropped any pixel).
        ``range_median_abs_m`` and ``depth_medae_m`` (the same figure): median ``|r_a -
        r_b|`` over pixels returned in both, metres; ``depth_rmse_m`` its RMS.
        ``intensity_rmse``, ``intensity_medae``: RMS and median of ``|i_a - i_b| /
        intensity_full_scale`` over pixels returned in both (not clipped).
        ``intensity_full_scale``: A's ``meta["intensity_max"]`` (default 255), the one
        scale of both clouds; ``intensity_scales_differ``: B declares another.
        ``pixels``, ``returned_both``: counts.
    """
    shape = _same_grid(a, b)
    if shape is None:
        return None
    scales = _scales(a, b)
    full = scales["intensity_full_scale"]
    ret_a, rng_a, int_a = _beam_image(a, shape, full)
    ret_b, rng_b, int_b = _beam_image(b, shape, full)
    both = ret_a & ret_b
    d_rng = np.abs(rng_a[both] - rng_b[both])
    d_int = np.abs(int_a[both] - int_b[both])
    has = both.any()
    has_int = has and "intensity" in a and "intensity" in b
    drop_a, drop_b = ~ret_a, ~ret_b
    tp = int(np.count_nonzero(drop_a & drop_b))
    fp = int(np.count_nonzero(drop_b & ret_a))
    fn = int(np.count_nonzero(drop_a & ret_b))
    return {
        "ray_drop_accuracy": float(np.mean(ret_a == ret_b)),
        "ray_drop_precision": _ratio(tp, tp + fp),
        "ray_drop_recall": _ratio(tp, tp + fn),
        "ray_drop_f1": _ratio(2 * tp, 2 * tp + fp + fn),
        "range_median_abs_m": float(np.median(d_rng)) if has else None,
        "depth_rmse_m": float(np.sqrt(np.mean(d_rng**2))) if has else None,
        "depth_medae_m": float(np.median(d_rng)) if has else None,
        "intensity_rmse": float(np.sqrt(np.mean(d_int**2))) if has_int else None,
        "intensity_medae": float(np.median(d_int)) if has_int else None,
        **scales,
        "pixels": int(ret_a.size),
        "returned_both": int(both.sum()),
    }


# --------------------------------------------------------------------------- nvs


def _nvs_image(
    c: PointCloud, shape: tuple[int, int], full_scale: float
) -> tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """A cloud's range image as LiDAR4D's ``lidar_to_pano_with_intensities`` builds one.

    Every first return nearer than :data:`NVS_MAX_DEPTH_M` goes to its (ring, column)
    pixel, the nearest (by ``|xyz|``) winning; the depth is ``|xyz|`` (the norm in the
    sensor frame, as LiDAR4D's pano), 0 where nothing returned. Returns at 80 m or beyond
    are left out, as LiDAR4D's ``lidar_to_pano_with_intensities`` leaves them out of its
    ground truth (its ``max_depth``): to the measures they are drops, in both clouds.

    Returns
    -------
    returned : (rows, columns) bool
    depth_m : (rows, columns) float64
        0 where nothing returned.
    intensity : (rows, columns) float64
        Intensity / ``full_scale``, 0 where nothing returned; NaN without ``intensity``.
    points : (M, 3) float64
        The winning points' ``xyz``, one a returned pixel, row-major.
    """
    sel = _first(c)
    xyz = np.asarray(c["xyz"], dtype=np.float64)[sel]
    inten = (np.asarray(c["intensity"], dtype=np.float64)[sel] / full_scale
             if "intensity" in c else np.full(len(xyz), np.nan))  # fmt: skip
    depth = np.linalg.norm(xyz, axis=1)
    near = depth < NVS_MAX_DEPTH_M
    ret, (dep, inn, x, y, z) = _pixels(
        c["ring"][sel][near], c["column"][sel][near],
        [depth[near], inten[near], xyz[near, 0], xyz[near, 1], xyz[near, 2]], shape,
    )  # fmt: skip
    points = np.stack([x[ret], y[ret], z[ret]], axis=1)
    return ret, np.where(ret, dep, 0.0), np.where(ret, inn, 0.0), points


def _lidar4d_points(pred: NDArray, truth: NDArray) -> dict[str, float]:
    """LiDAR4D's ``PointsMeter``: chamfer and F-score on squared distances.

    Parameters
    ----------
    pred, truth : (P, 3), (T, 3) float
        B's and A's points, metres.

    Returns
    -------
    dict
        ``cd`` (m²): mean over B of the squared distance to the nearest point of A plus
        the mean over A of the squared distance to B (a sum, not an average);
        ``f_score_precision``: share of B whose squared distance to A is below
        :data:`NVS_F_SCORE_THRESHOLD_M2` (strictly); ``f_score_recall``: share of A so
        near B; ``f_score``: ``2PR / (P + R)``, 0 when both are 0.
    """
    d2_pred = _nn_distance_m(pred, truth) ** 2  # dist1: B -> A
    d2_truth = _nn_distance_m(truth, pred) ** 2  # dist2: A -> B
    p = float(np.mean(d2_pred < NVS_F_SCORE_THRESHOLD_M2))
    r = float(np.mean(d2_truth < NVS_F_SCORE_THRESHOLD_M2))
    return {
        "cd": float(d2_pred.mean()) + float(d2_truth.mean()),
        "f_score": 2 * p * r / (p + r) if p + r > 0 else 0.0,
        "f_score_precision": p,
        "f_score_recall": r,
    }


def _ssim(pred: NDArray[np.float64], truth: NDArray[np.float64]) -> float | None:
    """scikit-image's ``structural_similarity(pred, truth, data_range=max(truth) -
    min(truth))`` with its defaults (a 7 x 7 uniform window, sample covariance), as
    LiDAR4D calls it; None without scikit-image, for an image under 7 x 7, or when it is
    not a number (a constant truth image gives data range 0 and 0/0)."""
    try:
        from skimage.metrics import structural_similarity
    except ImportError:
        return None
    if min(truth.shape) < SSIM_WINDOW:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        value = structural_similarity(pred, truth, data_range=float(np.max(truth) - np.min(truth)))
    return _float(value) if np.isfinite(value) else None


def _psnr_db(pred: NDArray[np.float64], truth: NDArray[np.float64], peak: float) -> float | None:
    """``10 log10(peak² / mean((pred - truth)²))`` in dB; None when the images are equal
    (an infinite PSNR, which JSON cannot hold)."""
    mse = float(np.mean((pred - truth) ** 2))
    return 10.0 * math.log10(peak**2 / mse) if mse > 0 else None


def _image_errors(
    pred: NDArray[np.float64], truth: NDArray[np.float64], peak: float
) -> dict[str, float | None]:
    """RMSE, MedAE, SSIM and PSNR of two clipped images, as ``compute_depth_errors``."""
    diff = pred - truth
    return {
        "rmse": float(np.sqrt(np.mean(diff**2))),
        "medae": float(np.median(np.abs(diff))),
        "ssim": _ssim(pred, truth),
        "psnr": _psnr_db(pred, truth, peak),
    }


def nvs_figures(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    """The measures of the neural LiDAR simulation papers, as LiDAR4D computes them.

    Follows ``utils/metrics.py`` of ispc-lab/LiDAR4D at commit :data:`LIDAR4D_COMMIT`
    (``DepthMeter``, ``IntensityMeter``, ``RaydropMeter``, ``PointsMeter``) and how its
    ``model/runner.py`` feeds them: A is the ground truth, B the prediction. The image
    measures need both clouds on one beam grid (``ring``, ``column``, an equal
    ``meta["beam_grid"]``): each cloud's range image holds, per (ring, column), its
    nearest first return (depth ``|xyz|``, the norm in the sensor frame, as LiDAR4D's
    range images), 0 where nothing returned. LiDAR4D's meters average per-frame figures
    over the test frames; these are one frame's. LPIPS is not computed.

    Parameters
    ----------
    a, b : PointCloud
        Truth and prediction, ``xyz`` (N, 3) in metres in their sensor frames; only
        usable points (see :func:`compare_clouds`).

    Returns
    -------
    dict
        ``source``: the file and commit followed.
        ``cd`` (m²): mean over B of the squared distance to the nearest point of A plus
        the same over A to B. ``f_score``: ``2PR / (P + R)`` (0 when both are 0) with
        ``f_score_precision`` P the share of B whose squared distance to A is below
        ``f_score_threshold_m2`` = 0.05 m² (strictly; 0.224 m) and ``f_score_recall``
        R the share of A so near B. The points: with a shared grid, one a returned
        pixel (the pixel's point, as LiDAR4D rebuilds its points from the range image's
        non-zero pixels); without one, every first return; ``points`` ``[n_a, n_b]``
        counts them and ``points_from`` says which (``"beam grid"``, ``"first
        returns"``).
        On the grid only (else None), over every pixel of the image, drops included:
        ``depth_rmse_m``, ``depth_medae_m``, ``ssim`` and ``psnr`` (dB, peak
        ``max_depth_m``) of the depth images clipped to ``[1e-6, max_depth_m]`` with
        ``max_depth_m`` = 80 (a pixel with no return is depth 0, so 1e-6); SSIM is
        scikit-image's ``structural_similarity(pred, truth, data_range=max(truth) -
        min(truth))``, None without scikit-image or for an image under 7 x 7.
        ``intensity_rmse``, ``intensity_medae``, ``intensity_ssim``, ``intensity_psnr``
        (peak 1): the same of the intensity images divided by ``intensity_full_scale``
        (A's ``meta["intensity_max"]``, default 255; ``intensity_scales_differ`` when B
        declares another), 0 where nothing returned, clipped to ``[1e-6, 1]``.
        ``ray_drop_accuracy``: share of pixels where B's returned mask (thresholded at
        0.5, which a 0/1 mask passes unchanged) equals A's; ``ray_drop_rmse``: RMS of
        ``mask_a - mask_b``; ``ray_drop_precision``, ``ray_drop_recall``,
        ``ray_drop_f1``: of the class LiDAR4D labels 1, a *returned* pixel (its mask is
        1 where the depth is not 0), None for 0/0.
        PSNR is None when the two images are equal (infinite).
    """
    scales = _scales(a, b)
    full = scales["intensity_full_scale"]
    shape = _same_grid(a, b)
    images = None if shape is None else [_nvs_image(c, shape, full) for c in (a, b)]
    if images is None:
        pts = [np.asarray(c["xyz"], dtype=np.float64)[_first(c)] for c in (a, b)]
    else:
        pts = [im[3] for im in images]
    points: dict[str, float | None] = dict.fromkeys(
        ("cd", "f_score", "f_score_precision", "f_score_recall")
    )  # None when a side has no first return to match
    if len(pts[0]) and len(pts[1]):
        points = _lidar4d_points(pts[1], pts[0])
    depth: dict[str, float | None] = dict.fromkeys(("rmse", "medae", "ssim", "psnr"))
    inten = dict(depth)
    drop: dict[str, float | None] = dict.fromkeys(("rmse", "accuracy", "precision", "recall", "f1"))
    if images is not None:
        (ret_a, dep_a, int_a, _), (ret_b, dep_b, int_b, _) = images
        depth = _image_errors(np.clip(dep_b, NVS_MIN_DEPTH_M, NVS_MAX_DEPTH_M),
                              np.clip(dep_a, NVS_MIN_DEPTH_M, NVS_MAX_DEPTH_M),
                              NVS_MAX_DEPTH_M)  # fmt: skip
        if "intensity" in a and "intensity" in b:
            inten = _image_errors(np.clip(int_b, NVS_MIN_INTENSITY, 1.0),
                                  np.clip(int_a, NVS_MIN_INTENSITY, 1.0), 1.0)  # fmt: skip
        drop = _lidar4d_ray_drop(ret_b.astype(np.float64), ret_a.astype(np.float64))
    return {
        "source": f"ispc-lab/LiDAR4D utils/metrics.py @ {LIDAR4D_COMMIT}",
        **points,
        "f_score_threshold_m2": NVS_F_SCORE_THRESHOLD_M2,
        "points": [len(pts[0]), len(pts[1])],
        "points_from": "first returns" if images is None else "beam grid",
        "depth_rmse_m": depth["rmse"],
        "depth_medae_m": depth["medae"],
        "ssim": depth["ssim"],
        "psnr": depth["psnr"],
        "max_depth_m": NVS_MAX_DEPTH_M,
        "intensity_rmse": inten["rmse"],
        "intensity_medae": inten["medae"],
        "intensity_ssim": inten["ssim"],
        "intensity_psnr": inten["psnr"],
        **scales,
        **{f"ray_drop_{k}": v for k, v in drop.items()},
    }


def _lidar4d_ray_drop(pred: NDArray[np.float64], truth: NDArray[np.float64]) -> dict:
    """LiDAR4D's ``RaydropMeter`` on (rows, columns) images: ``truth`` A's mask (1 where
    returned), ``pred`` B's (a 0/1 mask: LiDAR4D's probabilities are 0 or 1 here).

    Returns
    -------
    dict
        ``rmse`` of ``truth - pred``; ``accuracy``, the share of pixels where ``pred >
        0.5`` equals ``truth``; ``precision``, ``recall`` and ``f1`` of the class 1
        (returned), None for 0/0.
    """
    mask = pred > NVS_RAY_DROP_RATIO
    tp = int(np.count_nonzero((truth == 1) & mask))
    fp = int(np.count_nonzero((truth == 0) & mask))
    fn = int(np.count_nonzero((truth == 1) & ~mask))
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    f1 = (2 * precision * recall / (precision + recall)
          if precision is not None and recall is not None and precision + recall > 0
          else None)  # fmt: skip
    return {
        "rmse": float(np.sqrt(np.mean((truth - pred) ** 2))),
        "accuracy": float(np.mean(mask == truth)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
    }


def format_compare(result: dict) -> str:
    """A few lines summing up :func:`compare_clouds`' result for the terminal: the
    figures, the per-beam ones, the ``nvs`` block and a warning when A and B declare
    different intensity full scales."""

    def g(x: float | None, fmt: str) -> str:
        return "n/a" if x is None else format(x, fmt)

    na, nb = result["points"]
    rings, inten, same = result["rings"], result["intensity"], result["same_beams"]
    nvs = result.get("nvs")
    left = nvs["points_left_out"] if nvs else [0, 0]
    points = f"points       A {na:,}   B {nb:,}"
    if any(left):
        points += (
            f"   (left out, non-finite or beyond {RANGE_LIMIT_M:g} m: A {left[0]:,}, B {left[1]:,})"
        )
    lines = [
        points,
        f"geometry     chamfer {result['chamfer_m']:.4f} m   F-score {result['f_score']:.3f} "
        f"at {result['f_score_threshold_m']:g} m",
        f"rings        max |share A - share B| {g(rings['max_abs_diff'], '.3f')}"
        + ("   (firings estimated from the points)" if rings.get("firings_estimated") else ""),
        f"intensity    TV distance {g(inten['tv_distance'], '.3f')}   median A "
        f"{g(inten['median_a'], '.1f')}  B {g(inten['median_b'], '.1f')}",
        f"range        TV distance {result['range']['tv_distance']:.3f}",
    ]
    if same is None:
        lines.append("same beams   n/a (the clouds do not share one beam grid)")
    else:
        full = same.get("intensity_full_scale", DEFAULT_INTENSITY_MAX)
        lines += [
            f"same beams   ray-drop accuracy {same['ray_drop_accuracy']:.3f}   drop F1 "
            f"{g(same.get('ray_drop_f1'), '.3f')} (precision "
            f"{g(same.get('ray_drop_precision'), '.3f')}, recall "
            f"{g(same.get('ray_drop_recall'), '.3f')})",
            f"             range median |diff| {g(same['range_median_abs_m'], '.3f')} m   "
            f"depth RMSE {g(same.get('depth_rmse_m'), '.3f')} m   intensity RMSE "
            f"{g(same['intensity_rmse'], '.3f')}  MedAE {g(same.get('intensity_medae'), '.3f')}"
            f" (of {full:g})",
        ]
    if nvs:
        psnr = "n/a" if nvs["psnr"] is None else f"{nvs['psnr']:.2f} dB"
        if nvs["depth_rmse_m"] == 0.0:
            psnr = "inf (equal images)"
        lines += [
            f"nvs          as LiDAR4D: CD {g(nvs['cd'], '.4f')} m²   F-score "
            f"{g(nvs['f_score'], '.3f')} (d² < {nvs['f_score_threshold_m2']:g} m²)   depth "
            f"RMSE {g(nvs['depth_rmse_m'], '.3f')} m  MedAE {g(nvs['depth_medae_m'], '.3f')} m"
            f"  SSIM {g(nvs['ssim'], '.3f')}  PSNR {psnr}",
            f"             intensity RMSE {g(nvs['intensity_rmse'], '.3f')}  MedAE "
            f"{g(nvs['intensity_medae'], '.3f')} (of {nvs['intensity_full_scale']:g})   "
            f"ray drop accuracy {g(nvs['ray_drop_accuracy'], '.3f')}  F1 "
            f"{g(nvs['ray_drop_f1'], '.3f')} (of returns)",
        ]
        if nvs["intensity_scales_differ"]:
            lines.append(
                "warning      A and B declare different intensity full scales (A {:g}, B {:g}): "
                "the intensity errors divide both by A's".format(*nvs["intensity_max_declared"])
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the page

_COLOURS = ("tab:blue", "tab:orange")


def _image_of(c: PointCloud) -> tuple[NDArray, NDArray, str] | None:
    """(returned, range image, x-axis label) of a cloud's first returns, None without ring."""
    if "ring" not in c:
        return None
    sel = _first(c)
    grid = c.meta.get("beam_grid")
    ring = np.asarray(c["ring"], dtype=np.int64)[sel]
    if "column" in c:
        column = np.asarray(c["column"], dtype=np.int64)[sel]
        w = int(grid["columns"]) if grid else int(column.max()) + 1
        xlabel = "column (firing)"
    else:
        xyz = np.asarray(c["xyz"], dtype=np.float64)[sel]
        az = np.arctan2(xyz[:, 1], xyz[:, 0])
        column = np.floor((az + np.pi) / (2 * np.pi) * AZIMUTH_COLUMNS).astype(np.int64)
        column = np.clip(column, 0, AZIMUTH_COLUMNS - 1)
        w = AZIMUTH_COLUMNS
        xlabel = f"azimuth column ({AZIMUTH_COLUMNS} over -180..180 deg of atan2(y, x))"
    h = int(grid["rows"]) if grid else int(ring.max()) + 1
    ret, (rng,) = _pixels(ring, column, [_range_m(c)[sel]], (h, w))
    return ret, rng, xlabel


def _ring_ticks(ax: Any, n_rings: int) -> None:
    """Every ring ticked up to 32 rings, else integer ticks matplotlib chooses."""
    from matplotlib.ticker import MaxNLocator

    if n_rings <= 32:
        ax.set_xticks(np.arange(n_rings))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _missing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12)
    ax.set_xticks([])
    ax.set_yticks([])


def write_compare_page(
    a: PointCloud, b: PointCloud, result: dict, out_dir: Path, names: tuple[str, str]
) -> list[Path]:
    """Write ``index.html`` and its PNG plots comparing A and B into ``out_dir``.

    Every file is written to a temporary name beside it, then renamed. The page opens with
    a table of ``result``'s figures, then shows: points per ring, return share per ring,
    the range histogram, the intensity histogram, the median intensity per ring, the
    median intensity per label (when both clouds have labels), intensity against range
    (2D histograms side by side and binned medians), and both range images (rows = rings,
    columns = ``column`` or 1024 azimuth bins; magenta where nothing returned). Points
    :func:`compare_clouds` leaves out are left out of the plots too.

    Parameters
    ----------
    a, b : PointCloud
        The clouds :func:`compare_clouds` compared.
    result : dict
        Its result.
    out_dir : Path
        Folder to write into (created).
    names : (str, str)
        The names of A and B (their files), for the legends and the title.

    Returns
    -------
    list of Path
        The files written: the PNGs, then ``index.html``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import MaxNLocator

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    a, b = (c.select(_usable(c)) for c in (a, b))  # as compare_clouds leaves them out
    la, lb = f"A: {names[0]}", f"B: {names[1]}"
    clouds = ((a, la, _COLOURS[0], "A"), (b, lb, _COLOURS[1], "B"))
    figures: list[tuple[str, Path]] = []
    notes: list[str] = []

    def legend(ax: Any) -> None:
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
                  frameon=False)  # fmt: skip

    # 1 and 2: points and return share per ring
    n_rings = max((int(c["ring"].max()) + 1 for c, *_ in clouds if "ring" in c), default=0)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    rings = np.arange(n_rings)
    for i, (c, lab, col, _side) in enumerate(clouds):
        if "ring" not in c:
            continue
        counts = _ring_counts(c, n_rings)
        if n_rings <= 32:
            axes[0].bar(rings + (i - 0.5) * 0.4, counts, width=0.4, color=col, label=lab)
        else:  # bars of 100+ rings alias: steps instead
            axes[0].step(rings, counts, where="mid", color=col, label=lab)
    share = result["rings"]
    for key, (_, lab, col, _side) in zip(("share_a", "share_b"), clouds, strict=True):
        if share[key] is not None:
            s = share[key]
            axes[1].plot(np.arange(len(s)), s, "o-", color=col, label=lab,
                         ms=4 if n_rings <= 32 else 2)  # fmt: skip
    axes[0].set(xlabel="ring", ylabel="first returns", title="Points per ring")
    axes[0].set_ylim(bottom=0)
    est = " (firings estimated)" if share.get("firings_estimated") else ""
    top = max([1.0] + [max(share[k]) for k in ("share_a", "share_b") if share[k]])
    axes[1].set(xlabel="ring", ylabel="returns / firings", ylim=(0, 1.05 * top),
                title=f"Return share per ring{est}")  # fmt: skip
    for ax in axes:
        if n_rings:
            _ring_ticks(ax, n_rings)
            legend(ax)
        else:
            _missing(ax, "no ring field in A or B")
    missing = [s for c, _, _, s in clouds if "ring" not in c]
    if missing and n_rings:
        for ax, what in zip(axes, ("Points", "Return share"), strict=True):
            ax.set_title(f"{what} per ring (ring not in {' or '.join(missing)})")
    figures.append(("Points and return share per ring", write_figure(fig, out / "rings.png")))

    # 3: range histogram
    ra, rb = _finite(_range_m(a)), _finite(_range_m(b))
    edges = _range_edges(ra, rb)
    fig, ax = plt.subplots(figsize=(10, 4))
    for r, (_, lab, col, _s) in zip((ra, rb), clouds, strict=True):
        ax.hist(r, bins=edges, histtype="step", density=True, color=col, lw=1.5, label=lab)
    ax.set(xlabel="range (m)", ylabel="density (1/m)", xlim=(0, edges[-1]),
           title=f"Range histogram ({RANGE_BIN_M} m bins), TV distance "
                 f"{result['range']['tv_distance']:.3f}")  # fmt: skip
    legend(ax)
    figures.append(("Range histogram", write_figure(fig, out / "range_hist.png")))

    # 4: intensity histogram
    scale = _intensity_scale(a, b)
    fig, ax = plt.subplots(figsize=(10, 4))
    iedges = np.linspace(0.0, scale, INTENSITY_BINS + 1)
    for c, lab, col, _s in clouds:
        if "intensity" in c:
            ax.hist(np.asarray(c["intensity"], dtype=np.float64), bins=iedges, histtype="step",
                    density=True, color=col, lw=1.5, label=lab)  # fmt: skip
    miss = [s for c, _, _, s in clouds if "intensity" not in c]
    tv = result["intensity"]["tv_distance"]
    title = "Intensity histogram" + (f", TV distance {tv:.3f}" if tv is not None else "")
    title += f" (intensity not in {' or '.join(miss)})" if miss else ""
    ax.set(xlabel="intensity (scanner scale)", ylabel="density (per intensity unit)",
           xlim=(0, scale), title=title)  # fmt: skip
    ax.set_yscale("log")
    legend(ax)
    figures.append(("Intensity histogram", write_figure(fig, out / "intensity_hist.png")))

    # 5: median intensity per ring
    fig, ax = plt.subplots(figsize=(10, 4))
    ok = [c for c, *_ in clouds if "ring" in c and "intensity" in c]
    if ok:
        for c, lab, col, _s in clouds:
            if "ring" in c and "intensity" in c:
                r = np.asarray(c["ring"], dtype=np.int64)
                med = [np.median(c["intensity"][r == k]) if np.any(r == k) else np.nan
                       for k in range(n_rings)]  # fmt: skip
                ax.plot(rings, med, "o-", color=col, ms=4, label=lab)
        ax.set(xlabel="ring", ylabel="median intensity", title="Median intensity per ring")
        _ring_ticks(ax, n_rings)
        legend(ax)
    else:
        _missing(ax, "ring or intensity not in A or B")
    miss = [s for c, _, _, s in clouds if "ring" not in c or "intensity" not in c]
    if ok and miss:
        ax.set_title(f"Median intensity per ring (ring/intensity not in {' or '.join(miss)})")
    figures.append(("Intensity per ring", write_figure(fig, out / "intensity_per_ring.png")))

    # 6: median intensity per label
    if all("label" in c and "intensity" in c for c in (a, b)):
        ids = np.union1d(np.unique(a["label"]), np.unique(b["label"]))
        fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(ids) + 2), 4.5))
        x = np.arange(len(ids))
        for i, (c, lab, col, _s) in enumerate(clouds):
            lbl = np.asarray(c["label"])
            med = [np.median(c["intensity"][lbl == k]) if np.any(lbl == k) else 0 for k in ids]
            ax.bar(x + (i - 0.5) * 0.4, med, width=0.4, color=col, label=lab)
        ax.set_xticks(x, [label_name(int(k)) for k in ids], rotation=45, ha="right")
        ax.set(ylabel="median intensity", title="Median intensity per label")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        figures.append(("Intensity per label", write_figure(fig, out / "intensity_per_label.png")))
    else:
        miss = [s for c, _, _, s in clouds if "label" not in c or "intensity" not in c]
        notes.append(f"Intensity per label: not drawn (label or intensity not in "
                     f"{' or '.join(miss)}).")  # fmt: skip

    # 7: intensity against range
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    redges = np.linspace(0.0, edges[-1], 81)
    iedges2 = np.linspace(0.0, scale, 65)
    hists = []
    for c, *_ in clouds:
        if "intensity" in c:
            h, _, _ = np.histogram2d(_range_m(c), np.asarray(c["intensity"], np.float64),
                                     bins=(redges, iedges2))  # fmt: skip
            hists.append(h / h.sum())
        else:
            hists.append(None)
    shown = [h[h > 0] for h in hists if h is not None]
    vmin = min((float(s.min()) for s in shown if s.size), default=1e-6)
    vmax = max((float(s.max()) for s in shown if s.size), default=1.0)
    mesh = None
    for ax, h, (_, lab, _col, side) in zip(axes[:2], hists, clouds, strict=True):
        if h is None:
            _missing(ax, f"intensity not in {side}")
            continue
        mesh = ax.pcolormesh(redges, iedges2, np.ma.masked_equal(h.T, 0), cmap="viridis",
                             norm=LogNorm(vmin=vmin, vmax=vmax))  # fmt: skip
        ax.set(xlabel="range (m)", ylabel="intensity", title=lab)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:2].tolist(), label="share of points", pad=0.01)
    mid = 0.5 * (redges[:-1] + redges[1:])
    for c, lab, col, _s in clouds:
        if "intensity" in c:
            r = _range_m(c)
            k = np.clip(np.digitize(r, redges) - 1, 0, len(mid) - 1)
            k[~np.isfinite(r)] = -1  # in no bin
            inten = np.asarray(c["intensity"], np.float64)
            med = np.array([np.median(inten[k == j]) if np.any(k == j) else np.nan
                            for j in range(len(mid))])  # fmt: skip
            axes[2].plot(mid, med, ".-", color=col, label=lab, ms=3)
    axes[2].set(xlabel="range (m)", ylabel="median intensity", title="Median per range bin",
                ylim=(0, scale))  # fmt: skip
    if any("intensity" in c for c in (a, b)):
        axes[2].legend(fontsize=7, loc="upper right")
    figures.append(("Intensity against range", write_figure(fig, out / "intensity_vs_range.png")))

    # 8: range images
    images = [_image_of(c) for c in (a, b)]
    rows = max((im[0].shape[0] for im in images if im is not None), default=16)
    fig, axes = plt.subplots(
        2, 1, figsize=(16, 2 * max(2.2, min(rows * 0.09, 6.0)) + 1.6), layout="constrained"
    )
    rmax = max(float(np.nanmax(im[1])) for im in images if im is not None) if any(
        im is not None for im in images) else 1.0  # fmt: skip
    from matplotlib import colormaps

    cmap = colormaps["turbo"].with_extremes(bad="magenta")
    mappable = None
    for ax, im, (_, lab, _c, side) in zip(axes, images, clouds, strict=True):
        if im is None:
            _missing(ax, f"ring not in {side}")
            continue
        ret, rng, xlabel = im
        mappable = ax.imshow(np.ma.masked_invalid(rng), aspect="auto", origin="lower",
                             interpolation="nearest", cmap=cmap, vmin=0, vmax=rmax)  # fmt: skip
        dropped = 1 - float(ret.mean())
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(
            ylabel="ring",
            xlabel=xlabel,
            title=f"{lab}: range image, magenta = no return ({dropped:.1%} of pixels)",
        )
    if mappable is not None:
        fig.colorbar(mappable, ax=axes.tolist(), label="range (m)", pad=0.005, aspect=30)
    figures.append(("Range images (first returns)", write_figure(fig, out / "range_images.png")))

    page = _html(result, names, figures, notes)
    index = write_atomic(out / "index.html", page)
    return [p for _, p in figures] + [index]


def _rows(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [r for k, v in value.items() for r in _rows(f"{prefix}.{k}" if prefix else k, v)]
    if value is None:
        return [(prefix, f"null ({_why_null(prefix)})")]
    if isinstance(value, bool):
        return [(prefix, json.dumps(value))]
    if isinstance(value, list):
        text = ", ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in value)
        return [(prefix, text)]
    if isinstance(value, float):
        return [(prefix, f"{value:.6g}")]
    return [(prefix, str(value))]


def _why_null(key: str) -> str:
    """Why the figure ``key`` (a dotted path into the result) is null."""
    if key == "same_beams":
        return "A and B do not share one beam grid"
    if key.startswith("same_beams.ray_drop"):
        return "0/0: no pixel dropped where it divides"
    if key.startswith("nvs."):
        return ("undefined here: no shared beam grid, a field not in both, 0/0, an image "
                "under 7 x 7 or no scikit-image for SSIM, or equal images for PSNR")  # fmt: skip
    return "a field it needs is not in both clouds"


def _html(
    result: dict, names: tuple[str, str], figures: list[tuple[str, Path]], notes: list[str]
) -> str:
    e = html.escape
    table = "\n".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _rows("", result))
    plots = "\n".join(
        f'<h2>{e(title)}</h2>\n<img src="{e(p.name)}" alt="{e(title)}">' for title, p in figures
    )
    plots += "".join(f"\n<p>{e(n)}</p>" for n in notes)
    raw = e(json.dumps(result, indent=1))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>compare {e(names[0])} / {e(names[1])}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1500px}}
table{{border-collapse:collapse}}th,td{{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}}img{{max-width:100%}}</style></head><body>
<h1>A: {e(names[0])}<br>B: {e(names[1])}</h1>
<table>
{table}
</table>
{plots}
<details><summary>JSON</summary><pre>{raw}</pre></details>
</body></html>
"""
