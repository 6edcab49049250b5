"""Hits refined in float64 (issue 49, point 1): the kernel against the specification value
for value, the refined hit on its triangle, and ties decided the same way every time."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from simulator.backend import Backend
from simulator.world.raycast import import_open3d
from simulator.world.refine import (
    INVALID_ID,
    RefinedScene,
    moller_trumbore,
    refine_hits,
    resolve_ties,
)
from simulator.world.triangles import OVERLAP_MARGIN_M, Triangles, vertex_points


def _quad(z: float, size: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """A square of side ``2 * size`` at height ``z``, two triangles sharing a diagonal."""
    v = np.array([[-size, -size, z], [size, -size, z], [size, size, z], [-size, size, z]])
    return v, np.array([[0, 1, 2], [0, 2, 3]])


def _scene(refine=None) -> RefinedScene:  # type: ignore[no-untyped-def]
    """A sphere, two coincident squares of different geometries, and a square above."""
    sphere = trimesh.creation.icosphere(subdivisions=3, radius=1.5)
    parts = [
        (np.asarray(sphere.vertices) + np.array([0.0, 0.0, 5.0]), np.asarray(sphere.faces)),
        _quad(0.0),
        _quad(0.0),
        _quad(2.0, 0.5),
    ]
    return RefinedScene(import_open3d(), [p[0] for p in parts], [p[1] for p in parts], refine)


def _rays(n: int, seed: int = 1) -> np.ndarray:
    """(n, 6) float32 rays from above, aimed at points of the plane z = 0 and the sphere,
    a tenth of them straight down, exactly onto the squares' shared diagonal."""
    rng = np.random.default_rng(seed)
    origin = rng.uniform(-3.0, 3.0, (n, 3)) + np.array([0.0, 0.0, 12.0])
    target = rng.uniform(-2.5, 2.5, (n, 3)) * [1.0, 1.0, 0.0]
    target[: n // 3, 2] = 5.0  # the sphere's height
    direction = target - origin
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    rays = np.concatenate([origin, direction], axis=1).astype(np.float32)
    diagonal = rng.uniform(-1.0, 1.0, n // 10).astype(np.float32)  # outside the square above
    diagonal += np.where(diagonal < 0, -0.6, 0.6).astype(np.float32)
    rays[-len(diagonal) :] = 0.0
    rays[-len(diagonal) :, 0] = rays[-len(diagonal) :, 1] = diagonal
    rays[-len(diagonal) :, 2] = 12.0
    rays[-len(diagonal) :, 5] = -1.0
    return rays


def _refined_alike(scene: RefinedScene, rays: np.ndarray, backend: Backend) -> tuple:
    """Embree's raw hits of ``rays`` in ``scene`` (t, geometry, primitive, normal) and the
    specification's refinement of them, which the backend's equals bit for bit (asserted)."""
    o3d = import_open3d()
    res = scene.scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
    raw = [res[k].numpy() for k in ("t_hit", "geometry_ids", "primitive_ids", "primitive_normals")]
    want = refine_hits(rays, *raw, scene.triangles)
    got = backend.refine_hits(rays, *raw, scene.triangles)
    for w, g in zip(want, got, strict=True):
        assert w.dtype == g.dtype and w.shape == g.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))
    return raw, want


def test_refine_kernel_matches_the_specification(backend: Backend) -> None:
    """Ranges, normals and ties, bit for bit, on Embree's raw hits."""
    scene = _scene()
    rays = _rays(20_000)
    raw, want = _refined_alike(scene, rays, backend)
    args = (rays, *raw, scene.triangles)
    assert 0 < len(want[3]) < len(rays)  # the diagonal and the sphere's edges
    # nothing to refine: typed empty answers
    empty = backend.refine_hits(rays[:0], *(a[:0] for a in args[1:5]), scene.triangles)
    assert [a.shape for a in empty] == [(0,), (0, 3), (0,), (0,)]


