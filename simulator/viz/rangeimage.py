"""Range-image plots: the range, intensity and label channels of
:func:`simulator.rangeimage.range_image` as a PNG (and every channel as ``.npy``).

``range_image`` and ``CHANNELS`` live in :mod:`simulator.rangeimage` (pure arrays, used
by the dataset layouts too) and are re-exported here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..pointcloud import PointCloud
from ..rangeimage import CHANNELS, range_image

__all__ = ["CHANNELS", "range_image", "write_range_image"]


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
