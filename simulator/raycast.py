"""Ray casting with Open3D's ``RaycastingScene`` (Embree), one geometry per scene object.

Open3D casts in float32. To keep centimetre accuracy wherever the scene sits (map
coordinates included), the engine moves the scene to a local origin, the centre of
its bounding box, and moves every ray by the same amount; hit distances do not
change under that shift.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .chunk import Hits
from .scene import Scene
from .trajectory import Trajectory

__all__ = ["Hits", "RayEngine"]


class RayEngine:
    """Casts rays against a :class:`~simulator.scene.Scene` with Open3D.

    Static objects share one ``RaycastingScene``. Each moving object has a scene of
    its own, holding its mesh in its own frame; a ray is cast into it after moving the
    ray into the object's frame at the ray's own time, so motion is exact per pulse
    (no time slices), and the nearest hit of all scenes wins.

    Parameters
    ----------
    scene : Scene
        Its objects become the engine's geometries.
    """

    def __init__(self, scene: Scene) -> None:
        import open3d as o3d  # imported here: it is slow to import and needs libusb

        self._o3d = o3d
        #: Threads Open3D casts on (0: all cores); a worker process sharing the machine
        #: with others takes its share.
        self.threads = 0
        self.origin_shift_m: NDArray[np.float64] = scene.bounds_m.mean(axis=0)
        static = [i for i, o in enumerate(scene.objects) if not o.moving]
        self._scene, ids = self._build([scene.objects[i] for i in static], self.origin_shift_m)
        if ids != list(range(len(ids))):  # what cast_rays relies on
            raise RuntimeError(f"Open3D numbered the geometries unexpectedly: {ids[:5]}...")
        if int(o3d.t.geometry.RaycastingScene.INVALID_ID) != 2**32 - 1:
            raise RuntimeError("Open3D's INVALID_ID is not 2^32 - 1")
        self._static_index = np.asarray(static, dtype=np.int32)
        self._identity = static == list(range(len(scene.objects)))
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
            rc, _ = self._build(objs, local)
            radius = float(np.sqrt(((vertices - local) ** 2).sum(axis=1).max()))
            self._moving.append(
                _MovingGroup(np.asarray(members, np.int32), rc, local, radius, objs[0].trajectory)
            )

    @property
    def has_moving(self) -> bool:
        """Whether some objects move (casts then need each ray's time)."""
        return bool(self._moving)

    def _build(self, objects: list, shift: NDArray[np.float64]) -> tuple[object, list[int]]:
        o3d = self._o3d
        rc = o3d.t.geometry.RaycastingScene()
        ids = []
        for obj in objects:
            # One float32 and one uint32 copy each, shared with Open3D (from_numpy), which
            # copies them into Embree's buffers; both are freed after.
            vertices = (obj.vertices_m - shift).astype(np.float32)
            faces = obj.faces.astype(np.uint32)
            ids.append(
                rc.add_triangles(
                    o3d.core.Tensor.from_numpy(vertices), o3d.core.Tensor.from_numpy(faces)
                )
            )
            del vertices, faces
        return rc, ids

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
        self,
        rays: NDArray[np.float32],
        time_s: NDArray[np.float64] | None = None,
        line_start: NDArray[np.float32] | None = None,
    ) -> Hits:
        """Cast rays already in Open3D's layout (see :meth:`rays`), at times ``time_s``.

        ``line_start`` (N, 3), in the same layout as the rays' origins, optionally gives a
        point on each ray's line at or before its origin (the pulse's own origin, for a ray
        cast on behind a surface it passed): moving objects are culled from there, which
        works best when those points lie close together.
        """
        # from_numpy shares the array with Open3D (no copy; it only reads it).
        tensor = self._o3d.core.Tensor.from_numpy(np.ascontiguousarray(rays))
        result = self._scene.cast_rays(tensor, nthreads=self.threads)
        # Geometry ids are 0..n-1 in insertion order; INVALID_ID (2^32 - 1) read as int32
        # is exactly -1, the miss marker. Misses have t = inf and a zero normal already.
        geometry = result["geometry_ids"].numpy().view(np.int32)
        if self._identity:
            object_index = geometry
        else:
            object_index = np.where(geometry >= 0, self._static_index[np.maximum(geometry, 0)], -1)
            object_index = object_index.astype(np.int32)
        hits = Hits(
            range_m=result["t_hit"].numpy(),
            object_index=object_index,
            normal=result["primitive_normals"].numpy(),
        )
        if self._moving:
            if time_s is None:
                raise ValueError("the scene has moving objects: cast_rays needs the rays' times")
            self._cast_moving(rays, np.asarray(time_s, dtype=np.float64), hits, line_start)
        return hits

    def cast_bare(self, rays: NDArray[np.float32]) -> None:
        """Cast rays into the static objects and discard the result: Open3D's own cost
        alone, what the benchmark compares the pipeline with."""
        tensor = self._o3d.core.Tensor.from_numpy(np.ascontiguousarray(rays))  # no copy
        self._scene.cast_rays(tensor, nthreads=self.threads)

    def _cast_moving(
        self,
        rays: NDArray[np.float32],
        time_s: NDArray,
        hits: Hits,
        line_start: NDArray[np.float32] | None = None,
    ) -> None:
        """Intersect each moving group in its own frame at each ray's time; keep the nearest.

        Only the rays that enter the box swept by the group's bounding sphere over the rays'
        times, nearer than their hit so far, are moved and cast (the others cannot hit it).
        """
        origins = rays[:, :3].astype(np.float64) + self.origin_shift_m
        directions = rays[:, 3:].astype(np.float64)
        hits.range_m = np.array(hits.range_m)
        hits.object_index = np.array(hits.object_index)
        hits.normal = np.array(hits.normal)
        if len(rays) == 0:
            return
        t0, t1 = float(time_s.min()), float(time_s.max())
        samples = np.linspace(t0, t1, max(2, int(np.ceil((t1 - t0) / SWEEP_STEP_S)) + 1))
        starts = origins if line_start is None else line_start + self.origin_shift_m
        fan = _AzimuthFan(starts, directions)
        for group in self._moving:
            rot_k, pos_k = group.trajectory.poses(samples)
            centres = pos_k + np.einsum("kij,j->ki", rot_k, group.local_m)
            step = np.sqrt((np.diff(centres, axis=0) ** 2).sum(axis=1)).max(initial=0.0)
            pad = group.radius_m + step + SWEEP_MARGIN_M
            lo, hi = centres.min(axis=0) - pad, centres.max(axis=0) + pad
            rows = fan.towards(lo, hi)
            if len(rows) == 0:
                continue
            near = _enters_box(origins[rows], directions[rows], lo, hi, hits.range_m[rows])
            rows = rows[near]
            if len(rows) == 0:
                continue
            rot, pos = group.trajectory.poses(time_s[rows])
            o = np.einsum("nji,nj->ni", rot, origins[rows] - pos) - group.local_m
            d = np.einsum("nji,nj->ni", rot, directions[rows])
            local_rays = np.concatenate([o, d], axis=1).astype(np.float32)
            res = group.scene.cast_rays(self._o3d.core.Tensor(local_rays), nthreads=self.threads)
            t = res["t_hit"].numpy()
            nearer = t < hits.range_m[rows]
            if not nearer.any():
                continue
            at = rows[nearer]
            geometry = res["geometry_ids"].numpy().view(np.int32)[nearer]
            hits.range_m[at] = t[nearer]
            hits.object_index[at] = group.members[geometry]
            n_local = res["primitive_normals"].numpy()[nearer].astype(np.float64)
            hits.normal[at] = np.einsum("nij,nj->ni", rot[nearer], n_local)


