"""The triangles of one ray-casting scene exactly as Embree holds them, and what the
refinement of its hits (:mod:`simulator.world.refine`) looks up in them: each face's
geometry, the faces that share a point, and each face's coplanar partners in other
geometries (with their boxes, in the order the kernel reads them).

Built once a scene; every operation is elementwise or an integer sort, so the tables are
the same on any CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "OVERLAP_MARGIN_M",
    "PLANE_NORMAL_STEP",
    "PLANE_OFFSET_STEP_M",
    "Triangles",
    "coplanar_partners",
    "vertex_points",
]
#: Coplanar faces: unit normals equal to this (after rounding) ...
PLANE_NORMAL_STEP = 1e-6
#: ... and plane offsets equal to this (m).
PLANE_OFFSET_STEP_M = 1e-5
#: Margin (m) of the bounding-box overlap test of coplanar faces.
OVERLAP_MARGIN_M = 1e-5


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

    def geometry_of(self, face: NDArray[np.int64]) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
        """The (geometry, primitive) ids (int32) of faces ``face`` (K,) (-1, -1 for -1):
        for the few hits the refinement moved to another face (the others keep Embree's
        ids)."""
        g = np.searchsorted(self.face_start, face, side="right") - 1
        ok = face >= 0
        p = face - self.face_start[np.maximum(g, 0)]
        return np.where(ok, g, -1).astype(np.int32), np.where(ok, p, -1).astype(np.int32)

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
