"""Hits that do not depend on the instruction set that found them (issue 49, point 1).

Open3D creates its Embree device with the default configuration, and Embree picks its
kernels (AVX or AVX2, a BVH of width 4 or 8 by CPU model) at run time, with an
approximate reciprocal: the range and normal it reports differ in their last bits from one
x86-64 machine to another, and so does the triangle it picks where two are hit at once.
Embree's instruction set cannot be pinned from outside Open3D.

So Embree only *finds* the triangle. Its range and unit normal are recomputed here
(:func:`refine_hits`) in float64 from the float32 vertices Embree was given and the ray as
cast (float32, promoted exactly), by Möller–Trumbore with every product written out (no
``einsum``, no ``cross``: the kernel :func:`simulator.kernels.refine.refine_hits` computes
the same operations in the same order, so both give the same bits), and rounded once to
float32. A hit within :data:`EDGE_EPS` (barycentric) of its triangle's edge, or on a face
that a coplanar face of another geometry overlaps (:func:`coplanar_shared`, built once
with the scene), may be a tie whose winner Embree's traversal and rounding decide: for
those few rays, every face sharing a point with Embree's, and every face
``list_intersections`` finds, is tested in float64, and the nearest that holds the hit
(closed triangle) wins, then the lowest (geometry, primitive) (:func:`resolve_ties`).
:class:`RefinedScene` does all of it for one ``RaycastingScene``.

What stays Embree's: whether a ray hits at all (a ray grazing a silhouette edge, or
through the crack Embree's non-watertight test leaves at an edge, can hit for one
instruction set and miss for another), and the triangle of a tie on a sliver whose
float32 error exceeds :data:`EDGE_EPS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EDGE_EPS",
    "TIE_REL",
    "RefineHits",
    "RefinedScene",
    "Triangles",
    "coplanar_shared",
    "moller_trumbore",
    "refine_hits",
    "resolve_ties",
]

#: A hit whose smallest float64 barycentric coordinate is below this may be on the
#: neighbour's side of the edge for another instruction set: a tie to resolve. Embree's
#: float32 hits stray up to a few 1e-6 outside their triangle (seen on an icosphere).
EDGE_EPS = 1e-4
#: Ranges within this relative difference of the nearest are a tie (the lowest geometry,
#: then primitive, wins).
TIE_REL = 1e-9
#: Coplanar faces: unit normals equal to this (after rounding) ...
PLANE_NORMAL_STEP = 1e-6
#: ... and plane offsets equal to this (m).
PLANE_OFFSET_STEP_M = 1e-5
#: Margin (m) of the bounding-box overlap test of coplanar faces.
OVERLAP_MARGIN_M = 1e-5
#: Open3D's geometry id of a miss (INVALID_ID).
INVALID_ID = 2**32 - 1


@dataclass(frozen=True)
class Triangles:
    """The triangles of one ``RaycastingScene``, exactly as Embree was given them.

    Attributes
    ----------
    vertices_m : (P, 3) float64
        The float32 vertices Embree holds, promoted (local frame, m), each distinct point
        once (equal vertices of any geometries are one).
    faces : (F, 3) int32
        Vertex rows of ``vertices_m`` (each geometry's faces in order).
    face_start : (G + 1,) int64
        Geometry ``g``'s faces are ``faces[face_start[g]:face_start[g + 1]]``: primitive
        ``p`` of geometry ``g`` is face ``face_start[g] + p``.
    shared : (F,) bool
        Whether a coplanar face of another geometry overlaps the face
        (:func:`coplanar_shared`).
    ring_start : (P + 1,) int64
        The faces at point ``c`` are ``ring_faces[ring_start[c]:ring_start[c + 1]]``.
    ring_faces : (3 F,) int32
        The faces at each point, point by point.
    """

    vertices_m: NDArray[np.float64]
    faces: NDArray[np.int32]
    face_start: NDArray[np.int64]
    shared: NDArray[np.bool_]
    ring_start: NDArray[np.int64]
    ring_faces: NDArray[np.int64]

    @classmethod
    def pack(
        cls, vertices_m: Sequence[NDArray[np.float32]], faces: Sequence[NDArray[np.uint32]]
    ) -> Triangles:
        """The triangles of geometries ``0..G-1``: each one's (V_g, 3) float32 vertices and
        (F_g, 3) uint32 faces as given to ``add_triangles``."""
        v_start = np.cumsum([0] + [len(v) for v in vertices_m]).astype(np.int64)
        f_start = np.cumsum([0] + [len(f) for f in faces]).astype(np.int64)
        vertices = np.concatenate([np.zeros((0, 3), np.float32), *vertices_m])
        # Equal vertices (of any geometry) become one point: the faces around a point are
        # then found across seams and between objects.
        points, point = np.unique(vertices, axis=0, return_inverse=True)
        del vertices
        point = point.ravel().astype(np.int32)
        corners = np.zeros((int(f_start[-1]), 3), np.int32)
        for g, f in enumerate(faces):
            corners[f_start[g] : f_start[g + 1]] = point[np.asarray(f, np.int64) + v_start[g]]
        del point
        order = np.argsort(corners.ravel(), kind="stable")
        ring_faces = (order // 3).astype(np.int32)
        count = np.bincount(corners.ravel(), minlength=len(points))
        ring_start = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
        points = points.astype(np.float64)
        shared = coplanar_shared(points, corners, f_start)
        return cls(points, corners, f_start, shared, ring_start, ring_faces)

    def geometry_of(self, face: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The (geometry, primitive) ids of faces ``face`` (K,) (-1, -1 for -1)."""
        g = np.searchsorted(self.face_start, face, side="right") - 1
        ok = face >= 0
        return np.where(ok, g, -1), np.where(ok, face - self.face_start[np.maximum(g, 0)], -1)

    def around(self, face: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The faces that share a point with faces ``face`` (K,), themselves included:
        pairs (k, neighbour) of (R,) int64 each."""
        point = self.faces[face].ravel()
        first, count = self.ring_start[point], self.ring_start[point + 1] - self.ring_start[point]
        k = np.repeat(np.repeat(np.arange(len(face)), 3), count)
        at = np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())
        return k.astype(np.int64), self.ring_faces[at].astype(np.int64)

    def kernel_args(self) -> tuple[NDArray[Any], ...]:
        """The arrays a kernel takes: vertices, faces, face starts, shared."""
        return self.vertices_m, self.faces, self.face_start, self.shared


def coplanar_shared(
    vertices_m: NDArray[np.float64], faces: NDArray[np.integer], face_start: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """(F,) bool: whether a face of another geometry lies in the face's plane (unit normal
    and offset equal after rounding to :data:`PLANE_NORMAL_STEP` and
    :data:`PLANE_OFFSET_STEP_M`, either orientation) with overlapping bounding boxes
    (:data:`OVERLAP_MARGIN_M`). A ray hitting such a face may hit both at one range.

    Every operation is elementwise (no reduction whose order a SIMD width could change),
    so the table is the same on any CPU.

    Parameters
    ----------
    vertices_m : (V, 3) float64
    faces : (F, 3) int
    face_start : (G + 1,) int64
        Each geometry's first face (see :class:`Triangles`).
    """
    out = np.zeros(len(faces), dtype=np.bool_)
    if len(face_start) < 3 or len(faces) == 0:  # one geometry: no other to share with
        return out
    key = np.zeros(len(faces), np.int64)
    for a in range(0, len(faces), 1 << 18):  # blocks keep the temporaries small
        key[a : a + (1 << 18)] = _plane_key(vertices_m, faces[a : a + (1 << 18)])
    geometry = np.repeat(np.arange(len(face_start) - 1), np.diff(face_start))
    planes, plane = np.unique(key, return_inverse=True)
    pair = np.unique(plane.astype(np.int64) * (len(face_start) - 1) + geometry)
    multi = np.flatnonzero(np.bincount(pair // (len(face_start) - 1), minlength=len(planes)) >= 2)
    candidates = np.flatnonzero(np.isin(plane, multi))  # planes of >= 2 geometries
    if len(candidates) == 0:
        return out
    corners = vertices_m[faces[candidates]]  # (C, 3, 3)
    lo = corners.min(axis=1) - OVERLAP_MARGIN_M
    hi = corners.max(axis=1) + OVERLAP_MARGIN_M
    order = np.argsort(plane[candidates], kind="stable")
    bounds = np.flatnonzero(np.diff(plane[candidates][order])) + 1
    for members in np.split(order, bounds):  # rows of candidates, one plane
        g = geometry[candidates[members]]
        # first against each other geometry's box in this plane: most faces are far
        near = np.zeros(len(members), np.bool_)
        for other in np.unique(g):
            box_lo = lo[members[g == other]].min(axis=0)
            box_hi = hi[members[g == other]].max(axis=0)
            near |= (g != other) & ((lo[members] <= box_hi) & (hi[members] >= box_lo)).all(axis=1)
        members, g = members[near], g[near]
        step = max(1, (1 << 20) // max(len(members), 1))  # pair tables of <= 1 M pairs
        for a in range(0, len(members), step):
            block = members[a : a + step]
            overlap = (
                (lo[block, None, :] <= hi[None, members, :])
                & (hi[block, None, :] >= lo[None, members, :])
            ).all(axis=2) & (g[a : a + step, None] != g[None, :])
            out[candidates[block]] = overlap.any(axis=1)
    return out


def _plane_key(vertices_m: NDArray[np.float64], faces: NDArray[np.integer]) -> NDArray[np.int64]:
    """(F,) int64: a hash of each face's rounded plane (see :func:`coplanar_shared`)."""
    v0 = vertices_m[faces[:, 0]]
    e1 = vertices_m[faces[:, 1]] - v0
    e2 = vertices_m[faces[:, 2]] - v0
    n = np.stack([e1[:, 1] * e2[:, 2] - e1[:, 2] * e2[:, 1],
                  e1[:, 2] * e2[:, 0] - e1[:, 0] * e2[:, 2],
                  e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]], axis=1)  # fmt: skip
    length = np.sqrt(n[:, 0] * n[:, 0] + n[:, 1] * n[:, 1] + n[:, 2] * n[:, 2])
    n /= np.where(length > 0, length, 1.0)[:, None]
    # orientation: the first component that is not ~0 is > 0
    lead = np.where(
        np.abs(n[:, 0]) > 1e-12, n[:, 0], np.where(np.abs(n[:, 1]) > 1e-12, n[:, 1], n[:, 2])
    )
    n *= np.where(lead < 0, -1.0, 1.0)[:, None]
    offset = n[:, 0] * v0[:, 0] + n[:, 1] * v0[:, 1] + n[:, 2] * v0[:, 2]
    # one int64 a plane: a hash of the rounded values (a collision only adds candidates)
    key = np.round(offset / PLANE_OFFSET_STEP_M).astype(np.int64)
    for k in range(3):
        key = key * np.int64(1_000_003) + np.round(n[:, k] / PLANE_NORMAL_STEP).astype(np.int64)
    return key


