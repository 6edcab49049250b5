"""A procedural street: lanes and paint, kerbs and sidewalks, verges, façades with
windows, parked and moving cars, cyclists, walkers, trees, street furniture.

The street runs along x, centred on y = 0, from ``-STREET_LENGTH_M / 2`` to
``+STREET_LENGTH_M / 2``; its cross-section from the centre line outwards, per side, is:
traffic lanes, an optional parking lane, the kerb, the sidewalk (with the tree line,
lamp posts, signs and furniture at its kerb edge), a front garden or verge of grass
with a fence or a hedge on the property line, and the buildings behind it with gaps
between them. Traffic drives on the right: the inner lane at -y, heading +x, is kept free
for the sensor's vehicle (the dataset specs drive there). Every random choice is drawn
from ``numpy.random.default_rng(seed)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..config import load_materials
from .kit import Kit, jitter_material

__all__ = ["STREET_LENGTH_M", "street"]

#: Length of the generated street (m).
STREET_LENGTH_M = 220.0
#: Lowest leaves of the trees along the kerb (m): pruned clear of trucks and buses, as
#: street trees are (4-4.5 m is common).
STREET_TREE_CLEARANCE_M = 4.0

_MATERIALS = ("asphalt", "concrete", "grass", "soil", "building_wall", "glass", "wood",
              "car_paint", "painted_metal", "pole_metal", "retroreflective_sign", "lane_paint",
              "bark", "vegetation", "foliage", "rubber", "fabric", "plastic", "wire_mesh",
              "roof_metal")  # fmt: skip


def _paint(kit: Kit, name: str, y_m: float, width_m: float, *, dash_m: float | None,
           gap_m: float, x0_m: float, x1_m: float) -> None:  # fmt: skip
    """A lane line along x at ``y_m``: solid, or dashes of ``dash_m`` with ``gap_m``."""
    if dash_m is None:
        kit.part(name, {"plane": {"size_m": [x1_m - x0_m, width_m]}},
                 ((x0_m + x1_m) / 2, y_m, 0.004), "lane_paint", "lane-marking")  # fmt: skip
        return
    starts = np.arange(x0_m, x1_m - dash_m, dash_m + gap_m)
    for k, x in enumerate(starts):
        kit.part(f"{name}/{k}", {"plane": {"size_m": [dash_m, width_m]}},
                 (x + dash_m / 2, y_m, 0.004), "lane_paint", "lane-marking")  # fmt: skip


def street(seed: int) -> dict[str, Any]:
    """A street scene mapping (the scene YAML's structure), the same for the same seed.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``.

    Returns
    -------
    dict
        ``{"materials": {...}, "objects": [...]}``: the library's materials with their
        parameters randomised (:data:`~simulator.generators.kit.MATERIAL_JITTER`) and the
        objects that use them by name.
    """
    rng = np.random.default_rng(seed)
    lib = load_materials()
    materials = {n: jitter_material(lib[n], rng) for n in _MATERIALS}
    kit = Kit(rng)
    half = STREET_LENGTH_M / 2
    lanes = int(rng.choice([1, 2], p=[0.7, 0.3]))  # per direction
    lane_w = float(rng.uniform(3.0, 3.5))
    parking = {side: bool(rng.uniform() < 0.5) for side in (-1, 1)}
    park_w = float(rng.uniform(2.0, 2.4))
    kerb_h = float(rng.uniform(0.1, 0.16))
    kit.part("terrain", {"plane": {"size_m": [STREET_LENGTH_M + 80, 160.0]}}, (0, 0, -0.02),
             "grass", "terrain")  # fmt: skip
    centre_dash = None if rng.uniform() < 0.3 else float(rng.choice([3.0, 4.5]))
    _paint(kit, "paint/centre", 0.0, 0.12, dash_m=centre_dash, gap_m=6.0, x0_m=-half, x1_m=half)
    crossing_x = float(rng.uniform(-40, 40))
    edge = {}
    for side in (-1, 1):
        carriage = lanes * lane_w
        edge[side] = carriage + (park_w if parking[side] else 0.0)
        kit.part(f"road{side}", {"plane": {"size_m": [STREET_LENGTH_M, carriage]}},
                 (0, side * carriage / 2, 0.0), "asphalt", "road")  # fmt: skip
        if parking[side]:
            kit.part(f"parking{side}", {"plane": {"size_m": [STREET_LENGTH_M, park_w]}},
                     (0, side * (carriage + park_w / 2), 0.0), "asphalt", "parking")  # fmt: skip
        for k in range(1, lanes):
            _paint(kit, f"paint/lane{side}_{k}", side * k * lane_w, 0.12, dash_m=3.0, gap_m=6.0,
                   x0_m=-half, x1_m=half)  # fmt: skip
        _paint(kit, f"paint/edge{side}", side * (carriage - 0.15), 0.15, dash_m=None, gap_m=0,
               x0_m=-half, x1_m=half)  # fmt: skip
    road_w = edge[-1] + edge[1]
    for k in range(8):  # a zebra crossing
        kit.part(f"paint/zebra{k}", {"plane": {"size_m": [3.0, 0.5]}},
                 (crossing_x, -edge[-1] + 0.5 + k * (road_w - 1.0) / 7, 0.005), "lane_paint",
                 "lane-marking")  # fmt: skip

    for side in (-1, 1):
        s = float(side)
        y_kerb = s * edge[side]
        walk_w = float(rng.uniform(2.0, 4.5))
        verge = float(rng.uniform(1.0, 3.0)) if rng.uniform() < 0.75 else 0.0
        kit.box(f"kerb{side}", (STREET_LENGTH_M, 0.15, kerb_h), (0, y_kerb + s * 0.075, kerb_h / 2),
                "concrete", "sidewalk")  # fmt: skip
        if verge:  # a grass strip between the kerb and the sidewalk
            kit.box(
                f"verge{side}",
                (STREET_LENGTH_M, verge, kerb_h),
                (0, y_kerb + s * (0.15 + verge / 2), kerb_h / 2),
                "grass",
                "terrain",
            )
        y_walk = y_kerb + s * (0.15 + verge)  # sidewalk's kerb edge
        kit.box(f"sidewalk{side}", (STREET_LENGTH_M, walk_w, kerb_h),
                (0, y_walk + s * walk_w / 2, kerb_h / 2), "concrete", "sidewalk")  # fmt: skip
        if verge:  # shrubs along the verge, with gaps
            x = -half
            k = 0
            while x < half:
                length = float(rng.uniform(3, 15))
                if rng.uniform() < 0.8:
                    h = float(rng.uniform(0.5, 1.3))
                    kit.box(f"shrubs{side}_{k}", (length, min(verge * 0.7, 1.5), h),
                            (x + length / 2, y_kerb + s * (0.15 + verge / 2), kerb_h + h / 2),
                            "vegetation", "vegetation")  # fmt: skip
                x += length + float(rng.uniform(2, 10))
                k += 1
        y_tree = y_kerb + s * (0.15 + verge / 2) if verge else y_walk + s * 0.9
        y_back = y_walk + s * walk_w  # property line
        # Street furniture at the kerb edge of the sidewalk.
        spacing = float(rng.uniform(25, 35))
        for k, x in enumerate(np.arange(-half + rng.uniform(0, spacing), half, spacing)):
            kit.street_light(f"light{side}_{k}", float(x), y_walk + s * 0.4, -90.0 * s)
        if rng.uniform() < 0.9:  # a tree line
            step = float(rng.uniform(6, 11))
            for k, x in enumerate(np.arange(-half + rng.uniform(0, step), half, step)):
                if rng.uniform() < 0.9:
                    kit.tree(f"tree{side}_{k}", float(x + rng.uniform(-1, 1)), y_tree,
                             clearance_m=STREET_TREE_CLEARANCE_M)  # fmt: skip
        for k in range(int(rng.integers(2, 6))):
            kit.sign(f"sign{side}_{k}", float(rng.uniform(-half + 5, half - 5)),
                     y_walk + s * 0.3, 90.0 - 90.0 * s)  # fmt: skip
        kit.traffic_light(f"signal{side}", crossing_x - s * 2.5, y_walk + s * 0.4, -90.0 * s)
        for k in range(int(rng.integers(1, 6))):
            kit.bin(f"bin{side}_{k}", float(rng.uniform(-half, half)),
                    y_back - s * 0.5, float(rng.uniform(-10, 10)))  # fmt: skip
        for k in range(int(rng.integers(0, 3))):
            kit.bench(f"bench{side}_{k}", float(rng.uniform(-half, half)), y_back - s * 0.4,
                      180.0 if side > 0 else 0.0)  # fmt: skip
        for k in range(int(rng.integers(0, 4))):
            kit.bicycle(f"bike{side}_{k}", float(rng.uniform(-half, half)),
                        y_back - s * 0.5, float(rng.uniform(-20, 20)))  # fmt: skip
        # Parked cars, bumper to bumper with gaps.
        if parking[side]:
            x = -half + float(rng.uniform(0, 8))
            k = 0
            while x < half - 6:
                if rng.uniform() < 0.3:
                    kit.car(f"parked{side}_{k}", x + 2.5, s * (lanes * lane_w + park_w / 2),
                            float(rng.uniform(-3, 3)) + (0.0 if side < 0 else 180.0))  # fmt: skip
                    k += 1
                x += float(rng.uniform(5.5, 9.0))
        # People on the sidewalk: walkers in both directions, a few standing.
        for k in range(int(rng.integers(0, 3))):
            direction = 1.0 if rng.uniform() < 0.5 else -1.0
            # walkers keep between the kerb-side furniture and the bins at the back
            y = y_walk + s * float(rng.uniform(1.5, max(walk_w - 1.0, 1.5)))
            kit.person(f"walker{side}_{k}", float(rng.uniform(-60, 60)), y,
                       0.0 if direction > 0 else 180.0,
                       speed_mps=float(rng.uniform(1.0, 1.6)))  # fmt: skip
        if rng.uniform() < 0.3:  # someone standing
            kit.person(f"person{side}_0", float(rng.uniform(-60, 60)),
                       y_walk + s * float(rng.uniform(0.8, walk_w - 0.4)),
                       float(rng.uniform(0, 360)))  # fmt: skip
        # Plots: a front garden (grass) with a fence or hedge on the property line, and a
        # building set back behind it; gaps between buildings.
        x = -half
        k = 0
        while x < half:
            length = float(rng.uniform(10, 32))
            gap = float(rng.uniform(0, 7)) if rng.uniform() < 0.7 else 0.0
            setback = float(rng.choice([0.0, rng.uniform(3, 10)], p=[0.15, 0.85]))
            x1 = min(x + length, half)
            if setback > 0:
                kit.part(f"garden{side}_{k}", {"plane": {"size_m": [x1 - x + gap, setback]}},
                         ((x + x1 + gap) / 2, y_back + s * setback / 2, 0.0), "grass",
                         "terrain")  # fmt: skip
                kind = str(rng.choice(["hedge", "mesh", "wood", "wall"], p=[0.6, 0.1, 0.2, 0.1]))
                kit.fence(f"fence{side}_{k}", x + 0.3, x1 + gap - 0.3, y_back + s * 0.4,
                          kind=kind)  # fmt: skip
                for b in range(int(rng.integers(2, 8))):
                    kit.bush(
                        f"bush{side}_{k}_{b}",
                        float(rng.uniform(x, x1)),
                        y_back + s * float(rng.uniform(1.0, max(setback - 0.5, 1.1))),
                    )
            floors = int(rng.choice([1, 2, 3, 4, 5, 6], p=[0.1, 0.25, 0.25, 0.2, 0.12, 0.08]))
            if x1 - x > 6:
                kit.building(f"building{side}_{k}", (x + x1) / 2, y_back + s * setback,
                             0.0 if side > 0 else 180.0, length_m=x1 - x,
                             depth_m=float(rng.uniform(9, 16)), floors=floors,
                             shop_front=setback == 0 and rng.uniform() < 0.5)  # fmt: skip
            if gap > 2 and rng.uniform() < 0.5:  # a tree in the gap
                kit.tree(f"yardtree{side}_{k}", x1 + gap / 2, y_back + s * (setback + 3))
            if setback > 5 and rng.uniform() < 0.5:  # a tree in the front garden
                kit.tree(f"gardentree{side}_{k}", float(rng.uniform(x + 2, max(x1 - 2, x + 2))),
                         y_back + s * setback / 2)  # fmt: skip
            x = x1 + gap
            k += 1
    # Traffic: cars in the lanes, each direction on its own side; cyclists at the edge.
    # The inner lane at -y is the sensor vehicle's (ego) lane: no traffic is put in it.
    free = [(1, k) for k in range(lanes)] + [(-1, k) for k in range(1, lanes)]
    for k in range(int(rng.integers(2, 6))):
        side, lane = free[int(rng.integers(len(free)))]
        y = side * (lane + 0.5) * lane_w
        # Right-hand traffic: the lane at -y drives towards +x.
        heading = 0.0 if side < 0 else 180.0
        kit.car(f"traffic{k}", float(rng.uniform(-70, 70)), y, heading,
                speed_mps=float(rng.uniform(6, 14)))  # fmt: skip
    for k in range(int(rng.integers(0, 3))):
        side = 1 if lanes == 1 or rng.uniform() < 0.5 else -1
        kit.bicycle(f"cyclist{k}", float(rng.uniform(-60, 60)), side * (lanes * lane_w - 0.8),
                    0.0 if side < 0 else 180.0, speed_mps=float(rng.uniform(3, 6)))  # fmt: skip
    return {"materials": materials, "objects": kit.objects}
