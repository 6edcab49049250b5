"""Surfaces of a real scan without a mesh: planar patches found in the points (RANSAC with
Open3D), or groups of points by class, each with its plane; per point, the incidence
cosine and the range residual to the plane along the beam."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Surface",
    "beam_origins",
    "find_planes",
    "label_surfaces",
    "name_surfaces",
    "surface_geometry",
]


def beam_origins(xyz_m: NDArray, origin_m: NDArray, offset_m: float) -> NDArray[np.float64]:
    """Where each point's beam left the sensor: ``offset_m`` from the spin axis (the
    scanner's ``beam_origin_offset_m``) towards the point's azimuth, about ``origin_m``.

    A spinning head's beam origin turns with the head, and the beam points along the
    head's azimuth, so a point's own azimuth about the axis is the head's."""
    p = np.asarray(xyz_m, dtype=np.float64)
    o = np.asarray(origin_m, dtype=np.float64)
    out = np.broadcast_to(o, p.shape).copy()
    if offset_m:
        d = p[:, :2] - o[:2]
        length = np.maximum(np.linalg.norm(d, axis=1), 1e-12)
        out[:, :2] += offset_m * d / length[:, None]
    return out


@dataclass
class Surface:
    """A plane of the scan and the points on it.

    Attributes
    ----------
    name : str
        ``ground``, ``wall_1``, ... (or a class name, by labels).
    index : (M,) int64
        Indices of its points in the scan.
    normal : (3,) float64
        Unit normal, facing the sensor.
    offset_m : float
        The plane is ``normal . x + offset_m = 0``.
    """

    name: str
    index: NDArray[np.int64]
    normal: NDArray[np.float64]
    offset_m: float
    #: A surface of several planes (a class's walls, a mesh's triangles): each point's own
    #: plane, normal (M, 3) and offset (M,), used instead of the one plane when given.
    point_normals: NDArray[np.float64] | None = None
    point_offsets_m: NDArray[np.float64] | None = None


def _plane(xyz: NDArray[np.float64], origin: NDArray[np.float64]) -> tuple[NDArray, float]:
    """Least-squares plane through points: unit normal facing ``origin`` and offset."""
    centre = xyz.mean(axis=0)
    _, _, vt = np.linalg.svd(xyz - centre, full_matrices=False)
    n = vt[-1]
    if np.dot(origin - centre, n) < 0:
        n = -n
    return n, float(-np.dot(n, centre))


#: Widest distance (m) from a plane at which a point can still belong to it.
MAX_WINDOW_M = 2.0
#: A point belongs to a plane within this many of the plane's local scatters.
WINDOW_SIGMAS = 4.0


