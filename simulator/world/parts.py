"""A mesh file's parts and the rules that name them: each part as trimesh loads it (its
own vertices and faces, where the file's scene graph places it, its mesh material name and
its faces' material values), and the part rules (inline, or a mapping file) that give a
part its material, label, instance and heading (:func:`simulator.world.scene.build_scene`
applies them).
"""

from __future__ import annotations

import fnmatch
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..config import ObjectSpec, PartMapping, PartRule, load_yaml, raise_validation
from ..errors import ConfigError, SceneError
from .materials import FACE_MATERIAL_KEYS, check_face_values

__all__ = ["MeshPart", "face_values_of", "mesh_parts", "part_rules", "rule_for"]


@dataclass
class MeshPart:
    """A mesh part as loaded: its own vertices and faces, where the file places it, and
    its faces' material values (None: none)."""

    name: str
    material: str | None
    vertices: NDArray[np.float64]
    faces: NDArray[np.int64]
    transform: NDArray[np.float64]
    face_values: dict[str, NDArray[np.float64]] | None = None


def face_values_of(geom: Any, path: Path) -> dict[str, NDArray[np.float64]] | None:
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


def mesh_parts(path: Path, source: str | Path, key: str) -> list[MeshPart]:
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
    parts: list[MeshPart] = []
    for node in loaded.graph.nodes_geometry:
        transform, geom_name = loaded.graph[node]
        geom = loaded.geometry[geom_name]
        if not isinstance(geom, trimesh.Trimesh) or len(geom.faces) == 0:
            continue
        material = getattr(getattr(geom.visual, "material", None), "name", None)
        parts.append(
            MeshPart(
                name=str(node),
                material=material or None,
                vertices=np.asarray(geom.vertices, dtype=np.float64),
                faces=np.asarray(geom.faces, dtype=np.int64),
                transform=np.asarray(transform, dtype=np.float64),
                face_values=face_values_of(geom, path),
            )
        )
    if not parts:
        raise SceneError(f"{path}: holds no triangles")
    return parts


def part_rules(spec: ObjectSpec, base_dir: Path, source: str | Path, key: str) -> list[PartRule]:
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


def rule_for(rules: list[PartRule], part: MeshPart) -> PartRule | None:
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
