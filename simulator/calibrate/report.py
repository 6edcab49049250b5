"""The calibration report: per surface, the data as points with the fitted law as a curve,
the fitted numbers with their uncertainties, and the verdicts; one HTML page."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..io.atomic import write_atomic

if TYPE_CHECKING:
    from . import Calibration, SurfaceFit

__all__ = ["write_report"]


def _figure(s: SurfaceFit, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 4.0))
    rng = np.random.default_rng(0)  # which points to draw (a picture only)
    pick = rng.choice(len(s.cos), size=min(len(s.cos), 6000), replace=False)
    ax = axes[0]
    ax.scatter(s.cos[pick], s.intensity[pick], s=2, alpha=0.3, color="0.4", label="points")
    # Each law: its curve's x key, data key (drawn as dots, or None), model key, scales.
    panels = [
        (s.intensity_fit.curve, "cos", None, "intensity", "linear",
         ("", "fitted scale rho cos^k"), ("incidence cosine", "intensity", "Minnaert law")),
        (s.range_fit.curve, "cos", "sigma_m", "model_m", "log",
         ("robust sigma per bin", "(rough cos^-1.5, noise)"),
         ("incidence cosine", "range residual sigma, m", "Range scatter")),
        (s.slope_fit.curve, "cos", "spread", "model", "linear",
         ("spread of log I per bin", "k tan(theta) sigma"),
         ("incidence cosine", "sigma of log intensity", "Micro-slope")),
        (s.detection_fit.curve, "range_m", "share", "model", "semilogx",
         ("detected share, per ring", "fitted threshold and beam"),
         ("range where the ring meets the plane, m", "detected share", "Detection threshold")),
    ]  # fmt: skip
    for ax, (c, x, data, model, scale, labels, (xlabel, ylabel, title)) in zip(
        axes, panels, strict=True
    ):
        if c:
            order = np.argsort(c[x], kind="stable")
            if data is not None:
                ax.plot(c[x][order], c[data][order], "o", color="0.3", label=labels[0])
            ax.plot(c[x][order], c[model][order], color="C3", lw=2, label=labels[1])
        if scale != "linear":
            ax.set_xscale("log")
            if scale == "log":
                ax.set_yscale("log")
        ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"{s.surface.name}: {len(s.cos):,} points")
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)
    return path


def write_report(calibration: Calibration, folder: str | Path) -> list[Path]:
    """Write ``index.html`` and one PNG a surface into ``folder``; return the files."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files, rows = [], []
    for s in calibration.surfaces:
        png = _figure(s, out / f"{s.surface.name}.png")
        files.append(png)
        values = {**s.intensity_fit.values, **s.range_fit.values, **s.slope_fit.values,
                  **s.detection_fit.values}  # fmt: skip
        cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{v:.5g}</td><td>{e:.2g}</td></tr>"
                        for k, (v, e) in values.items())  # fmt: skip
        notes = "".join(f"<li>{html.escape(v)}</li>" for v in s.verdicts) or "<li>none</li>"
        rows.append(
            f"<h2>{html.escape(s.surface.name)}</h2><p>{len(s.cos):,} points, normal "
            f"{np.round(s.surface.normal, 3).tolist()}</p><table><tr><th>parameter</th>"
            f"<th>value</th><th>standard error</th></tr>{cells}</table>"
            f"<p>Verdicts:</p><ul>{notes}</ul><img src='{png.name}' width='100%'>"
        )
    page = (
        "<!doctype html><meta charset='utf-8'><title>lidar-sim calibrate</title>"
        "<style>body{font-family:sans-serif;max-width:1500px;margin:auto}"
        "td,th{padding:2px 10px;text-align:left}</style>"
        f"<h1>Calibration of {html.escape(calibration.source)}</h1>"
        f"<p>Scanner {html.escape(calibration.scanner.name)}; sensor origin "
        f"{calibration.origin_m.tolist()}.</p>" + "".join(rows)
    )
    files.append(write_atomic(out / "index.html", page))
    return files
