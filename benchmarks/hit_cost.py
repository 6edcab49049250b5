"""CPU time a hit of the per-hit model's kernel, on one chunk of a farm scan.

Casts 262,144 pulses of ``scenes/farm/survey.yaml`` once, then times the fused kernel
(:func:`simulator.kernels.hits.evaluate_hits`, the point record's fields only) 30 times and
prints the least CPU time (both threads summed) over the hits: the figure the per-hit model's
levers are judged by, without the cast or the output around it.

    python benchmarks/hit_cost.py [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import simulator
from simulator.kernels import hits as k_hits

SURVEY = Path(__file__).resolve().parents[1] / "scenes" / "farm" / "survey.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    sim = simulator.Simulation.from_file(SURVEY, ["revolutions=6", *a.set])
    chunk = sim.cast_pulses(0, min(sim.total_pulses, 262_144))
    args = (chunk, sim.tables, sim.model, sim.streams)
    k_hits.evaluate_hits(*args, full=False)  # compiled or loaded once
    times = []
    for _ in range(a.repeats):
        t = time.process_time()
        res = k_hits.evaluate_hits(*args, full=False)
        times.append(time.process_time() - t)
    n = len(res.idx)
    print(f"{n:,} hits: least {min(times) * 1e3:.2f} ms CPU, median "
          f"{np.median(times) * 1e3:.2f} ms; {min(times) / n * 1e9:.1f} ns CPU a hit")  # fmt: skip


if __name__ == "__main__":
    main()