@pytest.mark.parametrize("copies", [1, 2])
def test_refine_kernel_matches_the_specification_where_partners_hold_the_hit(
    copies: int, backend: Backend
) -> None:
    """Ranges, normals and faces bit for bit among ``copies`` coincident squares and one
    shifted over part of them: hits that no partner holds, that one holds (the kernel's
    single-holder shortcut) and, with two copies, that two hold (its second pass)."""
    v, f = _quad(0.0)
    quads = [(v, f)] * copies + [(v + np.array([1.0, 0.5, 0.0]), f)]
    scene = RefinedScene(import_open3d(), [q[0] for q in quads], [q[1] for q in quads])
    rays = _rays(20_000)
    raw, want = _refined_alike(scene, rays, backend)
    # how many partners hold each hit away from its face's edges
    tri = scene.triangles
    hit = np.flatnonzero(raw[1] != INVALID_ID)
    away = np.setdiff1d(hit, want[3])
    face = tri.face_start[raw[1][away].astype(np.int64)] + raw[2][away].astype(np.int64)
    k, partner = tri.partners(face)
    r = rays[away][k].astype(np.float64)
    corners = tri.faces[partner]
    v0, v1, v2 = (tri.vertices_m[corners[:, c]] for c in range(3))
    t, u, w, *_ = moller_trumbore(r[:, :3], r[:, 3:], v0, v1, v2)
    holds = (t >= 0) & (u >= 0) & (w >= 0) & (1.0 - u - w >= 0)
    holders = np.bincount(k[holds], minlength=len(away))
    assert np.any(holders == 0) and np.any(holders == 1)
    assert np.any(holders >= 2) == (copies == 2)


def test_partner_boxes_hold_their_faces_with_the_margin() -> None:
    """The kernel's partners (it skips one whose box its ray misses, and the rest once the
    boxes begin beyond the ray's reach in x) are each face's own, by their boxes' lowest
    x, and each box holds its partner's three corners with at least
    :data:`OVERLAP_MARGIN_M` to spare on every side, and by no more than float32's
    rounding beyond that: a partner that holds a hit is never skipped, and most that do
    not are."""
    v, f = _quad(0.0)
    quads = [(v, f), (v, f), (v + np.array([1.0, 0.5, 0.0]), f), (v * 100.0 + 1e3, f)]
    tri = RefinedScene(import_open3d(), [q[0] for q in quads], [q[1] for q in quads]).triangles
    partner, boxes = tri.partner_boxes
    assert boxes.dtype == np.float32 and boxes.shape == (len(tri.partner_faces), 6)
    assert partner.dtype == tri.partner_faces.dtype
    assert len(partner) == 3 * 2 * 2 * 2  # each of the first three's faces: 4
    for face in range(len(tri.faces)):
        rows = slice(tri.partner_start[face], tri.partner_start[face + 1])
        np.testing.assert_array_equal(np.sort(partner[rows]), tri.partner_faces[rows])
        assert np.all(np.diff(boxes[rows, 0]) >= 0)
    corners = tri.vertices_m[tri.faces[partner]]  # (Q, 3, 3)
    lo, hi = corners.min(axis=1), corners.max(axis=1)
    assert np.all(lo - boxes[:, :3] >= OVERLAP_MARGIN_M)
    assert np.all(boxes[:, 3:] - hi >= OVERLAP_MARGIN_M)
    spare = np.spacing(np.abs(boxes).astype(np.float32)).astype(np.float64) * 2
    assert np.all(lo - boxes[:, :3] <= OVERLAP_MARGIN_M + spare[:, :3])
    assert np.all(boxes[:, 3:] - hi <= OVERLAP_MARGIN_M + spare[:, 3:])


