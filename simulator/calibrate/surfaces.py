"""Surfaces of a real scan without a mesh: planar patches found in the points (a RANSAC of
hashed hypotheses, the same planes in every process), or groups of points by class, each
with its plane; per point, the incidence cosine and the range residual to the plane along
the beam."""

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
    """Least-squares plane through points: unit normal facing ``origin`` and offset.

    The normal is the eigenvector of the points' 3 x 3 scatter matrix with the least
    eigenvalue; the matrix's six sums are numpy's pairwise sums (no BLAS), so the plane is
    the same bit for bit whatever the machine's threads."""
    centre = xyz.mean(axis=0)
    q = xyz - centre
    scatter = np.array([[np.sum(q[:, i] * q[:, j]) for j in range(3)] for i in range(3)])
    _, vectors = np.linalg.eigh(scatter)
    n = vectors[:, 0] / np.linalg.norm(vectors[:, 0])
    if np.dot(origin - centre, n) < 0:  # the eigenvector's sign is arbitrary
        n = -n
    return n, float(-np.dot(n, centre))


#: RANSAC: plane hypotheses drawn per search, points a hypothesis is scored on (a hashed
#: subset of those left), best hypotheses rescored on every point, and hypotheses scored
#: at once (a (hypotheses, points) block, for memory).
RANSAC_HYPOTHESES = 2048
RANSAC_SAMPLE_POINTS = 4096
RANSAC_RESCORED = 8
RANSAC_CHUNK = 256
#: Least-squares refits of the best hypothesis's inliers.
RANSAC_REFITS = 3


def _ransac(
    xyz: NDArray[np.float64], index: NDArray[np.int64], distance_m: float, key: int
) -> tuple[NDArray[np.float64], float]:
    """The plane with the most points within ``distance_m`` (RANSAC, deterministic).

    Hypotheses are planes through three points of a subset of the points, every choice
    drawn from hashes of ``key``, the hypothesis and the point's own ``index`` (no random
    state): the same points give the same plane in any process. Each hypothesis is scored
    on the subset, the best ``RANSAC_RESCORED`` on every point, and the best of those (the
    first, on a tie) is refitted by least squares to its inliers ``RANSAC_REFITS`` times.

    Parameters
    ----------
    xyz : (N, 3) float64
        The points, m.
    index : (N,) int64
        Each point's index in the scan (its hash key: the subset does not depend on the
        order or on which other points are left).
    distance_m : float
        The inlier distance, m.
    key : int
        The search's key (the seed and the plane's number).

    Returns
    -------
    normal : (3,) float64
        Unit normal (its sign arbitrary); zeros when every hypothesis is degenerate.
    offset_m : float
        The plane is ``normal . x + offset_m = 0``.
    """
    from ..physics import hash_uniform, mix64

    salt = int(mix64(np.uint64(key & 0xFFFFFFFFFFFFFFFF)))
    rank = mix64(index.astype(np.uint64) ^ np.uint64(salt))
    sample = xyz[np.argsort(rank, kind="stable")[:RANSAC_SAMPLE_POINTS]]
    m = len(sample)
    draws = np.arange(RANSAC_HYPOTHESES * 3, dtype=np.uint64) + np.uint64(salt)
    pick = (hash_uniform(mix64(draws)) * m).astype(np.int64).reshape(-1, 3)
    a, b, c = sample[pick[:, 0]], sample[pick[:, 1]], sample[pick[:, 2]]
    normals = np.cross(b - a, c - a)
    length = np.linalg.norm(normals, axis=1)
    good = length > 1e-9
    normals = np.where(good[:, None], normals / np.maximum(length, 1e-300)[:, None], 0.0)
    offsets = -np.einsum("ij,ij->i", normals, a)

    def score(points: NDArray[np.float64], h: NDArray[np.int64]) -> NDArray[np.int64]:
        out = np.empty(len(h), dtype=np.int64)
        for lo in range(0, len(h), RANSAC_CHUNK):
            part = h[lo : lo + RANSAC_CHUNK]
            perp = (normals[part, 0:1] * points[:, 0] + normals[part, 1:2] * points[:, 1]
                    + normals[part, 2:3] * points[:, 2] + offsets[part, None])  # fmt: skip
            out[lo : lo + RANSAC_CHUNK] = (np.abs(perp) <= distance_m).sum(axis=1)
        return np.where(good[h], out, -1)

    coarse = score(sample, np.arange(RANSAC_HYPOTHESES))
    best = np.argsort(-coarse, kind="stable")[:RANSAC_RESCORED]
    fine = score(xyz, best)
    h = int(best[int(np.argmax(fine))])
    if not good[h]:  # every hypothesis degenerate (collinear points): no plane
        return np.zeros(3), 0.0
    n, d = normals[h], float(offsets[h])
    for _ in range(RANSAC_REFITS):
        inliers = np.abs(xyz @ n + d) <= distance_m
        if inliers.sum() < 3:
            break
        n, d = _plane(xyz[inliers], xyz[inliers].mean(axis=0) + n)  # keeps n's side
    return n, d


