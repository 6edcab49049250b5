"""Build the bundled farm-yard demo scene: ``scene.yaml`` and the mesh files in ``meshes/``.

Run from anywhere (``python scenes/farm/build_farm.py``); everything is written next to
this file. The output is deterministic: the only randomness is a fixed-seed generator
(``numpy.random.default_rng(7)``) that places the trees.

The scene is a farm yard around the sensor, which stands at the world origin at 1.8 m
(world frame: x east/forward, y north/left, z up, metres). Each item lies 5-45 m away so
that a 32-channel scanner (elevations +15 to -55 deg) sees it from the one pose.

========================  ======================================  ==========================
Object                    Where (world)                           Geometry / material
========================  ======================================  ==========================
grass ground              120 x 120 m centred on the origin       plane, grass
gravel track              y = -6..-2 m, x = -50..50 m, z = 0.02   plane, gravel
ploughed field            x = -4.9..34.9, y = -42..-12 (south)    ``meshes/ploughed_field.ply``
barn                      12 x 8 m centred at (-3, 21) (north)    ``meshes/barn.obj``
shed                      4 x 3 x 2.5 m at (-12, 4) (west)        box walls + tilted box roof
pickup                    on the track at (7, -4), ~8 m           ``meshes/vehicle.glb``
trees (8)                 10-35 m away, clear of the rest         cylinder trunk + ellipsoid
fence                     x = 15 m (east), y = 0..25 m            wooden posts and two rails
road sign                 at (-8, -7), plate facing the origin    pole + retroreflective plate
========================  ======================================  ==========================

Notes
-----
The ploughed field is a closed solid whose top is the furrow profile
``z = 0.06 + 0.06 cos(2 pi x / 0.75)`` (ridges along y, 0.75 m apart, 8 samples per
furrow across, 3 m along); it is placed 0.02 m up, so its bottom is at 0.01 m and every
part of it is above the grass. The barn OBJ holds two closed shells, the walls
(``usemtl building_wall``) and a gabled roof with overhangs (``usemtl roof_metal``,
ridge at 8 m). The pickup GLB holds three closed meshes whose glTF materials are named
``car_paint``, ``glass`` and ``painted_metal``. Mesh materials are matched to the
library by name, so the barn and the pickup have no ``material:`` key in the scene.
Tree trunks and crowns share an instance id per tree (1..8); the pickup gets the next id.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import trimesh
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
MESH_DIR = HERE / "meshes"

SEED = 7
N_TREES = 8

# Ploughed field: furrow period and amplitude, samples per furrow, sampling along the ridge.
FURROW_PERIOD_M = 0.75
FURROW_COUNT = 53  # 39.75 m across the furrows
FIELD_WIDTH_M = 30.0  # along the ridges
SAMPLES_PER_FURROW = 8
RIDGE_STEP_M = 3.0
FIELD_CENTRE_M = (15.0, -27.0, 0.02)

BARN_CENTRE_M = (-3.0, 21.0, 0.0)
SHED_CENTRE_M = (-12.0, 4.0)
SHED_YAW_DEG = 15.0
VEHICLE_POSITION_M = (7.0, -4.0, 0.02)  # on the gravel track
VEHICLE_YAW_DEG = 8.0
TRACK_Y_M = (-6.0, -2.0)
FENCE_X_M = 15.0
FENCE_Y_M = (0.0, 25.0)
SIGN_POSITION_M = (-8.0, -7.0)

Array = NDArray[np.float64]


# --------------------------------------------------------------------------- mesh helpers


def _closed(vertices: Array, faces: NDArray[np.int64]) -> trimesh.Trimesh:
    """A closed mesh with outward winding (faces flipped if the signed volume is negative)."""
    mesh = trimesh.Trimesh(vertices=vertices, faces=faces, process=False)
    if not (mesh.is_watertight and mesh.is_winding_consistent):
        raise RuntimeError("built a mesh that is not closed and consistently wound")
    if mesh.volume < 0:
        mesh.invert()
    return mesh


def hexahedron(corners: Array) -> trimesh.Trimesh:
    """A closed six-faced solid from 8 corners: a quad ring, then the ring opposite it.

    Corners ``4 + i`` face corners ``i``; the ring may run either way round.
    """
    ring = np.arange(4)
    nxt = (ring + 1) % 4
    sides = np.concatenate(
        [np.stack([ring, nxt, nxt + 4], 1), np.stack([ring, nxt + 4, ring + 4], 1)]
    )
    faces = np.concatenate([[[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7]], sides])
    return _closed(np.asarray(corners, dtype=np.float64), faces)


def box(lo: tuple[float, float, float], hi: tuple[float, float, float]) -> trimesh.Trimesh:
    """An axis-aligned box from its low and high corners."""
    (x0, y0, z0), (x1, y1, z1) = lo, hi
    ring = [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]
    return hexahedron(np.array([[x, y, z0] for x, y in ring] + [[x, y, z1] for x, y in ring]))


def slab(quad: Array, normal: Array, inner_m: float, outer_m: float) -> trimesh.Trimesh:
    """A thin closed panel over a planar quad, from ``inner_m`` to ``outer_m`` along ``normal``."""
    quad = np.asarray(quad, dtype=np.float64)
    return hexahedron(np.concatenate([quad + inner_m * normal, quad + outer_m * normal]))


def extrude_x(profile_yz: Array, cap: NDArray[np.int64], x0: float, x1: float) -> trimesh.Trimesh:
    """A prism: a closed polygon in the (y, z) plane swept from ``x = x0`` to ``x = x1``.

    ``cap`` triangulates the polygon with the same turning sense as the ring.
    """
    profile_yz = np.asarray(profile_yz, dtype=np.float64)
    n = len(profile_yz)
    k = np.arange(n)
    nxt = (k + 1) % n
    vertices = np.concatenate([np.column_stack([np.full(n, x), profile_yz]) for x in (x0, x1)])
    cap = np.asarray(cap, dtype=np.int64)
    faces = np.concatenate(
        [
            cap[:, ::-1],  # the x0 end faces the other way
            cap + n,
            np.stack([k, nxt, nxt + n], 1),
            np.stack([k, nxt + n, k + n], 1),
        ]
    )
    return _closed(vertices, faces)


def cylinder_y(
    radius_m: float, width_m: float, centre: tuple[float, float, float]
) -> trimesh.Trimesh:
    """A closed cylinder with its axis along y (a wheel)."""
    turn = trimesh.transformations.rotation_matrix(math.pi / 2, [1.0, 0.0, 0.0])
    turn[:3, 3] = centre
    return trimesh.creation.cylinder(radius=radius_m, height=width_m, sections=24, transform=turn)


# --------------------------------------------------------------------------- ploughed field


def ploughed_field() -> trimesh.Trimesh:
    """The ploughed field as a closed solid, centred on its local origin.

    Top: ``z = 0.06 + 0.06 cos(2 pi x / 0.75)`` on a grid of 8 samples per furrow across
    (x) and ``RIDGE_STEP_M`` along the ridges (y). Bottom: the plane ``z = -0.01``, made of
    one strip of long triangles; the four side walls join it to the top's rim.
    """
    length = FURROW_COUNT * FURROW_PERIOD_M
    nx = FURROW_COUNT * SAMPLES_PER_FURROW + 1
    ny = round(FIELD_WIDTH_M / RIDGE_STEP_M) + 1
    x = np.linspace(-length / 2, length / 2, nx)
    y = np.linspace(-FIELD_WIDTH_M / 2, FIELD_WIDTH_M / 2, ny)
    z_top = 0.06 + 0.06 * np.cos(2 * np.pi * x / FURROW_PERIOD_M)
    gx, gy = np.meshgrid(x, y)  # (ny, nx): row j is y[j]
    top = np.column_stack([gx.ravel(), gy.ravel(), np.tile(z_top, ny)])
    bottom = np.column_stack([np.tile(x, 2), np.repeat(y[[0, -1]], nx), np.full(2 * nx, -0.01)])
    vertices = np.concatenate([top, bottom])

    def t(j: NDArray[np.int64] | int, i: NDArray[np.int64] | int) -> NDArray[np.int64]:
        return np.asarray(j * nx + i)

    a = nx * ny + np.arange(nx)  # bottom vertices under the south rim (y = -W/2)
    b = a + nx  # under the north rim
    i = np.arange(nx - 1)
    jj, ii = np.meshgrid(np.arange(ny - 1), i, indexing="ij")
    jj, ii = jj.ravel(), ii.ravel()
    c00, c10, c11, c01 = t(jj, ii), t(jj, ii + 1), t(jj + 1, ii + 1), t(jj + 1, ii)
    s, n = t(0, i), t(ny - 1, i)  # top rims, south and north
    j = np.arange(ny - 1)
    w, e = t(j, 0), t(j, nx - 1)  # top rims, west and east
    faces = np.concatenate(
        [
            np.stack([c00, c10, c11], 1),  # top, normal +z
            np.stack([c00, c11, c01], 1),
            np.stack([a[i], b[i + 1], a[i + 1]], 1),  # bottom, normal -z
            np.stack([a[i], b[i], b[i + 1]], 1),
            np.stack([a[i], a[i + 1], s + 1], 1),  # south wall, normal -y
            np.stack([a[i], s + 1, s], 1),
            np.stack([b[i], n + 1, b[i + 1]], 1),  # north wall, normal +y
            np.stack([b[i], n, n + 1], 1),
            np.stack([np.full(ny - 1, a[0]), w, w + nx], 1),  # west wall, normal -x
            [[a[0], t(ny - 1, 0), b[0]]],
            np.stack([np.full(ny - 1, a[-1]), e + nx, e], 1),  # east wall, normal +x
            [[a[-1], b[-1], t(ny - 1, nx - 1)]],
        ]
    ).astype(np.int64)
    mesh = _closed(vertices, faces)
    if mesh.face_normals[0, 2] <= 0:
        raise RuntimeError("ploughed field: top surface faces down")
    return mesh


# --------------------------------------------------------------------------- barn


def barn_parts() -> dict[str, trimesh.Trimesh]:
    """The barn's two closed shells by material name, floor centre at the local origin.

    Walls: a pentagonal prism 12 m (x) by 8 m (y), eaves at 5 m, which reaches 2 cm into
    the roof. Roof: a 0.15 m thick gabled shell (ridge along x at 8 m) with 0.4 m overhang
    at the eaves and 0.3 m at the gables.
    """
    half_l, half_w, eave, ridge, thick = 6.0, 4.0, 5.0, 8.0, 0.15
    slope = (ridge - thick - eave) / half_w
    walls = extrude_x(
        [
            [-half_w, 0.0],
            [half_w, 0.0],
            [half_w, eave + 0.02],
            [0.0, ridge - thick + 0.02],
            [-half_w, eave + 0.02],
        ],
        [[0, 1, 2], [0, 2, 3], [0, 3, 4]],
        -half_l,
        half_l,
    )
    ow = half_w + 0.4
    z_out = ridge - slope * ow
    roof = extrude_x(
        [
            [-ow, z_out],
            [0.0, ridge],
            [ow, z_out],
            [ow, z_out - thick],
            [0.0, ridge - thick],
            [-ow, z_out - thick],
        ],
        [[0, 1, 4], [0, 4, 5], [1, 2, 3], [1, 3, 4]],
        -half_l - 0.3,
        half_l + 0.3,
    )
    return {"building_wall": walls, "roof_metal": roof}


def write_obj(path: Path, parts: dict[str, trimesh.Trimesh], colours: dict[str, str]) -> None:
    """Write closed parts to one OBJ (one ``usemtl`` group each) and its ``.mtl`` file."""
    mtl = path.with_suffix(".mtl")
    lines = ["# generated by build_farm.py", f"mtllib {mtl.name}"]
    faces: list[str] = []
    offset = 1
    for name, mesh in parts.items():
        lines += [f"v {x:.4f} {y:.4f} {z:.4f}" for x, y, z in mesh.vertices]
        faces += [f"g {name}", f"usemtl {name}"]
        faces += [f"f {a} {b} {c}" for a, b, c in mesh.faces + offset]
        offset += len(mesh.vertices)
    path.write_text("\n".join(lines + faces) + "\n")
    mtl.write_text(
        "# generated by build_farm.py\n"
        + "".join(f"newmtl {name}\nKd {colours[name]}\n" for name in parts)
    )


# --------------------------------------------------------------------------- vehicle


def _face_window(
    quad: Array, centre: Array, u: tuple[float, float], v: tuple[float, float]
) -> trimesh.Trimesh:
    """A glass slab on part of a planar cab face, and the face's outward normal.

    ``quad`` is bottom-left, bottom-right, top-right, top-left; ``u`` and ``v`` are the
    window's span as fractions along the bottom edge and up the face.
    """
    q = np.asarray(quad, dtype=np.float64)

    def at(s: float, r: float) -> Array:
        return (1 - r) * ((1 - s) * q[0] + s * q[1]) + r * ((1 - s) * q[3] + s * q[2])

    window = np.array([at(u[0], v[0]), at(u[1], v[0]), at(u[1], v[1]), at(u[0], v[1])])
    normal = np.cross(q[1] - q[0], q[3] - q[0])
    normal /= np.linalg.norm(normal)
    if np.dot(normal, q.mean(0) - centre) < 0:
        normal = -normal
    return slab(window, normal, -0.005, 0.012)


def vehicle_parts() -> dict[str, trimesh.Trimesh]:
    """A pickup (4.5 x 1.8 x 1.6 m, x forward, wheels on z = 0) as meshes by material name."""
    # The parts overlap slightly instead of touching, so no two shells share a face.
    half_w = 0.88
    bed_x = (-2.245, -0.68)
    body = [
        box((-2.25, -half_w, 0.5), (2.25, half_w, 1.0)),  # lower body; hood at 1.0 m
        box((bed_x[0], -0.875, 0.98), (bed_x[1], -0.8, 1.45)),  # bed sides
        box((bed_x[0], 0.8, 0.98), (bed_x[1], 0.875, 1.45)),
        box((-2.24, -0.81, 0.98), (-2.16, 0.81, 1.42)),  # tailgate
        box((bed_x[1] - 0.085, -0.81, 0.98), (bed_x[1] - 0.005, 0.81, 1.45)),  # bed front wall
    ]
    lo = [[-0.6, -0.84, 0.98], [1.1, -0.84, 0.98], [1.1, 0.84, 0.98], [-0.6, 0.84, 0.98]]
    hi = [[-0.5, -0.74, 1.6], [0.55, -0.74, 1.6], [0.55, 0.74, 1.6], [-0.5, 0.74, 1.6]]
    cab = np.array(lo + hi)
    body.append(hexahedron(cab))
    centre = cab.mean(0)
    b0, b1, b2, b3, t0, t1, t2, t3 = cab
    glass = [
        _face_window(np.array([b1, b2, t2, t1]), centre, (0.06, 0.94), (0.3, 0.93)),  # windshield
        _face_window(np.array([b3, b0, t0, t3]), centre, (0.08, 0.92), (0.45, 0.9)),  # rear
        _face_window(np.array([b0, b1, t1, t0]), centre, (0.08, 0.9), (0.4, 0.9)),  # right
        _face_window(np.array([b2, b3, t3, t2]), centre, (0.1, 0.92), (0.4, 0.9)),  # left
    ]
    wheels = [cylinder_y(0.38, 0.26, (x, y, 0.38)) for x in (1.5, -1.45) for y in (-0.77, 0.77)]
    return {
        "car_paint": trimesh.util.concatenate(body),
        "glass": trimesh.util.concatenate(glass),
        "painted_metal": trimesh.util.concatenate(wheels),
    }


def write_glb(path: Path, parts: dict[str, trimesh.Trimesh], colours: dict[str, list[int]]) -> None:
    """Write meshes to a glTF binary, one node per part, its material named after the key."""
    scene = trimesh.Scene()
    node_names = {"car_paint": "body", "glass": "windows", "painted_metal": "wheels"}
    for name, mesh in parts.items():
        mesh = mesh.copy()
        mesh.visual = trimesh.visual.TextureVisuals(
            material=trimesh.visual.material.PBRMaterial(
                name=name, baseColorFactor=colours[name], metallicFactor=0.3, roughnessFactor=0.5
            )
        )
        node = node_names.get(name, name)
        scene.add_geometry(mesh, node_name=node, geom_name=node)
    path.write_bytes(scene.export(file_type="glb"))


# --------------------------------------------------------------------------- trees


def place_trees(rng: np.random.Generator, count: int) -> list[tuple[float, float, float, float]]:
    """Tree sites (x, y, height, crown radius) 10-35 m out, clear of the other objects."""
    keep_out = [  # xmin, xmax, ymin, ymax: field, barn, shed, fence line, sign, track
        (-5.0, 35.0, -42.0, -12.0),
        (-9.5, 3.5, 16.5, 25.5),
        (-14.5, -9.5, 1.5, 6.5),
        (FENCE_X_M - 0.5, FENCE_X_M + 0.5, FENCE_Y_M[0] - 1, FENCE_Y_M[1] + 1),
        (SIGN_POSITION_M[0] - 1, SIGN_POSITION_M[0] + 1, SIGN_POSITION_M[1] - 1, -6.0),
        (-60.0, 60.0, *TRACK_Y_M),
    ]
    trees: list[tuple[float, float, float, float]] = []
    for _ in range(10_000):
        if len(trees) == count:
            break
        r, theta = rng.uniform(10.0, 35.0), rng.uniform(0.0, 2 * math.pi)
        height = rng.uniform(5.0, 12.0)
        crown = 0.3 * height * rng.uniform(0.75, 1.0)
        x, y = r * math.cos(theta), r * math.sin(theta)
        margin = crown + 0.5
        if any(
            x0 - margin < x < x1 + margin and y0 - margin < y < y1 + margin
            for x0, x1, y0, y1 in keep_out
        ):
            continue
        if any(math.hypot(x - tx, y - ty) < crown + tc + 1.0 for tx, ty, _, tc in trees):
            continue
        trees.append((x, y, height, crown))
    if len(trees) < count:
        raise RuntimeError(f"placed only {len(trees)} of {count} trees")
    return trees


# --------------------------------------------------------------------------- scene file


def _num(v: float) -> str:
    r = round(float(v), 3)
    return str(int(r)) if r == int(r) else repr(r)


def _flow(value: Any) -> str:
    """A value in YAML flow style (numbers rounded to mm / milli-units)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple | np.ndarray):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return _num(value)
    return str(value)


