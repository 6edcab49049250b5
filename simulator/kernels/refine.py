"""Embree's hits refined in float64, in parallel over the rays (the specification:
:func:`simulator.world.refine.refine_hits`).

The same operations in the same order as the specification's
:func:`~simulator.world.refine.moller_trumbore` and
:func:`~simulator.world.refine.edge_band`, without ``fastmath`` (no contraction into
fused multiply-adds, no reassociation), so both round the same way on any CPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..world.refine import EDGE_ULPS, TIE_REL
from ..world.triangles import Triangles

__all__ = ["refine_hits"]


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _moller_trumbore(o, d, vertices, faces, f):  # type: ignore[no-untyped-def]
    """Ray (origin ``o``, direction ``d``, float64 3-tuples) against face ``f``: t, u, v,
    the normal's components, det, and the edge band's numerator (see the specification)."""
    a, b, c = faces[f, 0], faces[f, 1], faces[f, 2]
    v0x, v0y, v0z = vertices[a, 0], vertices[a, 1], vertices[a, 2]
    e1x, e1y, e1z = vertices[b, 0] - v0x, vertices[b, 1] - v0y, vertices[b, 2] - v0z
    e2x, e2y, e2z = vertices[c, 0] - v0x, vertices[c, 1] - v0y, vertices[c, 2] - v0z
    dx, dy, dz = d
    px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
    det = e1x * px + e1y * py + e1z * pz
    sx, sy, sz = o[0] - v0x, o[1] - v0y, o[2] - v0z
    qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
    t = (e2x * qx + e2y * qy + e2z * qz) / det
    u = (sx * px + sy * py + sz * pz) / det
    v = (dx * qx + dy * qy + dz * qz) / det
    nx, ny, nz = e1y * e2z - e1z * e2y, e1z * e2x - e1x * e2z, e1x * e2y - e1y * e2x
    s1 = abs(sx) + abs(sy) + abs(sz)
    l1 = abs(e1x) + abs(e1y) + abs(e1z)
    l2 = abs(e2x) + abs(e2y) + abs(e2z)
    ld = abs(dx) + abs(dy) + abs(dz)
    spread = ld * ((s1 + l1 + l2) * (l1 + l2))
    return t, u, v, nx, ny, nz, det, spread


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _held_at(o, d, vertices, faces, f):  # type: ignore[no-untyped-def]
    """The range at which face ``f`` holds the ray (``o``, ``d``) as :func:`_moller_trumbore`
    computes it and the specification tests it (in front, barycentrics >= 0: a closed
    triangle); -1.0 where it does not hold it.

    The same operations as :func:`_moller_trumbore`, but ``u`` first, and ``v`` and ``t``
    only while the face can still hold the hit: most coplanar partners do not (a hit on
    the street's ground has 15 on average), and ``u < 0`` (or NaN) already says so
    whatever ``v`` and ``t`` are."""
    a, b, c = faces[f, 0], faces[f, 1], faces[f, 2]
    v0x, v0y, v0z = vertices[a, 0], vertices[a, 1], vertices[a, 2]
    e2x, e2y, e2z = vertices[c, 0] - v0x, vertices[c, 1] - v0y, vertices[c, 2] - v0z
    dx, dy, dz = d
    px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
    e1x, e1y, e1z = vertices[b, 0] - v0x, vertices[b, 1] - v0y, vertices[b, 2] - v0z
    det = e1x * px + e1y * py + e1z * pz
    sx, sy, sz = o[0] - v0x, o[1] - v0y, o[2] - v0z
    u = (sx * px + sy * py + sz * pz) / det
    if not u >= 0.0:
        return -1.0
    qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
    v = (dx * qx + dy * qy + dz * qz) / det
    if not (v >= 0.0 and (1.0 - u - v) >= 0.0):
        return -1.0
    t = (e2x * qx + e2y * qy + e2z * qz) / det
    return t if t >= 0.0 and t < np.inf else -1.0


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _may_hold(o, d, inv, reach, boxes, j):  # type: ignore[no-untyped-def]
    """Whether the ray (``o``, ``d``, ``inv`` the reciprocals of ``d``'s components)
    passes through ``boxes[j]`` (:attr:`simulator.world.triangles.Triangles.partner_boxes`)
    between ranges 0 and ``reach``: where it does not, the partner cannot hold its hit
    there. The box's margin (10 um) is far more than this test's rounding (about 1e-16 of
    the distances), so a partner that holds the hit is never skipped."""
    s0 = 0.0
    s1 = reach
    for k in range(3):
        lo = np.float64(boxes[j, k])
        hi = np.float64(boxes[j, k + 3])
        if abs(d[k]) < 1e-200:  # (parallel to the slab: in it or never)
            if o[k] < lo or o[k] > hi:
                return False
        else:
            a = (lo - o[k]) * inv[k]
            b = (hi - o[k]) * inv[k]
            if a > b:
                a, b = b, a
            s0 = max(s0, a)
            s1 = min(s1, b)
    return s0 <= s1


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _refine(rays, t_hit, geometry, primitive, normal, vertices, faces, face_start,
            partner_start, partner_faces, partner_boxes, band_scale, tie_rel, t_out, n_out,
            face_out, tie):  # type: ignore[no-untyped-def]  # fmt: skip
    """Refine hit ``i`` into ``t_out[i]``, ``n_out[i]``, ``face_out[i]``; ``tie[i]``:
    whether it may be a tie with a neighbour. (The constants are arguments: numba's cache
    would keep an imported one's old value.)

    A coplanar partner matters only where it holds the hit at most ``tie_rel`` beyond
    Embree's face (then it is nearer, or a tie): one whose box the ray does not pass
    through before that range (:func:`_may_hold`) is not tested, nor are those after the
    first whose box begins beyond the ray's reach in x (``partner_faces`` and
    ``partner_boxes``, :attr:`simulator.world.triangles.Triangles.partner_boxes`, are by
    their boxes' lowest x, face by face). Those held farther change nothing: the nearest
    and the faces within ``tie_rel`` of it are the same, and which is the lowest does not
    depend on the order they are met in."""
    invalid = np.int64(4294967295)  # INVALID_ID
    for i in prange(t_hit.shape[0]):
        t_out[i] = t_hit[i]
        n_out[i, 0] = normal[i, 0]
        n_out[i, 1] = normal[i, 1]
        n_out[i, 2] = normal[i, 2]
        face_out[i] = -1
        tie[i] = False
        g = np.int64(geometry[i])
        if g == invalid:
            continue
        f = face_start[g] + np.int64(primitive[i])
        face_out[i] = f
        o = (np.float64(rays[i, 0]), np.float64(rays[i, 1]), np.float64(rays[i, 2]))
        d = (np.float64(rays[i, 3]), np.float64(rays[i, 4]), np.float64(rays[i, 5]))
        t, u, v, nx, ny, nz, det, spread = _moller_trumbore(o, d, vertices, faces, f)
        if not (det != 0.0 and t >= 0.0 and t < np.inf):  # Embree's answer, a tie
            tie[i] = True
            continue
        t_out[i] = np.float32(t)
        length = np.sqrt(nx * nx + ny * ny + nz * nz)
        if length > 0.0:
            n_out[i, 0] = np.float32(nx / length)
            n_out[i, 1] = np.float32(ny / length)
            n_out[i, 2] = np.float32(nz / length)
        band = band_scale * spread / abs(det)
        if not (u >= band and v >= band and (1.0 - u - v) >= band):
            tie[i] = True
            continue
        first, last = partner_start[f], partner_start[f + 1]
        if first == last:
            continue
        # the coplanar partners: the nearest that holds the hit, then the lowest face
        inv = (1.0 / d[0], 1.0 / d[1], 1.0 / d[2])  # (inf where 0: not read)
        reach = t * (1.0 + tie_rel)  # (the limit below is at most this)
        x_reach = max(o[0], o[0] + reach * d[0])  # (the boxes' margin covers its rounding)
        nearest = t
        holders = 0
        held = np.int64(-1)  # the one partner that holds it, if only one does
        held_t = 0.0
        for j in range(first, last):
            if partner_boxes[j, 0] > x_reach:
                last = j  # (and every one after it: none holds the hit within reach)
                break
            if not _may_hold(o, d, inv, reach, partner_boxes, j):
                continue
            tq = _held_at(o, d, vertices, faces, partner_faces[j])
            if tq >= 0.0:
                nearest = min(nearest, tq)
                holders += 1
                held, held_t = np.int64(partner_faces[j]), tq
        if holders == 0:  # (most hits: the face alone holds the hit)
            continue
        limit = nearest * (1.0 + tie_rel)
        best = f if t <= limit else np.int64(2**63 - 1)
        if holders == 1:  # (its range is known: no second pass)
            if held_t <= limit and held < best:
                best = held
        else:
            for j in range(first, last):
                if not _may_hold(o, d, inv, reach, partner_boxes, j):
                    continue
                q = np.int64(partner_faces[j])
                tq = _held_at(o, d, vertices, faces, q)
                if tq >= 0.0 and tq <= limit and q < best:
                    best = q
        if best == f:
            continue
        tq, _, _, qx, qy, qz, _, _ = _moller_trumbore(o, d, vertices, faces, best)
        face_out[i] = best
        t_out[i] = np.float32(tq)
        length = np.sqrt(qx * qx + qy * qy + qz * qz)
        n_out[i, 0] = np.float32(qx / length)
        n_out[i, 1] = np.float32(qy / length)
        n_out[i, 2] = np.float32(qz / length)


def refine_hits(
    rays: NDArray[np.float32],
    t_hit: NDArray[np.float32],
    geometry: NDArray[np.uint32],
    primitive: NDArray[np.uint32],
    normal: NDArray[np.float32],
    triangles: Triangles,
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64], NDArray[np.int64]]:
    """:func:`simulator.world.refine.refine_hits`: the (N,) float32 ranges and (N, 3) float32
    unit normals recomputed in float64, the (N,) int64 faces hit (coplanar ties decided)
    and the (K,) int64 hits that may be ties with a neighbour."""
    n = len(t_hit)
    # (every element is written by the kernel)
    t_out = np.empty(n, np.float32)
    n_out = np.empty((n, 3), np.float32)
    face_out = np.empty(n, np.int64)
    tie = np.empty(n, np.bool_)
    if n:
        _refine(
            np.ascontiguousarray(rays, np.float32), np.ascontiguousarray(t_hit, np.float32),
            np.ascontiguousarray(geometry, np.uint32), np.ascontiguousarray(primitive, np.uint32),
            np.ascontiguousarray(normal, np.float32).reshape(-1, 3), *triangles.kernel_args(),
            EDGE_ULPS * 2.0**-53, TIE_REL, t_out, n_out, face_out, tie,
        )  # fmt: skip
    return t_out, n_out, face_out, np.flatnonzero(tie).astype(np.int64)