def moller_trumbore(
    origin: NDArray[np.float64],
    direction: NDArray[np.float64],
    v0: NDArray[np.float64],
    v1: NDArray[np.float64],
    v2: NDArray[np.float64],
) -> tuple[NDArray[np.float64], ...]:
    """Möller–Trumbore in float64, every product written out (the kernel's order).

    Parameters
    ----------
    origin, direction : (N, 3) float64
        The rays (direction need not be unit: the range is in its units).
    v0, v1, v2 : (N, 3) float64
        Each ray's triangle.

    Returns
    -------
    t, u, v : (N,) float64
        The range along ``direction`` and the barycentrics of ``v1`` and ``v2`` (nan or inf
        where the ray is parallel to the plane, ``det == 0``).
    nx, ny, nz, det : (N,) float64
        The triangle's (not unit) normal ``(v1 - v0) x (v2 - v0)``, and the determinant.
    """
    e1x, e1y, e1z = v1[:, 0] - v0[:, 0], v1[:, 1] - v0[:, 1], v1[:, 2] - v0[:, 2]
    e2x, e2y, e2z = v2[:, 0] - v0[:, 0], v2[:, 1] - v0[:, 1], v2[:, 2] - v0[:, 2]
    dx, dy, dz = direction[:, 0], direction[:, 1], direction[:, 2]
    px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
    det = e1x * px + e1y * py + e1z * pz
    sx, sy, sz = origin[:, 0] - v0[:, 0], origin[:, 1] - v0[:, 1], origin[:, 2] - v0[:, 2]
    qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (e2x * qx + e2y * qy + e2z * qz) / det
        u = (sx * px + sy * py + sz * pz) / det
        v = (dx * qx + dy * qy + dz * qz) / det
    nx, ny, nz = e1y * e2z - e1z * e2y, e1z * e2x - e1x * e2z, e1x * e2y - e1y * e2x
    return t, u, v, nx, ny, nz, det


