"""Range images: rows are rings (sorted by elevation, highest on top), columns azimuth.

Column ``u = floor((pi - azimuth) / (2 pi) * width)``: the middle column looks forward
(+x), the left edge backward over the left side, as RangeNet++ lays it out. Where
several points fall in one pixel, the nearest is kept. Empty pixels are -1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import PointCloud

__all__ = ["range_image", "write_range_image"]

CHANNELS = ("range", "x", "y", "z", "intensity", "label")


def range_image(cloud: PointCloud, width: int = 1024) -> dict[str, NDArray[np.float32]]:
    """The (rings, width) images of a cloud: range, x, y, z, intensity, label; -1 empty."""
    xyz = cloud["xyz"].astype(np.float64)
    ring = cloud["ring"].astype(np.int64)
    rng = cloud["range_m"].astype(np.float64) if "range_m" in cloud else np.linalg.norm(xyz, axis=1)
    rings = np.unique(ring)
    elevation = np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1]))
    median = np.array([np.median(elevation[ring == r]) for r in rings])
    row_of = np.zeros(int(rings.max()) + 1 if len(rings) else 1, dtype=np.int64)
    row_of[rings[np.argsort(-median)]] = np.arange(len(rings))
    azimuth = np.arctan2(xyz[:, 1], xyz[:, 0])
    col = np.clip(((np.pi - azimuth) / (2 * np.pi) * width).astype(np.int64), 0, width - 1)
    row = row_of[ring]
    order = np.argsort(-rng)  # far first, so the nearest point is written last and wins
    out = {}
    values = {
        "range": rng, "x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2],
        "intensity": cloud["intensity"].astype(np.float64),
        "label": cloud["label"].astype(np.float64) if "label" in cloud else np.zeros(len(rng)),
    }  # fmt: skip
    for name in CHANNELS:
        image = np.full((len(rings), width), -1.0, dtype=np.float32)
        image[row[order], col[order]] = values[name][order]
        out[name] = image
    return out


def write_range_image(
    cloud: PointCloud, path: str | Path, width: int = 1024, npy: bool = False
) -> list[Path]:
    """A PNG of the range, intensity and label channels (and, with ``npy``, the (6, H, W)
    float32 array of every channel beside it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .colors import label_colors

    images = range_image(cloud, width)
    h = images["range"].shape[0]
    fig, axes = plt.subplots(3, 1, figsize=(width / 100.0, 3 * max(h, 16) * 4 / 100.0 + 1.0))
    empty = images["range"] < 0
    for ax, name, cmap in ((axes[0], "range", "turbo"), (axes[1], "intensity", "viridis")):
        shown = np.ma.masked_where(empty, images[name])
        top = 100.0 if name == "intensity" else float(np.percentile(images[name][~empty], 98))
        ax.imshow(shown, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=top)
        ax.set_title(name, fontsize=9, loc="left")
    rgb = label_colors(np.where(empty, 0, images["label"]).astype(np.int64).ravel())
    rgb = rgb.reshape(h, width, 3)
    rgb[empty] = 1.0
    axes[2].imshow(rgb, aspect="auto", interpolation="nearest")
    axes[2].set_title("label", fontsize=9, loc="left")
    for ax in axes:
        ax.set_yticks([])
        ax.set_xticks([0, width // 4, width // 2, 3 * width // 4, width - 1],
                      ["back", "left", "front", "right", "back"])  # fmt: skip
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    files = [path]
    if npy:
        arr = np.stack([images[c] for c in CHANNELS])
        np.save(path.with_suffix(".npy"), arr)
        files.append(path.with_suffix(".npy"))
    return files