def obj(name: str, geometry: dict[str, Any], position: Any, **extra: Any) -> dict[str, Any]:
    """One scene object; ``rotation_deg`` and ``scale`` are dropped when they are defaults."""
    out: dict[str, Any] = {"name": name, **geometry, "position_m": list(position)}
    rotation = extra.pop("rotation_deg", None)
    if rotation is not None and any(abs(r) > 1e-9 for r in rotation):
        out["rotation_deg"] = list(rotation)
    scale = extra.pop("scale", None)
    if scale is not None:
        out["scale"] = scale
    out.update(extra)
    return out


def scene_groups(trees: list[tuple[float, float, float, float]]) -> list[tuple[str, list[dict]]]:
    """The scene's objects in commented groups."""
    ground = [
        obj("grass_ground", {"plane": {"size_m": [120, 120]}}, (0, 0, 0), material="grass"),
        obj(
            "gravel_track",
            {"plane": {"size_m": [100, TRACK_Y_M[1] - TRACK_Y_M[0]]}},
            (0, sum(TRACK_Y_M) / 2, 0.02),
            material="gravel",
        ),
        obj(
            "ploughed_field",
            {"mesh": "meshes/ploughed_field.ply"},
            FIELD_CENTRE_M,
            material="soil",
            label="terrain",
        ),
    ]
    buildings = [
        obj("barn", {"mesh": "meshes/barn.obj"}, BARN_CENTRE_M, label="building"),
        obj(
            "shed_walls",
            {"box": {"size_m": [4, 3, 2.5]}},
            (*SHED_CENTRE_M, 1.25),
            rotation_deg=(0, 0, SHED_YAW_DEG),
            material="building_wall",
            label="building",
        ),
    ]
    # Mono-pitch roof rolled about the shed's x axis, its underside at the wall top along
    # the high (+y) wall; it overhangs 0.2 m at the ends and 0.25 m front and back.
    pitch, thick = 6.0, 0.08
    roof_z = 2.5 - 1.5 * math.sin(math.radians(pitch)) + 0.5 * thick * math.cos(math.radians(pitch))
    buildings.append(
        obj(
            "shed_roof",
            {"box": {"size_m": [4.4, 3.5, thick]}},
            (*SHED_CENTRE_M, roof_z),
            rotation_deg=(pitch, 0, SHED_YAW_DEG),
            material="roof_metal",
            label="building",
        )
    )
    vehicle = [
        obj(
            "pickup",
            {"mesh": "meshes/vehicle.glb"},
            VEHICLE_POSITION_M,
            rotation_deg=(0, 0, VEHICLE_YAW_DEG),
            label="car",
            instance=len(trees) + 1,
        )
    ]
    tree_objs: list[dict] = []
    for k, (x, y, height, crown) in enumerate(trees, start=1):
        trunk_h = round(0.5 * height, 2)  # so that its centre is exact at mm precision
        trunk = {"radius_m": 0.1 + 0.012 * height, "height_m": trunk_h, "sections": 16}
        crown_half_h = 0.3 * height
        tree_objs += [
            obj(
                f"tree_{k:02d}_trunk",
                {"cylinder": trunk},
                (x, y, trunk_h / 2),
                material="bark",
                label="trunk",
                instance=k,
            ),
            obj(
                f"tree_{k:02d}_crown",
                {"sphere": {"radius_m": crown, "subdivisions": 3}},
                (x, y, height - crown_half_h),
                scale=[1, 1, round(crown_half_h / crown, 3)],
                material="vegetation",
                label="vegetation",
                instance=k,
            ),
        ]
    post_y = np.arange(FENCE_Y_M[0], FENCE_Y_M[1] + 1e-9, 2.5)
    fence = [
        obj(
            f"fence_post_{k:02d}",
            {"box": {"size_m": [0.12, 0.12, 1.3]}},
            (FENCE_X_M, y, 0.65),
            material="wood",
            label="fence",
        )
        for k, y in enumerate(post_y)
    ]
    rail_x = FENCE_X_M - 0.06 - 0.025  # on the yard side of the posts
    rail_len = FENCE_Y_M[1] - FENCE_Y_M[0] + 0.3
    fence += [
        obj(
            f"fence_rail_{name}",
            {"box": {"size_m": [0.05, rail_len, 0.12]}},
            (rail_x, sum(FENCE_Y_M) / 2, z),
            material="wood",
            label="fence",
        )
        for name, z in (("low", 0.5), ("high", 1.05))
    ]
    sx, sy = SIGN_POSITION_M
    facing = math.degrees(math.atan2(-sy, -sx))  # plate's +x (its face) toward the origin
    toward = -np.array([sx, sy]) / math.hypot(sx, sy)
    plate_xy = np.array([sx, sy]) + (0.04 + 0.01 + 0.01) * toward
    sign = [
        obj(
            "sign_pole",
            {"cylinder": {"radius_m": 0.04, "height_m": 2.35, "sections": 16}},
            (sx, sy, 2.35 / 2),
            material="pole_metal",
            label="pole",
        ),
        obj(
            "sign_plate",
            {"box": {"size_m": [0.02, 0.6, 0.6]}},
            (*plate_xy, 2.0),
            rotation_deg=(0, 0, facing),
            material="retroreflective_sign",
            label="traffic-sign",
        ),
    ]
    return [
        ("ground", ground),
        ("buildings", buildings),
        ("vehicle", vehicle),
        (f"trees: trunk and crown share an instance id (1..{len(trees)})", tree_objs),
        ("fence along the east side of the yard", fence),
        ("road sign facing the sensor", sign),
    ]


