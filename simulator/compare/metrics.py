"""The figures that say how far cloud B is from cloud A: :func:`compare_clouds`, and
:func:`format_compare`, their short terminal summary.

Geometric agreement (chamfer distance, F-score from nearest neighbours found with Open3D),
the return share per ring, the distance between the intensity and range distributions and,
when both clouds share one beam grid, the per-beam agreement (``same_beams``: ray drop,
depth and intensity errors). The ``nvs`` block is :func:`.nvs.nvs_figures`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import SimulatorError
from ..pointcloud import PointCloud
from .common import (
    DEFAULT_INTENSITY_MAX,
    RANGE_LIMIT_M,
    declared_intensity_max,
    finite_values,
    first_returns,
    intensity_scales,
    nearest_distance_m,
    nearest_per_pixel,
    ranges_m,
    ratio_or_none,
    shared_grid,
    usable_points,
)
from .nvs import nvs_figures
from .rings import firings_per_ring, first_returns_per_ring

__all__ = [
    "INTENSITY_BINS",
    "RANGE_BIN_M",
    "compare_clouds",
    "format_compare",
    "intensity_scale",
    "range_edges",
]

#: Bins of the intensity histogram over ``[0, scale_max]``.
INTENSITY_BINS = 64
#: Width of the range histogram's bins, in metres.
RANGE_BIN_M = 0.25


def _check(a: PointCloud, b: PointCloud) -> None:
    for side, cloud in (("A", a), ("B", b)):
        if "xyz" not in cloud:
            raise SimulatorError(f"compare: cloud {side} has no xyz coordinates")
        if len(cloud) == 0:
            raise SimulatorError(f"compare: cloud {side} is empty (no points)")


def _tv(p_counts: NDArray, q_counts: NDArray) -> float:
    """Total-variation distance ``0.5 * sum |p - q|`` of two histograms on shared bins."""
    p = p_counts / max(p_counts.sum(), 1)
    q = q_counts / max(q_counts.sum(), 1)
    return float(0.5 * np.abs(p - q).sum())


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
        ok = usable_points(cloud)
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
    d_ab = nearest_distance_m(xa, xb)  # A -> nearest of B
    d_ba = nearest_distance_m(xb, xa)
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
                share[side] = (first_returns_per_ring(c, n) / fc).tolist()
        return {"share_a": share.get("a"), "share_b": share.get("b"), "max_abs_diff": None,
                "firings_per_ring": None, "firings_estimated": None}  # fmt: skip
    n = int(max(a["ring"].max(), b["ring"].max())) + 1
    fa, ea = firings_per_ring(a)
    fb, eb = firings_per_ring(b)
    sa = first_returns_per_ring(a, n) / fa
    sb = first_returns_per_ring(b, n) / fb
    return {
        "share_a": sa.tolist(),
        "share_b": sb.tolist(),
        "max_abs_diff": float(np.abs(sa - sb).max()),
        "firings_per_ring": [fa, fb],
        "firings_estimated": bool(ea or eb),
    }


def intensity_scale(a: PointCloud, b: PointCloud) -> float:
    """The intensity histograms' full scale: the larger of both clouds'
    :func:`.common.declared_intensity_max` and the largest reading of either."""
    top = [declared_intensity_max(c) for c in (a, b)]
    top += [float(np.max(c["intensity"])) for c in (a, b) if "intensity" in c]
    return max(top)


def _intensity_figures(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    med = {s: float(np.median(c["intensity"])) if "intensity" in c else None
           for s, c in (("a", a), ("b", b))}  # fmt: skip
    scale = intensity_scale(a, b)
    tv = None
    if "intensity" in a and "intensity" in b:
        edges = np.linspace(0.0, scale, INTENSITY_BINS + 1)
        ha, _ = np.histogram(np.asarray(a["intensity"], dtype=np.float64), edges)
        hb, _ = np.histogram(np.asarray(b["intensity"], dtype=np.float64), edges)
        tv = _tv(ha, hb)
    return {"tv_distance": tv, "median_a": med["a"], "median_b": med["b"], "scale_max": scale}


def range_edges(ra: NDArray, rb: NDArray) -> NDArray[np.float64]:
    """(E,) float64 edges of the range histograms, every :data:`RANGE_BIN_M` from 0 up to
    past the larger maximum of the ranges ``ra`` and ``rb`` (m), the maximum inside."""
    top = max(float(ra.max(initial=0.0)), float(rb.max(initial=0.0)))
    n = max(int(np.ceil(top / RANGE_BIN_M)), 1)
    if n * RANGE_BIN_M <= top:  # the maximum itself in the last bin, not past it
        n += 1
    return np.arange(n + 1) * RANGE_BIN_M


def _range_figures(a: PointCloud, b: PointCloud) -> dict[str, Any]:
    ra, rb = finite_values(ranges_m(a)), finite_values(ranges_m(b))
    edges = range_edges(ra, rb)
    tv = _tv(np.histogram(ra, edges)[0], np.histogram(rb, edges)[0])
    return {"tv_distance": tv, "bin_m": RANGE_BIN_M}


def _beam_image(
    c: PointCloud, shape: tuple[int, int], full_scale: float
) -> tuple[NDArray, NDArray, NDArray]:
    """(returned, range_m, intensity / ``full_scale``) images (rows, columns) of a cloud's
    first returns on its grid, the nearest return winning a pixel; NaN where nothing
    returned (and everywhere in the intensity image without ``intensity``)."""
    sel = first_returns(c)
    inten = (np.asarray(c["intensity"], dtype=np.float64) / full_scale
             if "intensity" in c else np.full(len(c), np.nan))  # fmt: skip
    ret, (rng, inn) = nearest_per_pixel(
        c["ring"][sel], c["column"][sel], [ranges_m(c)[sel], inten[sel]], shape
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
    shape = shared_grid(a, b)
    if shape is None:
        return None
    scales = intensity_scales(a, b)
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
        "ray_drop_precision": ratio_or_none(tp, tp + fp),
        "ray_drop_recall": ratio_or_none(tp, tp + fn),
        "ray_drop_f1": ratio_or_none(2 * tp, 2 * tp + fp + fn),
        "range_median_abs_m": float(np.median(d_rng)) if has else None,
        "depth_rmse_m": float(np.sqrt(np.mean(d_rng**2))) if has else None,
        "depth_medae_m": float(np.median(d_rng)) if has else None,
        "intensity_rmse": float(np.sqrt(np.mean(d_int**2))) if has_int else None,
        "intensity_medae": float(np.median(d_int)) if has_int else None,
        **scales,
        "pixels": int(ret_a.size),
        "returned_both": int(both.sum()),
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