def refine_hits(
    rays: NDArray[np.float32],
    t_hit: NDArray[np.float32],
    geometry: NDArray[np.uint32],
    primitive: NDArray[np.uint32],
    normal: NDArray[np.float32],
    triangles: Triangles,
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64]]:
    """Embree's hits with their range and normal recomputed in float64 (the specification;
    the kernel is :func:`simulator.kernels.refine.refine_hits`).

    Parameters
    ----------
    rays : (N, 6) float32
        The rays as cast (origin, direction; Open3D's layout, the scene's frame).
    t_hit : (N,) float32
        Embree's ranges (inf: a miss).
    geometry, primitive : (N,) uint32
        Embree's geometry and primitive ids (:data:`INVALID_ID`: a miss).
    normal : (N, 3) float32
        Embree's unit normals.
    triangles : Triangles
        The scene's triangles.

    Returns
    -------
    t : (N,) float32
        The range to the triangle, in units of the direction (m for a unit one),
        recomputed; Embree's for a miss, a ray parallel to the plane or a range that is not
        finite and >= 0.
    normal : (N, 3) float32
        The triangle's unit normal ``(v1 - v0) x (v2 - v0)`` (Embree's winding),
        recomputed; Embree's where the range is kept or the face is degenerate.
    ties : (K,) int64
        Increasing, the hits that may be ties (within :data:`EDGE_EPS` of an edge,
        recomputed range not kept, or on a :attr:`Triangles.shared` face): the rays
        :func:`resolve_ties` decides.
    """
    t_out = np.array(t_hit, dtype=np.float32)
    n_out = np.array(normal, dtype=np.float32).reshape(-1, 3)
    hit = np.flatnonzero(np.asarray(geometry, np.int64) != INVALID_ID)
    if len(hit) == 0:
        return t_out, n_out, np.zeros(0, np.int64)
    vertices, faces, face_start, shared = triangles.kernel_args()
    face = face_start[np.asarray(geometry, np.int64)[hit]] + np.asarray(primitive, np.int64)[hit]
    corners = faces[face]
    r = np.asarray(rays[hit], dtype=np.float64)
    t, u, v, nx, ny, nz, det = moller_trumbore(
        r[:, :3], r[:, 3:], *(vertices[corners[:, k]] for k in range(3))
    )
    length = np.sqrt(nx * nx + ny * ny + nz * nz)
    ok = (det != 0.0) & (t >= 0.0) & (t < np.inf)
    unit = ok & (length > 0.0)
    t_out[hit[ok]] = t[ok].astype(np.float32)
    for k, c in enumerate((nx, ny, nz)):
        n_out[hit[unit], k] = (c[unit] / length[unit]).astype(np.float32)
    with np.errstate(invalid="ignore"):
        edge = (u < EDGE_EPS) | (v < EDGE_EPS) | ((1.0 - u - v) < EDGE_EPS)
    tie = ~ok | edge | shared[face]
    return t_out, n_out, hit[tie].astype(np.int64)


