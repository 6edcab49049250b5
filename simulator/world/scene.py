"""Scenes: trimesh loading, primitives, placement, materials, labels and instances.

A scene is a list of :class:`SceneObject`, one per geometry that the ray engine
holds, each with its triangles in world coordinates, a material, a SemanticKITTI
label and an instance id. A mesh file whose parts carry their own material names
(OBJ ``usemtl``, glTF materials) becomes one object per part, so that each hit
knows its material.

Instance ids: an object's ``instance`` key wins; otherwise objects of countable
classes (cars, people, ...; :data:`~simulator.labels.THING_LABELS`) get a unique id,
counting in file order from one above the largest explicit id; everything else
gets 0, as SemanticKITTI does for "stuff".
"""

from __future__ import annotations

import fnmatch
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ..config import (
    Material,
    ObjectSpec,
    PartMapping,
    PartRule,
    SceneSpec,
    load_materials,
    load_scene_spec,
    load_yaml,
    raise_validation,
)
from ..config.scene import GLASS_PANE_REFLECTANCE
from ..errors import ConfigError, SceneError
from ..generators import GENERATORS
from ..labels import THING_LABELS, label_id
from ..sensor.trajectory import Trajectory, trajectory_from_spec
from ..transforms import compose
from .meshcache import load_parts, mesh_file_key, scene_key, store_parts

if TYPE_CHECKING:
    import trimesh

__all__ = [
    "FACE_MATERIAL_KEYS",
    "MaterialTable",
    "Scene",
    "SceneObject",
    "check_face_values",
    "load_scene",
    "primitive_mesh",
]

#: The material keys whose values a mesh's faces may carry (PLY face properties of these
#: names), in place of its object's material: the per-hit model's per-surface quantities
#: that a capture can fit face by face. Everything else (transmittance, micro-slope, label,
#: instance) stays the object's.
FACE_MATERIAL_KEYS = ("reflectance", "minnaert_k", "roughness_m")

_MESH_SUFFIXES = {
    ".obj",
    ".ply",
    ".stl",
    ".off",
    ".glb",
    ".gltf",
    ".3mf",
    ".dae",
    ".xaml",
    ".3dxml",
}


@dataclass
class SceneObject:
    """One geometry of the scene, in world coordinates.

    Attributes
    ----------
    name : str
        Object name (``object/part`` for the parts of a mesh file).
    vertices_m : (V, 3) float64
        World coordinates.
    faces : (F, 3) int64
        Vertex indices of the triangles.
    material : str
        Key into the scene's material table.
    label : int
        SemanticKITTI id.
    instance : int
        Instance id (0 for stuff).
    """

    name: str
    vertices_m: NDArray[np.float64]
    faces: NDArray[np.int64]
    material: str
    label: int
    instance: int
    #: World from object over time, for a moving object (its vertices are then in the
    #: object's own frame); None for a static one (vertices in the world).
    trajectory: Trajectory | None = None
    #: The world heading (rad about z) of a static countable object's front, when its
    #: mesh file's part rule states one (``heading_deg``); None: not stated.
    heading_rad: float | None = None
    #: Per-face material values of a mesh file's faces (PLY face properties), by material
    #: key (some of :data:`FACE_MATERIAL_KEYS`), each (F,) float64, aligned with ``faces``:
    #: the per-hit model uses a face's value in place of its material's. None: the
    #: object's material holds on every face.
    face_materials: dict[str, NDArray[np.float64]] | None = None

    @property
    def moving(self) -> bool:
        """Whether the object follows a trajectory."""
        return self.trajectory is not None