#: Time step (s) at which a moving group's path is sampled to bound where it can be.
SWEEP_STEP_S = 0.005
#: Extra margin (m) around a moving group's swept box.
SWEEP_MARGIN_M = 0.05


@dataclass
class _MovingGroup:
    """Moving objects that share one trajectory, in one scene of their own frame."""

    members: NDArray[np.int32]  # scene object index of each geometry id
    scene: object  # their RaycastingScene, in the frame shifted by local_m
    local_m: NDArray[np.float64]  # the shift: the mean of their vertices, own frame
    radius_m: float  # the bounding sphere about local_m
    trajectory: Trajectory


class _AzimuthFan:
    """The rays of a chunk sorted by azimuth, to find those that can point at a box.

    A ray from ``o`` meets a box ``B`` only if its direction points into ``B - O``, ``O``
    being the box of all the rays' origins: that difference of two boxes is a box, whose
    azimuth span its ground-plane corners give (unless it holds the origin in the ground
    plane, when any direction may hit), and whose elevation lies between its lowest and
    highest face seen over its nearest and farthest ground reach.
    """

    def __init__(self, origins_m: NDArray[np.float64], directions: NDArray[np.float64]) -> None:
        self.azimuth = np.arctan2(directions[:, 1], directions[:, 0])
        self.order = np.argsort(self.azimuth, kind="stable")
        self.sorted = self.azimuth[self.order]
        self.dz = directions[:, 2]
        self.lo_m = origins_m.min(axis=0)
        self.hi_m = origins_m.max(axis=0)

    def towards(self, lo_m: NDArray[np.float64], hi_m: NDArray[np.float64]) -> NDArray[np.intp]:
        """Indices (sorted) of the rays whose azimuth can reach the box ``[lo_m, hi_m]``."""
        dlo = lo_m - self.hi_m  # the box B - O
        dhi = hi_m - self.lo_m
        if dlo[0] <= 0 <= dhi[0] and dlo[1] <= 0 <= dhi[1]:
            return np.arange(len(self.azimuth))
        # Elevation bounds of B - O: its height over its nearest and farthest ground reach.
        near = np.hypot(max(dlo[0], 0.0, -dhi[0]), max(dlo[1], 0.0, -dhi[1]))
        far = np.hypot(max(abs(dlo[0]), abs(dhi[0])), max(abs(dlo[1]), abs(dhi[1])))
        top = np.arctan2(dhi[2], near if dhi[2] > 0 else far) + AZIMUTH_MARGIN_RAD
        bottom = np.arctan2(dlo[2], far if dlo[2] > 0 else near) - AZIMUTH_MARGIN_RAD
        dz_lo, dz_hi = np.sin(max(bottom, -np.pi / 2)), np.sin(min(top, np.pi / 2))
        corners = np.array([[dlo[0], dlo[1]], [dlo[0], dhi[1]], [dhi[0], dlo[1]], [dhi[0], dhi[1]]])
        mid = np.arctan2(corners[:, 1].mean(), corners[:, 0].mean())
        delta = np.angle(np.exp(1j * (np.arctan2(corners[:, 1], corners[:, 0]) - mid)))
        a, b = mid + delta.min() - AZIMUTH_MARGIN_RAD, mid + delta.max() + AZIMUTH_MARGIN_RAD
        pieces = []
        for lo, hi in ((a, b), (a + 2 * np.pi, b + 2 * np.pi), (a - 2 * np.pi, b - 2 * np.pi)):
            i, j = np.searchsorted(self.sorted, [lo, hi])
            if j > i:
                pieces.append(self.order[i:j])
        if not pieces:
            return np.zeros(0, dtype=np.intp)
        rows = np.sort(np.concatenate(pieces))
        dz = self.dz[rows]
        return rows[(dz >= dz_lo) & (dz <= dz_hi)]


