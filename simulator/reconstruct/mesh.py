"""Surfaces of real frames: each frame's beam grid triangulated, frames fused into one mesh.

**Triangulation.** Four neighbouring beams (two channels by two columns, the columns
wrapping round a whole revolution) make a quad, cut along the diagonal whose two ranges
agree better. A triangle is kept when its three beams returned (the sky and drop-outs are
never bridged) and the surface it spans is one the beams can have seen continuously: its
normal must not be nearly perpendicular to the beams (``|n . d| >= min_cos``, measured
from the sensor to the triangle's centre). A triangle across a depth edge joins a near
and a far return a fraction of a degree apart, so it lies almost along the beams
(``|n . d|`` is the angular step times the near range over the range jump: 0.003 for a
pole at 5 m before a wall at 15 m with 0.35 deg beams), while the ground at 40 m below a
sensor 2 m up is seen at 0.05. Its edges must also be continuous in orientation: a
triangle whose normal turns by more than ``max_turn_deg`` from both neighbours' along a
row and a column is a lone bridge, not a surface.

**Splats.** A return that no triangle holds (a lone return on a pole, a leaf or a wire;
the rim of a surface, where a beam through a mesh's last vertex may pass either side of
it) still happened. A return on the rim of the frame's triangles, or whose beam, cast at
them, misses them or meets them farther than ``splat_tolerance_m`` from the return (it
is hidden by a nearer triangle), gets a splat of its own, a square facing the beam as wide and as tall as the
beam's share of the grid at that range (the column step and the gap to the
neighbouring channels).

**Fusion.** Frames overlap; their triangles are not stacked. The world is cut into cubes
of ``cell_m``; each cube is owned by the frame that saw it nearest (the least range of
its triangles' centres from that frame's sensor), and only the owner's triangles inside
it are kept. The nearest frame samples a surface most finely and with the least
footprint, which is why it wins. TSDF integration (Open3D's ``ScalableTSDFVolume``) was
the other choice: it averages noise but needs pinhole depth images (a spinning scanner's
grid is not one), smooths edges by its voxel, and costs far more; the range noise here
(about 1 cm) is below what a voxel small enough to keep poles and kerbs would average.

**Simplification.** A flat patch seen by many beams becomes a few large triangles
(Open3D's quadric decimation, stopped at ``max_error_m`` rms from the original
surface), so a face gathers many readings for its reflectance, and the mesh is lighter
to cast against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..raycast import import_open3d
from .grid import BeamGrid

__all__ = ["FrameMesh", "MeshParams", "fuse", "simplify", "triangulate"]


@dataclass(frozen=True)
class MeshParams:
    """How frames become a mesh.

    Attributes
    ----------
    min_cos : float
        Least ``|n . d|`` of a kept triangle (see the module).
    max_turn_deg : float
        Largest turn of the normal to a neighbour that still counts as continuous.
    cell_m : float
        Side of the fusion cubes, m.
    max_error_m : float
        Simplification's bound, m (0: no simplification).
    splat_tolerance_m : float
        A return farther than this from where its beam meets the triangles gets a splat.
    """

    min_cos: float = 0.02
    max_turn_deg: float = 60.0
    cell_m: float = 0.5
    max_error_m: float = 0.0
    splat_tolerance_m: float = 0.05


@dataclass(frozen=True)
class FrameMesh:
    """Triangles in the world frame.

    Attributes
    ----------
    vertices_m : (V, 3) float64
    faces : (F, 3) int64
    frame : (F,) int64
        The frame each face came from.
    """

    vertices_m: NDArray[np.float64]
    faces: NDArray[np.int64]
    frame: NDArray[np.int64]


def _unit_normals(v: NDArray[np.float64], f: NDArray[np.int64]) -> NDArray[np.float64]:
    n = np.cross(v[f[:, 1]] - v[f[:, 0]], v[f[:, 2]] - v[f[:, 0]])
    length = np.linalg.norm(n, axis=1, keepdims=True)
    return np.divide(n, length, out=np.zeros_like(n), where=length > 0)


def triangulate(
    grid: BeamGrid,
    beam_origin_m: NDArray[np.float64],
    pose: NDArray[np.float64],
    frame: int,
    params: MeshParams,
) -> FrameMesh:
    """One frame's returns as triangles in the world frame.

    Parameters
    ----------
    grid : BeamGrid
        The frame; channel rows in elevation order, so neighbouring rows are neighbouring
        beams (the rows are sorted by elevation here when they are not).
    beam_origin_m : (C, W, 3) float64
        Each beam's origin in the sensor frame (for the splats' test).
    pose : (4, 4) float64
        World from sensor.
    frame : int
        The frame's number (kept per face).
    params : MeshParams

    Returns
    -------
    FrameMesh
    """
    c, w = grid.shape
    # rows by elevation, from each beam's direction (the median over its returns)
    xyz = grid.xyz_m
    with np.errstate(invalid="ignore"):
        el = np.arctan2(xyz[..., 2], np.hypot(xyz[..., 0], xyz[..., 1]))
    med = (
        np.nanmedian(np.where(grid.returned, el, np.nan), axis=1)
        if grid.returned.any()
        else np.zeros(c)
    )
    order = np.argsort(np.nan_to_num(med, nan=0.0), kind="stable")[::-1]
    r = grid.range_m[order]
    p = xyz[order].reshape(-1, 3)
    ok = np.isfinite(r)
    idx = np.arange(c * w).reshape(c, w)
    a = idx[:-1, :]
    b = idx[1:, :]
    cc = np.roll(idx, -1, axis=1)[:-1, :]
    d = np.roll(idx, -1, axis=1)[1:, :]
    rf = r.reshape(-1)
    with np.errstate(invalid="ignore"):
        ad = np.abs(rf[a] - rf[d])
        bc = np.abs(rf[b] - rf[cc])
    diag_ad = np.nan_to_num(ad, nan=np.inf) <= np.nan_to_num(bc, nan=np.inf)
    t1 = np.where(diag_ad[..., None], np.stack([a, b, d], -1), np.stack([a, b, cc], -1))
    t2 = np.where(diag_ad[..., None], np.stack([a, d, cc], -1), np.stack([b, d, cc], -1))
    faces = np.concatenate([t1.reshape(-1, 3), t2.reshape(-1, 3)])
    okf = ok.reshape(-1)
    faces = faces[okf[faces].all(axis=1)]
    normal = _unit_normals(p, faces)
    centre = p[faces].mean(axis=1)
    view = centre / np.maximum(np.linalg.norm(centre, axis=1, keepdims=True), 1e-9)
    facing = np.abs((normal * view).sum(axis=1))
    faces = faces[facing >= params.min_cos]
    lone = np.union1d(
        _unheld(p, faces, beam_origin_m[order].reshape(-1, 3), okf, params.splat_tolerance_m),
        _rim(faces),
    )
    sv, sf = _splats(p, beam_origin_m[order].reshape(-1, 3), lone, med[order], w)
    used, inverse = np.unique(faces, return_inverse=True)
    local = np.concatenate([p[used], sv])
    faces = np.concatenate([inverse.reshape(-1, 3), sf + len(used)]).astype(np.int64)
    world = local @ pose[:3, :3].T + pose[:3, 3]
    return FrameMesh(world, faces, np.full(len(faces), frame))


def _rim(faces: NDArray[np.int64]) -> NDArray[np.int64]:
    """The vertices on the mesh's rim (of an edge that only one face has): a beam through
    one may pass either side of it."""
    edges = np.sort(faces[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    unique, counts = np.unique(edges, axis=0, return_counts=True)
    return np.unique(unique[counts == 1])


def _unheld(
    p: NDArray[np.float64],
    faces: NDArray[np.int64],
    origin: NDArray[np.float64],
    returned: NDArray[np.bool_],
    tolerance_m: float,
) -> NDArray[np.int64]:
    """The returns (flat indices) whose own beam misses ``faces`` or meets them farther
    than ``tolerance_m`` from the return."""
    rows = np.flatnonzero(returned)
    ray = p[rows] - origin[rows]
    dist = np.linalg.norm(ray, axis=1)
    if len(faces) == 0:
        return rows
    o3d = import_open3d()
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(
        o3d.core.Tensor(p.astype(np.float32)), o3d.core.Tensor(faces.astype(np.uint32))
    )
    rays = np.concatenate([origin[rows], ray / np.maximum(dist, 1e-9)[:, None]], axis=1)
    t = scene.cast_rays(o3d.core.Tensor(rays.astype(np.float32)))["t_hit"].numpy()
    held = np.isfinite(t) & (np.abs(t - dist) <= tolerance_m)
    return rows[~held]


def _splats(
    p: NDArray[np.float64],
    origin: NDArray[np.float64],
    rows: NDArray[np.int64],
    elevation_rad: NDArray[np.float64],
    columns: int,
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """A square facing the beam at each of ``rows`` (flat indices of a (C, W) grid whose
    rows are in falling elevation): (4 S, 3) vertices and (2 S, 3) faces."""
    if len(rows) == 0:
        return np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64)
    el = np.nan_to_num(elevation_rad, nan=0.0)
    gap = np.abs(np.diff(el))
    gap = np.concatenate(
        [gap[:1], np.maximum(gap[1:], gap[:-1]) if len(gap) > 1 else gap, gap[-1:]]
    )
    gap = np.where(gap > 0, gap, np.median(gap[gap > 0]) if (gap > 0).any() else 0.005)
    ch = rows // columns
    ray = p[rows] - origin[rows]
    r = np.linalg.norm(ray, axis=1)
    d = ray / np.maximum(r, 1e-9)[:, None]
    u = np.cross(d, [0.0, 0.0, 1.0])
    u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-9)
    v = np.cross(u, d)
    hu = (r * np.pi / columns)[:, None] * u
    hv = (0.5 * r * gap[ch])[:, None] * v
    c = p[rows]
    vertices = np.stack([c - hu - hv, c + hu - hv, c + hu + hv, c - hu + hv], axis=1).reshape(-1, 3)
    base = 4 * np.arange(len(rows))[:, None]
    faces = np.concatenate([base + np.array([0, 1, 2]), base + np.array([0, 2, 3])])
    return vertices, faces


def concatenate(meshes: list[FrameMesh]) -> FrameMesh:
    """Several meshes as one (vertices not shared between them)."""
    offsets = np.cumsum([0] + [len(m.vertices_m) for m in meshes[:-1]])
    return FrameMesh(
        np.concatenate([m.vertices_m for m in meshes]),
        np.concatenate([m.faces + o for m, o in zip(meshes, offsets, strict=True)]),
        np.concatenate([m.frame for m in meshes]),
    )


def fuse(meshes: list[FrameMesh], sensors_m: NDArray[np.float64], params: MeshParams) -> FrameMesh:
    """Overlapping frames' triangles fused: each cube of ``params.cell_m`` keeps the
    triangles of the frame that saw it nearest (see the module).

    Parameters
    ----------
    meshes : list of FrameMesh
        One per frame (``frame`` indexes ``sensors_m``).
    sensors_m : (K, 3) float64
        Each frame's sensor position in the world.
    params : MeshParams
    """
    whole = concatenate(meshes)
    if len(meshes) == 1 or len(whole.faces) == 0:
        return whole
    centre = whole.vertices_m[whole.faces].mean(axis=1)
    dist = np.linalg.norm(centre - sensors_m[whole.frame], axis=1)
    cell = np.floor(centre / params.cell_m).astype(np.int64)
    _, key = np.unique(cell, axis=0, return_inverse=True)
    key = key.reshape(-1)
    # the owner of a cube: the frame of its nearest triangle
    order = np.lexsort((dist, key))
    first = np.ones(len(order), dtype=bool)
    first[1:] = key[order][1:] != key[order][:-1]
    owner = np.empty(key.max() + 1, dtype=np.int64)
    owner[key[order][first]] = whole.frame[order][first]
    keep = whole.frame == owner[key]
    faces = whole.faces[keep]
    used, inverse = np.unique(faces, return_inverse=True)
    return FrameMesh(whole.vertices_m[used], inverse.reshape(-1, 3), whole.frame[keep])


def simplify(mesh: FrameMesh, params: MeshParams) -> FrameMesh:
    """Flat patches merged into larger triangles by quadric decimation, within
    ``params.max_error_m`` of the surface; each frame's part is simplified on its own (its
    faces keep their frame)."""
    if params.max_error_m <= 0 or len(mesh.faces) == 0:
        return mesh
    o3d = import_open3d()
    parts = []
    for k in np.unique(mesh.frame):
        faces = mesh.faces[mesh.frame == k]
        used, inverse = np.unique(faces, return_inverse=True)
        tm = o3d.geometry.TriangleMesh(
            o3d.utility.Vector3dVector(mesh.vertices_m[used]),
            o3d.utility.Vector3iVector(inverse.reshape(-1, 3).astype(np.int32)),
        )
        out = tm.simplify_quadric_decimation(
            target_number_of_triangles=1, maximum_error=params.max_error_m**2
        )
        out.remove_degenerate_triangles()
        out.remove_unreferenced_vertices()
        f = np.asarray(out.triangles, dtype=np.int64)
        parts.append(FrameMesh(np.asarray(out.vertices, dtype=np.float64), f, np.full(len(f), k)))
    return concatenate(parts)
