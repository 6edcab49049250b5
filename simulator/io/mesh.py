"""Meshes written with per-face material values: a binary PLY whose faces carry them.

A scene object ``mesh: FILE.ply`` whose faces have properties named as material keys
(``reflectance``, and optionally ``minnaert_k``, ``roughness_m``:
:data:`simulator.world.scene.FACE_MATERIAL_KEYS`) takes each face's values in place of its
material's (:mod:`simulator.world.scene` reads them, through trimesh). trimesh writes face
attributes too, but its vertices as float32 (a map's coordinates lose their centimetres);
this writer keeps them float64.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..errors import OutputError
from ..world.scene import FACE_MATERIAL_KEYS, check_face_values
from .atomic import write_atomic

__all__ = ["write_material_mesh"]


def write_material_mesh(
    path: str | Path,
    vertices_m: ArrayLike,
    faces: ArrayLike,
    values: dict[str, ArrayLike],
) -> Path:
    """Write a triangle mesh whose faces carry material values, as a binary PLY.

    The file is ``format binary_little_endian 1.0``: an element ``vertex`` of ``double x,
    y, z``, and an element ``face`` of ``list uchar int vertex_indices`` followed by one
    ``double`` property per key of ``values``, in the order of
    :data:`~simulator.world.scene.FACE_MATERIAL_KEYS`. It is written to a temporary name and
    renamed when complete.

    Parameters
    ----------
    path : str or Path
        The target (``.ply``); its folders are created.
    vertices_m : (V, 3) float64
        Vertex coordinates, m (finite).
    faces : (F, 3) int
        Vertex indices of the triangles, in ``[0, V)``.
    values : dict of str to (F,) float
        Per-face material values, by material key (some of ``reflectance``,
        ``minnaert_k``, ``roughness_m``; finite, >= 0, as a material's own). Empty: a plain
        mesh (its object's material on every face).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    ConfigError
        A value key or value that a material would not take (the path and key named).
    OutputError
        Bad geometry (shapes, indices, non-finite vertices), a suffix other than
        ``.ply``, or a file that cannot be written.

    Examples
    --------
    >>> import numpy as np, tempfile, pathlib
    >>> v = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    >>> f = np.array([[0, 1, 2], [0, 2, 3]])
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "two.ply"
    >>> write_material_mesh(out, v, f, {"reflectance": [0.2, 0.6]}).stat().st_size
    391
    """
    path = Path(path)
    if path.suffix.lower() != ".ply":
        raise OutputError(f"{path}: a mesh with per-face materials is written as .ply")
    v = np.asarray(vertices_m, dtype=np.float64)
    f = np.asarray(faces)
    if v.ndim != 2 or v.shape[1] != 3 or not np.isfinite(v).all():
        raise OutputError(f"{path}: vertices must be (V, 3) finite numbers; got {v.shape}")
    if f.ndim != 2 or f.shape[1] != 3 or (f.size and f.dtype.kind not in "iu"):
        raise OutputError(f"{path}: faces must be (F, 3) integers; got {f.shape} {f.dtype}")
    if f.size and (f.min() < 0 or f.max() >= len(v)):
        raise OutputError(f"{path}: face vertex indices must lie in [0, {len(v)})")
    try:
        columns = {k: np.asarray(c, dtype=np.float64) for k, c in values.items()}
    except (TypeError, ValueError) as exc:
        raise OutputError(f"{path}: face values must be numbers ({exc})") from None
    checked = check_face_values(columns, len(f), path)
    keys = [k for k in FACE_MATERIAL_KEYS if k in checked]
    header = "\n".join(
        [
            "ply",
            "format binary_little_endian 1.0",
            "comment lidar-sim mesh with per-face material values",
            f"element vertex {len(v)}",
            "property double x",
            "property double y",
            "property double z",
            f"element face {len(f)}",
            "property list uchar int vertex_indices",
            *(f"property double {k}" for k in keys),
            "end_header",
        ]
    )
    record = np.dtype([("n", "u1"), ("v", "<i4", (3,)), *((k, "<f8") for k in keys)])
    rows: NDArray = np.zeros(len(f), dtype=record)  # packed: no padding between fields
    rows["n"] = 3
    rows["v"] = f
    for k in keys:
        rows[k] = checked[k]
    data = header.encode("ascii") + b"\n" + v.astype("<f8").tobytes() + rows.tobytes()
    return write_atomic(path, data)
