"""Procedural scenes: a street and a farm yard, randomised from a seed (the benchmark's
scene is :mod:`simulator.bench.scene`).

Each dataset generator returns a scene mapping (the scene YAML's structure, primitives
only, with its own ``materials:``) built from ``numpy.random.default_rng(seed)``: the same
seed gives the same scene. Domain randomisation covers the layout, the counts, sizes and
kinds of objects, and material parameters (reflectance, Minnaert exponent, roughness)
within :data:`MATERIAL_JITTER` of the library's values. The objects are made of parts
(:class:`~simulator.generators.kit.Kit`) with SemanticKITTI labels, and the parts of one
countable object share its instance id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .farm import farm_yard
from .kit import MATERIAL_JITTER, Kit
from .street import STREET_LENGTH_M, street

__all__ = [
    "GENERATORS",
    "MATERIAL_JITTER",
    "STREET_LENGTH_M",
    "Kit",
    "farm_yard",
    "street",
]

#: Scene generators by name.
GENERATORS: dict[str, Callable[[int], dict[str, Any]]] = {"farm_yard": farm_yard, "street": street}
