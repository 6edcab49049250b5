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
float32. Two kinds of hit may be ties whose winner Embree's traversal and rounding decide:

- a hit on a face that coplanar faces of other geometries overlap
  (:attr:`Triangles.partner_faces`, built once with the scene): the hit is tested in
  float64 against each of those faces, in the refinement itself;
- a hit on an edge (within :func:`edge_band`, float64's own rounding), or whose range
  cannot be recomputed: for those few rays every face sharing a point with Embree's,
  every face ``list_intersections`` finds near the hit, and their coplanar partners are
  tested in float64 (:func:`resolve_ties`).

Where Embree's float32 test put the hit on the wrong side of an edge, float64 puts it
outside the face Embree reported: a tie, decided among the faces around. Where float64
puts it inside that face, farther than the band from its edges, no face across an edge
can also hold it. So a band of float64 rounding is enough; Embree's much larger float32
error does not need to be bounded.

Either way the nearest face that holds the hit (closed triangle) wins, ranges within
:data:`TIE_REL` of it going to the lowest (geometry, primitive). :class:`RefinedScene`
does all of it for one ``RaycastingScene``.

What stays Embree's: whether a ray hits at all (a ray grazing a silhouette edge, or
through the crack Embree's non-watertight test leaves at an edge, can hit for one
instruction set and miss for another), and a tie between two faces that cross or nearly
touch without being coplanar or sharing a point.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "EDGE_ULPS",
    "TIE_REL",
    "RefineHits",
    "RefinedScene",
    "Triangles",
    "coplanar_partners",
    "edge_band",
    "face_hits",
    "moller_trumbore",
    "refine_hits",
    "resolve_ties",
    "vertex_points",
]

