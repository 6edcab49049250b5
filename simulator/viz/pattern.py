"""A scan pattern drawn: azimuth against elevation over one frame (or revolution)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import ScannerConfig
from ..sensor.scanner import pattern_for

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


def plot_pattern(scanner: ScannerConfig, path: str | Path, max_points: int = 300_000) -> Path:
    """Draw one frame of the pattern to a PNG, to compare with a datasheet's figure.

    Left: every pulse's direction, azimuth (wrapped to -180..180, counter-clockwise from
    the sensor's +x) against elevation, coloured by firing time (every k-th pulse of a frame
    of more than ``max_points``), in equal degrees for a
    pattern narrower than a half turn; the title gives the spans. Right, for a spinning
    head: each channel's elevation by channel number (the beam table of a datasheet).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..sensor.scanner import SpinningPattern

    pattern = pattern_for(scanner)
    n = pattern.frame_pulses
    sched = pattern.schedule(0, n)
    keep = slice(None, None, max(1, -(-n // max_points)))  # every k-th pulse of the frame
    azimuth = np.degrees(np.angle(np.exp(1j * sched.azimuth_rad)))[keep]
    elevation = np.degrees(sched.elevation_rad)[keep]
    time_ms = sched.time_s[keep] * 1e3
    spinning = isinstance(pattern, SpinningPattern)
    if spinning:
        fig, (ax, ax_ch) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 1]})
    else:
        fig, ax = plt.subplots(figsize=(8, 7))
    dots = ax.scatter(azimuth, elevation, s=0.2, c=time_ms, cmap="viridis")
    fig.colorbar(dots, ax=ax, label="firing time (ms)", fraction=0.04, pad=0.02)
    h_span = 360.0 if spinning else float(np.ptp(azimuth))
    if h_span < 180.0:
        ax.set_aspect("equal")
    ax.set(xlabel="azimuth (deg, counter-clockwise from +x)", ylabel="elevation (deg)",
           title=f"{scanner.name}: {n:,} pulses in {sched.time_s[-1] * 1e3:.1f} ms, "
           f"{h_span:.1f} x {np.ptp(elevation):.1f} deg ({elevation.min():+.1f} to "
           f"{elevation.max():+.1f})")  # fmt: skip
    if spinning:
        table = np.degrees(pattern.elevation_rad)
        ax_ch.plot(np.arange(len(table)), table, "o", ms=3)
        ax_ch.set(xlabel="channel (ring)", ylabel="elevation (deg)",
                  title=f"{len(table)} channels")  # fmt: skip
        ax_ch.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
