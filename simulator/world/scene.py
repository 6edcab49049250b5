"""Scenes: a scene file loaded, its objects placed, their materials, labels and instances.

A scene is a list of :class:`SceneObject`, one per geometry that the ray engine
holds, each with its triangles in world coordinates, a material, a SemanticKITTI
label and an instance id. A mesh file whose parts carry their own material names
(OBJ ``usemtl``, glTF materials) becomes one object per part, so that each hit
knows its material.

Instance ids: an object's ``instance`` key wins; otherwise objects of countable
classes (cars, people, ...; :data:`~simulator.labels.THING_LABELS`) get a unique id,
counting in file order from one above the largest explicit id; everything else
gets 0, as SemanticKITTI does for "stuff".

The parts of the scene live beside it: the primitives in :mod:`simulator.world.primitives`,
a mesh file's parts and their rules in :mod:`simulator.world.parts`, the material table and
the per-face values' checks in :mod:`simulator.world.materials` (re-exported here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..config import Material, ObjectSpec, SceneSpec, load_materials, load_scene_spec
from ..errors import ConfigError, SceneError
from ..labels import THING_LABELS, label_id
from ..sensor.trajectory import Trajectory, trajectory_from_spec
from ..transforms import compose
from .materials import FACE_MATERIAL_KEYS, MaterialTable, check_face_values, check_faces_fit
from .memory import DEFAULT_CHUNK_RAYS, check_mesh_files_memory
from .meshcache import load_parts, mesh_file_key, scene_key, store_parts
from .parts import MeshPart, mesh_parts, part_rules, rule_for
from .primitives import primitive_arrays, primitive_key, primitive_mesh

__all__ = [
    "FACE_MATERIAL_KEYS",
    "MaterialTable",
    "Scene",
    "SceneObject",
    "build_scene",
    "check_face_values",
    "load_scene",
    "primitive_mesh",
]

#: What :func:`load_scene` reads as a single mesh file (anything else: a scene YAML).
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

#: The source files that make a scene's parts (an edit of one is a new mesh-cache key).
_PARTS_CODE = tuple(Path(__file__).with_name(f"{name}.py")
                    for name in ("scene", "parts", "primitives", "materials"))  # fmt: skip


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


def _place(vertices: NDArray[np.float64], matrix: NDArray[np.float64]) -> NDArray[np.float64]:
    """Vertices moved by a 4x4 matrix, as one new array (no other copy)."""
    out = vertices @ matrix[:3, :3].T
    out += matrix[:3, 3]
    return out


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
    from ..generators import GENERATORS  # (a scene of files does not need them)

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
    # A mesh file whose header counts too many triangles stops the scene before its load.
    files = [base_dir / o.mesh for o in spec.objects if o.mesh and "://" not in o.mesh]
    check_mesh_files_memory(source, files, DEFAULT_CHUNK_RAYS)
    cached = None if cache_key is None else load_parts(cache_key)
    made: list[list[MeshPart]] = []
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
            parts = [MeshPart(*part) for part in cached[i]]
            rules = [] if obj.mesh is None else part_rules(obj, base_dir, source, key)
        elif obj.mesh is not None:
            if "://" in obj.mesh:  # trimesh is given files only: nothing is fetched
                raise ConfigError(
                    source, f"{key}.mesh", f"expected a local file path, not a URL: {obj.mesh}"
                )
            parts = mesh_parts(base_dir / obj.mesh, source, f"{key}.mesh")
            rules = part_rules(obj, base_dir, source, key)
        else:
            rules = []
            vertices, faces = primitive_arrays(obj)
            parts = [MeshPart(obj.name, None, vertices, faces, np.eye(4))]
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
            rule = rule_for(rules, part)
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
                check_faces_fit(part.face_values, material, base_dir / obj.mesh)
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
            items.append(primitive_key(obj))
    return scene_key(items, code=_PARTS_CODE)