def _grow(
    xyz: NDArray[np.float64], origin: NDArray[np.float64], n: NDArray, d: float,
    distance_m: float,
) -> NDArray[np.bool_]:  # fmt: skip
    """The points of a plane: within ``WINDOW_SIGMAS`` local scatters of it, the scatter
    found per bin of incidence by widening the window until it holds (a rough surface
    seen at grazing incidence scatters far more than ``distance_m``, and cutting its
    points at a fixed distance would hide its roughness)."""
    from .fits import robust_sigma

    perp = xyz @ n + d
    ray = xyz - origin
    cos = np.abs(ray @ n) / np.maximum(np.linalg.norm(ray, axis=1), 1e-12)
    keep = np.abs(perp) <= distance_m
    cand = np.flatnonzero(np.abs(perp) < MAX_WINDOW_M)
    if len(cand) < 100:
        return keep
    order = cand[np.argsort(cos[cand], kind="stable")]
    for chunk in np.array_split(order, max(1, min(24, len(order) // 200))):
        window = distance_m
        for _ in range(6):
            inside = chunk[np.abs(perp[chunk]) <= window]
            if len(inside) < 10:
                break
            new = min(max(distance_m, WINDOW_SIGMAS * robust_sigma(perp[inside])), MAX_WINDOW_M)
            if abs(new - window) < 0.02 * window:
                window = new
                break
            window = new
        keep[chunk] = np.abs(perp[chunk]) <= window
    return keep


def find_planes(
    xyz_m: NDArray,
    origin_m: NDArray,
    *,
    max_planes: int = 8,
    min_points: int = 300,
    distance_m: float = 0.08,
    seed: int = 0,
) -> list[Surface]:
    """The largest planes of the scan, found one after another by RANSAC (Open3D), each
    refitted by least squares on its inliers.

    The planes are named ``ground`` (the largest one whose normal is within 25 deg of
    vertical, below the sensor) and ``wall_1``, ``wall_2``, ... (``plane_N`` if neither).
    """
    import open3d as o3d

    o3d.utility.random.seed(seed)
    xyz = np.asarray(xyz_m, dtype=np.float64)
    origin = np.asarray(origin_m, dtype=np.float64)
    left = np.arange(len(xyz))
    found: list[tuple[NDArray, NDArray, float]] = []
    while len(found) < max_planes and len(left) >= min_points:
        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(xyz[left]))
        _, inliers = pcd.segment_plane(distance_m, 3, 2000)
        if len(inliers) < min_points:
            break
        members = left[np.asarray(inliers, dtype=np.int64)]
        n, d = _plane(xyz[members], origin)
        near = _grow(xyz[left], origin, n, d, distance_m)
        members = left[near]
        n, d = _plane(xyz[left][near & (np.abs(xyz[left] @ n + d) <= distance_m)], origin)
        found.append((members, n, d))
        left = left[~near]
    surfaces: list[Surface] = []
    ground_done, walls = False, 0
    for members, n, d in sorted(found, key=lambda f: -len(f[0])):
        below = float(np.dot(n, origin) + d) > 0 and n[2] > 0
        if not ground_done and abs(n[2]) > np.cos(np.radians(25)) and below:
            name, ground_done = "ground", True
        elif abs(n[2]) < np.sin(np.radians(25)):
            walls += 1
            name = f"wall_{walls}"
        else:
            name = f"plane_{len(surfaces) + 1}"
        surfaces.append(Surface(name, np.sort(members), n, d))
    return surfaces


def label_surfaces(
    xyz_m: NDArray,
    origin_m: NDArray,
    labels: NDArray,
    names: dict[int, str],
    *,
    min_points: int = 300,
    distance_m: float = 0.08,
    seed: int = 0,
) -> list[Surface]:
    """One surface per class of ``labels`` (its name from ``names``): the class's planes
    (RANSAC, up to ``CLASS_PLANES``), pooled, each point with its own plane, so that a
    class's several walls count together and points off them (clutter) do not spoil the
    fits."""
    xyz = np.asarray(xyz_m, dtype=np.float64)
    out: list[Surface] = []
    for value in np.unique(labels):
        members = np.flatnonzero(labels == value)
        if len(members) < min_points:
            continue
        planes = find_planes(xyz[members], origin_m, max_planes=CLASS_PLANES,
                             min_points=min_points, distance_m=distance_m, seed=seed)  # fmt: skip
        if not planes:
            continue
        in_scan = [replace(p, index=members[p.index]) for p in planes]
        out.append(_pooled(names.get(int(value), f"class_{int(value)}"), in_scan))
    return out


#: Most planes pooled into one class's surface.
CLASS_PLANES = 4


def surface_geometry(
    xyz_m: NDArray, origin_m: NDArray, surface: Surface
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per point of the surface: the incidence cosine ``|n . d|``, the measured range
    ``|p - o|`` and its residual to the plane along the beam (measured minus plane), m.

    ``origin_m`` is one point (3,) or each point's beam origin (N, 3), for the scan."""
    p = np.asarray(xyz_m, dtype=np.float64)[surface.index]
    o = np.asarray(origin_m, dtype=np.float64)
    if o.ndim == 2:
        o = o[surface.index]
    ray = p - o
    range_m = np.linalg.norm(ray, axis=1)
    d = ray / range_m[:, None]
    if surface.point_normals is not None and surface.point_offsets_m is not None:
        n = surface.point_normals
        n_dot_d = np.einsum("ij,ij->i", d, n)
        o_dot_n = np.einsum("ij,ij->i", np.broadcast_to(o, p.shape), n)
        plane_m = -(o_dot_n + surface.point_offsets_m) / n_dot_d
        return np.abs(n_dot_d), range_m, range_m - plane_m
    n_dot_d = d @ surface.normal
    plane_m = -(o @ surface.normal + surface.offset_m) / n_dot_d
    return np.abs(n_dot_d), range_m, range_m - plane_m


def _pooled(name: str, parts: list[Surface]) -> Surface:
    """Surfaces pooled into one, each point keeping its own plane."""

    def normals(p: Surface) -> NDArray[np.float64]:
        return (
            p.point_normals if p.point_normals is not None else np.tile(p.normal, (len(p.index), 1))
        )

    def offsets(p: Surface) -> NDArray[np.float64]:
        return (
            p.point_offsets_m
            if p.point_offsets_m is not None
            else np.full(len(p.index), p.offset_m)
        )

    index = np.concatenate([p.index for p in parts])
    order = np.argsort(index, kind="stable")
    return Surface(name, index[order], parts[0].normal, parts[0].offset_m,
                   np.concatenate([normals(p) for p in parts])[order],
                   np.concatenate([offsets(p) for p in parts])[order])  # fmt: skip


def name_surfaces(surfaces: list[Surface], names: dict[str, list[str]]) -> list[Surface]:
    """Group and name surfaces: ``names`` maps a new name to the surfaces it takes
    (``{"facade": ["wall_1", "wall_2"], "road": ["ground"]}``); the others keep theirs.

    Raises
    ------
    KeyError
        Naming a surface that was not found (the message lists those that were).
    """
    by = {s.name: s for s in surfaces}
    taken: set[str] = set()
    out: list[Surface] = []
    for new, old in names.items():
        missing = [o for o in old if o not in by]
        if missing:
            raise KeyError(f"no surface {', '.join(missing)}; found {', '.join(by)}")
        taken.update(old)
        parts = [by[o] for o in old]
        out.append(_pooled(new, parts) if len(parts) > 1 else replace(parts[0], name=new))
    return out + [s for s in surfaces if s.name not in taken]