#: Widest distance (m) from a plane at which a point can still belong to it.
MAX_WINDOW_M = 2.0
#: A point belongs to a plane within this many of the plane's local scatters.
WINDOW_SIGMAS = 4.0
#: A plane whose points scatter about it by this much or more (robust sigma, m) is
#: clutter, a slab of scattered points (its window grew to ``MAX_WINDOW_M``): its points
#: are set aside and the search goes on.
CLUTTER_SIGMA_M = 0.2


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


def _reassign(
    xyz: NDArray[np.float64], found: list[tuple[NDArray, NDArray, float]], distance_m: float
) -> list[tuple[NDArray, NDArray, float]]:
    """Give each point a plane took only by its widened window to a later plane it lies on.

    A plane found first (the ground) takes, at grazing incidence, every point within a
    window of its local scatter, which there can be a metre wide: the foot of a wall it
    meets falls inside, before the wall is found. A point of plane ``i`` farther than
    ``distance_m`` from it, within ``distance_m`` of a later plane ``j`` and inside ``j``'s
    extent (its points' box, widened by ``MAX_WINDOW_M``), is ``j``'s.

    Parameters
    ----------
    xyz : (N, 3) float64
        The points, m.
    found : list of (members (M,) int64, normal (3,), offset_m)
        The planes in the order found.
    distance_m : float
        The inlier distance, m.
    """
    members = [m.copy() for m, _, _ in found]
    for j in range(1, len(found)):
        _, nj, dj = found[j]
        own = xyz[members[j]]
        lo = own.min(axis=0) - MAX_WINDOW_M
        hi = own.max(axis=0) + MAX_WINDOW_M
        for i in range(j):
            _, ni, di = found[i]
            p = xyz[members[i]]
            move = ((np.abs(p @ ni + di) > distance_m) & (np.abs(p @ nj + dj) <= distance_m)
                    & (p >= lo).all(axis=1) & (p <= hi).all(axis=1))  # fmt: skip
            if move.any():
                members[j] = np.concatenate([members[j], members[i][move]])
                members[i] = members[i][~move]
    return [(m, n, d) for m, (_, n, d) in zip(members, found, strict=True)]


def find_planes(
    xyz_m: NDArray,
    origin_m: NDArray,
    *,
    max_planes: int = 8,
    min_points: int = 300,
    distance_m: float = 0.08,
    seed: int = 0,
) -> list[Surface]:
    """The largest planes of the scan, found one after another by RANSAC (:func:`_ransac`,
    hypotheses drawn from hashes of ``seed``: the same points give the same planes in any
    process), each refitted by least squares on its inliers and grown by its local scatter
    (:func:`_grow`). A plane whose points scatter by ``CLUTTER_SIGMA_M`` or more is clutter
    and set aside; the points a plane took only by its widened window and that lie on a
    plane found later go to that plane (:func:`_reassign`).

    The planes are named ``ground`` (the largest one whose normal is within 25 deg of
    vertical, below the sensor) and ``wall_1``, ``wall_2``, ... (``plane_N`` if neither).
    """
    xyz = np.asarray(xyz_m, dtype=np.float64)
    origin = np.asarray(origin_m, dtype=np.float64)
    from .fits import robust_sigma

    left = np.arange(len(xyz))
    found: list[tuple[NDArray, NDArray, float]] = []
    set_aside = 0
    while len(found) < max_planes and len(left) >= min_points:
        n, d = _ransac(xyz[left], left, distance_m, seed * 1_000_003 + len(found))
        if not n.any():
            break
        inliers = np.abs(xyz[left] @ n + d) <= distance_m
        if inliers.sum() < min_points:
            break
        n, d = _plane(xyz[left][inliers], origin)
        near = _grow(xyz[left], origin, n, d, distance_m)
        members = left[near]
        n, d = _plane(xyz[left][near & (np.abs(xyz[left] @ n + d) <= distance_m)], origin)
        left = left[~near]
        if robust_sigma(xyz[members] @ n + d) >= CLUTTER_SIGMA_M:
            set_aside += 1  # scattered points, not a surface: set aside, not a plane
            if set_aside > max_planes:
                break
            continue
        found.append((members, n, d))
    found = _reassign(xyz, found, distance_m)
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
