"""The vehicle under the sensor as scene objects: the ``ego`` sections' boxes and mesh,
fixed in the sensor frame, follow the sensor and block the beams that meet them.

The blocker is dark (reflectance 0, opaque): a beam that meets it first gives no return,
whatever the sensor's threshold, and nothing behind it is seen; with ``returns: true`` it
is a Lambertian surface of the section's ``reflectance`` instead (one body: the last such
section's value). A static sensor's blocker
is a static object placed at the sensor's pose; a moving sensor's is a moving object whose
trajectory is the sensor's own, so the ray engine casts each ray against it at the ray's
own time, exactly as it does a passing car.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ..config import Ego, Material
from ..errors import SceneError
from ..sensor.trajectory import Trajectory
from ..transforms import compose
from .scene import Scene, SceneObject

__all__ = ["EGO_MATERIAL", "ego_geometry", "with_ego"]

#: The blocker's material key in the scene (not a name a material library can hold).
EGO_MATERIAL = "ego:blocker"

#: Dark and opaque: nothing it meets is detected, nothing behind it is seen.
_BLOCKER = Material(reflectance=0.0, minnaert_k=0.0, label="unlabeled")

#: The 12 triangles of a unit cube centred on the origin (outward winding).
_CUBE_VERTICES = np.array(
    [[x, y, z] for x in (-0.5, 0.5) for y in (-0.5, 0.5) for z in (-0.5, 0.5)], dtype=np.float64
)
_CUBE_FACES = np.array(
    [[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
     [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]],
    dtype=np.int64,
)  # fmt: skip


def _placed(vertices: NDArray[np.float64], matrix: NDArray[np.float64]) -> NDArray[np.float64]:
    return vertices @ matrix[:3, :3].T + matrix[:3, 3]


def ego_geometry(
    sections: Sequence[Ego], base_dir: Path, source: str | Path = "survey"
) -> tuple[NDArray[np.float64], NDArray[np.int64]] | None:
    """The triangles of the ``ego`` sections, in the sensor frame: (V, 3) float64 vertices
    and (F, 3) int64 faces, or None when every section is empty. A mesh path is relative
    to ``base_dir`` (the survey's folder); ``source`` names the survey in errors."""
    vertices: list[NDArray[np.float64]] = []
    faces: list[NDArray[np.int64]] = []
    count = 0

    def add(v: NDArray[np.float64], f: NDArray[np.int64]) -> None:
        nonlocal count
        vertices.append(v)
        faces.append(f + count)
        count += len(v)

    for ego in sections:
        for box in ego.boxes:
            matrix = compose(box.position_m, box.rotation_deg)
            add(_placed(_CUBE_VERTICES * np.asarray(box.size_m), matrix), _CUBE_FACES)
        if ego.mesh is not None:
            add(*_mesh_in_sensor_frame(ego, base_dir, source))
    if not vertices:
        return None
    return np.concatenate(vertices), np.concatenate(faces)


def _mesh_in_sensor_frame(
    ego: Ego, base_dir: Path, source: str | Path
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    import trimesh

    assert ego.mesh is not None
    path = Path(ego.mesh) if Path(ego.mesh).is_absolute() else base_dir / ego.mesh
    if not path.is_file():
        raise SceneError(f"{source}: ego.mesh: no such file {path}")
    try:
        mesh = trimesh.load(path, force="mesh")
    except Exception as exc:  # trimesh raises many kinds for a bad file
        why = f"not a mesh trimesh can read ({exc})"
        raise SceneError(f"{source}: ego.mesh {path}: {why}") from None
    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise SceneError(f"{source}: ego.mesh {path}: no triangles")
    pose = ego.mesh_pose
    matrix = compose(pose.position_m, pose.rotation_deg)
    vertices = _placed(np.asarray(mesh.vertices, dtype=np.float64), matrix)
    if not np.isfinite(vertices).all():
        raise SceneError(f"{source}: ego.mesh {path}: a vertex is not finite")
    return vertices, np.asarray(mesh.faces, dtype=np.int64)


def with_ego(
    scene: Scene,
    sections: Sequence[Ego],
    sensor: Trajectory,
    base_dir: Path,
    source: str | Path = "survey",
) -> Scene:
    """``scene`` with the blocker of the ``ego`` sections added after its objects (so
    every object keeps its index), following the ``sensor``'s trajectory; ``scene`` itself
    when every section is empty. The scene given is not changed."""
    geometry = ego_geometry(sections, base_dir, source)
    if geometry is None:
        return scene
    vertices, faces = geometry
    if sensor.is_static:
        rotation, position = sensor.pose_at(0.0)
        vertices, trajectory = vertices @ np.asarray(rotation).T + position, None
    else:
        trajectory = sensor
    blocker = SceneObject("ego", vertices, faces, EGO_MATERIAL, 0, 0, trajectory)
    body = _BLOCKER
    returning = [e for e in sections if e.returns and not e.empty]
    if returning:  # a body that returns: a Lambertian surface of the section's reflectance
        body = Material(reflectance=returning[-1].reflectance, minnaert_k=1.0, label="unlabeled")
    materials = {**scene.materials, EGO_MATERIAL: body}
    return replace(scene, objects=[*scene.objects, blocker], materials=materials)
