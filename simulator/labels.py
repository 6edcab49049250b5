"""SemanticKITTI class names and ids, which classes are countable things, and counting
points per class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "SEMANTIC_KITTI",
    "SEMANTIC_KITTI_CONTENT",
    "THING_LABELS",
    "count_labels",
    "label_id",
    "label_name",
    "named_counts",
]

#: SemanticKITTI semantic ids by class name (the ``.label`` files' low 16 bits).
SEMANTIC_KITTI: dict[str, int] = {
    "unlabeled": 0,
    "outlier": 1,
    "car": 10,
    "bicycle": 11,
    "bus": 13,
    "motorcycle": 15,
    "on-rails": 16,
    "truck": 18,
    "other-vehicle": 20,
    "person": 30,
    "bicyclist": 31,
    "motorcyclist": 32,
    "road": 40,
    "parking": 44,
    "sidewalk": 48,
    "other-ground": 49,
    "building": 50,
    "fence": 51,
    "other-structure": 52,
    "lane-marking": 60,
    "vegetation": 70,
    "trunk": 71,
    "terrain": 72,
    "pole": 80,
    "traffic-sign": 81,
    "other-object": 99,
    # The WADS dataset's additions for winter (Kurup and Bos 2021).
    "falling-snow": 110,
    "accumulated-snow": 111,
    "moving-car": 252,
    "moving-bicyclist": 253,
    "moving-person": 254,
    "moving-motorcyclist": 255,
    "moving-on-rails": 256,
    "moving-bus": 257,
    "moving-truck": 258,
    "moving-other-vehicle": 259,
}

_NAMES_BY_ID = {v: k for k, v in SEMANTIC_KITTI.items()}

#: Ids of countable objects, which get an instance id of their own by default.
THING_LABELS: frozenset[int] = frozenset({10, 11, 13, 15, 16, 18, 20, 30, 31, 32, *range(252, 260)})


#: Share of the points of each raw SemanticKITTI class over the dataset's labelled scans:
#: the ``content`` table of ``config/semantic-kitti.yaml`` in the official API
#: (https://github.com/PRBonn/semantic-kitti-api). The street generator is compared with it.
SEMANTIC_KITTI_CONTENT: dict[int, float] = {
    0: 0.018889854628292943, 1: 0.0002937197336781505, 10: 0.040818519255974316,
    11: 0.00016609538710764618, 13: 2.7879693665067774e-05, 15: 0.00039838616015114444,
    16: 0.0, 18: 0.0020633612104619787, 20: 0.0016218197275284021,
    30: 0.00017698551338515307, 31: 1.1065903904919655e-08, 32: 5.532951952459828e-09,
    40: 0.1987493871255525, 44: 0.014717169549888214, 48: 0.14392298360372,
    49: 0.0039048553037472045, 50: 0.1326861944777486, 51: 0.0723592229456223,
    52: 0.002395131480328884, 60: 4.7084144280367186e-05, 70: 0.26681502148037506,
    71: 0.006035012012626033, 72: 0.07814222006271769, 80: 0.002855498193863172,
    81: 0.0006155958086189918, 99: 0.009923127583046915, 252: 0.001789309418528068,
    253: 0.00012709999297008662, 254: 0.00016059776092534436, 255: 3.745553104802113e-05,
    256: 0.0, 257: 0.00011351574470342043, 258: 0.00010157861367183268,
    259: 4.3840131989471124e-05,
}  # fmt: skip


def label_id(name: str) -> int:
    """Return the SemanticKITTI id of a class name (``KeyError`` if unknown)."""
    return SEMANTIC_KITTI[name]


def label_name(label: int) -> str:
    """Return the class name of a SemanticKITTI id, or ``"id N"`` if unknown."""
    return _NAMES_BY_ID.get(int(label), f"id {int(label)}")


def count_labels(
    labels: ArrayLike,
    into: dict[int, int] | None = None,
    *,
    order: Literal["id", "first"] = "id",
) -> dict[int, int]:
    """Count points per SemanticKITTI id.

    Parameters
    ----------
    labels : (N,) array of int
        Semantic ids.
    into : dict of int to int, optional
        Running counts to add to (updated in place and returned).
    order : {"id", "first"}
        The order in which ids not yet in ``into`` are added: ascending id, or that of
        their first point in ``labels``.

    Returns
    -------
    dict of int to int
        Points per id (``into`` if given).
    """
    counts = {} if into is None else into
    labels = np.asarray(labels).reshape(-1)
    if order == "first":
        ids, first, n = np.unique(labels, return_index=True, return_counts=True)
        by_first = np.argsort(first, kind="stable")
        ids, n = ids[by_first], n[by_first]
    else:
        ids, n = np.unique(labels, return_counts=True)
    for i, c in zip(ids.tolist(), n.tolist(), strict=True):  # one step per class
        counts[i] = counts.get(i, 0) + c
    return counts


def named_counts(counts: Mapping[int, int]) -> dict[str, int]:
    """Counts by class name, most common first (ties in the order of ``counts``)."""
    ordered = sorted(counts.items(), key=lambda kv: -kv[1])
    return {label_name(k): v for k, v in ordered}
