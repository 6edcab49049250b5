"""One variant's run of tests/test_same_bytes.py, in a process of its own: the digests of
short reference scans (``benchmarks/checksums.py``'s cases), and of a sphere and the street
cast by Embree raw and refined, printed as one JSON line.

``python tests/support/same_bytes_run.py CASE ... [--set KEY=VALUE ...]``
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
from pathlib import Path

import numpy as np
import trimesh

import simulator
import simulator.world.scene
from simulator.world.raycast import import_open3d
from simulator.world.refine import RefinedScene

ROOT = Path(__file__).resolve().parents[2]


def _hex(*arrays: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=8)
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def sphere_digests() -> dict[str, str]:
    """Embree's raw ranges and normals of 200,000 rays at a sphere, and the refined ones
    (the raw ones show whether the variant reached Embree)."""
    sphere = trimesh.creation.icosphere(subdivisions=5, radius=3.0)
    scene = RefinedScene(import_open3d(), [np.asarray(sphere.vertices)], [np.asarray(sphere.faces)])
    rng = np.random.default_rng(0)
    origin = rng.normal(size=(200_000, 3))
    origin = 10.0 * origin / np.linalg.norm(origin, axis=1, keepdims=True)
    direction = rng.uniform(-2.5, 2.5, (200_000, 3)) - origin
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    rays = np.concatenate([origin, direction], axis=1).astype(np.float32)
    o3d = import_open3d()
    raw = scene.scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
    cast = scene.cast(rays)
    return {
        "embree_raw": _hex(raw["t_hit"].numpy(), raw["primitive_normals"].numpy()),
        "embree_refined": _hex(cast.t, cast.normal, cast.geometry, cast.primitive),
    }


def street_digests() -> dict[str, str]:
    """Embree's raw faces, and the refined hits, of 480,000 rays from two points of the
    bundled street (its static objects, as the ray engine places them) in every direction
    of a 1,600 x 150 grid: long grazing rays on the road, façades, kerbs and the coplanar
    faces of objects that touch."""
    scene = simulator.world.scene.load_scene(ROOT / "scenes" / "street" / "scene.yaml")
    static = [o for o in scene.objects if not o.moving]
    shift = scene.bounds_m.mean(axis=0)
    refined = RefinedScene(
        import_open3d(), [o.vertices_m - shift for o in static], [o.faces for o in static]
    )
    azimuth, elevation = np.meshgrid(
        np.linspace(-np.pi, np.pi, 1600, endpoint=False), np.radians(np.linspace(-30, 15, 150))
    )
    direction = np.stack(
        [np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth),
         np.sin(elevation)], axis=-1,
    ).reshape(-1, 3)  # fmt: skip
    rays = np.concatenate(
        [np.concatenate([np.broadcast_to(np.array(o) - shift, direction.shape), direction], 1)
         for o in ((-20.0, -1.6, 1.73), (15.0, 3.0, 1.2))]
    ).astype(np.float32)  # fmt: skip
    o3d = import_open3d()
    raw = refined.scene.cast_rays(o3d.core.Tensor.from_numpy(rays))
    cast = refined.cast(rays)
    return {
        "street_raw": _hex(raw["geometry_ids"].numpy(), raw["primitive_ids"].numpy()),
        "street_refined": _hex(cast.t, cast.normal, cast.geometry, cast.primitive),
    }


def main() -> None:
    """Print the digests as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--set", nargs="*", default=[])
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("checksums", ROOT / "benchmarks" / "checksums.py")
    assert spec is not None and spec.loader is not None
    checksums = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checksums)
    out: dict[str, object] = {**sphere_digests(), **street_digests()}
    for name in args.cases:
        survey, overrides = checksums.CASES[name]
        cloud = simulator.scan(ROOT / survey, [*overrides, *args.set])
        out[name] = f"{len(cloud)} {checksums.digest(cloud)}"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
