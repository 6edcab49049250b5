"""The ``nvs`` block: the neural LiDAR novel-view-synthesis papers' measures, computed as
LiDAR4D's evaluation code computes them (ispc-lab/LiDAR4D ``utils/metrics.py`` at
:data:`LIDAR4D_COMMIT`): :func:`nvs_figures`. Its definitions differ from
:func:`simulator.compare.compare_clouds`' own (squared distances, a chamfer sum, drops as
depth 0 over the whole image); see there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import PointCloud
from .common import (
    first_returns,
    intensity_scales,
    nearest_distance_m,
    nearest_per_pixel,
    ratio_or_none,
    shared_grid,
)

__all__ = [
    "LIDAR4D_COMMIT",
    "NVS_F_SCORE_THRESHOLD_M2",
    "NVS_MAX_DEPTH_M",
    "NVS_MIN_DEPTH_M",
    "NVS_MIN_INTENSITY",
    "NVS_RAY_DROP_RATIO",
    "NVS_TABLE_KEYS",
    "SSIM_WINDOW",
    "nvs_figures",
]

#: The papers' headline measures of the ``nvs`` block, in the order their tables (and
#: reconstruct's summary table and page) give them.
NVS_TABLE_KEYS = ("ray_drop_accuracy", "ray_drop_f1", "depth_medae_m", "depth_rmse_m", "cd",
                  "f_score", "intensity_rmse")  # fmt: skip

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


def _float(x: float | None) -> float | None:
    """A JSON-safe float: ``None`` for None or NaN."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


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
    sel = first_returns(c)
    xyz = np.asarray(c["xyz"], dtype=np.float64)[sel]
    inten = (np.asarray(c["intensity"], dtype=np.float64)[sel] / full_scale
             if "intensity" in c else np.full(len(xyz), np.nan))  # fmt: skip
    depth = np.linalg.norm(xyz, axis=1)
    near = depth < NVS_MAX_DEPTH_M
    ret, (dep, inn, x, y, z) = nearest_per_pixel(
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
    d2_pred = nearest_distance_m(pred, truth) ** 2  # dist1: B -> A
    d2_truth = nearest_distance_m(truth, pred) ** 2  # dist2: A -> B
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
    scales = intensity_scales(a, b)
    full = scales["intensity_full_scale"]
    shape = shared_grid(a, b)
    images = None if shape is None else [_nvs_image(c, shape, full) for c in (a, b)]
    if images is None:
        pts = [np.asarray(c["xyz"], dtype=np.float64)[first_returns(c)] for c in (a, b)]
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
    precision, recall = ratio_or_none(tp, tp + fp), ratio_or_none(tp, tp + fn)
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
