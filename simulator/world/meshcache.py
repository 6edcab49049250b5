"""A persistent cache of the triangles trimesh makes for a scene file, so that a process
that loads a scene it has loaded before does not import trimesh.

Importing trimesh costs about 0.9 s of CPU (``trimesh/__init__`` imports scipy.spatial,
scipy.optimize and networkx), more than everything else ``lidar-sim validate`` does and a
third of a small scan. What trimesh gives a scene is a list of parts an object (name,
material name, vertices, faces, the file's transform): those of every object of a scene
file are kept in one ``.npz`` under a key that is a hash of all they depend on (the
cache's format, trimesh's and numpy's versions, the source of the code that makes the
parts, each primitive's parameters, the bytes of each mesh file and of the material
libraries an OBJ names), so a changed input is a new key, never a stale entry; the arrays
are trimesh's own, so a scene built from the cache is bit for bit the scene built without
it. A part's per-face material values (a PLY file's face properties, checked) are kept
with it: they are in the file's bytes, so new values are a new key too.

The cache lives in ``$LIDAR_SIM_CACHE`` (``off`` turns it off), else
``$XDG_CACHE_HOME/lidar-sim/scenes`` (``~/.cache/lidar-sim/scenes``). It keeps the
:data:`MAX_ENTRIES` most recently used scenes, and no large ones (:data:`MAX_FILE_BYTES`,
:data:`MAX_ENTRY_BYTES`). An entry that cannot be read is a miss; a folder that cannot be
written is no cache. Generated scenes (a ``generator:``) are not
kept: a dataset builds thousands of them, each once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

__all__ = ["CachedPart", "cache_dir", "load_parts", "mesh_file_key", "scene_key", "store_parts"]

#: Bumped whenever what an entry holds, or how the parts are made, changes (2: the
#: parts' per-face material values).
CACHE_FORMAT = 2
#: Scenes kept (the least recently used beyond this are removed).
MAX_ENTRIES = 64
#: A mesh file larger than this is not cached (hashing it would cost more than it saves
#: at start-up, and its entry would be as large).
MAX_FILE_BYTES = 64 * 2**20
#: A scene whose arrays are larger than this is not kept.
MAX_ENTRY_BYTES = 128 * 2**20
#: Mesh formats whose part list depends only on the file's bytes (an OBJ also on its
#: ``mtllib`` files, which the key includes); other formats are not cached.
CACHED_SUFFIXES = frozenset({".obj", ".ply", ".stl", ".off", ".glb"})

#: A part as trimesh gives it: name, material name (or None), (V, 3) float64 vertices,
#: (F, 3) int64 faces, the file's (4, 4) transform, and its per-face material values (by
#: material key, (F,) float64 each; None: none).
CachedPart = tuple[
    str, str | None, NDArray[np.float64], NDArray[np.int64], NDArray[np.float64],
    dict[str, NDArray[np.float64]] | None,
]  # fmt: skip


def cache_dir() -> Path | None:
    """The cache folder (None: caching is off)."""
    env = os.environ.get("LIDAR_SIM_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lidar-sim" / "scenes"


def _versions() -> str:
    try:
        trimesh_version = metadata.version("trimesh")
    except metadata.PackageNotFoundError:
        trimesh_version = "none"
    return f"{CACHE_FORMAT}:{trimesh_version}:{np.__version__}"


def mesh_file_key(path: Path) -> str | None:
    """The key of a mesh file's parts: a hash of its suffix and bytes (and of the material
    libraries an OBJ names); None when the file cannot be read or its format is not
    cached."""
    suffix = path.suffix.lower()
    if suffix not in CACHED_SUFFIXES:
        return None
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    h = hashlib.blake2b(suffix.encode(), digest_size=16)
    h.update(data)
    if suffix == ".obj":
        for line in data.splitlines():
            if line.startswith(b"mtllib"):
                for name in line.split()[1:]:
                    try:
                        h.update(b"mtl:" + name + b":" + (path.parent / name.decode()).read_bytes())
                    except (OSError, UnicodeDecodeError):
                        h.update(b"mtl:" + name + b":missing")
    return h.hexdigest()


def scene_key(items: Sequence[str], code: Sequence[Path] = ()) -> str:
    """The key of a scene: a hash of the cache's format, the versions, the source files
    ``code`` that make the parts (an edit of them is a new key), and each object's item
    key in order."""
    h = hashlib.blake2b(_versions().encode(), digest_size=20)
    for path in (Path(__file__), *code):
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"no source: " + str(path).encode())
    for item in items:
        h.update(b"\0" + item.encode())
    return h.hexdigest()


def _entry(key: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"{key}.npz"


def load_parts(key: str) -> list[list[CachedPart]] | None:
    """The parts of each object of the scene ``key`` (None: not in the cache)."""
    path = _entry(key)
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            names = json.loads(str(z["names"]))
            vertices, faces = z["vertices"], z["faces"]
            transforms = z["transforms"]
            v_end, f_end = np.cumsum(z["vertex_count"]), np.cumsum(z["face_count"])
            per_object = z["parts_per_object"]
            keys = {k for _, _, part_keys in names for k in part_keys}
            face_values = {k: z[f"face:{k}"] for k in keys}
    except Exception:  # an unreadable or partly written entry is a miss
        return None
    with contextlib.suppress(OSError):  # a cache shared read-only: still a hit
        os.utime(path)  # recently used
    out: list[list[CachedPart]] = []
    k = 0
    for count in per_object.tolist():
        parts: list[CachedPart] = []
        for _ in range(count):
            v0 = int(v_end[k - 1]) if k else 0
            f0 = int(f_end[k - 1]) if k else 0
            name, material, part_keys = names[k]
            values = {key: face_values[key][f0 : f_end[k]] for key in part_keys} or None
            parts.append((name, material, vertices[v0 : v_end[k]], faces[f0 : f_end[k]],
                          transforms[k], values))  # fmt: skip
            k += 1
        out.append(parts)
    return out


def store_parts(key: str, parts: Sequence[Sequence[CachedPart]]) -> None:
    """Keep the parts of each object of the scene ``key`` (written to a temporary name,
    renamed when complete); a folder that cannot be written is left alone."""
    path = _entry(key)
    if path is None:
        return
    flat = [p for obj in parts for p in obj]
    values_bytes = sum(v.nbytes for p in flat for v in (p[5] or {}).values())
    if sum(p[2].nbytes + p[3].nbytes for p in flat) + values_bytes > MAX_ENTRY_BYTES:
        return
    keys = sorted({k for p in flat for k in (p[5] or {})})
    face_values = {  # (NaN on the faces of parts without the key)
        f"face:{k}": np.concatenate([np.zeros(0)] + [
            p[5][k] if p[5] is not None and k in p[5] else np.full(len(p[3]), np.nan)
            for p in flat
        ])
        for k in keys
    }  # fmt: skip
    arrays = {
        "names": np.array(json.dumps([[p[0], p[1], sorted(p[5] or {})] for p in flat])),
        **face_values,
        "vertices": np.concatenate([np.zeros((0, 3))] + [p[2] for p in flat]),
        "faces": np.concatenate([np.zeros((0, 3), np.int64)] + [p[3] for p in flat]),
        "transforms": np.array([p[4] for p in flat]).reshape(-1, 4, 4),
        "vertex_count": np.array([len(p[2]) for p in flat], dtype=np.int64),
        "face_count": np.array([len(p[3]) for p in flat], dtype=np.int64),
        "parts_per_object": np.array([len(obj) for obj in parts], dtype=np.int64),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **arrays)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        _evict(path.parent)
    except OSError:
        return


def _evict(folder: Path) -> None:
    """Remove the least recently used entries beyond :data:`MAX_ENTRIES`."""
    entries = sorted(folder.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[MAX_ENTRIES:]:
        old.unlink(missing_ok=True)