@dataclass
class MaterialTable:
    """Material properties as arrays indexed by material number, for vectorised lookup.

    Attributes
    ----------
    names : list of str
        The named materials' names, (M,). A scene with per-face materials has one more
        row a face past them (:meth:`of_faces`, :meth:`joined`), unnamed.
    reflectance, minnaert_k, roughness_m, micro_slope_rad, micro_slope_cell_m : (M,) float64
    transmittance : (M,) float64
        The share of the beam that passes (0: opaque).
    porous : (M,) bool
        A porous layer (what is behind it gets ``T`` of the light there and back, through
        one gap), not a pane (``T^2``).

    A porous layer's ``reflectance`` here is its elements' reflectance times the share of
    the beam that meets them, ``(1 - T) rho``: the per-hit model's reflectance of the layer.
    """

    names: list[str]
    reflectance: NDArray[np.float64]
    minnaert_k: NDArray[np.float64]
    roughness_m: NDArray[np.float64]
    micro_slope_rad: NDArray[np.float64]
    micro_slope_cell_m: NDArray[np.float64]
    transmittance: NDArray[np.float64]
    porous: NDArray[np.bool_]

    @classmethod
    def from_materials(cls, materials: dict[str, Material]) -> MaterialTable:
        """Build the table from named materials (in their order)."""
        ms = list(materials.values())

        def col(attr: str) -> NDArray[np.float64]:
            return np.array([getattr(m, attr) for m in ms], dtype=np.float64)

        t = col("transmittance")
        porous = np.array([m.porous for m in ms], dtype=bool)
        return cls(
            names=list(materials),
            reflectance=np.where(porous, col("reflectance") * (1.0 - t), col("reflectance")),
            minnaert_k=col("minnaert_k"),
            roughness_m=col("roughness_m"),
            micro_slope_rad=np.radians(col("micro_slope_deg")),
            micro_slope_cell_m=col("micro_slope_cell_m"),
            transmittance=t,
            porous=porous,
        )

    @classmethod
    def of_faces(
        cls, material: Material, values: Mapping[str, NDArray[np.float64]]
    ) -> MaterialTable:
        """One row a face: ``material`` with each face's values in place of its own.

        Parameters
        ----------
        material : Material
            The face's object's material (every key a face does not carry, and the
            transmittance, porosity and micro-slope of all of them).
        values : dict of str to (F,) float64
            Some of :data:`FACE_MATERIAL_KEYS` (validated: :func:`check_face_values`).

        Returns
        -------
        MaterialTable
            F unnamed rows. A porous layer's face reflectance is ``(1 - T) rho``, as in
            :meth:`from_materials`.
        """
        n = len(next(iter(values.values())))

        def col(attr: str) -> NDArray[np.float64]:
            given = values.get(attr)
            if given is not None:
                return np.asarray(given, dtype=np.float64)
            return np.full(n, getattr(material, attr), dtype=np.float64)

        t = col("transmittance")
        rho = col("reflectance")
        return cls(
            names=[],
            reflectance=rho * (1.0 - t) if material.porous else rho,
            minnaert_k=col("minnaert_k"),
            roughness_m=col("roughness_m"),
            micro_slope_rad=np.radians(col("micro_slope_deg")),
            micro_slope_cell_m=col("micro_slope_cell_m"),
            transmittance=t,
            porous=np.full(n, material.porous, dtype=bool),
        )

    def joined(self, more: Sequence[MaterialTable]) -> MaterialTable:
        """This table with the rows of ``more`` after its own (their names are not
        kept: they are faces' rows)."""
        if not more:
            return self

        def cat(attr: str) -> NDArray:
            return np.concatenate([getattr(self, attr)] + [getattr(m, attr) for m in more])

        return MaterialTable(
            names=list(self.names),
            **{f: cat(f) for f in ("reflectance", "minnaert_k", "roughness_m",
                                  "micro_slope_rad", "micro_slope_cell_m", "transmittance",
                                  "porous")},
        )  # fmt: skip


