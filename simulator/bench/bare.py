"""The plain script a user could write instead of the simulator: cast, keep the hits, save.

``python -m simulator.bench.bare [--revolutions N] [--scene-scale S] [--chunk-pulses C]``
prints, as JSON, the seconds of its cast-and-save loop on the benchmark scene with the
RS-Helios' rays at 1.8 m, the same rays ``lidar-sim bench`` casts. Untimed: building the
scene and Open3D's structure (one warm-up cast), and making the rays. Timed: for each chunk,
Open3D's ``cast_rays``, keeping the rays that hit, their hit points, and writing five fields
(``xyz``, ``range_m``, ``normal``, ``object_id``, ``ring``) with ``np.savez``. That is the
least a simulator must do, with no physics at all; ``lidar-sim bench`` runs this script in
the same run and prints both, per revolution.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import open3d as o3d

from simulator.bench.scene import build_bench_scene
from simulator.config import Pose, Survey, load_scanner
from simulator.pipeline.simulation import Simulation


def cast_and_save(
    scene: o3d.t.geometry.RaycastingScene, chunks: list[np.ndarray], path: Path
) -> int:
    """Cast each (N, 6) float32 chunk of rays, keep the hits, save five fields; the hits."""
    xyz, range_m, normal, object_id, ring = [], [], [], [], []
    for rays in chunks:
        result = scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
        t = result["t_hit"].numpy()
        hit = np.isfinite(t)
        xyz.append(rays[hit, :3] + rays[hit, 3:] * t[hit, None])
        range_m.append(t[hit])
        normal.append(result["primitive_normals"].numpy()[hit])
        object_id.append(result["geometry_ids"].numpy()[hit])
        ring.append((np.flatnonzero(hit) % 32).astype(np.uint16))
    np.savez(
        path,
        xyz=np.concatenate(xyz),
        range_m=np.concatenate(range_m),
        normal=np.concatenate(normal),
        object_id=np.concatenate(object_id),
        ring=np.concatenate(ring),
    )
    return sum(len(r) for r in range_m)


def run(revolutions: float, scene_scale: float, chunk_pulses: int) -> dict[str, float]:
    """Build the scene and the rays (untimed), then time :func:`cast_and_save`."""
    objects = build_bench_scene(0, scene_scale)
    scene = o3d.t.geometry.RaycastingScene()
    for obj in objects.objects:
        scene.add_triangles(
            o3d.core.Tensor(obj.vertices_m.astype(np.float32)),
            o3d.core.Tensor(obj.faces.astype(np.uint32)),
        )
    survey = Survey(
        scanner="rs-helios-5515",
        scene="(in memory)",
        pose=Pose(position_m=[0.0, 0.0, 1.8]),
        revolutions=revolutions,
        chunk_pulses=chunk_pulses,
    )
    sim = Simulation(
        survey=survey, scanner=load_scanner("rs-helios-5515"), scene=objects, base_dir=Path(".")
    )
    shift = sim.engine.origin_shift_m.astype(np.float32)  # the simulator's local origin
    chunks = []
    for a, b in sim.chunk_spans():
        rays = sim.aim(a, b).cast.copy()
        rays[:, :3] += shift  # back to world coordinates, as the scene above holds them
        chunks.append(rays)
    scene.cast_rays(o3d.core.Tensor.from_numpy(chunks[0][:1]))  # the BVH, untimed
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        hits = cast_and_save(scene, chunks, Path(tmp) / "bare.npz")
        seconds = time.perf_counter() - t0
    return {
        "seconds": seconds,
        "revolutions": revolutions,
        "per_revolution_ms": 1e3 * seconds / revolutions,
        "pulses": sum(len(c) for c in chunks),
        "hits": hits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revolutions", type=float, default=50.0)
    parser.add_argument("--scene-scale", type=float, default=1.0)
    parser.add_argument("--chunk-pulses", type=int, default=2**18)
    args = parser.parse_args()
    print(json.dumps(run(args.revolutions, args.scene_scale, args.chunk_pulses)))


if __name__ == "__main__":
    main()
