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

from .scene import Scene

__all__ = ["Hits", "RayEngine"]


@dataclass
class Hits:
    """Result of casting N rays.

    Attributes
    ----------
    range_m : (N,) float32
        Distance along the unit direction to the first hit; ``inf`` for a miss.
    object_index : (N,) int32
        Index into ``Scene.objects``; -1 for a miss.
    normal : (N, 3) float32
        Unit normal of the hit triangle (as wound, not yet turned to the sensor);
        zero for a miss.
    """

    range_m: NDArray[np.float32]
    object_index: NDArray[np.int32]
    normal: NDArray[np.float32]

    @property
    def hit(self) -> NDArray[np.bool_]:
        """(N,) bool: which rays hit something."""
        return self.object_index >= 0


class RayEngine:
    """Casts rays against a :class:`~simulator.scene.Scene` with Open3D.

    Parameters
    ----------
    scene : Scene
        Its objects become the engine's geometries, in order.
    """

    def __init__(self, scene: Scene) -> None:
        import open3d as o3d  # imported here: it is slow to import and needs libusb

        self._o3d = o3d
        self.origin_shift_m: NDArray[np.float64] = scene.bounds_m.mean(axis=0)
        self._scene = o3d.t.geometry.RaycastingScene()
        ids = []
        for obj in scene.objects:
            # One float32 and one uint32 copy each, shared with Open3D (from_numpy), which
            # copies them into Embree's buffers; both are freed after.
            vertices = (obj.vertices_m - self.origin_shift_m).astype(np.float32)
            faces = obj.faces.astype(np.uint32)
            ids.append(
                self._scene.add_triangles(
                    o3d.core.Tensor.from_numpy(vertices), o3d.core.Tensor.from_numpy(faces)
                )
            )
            del vertices, faces
        if ids != list(range(len(ids))):  # what cast_rays relies on
            raise RuntimeError(f"Open3D numbered the geometries unexpectedly: {ids[:5]}...")
        if int(o3d.t.geometry.RaycastingScene.INVALID_ID) != 2**32 - 1:
            raise RuntimeError("Open3D's INVALID_ID is not 2^32 - 1")

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

    def cast(self, origins_m: NDArray[np.float64], directions: NDArray[np.float64]) -> Hits:
        """Cast rays; return the first hit of each.

        Parameters
        ----------
        origins_m : (N, 3) float
            World coordinates of the ray origins.
        directions : (N, 3) float
            Unit directions (world frame).

        Returns
        -------
        Hits
        """
        return self.cast_rays(self.rays(origins_m, directions))

    def cast_rays(self, rays: NDArray[np.float32]) -> Hits:
        """Cast rays already in Open3D's layout (see :meth:`rays`)."""
        result = self._scene.cast_rays(self._o3d.core.Tensor(rays))
        # Geometry ids are 0..n-1 in insertion order; INVALID_ID (2^32 - 1) read as int32
        # is exactly -1, the miss marker. Misses have t = inf and a zero normal already.
        object_index = result["geometry_ids"].numpy().view(np.int32)
        return Hits(
            range_m=result["t_hit"].numpy(),
            object_index=object_index,
            normal=result["primitive_normals"].numpy(),
        )
