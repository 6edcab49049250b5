"""A procedural farm yard: grass and a gravel track, a ploughed field, barns with doors
and windows, parked cars and a truck, trees with porous crowns, hedges, fences, bales."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import load_materials
from .kit import Kit, jitter_material

__all__ = ["farm_yard"]

_MATERIALS = ("grass", "gravel", "soil", "concrete", "building_wall", "roof_metal", "glass",
              "wood", "car_paint", "painted_metal", "rubber", "fabric", "bark", "vegetation",
              "foliage", "pole_metal", "wire_mesh", "plastic")  # fmt: skip


def farm_yard(seed: int) -> dict[str, Any]:
    """A farm yard scene mapping (the scene YAML's structure), the same for the same seed.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    dict
        ``{"materials": {...}, "objects": [...]}`` as :func:`~simulator.generators.street`.
    """
    rng = np.random.default_rng(seed)
    lib = load_materials()
    materials = {n: jitter_material(lib[n], rng) for n in _MATERIALS}
    kit = Kit(rng)
    track_y = float(rng.uniform(-8, -2))
    track_w = float(rng.uniform(3, 6))
    kit.part("ground", {"plane": {"size_m": [160, 160]}}, (0, 0, 0), "grass", "terrain")
    kit.part("track", {"plane": {"size_m": [150, track_w]}}, (0, track_y, 0.02), "gravel",
             "other-ground")  # fmt: skip
    kit.box("field", (float(rng.uniform(20, 40)), 25, 0.1), (float(rng.uniform(-20, 20)), -30,
            0.05), "soil", "terrain")  # fmt: skip
    # Barns and sheds north of the track, facing it.
    x = float(rng.uniform(-50, -30))
    for k in range(int(rng.integers(2, 5))):
        length = float(rng.uniform(8, 20))
        depth = float(rng.uniform(7, 14))
        kit.building(
            f"barn{k}",
            x + length / 2,
            track_y + track_w / 2 + float(rng.uniform(4, 12)),
            0.0,
            length_m=length,
            depth_m=depth,
            floors=int(rng.integers(1, 3)),
        )
        x += length + float(rng.uniform(4, 15))
    for k in range(int(rng.integers(1, 4))):
        kit.car(
            f"car{k}",
            float(rng.uniform(-30, 30)),
            track_y + float(rng.uniform(-0.5, 0.5)),
            float(rng.uniform(-10, 10)),
            kind=str(rng.choice(["hatchback", "suv", "van"])),
        )
    if rng.uniform() < 0.6:
        kit.car("truck", float(rng.uniform(-30, 30)), track_y - track_w / 2 - 3.0,
                float(rng.uniform(-20, 20)), kind="truck")  # fmt: skip
    for k in range(int(rng.integers(4, 12))):
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(10, 50)
        kit.tree(f"tree{k}", float(dist * np.cos(angle)), float(dist * np.sin(angle)))
    for k in range(int(rng.integers(3, 10))):
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(8, 40)
        kit.bush(f"bush{k}", float(dist * np.cos(angle)), float(dist * np.sin(angle)))
    fence_y = track_y - track_w / 2 - float(rng.uniform(6, 10))
    kit.fence("fence", -40.0, 40.0, fence_y, kind=str(rng.choice(["wood", "mesh"])))
    kit.fence("hedge", -60.0, -42.0, fence_y, kind="hedge")
    for k in range(int(rng.integers(2, 8))):  # round bales
        kit.part(
            f"bale{k}",
            {"cylinder": {"radius_m": 0.75, "height_m": 1.2, "sections": 16}},
            (float(rng.uniform(-20, 20)), fence_y - float(rng.uniform(2, 10)), 0.75),
            "vegetation",
            "other-object",
            rotation_deg=(90.0, 0.0, float(rng.uniform(0, 180))),
        )
    for k in range(int(rng.integers(0, 3))):
        kit.person(f"worker{k}", float(rng.uniform(-20, 20)), track_y + float(rng.uniform(2, 5)),
                   float(rng.uniform(0, 360)), speed_mps=float(rng.choice([0.0, 1.2])))  # fmt: skip
    return {"materials": materials, "objects": kit.objects}
