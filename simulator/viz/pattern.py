"""A scan pattern drawn: azimuth against elevation over one frame (or revolution)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import ScannerConfig
from ..scanner import pattern_for

__all__ = ["coverage", "plot_pattern"]


def coverage(
    scanner: ScannerConfig, seconds: float, cell_deg: float = 0.5
) -> tuple[float, float, float]:
    """Fraction of the pattern's field of view hit within ``seconds``.

    The field of view is the set of ``cell_deg`` cells (azimuth x elevation) hit within
    the longest time asked of it; returns (covered fraction, azimuth span, elevation span).
    """
    pattern = pattern_for(scanner)
    n = round(seconds * pattern.pulses_per_second)
    sched = pattern.schedule(0, n)
    az = np.degrees(sched.azimuth_rad)
    el = np.degrees(sched.elevation_rad)
    cells = np.unique(np.stack([np.floor(az / cell_deg), np.floor(el / cell_deg)], 1), axis=0)
    return len(cells), float(np.ptp(az)), float(np.ptp(el))


def plot_pattern(scanner: ScannerConfig, path: str | Path, max_points: int = 200_000) -> Path:
    """Scatter one frame of the pattern (azimuth against elevation) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pattern = pattern_for(scanner)
    n = min(pattern.frame_pulses, max_points)
    sched = pattern.schedule(0, n)
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.scatter(np.degrees(sched.azimuth_rad), np.degrees(sched.elevation_rad), s=0.2,
               c=sched.time_s, cmap="viridis")  # fmt: skip
    ax.set(xlabel="azimuth (deg)", ylabel="elevation (deg)",
           title=f"{scanner.name}: {n:,} pulses, {sched.time_s[-1]:.3f} s")  # fmt: skip
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
