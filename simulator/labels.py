"""SemanticKITTI class names and ids, and which classes are countable things."""

from __future__ import annotations

__all__ = ["SEMANTIC_KITTI", "THING_LABELS", "label_id", "label_name"]

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


def label_id(name: str) -> int:
    """Return the SemanticKITTI id of a class name (``KeyError`` if unknown)."""
    return SEMANTIC_KITTI[name]


def label_name(label: int) -> str:
    """Return the class name of a SemanticKITTI id, or ``"id N"`` if unknown."""
    return _NAMES_BY_ID.get(int(label), f"id {int(label)}")
