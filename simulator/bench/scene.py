"""The benchmark's scene: about a million triangles of rolling ground, buildings, trees and
bushes, the same for the same seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import trimesh

from ..config import (
    GeneratorRef,
    Pose,
    SceneSpec,
    Survey,
    TrajectorySpec,
    Weather,
    load_materials,
)
from ..labels import label_id
from ..world.scene import Scene, SceneObject, build_scene

__all__ = ["EGO_LANE_Y_M", "bench_survey", "build_bench_scene", "rolling_ground", "scene_of"]

#: Where the sensor stands across a generated scene: its ego lane (y, m).
EGO_LANE_Y_M = -1.6


def scene_of(name: str, seed: int, scale: float) -> tuple[Scene, float]:
    """The benchmark's scene ``name`` (``bench``: :func:`build_bench_scene` of ``seed`` and
    ``scale``; else the generator of that name with ``seed``) and the sensor's y (m): 0 on
    the bench scene, :data:`EGO_LANE_Y_M` in a generated one."""
    if name == "bench":
        return build_bench_scene(seed, scale), 0.0
    spec = SceneSpec(generator=GeneratorRef(name=name, seed=seed))
    return build_scene(spec, Path("."), load_materials(), source=name), EGO_LANE_Y_M


def bench_survey(scanner: str, y0_m: float, options: Any) -> Survey:
    """The benchmark's survey with ``scanner``: standing 1.8 m up at ``(0, y0_m)``, or with
    ``options.moving`` driving at 5 m/s from ``(-10, y0_m)``; ``options.revolutions`` (or
    ``options.duration_s``), ``options.chunk_pulses`` and ``options.weather`` (a mapping
    of conditions, or None for clear air)."""
    motion = {"start": {"position_m": [-10.0, y0_m, 1.8]}, "velocity_mps": [5.0, 0.0, 0.0]}
    where = (
        {"trajectory": TrajectorySpec.model_validate(motion)}
        if options.moving
        else {"pose": Pose(position_m=[0.0, y0_m, 1.8])}
    )
    return Survey(
        scanner=scanner,
        scene="(in memory)",
        **where,
        revolutions=None if options.duration_s else options.revolutions,
        duration_s=options.duration_s,
        chunk_pulses=options.chunk_pulses,
        weather=Weather.model_validate(options.weather or {}),
    )


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