def resolve_ties(
    rays: NDArray[np.float32],
    ray_ids: NDArray[np.int64],
    face: NDArray[np.int64],
    triangles: Triangles,
) -> NDArray[np.int64]:
    """The triangle each ray hits first, whatever the instruction set that cast it.

    The candidates of a ray are the faces given for it and every face that shares a point
    with them (so the triangle across an edge or around a vertex is one, even when Embree
    found only its neighbour). In float64 (:func:`moller_trumbore`), a candidate holds the
    hit when its barycentrics are all >= 0 (a closed triangle: both sides of an edge hold a
    hit on it). Of those, the nearest wins, ranges within :data:`TIE_REL` of it going to
    the lowest geometry, then primitive. A ray that no candidate holds takes the one it
    passes nearest (the largest smallest barycentric), then the lowest.

    Parameters
    ----------
    rays : (M, 6) float32
        The rays (the scene's frame).
    ray_ids, face : (H,) int64
        The faces each ray hit: ray ``ray_ids[h]`` (into ``rays``) hit face ``face[h]``
        (a row of :attr:`Triangles.faces`), as Embree's first hit and all its hits
        (``list_intersections``) say.
    triangles : Triangles

    Returns
    -------
    face : (M,) int64
        The winner of each ray (a row of :attr:`Triangles.faces`); -1 for a ray without a
        candidate in front of it.
    """
    out = np.full(len(rays), -1, np.int64)
    if len(ray_ids) == 0:
        return out
    k, near = triangles.around(face)
    ray_ids = np.concatenate([ray_ids, ray_ids[k]])
    face = np.concatenate([face, near])
    corners = triangles.faces[face]
    r = np.asarray(rays[ray_ids], dtype=np.float64)
    t, u, v, *_ = moller_trumbore(
        r[:, :3], r[:, 3:], *(triangles.vertices_m[corners[:, j]] for j in range(3))
    )
    valid = (t >= 0.0) & (t < np.inf)
    with np.errstate(invalid="ignore"):
        slack = np.where(valid, np.minimum(np.minimum(u, v), 1.0 - u - v), -np.inf)
    inside = valid & (slack >= 0.0)
    t = np.where(valid, t, np.inf)
    holds = np.zeros(len(rays), np.bool_)
    holds[ray_ids[inside]] = True
    nearest = np.full(len(rays), np.inf)
    np.minimum.at(nearest, ray_ids[inside], t[inside])
    best = np.where(holds[ray_ids], inside & (t <= nearest[ray_ids] * (1.0 + TIE_REL)), valid)
    # per ray: the best first; a ray no candidate holds: the largest slack; then the face
    rank = np.where(holds[ray_ids], 0.0, -slack)
    order = np.lexsort((face, rank, ~best, ray_ids))
    first = order[np.r_[True, ray_ids[order][1:] != ray_ids[order][:-1]]]
    won = first[best[first]]
    out[ray_ids[won]] = face[won]
    return out


