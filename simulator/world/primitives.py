"""Primitives: the plane, box, cylinder and sphere of a scene's objects, as meshes in their
own frame (before placement).

Boxes and icospheres are made from trimesh's own templates, bit for bit as
``trimesh.creation`` makes them, without a mesh object each (a generated street has
hundreds); every primitive made is kept once a process by its kind and parameters
(:func:`primitive_arrays`), and :func:`primitive_key` names it in the mesh cache's scene
key (:func:`simulator.world.scene.build_scene`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..config import ObjectSpec

if TYPE_CHECKING:
    import trimesh

__all__ = [
    "box_arrays",
    "icosphere_arrays",
    "primitive_arrays",
    "primitive_key",
    "primitive_mesh",
]


def primitive_mesh(spec: ObjectSpec) -> trimesh.Trimesh:
    """Mesh of a primitive object in its own frame (before placement).

    A plane lies in z = 0 with its normal along +z; box, cylinder (axis z) and sphere
    are centred on the origin.
    """
    import trimesh  # imported when a mesh is made, not when it comes from the cache

    kind = spec.geometry_kind
    if kind == "plane":
        assert spec.plane is not None
        sx, sy = (s / 2.0 for s in spec.plane.size_m)
        vertices = np.array([[-sx, -sy, 0.0], [sx, -sy, 0.0], [sx, sy, 0.0], [-sx, sy, 0.0]])
        return trimesh.Trimesh(vertices, np.array([[0, 1, 2], [0, 2, 3]]), process=False)
    if kind == "box":
        assert spec.box is not None
        return trimesh.creation.box(extents=spec.box.size_m)
    if kind == "cylinder":
        assert spec.cylinder is not None
        c = spec.cylinder
        return trimesh.creation.cylinder(radius=c.radius_m, height=c.height_m, sections=c.sections)
    assert spec.sphere is not None
    return trimesh.creation.icosphere(
        subdivisions=spec.sphere.subdivisions, radius=spec.sphere.radius_m
    )


#: The primitives made in this process, by kind and parameters: (vertices, faces) of
#: :func:`primitive_mesh` (a generated street repeats half of its 1,800 geometries).
_PRIMITIVES: dict[str, tuple[NDArray[np.float64], NDArray[np.int64]]] = {}
#: Primitives kept (the memo is emptied when it holds more).
_PRIMITIVES_KEPT = 4096


def primitive_key(spec: ObjectSpec) -> str:
    """A primitive's kind and parameters, exactly (the JSON of its geometry key)."""
    kind = spec.geometry_kind
    return f"{kind}:{getattr(spec, kind).model_dump_json()}"


#: What boxes and icospheres are made from, by trimesh once a process: the unit box, and
#: each subdivision level's icosahedron ("ico": its vertices and faces; level ``k``: the
#: vertex pairs whose midpoints it adds, and its faces).
_TEMPLATES: dict[str, Any] = {}


def box_arrays(size_m: Sequence[float]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """``trimesh.creation.box(extents=size_m)``'s vertices and faces, bit for bit (its
    reference cube less 0.5, times the extents), without building a mesh object."""
    if "box" not in _TEMPLATES:
        import trimesh

        unit = trimesh.creation.box(extents=[1.0, 1.0, 1.0])  # (the cube less 0.5, times 1)
        _TEMPLATES["box"] = (np.array(unit.vertices, dtype=np.float64),
                             np.array(unit.faces, dtype=np.int64))  # fmt: skip
    vertices, faces = _TEMPLATES["box"]
    vertices = vertices.copy()
    vertices *= np.asarray(size_m, dtype=np.float64)
    return vertices, faces.copy()


def _icosphere_level(k: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Subdivision ``k`` (from 1) of trimesh's icosphere: the (E, 2) vertex pairs whose
    midpoints it appends, in trimesh's order, and the faces after it."""
    key = f"ico{k}"
    if key not in _TEMPLATES:
        from trimesh import grouping, remesh
        from trimesh.geometry import faces_to_edges

        faces = _icosahedron()[1] if k == 1 else _icosphere_level(k - 1)[1]
        edges = np.sort(faces_to_edges(faces), axis=1)
        unique, _ = grouping.unique_rows(edges)
        dummy = np.zeros((int(faces.max()) + 1, 3))
        _, after = remesh.subdivide(dummy, faces)  # (its faces do not depend on the vertices)
        _TEMPLATES[key] = (edges[unique], np.asarray(after, dtype=np.int64))
    return _TEMPLATES[key]


def _icosahedron() -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    if "ico" not in _TEMPLATES:
        import trimesh

        ico = trimesh.creation.icosahedron()
        _TEMPLATES["ico"] = (np.array(ico.vertices, dtype=np.float64),
                             np.array(ico.faces, dtype=np.int64))  # fmt: skip
    return _TEMPLATES["ico"]


def icosphere_arrays(
    subdivisions: int, radius_m: float
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """``trimesh.creation.icosphere(subdivisions, radius_m)``'s vertices and faces, bit for
    bit: each level's midpoints appended, then every vertex moved to the radius, in
    trimesh's own arithmetic; the levels' pairs and faces are made once a process."""
    radius = float(radius_m)
    vertices, faces = _icosahedron()
    vertices = vertices.copy()
    for k in range(1, subdivisions + 1):
        pairs, faces = _icosphere_level(k)
        vertices = np.vstack((vertices, vertices[pairs].mean(axis=1)))
        vertices = _to_radius(vertices, radius)
    if subdivisions <= 0:
        vertices = _to_radius(vertices, radius)
    return vertices, faces.copy()


def _to_radius(vectors: NDArray[np.float64], radius: float) -> NDArray[np.float64]:
    """The vertices moved along their directions to ``radius``, as trimesh's icosphere
    moves them."""
    scalar = np.sqrt(np.dot(vectors**2, [1, 1, 1]))
    unit = vectors / scalar.reshape((-1, 1))
    vectors += unit * (radius - scalar).reshape((-1, 1))
    return vectors


def primitive_arrays(spec: ObjectSpec) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """A primitive's (V, 3) vertices and (F, 3) faces, as :func:`primitive_mesh` makes them
    (made once a process for each kind and parameters; each call gets its own copy).
    Boxes and spheres are made from trimesh's templates without a mesh object each
    (:func:`box_arrays`, :func:`icosphere_arrays`: a generated street has hundreds)."""
    key = primitive_key(spec)
    made = _PRIMITIVES.get(key)
    if made is None:
        with np.errstate(all="ignore"):  # absurd sizes become inf, rejected by the caller
            if spec.box is not None:
                made = box_arrays(spec.box.size_m)
            elif spec.sphere is not None:
                made = icosphere_arrays(spec.sphere.subdivisions, spec.sphere.radius_m)
            else:
                mesh = primitive_mesh(spec)
                made = (np.array(mesh.vertices, dtype=np.float64),
                        np.array(mesh.faces, dtype=np.int64))  # fmt: skip
        if len(_PRIMITIVES) >= _PRIMITIVES_KEPT:
            _PRIMITIVES.clear()
        _PRIMITIVES[key] = made
    return made[0].copy(), made[1].copy()