def test_refined_hits_lie_on_their_triangle_and_ties_go_to_the_lowest_ids(
    backend: Backend,
) -> None:
    """The refined point is on the plane of its triangle to float32 rounding; coincident
    faces go to the lower geometry, the diagonal to the lower primitive; misses stay
    misses."""
    scene = _scene(backend.refine_hits)
    rays = _rays(20_000, seed=2)
    cast = scene.cast(rays)
    hit = cast.geometry >= 0
    assert hit.mean() > 0.5 and (~hit).any()
    assert np.all(np.isinf(cast.t[~hit])) and np.all(cast.normal[~hit] == 0)
    tri: Triangles = scene.triangles
    face = tri.face_start[cast.geometry[hit]] + cast.primitive[hit]
    v0 = tri.vertices_m[tri.faces[face, 0]]
    point = rays[hit, :3].astype(np.float64) + cast.t[hit, None] * rays[hit, 3:]
    off_plane = np.abs(((point - v0) * cast.normal[hit]).sum(axis=1))
    assert off_plane.max() < 1e-5 * max(1.0, float(np.abs(point).max()))
    np.testing.assert_allclose(np.linalg.norm(cast.normal[hit], axis=1), 1.0, atol=1e-6)
    # the plane z = 0 belongs to geometries 1 and 2, coincident: 1 always wins
    on_ground = hit & (np.abs(point_z := rays[:, 2] + cast.t * rays[:, 5]) < 1e-4)
    assert on_ground.sum() > 1000 and np.all(cast.geometry[on_ground] == 1)
    del point_z
    # rays exactly at the diagonal x == y of the ground take the lower primitive
    diagonal = on_ground & (rays[:, 0] == rays[:, 1]) & (rays[:, 5] == -1.0)
    assert diagonal.sum() > 1000 and np.all(cast.primitive[diagonal] == 0)


def test_a_casts_ids_are_embrees_unless_the_refinement_moved_the_hit(backend: Backend) -> None:
    """Where the refinement keeps Embree's face, the cast's (geometry, primitive) are
    Embree's; a miss is (-1, -1); where it moves the hit (among two coincident squares
    and one shifted over part of them, to the nearest then lowest face that holds it, as
    the partners' test checks), they are the new face's, as
    :meth:`Triangles.geometry_of` maps it."""
    v, f = _quad(0.0)
    quads = [(v, f), (v, f), (v + np.array([1.0, 0.5, 0.0]), f)]
    scene = RefinedScene(import_open3d(), [q[0] for q in quads], [q[1] for q in quads],
                         backend.refine_hits)  # fmt: skip
    tri = scene.triangles
    rays = _rays(20_000)
    cast = scene.cast(rays)
    assert cast.geometry.dtype == cast.primitive.dtype == np.int32
    res = scene.scene.cast_rays(import_open3d().core.Tensor.from_numpy(rays))
    g, p = (res[k].numpy().astype(np.int64) for k in ("geometry_ids", "primitive_ids"))
    hit = g != INVALID_ID
    np.testing.assert_array_equal(cast.geometry < 0, ~hit)
    assert np.all(cast.geometry[~hit] == -1) and np.all(cast.primitive[~hit] == -1)
    face = tri.face_start[cast.geometry[hit]] + cast.primitive[hit]
    moved = face != tri.face_start[g[hit]] + p[hit]
    assert moved.sum() > 1000 and (~moved).sum() > 1000  # (7,206 and 5,559)
    np.testing.assert_array_equal(cast.geometry[hit][~moved], g[hit][~moved])
    np.testing.assert_array_equal(cast.primitive[hit][~moved], p[hit][~moved])
    for got, want in zip((cast.geometry[hit], cast.primitive[hit]), tri.geometry_of(face),
                         strict=True):  # fmt: skip
        np.testing.assert_array_equal(got, want)


def test_refinement_does_not_depend_on_embrees_range_bits() -> None:
    """Embree's range and normal are only a fallback: perturbed in their last bits, the
    refinement gives the same answer."""
    scene = _scene()
    rays = _rays(5_000, seed=3)
    o3d = import_open3d()
    res = scene.scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
    t, g, p, n = (res[k].numpy() for k in ("t_hit", "geometry_ids", "primitive_ids",
                                           "primitive_normals"))  # fmt: skip
    hit = g != INVALID_ID
    t2 = t.copy()
    t2[hit] = np.nextafter(t[hit], np.float32(np.inf))
    n2 = (n * np.float32(1.0 + 2**-22)).astype(np.float32)
    a = refine_hits(rays, t, g, p, n, scene.triangles)
    b = refine_hits(rays, t2, g, p, n2, scene.triangles)
    fine = np.setdiff1d(np.flatnonzero(hit), a[3])  # not ties: refined without fallback
    for x, y in zip(a[:3], b[:3], strict=True):
        np.testing.assert_array_equal(x[fine], y[fine])


