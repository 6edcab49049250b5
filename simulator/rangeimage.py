"""Range images: rows are rings (sorted by elevation, highest on top), columns azimuth.

Column ``u = floor((pi - azimuth) / (2 pi) * width)``: the middle column looks forward
(+x), the left edge backward over the left side, as RangeNet++ lays it out. Where
several points fall in one pixel, the nearest is kept. Empty pixels are -1.

A pure array function on the point record (numpy only), used by the dataset layouts
(:mod:`simulator.io.layouts`) and by the plots (:mod:`simulator.viz.rangeimage`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .pointcloud import PointCloud

__all__ = ["CHANNELS", "range_image"]

#: The channels of a range image, in the order they are stacked in a ``.npy``.
CHANNELS = ("range", "x", "y", "z", "intensity", "label")


def range_image(cloud: PointCloud, width: int = 1024) -> dict[str, NDArray[np.float32]]:
    """The range images of a cloud, one per channel.

    Parameters
    ----------
    cloud : PointCloud
        Needs ``xyz`` and ``ring``; ``range_m``, ``intensity`` and ``label`` are used
        when present (range defaults to ``|xyz|``, label to 0).
    width : int
        Columns (azimuth bins over the full turn).

    Returns
    -------
    dict of str to (rings, width) ndarray of float32
        By :data:`CHANNELS` name: range (m), x, y, z (m), intensity, label; -1 where empty.
    """
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