#: A float64 barycentric is trusted to this many units of float64 roundoff (2^-53),
#: scaled by the ray and the triangle (:func:`edge_band`): a hit closer to an edge than
#: that may be held by the neighbour across it too.
EDGE_ULPS = 1024.0
#: Ranges within this relative difference of the nearest are a tie (the lowest geometry,
#: then primitive, wins).
TIE_REL = 1e-9
#: Of the faces ``list_intersections`` gives for a tie, those within this relative range
#: behind the first hit are candidates (the rest cannot win).
LISTED_REL = 1e-3
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
    vertices_m : (V, 3) float64
        The float32 vertices Embree holds, promoted (local frame, m), geometry after
        geometry.
    faces : (F, 3) int32
        Vertex rows of ``vertices_m`` (each geometry's faces in order, so that the order
        of faces is the order of (geometry, primitive)).
    face_start : (G + 1,) int64
        Geometry ``g``'s faces are ``faces[face_start[g]:face_start[g + 1]]``: primitive
        ``p`` of geometry ``g`` is face ``face_start[g] + p``.
    partner_start : (F + 1,) int64
        The coplanar partners of face ``f`` are
        ``partner_faces[partner_start[f]:partner_start[f + 1]]``.
    partner_faces : (Q,) int32
        The faces of other geometries in each face's plane whose boxes overlap it
        (:func:`coplanar_partners`), increasing, face by face.
    """

    vertices_m: NDArray[np.float64]
    faces: NDArray[np.int32]
    face_start: NDArray[np.int64]
    partner_start: NDArray[np.int64]
    partner_faces: NDArray[np.int32]

    @classmethod
    def pack(
        cls, vertices_m: Sequence[NDArray[np.float32]], faces: Sequence[NDArray[np.uint32]]
    ) -> Triangles:
        """The triangles of geometries ``0..G-1``: each one's (V_g, 3) float32 vertices and
        (F_g, 3) uint32 faces as given to ``add_triangles``."""
        v_start = np.cumsum([0] + [len(v) for v in vertices_m]).astype(np.int64)
        f_start = np.cumsum([0] + [len(f) for f in faces]).astype(np.int64)
        vertices = np.concatenate([np.zeros((0, 3), np.float32), *vertices_m])
        corners = np.zeros((int(f_start[-1]), 3), np.int32)
        for g, f in enumerate(faces):
            corners[f_start[g] : f_start[g + 1]] = np.asarray(f, np.int64) + v_start[g]
        vertices = vertices.astype(np.float64)
        partner_start, partner_faces = coplanar_partners(vertices, corners, f_start)
        return cls(vertices, corners, f_start, partner_start, partner_faces)

    @cached_property
    def rings(self) -> tuple[NDArray[np.int32], NDArray[np.int64], NDArray[np.int32]]:
        """The faces at each point, built on first use (the first tie: most scans have
        none). Equal vertices (of any geometry) are one point, so that the faces around a
        point are found across seams and between objects.

        Returns
        -------
        point : (V,) int32
            The point of each vertex.
        ring_start : (P + 1,) int64
        ring_faces : (3 F,) int32
            The faces at point ``c`` are ``ring_faces[ring_start[c]:ring_start[c + 1]]``.
        """
        point, points = vertex_points(self.vertices_m)
        corners = point[self.faces].ravel()
        # the corners by point, then by face: one sort of (point, corner) packed in an int64
        packed = (corners.astype(np.int64) << 32) | np.arange(corners.size)
        packed.sort()
        ring_faces = ((packed & 0xFFFFFFFF) // 3).astype(np.int32)
        count = np.bincount(corners, minlength=points)
        return point, np.concatenate([[0], np.cumsum(count)]).astype(np.int64), ring_faces

    @property
    def shared(self) -> NDArray[np.bool_]:
        """(F,) bool: whether a coplanar face of another geometry overlaps the face."""
        return np.diff(self.partner_start) > 0

    @cached_property
    def face_geometry(self) -> NDArray[np.int32]:
        """(F,) int32: the geometry of each face, built on first use."""
        counts = np.diff(self.face_start)
        return np.repeat(np.arange(len(counts), dtype=np.int32), counts)

    def geometry_of(self, face: NDArray[np.int64]) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
        """The (geometry, primitive) ids (int32) of faces ``face`` (K,) (-1, -1 for -1).

        A look-up of :attr:`face_geometry` (a binary search of ``face_start`` a ray took
        four times as long: a cast's rays are most of the refinement's own time)."""
        face = np.asarray(face, np.int64)
        if len(self.faces) == 0:  # (no face: every ray missed)
            return np.full(len(face), -1, np.int32), np.full(len(face), -1, np.int32)
        g = self.face_geometry.take(face, mode="clip")  # (-1, a miss: set below)
        p = (face - self.face_start.take(g)).astype(np.int32)
        miss = face < 0
        g[miss] = -1
        p[miss] = -1
        return g, p

    def around(self, face: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The faces that share a point with faces ``face`` (K,), themselves included:
        pairs (k, neighbour) of (R,) int64 each."""
        point, ring_start, ring_faces = self.rings
        return _expand(ring_start, ring_faces, point[self.faces[face]].ravel(), 3)

    def partners(self, face: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The coplanar partners of faces ``face`` (K,): pairs (k, partner) of (R,) int64."""
        return _expand(self.partner_start, self.partner_faces, face, 1)

    @cached_property
    def partner_boxes(self) -> tuple[NDArray[np.int32], NDArray[np.float32]]:
        """The partners as the refinement kernel reads them, built on first use: each
        face's (:attr:`partner_faces`' own rows ``partner_start[f]`` to ``partner_start[f +
        1]``) by the lowest x of their boxes, and those boxes.

        Returns
        -------
        partner_faces : (Q,) int32
            :attr:`partner_faces`, each face's in that order.
        boxes : (Q, 6) float32
            Each one's bounding box ``(x, y, z lowest, x, y, z highest)`` (m), widened by
            :data:`OVERLAP_MARGIN_M` and rounded outwards to float32: where a ray cannot
            pass through a partner's box, the partner cannot hold its hit, and the kernel
            skips its float64 test, and the rest of the face's once their boxes begin
            beyond the ray's reach in x (the same faces win: the boxes only spare work,
            and are read one after the other instead of each face's vertices where they
            lie).
        """
        corners = self.vertices_m[self.faces[self.partner_faces]]  # (Q, 3, 3)
        lo = (corners.min(axis=1) - OVERLAP_MARGIN_M).astype(np.float32)
        hi = (corners.max(axis=1) + OVERLAP_MARGIN_M).astype(np.float32)
        lo = np.nextafter(lo, np.float32(-np.inf))  # (outwards whatever float32 rounded to)
        hi = np.nextafter(hi, np.float32(np.inf))
        owner = np.repeat(np.arange(len(self.faces)), np.diff(self.partner_start))
        by_x = np.lexsort((lo[:, 0], owner))
        boxes = np.concatenate([lo, hi], axis=1)[by_x]
        return self.partner_faces[by_x], np.ascontiguousarray(boxes.reshape(-1, 6))

    def kernel_args(self) -> tuple[NDArray[Any], ...]:
        """The arrays a kernel takes: vertices, faces, face starts, partner starts, and
        the partners and their boxes of :attr:`partner_boxes`."""
        return (
            self.vertices_m, self.faces, self.face_start, self.partner_start,
            *self.partner_boxes,
        )  # fmt: skip


def vertex_points(vertices_m: NDArray[np.float64]) -> tuple[NDArray[np.int32], int]:
    """Equal vertices as one point: the point of each vertex, and the number of points.

    Vertices are compared by the bits of their float32 values (``+ 0.0`` makes -0.0 the
    same point as 0.0). The rows are grouped by a 64-bit key of their three words, one
    integer sort (a sort of the 12-byte rows themselves compares them byte by byte: on a
    reconstructed street's 3 M vertices 1.2-1.5 CPU s against 0.3-0.4); every row is then
    checked against its group's first, and should two different rows share a key, the
    rows' own sort decides. The points are numbered in the order of their keys: which
    faces meet at a point does not depend on that numbering.

    Parameters
    ----------
    vertices_m : (V, 3) float64

    Returns
    -------
    point : (V,) int32
    points : int
    """
    rows = np.ascontiguousarray(vertices_m.astype(np.float32) + np.float32(0))
    if len(rows) == 0:
        return np.zeros(0, np.int32), 0
    bits = rows.view(np.uint32)
    key = (bits[:, 0].astype(np.uint64) << np.uint64(32)) | bits[:, 1]
    key ^= bits[:, 2].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    order = np.argsort(key)
    ordered = key[order]
    first_of_group = np.ones(len(ordered), np.bool_)
    np.not_equal(ordered[1:], ordered[:-1], out=first_of_group[1:])
    point = np.zeros(len(ordered), np.int32)
    point[order] = np.cumsum(first_of_group, dtype=np.int32) - 1
    first = order[first_of_group]
    if (bits == bits[first[point]]).all():
        return point, len(first)
    unique, point = np.unique(rows.view(np.dtype((np.void, 12))).ravel(), return_inverse=True)
    return point.ravel().astype(np.int32), len(unique)


def _expand(
    start: NDArray[np.int64], items: NDArray[np.integer], keys: NDArray[np.integer], per: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Pairs (k, item) of the CSR table ``start``/``items`` for keys ``keys`` (K * per,),
    ``per`` keys to each k."""
    keys = np.asarray(keys, np.int64)
    first, count = start[keys], start[keys + 1] - start[keys]
    k = np.repeat(np.repeat(np.arange(len(keys) // per), per), count)
    at = np.repeat(first - np.cumsum(count) + count, count) + np.arange(count.sum())
    return k.astype(np.int64), items[at].astype(np.int64)


def coplanar_partners(
    vertices_m: NDArray[np.float64], faces: NDArray[np.integer], face_start: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int32]]:
    """Each face's coplanar partners: the faces of other geometries in its plane (unit
    normal and offset equal after rounding to :data:`PLANE_NORMAL_STEP` and
    :data:`PLANE_OFFSET_STEP_M`, either orientation) whose bounding boxes overlap its own
    (:data:`OVERLAP_MARGIN_M`). A ray hitting such a face may hit both at one range.

    Every operation is elementwise (no reduction whose order a SIMD width could change),
    so the table is the same on any CPU.

    Parameters
    ----------
    vertices_m : (V, 3) float64
    faces : (F, 3) int
    face_start : (G + 1,) int64
        Each geometry's first face (see :class:`Triangles`).

    Returns
    -------
    partner_start : (F + 1,) int64
    partner_faces : (Q,) int32
        Face ``f``'s partners are ``partner_faces[partner_start[f]:partner_start[f + 1]]``,
        increasing.
    """
    n = len(faces)
    none = (np.zeros(n + 1, np.int64), np.zeros(0, np.int32))
    if len(face_start) < 3 or n == 0:  # one geometry: no other to share with
        return none
    key = np.zeros(n, np.int64)
    columns = [np.ascontiguousarray(vertices_m[:, k]) for k in range(3)]
    for a in range(0, n, 1 << 16):  # blocks keep the temporaries small (and in cache)
        key[a : a + (1 << 16)] = _plane_key(columns, faces[a : a + (1 << 16)])
    del columns
    geometry = np.repeat(np.arange(len(face_start) - 1, dtype=np.int32), np.diff(face_start))
    # faces by plane, increasing within one: one sort of (key's top 40 bits, face) packed
    # in an int64 (two planes whose keys agree there are one more often: more candidates)
    if n < 1 << 24:
        key >>= 24
        key <<= 24
        key |= np.arange(n)
        key.sort()
        order = (key & 0xFFFFFF).astype(np.int32)
        key >>= 24
    else:
        order = np.argsort(key, kind="stable")
        key = key[order]
    start = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    g_sorted = geometry[order]
    multi = np.minimum.reduceat(g_sorted, start) != np.maximum.reduceat(g_sorted, start)
    del key, g_sorted
    size = np.diff(np.r_[start, n])
    cand = order[np.repeat(multi, size)]  # faces of planes of >= 2 geometries, by plane
    if len(cand) == 0:
        return none
    plane = np.repeat(np.cumsum(multi) - 1, size)[np.repeat(multi, size)]
    del order
    corners = vertices_m[faces[cand]]  # (C, 3, 3)
    lo = corners.min(axis=1) - OVERLAP_MARGIN_M
    hi = corners.max(axis=1) + OVERLAP_MARGIN_M
    del corners
    # Sweep along x within each plane: faces by (plane, x from, in mm floored); face j
    # after face i can overlap it only while j's start is at most i's end (in mm, ceiled).
    x0 = np.floor(lo[:, 0] * 1e3).astype(np.int64)
    x1 = np.ceil(hi[:, 0] * 1e3).astype(np.int64)
    x1 -= x0.min()
    x0 -= x0.min()
    by = np.lexsort((x0, plane))
    cand, lo, hi, plane, x0, x1 = cand[by], lo[by], hi[by], plane[by], x0[by], x1[by]
    start_key = (plane << 40) | x0
    end = np.searchsorted(start_key, (plane << 40) | x1, side="right")
    count = np.maximum(end - np.arange(len(cand)) - 1, 0)
    i = np.repeat(np.arange(len(cand)), count)
    j = i + 1 + np.arange(len(i)) - np.repeat(np.cumsum(count) - count, count)
    keep = (geometry[cand[i]] != geometry[cand[j]]) & ((lo[i] <= hi[j]) & (hi[i] >= lo[j])).all(
        axis=1
    )
    i, j = cand[i[keep]], cand[j[keep]]
    if len(i) == 0:
        return none
    face, partner = np.r_[i, j], np.r_[j, i]
    by = np.lexsort((partner, face))
    partner_start = np.concatenate([[0], np.cumsum(np.bincount(face, minlength=n))])
    return partner_start.astype(np.int64), partner[by].astype(np.int32)


def _plane_key(
    columns: Sequence[NDArray[np.float64]], faces: NDArray[np.integer]
) -> NDArray[np.int64]:
    """(F,) int64: a hash of each face's rounded plane (see :func:`coplanar_partners`);
    ``columns`` are the vertices' x, y, z, each (V,) float64 contiguous."""
    vx, vy, vz = columns
    f0, f1, f2 = faces[:, 0], faces[:, 1], faces[:, 2]
    x0, y0, z0 = vx[f0], vy[f0], vz[f0]
    ax, ay, az = vx[f1] - x0, vy[f1] - y0, vz[f1] - z0
    bx, by, bz = vx[f2] - x0, vy[f2] - y0, vz[f2] - z0
    n = [ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx]
    length = np.sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2])
    length[length <= 0] = 1.0
    for c in n:
        c /= length
    # orientation: the first component that is not ~0 is > 0
    lead = np.where(np.abs(n[0]) > 1e-12, n[0], np.where(np.abs(n[1]) > 1e-12, n[1], n[2]))
    flip = lead < 0
    for c in n:
        np.negative(c, out=c, where=flip)
    offset = n[0] * x0 + n[1] * y0 + n[2] * z0
    # one int64 a plane: a hash of the rounded values (a collision only adds candidates)
    key = np.round(offset / PLANE_OFFSET_STEP_M).astype(np.int64)
    for c in n:
        key = key * np.int64(1_000_003) + np.round(c / PLANE_NORMAL_STEP).astype(np.int64)
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


def edge_band(
    origin: NDArray[np.float64],
    direction: NDArray[np.float64],
    v0: NDArray[np.float64],
    v1: NDArray[np.float64],
    v2: NDArray[np.float64],
    det: NDArray[np.float64],
) -> NDArray[np.float64]:
    """(N,) float64: how far (barycentric) :func:`moller_trumbore`'s float64 rounding may
    put a hit on the wrong side of an edge: :data:`EDGE_ULPS` units of float64 roundoff
    of its products, ``|d| (|o - v0| + |e1| + |e2|) (|e1| + |e2|)`` (1-norms), over
    ``|det|``. It grows with the range over the triangle's size, and as the ray grazes
    the plane.

    Parameters
    ----------
    origin, direction : (N, 3) float64
    v0, v1, v2 : (N, 3) float64
    det : (N,) float64
        :func:`moller_trumbore`'s determinant.
    """
    s = np.abs(origin[:, 0] - v0[:, 0]) + np.abs(origin[:, 1] - v0[:, 1])
    s = s + np.abs(origin[:, 2] - v0[:, 2])
    e1 = np.abs(v1[:, 0] - v0[:, 0]) + np.abs(v1[:, 1] - v0[:, 1]) + np.abs(v1[:, 2] - v0[:, 2])
    e2 = np.abs(v2[:, 0] - v0[:, 0]) + np.abs(v2[:, 1] - v0[:, 1]) + np.abs(v2[:, 2] - v0[:, 2])
    d = np.abs(direction[:, 0]) + np.abs(direction[:, 1]) + np.abs(direction[:, 2])
    with np.errstate(divide="ignore", invalid="ignore"):
        return (EDGE_ULPS * 2.0**-53) * (d * ((s + e1 + e2) * (e1 + e2))) / np.abs(det)


def _on_faces(
    rays: NDArray[np.float64], face: NDArray[np.int64], triangles: Triangles
) -> tuple[NDArray[np.float64], ...]:
    """:func:`moller_trumbore` of rays (K, 6) float64 against faces (K,), then their
    corners v0, v1, v2 (K, 3) each."""
    corners = triangles.faces[face]
    v = [triangles.vertices_m[corners[:, k]] for k in range(3)]
    return (*moller_trumbore(rays[:, :3], rays[:, 3:], *v), *v)


def face_hits(
    rays: NDArray[np.float32], face: NDArray[np.int64], triangles: Triangles
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """The range (K,) float32 and unit normal (K, 3) float32 of rays (K, 6) float32 on
    faces (K,) that hold them (as :func:`refine_hits` rounds them)."""
    t, _, _, nx, ny, nz, *_ = _on_faces(np.asarray(rays, np.float64), face, triangles)
    length = np.sqrt(nx * nx + ny * ny + nz * nz)
    normal = np.stack([nx / length, ny / length, nz / length], axis=1).astype(np.float32)
    return t.astype(np.float32), normal


def refine_hits(
    rays: NDArray[np.float32],
    t_hit: NDArray[np.float32],
    geometry: NDArray[np.uint32],
    primitive: NDArray[np.uint32],
    normal: NDArray[np.float32],
    triangles: Triangles,
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64], NDArray[np.int64]]:
    """Embree's hits with their range and normal recomputed in float64, and the coplanar
    ties decided (the specification; the kernel is
    :func:`simulator.kernels.refine.refine_hits`).

    A hit away from its face's edges (farther than :func:`edge_band`) is tested against
    the face's coplanar partners (:attr:`Triangles.partner_faces`): of the face and the
    partners that hold it (closed triangles), the nearest wins, then, within
    :data:`TIE_REL` of it, the lowest face.

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
        The range to the face, in units of the direction (m for a unit one), recomputed;
        Embree's for a miss, a ray parallel to the plane or a range that is not finite
        and >= 0.
    normal : (N, 3) float32
        The face's unit normal ``(v1 - v0) x (v2 - v0)`` (Embree's winding), recomputed;
        Embree's where the range is kept or the face is degenerate.
    face : (N,) int64
        The face hit (a row of :attr:`Triangles.faces`); -1 for a miss.
    ties : (K,) int64
        Increasing, the hits that may be ties with a neighbour (within :func:`edge_band` of
        an edge, or the range not recomputed): the rays :func:`resolve_ties` decides
        (``face`` is Embree's for them).
    """
    t_out = np.array(t_hit, dtype=np.float32)
    n_out = np.array(normal, dtype=np.float32).reshape(-1, 3)
    face_out = np.full(len(t_out), -1, np.int64)
    hit = np.flatnonzero(np.asarray(geometry, np.int64) != INVALID_ID)
    if len(hit) == 0:
        return t_out, n_out, face_out, np.zeros(0, np.int64)
    face = triangles.face_start[np.asarray(geometry, np.int64)[hit]]
    face += np.asarray(primitive, np.int64)[hit]
    face_out[hit] = face
    r = np.asarray(rays[hit], dtype=np.float64)
    t, u, v, nx, ny, nz, det, v0, v1, v2 = _on_faces(r, face, triangles)
    band = edge_band(r[:, :3], r[:, 3:], v0, v1, v2, det)
    del v0, v1, v2
    length = np.sqrt(nx * nx + ny * ny + nz * nz)
    ok = (det != 0.0) & (t >= 0.0) & (t < np.inf)
    unit = ok & (length > 0.0)
    t_out[hit[ok]] = t[ok].astype(np.float32)
    for k, c in enumerate((nx, ny, nz)):
        n_out[hit[unit], k] = (c[unit] / length[unit]).astype(np.float32)
    with np.errstate(invalid="ignore"):  # (a nan band is a tie)
        tie = ~(ok & (u >= band) & (v >= band) & ((1.0 - u - v) >= band))
    # the coplanar partners of the faces hit away from their edges
    away = np.flatnonzero(~tie)
    k, partner = triangles.partners(face[away])
    if len(k):
        k = away[k]
        tq, uq, vq, qx, qy, qz, *_ = _on_faces(r[k], partner, triangles)
        with np.errstate(invalid="ignore"):
            holds = (tq >= 0.0) & (tq < np.inf) & (uq >= 0.0) & (vq >= 0.0)
            holds &= (1.0 - uq - vq) >= 0.0
        nearest = t.copy()
        np.minimum.at(nearest, k[holds], tq[holds])
        limit = nearest * (1.0 + TIE_REL)
        best = np.where(t <= limit, face, np.iinfo(np.int64).max)
        eligible = holds & (tq <= limit[k])
        np.minimum.at(best, k[eligible], partner[eligible])
        won = np.flatnonzero(eligible & (partner == best[k]))  # one row a hit at most
        at = hit[k[won]]
        t_out[at] = tq[won].astype(np.float32)
        length = np.sqrt(qx[won] * qx[won] + qy[won] * qy[won] + qz[won] * qz[won])
        for j, c in enumerate((qx[won], qy[won], qz[won])):
            n_out[at, j] = (c / length).astype(np.float32)
        face_out[at] = partner[won]
    return t_out, n_out, face_out, hit[tie].astype(np.int64)


def resolve_ties(
    rays: NDArray[np.float32],
    ray_ids: NDArray[np.int64],
    face: NDArray[np.int64],
    triangles: Triangles,
) -> NDArray[np.int64]:
    """The triangle each ray hits first, whatever the instruction set that cast it.

    The candidates of a ray are the faces given for it, every face that shares a point
    with them (so the triangle across an edge or around a vertex is one, even when Embree
    found only its neighbour), and their coplanar partners. In float64
    (:func:`moller_trumbore`), a candidate holds the hit when its barycentrics are all
    >= 0 (a closed triangle: both sides of an edge hold a hit on it). Of those, the
    nearest wins, ranges within :data:`TIE_REL` of it going to the lowest geometry, then
    primitive. A ray that no candidate holds takes the one it passes nearest (the largest
    smallest barycentric), then the lowest.

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
    j, partner = triangles.partners(face)
    ray_ids = np.concatenate([ray_ids, ray_ids[k], ray_ids[j]])
    face = np.concatenate([face, near, partner])
    r = np.asarray(rays[ray_ids], dtype=np.float64)
    t, u, v, *_ = _on_faces(r, face, triangles)
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
    tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64], NDArray[np.int64]],
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
        self._given: tuple[list[NDArray[np.float32]], list[NDArray[np.uint32]]] | None = (
            kept_v, kept_f
        )  # fmt: skip

    @cached_property
    def triangles(self) -> Triangles:
        """The scene's triangles, packed on first use (the first cast: a scene built and
        not cast does not pay for the coplanar table)."""
        assert self._given is not None
        triangles = Triangles.pack(*self._given)
        self._given = None
        return triangles

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
        triangles = self.triangles  # packed before Embree's first cast builds its BVH
        res = self.scene.cast_rays(self._o3d.core.Tensor.from_numpy(rays), nthreads=threads)
        found_g, found_p = res["geometry_ids"].numpy(), res["primitive_ids"].numpy()
        t, normal, face, ties = self.refine(
            rays, res["t_hit"].numpy(), found_g, found_p, res["primitive_normals"].numpy(),
            triangles,
        )  # fmt: skip
        del res
        if len(ties):
            tied = rays[ties]
            found = self.scene.list_intersections(
                self._o3d.core.Tensor.from_numpy(np.ascontiguousarray(tied)), nthreads=threads
            )
            ray_ids = found["ray_ids"].numpy().astype(np.int64)
            # the faces it lists behind the first hit cannot win: left out
            near = found["t_hit"].numpy() <= t[ties][ray_ids] * (1.0 + LISTED_REL)
            listed = self.triangles.face_start[found["geometry_ids"].numpy()[near].astype(np.int64)]
            listed += found["primitive_ids"].numpy()[near].astype(np.int64)
            won = resolve_ties(
                tied,
                np.concatenate([np.arange(len(ties)), ray_ids[near]]),
                np.concatenate([face[ties], listed]),
                self.triangles,
            )
            ok = won >= 0  # a ray without a candidate in front keeps Embree's answer
            at = ties[ok]
            face[at] = won[ok]
            t[at], normal[at] = face_hits(rays[at], face[at], self.triangles)
        # Embree's ids (INVALID_ID reads -1 as int32: a miss), looked up again only where
        # the refinement moved the hit to another face (a coplanar partner, a tie): 0.4 ms
        # a cast of 150,000 probes of the bench scene, against 0.6 ms for a look-up of
        # every hit's face.
        geometry, primitive = found_g.view(np.int32), found_p.view(np.int32)
        moved = np.flatnonzero(
            (face != triangles.face_start.take(geometry) + primitive) & (face >= 0)
        )
        if len(moved):
            geometry[moved], primitive[moved] = triangles.geometry_of(face[moved])
        return RefinedCast(t, geometry, primitive, normal)
