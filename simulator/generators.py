"""Procedural scenes: a farm yard and a street for datasets, randomised from a seed, and the
benchmark's million-triangle scene.

Each dataset generator returns a scene mapping (the scene YAML's structure, primitives only) built
from ``numpy.random.default_rng(seed)``: the same seed gives the same scene. Domain
randomisation covers the layout (positions, headings), object counts and sizes, and
material parameters (reflectance, Minnaert exponent, roughness) within the ranges in
:data:`MATERIAL_JITTER` around the library's values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import trimesh

from .config import Material, load_materials
from .labels import label_id
from .scene import Scene, SceneObject

__all__ = [
    "GENERATORS",
    "MATERIAL_JITTER",
    "build_bench_scene",
    "farm_yard",
    "rolling_ground",
    "street",
]

#: Relative ranges of material randomisation: reflectance x [0.8, 1.2], Minnaert k +- 0.1
#: (kept >= 0), roughness x [0.5, 1.5].
MATERIAL_JITTER = {"reflectance": 0.2, "minnaert_k": 0.1, "roughness_m": 0.5}


def _material(library: dict[str, Material], name: str, rng: np.random.Generator) -> dict:
    m = library[name].model_dump()
    m["reflectance"] = float(m["reflectance"] * rng.uniform(0.8, 1.2))
    m["minnaert_k"] = float(max(0.0, m["minnaert_k"] + rng.uniform(-0.1, 0.1)))
    m["roughness_m"] = float(m["roughness_m"] * rng.uniform(0.5, 1.5))
    return m


def _box(name: str, size, pos, yaw, material, **kw: Any) -> dict:  # type: ignore[no-untyped-def]
    return {"name": name, "box": {"size_m": [float(v) for v in size]},
            "position_m": [float(v) for v in pos], "rotation_deg": [0.0, 0.0, float(yaw)],
            "material": material, **kw}  # fmt: skip


def _tree(k: int, x: float, y: float, rng: np.random.Generator, mats: dict) -> list[dict]:
    height, crown = rng.uniform(4, 12), rng.uniform(1.5, 4)
    return [
        {"name": f"tree{k}_trunk", "cylinder": {"radius_m": float(rng.uniform(0.15, 0.4)),
         "height_m": float(height)}, "position_m": [x, y, float(height / 2)],
         "material": mats["bark"], "instance": 1000 + k},
        {"name": f"tree{k}_crown", "sphere": {"radius_m": float(crown), "subdivisions": 2},
         "position_m": [x, y, float(height)], "material": mats["vegetation"],
         "instance": 1000 + k},
    ]  # fmt: skip


def _car(k: int, pos, yaw, mats: dict, rng: np.random.Generator, **kw: Any) -> dict:  # type: ignore[no-untyped-def]
    size = (rng.uniform(3.8, 5.0), rng.uniform(1.7, 2.0), rng.uniform(1.4, 1.8))
    return _box(f"car{k}", size, (pos[0], pos[1], size[2] / 2), yaw, mats["car_paint"],
                label="car", **kw)  # fmt: skip


def farm_yard(seed: int) -> dict[str, Any]:
    """A farm yard: grass, a gravel track, barns and sheds, vehicles, trees, a fence."""
    rng = np.random.default_rng(seed)
    lib = load_materials()
    mats = {n: _material(lib, n, rng) for n in
            ("grass", "gravel", "building_wall", "roof_metal", "car_paint", "bark",
             "vegetation", "wood", "soil")}  # fmt: skip
    track_y = float(rng.uniform(-8, -2))
    objects = [
        {"name": "ground", "plane": {"size_m": [160, 160]}, "material": mats["grass"]},
        {"name": "track", "plane": {"size_m": [150, float(rng.uniform(3, 6))]},
         "position_m": [0, track_y, 0.02], "material": mats["gravel"]},
        {"name": "field", "box": {"size_m": [float(rng.uniform(20, 40)), 25, 0.1]},
         "position_m": [float(rng.uniform(-20, 20)), -30, 0.05], "material": mats["soil"]},
    ]  # fmt: skip
    for k in range(int(rng.integers(1, 4))):
        size = rng.uniform([6, 5, 3], [16, 12, 7])
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(15, 45)
        pos = (dist * np.cos(angle), abs(dist * np.sin(angle)) + 8, size[2] / 2)
        objects.append(_box(f"barn{k}", size, pos, rng.uniform(0, 90), mats["building_wall"]))
    for k in range(int(rng.integers(1, 4))):
        x = float(rng.uniform(-30, 30))
        objects.append(_car(k, (x, track_y), rng.uniform(-10, 10), mats, rng))
    for k in range(int(rng.integers(4, 12))):
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(10, 50)
        objects.extend(_tree(k, float(dist * np.cos(angle)), float(dist * np.sin(angle)), rng,
                             mats))  # fmt: skip
    fence_x = float(rng.uniform(12, 25))
    for k in range(10):
        objects.append(_box(f"post{k}", (0.12, 0.12, 1.2), (fence_x, 2.5 * k, 0.6), 0,
                            mats["wood"]))  # fmt: skip
    return {"objects": objects}


def street(seed: int) -> dict[str, Any]:
    """A street: road and lane marks, kerbs and sidewalks, buildings, poles and signs,
    parked cars, cars driving past (moving objects), pedestrians, trees."""
    rng = np.random.default_rng(seed)
    lib = load_materials()
    names = ("asphalt", "concrete", "building_wall", "car_paint", "pole_metal", "lane_paint",
             "retroreflective_sign", "bark", "vegetation", "painted_metal")  # fmt: skip
    mats = {n: _material(lib, n, rng) for n in names}
    width = float(rng.uniform(6, 10))
    sidewalk = float(rng.uniform(2, 4))
    objects: list[dict] = [
        {"name": "road", "plane": {"size_m": [200, width]}, "material": mats["asphalt"]},
        {"name": "lane", "plane": {"size_m": [200, 0.15]}, "position_m": [0, 0, 0.005],
         "material": {**mats["lane_paint"]}},
    ]  # fmt: skip
    for side in (-1, 1):
        y = side * (width / 2 + sidewalk / 2)
        objects.append(_box(f"sidewalk{side}", (200, sidewalk, 0.15), (0, y, 0.075), 0,
                            mats["concrete"], label="sidewalk"))  # fmt: skip
        x = -90.0
        k = 0
        while x < 90:
            length = float(rng.uniform(8, 25))
            depth, height = rng.uniform(8, 15), rng.uniform(6, 20)
            yb = side * (width / 2 + sidewalk + depth / 2 + rng.uniform(0, 2))
            objects.append(
                _box(f"building{side}_{k}", (length, depth, height),
                     (x + length / 2, yb, height / 2), 0, mats["building_wall"])
            )  # fmt: skip
            x += length + rng.uniform(1, 6)
            k += 1
        for k in range(int(rng.integers(2, 6))):
            xp = float(rng.uniform(-60, 60))
            yp = side * (width / 2 + 0.4)
            objects.append({"name": f"pole{side}_{k}", "cylinder": {"radius_m": 0.08,
                            "height_m": 4.0}, "position_m": [xp, yp, 2.0],
                            "material": mats["pole_metal"]})  # fmt: skip
            if rng.uniform() < 0.5:
                sign = _box(f"sign{side}_{k}", (0.05, 0.6, 0.6), (xp, yp, 2.6), 0,
                            mats["retroreflective_sign"])  # fmt: skip
                objects.append(sign)
        for k in range(int(rng.integers(1, 6))):
            xp = float(rng.uniform(-50, 50))
            objects.append(_car(100 * (side + 2) + k, (xp, side * (width / 2 - 1.1)), 0, mats,
                                rng))  # fmt: skip
        for k in range(int(rng.integers(0, 5))):  # pedestrians: legs, body, head
            xp = float(rng.uniform(-40, 40))
            yp = side * (width / 2 + rng.uniform(0.5, sidewalk - 0.3))
            inst = 2000 + 10 * (side + 2) + k
            common = {"material": mats["painted_metal"], "label": "person", "instance": inst}
            objects += [
                _box(f"ped{side}_{k}_legs", (0.25, 0.35, 0.85), (xp, yp, 0.575), 0, **common),
                _box(f"ped{side}_{k}_body", (0.3, 0.45, 0.65), (xp, yp, 1.325), 0, **common),
                {"name": f"ped{side}_{k}_head", "sphere": {"radius_m": 0.11, "subdivisions": 2},
                 "position_m": [xp, yp, 1.78], **common},
            ]  # fmt: skip
    for k in range(int(rng.integers(1, 4))):  # traffic
        lane = 1 if rng.uniform() < 0.5 else -1
        speed = float(rng.uniform(5, 15)) * lane
        car = _car(900 + k, (0.0, 0.0), 0, mats, rng, instance=3000 + k)
        car["label"] = "moving-car"
        start = [float(rng.uniform(-40, 40)), lane * -width / 4, car["position_m"][2]]
        car["position_m"] = [0.0, 0.0, 0.0]
        car["trajectory"] = {"start": {"position_m": start}, "velocity_mps": [speed, 0.0, 0.0]}
        objects.append(car)
    for k in range(int(rng.integers(2, 8))):
        side = 1 if rng.uniform() < 0.5 else -1
        objects.extend(_tree(k, float(rng.uniform(-80, 80)),
                             side * (width / 2 + sidewalk - 0.6), rng, mats))  # fmt: skip
    return {"objects": objects}


#: Scene generators by name.
GENERATORS: dict[str, Callable[[int], dict[str, Any]]] = {"farm_yard": farm_yard, "street": street}


# --------------------------------------------------------------------------- benchmark


def _mesh_object(name: str, mesh: trimesh.Trimesh, material: str, label: str, instance: int = 0):
    return SceneObject(
        name=name,
        vertices_m=np.asarray(mesh.vertices, dtype=np.float64),
        faces=np.asarray(mesh.faces, dtype=np.int64),
        material=material,
        label=label_id(label),
        instance=instance,
    )


def rolling_ground(size_m: float, cells: int) -> trimesh.Trimesh:
    """A rolling square grid of ``2 * cells^2`` triangles centred on the origin."""
    x = np.linspace(-size_m / 2, size_m / 2, cells + 1)
    gx, gy = np.meshgrid(x, x, indexing="ij")
    gz = 0.4 * np.sin(gx / 23.0) * np.cos(gy / 31.0) + 0.1 * np.sin((gx + gy) / 7.0)
    gz -= gz[cells // 2, cells // 2]  # the sensor's foot at z = 0
    vertices = np.stack([gx.ravel(), gy.ravel(), gz.ravel()], axis=1)
    i = np.arange(cells)[:, None] * (cells + 1) + np.arange(cells)[None, :]
    a, b, c, d = i.ravel(), i.ravel() + 1, i.ravel() + cells + 1, i.ravel() + cells + 2
    faces = np.concatenate([np.stack([a, c, b], 1), np.stack([b, c, d], 1)])
    return trimesh.Trimesh(vertices, faces, process=False)


def build_bench_scene(seed: int = 0, scale: float = 1.0) -> Scene:
    """The benchmark scene: about ``scale`` million triangles, the same for the same seed.

    Parameters
    ----------
    seed : int
        Layout seed (build time only; numpy's Generator).
    scale : float
        Multiplies the number of trees and bushes (about 0.87 M triangles at ``scale=1``
        come from vegetation); ``scale=10`` gives a ~10 M-triangle scene.
    """
    rng = np.random.default_rng(seed)
    objects = [_mesh_object("ground", rolling_ground(300.0, 300), "grass", "terrain")]
    # Buildings: boxes whose faces are subdivided into ~1 m triangles.
    for k in range(24):
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(20.0, 90.0)
        size = rng.uniform([6, 6, 3], [18, 14, 12])
        box = trimesh.creation.box(extents=size)
        box = box.subdivide_to_size(max_edge=1.5)
        box.apply_transform(
            trimesh.transformations.rotation_matrix(rng.uniform(0, np.pi), [0, 0, 1])
        )
        box.apply_translation([dist * np.cos(angle), dist * np.sin(angle), size[2] / 2])
        objects.append(_mesh_object(f"building{k}", box, "building_wall", "building"))
    # Trees and bushes: jittered icospheres (clutter), trunks as cylinders.
    crown_unit = trimesh.creation.icosphere(subdivisions=5)
    bush_unit = trimesh.creation.icosphere(subdivisions=3)
    n_trees, n_bushes = round(36 * scale), round(150 * scale)
    for k in range(n_trees):
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(15.0, 120.0)
        x, y = dist * np.cos(angle), dist * np.sin(angle)
        height, radius = rng.uniform(4, 12), rng.uniform(1.5, 4.0)
        jitter = 1.0 + 0.15 * rng.standard_normal(len(crown_unit.vertices))
        crown = trimesh.Trimesh(
            crown_unit.vertices * (radius * jitter)[:, None] + [x, y, height],
            crown_unit.faces,
            process=False,
        )
        trunk = trimesh.creation.cylinder(radius=0.2, height=height, sections=16)
        trunk.apply_translation([x, y, height / 2])
        objects.append(_mesh_object(f"tree{k}/crown", crown, "vegetation", "vegetation", k + 1))
        objects.append(_mesh_object(f"tree{k}/trunk", trunk, "bark", "trunk", k + 1))
    for k in range(n_bushes):
        angle, dist = rng.uniform(0, 2 * np.pi), rng.uniform(5.0, 100.0)
        radius = rng.uniform(0.4, 1.2)
        jitter = 1.0 + 0.2 * rng.standard_normal(len(bush_unit.vertices))
        centre = [dist * np.cos(angle), dist * np.sin(angle), 0.6 * radius]
        bush = trimesh.Trimesh(
            bush_unit.vertices * (radius * jitter)[:, None] + centre,
            bush_unit.faces,
            process=False,
        )
        objects.append(_mesh_object(f"bush{k}", bush, "vegetation", "vegetation"))
    library = load_materials()
    used = {o.material: library[o.material] for o in objects}
    return Scene(objects=objects, materials=used, source=f"bench scene (seed {seed})")
