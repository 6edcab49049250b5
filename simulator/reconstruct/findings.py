"""Where a scan back misses its real frame, by stage and by law.

The figures of :func:`simulator.compare.compare_clouds` say how far a simulated frame is
from the real one; these say why, beam by beam, on the shared grid:

* **ray drop**, each wrong beam given one cause:
  ``missed_hole``: the real beam returned, the scene has no surface on it (geometry);
  ``missed_surface``: the scene has a surface where the real return is, and the model
  did not detect it (the detection law: threshold, peak factor, reflectance);
  ``missed_elsewhere``: the scene's surface on that beam is not where the real return is
  (geometry: a surface in front or a gap behind);
  ``false_sky``: the scan returned where the real beam and all its grid neighbours saw
  nothing (sky and silhouettes: the scene reaches beyond what was there);
  ``false_dropout``: the scan returned where the real beam dropped among returning
  neighbours (drop-outs the model does not make: speckle, a soft threshold);
* **depth** on beams where both returned: the share within ``surface_tolerance_m`` and
  its median error (noise and pose), and the share beyond it (another surface hit);
* **intensity** on beams where both returned: the median ratio of scanned to real
  reading, per ring and per bin of incidence cosine and of range.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import PointCloud
from .grid import BeamGrid

__all__ = ["findings", "scan_grid"]

#: Incidence cosine bins of the intensity figures.
COS_EDGES = (0.0, 0.1, 0.2, 0.4, 0.7, 1.0)
#: Range bins of the intensity figures, m.
RANGE_EDGES_M = (0.0, 5.0, 10.0, 20.0, 40.0, 80.0, np.inf)


def scan_grid(
    cloud: PointCloud, shape: tuple[int, int]
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """A scanned frame's first returns on its grid (``ring``, ``column``): range (m),
    intensity and incidence cosine, (C, W) float64 each, NaN where none."""
    c, w = shape
    out = [np.full(c * w, np.nan) for _ in range(3)]
    first = cloud["return_number"] <= 1 if "return_number" in cloud.names else slice(None)
    pix = (cloud["ring"].astype(np.int64) * w + cloud["column"].astype(np.int64))[first]
    cos = cloud["cos_incidence"] if "cos_incidence" in cloud.names else np.full(len(cloud), np.nan)
    for arr, values in zip(out, (cloud["range_m"], cloud["intensity"], cos), strict=True):
        arr[pix] = np.asarray(values, dtype=np.float64)[first]
    return out[0].reshape(c, w), out[1].reshape(c, w), out[2].reshape(c, w)


def _share(mask: NDArray[np.bool_], total: int) -> dict[str, float | int]:
    n = int(mask.sum())
    return {"beams": n, "share": round(n / total, 6) if total else 0.0}


def _binned_ratio(
    key: NDArray[np.float64], ratio: NDArray[np.float64], edges: tuple[float, ...]
) -> list[dict[str, Any]]:
    rows = []
    for lo, hi in itertools.pairwise(edges):
        sel = (key >= lo) & (key < hi) & np.isfinite(ratio)
        rows.append(
            {
                "from": lo,
                "to": None if not np.isfinite(hi) else hi,
                "beams": int(sel.sum()),
                "median_ratio": round(float(np.median(ratio[sel])), 4) if sel.any() else None,
            }
        )
    return rows


def findings(
    real: BeamGrid,
    scan: PointCloud,
    surface_range_m: NDArray[np.float64],
    surface_tolerance_m: float = 0.1,
) -> dict[str, Any]:
    """The causes of a scan back's differences from its real frame (see the module).

    Parameters
    ----------
    real : BeamGrid
        The real frame on the scanner's grid.
    scan : PointCloud
        The scan back, with ``ring``, ``column``, ``range_m``, ``intensity`` and the
        diagnostic ``cos_incidence``.
    surface_range_m : (C, W) float64
        Where each beam meets the scene's surfaces, measured as the real range is; inf
        where it meets none.
    surface_tolerance_m : float
        A surface this near the real return (plus 1 % of its range) is the one it saw.

    Returns
    -------
    dict
        ``ray_drop``, ``depth`` and ``intensity`` (see the module).
    """
    shape = real.shape
    total = shape[0] * shape[1]
    s_range, s_int, s_cos = scan_grid(scan, shape)
    r_ret, s_ret = real.returned, np.isfinite(s_range)
    tol = surface_tolerance_m + 0.01 * np.nan_to_num(real.range_m, nan=0.0)
    on_surface = np.abs(surface_range_m - real.range_m) <= tol
    hole = ~np.isfinite(surface_range_m)
    missed = r_ret & ~s_ret
    false = s_ret & ~r_ret
    padded = np.pad(r_ret, ((1, 1), (0, 0)))
    neighbours = padded[:-2] | padded[2:] | np.roll(r_ret, 1, axis=1) | np.roll(r_ret, -1, axis=1)
    both = r_ret & s_ret
    err = np.abs(s_range - real.range_m)
    close = both & (err <= tol)
    far = both & ~close
    ratio = s_int / np.where(real.intensity > 0, real.intensity, np.nan)
    ring_median = [
        round(float(np.nanmedian(ratio[c][both[c]])), 4)
        if both[c].any() and np.isfinite(ratio[c][both[c]]).any()
        else None
        for c in range(shape[0])
    ]
    return {
        "ray_drop": {
            "beams": total,
            "missed_hole": _share(missed & hole, total),
            "missed_surface": _share(missed & on_surface, total),
            "missed_elsewhere": _share(missed & ~hole & ~on_surface, total),
            "false_sky": _share(false & ~neighbours, total),
            "false_dropout": _share(false & neighbours, total),
        },
        "depth": {
            "both_returned": int(both.sum()),
            "on_surface_share": round(float(close.sum() / max(both.sum(), 1)), 6),
            "on_surface_median_abs_m": round(float(np.median(err[close])), 5)
            if close.any()
            else None,
            "other_surface_share": round(float(far.sum() / max(both.sum(), 1)), 6),
            "other_surface_nearer_share": round(
                float((far & (s_range < real.range_m)).sum() / max(far.sum(), 1)), 6
            ),
        },
        "intensity": {
            "median_ratio": round(float(np.nanmedian(ratio[both])), 4) if both.any() else None,
            "median_ratio_per_ring": ring_median,
            "by_cos": _binned_ratio(s_cos[both], ratio[both], COS_EDGES),
            "by_range_m": _binned_ratio(real.range_m[both], ratio[both], RANGE_EDGES_M),
        },
    }
