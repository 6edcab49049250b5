"""The moving objects' cull, in parallel over blocks of rays, and the rays it keeps moved
into a group's frame (the specifications: :func:`simulator.world.raycast.rays_into_boxes`,
:func:`simulator.world.raycast.into_group_frame`).

Testing every ray against every moving group's box is most of the work; most pairs are
ruled out a time slot at a time first, within each block. A ray from ``o`` can meet a box
``B`` only if its direction's azimuth lies among those of ``B - O``, ``O`` the box of the
slot's ray origins.
Azimuths are compared as *pseudo-angles* (a monotone, trigonometry-free stand-in in
[0, 4) for the angle in [0, 2 pi)), with a margin: the slab test decides the rest, so the
answer is the specification's exactly. The answer is a list of rays per group (CSR), in
two passes: one counts each block's rays of each group and keeps which groups each ray
meets (a bit a group), the other writes them in place from those bits (no second slab
test).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numpy.typing import NDArray

from .common import read_only

__all__ = ["into_group_frame", "nearer_hits", "rays_into_boxes"]

#: Pseudo-angle margin of the azimuth test (about 1e-6 rad).
MARGIN = 1e-6


@njit(inline="always", cache=True)
def _pseudo_angle(x, y):  # type: ignore[no-untyped-def]
    """A monotone stand-in in [0, 4) for the angle of (x, y) in [0, 2 pi); -1 for (0, 0)."""
    s = abs(x) + abs(y)
    if s == 0.0:
        return -1.0
    p = y / s
    if x >= 0.0:
        return p if y >= 0.0 else 4.0 + p
    return 2.0 - p


@njit(inline="always", cache=True)
def _turn(a):  # type: ignore[no-untyped-def]
    """A pseudo-angle difference wrapped to [-2, 2)."""
    return (a + 2.0) % 4.0 - 2.0


@njit(cache=True, nogil=True)
def _slot_candidates(rays, shift, slot, lo, hi, begin, end):  # type: ignore[no-untyped-def]
    """(S, G) bool: whether some ray ``begin <= i < end`` of slot ``s`` may point at box
    ``g`` of that slot (True for a slot without such a ray)."""
    slots, groups = lo.shape[1], lo.shape[0]
    o_lo = np.full((slots, 3), np.inf)
    o_hi = np.full((slots, 3), -np.inf)
    ref = np.full(slots, -2.0)  # the slot's reference azimuth; -1: any azimuth
    d_lo = np.zeros(slots)
    d_hi = np.zeros(slots)
    for i in range(begin, end):
        s = slot[i]
        for k in range(3):
            o = np.float64(rays[i, k]) + shift[k]
            o_lo[s, k] = min(o_lo[s, k], o)
            o_hi[s, k] = max(o_hi[s, k], o)
        if ref[s] == -1.0:
            continue
        a = _pseudo_angle(np.float64(rays[i, 3]), np.float64(rays[i, 4]))
        if a < 0.0:
            ref[s] = -1.0
        elif ref[s] == -2.0:
            ref[s] = a
        else:
            t = _turn(a - ref[s])
            d_lo[s] = min(d_lo[s], t)
            d_hi[s] = max(d_hi[s], t)
    out = np.ones((slots, groups), dtype=np.bool_)
    for s in range(slots):
        if ref[s] < 0.0 or d_hi[s] - d_lo[s] >= 1.0:  # no ray, or a wide fan: test all
            continue
        mid = ref[s] + 0.5 * (d_lo[s] + d_hi[s])
        half = 0.5 * (d_hi[s] - d_lo[s])
        for g in range(groups):
            x0, x1 = lo[g, s, 0] - o_hi[s, 0], hi[g, s, 0] - o_lo[s, 0]  # B - O
            y0, y1 = lo[g, s, 1] - o_hi[s, 1], hi[g, s, 1] - o_lo[s, 1]
            if x0 <= 0.0 <= x1 and y0 <= 0.0 <= y1:
                continue  # around the origins: any azimuth
            c = _pseudo_angle(0.5 * (x0 + x1), 0.5 * (y0 + y1))
            c_lo = c_hi = 0.0
            for x, y in ((x0, y0), (x0, y1), (x1, y0), (x1, y1)):
                t = _turn(_pseudo_angle(x, y) - c)
                c_lo = min(c_lo, t)
                c_hi = max(c_hi, t)
            c_mid = c + 0.5 * (c_lo + c_hi)
            c_half = 0.5 * (c_hi - c_lo)
            out[s, g] = abs(_turn(c_mid - mid)) <= half + c_half + MARGIN
    return out


@njit(inline="always", cache=True)
def _enters(rays, i, shift, range_max, low_m, high_m):  # type: ignore[no-untyped-def]
    """The slab test: whether ray ``i`` meets the box ``low_m..high_m`` (3,) within its
    range."""
    enter = 0.0
    leave = range_max[i]
    for k in range(3):
        o = np.float64(rays[i, k]) + shift[k]  # as world_rays
        d = np.float64(rays[i, 3 + k])
        low = low_m[k]
        high = high_m[k]
        if d == 0.0:  # parallel to the slab: inside it for all t or never
            if o < low or o > high:
                leave = -1.0
            continue
        inv = 1.0 / d
        a = (low - o) * inv
        b = (high - o) * inv
        if a > b:
            a, b = b, a
        enter = max(enter, a)
        leave = min(leave, b)
    return enter <= leave


@njit(parallel=True, cache=True, nogil=True)
def _count(rays, shift, range_max, slot, lo, hi, edges, listed, counts, met):  # type: ignore[no-untyped-def]
    """The first pass, per block of rays ``edges[b]..edges[b + 1]``: the boxes its
    candidates leave for each slot, ``listed[b, s, 1:1 + listed[b, s, 0]]``, how many
    of the block's rays meet each box, ``counts[b, g]`` (the slab test), and which boxes
    each ray ``i`` meets, bit ``g % 64`` of ``met[i, g // 64]`` (zeros on entry). Blocks
    are independent (a block's candidates are a sound cull of its own rays), so any
    blocking gives the same answer."""
    for b in prange(edges.shape[0] - 1):
        begin, end = edges[b], edges[b + 1]
        candidate = _slot_candidates(rays, shift, slot, lo, hi, begin, end)
        for s in range(lo.shape[1]):
            n = 0
            for g in range(lo.shape[0]):
                if candidate[s, g]:
                    n += 1
                    listed[b, s, n] = g
            listed[b, s, 0] = n
        for i in range(begin, end):
            s = slot[i]
            for j in range(1, listed[b, s, 0] + 1):
                g = listed[b, s, j]
                if _enters(rays, i, shift, range_max, lo[g, s], hi[g, s]):
                    counts[b, g] += 1
                    met[i, g >> 6] |= np.uint64(1) << np.uint64(g & 63)


@njit(parallel=True, cache=True, nogil=True)
def _write(edges, met, at, out):  # type: ignore[no-untyped-def]
    """The second pass: ray ``i`` of block ``b`` that meets box ``g`` (``met``'s bit, see
    :func:`_count`) goes to ``out[at[b, g]]``, and ``at[b, g]`` moves on."""
    for b in prange(edges.shape[0] - 1):
        for i in range(edges[b], edges[b + 1]):
            for w in range(met.shape[1]):
                bits = met[i, w]
                g = w << 6
                while bits:
                    if bits & np.uint64(1):
                        out[at[b, g]] = i
                        at[b, g] += 1
                    bits >>= np.uint64(1)
                    g += 1


#: Rays a block of the cull (a block shares its candidates; see _count).
BLOCK_RAYS = 4096


def rays_into_boxes(
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    range_max_m: NDArray,
    slot: NDArray[np.int64],
    lo_m: NDArray[np.float64],
    hi_m: NDArray[np.float64],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """:func:`simulator.world.raycast.rays_into_boxes`: per box ``g``, the rays that meet it in
    their time slot before their range, ``rays_out[starts[g]:starts[g + 1]]``
    (increasing)."""
    rays = np.ascontiguousarray(rays, np.float32)
    shift = np.ascontiguousarray(shift_m, np.float64)
    slot = np.ascontiguousarray(slot, np.int64)
    lo = np.ascontiguousarray(lo_m, np.float64)
    hi = np.ascontiguousarray(hi_m, np.float64)
    groups = len(lo)
    if len(rays) == 0 or groups == 0:
        return np.zeros(groups + 1, np.int64), np.zeros(0, np.int64)
    range_max = np.ascontiguousarray(range_max_m, np.float64)
    edges = np.append(np.arange(0, len(rays), BLOCK_RAYS, dtype=np.int64), len(rays))
    counts = np.zeros((len(edges) - 1, groups), np.int64)
    listed = np.empty((len(edges) - 1, lo.shape[1], groups + 1), np.int64)
    met = np.zeros((len(rays), (groups + 63) // 64), np.uint64)
    _count(rays, shift, range_max, slot, lo, hi, edges, listed, counts, met)
    per_group = counts.sum(axis=0)
    starts = np.concatenate([[0], np.cumsum(per_group)]).astype(np.int64)
    # Where block b's rays of group g go: after group g's earlier blocks.
    at = starts[:-1][None, :] + np.cumsum(counts, axis=0) - counts
    out = np.empty(int(starts[-1]), np.int64)
    if len(out):
        _write(edges, met, at, out)
    return starts, out


@njit(cache=True, nogil=True)
def _into_frame(rays, rows, shift, rot, pos, local, out):  # type: ignore[no-untyped-def]
    """Ray ``rows[k]`` into ``out[k]``: ``rot[k]^T`` times its world origin less ``pos[k]``,
    less ``local``, and ``rot[k]^T`` times its direction, each component summed over the
    rotation's rows from +0 as ``einsum`` does (so a sum of zeros is +0, not -0).

    On one thread: a group's rays are a few thousand at most (2,000 on average on the
    street), fewer than a parallel launch pays for."""
    for k in range(rows.shape[0]):
        i = rows[k]
        x0 = (np.float64(rays[i, 0]) + shift[0]) - pos[k, 0]
        x1 = (np.float64(rays[i, 1]) + shift[1]) - pos[k, 1]
        x2 = (np.float64(rays[i, 2]) + shift[2]) - pos[k, 2]
        d0 = np.float64(rays[i, 3])
        d1 = np.float64(rays[i, 4])
        d2 = np.float64(rays[i, 5])
        for c in range(3):
            r0, r1, r2 = rot[k, 0, c], rot[k, 1, c], rot[k, 2, c]
            o = ((0.0 + r0 * x0) + r1 * x1) + r2 * x2
            out[k, c] = np.float32(o - local[c])
            out[k, 3 + c] = np.float32(((0.0 + r0 * d0) + r1 * d1) + r2 * d2)


def into_group_frame(
    rays: NDArray[np.float32],
    rows: NDArray[np.int64],
    shift_m: NDArray[np.float64],
    rotation: NDArray[np.float64],
    position_m: NDArray[np.float64],
    local_m: NDArray[np.float64],
) -> NDArray[np.float32]:
    """:func:`simulator.world.raycast.into_group_frame`: the (K, 6) float32 rays ``rows`` in
    a moving group's frame, in one pass over them."""
    rows = np.ascontiguousarray(rows, np.int64)
    out = np.zeros((len(rows), 6), np.float32)
    if len(rows):
        _into_frame(
            np.ascontiguousarray(rays, np.float32), rows,
            np.ascontiguousarray(shift_m, np.float64), read_only(rotation),
            np.ascontiguousarray(position_m, np.float64),
            np.ascontiguousarray(local_m, np.float64), out,
        )  # fmt: skip
    return out


@njit(cache=True, nogil=True)
def _nearer(  # type: ignore[no-untyped-def]
    range_m, object_index, normal, rows, t, geometry, normal_local, rotation, members, nearer
):  # fmt: skip
    """Ray ``rows[k]`` takes the group's hit ``k`` where ``t[k]`` is nearer than its range
    so far: range, object and ``rotation[k]`` times the local normal (each component
    summed over the rotation's columns from +0, as ``einsum`` does), rounded to float32;
    the ``k`` written to ``nearer`` in order, and their count returned.

    On one thread, as :func:`_into_frame`: a group's rays are a few thousand at most."""
    count = 0
    for k in range(rows.shape[0]):
        i = rows[k]
        if not t[k] < range_m[i]:
            continue
        range_m[i] = t[k]
        object_index[i] = members[geometry[k]]
        n0 = np.float64(normal_local[k, 0])
        n1 = np.float64(normal_local[k, 1])
        n2 = np.float64(normal_local[k, 2])
        for c in range(3):
            r0, r1, r2 = rotation[k, c, 0], rotation[k, c, 1], rotation[k, c, 2]
            normal[i, c] = np.float32(((0.0 + r0 * n0) + r1 * n1) + r2 * n2)
        nearer[count] = k
        count += 1
    return count


def nearer_hits(
    range_m: NDArray[np.float32],
    object_index: NDArray[np.int32],
    normal: NDArray[np.float32],
    rows: NDArray[np.int64],
    t: NDArray[np.float32],
    geometry: NDArray[np.int32],
    normal_local: NDArray[np.float32],
    rotation: NDArray[np.float64],
    members: NDArray[np.int32],
) -> NDArray[np.int64]:
    """:func:`simulator.world.raycast.nearer_hits`: a moving group's (K,) hits put in
    place of the hits so far where nearer, in one pass over them (the (N,) arrays changed
    in place); the (J,) int64 positions ``k`` that were."""
    nearer = np.zeros(len(rows), np.int64)
    if len(rows) == 0:
        return nearer
    count = _nearer(
        range_m, object_index, normal, np.ascontiguousarray(rows, np.int64),
        np.ascontiguousarray(t, np.float32), np.ascontiguousarray(geometry, np.int32),
        np.ascontiguousarray(normal_local, np.float32).reshape(-1, 3),
        read_only(rotation), np.ascontiguousarray(members, np.int32), nearer,
    )  # fmt: skip
    return nearer[:count]