#: The refinement step: :func:`refine_hits` or its kernel.
RefineHits = Callable[
    [NDArray[np.float32], NDArray[np.float32], NDArray[np.uint32], NDArray[np.uint32],
     NDArray[np.float32], Triangles],
    tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64]],
]  # fmt: skip


@dataclass
class RefinedCast:
    """The first hit of N rays, refined.

    Attributes
    ----------
    t : (N,) float32
        Range in units of the direction (m for a unit one); inf for a miss.
    geometry : (N,) int32
        The geometry id (insertion order); -1 for a miss.
    primitive : (N,) int32
        The triangle within it; -1 for a miss.
    normal : (N, 3) float32
        The triangle's unit normal as wound; zero for a miss.
    """

    t: NDArray[np.float32]
    geometry: NDArray[np.int32]
    primitive: NDArray[np.int32]
    normal: NDArray[np.float32]


class RefinedScene:
    """One Open3D ``RaycastingScene`` whose hits are refined (see the module docstring).

    Parameters
    ----------
    o3d : module
        Open3D (:func:`simulator.world.raycast.import_open3d`).
    vertices_m : sequence of (V_g, 3) float
        Each geometry's vertices in the scene's frame (m): cast to float32 for Embree.
    faces : sequence of (F_g, 3) int
        Each geometry's faces: cast to uint32.
    refine : RefineHits, optional
        The refinement step (default the specification, :func:`refine_hits`).
    """

    def __init__(
        self,
        o3d: Any,
        vertices_m: Sequence[NDArray[Any]],
        faces: Sequence[NDArray[Any]],
        refine: RefineHits | None = None,
    ) -> None:
        self._o3d = o3d
        self.refine: RefineHits = refine_hits if refine is None else refine
        self.scene = o3d.t.geometry.RaycastingScene()
        kept_v, kept_f = [], []
        for g, (v, f) in enumerate(zip(vertices_m, faces, strict=True)):
            v32 = np.ascontiguousarray(v, dtype=np.float32)
            f32 = np.ascontiguousarray(f, dtype=np.uint32)
            # from_numpy shares the arrays; Open3D copies them into Embree's buffers.
            got = self.scene.add_triangles(
                o3d.core.Tensor.from_numpy(v32), o3d.core.Tensor.from_numpy(f32)
            )
            if got != g:
                raise RuntimeError(f"Open3D numbered geometry {g} as {got}")
            kept_v.append(v32)
            kept_f.append(f32)
        self.triangles = Triangles.pack(kept_v, kept_f)

    def cast(self, rays: NDArray[np.float32], threads: int = 0) -> RefinedCast:
        """The refined first hit of each ray.

        Parameters
        ----------
        rays : (N, 6) float32
            Open3D's layout, in the scene's frame.
        threads : int
            Threads Open3D casts on (0: every core).
        """
        rays = np.ascontiguousarray(rays, dtype=np.float32)
        res = self.scene.cast_rays(self._o3d.core.Tensor.from_numpy(rays), nthreads=threads)
        geometry = res["geometry_ids"].numpy()
        primitive = res["primitive_ids"].numpy()
        t, normal, ties = self.refine(
            rays, res["t_hit"].numpy(), geometry, primitive,
            res["primitive_normals"].numpy(), self.triangles,
        )  # fmt: skip
        geometry = geometry.view(np.int32)  # INVALID_ID read as int32 is -1
        primitive = primitive.view(np.int32)
        if len(ties):
            geometry, primitive = geometry.copy(), primitive.copy()
            tied = rays[ties]
            found = self.scene.list_intersections(
                self._o3d.core.Tensor.from_numpy(np.ascontiguousarray(tied)), nthreads=threads
            )
            start = self.triangles.face_start
            listed = start[found["geometry_ids"].numpy().astype(np.int64)]
            listed += found["primitive_ids"].numpy().astype(np.int64)
            embree = start[geometry[ties].astype(np.int64)] + primitive[ties]
            face = resolve_ties(
                tied,
                np.concatenate([np.arange(len(ties)), found["ray_ids"].numpy().astype(np.int64)]),
                np.concatenate([embree, listed]),
                self.triangles,
            )
            won = face >= 0  # a ray without a candidate in front keeps Embree's answer
            at = ties[won]
            g, p = self.triangles.geometry_of(face[won])
            geometry[at], primitive[at] = g, p
            t2, n2, _ = self.refine(
                rays[at], t[at], geometry[at].view(np.uint32), primitive[at].view(np.uint32),
                normal[at], self.triangles,
            )  # fmt: skip
            t[at], normal[at] = t2, n2
        return RefinedCast(t, geometry, primitive, normal)