@pytest.mark.parametrize("geometries", [1, 3])
def test_shared_faces_are_the_coincident_ones_of_other_geometries(geometries: int) -> None:
    """One square alone shares nothing; three geometries (two coincident squares and one
    above) share exactly the coincident squares' faces."""
    quads = [_quad(0.0), _quad(0.0), _quad(1.0)][:geometries]
    tri = Triangles.pack(
        [q[0].astype(np.float32) for q in quads], [q[1].astype(np.uint32) for q in quads]
    )
    want = [False] * 2 if geometries == 1 else [True] * 4 + [False] * 2
    assert tri.shared.tolist() == want


def test_the_geometry_of_a_face_is_the_one_whose_range_holds_it() -> None:
    """Every face (and a miss, -1) mapped to (geometry, primitive), geometries of 320, 0
    and 2 faces among them: the face is ``face_start[geometry] + primitive``, the primitive
    within the geometry's count; a miss is (-1, -1). No face at all: every row a miss."""
    sphere = trimesh.creation.icosphere(subdivisions=2)
    parts = [(np.asarray(sphere.vertices), np.asarray(sphere.faces)),
             (np.zeros((0, 3)), np.zeros((0, 3), np.int64)), _quad(0.0)]  # fmt: skip
    tri = Triangles.pack(
        [p[0].astype(np.float32) for p in parts], [p[1].astype(np.uint32) for p in parts]
    )
    assert len(sphere.faces) == 320
    face = np.r_[-1, np.arange(len(tri.faces))[::-1], -1].astype(np.int64)
    g, p = tri.geometry_of(face)
    assert g.dtype == p.dtype == np.int32
    want_g = np.r_[-1, np.where(face[1:-1] >= 320, 2, 0), -1]  # (geometry 1 has none)
    np.testing.assert_array_equal(g, want_g)
    np.testing.assert_array_equal(p, np.r_[-1, np.where(face[1:-1] >= 320, face[1:-1] - 320,
                                                        face[1:-1]), -1])  # fmt: skip
    empty = Triangles.pack([np.zeros((0, 3), np.float32)], [np.zeros((0, 3), np.uint32)])
    g, p = empty.geometry_of(np.full(3, -1, np.int64))
    assert g.tolist() == p.tolist() == [-1, -1, -1]


def test_a_tie_is_decided_the_same_from_either_triangle_embree_found() -> None:
    """At the squares' diagonal, whichever of the two triangles (or the coincident square's)
    Embree reports, and whatever else ``list_intersections`` reports, the winner is the
    same: the lowest face that holds the hit in float64."""
    scene = _scene()
    tri = scene.triangles
    rays = _rays(2_000, seed=4)[-200:]  # straight down onto the diagonal
    m = np.arange(len(rays))
    first = tri.face_start[1]  # geometry 1's faces, then geometry 2's coincident ones
    got = [resolve_ties(rays, m, np.full(len(rays), first + f, np.int64), tri) for f in range(4)]
    for g in got:
        np.testing.assert_array_equal(g, first)
    both = resolve_ties(
        rays, np.r_[m, m], np.r_[np.full(len(m), first + 3), np.full(len(m), 2)], tri
    )
    np.testing.assert_array_equal(both, first)


def test_a_coplanar_tie_is_decided_in_the_refinement_whichever_face_embree_found(
    backend: Backend,
) -> None:
    """On the coincident squares, away from their edges, the refinement itself (not the
    tie path) gives the same range, normal and face whether Embree reported geometry 1's
    triangle or geometry 2's: the lower one, geometry 1's."""
    scene = _scene()
    tri = scene.triangles
    rays = _rays(8_000, seed=5)
    o3d = import_open3d()
    res = scene.scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
    t, g, p, n = (res[k].numpy() for k in ("t_hit", "geometry_ids", "primitive_ids",
                                           "primitive_normals"))  # fmt: skip
    ground = (g == 1) | (g == 2)
    answers = []
    for reported in (1, 2):
        g2 = g.copy()
        g2[ground] = reported
        answers.append(backend.refine_hits(rays, t, g2, p, n, tri))
    (t1, n1, f1, ties1), (t2, n2, f2, ties2) = answers
    np.testing.assert_array_equal(ties1, ties2)
    away = np.setdiff1d(np.flatnonzero(ground), ties1)
    assert len(away) > 1000
    np.testing.assert_array_equal(f2[away], tri.face_start[1] + p[away].astype(np.int64))
    for a, b in ((t1, t2), (n1, n2), (f1, f2)):
        np.testing.assert_array_equal(a[away].view(np.uint8), b[away].view(np.uint8))


