"""3D boxes of the countable objects of a scene at a frame's reference time, from the scene.

An object is the set of scene parts that share one instance id of a countable class
(:data:`~simulator.labels.THING_LABELS`). Its box is its own bounding box:

- a moving object's box is axis-aligned in the frame of its main part (the part with the
  most vertices; for the kit's objects x forward, y left, z up), around all its parts as
  they stand at the reference time, and turns with that frame: the rotation is the full
  3D one. An articulated object (a walker, whose limbs swing) gets the box that holds its
  parts over 1.2 s around the reference time, one size in every frame;
- a static object's box is upright. One whose heading is known (its placement: the
  generators' parked cars, standing people and parked bicycles, and a scene file's
  countable primitives, :func:`headings_from_spec`) is axis-aligned in that heading, x its
  front, so a car parked facing 180 deg has yaw pi; one without a front (a mesh file's
  object) gets the smallest rectangle around its vertices in the ground plane (its long
  side is x, the yaw in [-pi/2, pi/2)), and their height range.

Each box is placed where its object was scanned. Given the points' firing times, an
object's box stands at the median time of its own points (an object without points: at
the frame's reference time), so a car passing at 15 m/s is boxed where the beams met it,
not where it was when the turn began: its points lie in its box, as they lie in the boxes
annotators draw around scanned points. The box is written in the frame the points are in:
the sensor frame at the frame's reference time for motion-compensated points, or, for raw
sweeps (each point in the sensor frame at its own firing), the sensor frame at the
object's scan time (``sensor_pose_at``). Without the times, every box stands at the
reference time in the sensor frame then, as before. ``velocity_mps`` is the box centre's
velocity over the ground (world frame) written in the box frame's axes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from ..config import SceneSpec
from ..labels import THING_LABELS, label_id
from ..transforms import rotation_from_rpy_deg
from .raycast import RayEngine
from .scene import Scene, SceneObject

__all__ = [
    "VISIBILITY_SAMPLES",
    "Boxes",
    "headings_from_spec",
    "object_boxes",
    "objects_at_time",
    "visibility_from",
]

#: Surface samples per object for its visibility: points spread over its front-facing
#: surface by area (a panel weighs what it covers, not how many triangles it has).
VISIBILITY_SAMPLES = 64
#: A sample counts as seen when the ray to it first meets the object, no farther than
#: this beyond the sample (m).
VISIBILITY_TOLERANCE_M = 0.05
#: Half-width (s) of the window over which an articulated object's box holds its parts.
ARTICULATION_WINDOW_S = 0.6
#: Time step of the central difference that gives a moving box's velocity (s).
VELOCITY_STEP_S = 0.01


@dataclass
class Boxes:
    """The boxes of one frame, in the sensor frame at its reference time.

    Attributes
    ----------
    centre_m : (B, 3) float64
    size_m : (B, 3) float64
        Length (x), width (y), height (z) of the box in its own axes.
    rotation : (B, 3, 3) float64
        Sensor from box axes.
    yaw_rad : (B,) float64
        Heading of the box's x axis about the sensor's z axis (the upright layouts' one
        angle).
    label, instance : (B,) uint16
        SemanticKITTI id and instance id (the points' own).
    velocity_mps : (B, 3) float64
        Over the ground, in the sensor's axes (zero for static objects).
    num_points : (B,) int64
        The object's own points of the frame (those with the box's instance id), wherever
        the range noise put them: the box is tight around the object's mesh, so noise puts
        about a quarter of a parked car's points just outside it (a count of the points
        inside would lose them), and the ground under its tyres, which the box's bottom
        (the object's lowest vertex) holds within the noise, is not counted; a fully
        occluded object has 0.
    num_points_in_box : (B,) int64
        Every point of the frame inside the box, whatever it belongs to (nuScenes'
        ``num_lidar_pts``, which the devkit's ``points_in_box`` counts).
    visibility : (B,) float64
        Share of the object's surface samples facing the sensor that the sensor sees
        (nothing in between, within range); 0 for an object out of view.
    time_s : (B,) float64
        When the box stands (s from the survey start): its object's scan time, the median
        firing time of its own points (the frame's reference time for an object without
        points); NaN in a file written before boxes had a time.
    """

    centre_m: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 3)))
    size_m: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 3)))
    rotation: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 3, 3)))
    yaw_rad: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    label: NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    instance: NDArray[np.uint16] = field(default_factory=lambda: np.zeros(0, np.uint16))
    velocity_mps: NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, 3)))
    num_points: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    num_points_in_box: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    visibility: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    time_s: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    def __len__(self) -> int:
        return len(self.label)

    def arrays(self) -> dict[str, NDArray]:
        """The fields by name (what a ``boxes/*.npz`` file holds)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_arrays(cls, arrays: dict[str, NDArray]) -> Boxes:
        """The inverse of :meth:`arrays` (a file written before ``num_points_in_box``
        existed gets it equal to ``num_points``, which was then every point in the box;
        one written before ``time_s`` gets NaN times)."""
        arrays = dict(arrays)
        if "num_points_in_box" not in arrays:
            arrays["num_points_in_box"] = arrays["num_points"]
        if "time_s" not in arrays:
            arrays["time_s"] = np.full(len(np.asarray(arrays["label"])), np.nan)
        return cls(**{k: np.asarray(arrays[k]) for k in cls.__dataclass_fields__})

    def contains(self, xyz_m: NDArray, margin_m: float = 0.0) -> NDArray[np.bool_]:
        """(B, N): whether each point (N, 3) of the sensor frame is inside each box grown
        by ``margin_m`` on every side (the range noise puts a surface's points up to a few
        of its sigmas off the surface: a box whose faces are the object's holds about a
        fifth of them strictly)."""
        xyz = np.asarray(xyz_m, dtype=np.float64)
        inside = np.zeros((len(self), len(xyz)), dtype=bool)
        for b in range(len(self)):
            local = (xyz - self.centre_m[b]) @ self.rotation[b]
            inside[b] = np.all(np.abs(local) <= self.size_m[b] / 2 + margin_m, axis=1)
        return inside


def _objects_by_instance(scene: Scene) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, o in enumerate(scene.objects):
        if o.label in THING_LABELS and o.instance > 0:
            groups.setdefault(o.instance, []).append(i)
    return groups


def _main_part(moving: list[SceneObject]) -> SceneObject:
    """The part a moving object's box is axis-aligned in, and its points follow: the
    moving part with the most vertices (for the kit's objects, the body)."""
    return max(moving, key=lambda o: len(o.vertices_m))


def _world_vertices(obj: SceneObject, time_s: float) -> NDArray[np.float64]:
    if obj.trajectory is None:
        return obj.vertices_m
    rot, pos = obj.trajectory.pose_at(time_s)
    return obj.vertices_m @ rot.T + pos


def _envelope(objs: list[SceneObject], main: SceneObject, time_s: float) -> NDArray[np.float64]:
    """The object's vertices in its main part's frame: at ``time_s`` for a rigid object,
    and over ``ARTICULATION_WINDOW_S`` around it for one whose parts move on their own (a
    walker's limbs), so that its box keeps one size and holds its swing."""
    rigid = all(o.trajectory is main.trajectory for o in objs)
    times = [time_s] if rigid else time_s + np.linspace(-1, 1, 17) * ARTICULATION_WINDOW_S
    out = []
    for t in times:
        rot, pos = main.trajectory.pose_at(float(t))  # type: ignore[union-attr]
        out += [(_world_vertices(o, float(t)) - pos) @ rot for o in objs]
    return np.concatenate(out)


def headings_from_spec(spec: SceneSpec) -> dict[int, float]:
    """The heading (rad, about the world z axis) of each static countable object of a
    scene spec, by instance id: the direction of the x axis of its first part's placement
    (``rotation_deg``). The kit builds every object in its own frame, x forward, and turns
    each part with it, so this is the yaw the generator placed the object with. Objects
    with a trajectory (their pose gives it), mesh files (a part rule's ``heading_deg``
    states their front: :attr:`simulator.world.scene.SceneObject.heading_rad`, which
    :func:`object_boxes` reads itself) and objects without an explicit instance are left
    out: they keep the long-side rule unless their mesh file's rules state a front."""
    headings: dict[int, float] = {}
    for obj in spec.objects:
        if obj.mesh is not None or obj.trajectory is not None or not obj.instance:
            continue
        if obj.label is None or label_id(obj.label) not in THING_LABELS:
            continue
        if obj.instance in headings:
            continue
        x_axis = rotation_from_rpy_deg(obj.rotation_deg)[:, 0]
        headings[obj.instance] = float(np.arctan2(x_axis[1], x_axis[0]))
    return headings


def _heading_box(
    vertices: NDArray[np.float64], heading_rad: float
) -> tuple[NDArray, NDArray, NDArray]:
    """Centre, size and rotation of the upright box around the points (V, 3) whose x axis
    is the heading (rad about z)."""
    c, s = np.cos(heading_rad), np.sin(heading_rad)
    rotation = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    local = vertices @ rotation
    lo, hi = local.min(axis=0), local.max(axis=0)
    return rotation @ ((lo + hi) / 2), hi - lo, rotation


def _upright_box(vertices: NDArray[np.float64]) -> tuple[NDArray, NDArray, NDArray]:
    """Centre, size and rotation of the smallest upright box around the points."""
    # (imported here: its import, with scipy's, is half a second that a dataset whose
    # objects all have headings, and a process that only reads boxes, do not pay)
    import trimesh.bounds

    to_rect, extents = trimesh.bounds.oriented_bounds_2D(vertices[:, :2])
    inverse = np.linalg.inv(to_rect)
    yaw = float(np.arctan2(inverse[1, 0], inverse[0, 0]))
    if extents[1] > extents[0]:  # the long side is x
        extents = extents[::-1]
        yaw += np.pi / 2
    yaw = (yaw + np.pi / 2) % np.pi - np.pi / 2  # [-pi/2, pi/2): an object with no front
    centre_xy = inverse[:2, :2] @ np.zeros(2) + inverse[:2, 2]
    z0, z1 = vertices[:, 2].min(), vertices[:, 2].max()
    c, s = np.cos(yaw), np.sin(yaw)
    rotation = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    centre = np.array([centre_xy[0], centre_xy[1], (z0 + z1) / 2])
    return centre, np.array([extents[0], extents[1], z1 - z0]), rotation


def object_boxes(
    scene: Scene,
    time_s: float,
    world_from_sensor: tuple[NDArray[np.float64], NDArray[np.float64]],
    *,
    xyz_m: NDArray | None = None,
    point_instance: NDArray | None = None,
    engine: RayEngine | None = None,
    range_max_m: float = np.inf,
    headings_rad: Mapping[int, float] | None = None,
    elevation_window_rad: tuple[float, float] | None = None,
    point_time_s: NDArray | None = None,
    sensor_pose_at: Callable[[float], tuple[NDArray, NDArray]] | None = None,
) -> Boxes:
    """The boxes of the scene's countable objects, each where its object was scanned
    (see the module docstring), in the frame of the points.

    Parameters
    ----------
    scene : Scene
    time_s : float
        The frame's reference time (s from the survey start).
    world_from_sensor : ((3, 3), (3,)) float
        The sensor's pose then.
    xyz_m : (N, 3) float, optional
        The frame's points in the sensor frame, to count ``num_points_in_box`` and, with
        ``point_instance``, ``num_points`` (0 without).
    point_instance : (N,) int, optional
        The points' instance ids: ``num_points`` counts a box's own (without them, every
        point in the box, as ``num_points_in_box``).
    engine : RayEngine, optional
        The scene's ray engine, for ``visibility`` (0 without).
    range_max_m : float
        Samples farther than this are not seen.
    headings_rad : mapping of int to float, optional
        The world heading (rad about z) of static objects by instance id
        (:func:`headings_from_spec`); with the headings the scene's mesh parts state
        (their part rules' ``heading_deg``, the first part's of an instance), these are
        the boxes' fronts; the others get the long-side rule.
    elevation_window_rad : (2,) float, optional
        The sensor's vertical field of view (lowest, highest beam elevation in its frame,
        rad): ``visibility`` counts only the surface within it.
    point_time_s : (N,) float, optional
        The points' firing times (s from the survey start; with ``point_instance``): each
        object's box stands at the median time of its own points. Without: at ``time_s``.
    sensor_pose_at : callable, optional
        The world-from-sensor pose at a time, for points in the sensor frame at their own
        firing (raw sweeps): each box is written in the sensor frame at its object's scan
        time. Without (motion-compensated points): in the frame of ``world_from_sensor``.
    """
    headings: dict[int, float] = {}
    for o in scene.objects:  # a mesh file's front, as its part rule states it
        if o.heading_rad is not None and o.instance and o.instance not in headings:
            headings[o.instance] = o.heading_rad
    headings.update(headings_rad or {})
    groups = _objects_by_instance(scene)
    rot_s, pos_s = (np.asarray(a, dtype=np.float64) for a in world_from_sensor)
    scan_time = _scan_times(sorted(groups), time_s, point_instance, point_time_s)
    rows = []
    for instance, members in sorted(groups.items()):
        objs = [scene.objects[i] for i in members]
        moving = [o for o in objs if o.trajectory is not None]
        t = scan_time[instance]
        if moving:
            main = _main_part(moving)
            rot, pos = main.trajectory.pose_at(t)  # type: ignore[union-attr]
            local = _envelope(objs, main, t)
            lo, hi = local.min(axis=0), local.max(axis=0)
            c_local = (lo + hi) / 2
            centre, size, rotation = rot @ c_local + pos, hi - lo, rot
            h = VELOCITY_STEP_S
            ra, pa = main.trajectory.pose_at(t + h)  # type: ignore[union-attr]
            rb, pb = main.trajectory.pose_at(t - h)  # type: ignore[union-attr]
            velocity = ((ra @ c_local + pa) - (rb @ c_local + pb)) / (2 * h)
        elif instance in headings:
            vertices = np.concatenate([o.vertices_m for o in objs])
            centre, size, rotation = _heading_box(vertices, headings[instance])
            velocity = np.zeros(3)
        else:
            centre, size, rotation = _upright_box(np.concatenate([o.vertices_m for o in objs]))
            velocity = np.zeros(3)
        # The frame the box is written in: the sensor's at the object's scan time for raw
        # sweeps, else the points' one frame.
        frame_rot, frame_pos = (
            (rot_s, pos_s)
            if sensor_pose_at is None
            else (np.asarray(a, dtype=np.float64) for a in sensor_pose_at(t))
        )
        rows.append((instance, objs[0].label, frame_rot.T @ (centre - frame_pos), size,
                     frame_rot.T @ rotation, frame_rot.T @ velocity, members, t))  # fmt: skip
    if not rows:
        return Boxes()
    rotation_s = np.stack([r[4] for r in rows])
    boxes = Boxes(
        centre_m=np.stack([r[2] for r in rows]),
        size_m=np.stack([r[3] for r in rows]),
        rotation=rotation_s,
        yaw_rad=np.arctan2(rotation_s[:, 1, 0], rotation_s[:, 0, 0]),
        label=np.array([r[1] for r in rows], dtype=np.uint16),
        instance=np.array([r[0] for r in rows], dtype=np.uint16),
        velocity_mps=np.stack([r[5] for r in rows]),
        num_points=np.zeros(len(rows), dtype=np.int64),
        num_points_in_box=np.zeros(len(rows), dtype=np.int64),
        visibility=np.zeros(len(rows)),
        time_s=np.array([r[7] for r in rows], dtype=np.float64),
    )
    if xyz_m is not None and len(xyz_m):
        inside = boxes.contains(xyz_m)
        boxes.num_points_in_box = inside.sum(axis=1).astype(np.int64)
        if point_instance is None:
            boxes.num_points = boxes.num_points_in_box.copy()
        else:
            # the object's own points, inside the box or put just outside it by the noise
            own = np.bincount(np.asarray(point_instance, dtype=np.int64), minlength=65536)
            boxes.num_points = own[boxes.instance.astype(np.int64)].astype(np.int64)
    if engine is not None:
        boxes.visibility = _visibility(scene, [r[6] for r in rows], boxes.instance, time_s,
                                       pos_s, engine, range_max_m, elevation_window_rad,
                                       rot_s)  # fmt: skip
    return boxes


def objects_at_time(
    scene: Scene,
    xyz_m: NDArray,
    point_instance: NDArray,
    point_time_s: NDArray,
    time_s: float,
    world_from_sensor: tuple[NDArray[np.float64], NDArray[np.float64]],
) -> NDArray[np.float32]:
    """Points of moving objects moved to where their objects stand at ``time_s``: the
    object-motion half of a motion compensation (the ego half is the frame the points are
    in, ``sensor_compensated``).

    Each moving object's points follow its main part (the moving part with the most
    vertices, the frame its box is axis-aligned in): a point fired at ``t`` is taken into
    that part's frame at ``t`` and out of it at ``time_s``. A walker's swinging limbs move
    with its body, not with their swing (its box holds the swing). Other points are
    returned as they are.

    Parameters
    ----------
    scene : Scene
    xyz_m : (N, 3) float
        Points in the sensor frame at ``time_s`` (compensated for the ego motion).
    point_instance : (N,) int
        Their instance ids.
    point_time_s : (N,) float
        Their firing times (s from the survey start).
    time_s : float
        The time to move them to (the frame's reference time).
    world_from_sensor : ((3, 3), (3,)) float
        The sensor's pose at ``time_s``.

    Returns
    -------
    (N, 3) float32
    """
    rot_s, pos_s = (np.asarray(a, dtype=np.float64) for a in world_from_sensor)
    out = np.asarray(xyz_m, dtype=np.float32).copy()
    instance = np.asarray(point_instance, dtype=np.int64)
    for inst, members in sorted(_objects_by_instance(scene).items()):
        moving = [scene.objects[i] for i in members if scene.objects[i].trajectory is not None]
        if not moving:  # (a static object's points stay: no pass over the points)
            continue
        rows = np.flatnonzero(instance == inst)
        if len(rows) == 0:
            continue
        main = _main_part(moving)
        world = out[rows].astype(np.float64) @ rot_s.T + pos_s
        rot_t, pos_t = main.trajectory.poses(np.asarray(point_time_s, np.float64)[rows])  # type: ignore[union-attr]
        local = np.einsum("nji,nj->ni", rot_t, world - pos_t)  # R_t^T (world - p_t)
        rot_r, pos_r = main.trajectory.pose_at(time_s)  # type: ignore[union-attr]
        out[rows] = ((local @ rot_r.T + pos_r - pos_s) @ rot_s).astype(np.float32)
    return out


def _scan_times(
    instances: list[int],
    time_s: float,
    point_instance: NDArray | None,
    point_time_s: NDArray | None,
) -> dict[int, float]:
    """Each object's scan time by instance id: the median firing time of its own points
    (``point_time_s``, with ``point_instance``), or ``time_s`` for an object without
    points, or without the times."""
    out = dict.fromkeys(instances, float(time_s))
    if point_time_s is None or point_instance is None or len(point_time_s) == 0:
        return out
    ids = np.asarray(point_instance, dtype=np.int64)
    times = np.asarray(point_time_s, dtype=np.float64)
    order = np.lexsort((times, ids))  # by instance, then time
    ids, times = ids[order], times[order]
    for instance in instances:
        lo, hi = np.searchsorted(ids, [instance, instance + 1])
        if hi > lo:
            out[instance] = float(np.median(times[lo:hi]))
    return out


def visibility_from(
    scene: Scene,
    boxes: Boxes,
    time_s: float,
    origin_m: NDArray[np.float64],
    engine: RayEngine,
    range_max_m: float = np.inf,
) -> NDArray[np.float64]:
    """(B,) share of each box's object's surface samples facing ``origin_m`` (3,) (world,
    m) that a ray from there reaches on the object (a camera's view, as ``visibility`` is
    the sensor's)."""
    members = _objects_by_instance(scene)
    groups = [members.get(int(i), []) for i in boxes.instance]
    return _visibility(scene, groups, boxes.instance, time_s,
                       np.asarray(origin_m, dtype=np.float64), engine, range_max_m)  # fmt: skip


def _area_samples(
    tri: NDArray[np.float64], viewer_m: NDArray[np.float64], count: int
) -> NDArray[np.float64]:
    """(<= count, 3) points on the triangles (T, 3, 3) that face ``viewer_m`` (3,), spread
    by area: the k-th at the (k + 1/2)/count quantile of the triangles' cumulative area,
    inside its triangle at a low-discrepancy barycentric point (no random stream)."""
    if len(tri) == 0:
        return np.zeros((0, 3))
    e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    normal = np.cross(e1, e2)
    centroid = tri.mean(axis=1)
    front = np.einsum("ij,ij->i", normal, viewer_m - centroid) > 0
    area = 0.5 * np.linalg.norm(normal, axis=1) * front
    total = float(area.sum())
    if total <= 0.0:
        return np.zeros((0, 3))
    k = np.arange(count, dtype=np.float64) + 0.5
    pick = np.searchsorted(np.cumsum(area), k / count * total, side="right")
    pick = np.minimum(pick, len(tri) - 1)
    u, v = np.mod(k * 0.6180339887498949, 1.0), np.mod(k * 0.7548776662466927, 1.0)
    fold = u + v > 1.0  # into the triangle
    u, v = np.where(fold, 1.0 - u, u), np.where(fold, 1.0 - v, v)
    return tri[pick, 0] + u[:, None] * e1[pick] + v[:, None] * e2[pick]


def _visibility(
    scene: Scene,
    members: list[list[int]],
    instances: NDArray[np.uint16],
    time_s: float,
    sensor_m: NDArray[np.float64],
    engine: RayEngine,
    range_max_m: float,
    elevation_window_rad: tuple[float, float] | None = None,
    sensor_rotation: NDArray[np.float64] | None = None,
) -> NDArray[np.float64]:
    """Share of each object's front-facing surface, by area, that no other object hides
    from the sensor (a ray to it meets the object itself first): ``VISIBILITY_SAMPLES``
    points spread over it in proportion to area (:func:`_area_samples`), those outside
    ``elevation_window_rad`` (the sensor's vertical field of view, in its frame
    ``sensor_rotation``) left out."""
    targets, owner = [], []
    for b, idx in enumerate(members):
        triangles = [_world_vertices(scene.objects[i], time_s)[scene.objects[i].faces]
                     for i in idx]  # fmt: skip
        tri = np.concatenate(triangles) if triangles else np.zeros((0, 3, 3))
        c = _area_samples(tri, sensor_m, VISIBILITY_SAMPLES)
        if elevation_window_rad is not None and len(c):
            rel = (c - sensor_m) @ np.asarray(sensor_rotation, dtype=np.float64)
            el = np.arctan2(rel[:, 2], np.hypot(rel[:, 0], rel[:, 1]))
            c = c[(el >= elevation_window_rad[0]) & (el <= elevation_window_rad[1])]
        targets.append(c)
        owner.append(np.full(len(c), b))
    points = np.concatenate(targets)
    which = np.concatenate(owner)
    seen = np.zeros(len(members))
    if len(points) == 0:
        return seen
    to = points - sensor_m
    dist = np.linalg.norm(to, axis=1)
    hits = engine.cast(np.broadcast_to(sensor_m, to.shape).copy(), to / dist[:, None],
                       np.full(len(to), time_s))  # fmt: skip
    instance_of = np.array([o.instance for o in scene.objects])
    hit_instance = np.where(hits.object_index >= 0, instance_of[hits.object_index], -1)
    # Seen: the first thing the ray meets is the object itself (a part of it: its own parts
    # in front of a sample, as a car's glass before its seats, hide nothing in KITTI's sense
    # of occlusion, which is by other objects), not beyond the sample.
    ok = (hit_instance == instances[which]) & (hits.range_m < dist + VISIBILITY_TOLERANCE_M)
    ok &= dist <= range_max_m
    counts = np.bincount(which, minlength=len(members))
    seen = np.bincount(which, weights=ok.astype(np.float64), minlength=len(members))
    return np.divide(seen, counts, out=np.zeros(len(members)), where=counts > 0)