@dataclass
class Scene:
    """Objects and the materials they use.

    Attributes
    ----------
    objects : list of SceneObject
    materials : dict of str to Material
        Only the materials that objects use, in first-use order.
    source : str
        The file the scene came from.
    warnings : list of str
        Non-fatal findings (e.g. mesh material names that matched nothing).
    """

    objects: list[SceneObject]
    materials: dict[str, Material]
    source: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def triangle_count(self) -> int:
        """Total number of triangles."""
        return int(sum(len(o.faces) for o in self.objects))

    @property
    def bounds_m(self) -> NDArray[np.float64]:
        """(2, 3) world bounding box of the static objects (all, if none is static)."""
        objects = [o for o in self.objects if not o.moving] or self.objects
        lo = np.min([o.vertices_m.min(axis=0) for o in objects], axis=0)
        hi = np.max([o.vertices_m.max(axis=0) for o in objects], axis=0)
        return np.stack([lo, hi])

    def material_table(self) -> MaterialTable:
        """Material properties as arrays (index = position in :attr:`materials`)."""
        return MaterialTable.from_materials(self.materials)

    def object_tables(self) -> tuple[NDArray[np.int32], NDArray[np.uint16], NDArray[np.uint16]]:
        """Per-object material index, label and instance, as arrays indexed by object."""
        index = {name: i for i, name in enumerate(self.materials)}
        mat = np.array([index[o.material] for o in self.objects], dtype=np.int32)
        lab = np.array([o.label for o in self.objects], dtype=np.uint16)
        ins = np.array([o.instance for o in self.objects], dtype=np.uint16)
        return mat, lab, ins

    def face_row_starts(self) -> NDArray[np.int32] | None:
        """Where each object's faces' rows start among the material rows of a scene with
        per-face materials, (O,) int32, -1 for an object without them; None when no
        object has them.

        The material rows (:attr:`simulator.steps.tables.SceneTables.material_of_row`) are the
        objects' own, ``0..O-1``, then one a face of each object with per-face materials,
        in object order: face ``f`` of object ``o`` is row ``starts[o] + f``.
        """
        counts = np.array([0 if o.face_materials is None else len(o.faces)
                           for o in self.objects], dtype=np.int64)  # fmt: skip
        if not counts.any():
            return None
        starts = len(self.objects) + np.concatenate([[0], np.cumsum(counts)[:-1]])
        if starts[-1] + counts[-1] > np.iinfo(np.int32).max:
            raise SceneError(f"{self.source}: too many faces with per-face materials")
        return np.where(counts > 0, starts, -1).astype(np.int32)


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


def _primitive_key(spec: ObjectSpec) -> str:
    """A primitive's kind and parameters, exactly (the JSON of its geometry key)."""
    kind = spec.geometry_kind
    return f"{kind}:{getattr(spec, kind).model_dump_json()}"


#: What boxes and icospheres are made from, by trimesh once a process: the unit box, and
#: each subdivision level's icosahedron ("ico": its vertices and faces; level ``k``: the
#: vertex pairs whose midpoints it adds, and its faces).
_TEMPLATES: dict[str, Any] = {}


def _box_arrays(size_m: Sequence[float]) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
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


