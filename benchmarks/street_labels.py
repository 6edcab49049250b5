"""Label shares of scans of generated streets beside SemanticKITTI's, and the streets' size.

    python benchmarks/street_labels.py [--seeds 5] [--frames 10] [--plot docs/img/street_labels.png]

Each seed's street is driven in the ego lane at 8 m/s with an HDL-64E (KITTI's sensor,
1.73 m above the road); the shares of all the frames' points per class are printed
beside the ``content`` shares of SemanticKITTI, with moving classes merged into their
static ones (``moving-car`` into ``car``) as SemanticKITTI's single-scan benchmark does.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from simulator.config import (
    GeneratorRef,
    Pose,
    SceneSpec,
    Survey,
    TrajectorySpec,
    load_materials,
    load_scanner,
)
from simulator.labels import SEMANTIC_KITTI, SEMANTIC_KITTI_CONTENT
from simulator.pipeline.simulation import Simulation
from simulator.world.scene import build_scene

#: Moving classes merged into their static ones.
MOVING = {252: 10, 253: 31, 254: 30, 255: 32, 256: 16, 257: 13, 258: 18, 259: 20}


def merged(counts: dict[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for k, v in counts.items():
        out[MOVING.get(k, k)] = out.get(MOVING.get(k, k), 0.0) + v
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--frames", type=int, default=10)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args()
    counts: dict[int, float] = {}
    scanner = load_scanner("hdl-64e")
    for seed in range(args.seeds):
        t0 = time.perf_counter()
        scene = build_scene(SceneSpec(generator=GeneratorRef(name="street", seed=seed)),
                            Path("."), load_materials(), source="street")  # fmt: skip
        t_build = time.perf_counter() - t0
        survey = Survey(
            scanner="hdl-64e", scene="(generated)", revolutions=args.frames,
            trajectory=TrajectorySpec(start=Pose(position_m=[-40.0, -1.6, 0.0]),
                                      velocity_mps=[8.0, 0.0, 0.0]),
            mount=Pose(position_m=[0.0, 0.0, 1.73]),
        )  # fmt: skip
        sim = Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path("."))
        t0 = time.perf_counter()
        cloud = sim.run()
        t_scan = time.perf_counter() - t0
        ids, n = np.unique(cloud["label"], return_counts=True)
        for i, c in zip(ids.tolist(), n.tolist(), strict=True):
            counts[i] = counts.get(i, 0.0) + c
        print(f"seed {seed}: {len(scene.objects)} objects, {scene.triangle_count:,} triangles, "
              f"built in {t_build:.2f} s; {args.frames} frames, {len(cloud['label']):,} points "
              f"in {t_scan:.2f} s ({sim.total_pulses / t_scan / 1e6:.2f} M pulses/s)")  # fmt: skip
    ours = merged(counts)
    total = sum(ours.values())
    ref = merged(SEMANTIC_KITTI_CONTENT)
    names = {v: k for k, v in SEMANTIC_KITTI.items()}
    rows = sorted(set(ours) | {k for k, v in ref.items() if v > 1e-3}, key=lambda k: -ref.get(k, 0))
    print(f"\n{'class':16s} {'generated':>10s} {'SemanticKITTI':>14s}")
    for k in rows:
        print(f"{names[k]:16s} {100 * ours.get(k, 0) / total:9.2f} % {100 * ref.get(k, 0):12.2f} %")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(10, 4.2))
        x = np.arange(len(rows))
        ax.bar(
            x - 0.2, [100 * ours.get(k, 0) / total for k in rows], 0.4, label="generated streets"
        )
        ax.bar(x + 0.2, [100 * ref.get(k, 0) for k in rows], 0.4, label="SemanticKITTI")
        ax.set_xticks(x, [names[k] for k in rows], rotation=60, ha="right")
        ax.set_ylabel("share of points (%)")
        ax.set_title(f"Labels of {args.seeds} generated streets x {args.frames} HDL-64E frames")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
