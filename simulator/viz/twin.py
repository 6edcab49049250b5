"""The page of ``calibrate --twin``: the real frame against its calibrated twin, per surface.

Plots (PNG, matplotlib's Agg backend) and an ``index.html`` showing them under the goals'
table: return share per ring, median intensity per ring, intensity against the incidence
cosine, and the return share against each ring's range on the surface (where rings drop
out).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np

from ..compare import grouped_median
from ..io.atomic import write_atomic, write_figure
from ..pointcloud import PointCloud

__all__ = ["write_twin_page"]


def _values(xs: list[float | None]) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=np.float64)


def _binned_median(x: np.ndarray, y: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """(B,) median of ``y`` in bins of ``x`` (NaN where a bin has fewer than 5 values)."""
    return grouped_median(np.digitize(x, edges) - 1, y, len(edges) - 1, min_count=5)


def write_twin_page(
    surfaces: dict[str, dict[str, Any]], calibration: Any, twin: PointCloud, folder: Path
) -> list[Path]:
    """Draw the twin's plots and ``index.html`` into ``folder``; return the files.

    Parameters
    ----------
    surfaces : dict
        Per surface name, the figures of :func:`simulator.reconstruct.twin.run_twin`
        (per-ring lists).
    calibration : Calibration
        The fits (each surface's points' incidence cosines and intensities).
    twin : PointCloud
        The twin's scan, with diagnostics (``object_id``, ``cos_incidence``).
    folder : Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[Path] = []
    names = list(surfaces)
    n = len(names)
    fig, axes = plt.subplots(n, 3, figsize=(15, 3.4 * n), squeeze=False)
    edges = np.linspace(0.0, 1.0, 21)
    for row, name in enumerate(names):
        f = surfaces[name]
        rings = np.arange(len(f["share_a"]))
        ax = axes[row, 0]
        ax.plot(rings, _values(f["share_a"]), ".-", label="real")
        ax.plot(rings, _values(f["share_b"]), ".-", label="twin")
        ax.set(
            title=f"{name}: return share per ring",
            xlabel="channel",
            ylabel="returns / beams",
            ylim=(-0.02, 1.02),
        )
        ax.legend(fontsize=8)
        ax = axes[row, 1]
        ax.plot(rings, _values(f["median_intensity_a"]), ".-", label="real")
        ax.plot(rings, _values(f["median_intensity_b"]), ".-", label="twin")
        ax.set(title=f"{name}: median intensity per ring", xlabel="channel", ylabel="intensity")
        ax.legend(fontsize=8)
        ax = axes[row, 2]
        s = calibration.surfaces[row]
        centres = 0.5 * (edges[1:] + edges[:-1])
        ax.plot(centres, _binned_median(s.cos, s.intensity, edges), ".-", label="real")
        k = row  # the twin's objects are the surfaces, in order
        on = twin["object_id"] == k
        ax.plot(
            centres,
            _binned_median(
                twin["cos_incidence"][on].astype(np.float64),
                twin["intensity"][on].astype(np.float64),
                edges,
            ),
            ".-",
            label="twin",
        )
        ax.set(
            title=f"{name}: intensity against incidence",
            xlabel="cos(incidence)",
            ylabel="median intensity",
        )
        ax.legend(fontsize=8)
    files.append(write_figure(fig, folder / "rings.png", dpi=110))

    fig, ax = plt.subplots(figsize=(7, 4))
    ground = "ground" if "ground" in surfaces else names[0]
    f = surfaces[ground]
    r = _values(f["median_range_per_ring_m"])
    judged = np.array(f["beams_per_ring"]) >= 20
    order = np.argsort(np.where(judged, r, np.inf))[: int(judged.sum())]
    ax.plot(r[order], _values(f["share_a"])[order], "o-", ms=3, label="real")
    ax.plot(r[order], _values(f["share_b"])[order], "x--", ms=4, label="twin")
    ax.set(title=f"{ground}: each ring's return share against its range (where rings drop out)",
           xlabel="median range of the ring's beams on the surface, m", ylabel="returns / beams",
           ylim=(-0.02, 1.02))  # fmt: skip
    ax.legend(fontsize=8)
    files.append(write_figure(fig, folder / "dropout_range.png", dpi=110))

    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{f['rings_judged']}</td>"
        f"<td>{_pct(f['share_within_0.05'])}</td><td>{_pct(f['intensity_within_15pct'])}</td>"
        f"<td>{'<br>'.join(html.escape(v) for v in f.get('verdicts', [])) or 'met'}</td></tr>"
        for name, f in surfaces.items()
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>calibrate --twin</title>"
        "</head><body><h1>The real frame against its calibrated twin</h1>"
        "<p>Goals: on 90 % of the rings, the return share within 0.05 of the real one and "
        "the median intensity within 15 %.</p><table border='1' cellpadding='4'>"
        "<tr><th>surface</th><th>rings judged</th><th>share within 0.05</th>"
        f"<th>intensity within 15 %</th><th>what misses</th></tr>{rows}</table>"
        "<h2>Per ring</h2><img src='rings.png' alt='per ring'>"
        "<h2>Drop-out range</h2><img src='dropout_range.png' alt='drop-out range'>"
        "<p>The figures: <a href='twin.json'>twin.json</a>, "
        "<a href='compare.json'>compare.json</a>.</p></body></html>\n"
    )
    files.append(write_atomic(folder / "index.html", page))
    return files


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100.0 * x:.0f} %"
