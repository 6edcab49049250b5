"""The bench's pipeline / cast ratio taken apart, in CPU seconds on one thread.

Runs the steady pipeline of ``lidar-sim bench`` (the 1 M-triangle bench scene, the RS-Helios,
no output) on one thread, and times inside it Open3D's cast, the float64 refinement of every
hit and the per-hit model's kernel; the bare cast of the same rays is timed as the bench
does. It prints, per repeat, the ratio the bench reports (pipeline / bare cast, here in CPU
seconds) and its floor: what the ratio would be if everything but those three kernels took
no time, ``(cast + refinement + per-hit kernel) / cast``. One thread, and CPU rather than wall
seconds, so that other work on the machine moves the figures less.

    NUMBA_NUM_THREADS=1 python benchmarks/pipeline_floor.py [--revolutions 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simulator.backend import select_backend
from simulator.bench.run import BenchOptions
from simulator.bench.scene import bench_survey, scene_of
from simulator.config import load_scanner
from simulator.kernels import hits as k_hits
from simulator.kernels import refine as k_refine
from simulator.pipeline.simulation import Simulation, Window

#: CPU seconds inside each timed kernel since the last reset.
SPENT_S = {"refine": 0.0, "hits": 0.0}


def _timed(name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel`` with its CPU seconds added to ``SPENT_S[name]``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        t0 = time.process_time()
        out = kernel(*args, **kwargs)
        SPENT_S[name] += time.process_time() - t0
        return out

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--revolutions", type=float, default=20.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    k_hits._evaluate_hits = _timed("hits", k_hits._evaluate_hits)
    k_refine._refine = _timed("refine", k_refine._refine)
    options = BenchOptions(revolutions=a.revolutions, output_format="none")
    scene, y0 = scene_of("bench", options.seed, options.scene_scale)
    sim = Simulation(
        survey=bench_survey("rs-helios-5515", y0, options),
        scanner=load_scanner("rs-helios-5515", {}),
        scene=scene,
        base_dir=Path("."),
        backend=select_backend(),
    )
    sim.limit_threads(1)
    sim.engine.cast(np.zeros((1, 3)), np.array([[1.0, 0.0, 0.0]]), np.zeros(1))  # the BVH
    sim.write([])  # kernels compiled or loaded, caches warm
    for _ in range(a.repeats):
        bare_s = 0.0
        for start, stop in sim.chunk_spans(Window(0, sim.total_pulses)):
            rays = sim.aim(start, stop).cast
            t0 = time.process_time()
            sim.engine.cast_bare(rays)
            bare_s += time.process_time() - t0
        SPENT_S.update(refine=0.0, hits=0.0)
        t0 = time.process_time()
        sim.write([])
        total_s = time.process_time() - t0
        kernels_s = SPENT_S["refine"] + SPENT_S["hits"]
        print(f"CPU s: bare cast {bare_s:.3f}, pipeline {total_s:.3f} (ratio "
              f"{total_s / bare_s:.2f}); refinement {SPENT_S['refine']:.3f}, per-hit kernel "
              f"{SPENT_S['hits']:.3f}, the rest {total_s - bare_s - kernels_s:.3f}; "
              f"floor {(bare_s + kernels_s) / bare_s:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
