"""Ray casting with Open3D's ``RaycastingScene`` (Embree), one geometry per scene object.

Open3D casts in float32. To keep centimetre accuracy wherever the scene sits (map
coordinates included), the engine moves the scene to a local origin, the centre of
its bounding box, and moves every ray by the same amount; hit distances do not
change under that shift.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
from numpy.typing import NDArray

from ..chunk import Hits, world_rays
from ..sensor.trajectory import Trajectory
from .refine import RefinedScene, RefineHits, refine_hits
from .scene import Scene

__all__ = [
    "BoxCull",
    "Hits",
    "IntoGroupFrame",
    "NearerHits",
    "RayEngine",
    "import_open3d",
    "into_group_frame",
    "nearer_hits",
    "rays_into_boxes",
]


class _LazyPackage(ModuleType):
    """A package registered under its name but executed on the first access to an
    attribute it does not have yet (its name, spec and path it has from the start, so
    the import system can look it up without executing it)."""

    def __getattr__(self, attr: str) -> object:
        spec = self.__spec__
        if spec is None or spec.loader is None or self.__dict__.get("_lazy_done", True):
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        self.__dict__["_lazy_done"] = True
        spec.loader.exec_module(self)
        return getattr(self, attr)


def import_open3d() -> ModuleType:
    """Open3D, imported with its ``visualization`` package made lazy.

    ``import open3d`` imports ``open3d.visualization``, which imports its plotly/Dash
    web visualizer (Dash, plotly, Werkzeug, IPython): about 0.5 s of CPU at every
    start-up of a command that only casts rays. Registered first as a lazy package, it
    is executed on the first access to one of its names
    (``open3d.visualization.draw_geometries``, ``from open3d.visualization import gui``),
    exactly as the import would have executed it. When Open3D is already imported, it is
    returned as it is.
    """
    if "open3d" in sys.modules:
        return sys.modules["open3d"]
    name = "open3d.visualization"
    found = importlib.util.find_spec("open3d")  # finds the package without importing it
    places = list(found.submodule_search_locations or []) if found else []
    init = Path(places[0]) / "visualization" / "__init__.py" if places else None
    if init is not None and init.is_file() and name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(init.parent)]
        )
        if spec is not None and spec.loader is not None:
            module = _LazyPackage(name)
            for key, value in (("__spec__", spec), ("__loader__", spec.loader),
                               ("__file__", str(init)), ("__path__", [str(init.parent)]),
                               ("__package__", name), ("_lazy_done", False)):  # fmt: skip
                setattr(module, key, value)
            sys.modules[name] = module
    import open3d

    if name in sys.modules and "visualization" not in vars(open3d):
        open3d.visualization = sys.modules[name]  # what executing the import would set
    return open3d


class RayEngine:
    """Casts rays against a :class:`~simulator.world.scene.Scene` with Open3D.

    Static objects share one ``RaycastingScene``. Each moving object has a scene of
    its own, holding its mesh in its own frame; a ray is cast into it after moving the
    ray into the object's frame at the ray's own time, so motion is exact per pulse
    (no time slices), and the nearest hit of all scenes wins.

    Embree only finds the triangle: each scene is a
    :class:`~simulator.world.refine.RefinedScene`, which recomputes the hit's range and
    normal in float64 and decides ties by the lowest ids, so that a hit is the same on any
    x86-64 CPU (a moving group's hits are refined in its own frame, before they are
    compared with the static ones).

    When some object has per-face materials, each hit also gets its material row
    (:attr:`Hits.material_row`: the object's first face row plus the triangle's index).

    Parameters
    ----------
    scene : Scene
        Its objects become the engine's geometries.
    cull : BoxCull, optional
        Says which rays can meet a moving group (default :func:`rays_into_boxes`; the
        numba backend's kernel computes the same).
    refine : RefineHits, optional
        Refines the hits (default :func:`~simulator.world.refine.refine_hits`; the numba
        backend's kernel computes the same).
    into_frame : IntoGroupFrame, optional
        Moves the rays the cull kept into a moving group's frame (default
        :func:`into_group_frame`; the numba backend's kernel computes the same).
    nearer : NearerHits, optional
        Puts a moving group's hits in place of the hits so far where they are nearer
        (default :func:`nearer_hits`; the numba backend's kernel computes the same).
    """

    def __init__(
        self,
        scene: Scene,
        cull: BoxCull | None = None,
        refine: RefineHits | None = None,
        into_frame: IntoGroupFrame | None = None,
        nearer: NearerHits | None = None,
    ) -> None:
        # Imported here: it is slow to import and needs libusb.
        self._o3d = o3d = import_open3d()
        self.cull: BoxCull = rays_into_boxes if cull is None else cull
        self.refine: RefineHits = refine_hits if refine is None else refine
        self.into_frame: IntoGroupFrame = into_group_frame if into_frame is None else into_frame
        self.nearer: NearerHits = nearer_hits if nearer is None else nearer
        #: The moving groups' swept boxes of the last cast's time slots (_slot_boxes).
        self._boxes: tuple[int, NDArray[np.float64], NDArray[np.float64]] | None = None
        #: Threads Open3D casts on (0: all cores); a worker process sharing the machine
        #: with others takes its share.
        self.threads = 0
        self.origin_shift_m: NDArray[np.float64] = scene.bounds_m.mean(axis=0)
        static = [i for i, o in enumerate(scene.objects) if not o.moving]
        # Geometry ids are 0..n-1 in insertion order (RefinedScene checks it).
        self._scene = self._build([scene.objects[i] for i in static], self.origin_shift_m)
        if int(o3d.t.geometry.RaycastingScene.INVALID_ID) != 2**32 - 1:
            raise RuntimeError("Open3D's INVALID_ID is not 2^32 - 1")
        #: The scene object of each static geometry id, and -1 last: for a miss (-1).
        self._object_of_geometry = np.asarray([*static, -1], dtype=np.int32)
        self._identity = static == list(range(len(scene.objects)))
        #: Each object's first face row, -1 for one of one material (None: no object
        #: has per-face materials): :meth:`Scene.face_row_starts`.
        self._face_rows = scene.face_row_starts()
        # Moving objects that share one trajectory (the parts of a car) share one scene.
        groups: dict[int, list[int]] = {}
        for i, obj in enumerate(scene.objects):
            if obj.moving:
                groups.setdefault(id(obj.trajectory), []).append(i)
        self._moving: list[_MovingGroup] = []
        for members in groups.values():
            objs = [scene.objects[i] for i in members]
            vertices = np.concatenate([o.vertices_m for o in objs])
            local = vertices.mean(axis=0)
            rc = self._build(objs, local)
            radius = float(np.sqrt(((vertices - local) ** 2).sum(axis=1).max()))
            self._moving.append(
                _MovingGroup(np.asarray(members, np.int32), rc, local, radius, objs[0].trajectory)
            )

    @property
    def has_moving(self) -> bool:
        """Whether some objects move (casts then need each ray's time)."""
        return bool(self._moving)

    def _build(self, objects: list, shift: NDArray[np.float64]) -> RefinedScene:
        """One scene of ``objects``, moved by ``-shift`` (m), its hits refined."""
        return RefinedScene(
            self._o3d,
            [obj.vertices_m - shift for obj in objects],
            [obj.faces for obj in objects],
            self.refine,
        )

    def rays(
        self, origins_m: NDArray[np.float64], directions: NDArray[np.float64]
    ) -> NDArray[np.float32]:
        """Open3D's (N, 6) float32 ray layout, origins moved to the engine's local origin."""
        origins_m = np.asarray(origins_m, dtype=np.float64)
        directions = np.asarray(directions, dtype=np.float64)
        if origins_m.ndim != 2 or origins_m.shape[1] != 3 or directions.shape != origins_m.shape:
            raise ValueError(
                f"origins and directions must both be (N, 3); got {origins_m.shape} and "
                f"{directions.shape}"
            )
        rays = np.zeros((len(origins_m), 6), dtype=np.float32)
        rays[:, :3] = origins_m - self.origin_shift_m
        rays[:, 3:] = directions
        return rays

    def cast(
        self,
        origins_m: NDArray[np.float64],
        directions: NDArray[np.float64],
        time_s: NDArray[np.float64] | None = None,
    ) -> Hits:
        """Cast rays; return the first hit of each.

        Parameters
        ----------
        origins_m : (N, 3) float
            World coordinates of the ray origins.
        directions : (N, 3) float
            Unit directions (world frame).
        time_s : (N,) float, optional
            Each ray's time, for moving objects (required when there are some).

        Returns
        -------
        Hits
        """
        return self.cast_rays(self.rays(origins_m, directions), time_s)

    def cast_rays(
        self, rays: NDArray[np.float32], time_s: NDArray[np.float64] | None = None
    ) -> Hits:
        """Cast rays already in Open3D's layout (see :meth:`rays`), at times ``time_s``."""
        # Embree finds the triangle; its range and normal are recomputed in float64 and
        # ties are decided by the lowest ids (RefinedScene): the same on any x86-64 CPU.
        cast = self._scene.cast(rays, self.threads)
        geometry = cast.geometry  # -1: a miss (t = inf, a zero normal)
        object_index = geometry if self._identity else self._object_of_geometry[geometry]
        hits = Hits(range_m=cast.t, object_index=object_index, normal=cast.normal)
        if self._face_rows is not None:
            hits.material_row = self._material_rows(object_index, cast.primitive)
        if self._moving:
            if time_s is None:
                raise ValueError("the scene has moving objects: cast_rays needs the rays' times")
            self._cast_moving(rays, np.asarray(time_s, dtype=np.float64), hits)
        return hits

    def _material_rows(
        self, object_index: NDArray[np.int32], primitive: NDArray[np.int32]
    ) -> NDArray[np.int32]:
        """(N,) int32: the material row of each hit (``object_index``, -1 a miss) on the
        triangle ``primitive`` of its geometry (-1 for a miss, not used)."""
        assert self._face_rows is not None
        face = primitive
        first = self._face_rows[np.maximum(object_index, 0)]
        faced = (object_index >= 0) & (first >= 0)
        return np.where(faced, first + face, object_index).astype(np.int32)

    def cast_bare(self, rays: NDArray[np.float32]) -> None:
        """Cast rays into the static objects and discard the result: Open3D's own cost
        alone, what the benchmark compares the pipeline with."""
        tensor = self._o3d.core.Tensor.from_numpy(np.ascontiguousarray(rays))  # no copy
        self._scene.scene.cast_rays(tensor, nthreads=self.threads)

    def _cast_moving(self, rays: NDArray[np.float32], time_s: NDArray, hits: Hits) -> None:
        """Intersect each moving group in its own frame at each ray's time; keep the nearest.

        Only the rays that enter the box the group's bounding sphere sweeps over their own
        time slot (:data:`SWEEP_STEP_S`), nearer than their static hit, are moved and cast
        (the others cannot hit it): :attr:`cull` says which.

        ``hits`` are the static cast's, arrays of their own (:meth:`cast_rays` made them):
        changed in place.
        """
        if len(rays) == 0:
            return
        first, lo, hi = self._slot_boxes(time_s)
        slot = np.floor(time_s / SWEEP_STEP_S).astype(np.int64) - first
        starts, reach = self.cull(rays, self.origin_shift_m, hits.range_m, slot, lo, hi)
        for g, group in enumerate(self._moving):
            rows = reach[starts[g] : starts[g + 1]]
            if len(rows) == 0:
                continue
            rot, pos = group.trajectory.poses(time_s[rows])
            local_rays = self.into_frame(rays, rows, self.origin_shift_m, rot, pos, group.local_m)
            # refined in the group's frame, before the comparison with the static hits
            cast = group.scene.cast(local_rays, self.threads)
            nearer = self.nearer(hits.range_m, hits.object_index, hits.normal, rows, cast.t,
                                 cast.geometry, cast.normal, rot, group.members)  # fmt: skip
            if hits.material_row is not None and len(nearer):
                at = rows[nearer]  # (their objects just put in place by ``nearer``)
                rows_of = self._material_rows(hits.object_index[at], cast.primitive[nearer])
                hits.material_row[at] = rows_of

    def _slot_boxes(
        self, time_s: NDArray[np.float64]
    ) -> tuple[int, NDArray[np.float64], NDArray[np.float64]]:
        """The boxes the moving groups' bounding spheres sweep over each time slot
        ``[k, k + 1) * SWEEP_STEP_S`` the times span: the first slot ``k``, and the
        (G, S, 3) lower and upper corners (m, world). Kept for the next casts: those
        behind see-through surfaces span slots of the same chunk, and the next chunks'
        the slots after it (made :data:`SWEEP_AHEAD_SLOTS` at a time, so that a chunk's
        cast does not sample every group's path again: each slot's box is its own, the
        same whichever span it is made in)."""
        first = int(np.floor(time_s.min() / SWEEP_STEP_S))
        last = int(np.floor(time_s.max() / SWEEP_STEP_S))
        kept = self._boxes
        if kept is None or not (kept[0] <= first and last < kept[0] + kept[1].shape[1]):
            self._boxes = kept = self._swept_boxes(first, last)
        k0, lo, hi = kept
        return first, lo[:, first - k0 : last + 1 - k0], hi[:, first - k0 : last + 1 - k0]

    def _swept_boxes(
        self, first: int, last: int
    ) -> tuple[int, NDArray[np.float64], NDArray[np.float64]]:
        """The swept boxes of slots ``first..last``, or of :data:`SWEEP_AHEAD_SLOTS` from
        ``first`` if more: ``(first, lo, hi)``, each (G, S, 3)."""
        edges_s = np.arange(first, max(last, first + SWEEP_AHEAD_SLOTS - 1) + 2) * SWEEP_STEP_S
        shape = (len(self._moving), len(edges_s) - 1, 3)
        lo, hi = np.empty(shape), np.empty(shape)
        for g, group in enumerate(self._moving):
            rot, pos = group.trajectory.poses(edges_s)
            centres = pos + np.einsum("kij,j->ki", rot, group.local_m)
            a, b = centres[:-1], centres[1:]
            pad = group.radius_m + np.sqrt(((b - a) ** 2).sum(axis=1)) + SWEEP_MARGIN_M
            lo[g] = np.minimum(a, b) - pad[:, None]
            hi[g] = np.maximum(a, b) + pad[:, None]
        return first, lo, hi


#: Time step (s) at which a moving group's path is sampled to bound where it can be.
SWEEP_STEP_S = 0.005
#: Time slots whose swept boxes are made at once, from a cast's first (100: 0.5 s, five
#: frames at 10 Hz).
SWEEP_AHEAD_SLOTS = 100
#: Extra margin (m) around a moving group's swept box.
SWEEP_MARGIN_M = 0.05


@dataclass
class _MovingGroup:
    """Moving objects that share one trajectory, in one scene of their own frame."""

    members: NDArray[np.int32]  # scene object index of each geometry id
    scene: RefinedScene  # their scene, in the frame shifted by local_m
    local_m: NDArray[np.float64]  # the shift: the mean of their vertices, own frame
    radius_m: float  # the bounding sphere about local_m
    trajectory: Trajectory


def into_group_frame(
    rays: NDArray[np.float32],
    rows: NDArray[np.int64],
    shift_m: NDArray[np.float64],
    rotation: NDArray[np.float64],
    position_m: NDArray[np.float64],
    local_m: NDArray[np.float64],
) -> NDArray[np.float32]:
    """The rays ``rows`` in a moving group's frame, each at its own pose (the
    specification; the kernel is :func:`simulator.kernels.cull.into_group_frame`).

    Parameters
    ----------
    rays : (N, 6) float32
        The rays as cast (origins relative to ``shift_m``, unit directions).
    rows : (K,) int64
        The rays to move.
    shift_m : (3,) float64
        The engine's local origin (world, m).
    rotation : (K, 3, 3) float64
        The group's world-from-body rotation at each ray's time (a broadcast one is fine).
    position_m : (K, 3) float64
        The group's position at each ray's time (world, m).
    local_m : (3,) float64
        The origin of the group's scene in its body frame (m).

    Returns
    -------
    (K, 6) float32
        Origins (m, the group's scene frame) and directions, in Open3D's layout:
        ``R^T (o - p) - local`` and ``R^T d``, each component a sum over the rotation's
        rows from 0 (as ``einsum`` adds them, from +0).
    """
    origins, directions = world_rays(rays[rows], shift_m)
    o = np.einsum("nji,nj->ni", rotation, origins - position_m) - local_m
    d = np.einsum("nji,nj->ni", rotation, directions)
    return np.concatenate([o, d], axis=1).astype(np.float32)


#: Rays into a moving group's frame: a function of the signature of
#: :func:`into_group_frame`.
IntoGroupFrame = Callable[
    [NDArray[np.float32], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64],
     NDArray[np.float64], NDArray[np.float64]],
    NDArray[np.float32],
]  # fmt: skip


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
    """A moving group's hits put in place of the hits so far where they are nearer (the
    specification; the kernel is :func:`simulator.kernels.cull.nearer_hits`).

    Parameters
    ----------
    range_m : (N,) float32
        The range of each ray's hit so far (m; inf for a miss): changed in place.
    object_index : (N,) int32
        Its object (-1 for a miss): changed in place.
    normal : (N, 3) float32
        Its unit normal (world frame): changed in place.
    rows : (K,) int64
        The rays cast into the group, increasing.
    t : (K,) float32
        Their ranges in the group's scene (m; inf for a miss).
    geometry : (K,) int32
        The group's geometry each hit (-1 for a miss).
    normal_local : (K, 3) float32
        Each hit's unit normal in the group's frame.
    rotation : (K, 3, 3) float64
        The group's world-from-body rotation at each ray's time (a broadcast one is fine).
    members : (M,) int32
        The scene object of each of the group's geometries.

    Returns
    -------
    (J,) int64
        The positions ``k`` (increasing) of the rays whose group hit is nearer
        (``t[k] < range_m[rows[k]]``: a tie keeps the hit so far): there the range is
        ``t[k]``, the object ``members[geometry[k]]`` and the normal ``rotation[k]``
        times ``normal_local[k]`` in float64, each component a sum over the rotation's
        columns from +0 (as ``einsum`` adds them), rounded to float32.
    """
    nearer = np.flatnonzero(t < range_m[rows]).astype(np.int64)
    at = rows[nearer]
    range_m[at] = t[nearer]
    object_index[at] = members[geometry[nearer]]
    n_local = normal_local[nearer].astype(np.float64)
    normal[at] = np.einsum("nij,nj->ni", rotation[nearer], n_local)
    return nearer


#: Moving hits put in place where nearer: a function of the signature of
#: :func:`nearer_hits`.
NearerHits = Callable[
    [NDArray[np.float32], NDArray[np.int32], NDArray[np.float32], NDArray[np.int64],
     NDArray[np.float32], NDArray[np.int32], NDArray[np.float32], NDArray[np.float64],
     NDArray[np.int32]],
    NDArray[np.int64],
]  # fmt: skip


def rays_into_boxes(
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    range_max_m: NDArray,
    slot: NDArray[np.int64],
    lo_m: NDArray[np.float64],
    hi_m: NDArray[np.float64],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Which rays meet which boxes of their time slot before their range (the
    specification of the moving objects' cull; the kernel is
    :func:`simulator.kernels.cull.rays_into_boxes`).

    Parameters
    ----------
    rays : (N, 6) float32
        The rays as cast (origins relative to ``shift_m``, unit directions).
    shift_m : (3,) float64
        The engine's local origin (world, m).
    range_max_m : (N,) float
        How far each ray may go (its nearest hit so far; inf for a miss).
    slot : (N,) int64
        Each ray's time slot, in ``0..S-1``.
    lo_m, hi_m : (G, S, 3) float64
        Box ``g``'s lower and upper corners in each slot (world, m).

    Returns
    -------
    starts : (G + 1,) int64
        Box ``g``'s rays are ``rays_out[starts[g]:starts[g + 1]]``.
    rays_out : (K,) int64
        Per box, increasing, the rays ``n`` that meet box ``g`` of their slot,
        ``lo_m[g, slot[n]]`` to ``hi_m[g, slot[n]]``, at a distance in
        ``[0, range_max_m[n]]``.
    """
    origins_m, directions = world_rays(rays, shift_m)
    per_box = [
        np.flatnonzero(
            _enters_box(origins_m, directions, lo_m[g, slot], hi_m[g, slot], range_max_m)
        )
        for g in range(len(lo_m))
    ]
    starts = np.concatenate([[0], np.cumsum([len(r) for r in per_box])]).astype(np.int64)
    return starts, np.concatenate([np.zeros(0, np.int64), *per_box]).astype(np.int64)


#: Which rays can meet which moving groups: a function of the signature of
#: :func:`rays_into_boxes`.
BoxCull = Callable[
    [NDArray[np.float32], NDArray[np.float64], NDArray, NDArray[np.int64],
     NDArray[np.float64], NDArray[np.float64]],
    tuple[NDArray[np.int64], NDArray[np.int64]],
]  # fmt: skip


def _enters_box(
    origins_m: NDArray[np.float64],
    directions: NDArray[np.float64],
    lo_m: NDArray[np.float64],
    hi_m: NDArray[np.float64],
    range_max_m: NDArray,
) -> NDArray[np.bool_]:
    """Whether each ray (N,) meets the axis-aligned box ``[lo_m, hi_m]`` ((3,) or one
    (N, 3) box a ray) at a distance in ``[0, range_max_m]`` (slab test)."""
    enter = np.zeros(len(origins_m))
    leave = np.asarray(range_max_m, dtype=np.float64).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(3):
            low, high = lo_m[..., k], hi_m[..., k]
            inv = 1.0 / directions[:, k]
            a = (low - origins_m[:, k]) * inv
            b = (high - origins_m[:, k]) * inv
            lo, hi = np.minimum(a, b), np.maximum(a, b)
            # a ray parallel to the slab: inside it for all t or never
            parallel = directions[:, k] == 0
            inside = (origins_m[:, k] >= low) & (origins_m[:, k] <= high)
            lo = np.where(parallel, np.where(inside, -np.inf, np.inf), lo)
            hi = np.where(parallel, np.where(inside, np.inf, -np.inf), hi)
            enter = np.maximum(enter, lo)
            leave = np.minimum(leave, hi)
    return enter <= leave