def write_scene_yaml(path: Path, groups: list[tuple[str, list[dict]]]) -> None:
    """Write the scene file: one block mapping per object, values in flow style."""
    lines = [
        "# generated by build_farm.py; do not edit by hand",
        "# Farm-yard demo scene; the sensor stands at the origin. Layout: see build_farm.py.",
        "objects:",
    ]
    for comment, objects in groups:
        lines.append(f"  # {comment}")
        for item in objects:
            for n, (key, value) in enumerate(item.items()):
                lines.append(f"  {'- ' if n == 0 else '  '}{key}: {_flow(value)}")
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- main


def main() -> None:
    """Write the meshes and ``scene.yaml`` and print a short summary."""
    MESH_DIR.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)

    field = ploughed_field()
    field.export(MESH_DIR / "ploughed_field.ply", file_type="ply", encoding="binary")
    barn = barn_parts()
    write_obj(
        MESH_DIR / "barn.obj",
        barn,
        {"building_wall": "0.55 0.12 0.10", "roof_metal": "0.55 0.57 0.60"},
    )
    vehicle = vehicle_parts()
    write_glb(
        MESH_DIR / "vehicle.glb",
        vehicle,
        {
            "car_paint": [40, 70, 150, 255],
            "glass": [30, 40, 50, 120],
            "painted_metal": [25, 25, 25, 255],
        },
    )
    groups = scene_groups(place_trees(rng, N_TREES))
    write_scene_yaml(HERE / "scene.yaml", groups)

    n_objects = sum(len(objects) for _, objects in groups)
    print(f"wrote {HERE / 'scene.yaml'} ({n_objects} objects)")
    for name, faces in (
        ("ploughed_field.ply", len(field.faces)),
        ("barn.obj", sum(len(m.faces) for m in barn.values())),
        ("vehicle.glb", sum(len(m.faces) for m in vehicle.values())),
    ):
        print(f"wrote {MESH_DIR / name} ({faces} triangles)")


if __name__ == "__main__":
    main()
