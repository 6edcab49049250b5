"""Embree's hits refined in float64, in parallel over the rays (the specification:
:func:`simulator.world.refine.refine_hits`).

The same operations in the same order as the specification's
:func:`~simulator.world.refine.moller_trumbore`, without ``fastmath`` (no contraction into
fused multiply-adds, no reassociation), so both round the same way on any CPU.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..world.refine import EDGE_EPS, Triangles

__all__ = ["refine_hits"]


@njit(parallel=True, cache=True, nogil=True)
def _refine(rays, t_hit, geometry, primitive, normal, vertices, faces, face_start, shared,
            edge_eps, t_out, n_out, tie):  # type: ignore[no-untyped-def]  # fmt: skip
    """Refine hit ``i`` into ``t_out[i]``, ``n_out[i]``; ``tie[i]``: whether it may be a tie.
    (The constants are arguments: numba's cache would keep an imported one's old value.)"""
    invalid = np.int64(4294967295)  # INVALID_ID
    for i in prange(t_hit.shape[0]):
        t_out[i] = t_hit[i]
        n_out[i, 0] = normal[i, 0]
        n_out[i, 1] = normal[i, 1]
        n_out[i, 2] = normal[i, 2]
        tie[i] = False
        g = np.int64(geometry[i])
        if g == invalid:
            continue
        f = face_start[g] + np.int64(primitive[i])
        a, b, c = faces[f, 0], faces[f, 1], faces[f, 2]
        v0x, v0y, v0z = vertices[a, 0], vertices[a, 1], vertices[a, 2]
        e1x, e1y, e1z = vertices[b, 0] - v0x, vertices[b, 1] - v0y, vertices[b, 2] - v0z
        e2x, e2y, e2z = vertices[c, 0] - v0x, vertices[c, 1] - v0y, vertices[c, 2] - v0z
        dx, dy, dz = np.float64(rays[i, 3]), np.float64(rays[i, 4]), np.float64(rays[i, 5])
        px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
        det = e1x * px + e1y * py + e1z * pz
        sx = np.float64(rays[i, 0]) - v0x
        sy = np.float64(rays[i, 1]) - v0y
        sz = np.float64(rays[i, 2]) - v0z
        qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
        if det == 0.0:  # parallel to the plane: Embree's answer, a tie to resolve
            tie[i] = True
            continue
        t = (e2x * qx + e2y * qy + e2z * qz) / det
        u = (sx * px + sy * py + sz * pz) / det
        v = (dx * qx + dy * qy + dz * qz) / det
        if not (t >= 0.0 and t < np.inf):
            tie[i] = True
            continue
        t_out[i] = np.float32(t)
        nx, ny, nz = e1y * e2z - e1z * e2y, e1z * e2x - e1x * e2z, e1x * e2y - e1y * e2x
        length = np.sqrt(nx * nx + ny * ny + nz * nz)
        if length > 0.0:
            n_out[i, 0] = np.float32(nx / length)
            n_out[i, 1] = np.float32(ny / length)
            n_out[i, 2] = np.float32(nz / length)
        tie[i] = u < edge_eps or v < edge_eps or (1.0 - u - v) < edge_eps or shared[f]


def refine_hits(
    rays: NDArray[np.float32],
    t_hit: NDArray[np.float32],
    geometry: NDArray[np.uint32],
    primitive: NDArray[np.uint32],
    normal: NDArray[np.float32],
    triangles: Triangles,
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64]]:
    """:func:`simulator.world.refine.refine_hits`: the (N,) float32 ranges and (N, 3) float32
    unit normals recomputed in float64, and the (K,) int64 hits that may be ties."""
    n = len(t_hit)
    t_out = np.zeros(n, np.float32)
    n_out = np.zeros((n, 3), np.float32)
    tie = np.zeros(n, np.bool_)
    if n:
        _refine(
            np.ascontiguousarray(rays, np.float32), np.ascontiguousarray(t_hit, np.float32),
            np.ascontiguousarray(geometry, np.uint32), np.ascontiguousarray(primitive, np.uint32),
            np.ascontiguousarray(normal, np.float32).reshape(-1, 3), *triangles.kernel_args(),
            EDGE_EPS, t_out, n_out, tie,
        )  # fmt: skip
    return t_out, n_out, np.flatnonzero(tie).astype(np.int64)
