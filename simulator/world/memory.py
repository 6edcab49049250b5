"""The memory a scan needs, checked before the ray engine is built: a scene too large for the
machine stops with one line (the scene file, its triangles, the memory estimated and the
memory available) instead of being killed by the system half-way through Embree's build.

The estimate is per triangle, measured with ``lidar-sim bench --load`` (Open3D 0.20, a
binary PLY terrain; 2026-12-05): from the interpreter's start to the peak of one revolution,
10 M triangles took 1,415 MiB (148 B a triangle) and 1 M took 201 MiB (the chunk's working
set is a larger share of it). Of that, the loaded scene holds about 72 B a triangle
(trimesh's float64 vertices and int64 faces, about 36 B a triangle, and their copy placed
in the world), and the ray engine takes about 80 more (Open3D's float32/uint32 copy and
Embree's BVH). A chunk of pulses adds its working set: the rays, hits and per-hit fields.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import SceneMemoryError

__all__ = [
    "BYTES_PER_CHUNK_RAY",
    "DEFAULT_CHUNK_RAYS",
    "ENGINE_BYTES_PER_TRIANGLE",
    "LOADED_BYTES_PER_TRIANGLE",
    "MEMORY_ENV",
    "available_memory_bytes",
    "check_mesh_files_memory",
    "check_scan_memory",
    "mesh_file_triangles",
    "scan_memory_bytes",
]

#: Bytes a triangle holds once the scene is loaded (trimesh's arrays, the placed copy).
LOADED_BYTES_PER_TRIANGLE = 72
#: Bytes a triangle adds when the ray engine is built (Open3D's copy, Embree's BVH).
ENGINE_BYTES_PER_TRIANGLE = 80
#: Working-set bytes a ray of a chunk takes (rays, hits, the per-hit model's fields).
BYTES_PER_CHUNK_RAY = 400
#: Rays a chunk, when the survey's ``chunk_pulses`` is not known yet (its default).
DEFAULT_CHUNK_RAYS = 2**18
#: An environment variable that sets the memory taken as available, in bytes or with a
#: unit (``512M``, ``2G``), in place of the system's ``MemAvailable``.
MEMORY_ENV = "LIDAR_SIM_MEMORY_AVAILABLE"

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def scan_memory_bytes(triangles: int, chunk_rays: int, *, loaded: bool = False) -> int:
    """The memory a scan of a scene of ``triangles`` needs, bytes.

    Parameters
    ----------
    triangles : int
        Triangles in the scene.
    chunk_rays : int
        Rays cast a chunk (``chunk_pulses``).
    loaded : bool
        Whether the scene is loaded already: then only what is still to come (the ray
        engine and a chunk's working set) is counted.

    Returns
    -------
    int
    """
    per_triangle = ENGINE_BYTES_PER_TRIANGLE + (0 if loaded else LOADED_BYTES_PER_TRIANGLE)
    return int(triangles) * per_triangle + int(chunk_rays) * BYTES_PER_CHUNK_RAY


def available_memory_bytes() -> tuple[int | None, str]:
    """The memory available to this process, bytes, and where the figure came from.

    :data:`MEMORY_ENV` when set; else ``MemAvailable`` of ``/proc/meminfo`` (Linux); else
    psutil's ``available`` when psutil is installed; else ``(None, "unknown")``.

    Raises
    ------
    SceneMemoryError
        If :data:`MEMORY_ENV` is not a size (e.g. ``512M``, ``2G``, ``1073741824``).
    """
    given = os.environ.get(MEMORY_ENV, "").strip()
    if given:
        number, unit = given.rstrip("BbiI"), ""
        if number and number[-1].upper() in _UNITS:
            number, unit = number[:-1], number[-1].upper()
        try:
            return int(float(number) * _UNITS[unit]), MEMORY_ENV
        except ValueError:
            raise SceneMemoryError(
                f"{MEMORY_ENV}={given!r}: expected a size in bytes or with a unit, e.g. 512M, 2G"
            ) from None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return None, "unknown"
    return int(psutil.virtual_memory().available), "psutil"


def mesh_file_triangles(path: str | Path) -> int | None:
    """The triangles a mesh file holds, read from its header alone (nothing is loaded):
    a PLY's ``element face N``, a binary STL's count; None for other formats, an ASCII
    STL or a file that cannot be read (a PLY's faces are taken as triangles)."""
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
        size = path.stat().st_size
    except OSError:
        return None
    if suffix == ".ply" and b"end_header" in head:
        for line in head.split(b"end_header", 1)[0].splitlines():
            words = line.split()
            if words[:2] == [b"element", b"face"] and len(words) == 3 and words[2].isdigit():
                return int(words[2])
        return None
    if suffix == ".stl" and len(head) >= 84:
        count = int.from_bytes(head[80:84], "little")
        return count if size == 84 + 50 * count else None
    return None


def check_mesh_files_memory(source: str | Path, paths: list[Path], chunk_rays: int) -> None:
    """Stop before loading a scene whose mesh files' headers already say its scan will not
    fit in memory (the files whose headers give no count are left to
    :func:`check_scan_memory`, after the load).

    Raises
    ------
    SceneMemoryError
        One line: the scene file, the triangles the headers count, the memory the scan
        needs and the memory available.
    """
    counts = {p: mesh_file_triangles(p) for p in set(paths)}  # (a file placed many times
    triangles = sum(counts[p] or 0 for p in paths)  # is read once, counted each time)
    if triangles:
        _check(source, triangles, chunk_rays, loaded=False)


def check_scan_memory(source: str | Path, triangles: int, chunk_rays: int) -> None:
    """Stop before the ray engine is built if a loaded scene's scan will not fit in memory.

    Parameters
    ----------
    source : str or Path
        The scene file (named in the message).
    triangles : int
        Its triangles.
    chunk_rays : int
        Rays cast a chunk.

    Raises
    ------
    SceneMemoryError
        One line: the scene file, its triangles, the memory the rest of the scan needs
        (and the whole scan's estimate) and the memory available.
    """
    _check(source, triangles, chunk_rays, loaded=True)


def _check(source: str | Path, triangles: int, chunk_rays: int, *, loaded: bool) -> None:
    available, where = available_memory_bytes()
    needed = scan_memory_bytes(triangles, chunk_rays, loaded=loaded)
    if available is None or needed <= available:
        return
    whole = scan_memory_bytes(triangles, chunk_rays)
    what = (
        f"the ray engine and a chunk need about {needed / 2**30:.2f} GiB more "
        f"({whole / 2**30:.2f} GiB for the whole scan"
        if loaded
        else f"its scan needs about {whole / 2**30:.2f} GiB (counted from the mesh files' "
        "headers, before loading"
    )
    raise SceneMemoryError(
        f"{source}: {triangles:,} triangles: {what}, about "
        f"{ENGINE_BYTES_PER_TRIANGLE + LOADED_BYTES_PER_TRIANGLE} B a triangle), "
        f"but {available / 2**30:.2f} GiB is available ({where}); scan a smaller or "
        "decimated mesh, lower chunk_pulses, or free memory"
    )
