"""Adaptive sampling's kernels: the footprint test and the interleaving of the sub-rays
cast in parts (the specifications: :func:`simulator.steps.footprint.single_surface` and
:func:`simulator.steps.footprint.interleave`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from ..chunk import Hits
from ..steps.footprint import NORMAL_TOLERANCE_DEG, PLANE_TOLERANCE_M, Part, Witnesses

__all__ = ["interleave", "single_surface"]

_COS_TOL = math.cos(math.radians(NORMAL_TOLERANCE_DEG))


@njit(inline="always", cache=True)
def _on_plane(  # type: ignore[no-untyped-def]
    q0, q1, q2, n0, n1, n2, obj0, r0, rays, rng, obj, nrm, i, tol, cos_tol, half_sep
):  # fmt: skip
    """Whether witness ray ``i`` hits object ``obj0`` on the plane through ``q`` with
    normal ``n`` (within ``tol`` along the ray) with a normal within the turn, within
    ``half_sep`` of the central range ``r0``."""
    if obj[i] != obj0 or not abs(np.float64(rng[i]) - r0) <= half_sep:
        return False
    along = np.float64(rays[i, 3]) * n0 + np.float64(rays[i, 4]) * n1 + np.float64(rays[i, 5]) * n2
    height = (
        (q0 - np.float64(rays[i, 0])) * n0
        + (q1 - np.float64(rays[i, 1])) * n1
        + (q2 - np.float64(rays[i, 2])) * n2
    )
    if along == 0.0:
        return False
    if not abs(np.float64(rng[i]) - height / along) <= tol:
        return False
    turn = abs(np.float64(nrm[i, 0]) * n0 + np.float64(nrm[i, 1]) * n1 + np.float64(nrm[i, 2]) * n2)
    return turn >= cos_tol


@njit(parallel=True, cache=True, nogil=True)
def _single_surface(  # type: ignore[no-untyped-def]
    rays, rng, obj, nrm, p_rays, p_rng, p_obj, p_nrm, width, stride, a_rays, a_rng, a_obj,
    a_nrm, z_rays, z_rng, z_obj, z_nrm, start, total, tol, cos_tol, half_sep, out,
):  # fmt: skip
    """The footprint test of each pulse ``p``; its neighbour ``j = p -+ stride`` (in the
    chunk) is the chunk's own beam, or beyond its ends one of the ``a_`` beams before it
    (row ``j + len(a_rays)``) or the ``z_`` beams after it (row ``j - P``)."""
    n = rays.shape[0]
    before = a_rays.shape[0]
    for p in prange(n):
        o = obj[p]
        if o < 0:  # open sky only if every witness misses too
            clear = True
            for k in range(width):
                clear = clear and p_obj[p * width + k] < 0
            if stride > 0:
                for j in (p - stride, p + stride):
                    if not (start + j >= 0 and start + j < total):
                        clear = False
                    elif j < 0:
                        clear = clear and a_obj[j + before] < 0
                    elif j >= n:
                        clear = clear and z_obj[j - n] < 0
                    else:
                        clear = clear and obj[j] < 0
            out[p] = clear
            continue
        n0, n1, n2 = np.float64(nrm[p, 0]), np.float64(nrm[p, 1]), np.float64(nrm[p, 2])
        r = np.float64(rng[p])
        q0 = np.float64(rays[p, 0]) + r * np.float64(rays[p, 3])
        q1 = np.float64(rays[p, 1]) + r * np.float64(rays[p, 4])
        q2 = np.float64(rays[p, 2]) + r * np.float64(rays[p, 5])
        ok = True
        for k in range(width):
            ok = ok and _on_plane(
                q0, q1, q2, n0, n1, n2, o, r, p_rays, p_rng, p_obj, p_nrm, p * width + k, tol,
                cos_tol, half_sep,
            )  # fmt: skip
        if stride > 0:
            for j in (p - stride, p + stride):
                if not ok:
                    break
                if not (start + j >= 0 and start + j < total):
                    ok = False
                elif j < 0:
                    ok = _on_plane(
                        q0, q1, q2, n0, n1, n2, o, r, a_rays, a_rng, a_obj, a_nrm, j + before,
                        tol, cos_tol, half_sep,
                    )  # fmt: skip
                elif j >= n:
                    ok = _on_plane(
                        q0, q1, q2, n0, n1, n2, o, r, z_rays, z_rng, z_obj, z_nrm, j - n, tol,
                        cos_tol, half_sep,
                    )  # fmt: skip
                else:
                    ok = _on_plane(
                        q0, q1, q2, n0, n1, n2, o, r, rays, rng, obj, nrm, j, tol, cos_tol,
                        half_sep,
                    )  # fmt: skip
        out[p] = ok


def single_surface(
    rays: NDArray[np.float32], hits: Hits, witnesses: Witnesses
) -> NDArray[np.bool_]:
    """:func:`simulator.steps.footprint.single_surface` in one kernel: (P,) bool."""
    out = np.empty(len(rays), dtype=np.bool_)
    w, ph, a, z = witnesses, witnesses.probe_hits, witnesses.before_hits, witnesses.after_hits
    width = len(w.probes)
    _single_surface(
        rays, hits.range_m, hits.object_index, hits.normal, w.probe_rays, ph.range_m,
        ph.object_index, ph.normal, width, w.stride, w.before, a.range_m, a.object_index,
        a.normal, w.after, z.range_m, z.object_index, z.normal, w.start, w.total,
        PLANE_TOLERANCE_M, _COS_TOL, 0.5 * w.separation_m, out,
    )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def _interleave(  # type: ignore[no-untyped-def]
    which, footprints, rays, rng, obj, nrm, samples, out_rays, out_rng, out_obj, out_nrm
):  # fmt: skip
    """Row ``footprints[f] * n + j`` of a part (``n = len(which)``) to row
    ``f * samples + which[j]`` (on one thread: a copy of a few MB, which threads made no
    faster, and slower when the cores are busy)."""
    n = which.shape[0]
    for f in range(footprints.shape[0]):
        for j in range(n):
            src, dst = footprints[f] * n + j, f * samples + which[j]
            for a in range(6):
                out_rays[dst, a] = rays[src, a]
            out_rng[dst] = rng[src]
            out_obj[dst] = obj[src]
            for a in range(3):
                out_nrm[dst, a] = nrm[src, a]


def interleave(parts: list[Part], samples: int) -> tuple[NDArray[np.float32], Hits]:
    """:func:`simulator.steps.footprint.interleave` in one kernel a part: rays (F * samples, 6)
    and their hits, pulse-major."""
    which0, r0, _, footprints0 = parts[0]
    f = len(r0) // len(which0) if footprints0 is None else len(footprints0)
    rays = np.empty((f * samples, 6), dtype=np.float32)
    range_m = np.empty(f * samples, dtype=np.float32)
    obj = np.empty(f * samples, dtype=np.int32)
    normal = np.empty((f * samples, 3), dtype=np.float32)
    # (the material rows, where the scene has per-face materials: a gather a part)
    faces = any(h.material_row is not None for _, _, h, _ in parts)
    face = np.zeros((f, samples) if faces else (0, 0), dtype=np.int32)
    every = np.arange(f, dtype=np.int64)
    for which, r, h, footprints in parts:
        rows = every if footprints is None else np.ascontiguousarray(footprints, np.int64)
        _interleave(
            np.ascontiguousarray(which, dtype=np.int64), rows, np.ascontiguousarray(r),
            np.ascontiguousarray(h.range_m), np.ascontiguousarray(h.object_index),
            np.ascontiguousarray(h.normal), samples, rays, range_m, obj, normal,
        )  # fmt: skip
        if faces:
            face[:, which] = h.rows.reshape(-1, len(which))[rows]
    return rays, Hits(range_m, obj, normal, face.reshape(-1) if faces else None)