def _icosphere_arrays(
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


def _primitive_arrays(spec: ObjectSpec) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """A primitive's (V, 3) vertices and (F, 3) faces, as :func:`primitive_mesh` makes them
    (made once a process for each kind and parameters; each call gets its own copy).
    Boxes and spheres are made from trimesh's templates without a mesh object each
    (:func:`_box_arrays`, :func:`_icosphere_arrays`: a generated street has hundreds)."""
    key = _primitive_key(spec)
    made = _PRIMITIVES.get(key)
    if made is None:
        with np.errstate(all="ignore"):  # absurd sizes become inf, rejected by the caller
            if spec.box is not None:
                made = _box_arrays(spec.box.size_m)
            elif spec.sphere is not None:
                made = _icosphere_arrays(spec.sphere.subdivisions, spec.sphere.radius_m)
            else:
                mesh = primitive_mesh(spec)
                made = (np.array(mesh.vertices, dtype=np.float64),
                        np.array(mesh.faces, dtype=np.int64))  # fmt: skip
        if len(_PRIMITIVES) >= _PRIMITIVES_KEPT:
            _PRIMITIVES.clear()
        _PRIMITIVES[key] = made
    return made[0].copy(), made[1].copy()


@dataclass
class _Part:
    """A mesh part as loaded: its own vertices and faces, where the file places it, and
    its faces' material values (None: none)."""

    name: str
    material: str | None
    vertices: NDArray[np.float64]
    faces: NDArray[np.int64]
    transform: NDArray[np.float64]
    face_values: dict[str, NDArray[np.float64]] | None = None


def check_face_values(
    values: Mapping[str, Any], faces: int, source: str | Path
) -> dict[str, NDArray[np.float64]]:
    """Per-face material values checked as a material's own values are checked.

    Parameters
    ----------
    values : dict of str to (F,) float
        Some of :data:`FACE_MATERIAL_KEYS`, one value a face (an (F, 1) column is taken
        as (F,)).
    faces : int
        F, the mesh's triangles.
    source : str or Path
        The mesh file, for the message.

    Returns
    -------
    dict of str to (F,) float64
        In the order of :data:`FACE_MATERIAL_KEYS`.

    Raises
    ------
    ConfigError
        Naming ``source``, the key and what was expected: an unknown key, a value that is
        not a float, a length other than F, a value not finite or below 0 (as a
        :class:`~simulator.config.Material`'s ``reflectance``, ``minnaert_k`` and
        ``roughness_m`` must be).
    """
    unknown = sorted(set(values) - set(FACE_MATERIAL_KEYS))
    if unknown:
        raise ConfigError(
            source, unknown[0], f"not a per-face material key; expected one of "
            f"{', '.join(FACE_MATERIAL_KEYS)}"
        )  # fmt: skip
    out: dict[str, NDArray[np.float64]] = {}
    for key in FACE_MATERIAL_KEYS:
        if key not in values:
            continue
        given = np.asarray(values[key])
        if given.ndim == 2 and given.shape[1] == 1:
            given = given[:, 0]
        if given.dtype.kind != "f":
            raise ConfigError(
                source, key, f"a face property of type {given.dtype}; expected float32 or "
                f"float64 values, one a face"
            )  # fmt: skip
        if given.shape != (faces,):
            raise ConfigError(
                source, key, f"{given.shape[0] if given.ndim else 0} values for {faces} "
                f"triangles; expected one a triangle (face properties need a mesh of "
                f"triangles, each face one triangle)"
            )  # fmt: skip
        column = given.astype(np.float64)
        bad = np.flatnonzero(~(np.isfinite(column) & (column >= 0.0)))
        if len(bad):
            raise ConfigError(
                source, key, f"face {bad[0]} is {column[bad[0]]!r} ({len(bad)} of {faces} "
                f"faces are not valid); expected finite values >= 0, as a material's {key}"
            )  # fmt: skip
        out[key] = column
    return out


def _face_values(geom: Any, path: Path) -> dict[str, NDArray[np.float64]] | None:
    """The per-face material values of a mesh trimesh read (a PLY file's face properties
    named as :data:`FACE_MATERIAL_KEYS`; other properties, colours or quality, are left
    alone), checked; None when it has none."""
    raw = (getattr(geom, "metadata", None) or {}).get("_ply_raw", {}).get("face", {})
    data = raw.get("data") if isinstance(raw, dict) else None
    names = (data.dtype.names or ()) if isinstance(data, np.ndarray) else tuple(data or ())
    found = {k: data[k] for k in FACE_MATERIAL_KEYS if k in names}
    attributes = getattr(geom, "face_attributes", None) or {}
    found.update({k: attributes[k] for k in FACE_MATERIAL_KEYS
                  if k in attributes and k not in found})  # fmt: skip
    return check_face_values(found, len(geom.faces), path) if found else None


def _check_faces_fit(
    values: dict[str, NDArray[np.float64]], material: Material, source: str | Path
) -> None:
    """Per-face values checked against what their object's material allows beside them:
    a ``fresnel`` pane's reflectance at most the pane's Fresnel reflectance and, with its
    transmittance, at most 1 (as :class:`~simulator.config.Material` checks its own)."""
    rho = values.get("reflectance")
    if rho is None or material.transmittance_law != "fresnel":
        return
    bad = np.flatnonzero((rho > GLASS_PANE_REFLECTANCE) | (rho + material.transmittance > 1.0))
    if len(bad):
        raise ConfigError(
            source, "reflectance", f"face {bad[0]} is {rho[bad[0]]!r}; the faces' material "
            f"is a fresnel pane (transmittance {material.transmittance}): expected at most "
            f"{GLASS_PANE_REFLECTANCE:.4f} and at most 1 - transmittance"
        )  # fmt: skip


def _place(vertices: NDArray[np.float64], matrix: NDArray[np.float64]) -> NDArray[np.float64]:
    """Vertices moved by a 4x4 matrix, as one new array (no other copy)."""
    out = vertices @ matrix[:3, :3].T
    out += matrix[:3, 3]
    return out


def _mesh_parts(path: Path, source: str | Path, key: str) -> list[_Part]:
    """Load a mesh file's parts (shared data, not copied) with their scene-graph transforms."""
    if not path.is_file():
        raise ConfigError(source, key, f"mesh file not found: {path}")
    import trimesh  # imported when a mesh is read, not when it comes from the cache

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = trimesh.load(str(path), force="scene", process=False)
    except Exception as exc:  # trimesh raises many types for unreadable files
        raise SceneError(
            f"{path}: cannot be read as a mesh ({type(exc).__name__}: {exc})"
        ) from None
    parts: list[_Part] = []
    for node in loaded.graph.nodes_geometry:
        transform, geom_name = loaded.graph[node]
        geom = loaded.geometry[geom_name]
        if not isinstance(geom, trimesh.Trimesh) or len(geom.faces) == 0:
            continue
        material = getattr(getattr(geom.visual, "material", None), "name", None)
        parts.append(
            _Part(
                name=str(node),
                material=material or None,
                vertices=np.asarray(geom.vertices, dtype=np.float64),
                faces=np.asarray(geom.faces, dtype=np.int64),
                transform=np.asarray(transform, dtype=np.float64),
                face_values=_face_values(geom, path),
            )
        )
    if not parts:
        raise SceneError(f"{path}: holds no triangles")
    return parts


def _part_rules(spec: ObjectSpec, base_dir: Path, source: str | Path, key: str) -> list[PartRule]:
    """An object's part rules: inline, or read from its mapping file."""
    if spec.parts is None:
        return []
    if isinstance(spec.parts, list):
        return spec.parts
    from pydantic import ValidationError

    path = base_dir / spec.parts
    if not path.is_file():
        raise ConfigError(source, f"{key}.parts", f"mapping file not found: {path}")
    try:
        return PartMapping.model_validate(load_yaml(path)).parts
    except ValidationError as err:
        raise_validation(path, err)


def _rule_for(rules: list[PartRule], part: _Part) -> PartRule | None:
    """The first rule that matches a part (its node name, its mesh material name)."""
    for rule in rules:
        if rule.match is not None and not fnmatch.fnmatchcase(part.name, rule.match):
            continue
        if rule.match_material is not None and not (
            part.material is not None and fnmatch.fnmatchcase(part.material, rule.match_material)
        ):
            continue
        return rule
    return None


def _check_finite(vertices: NDArray[np.float64], where: str) -> None:
    if not np.isfinite(vertices).all():
        raise SceneError(f"{where}: mesh has NaN or infinite vertex coordinates")


def load_scene(
    path: str | Path,
    *,
    materials: dict[str, Material] | None = None,
) -> Scene:
    """Load a scene YAML, or a single mesh file as a scene.

    Parameters
    ----------
    path : str or Path
        A scene YAML (docs/scene.md) or any mesh file trimesh reads. For a mesh file,
        each part's material name is matched to the library; unmatched parts get
        the library's ``default`` material.
    materials : dict, optional
        The material library; the bundled ``configs/materials.yaml`` by default.

    Returns
    -------
    Scene
    """
    path = Path(path)
    library = dict(materials) if materials is not None else load_materials()
    if path.suffix.lower() in _MESH_SUFFIXES:
        spec = SceneSpec(objects=[ObjectSpec(name=path.stem, mesh=path.name)])
    else:
        spec = load_scene_spec(path)
    return build_scene(spec, path.parent, library, source=path)


def _with_generated(spec: SceneSpec, source: str | Path) -> SceneSpec:
    """The spec with its generator's scene put in front of its own objects."""
    assert spec.generator is not None
    name = spec.generator.name
    if name not in GENERATORS:
        raise ConfigError(
            source, "generator.name", f"unknown generator {name!r}; expected one of "
            f"{', '.join(GENERATORS)}"
        )  # fmt: skip
    generated = SceneSpec.model_validate(GENERATORS[name](spec.generator.seed))
    return spec.model_copy(
        update={
            "generator": None,
            "materials": {**generated.materials, **spec.materials},
            "objects": generated.objects + spec.objects,
        }
    )


def build_scene(
    spec: SceneSpec,
    base_dir: Path,
    library: dict[str, Material],
    *,
    source: str | Path = "",
    generated: bool = False,
) -> Scene:
    """Build a :class:`Scene` from a validated spec (mesh paths relative to ``base_dir``).

    A spec with a ``generator`` gets the generated scene's materials and objects first, then
    its own (its materials override the generated ones of the same name). ``generated``
    says that the spec's objects are a generator's already (a dataset's sequences): as a
    spec with a ``generator``, it is not kept in the mesh cache.
    """
    generated = generated or spec.generator is not None
    if spec.generator is not None:
        spec = _with_generated(spec, source)
    # The parts trimesh made for this scene before, if it is not generated (a dataset
    # builds thousands of generated scenes, each once) and every mesh file can be cached.
    cache_key = None if generated else _cache_key(spec, base_dir)
    cached = None if cache_key is None else load_parts(cache_key)
    made: list[list[_Part]] = []
    library = {**library, **spec.materials}
    default_name = spec.default_material or "default"
    used: dict[str, Material] = {}
    objects: list[SceneObject] = []
    notes: list[str] = []
    # Automatic ids start above every explicit one, so the two never clash.
    next_instance = 1 + max((o.instance or 0 for o in spec.objects), default=0)
    trajectories: dict[str, Trajectory] = {}  # by the spec's JSON

    def material_key(ref: str | Material | None, key: str, object_name: str) -> str:
        if isinstance(ref, Material):
            name = f"{object_name}:inline"
            used[name] = ref
            return name
        assert ref is not None
        if ref not in library:
            raise ConfigError(
                source, key, f"unknown material {ref!r}; the library has {', '.join(library)}"
            )
        used.setdefault(ref, library[ref])
        return ref

    for i, obj in enumerate(spec.objects):
        key = f"objects[{i}]"
        placement = compose(obj.position_m, obj.rotation_deg, obj.scale)
        if cached is not None:
            parts = [_Part(*part) for part in cached[i]]
            rules = [] if obj.mesh is None else _part_rules(obj, base_dir, source, key)
        elif obj.mesh is not None:
            if "://" in obj.mesh:  # trimesh is given files only: nothing is fetched
                raise ConfigError(
                    source, f"{key}.mesh", f"expected a local file path, not a URL: {obj.mesh}"
                )
            parts = _mesh_parts(base_dir / obj.mesh, source, f"{key}.mesh")
            rules = _part_rules(obj, base_dir, source, key)
        else:
            rules = []
            vertices, faces = _primitive_arrays(obj)
            parts = [_Part(obj.name, None, vertices, faces, np.eye(4))]
        made.append(parts)
        object_instance: int | None = obj.instance  # all parts of one object share it
        groups: dict[str, int] = {}  # group key -> instance
        moving = None
        if obj.trajectory is not None:  # objects with the same motion share one trajectory
            motion = obj.trajectory.model_dump_json()
            if motion not in trajectories:
                trajectories[motion] = trajectory_from_spec(
                    obj.trajectory, base_dir, source, f"{key}.trajectory"
                )
            moving = trajectories[motion]
        if moving is not None and moving.is_static:  # a trajectory that never moves: a placement
            fixed = np.eye(4)
            fixed[:3, :3], fixed[:3, 3] = moving.pose_at(0.0)
            placement = fixed @ placement
            moving = None
        for part in parts:
            part_material = part.material
            name = obj.name if len(parts) == 1 else f"{obj.name}/{part.name}"
            _check_finite(part.vertices, f"{source}: {key} ({name})")
            rule = _rule_for(rules, part)
            if rule is not None and rule.material is not None:
                r = rules.index(rule)
                mat = material_key(rule.material, f"{key}.parts[{r}].material", name)
            elif obj.material is not None:
                mat = material_key(obj.material, f"{key}.material", obj.name)
            elif part_material is not None and part_material in library:
                mat = material_key(part_material, f"{key}.mesh", obj.name)
            else:
                if default_name not in library:
                    raise ConfigError(
                        source, "default_material", f"{default_name!r} not in library"
                    )
                notes.append(
                    f"{name}: mesh material {part_material!r} matches no library material; "
                    f"using {default_name!r}"
                )
                mat = material_key(default_name, f"{key}.mesh", obj.name)
            material = used[mat]
            if part.face_values is not None:
                assert obj.mesh is not None  # (only a mesh file's faces carry values)
                _check_faces_fit(part.face_values, material, base_dir / obj.mesh)
            label = label_id(obj.label) if obj.label is not None else label_id(material.label)
            if rule is not None and rule.label is not None:
                label = label_id(rule.label)
            if rule is not None and isinstance(rule.instance, int):
                instance = rule.instance
            elif rule is not None and (rule.instance == "part" or rule.group is not None):
                found = re.search(rule.group, part.name) if rule.group is not None else None
                group = part.name if found is None else (found.groups() or (found[0],))[0]
                if rule.instance == "part":
                    group = part.name
                slot = group  # parts of one group share an id, whichever rule they met
                if slot not in groups:
                    groups[slot] = next_instance
                    next_instance += 1
                instance = groups[slot]
            elif rule is not None and rule.instance == "object":
                if object_instance is None:
                    object_instance = next_instance
                    next_instance += 1
                instance = object_instance
            elif obj.instance is not None:
                instance = obj.instance
            elif label in THING_LABELS:
                if object_instance is None:
                    object_instance = next_instance
                    next_instance += 1
                instance = object_instance
            else:
                instance = 0
            with np.errstate(all="ignore"):
                placed = _place(part.vertices, placement @ part.transform)
            _check_finite(placed, f"{source}: {key} ({name}) after placement")
            heading = None
            if rule is not None and rule.heading_deg is not None and moving is None:
                front = np.radians(rule.heading_deg)
                axis = (placement @ part.transform)[:3, :3] @ [np.cos(front), np.sin(front), 0]
                heading = float(np.arctan2(axis[1], axis[0]))
            objects.append(
                SceneObject(
                    name=name,
                    vertices_m=placed,
                    faces=np.asarray(part.faces, dtype=np.int64),
                    material=mat,
                    label=label,
                    instance=instance,
                    trajectory=moving,
                    heading_rad=heading,
                    face_materials=part.face_values,
                )
            )
    if cache_key is not None and cached is None:
        store_parts(cache_key, [[(p.name, p.material, np.asarray(p.vertices, np.float64),
                            np.asarray(p.faces, np.int64), p.transform, p.face_values)
                            for p in parts] for parts in made])  # fmt: skip
    return Scene(objects=objects, materials=used, source=str(source), warnings=notes)


def _cache_key(spec: SceneSpec, base_dir: Path) -> str | None:
    """The scene's key in :mod:`simulator.world.meshcache`: each object's primitive parameters
    or mesh file (None when a mesh file is missing, not a local file or of a format not
    cached: the scene is then built, and errs, as without a cache)."""
    items = []
    for obj in spec.objects:
        if obj.mesh is not None:
            item = None if "://" in obj.mesh else mesh_file_key(base_dir / obj.mesh)
            if item is None:
                return None
            items.append(f"mesh:{item}")
        else:
            items.append(_primitive_key(obj))
    return scene_key(items, code=[Path(__file__)])  # this module makes the parts