def test_ties_are_the_hits_on_an_edge(backend: Backend) -> None:
    """Every ray aimed exactly at the squares' shared diagonal is a tie (float64 cannot
    tell its two triangles apart there, so neither Embree's choice nor the refinement may
    decide it alone); every other tie is within float64's rounding of an edge."""
    scene = _scene()
    tri = scene.triangles
    rays = _rays(20_000, seed=6)
    o3d = import_open3d()
    res = scene.scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
    raw = [res[k].numpy() for k in ("t_hit", "geometry_ids", "primitive_ids", "primitive_normals")]
    _, _, face, ties = backend.refine_hits(rays, *raw, tri)
    ground = np.flatnonzero((raw[1] == 1) | (raw[1] == 2))
    diagonal = ground[(rays[ground, 0] == rays[ground, 1]) & (rays[ground, 5] == -1.0)]
    assert len(diagonal) > 1000 and np.isin(diagonal, ties).all()
    r = rays[ties].astype(np.float64)
    corners = tri.faces[face[ties]]
    _, u, v, *_ = moller_trumbore(
        r[:, :3], r[:, 3:], *(tri.vertices_m[corners[:, k]] for k in range(3))
    )
    assert np.abs(np.minimum(np.minimum(u, v), 1.0 - u - v)).max() < 1e-9


def _void_points(vertices_m: np.ndarray) -> np.ndarray:
    """The points of ``vertices_m`` (V, 3) by a sort of their float32 rows' bytes."""
    rows = np.ascontiguousarray(vertices_m.astype(np.float32) + np.float32(0))
    return np.unique(rows.view(np.dtype((np.void, 12))).ravel(), return_inverse=True)[1].ravel()


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two labellings of the same items group them alike."""
    pairs = np.unique(np.stack([a, b], axis=1), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))


def test_equal_vertices_are_one_point_whatever_their_key() -> None:
    """:func:`vertex_points` groups the vertices exactly as a sort of their float32 bytes
    does (-0.0 and 0.0 one point; float64 values that round to one float32 one point),
    also where two different rows share the 64-bit key it sorts by (its check then falls
    back to the rows' own sort); the points are numbered 0..P-1."""
    rng = np.random.default_rng(3)
    v = rng.normal(0.0, 30.0, (5000, 3)).astype(np.float32).astype(np.float64)
    v = np.concatenate([v, v[rng.integers(0, 5000, 3000)]])
    v[:50] = 0.0
    v[50:100] = -0.0
    v[100:110] = v[110:120] + 1e-12  # the same float32
    # a row whose key is the first row's: x, y words XOR the z word's product
    bits = np.ascontiguousarray(v[:1].astype(np.float32)).view(np.uint32).astype(np.uint64)
    for w in range(1, 1000):
        xy = (
            ((bits[0, 0] << np.uint64(32)) | bits[0, 1])
            ^ ((bits[0, 2] ^ np.uint64(w)) * np.uint64(0x9E3779B97F4A7C15))
            ^ (bits[0, 2] * np.uint64(0x9E3779B97F4A7C15))
        )
        words = np.array([xy >> np.uint64(32), xy & np.uint64(0xFFFFFFFF), bits[0, 2] ^ w])
        twin = words.astype(np.uint32).view(np.float32)
        if np.isfinite(twin).all():
            break
    collided = np.concatenate([v, twin.astype(np.float64)[None]])
    for vertices in (v, collided):
        point, points = vertex_points(vertices)
        expected = _void_points(vertices)
        assert point.dtype == np.int32 and points == len(np.unique(expected))
        assert np.array_equal(np.unique(point), np.arange(points))
        assert _same_partition(point, expected)
    assert vertex_points(collided)[0][0] != vertex_points(collided)[0][-1]
