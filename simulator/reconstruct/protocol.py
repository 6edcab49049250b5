"""The protocols: scan a frame back from its own pose (reproduction) or from a frame left
out of the scene (held-out), on the real frame's beams, and the reprojection baseline.

**Baseline.** What a simulator must beat: the scene frames' own points, moved into the
held-out frame's pose by the poses and z-buffered onto its beam grid (the nearest point
wins a beam), with no reconstruction and no simulation. On a slow drive it is hard to
beat, which is the point: the simulator earns its figures only where geometry, physics
and the sensor model add something to moved points.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..compare import compare_clouds
from ..io.atomic import write_atomic
from ..pipeline.simulation import Simulation
from ..pointcloud import PointCloud
from ..sensor.scanner import SpinningPattern
from ..viz.compare import write_compare_page
from .grid import BeamGrid, cloud_of_grid, organize, with_beam_grid
from .mesh import MeshCaster

__all__ = ["baseline_cloud", "scan_frame", "score", "surface_ranges"]


def scan_frame(survey: Path) -> tuple[PointCloud, Simulation]:
    """Scan a frame's survey; the cloud with its beam grid (``column``)."""
    sim = Simulation.from_file(survey, ["output.diagnostics=true"])
    if not isinstance(sim.pattern, SpinningPattern):
        raise TypeError("a frame survey scans a spinning scanner")
    cloud = sim.run()
    return with_beam_grid(cloud, sim.pattern, sim.total_pulses), sim


def baseline_cloud(
    sources: list[tuple[BeamGrid, NDArray[np.float64]]],
    pose: NDArray[np.float64],
    pattern: SpinningPattern,
    meta: dict[str, Any],
    origin_m: NDArray[np.float64] | None = None,
) -> PointCloud:
    """The reprojection baseline of a frame (see the module).

    Parameters
    ----------
    sources : list of (BeamGrid, (4, 4) pose)
        The scene's frames and their world-from-sensor poses.
    pose : (4, 4) float64
        The held-out frame's pose.
    pattern : SpinningPattern
        The scanner, whose beams the points are organised on.
    meta : dict
        The cloud's meta (``intensity_max``).
    origin_m : (3,) float, optional
        The scanner model's origin in the sensor frame (:func:`.grid.sensor_offset_m`).
    """
    inv = np.linalg.inv(pose)
    xyz, intensity = [], []
    for grid, p in sources:
        ret = grid.returned
        world = grid.xyz_m[ret] @ p[:3, :3].T + p[:3, 3]
        xyz.append(world @ inv[:3, :3].T + inv[:3, 3])
        intensity.append(grid.intensity[ret])
    points = np.concatenate(xyz)
    moved = PointCloud(
        {
            "xyz": points.astype(np.float32),
            "intensity": np.concatenate(intensity).astype(np.float32),
            "range_m": np.linalg.norm(points, axis=1).astype(np.float32),
        },
        dict(meta),
    )
    return cloud_of_grid(organize(moved, pattern, origin_m), meta)


def score(
    real: PointCloud,
    simulated: PointCloud,
    folder: Path,
    names: tuple[str, str],
    page: bool = True,
) -> dict:
    """Compare a frame with its scan (or baseline) and write ``compare.json`` and, with
    ``page``, compare's page (``index.html`` and its plots) into ``folder``; the figures."""
    result = compare_clouds(real, simulated)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "compare.json", json.dumps(result, indent=2) + "\n")
    if page:
        write_compare_page(real, simulated, result, folder, names)
    return result


def surface_ranges(
    vertices_m: NDArray[np.float64],
    faces: NDArray[np.int64],
    origin_m: NDArray[np.float64],
    direction: NDArray[np.float64],
    range_offset_m: float = 0.0,
) -> NDArray[np.float64]:
    """Where each beam meets a mesh, (C, W) float64 (inf where it meets none).

    Parameters
    ----------
    vertices_m : (V, 3) float64
    faces : (F, 3) int64
    origin_m, direction : (C, W, 3) float64
        The beams in the world frame.
    range_offset_m : float
        Added to every distance (a range measured from the lidar origin, not the beam's).
    """
    return MeshCaster(vertices_m, faces).ranges(origin_m, direction, range_offset_m)
