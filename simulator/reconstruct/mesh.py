"""Surfaces of real frames: each frame's beam grid triangulated, frames fused into one mesh.

**Continuity.** Two neighbouring beams (in a row, the columns wrapping round a whole
revolution; in a column, the channels in elevation order) are joined when both returned
and the surface between them is one the beams can have seen continuously: the range step
``d1`` between them is small (``step_m``, twice the noise and more) or continues the step
before or after it (``|d1 - d0| <= step_m + slope_share |d1|``: the ground at grazing
incidence, whose steps grow smoothly from ring to ring, stays joined; a depth edge, one
step its neighbours do not continue, is cut), and the surface is not seen closer to
grazing than ``min_grazing_deg`` (``|d1| <= step_m + r step / tan(min_grazing_deg)``,
``step`` the angle between the beams: a run of unrelated returns at growing ranges, in
foliage or past a corner, continues its own steps but lies almost along the beams).

**Triangles.** Four neighbouring beams make a quad. A quad whose four edges are joined
gives two triangles, split along the diagonal whose ranges agree better; a quad with a
broken edge keeps the triangles whose two grid edges are joined. The sky and drop-outs
are never bridged.

**Surfels.** A return on no triangle's inside (a lone return on a leaf, a pole or a wire;
the rim of a surface, where a beam through the last vertex may pass either side of it)
gets a square of its own, two triangles spanned by the steps to its joined neighbours (or
the beam's share of the grid at that range, facing the beam, where it has none), reaching
``overlap`` past half-way; ``rim_scale`` and ``lone_scale`` scale it.

**Fusion.** Frames overlap; their surfaces are fused, not stacked. A triangle of one
frame is left out where a frame that sees its place nearer has a surface there (that
frame's line of sight to its centre meets one of its triangles within ``cover_m +
cover_share * distance``; equal distances go to the first frame). So each surface comes
from the frame that sampled it most finely and with the smallest footprint, and a surface
only one frame saw is kept. Surfels are not surfaces: they are kept from every frame, and
foliage, a volume, is sampled by all of them together. TSDF integration (Open3D's
``ScalableTSDFVolume``) was the other choice: it needs pinhole depth images (a spinning
scanner's grid is not one), smooths edges and thin poles by its voxel, and costs far
more; the range noise here (about 1 cm) is below what a voxel small enough to keep poles
and kerbs would average.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..world.raycast import import_open3d
from ..world.refine import RefinedScene
from .grid import BeamGrid

__all__ = [
    "FrameMesh",
    "MeshCaster",
    "MeshParams",
    "concatenate",
    "fuse",
    "triangulate",
    "unit_normals",
]


@dataclass(frozen=True)
class MeshParams:
    """How frames become a mesh.

    Attributes
    ----------
    step_m : float
        A range step to the next beam this small always continues the surface, m.
    slope_share : float
        A larger step continues it when it differs from the step before or after it by
        at most this share of itself (and ``step_m``).
    min_grazing_deg : float
        And is no steeper than a surface seen this close to grazing, deg.
    cover_m, cover_share : float
        A face counts as seen by a nearer frame when that frame's surface lies within
        ``cover_m + cover_share * distance`` of it along that frame's line of sight, m.
    overlap : float
        How far a surfel reaches past half-way to its neighbours, as a share of the step.
    """

    step_m: float = 0.05
    slope_share: float = 0.25
    min_grazing_deg: float = 3.0
    cover_m: float = 0.1
    cover_share: float = 0.01
    overlap: float = 0.1
    lone_scale: float = 1.0
    rim_scale: float = 1.0


@dataclass(frozen=True)
class FrameMesh:
    """Triangles in the world frame.

    Attributes
    ----------
    vertices_m : (V, 3) float64
    faces : (F, 3) int64
    frame : (F,) int64
        The frame each face came from.
    pixels : (F, 3) int64
        The returns each face is made of (flat indices ``channel * W + column`` in its
        frame's grid): a triangle's three corners, a surfel's one return three times.
    """

    vertices_m: NDArray[np.float64]
    faces: NDArray[np.int64]
    frame: NDArray[np.int64]
    pixels: NDArray[np.int64]


def unit_normals(v: NDArray[np.float64], f: NDArray[np.int64]) -> NDArray[np.float64]:
    """(F, 3) unit normals of faces ``f`` (F, 3) of vertices ``v`` (V, 3), as wound; zero
    for a degenerate face."""
    n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    length = np.linalg.norm(n, axis=1, keepdims=True)
    return np.divide(n, length, out=np.zeros_like(n), where=length > 0)


class MeshCaster:
    """One mesh in Open3D's ``RaycastingScene`` (Embree), for casting rays at it again and
    again.

    Parameters
    ----------
    vertices_m : (V, 3) float64
    faces : (F, 3) int
        Embree takes both as float32 and uint32.
    """

    def __init__(self, vertices_m: NDArray[np.float64], faces: NDArray[np.int64]) -> None:
        # Refined hits (range recomputed in float64, ties to the lowest face): the same
        # on any x86-64 CPU.
        self._scene = RefinedScene(import_open3d(), [vertices_m], [faces])

    def cast(
        self, origins_m: NDArray[np.float64], directions: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
        """The first hit of each ray.

        Parameters
        ----------
        origins_m, directions : (..., 3) float64
            The rays (unit directions).

        Returns
        -------
        t_m : (N,) float64
            Distance along the ray to the hit, inf for a miss (N = the rays, flattened).
        face : (N,) int64
            The face hit (-1 for a miss).
        """
        rays = np.concatenate([origins_m.reshape(-1, 3), directions.reshape(-1, 3)], axis=1)
        cast = self._scene.cast(rays.astype(np.float32))
        return cast.t.astype(np.float64), cast.primitive.astype(np.int64)

    def ranges(
        self,
        origin_m: NDArray[np.float64],
        direction: NDArray[np.float64],
        range_offset_m: float = 0.0,
    ) -> NDArray[np.float64]:
        """Where each beam meets the mesh, (C, W) float64 (inf where it meets none).

        Parameters
        ----------
        origin_m, direction : (C, W, 3) float64
            The beams in the mesh's frame.
        range_offset_m : float
            Added to every distance (a range measured from the lidar origin, not the
            beam's).
        """
        t, _ = self.cast(origin_m, direction)
        return t.reshape(origin_m.shape[:2]) + range_offset_m


def _grid_order(grid: BeamGrid) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The rows by falling elevation (each row's median over its returns), and those
    elevations (rad)."""
    c = grid.shape[0]
    xyz = grid.xyz_m
    with np.errstate(invalid="ignore"):
        el = np.arctan2(xyz[..., 2], np.hypot(xyz[..., 0], xyz[..., 1]))
    med = np.zeros(c)
    seen = grid.returned.any(axis=1)
    if seen.any():
        med[seen] = [np.median(el[i][grid.returned[i]]) for i in np.flatnonzero(seen)]
    if not seen.all() and seen.any():  # rows with no return: between their neighbours
        med[~seen] = np.interp(np.flatnonzero(~seen), np.flatnonzero(seen), med[seen])
    order = np.argsort(med, kind="stable")[::-1]
    return order, med[order]


def _continues(
    r: NDArray[np.float64],
    axis: int,
    wrap: bool,
    params: MeshParams,
    step_rad: float | NDArray[np.float64],
) -> NDArray:
    """(C, W) bool: whether the surface runs on from each beam to the next along ``axis``
    (see the module): both returned, and the range step ``d1`` to the next is small
    (``|d1| <= params.step_m``, twice the noise and more) or continues the step before
    it or after it (``|d1 - d0| <= params.slope_share |d1|``), and is not steeper than a
    surface seen at ``params.min_grazing_deg`` (``|d1| <= r step_rad / tan(min)``, with
    ``step_rad`` the angle between the two beams). The last beam of an axis that does not
    wrap is never joined on."""

    def shift(x: NDArray[np.float64], k: int) -> NDArray[np.float64]:
        if wrap:
            return np.roll(x, -k, axis=axis)
        out = np.full_like(x, np.nan)
        n = x.shape[axis]
        src = [slice(None)] * 2
        dst = [slice(None)] * 2
        if k >= 0:
            src[axis], dst[axis] = slice(k, n), slice(0, n - k)
        else:
            src[axis], dst[axis] = slice(0, n + k), slice(-k, n)
        out[tuple(dst)] = x[tuple(src)]
        return out

    with np.errstate(invalid="ignore"):
        d1 = shift(r, 1) - r
        d0 = r - shift(r, -1)
        d2 = shift(r, 2) - shift(r, 1)
        tol = params.step_m + params.slope_share * np.abs(d1)
        ok = (np.abs(d1) <= params.step_m) | (np.abs(d1 - d0) <= tol) | (np.abs(d1 - d2) <= tol)
        grazing = np.tan(np.radians(params.min_grazing_deg))
        ok &= np.abs(d1) <= params.step_m + np.fmin(r, r + d1) * step_rad / grazing
    return ok & np.isfinite(d1)


def triangulate(
    grid: BeamGrid,
    beam_origin_m: NDArray[np.float64],
    world: tuple[NDArray[np.float64], NDArray[np.float64]],
    frame: int,
    params: MeshParams,
) -> FrameMesh:
    """One frame's returns as surfels in the world frame, two triangles a return.

    Parameters
    ----------
    grid : BeamGrid
        The frame (its rows are put in elevation order here).
    beam_origin_m : (C, W, 3) float64
        Each beam's origin in the sensor frame.
    world : ((C, W, 3, 3), (C, W, 3)) float64
        World-from-sensor rotation and position at each beam's firing
        (:func:`.motion.pixel_poses`): the returns are deskewed with them.
    frame : int
        The frame's number (kept per face).
    params : MeshParams

    Returns
    -------
    FrameMesh
        With ``patch`` the return's flat index ``channel * W + column`` in the grid's own
        channel order (both triangles of a surfel share it).
    """
    c, w = grid.shape
    order, elevation = _grid_order(grid)
    returned = grid.returned[order]
    p = grid.xyz_m[order].reshape(-1, 3)
    r_grid = r = np.where(returned, np.linalg.norm(p.reshape(c, w, 3), axis=2), np.nan)
    n = c * w
    idx = np.arange(n).reshape(c, w)
    right, left = np.roll(idx, -1, axis=1), np.roll(idx, 1, axis=1)
    down = np.vstack([idx[1:], idx[-1:]])  # the next lower channel (itself at the bottom)
    up = np.vstack([idx[:1], idx[:-1]])
    row_gap = np.abs(np.diff(elevation, append=elevation[-1:]))[:, None]  # to the next row
    j_r = _continues(r, 1, True, params, 2.0 * np.pi / w)
    j_l = np.roll(j_r, 1, axis=1)
    j_d = _continues(r, 0, False, params, row_gap)
    j_u = np.vstack([np.zeros((1, w), dtype=bool), j_d[:-1]])
    rows = np.flatnonzero(returned.reshape(-1))
    rot = world[0][order].reshape(-1, 3, 3)
    pos = world[1][order].reshape(-1, 3)
    origin = np.einsum("nij,nj->ni", rot, beam_origin_m[order].reshape(-1, 3)) + pos
    p = np.einsum("nij,nj->ni", rot, p) + pos  # deskewed, in the world
    ray = p - origin
    r = np.linalg.norm(ray, axis=1)
    d = ray / np.maximum(r, 1e-9)[:, None]
    u_h = np.cross(d, [0.0, 0.0, 1.0])
    u_h /= np.maximum(np.linalg.norm(u_h, axis=1, keepdims=True), 1e-9)
    u_v = np.cross(u_h, d)
    gap = np.abs(np.diff(elevation))
    gap = np.maximum(np.concatenate([gap[:1], gap]), np.concatenate([gap, gap[-1:]]))
    gap = np.where(gap > 0, gap, np.median(gap[gap > 0]) if (gap > 0).any() else 0.005)
    ch = np.arange(n) // w
    pr, pl = p[right.reshape(-1)], p[left.reshape(-1)]
    pd, pu = p[down.reshape(-1)], p[up.reshape(-1)]

    def axis(
        a_ok: NDArray, b_ok: NDArray, pa: NDArray, pb: NDArray, fallback: NDArray
    ) -> NDArray[np.float64]:
        a_ok, b_ok = a_ok.reshape(-1, 1), b_ok.reshape(-1, 1)
        both = 0.5 * (pa - pb)
        return np.where(a_ok & b_ok, both, np.where(a_ok, pa - p, np.where(b_ok, p - pb, fallback)))

    with np.errstate(invalid="ignore"):
        h = axis(j_r, j_l, pr, pl, (r * 2.0 * np.pi / w)[:, None] * u_h)[rows]
        v = axis(j_d, j_u, pd, pu, (r * gap[ch])[:, None] * u_v)[rows]
    # triangles: each quad of four returns whose edges continue the surface makes two
    # (split along its shorter diagonal); a quad with a broken edge keeps the triangles
    # whose two grid edges hold
    right_d = np.roll(j_d, -1, axis=1)
    ab, cd, ac, bd = j_d[:-1], right_d[:-1], j_r[:-1], j_r[1:]
    a, b = idx[:-1], idx[1:]
    cc, dd = right[:-1], right[1:]
    full = ab & cd & ac & bd
    with np.errstate(invalid="ignore"):
        along_ad = np.abs(r_grid.reshape(-1)[a] - r_grid.reshape(-1)[dd]) <= np.abs(
            r_grid.reshape(-1)[b] - r_grid.reshape(-1)[cc]
        )
    tris = [
        np.stack([a, b, cc], -1)[(full & ~along_ad) | (~full & ab & ac)],
        np.stack([b, dd, cc], -1)[(full & ~along_ad) | (~full & bd & cd)],
        np.stack([a, b, dd], -1)[(full & along_ad) | (~full & ab & bd)],
        np.stack([a, dd, cc], -1)[(full & along_ad) | (~full & ac & cd)],
    ]
    triangles = np.concatenate(tris).astype(np.int64)
    # surfels for the returns on no triangle's inside: lone returns, and the rim
    edges = np.sort(triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    unique, counts = np.unique(edges, axis=0, return_counts=True)
    inside = np.zeros(n, dtype=bool)
    inside[triangles.reshape(-1)] = True
    inside[unique[counts == 1].reshape(-1)] = False
    lone = rows[~inside[rows]]
    inside_any = np.zeros(n, dtype=bool)
    inside_any[triangles.reshape(-1)] = True
    at = np.searchsorted(rows, lone)
    sz = (
        0.5
        * (1.0 + params.overlap)
        * np.where(inside_any[lone], params.rim_scale, params.lone_scale)[:, None]
    )
    centre, hh, vv = p[lone], sz * h[at], sz * v[at]
    corners = np.stack(
        [centre - hh - vv, centre + hh - vv, centre + hh + vv, centre - hh + vv], axis=1
    ).reshape(-1, 3)
    base = n + 4 * np.arange(len(lone))[:, None]
    squares = np.concatenate([base + np.array([0, 1, 2]), base + np.array([0, 2, 3])])
    faces = np.concatenate([triangles, squares])
    vertices = np.concatenate([p, corners])
    # each face's returns (flat index in the grid's own channel order)
    pixel_of = np.concatenate([order[idx.reshape(-1) // w] * w + idx.reshape(-1) % w,
                               np.repeat(order[lone // w] * w + lone % w, 4)])  # fmt: skip
    used, inverse = np.unique(faces, return_inverse=True)
    corner_pixels = np.concatenate([triangles, np.concatenate([base, base])[:, [0, 0, 0]]])
    pixels = pixel_of[corner_pixels]
    return FrameMesh(vertices[used], inverse.reshape(-1, 3), np.full(len(faces), frame), pixels)


def concatenate(meshes: list[FrameMesh]) -> FrameMesh:
    """Several meshes as one (vertices not shared between them)."""
    offsets = np.cumsum([0] + [len(m.vertices_m) for m in meshes[:-1]])
    return FrameMesh(
        np.concatenate([m.vertices_m for m in meshes]),
        np.concatenate([m.faces + o for m, o in zip(meshes, offsets, strict=True)]),
        np.concatenate([m.frame for m in meshes]),
        np.concatenate([m.pixels for m in meshes]),
    )


def _is_surface(mesh: FrameMesh) -> NDArray[np.bool_]:
    """(F,) bool: the faces that are triangles between returns (not a lone return's
    surfel, whose three corners are one return)."""
    return mesh.pixels[:, 0] != mesh.pixels[:, 1]


def fuse(meshes: list[FrameMesh], sensors_m: NDArray[np.float64], params: MeshParams) -> FrameMesh:
    """Overlapping frames' surfels fused: a face is left out where a frame that sees its
    place nearer has a surface there (see the module).

    Parameters
    ----------
    meshes : list of FrameMesh
        One per frame (``frame`` indexes ``sensors_m``).
    sensors_m : (K, 3) float64
        Each frame's sensor position in the world.
    params : MeshParams
    """
    if len(meshes) == 1:
        return meshes[0]
    scenes = {}
    for m in meshes:
        surface = m.faces[_is_surface(m)]
        if len(surface):
            scenes[int(m.frame[0])] = MeshCaster(m.vertices_m, surface)
    kept = []
    for m in meshes:
        if len(m.faces) == 0:
            continue
        f = int(m.frame[0])
        centre = m.vertices_m[m.faces].mean(axis=1)
        own = np.linalg.norm(centre - sensors_m[f], axis=1)
        covered = np.zeros(len(centre), dtype=bool)
        lone = ~_is_surface(m)
        for g, rc in scenes.items():
            if g == f:
                continue
            ray = centre - sensors_m[g]
            dist = np.linalg.norm(ray, axis=1)
            nearer = (dist < own) | ((dist == own) & (g < f))  # a tie: the first frame
            ask = np.flatnonzero(~covered & ~lone & nearer)
            if len(ask) == 0:
                continue
            origins = np.broadcast_to(sensors_m[g], (len(ask), 3))
            t, _ = rc.cast(origins, ray[ask] / dist[ask, None])
            near = np.abs(t - dist[ask]) <= params.cover_m + params.cover_share * dist[ask]
            covered[ask[near]] = True
        keep = ~covered
        faces = m.faces[keep]
        used, inverse = np.unique(faces, return_inverse=True)
        kept.append(
            FrameMesh(m.vertices_m[used], inverse.reshape(-1, 3), m.frame[keep], m.pixels[keep])
        )
    return concatenate(kept)
