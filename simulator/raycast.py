"""Ray casting with Open3D's ``RaycastingScene`` (Embree), one geometry per scene object.

Open3D casts in float32. To keep centimetre accuracy wherever the scene sits (map
coordinates included), the engine moves the scene to a local origin, the centre of
its bounding box, and moves every ray by the same amount; hit distances do not
change under that shift.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from .chunk import Hits
from .scene import Scene

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
        self._moving = []
        for i, obj in enumerate(scene.objects):
            if obj.moving:
                local = obj.vertices_m.mean(axis=0)
                rc, _ = self._build([obj], local)
                self._moving.append((i, rc, local, obj.trajectory))

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
        self, rays: NDArray[np.float32], time_s: NDArray[np.float64] | None = None
    ) -> Hits:
        """Cast rays already in Open3D's layout (see :meth:`rays`), at times ``time_s``."""
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
            self._cast_moving(rays, np.asarray(time_s, dtype=np.float64), hits)
        return hits

    def cast_bare(self, rays: NDArray[np.float32]) -> None:
        """Cast rays into the static objects and discard the result: Open3D's own cost
        alone, what the benchmark compares the pipeline with."""
        tensor = self._o3d.core.Tensor.from_numpy(np.ascontiguousarray(rays))  # no copy
        self._scene.cast_rays(tensor, nthreads=self.threads)

    def _cast_moving(self, rays: NDArray[np.float32], time_s: NDArray, hits: Hits) -> None:
        """Intersect each moving object in its own frame at each ray's time; keep the nearest."""
        origins = rays[:, :3].astype(np.float64) + self.origin_shift_m
        directions = rays[:, 3:].astype(np.float64)
        hits.range_m = np.array(hits.range_m)
        hits.object_index = np.array(hits.object_index)
        hits.normal = np.array(hits.normal)
        for index, rc, local, trajectory in self._moving:
            rot, pos = trajectory.poses(time_s)
            o = np.einsum("nji,nj->ni", rot, origins - pos) - local
            d = np.einsum("nji,nj->ni", rot, directions)
            local_rays = np.concatenate([o, d], axis=1).astype(np.float32)
            res = rc.cast_rays(self._o3d.core.Tensor(local_rays), nthreads=self.threads)
            t = res["t_hit"].numpy()
            nearer = t < hits.range_m
            if not nearer.any():
                continue
            hits.range_m[nearer] = t[nearer]
            hits.object_index[nearer] = index
            n_local = res["primitive_normals"].numpy()[nearer].astype(np.float64)
            hits.normal[nearer] = np.einsum("nij,nj->ni", rot[nearer], n_local)