#: Angular margin (rad) of the azimuth test.
AZIMUTH_MARGIN_RAD = 1e-6


def _enters_box(
    origins_m: NDArray[np.float64],
    directions: NDArray[np.float64],
    lo_m: NDArray[np.float64],
    hi_m: NDArray[np.float64],
    range_max_m: NDArray,
) -> NDArray[np.bool_]:
    """Whether each ray (N,) meets the axis-aligned box ``[lo_m, hi_m]`` before
    ``range_max_m`` (slab test)."""
    enter = np.zeros(len(origins_m))
    leave = np.asarray(range_max_m, dtype=np.float64).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(3):
            inv = 1.0 / directions[:, k]
            a = (lo_m[k] - origins_m[:, k]) * inv
            b = (hi_m[k] - origins_m[:, k]) * inv
            lo, hi = np.minimum(a, b), np.maximum(a, b)
            # a ray parallel to the slab: inside it for all t or never
            parallel = directions[:, k] == 0
            inside = (origins_m[:, k] >= lo_m[k]) & (origins_m[:, k] <= hi_m[k])
            lo = np.where(parallel, np.where(inside, -np.inf, np.inf), lo)
            hi = np.where(parallel, np.where(inside, np.inf, -np.inf), hi)
            enter = np.maximum(enter, lo)
            leave = np.minimum(leave, hi)
    return enter <= leave
