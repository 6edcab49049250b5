"""Fill numba's cache with the kernels the suite calls most, in two processes at once.

A clean clone compiles every kernel once (about a minute of CPU). One process doing it all
left the machine's second core idle; two processes that each ran the whole warm-up would
each compile every kernel. Here each of the two runs :data:`WARM_UP`'s scans with the
kernels of its half of the kernel modules (:func:`half_backend`) and the numpy
specification for the other half's steps, so each compiles only its half: the two halves'
machine code together is what one process running every kernel compiles (the same
signatures: a step's specification returns what its kernel returns). Checked by hand
(2026-12-05): after the two halves on a clean cache, :data:`WARM_UP`'s scans with every
kernel compiled nothing.

numba's cache is a file a kernel's machine code and one index a kernel function listing
them; its save reads the index, adds an entry and rewrites it, so two processes saving the
same function at once could each drop the other's entry, or number their files alike. The
halves share no kernel function (each reports the kernels it compiled, and
``tests/conftest.py`` names any compiled by both), and each save here holds a lock on a
file both processes take (:func:`lock_cache_saves`): should a kernel ever be compiled by
both, it costs time, not a wrong cache.

``python tests/support/warm_up.py HALF LOCK_FILE`` (``HALF``: 0 or 1) prints one JSON
line: the package's folder and the kernels this process compiled (module.function).
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: Surveys whose scans compile the kernels the suite calls most (the spinning path and LAS
#: packing; see-through surfaces; a moving sensor, moving objects and the cull; sub-rays,
#: dual returns and adaptive footprints; the weather's media through foliage, and in a
#: scene with no see-through surface, the calibration yard: the one-kernel path of
#: ``simulator.kernels.weather``, 30 of the 107 CPU s of compiling, which a test compiled
#: in its worker before), each a few thousand pulses. A kernel's variant left out compiles
#: in the worker that first calls it.
WARM_UP: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("scenes/farm/survey.yaml", ("revolutions=1",)),
    ("scenes/street/drive.yaml", ("revolutions=0.2", "output.diagnostics=true")),
    ("scenes/tree/survey.yaml", ("revolutions=0.1",)),
    ("scenes/tree/survey.yaml", ("revolutions=0.1", "weather.fog.visibility_m=50",
                                 "scanner_overrides.beam_samples=7")),
    ("scenes/farm/survey.yaml", ("revolutions=0.02", "scanner_overrides.beam_samples=7",
                                 "scanner_overrides.return_mode=dual")),
    ("scenes/farm/survey.yaml", ("revolutions=0.02", "scanner_overrides.beam_samples=7",
                                 "scanner_overrides.beam_sampling=adaptive")),
    ("scenes/farm/survey.yaml", ("revolutions=0.02", "weather.fog.visibility_m=50",
                                 "weather.rain.rate_mm_h=10", "weather.snow.rate_mm_h=2")),
    ("scenes/farm/drive.yaml", ("duration_s=0.01", "output.diagnostics=true")),
    ("scenes/calibration/survey.yaml", ("revolutions=0.02", "weather.fog.visibility_m=50",
                                        "weather.rain.rate_mm_h=10", "weather.snow.rate_mm_h=2")),
    ("scenes/calibration/survey.yaml", ("revolutions=0.02", "weather.rain.rate_mm_h=10")),
    ("scenes/calibration/survey.yaml", ("revolutions=0.02", "weather.rain.rate_mm_h=10",
                                        "scanner_overrides.beam_samples=7",
                                        "scanner_overrides.beam_sampling=adaptive")),
    ("scenes/tree/survey.yaml", ("revolutions=0.1", "weather.rain.rate_mm_h=10")),
)  # fmt: skip

#: The kernel modules (:attr:`simulator.backend.Step.kernel`) whose steps the first
#: process compiles; the second compiles every other module's. The weather's kernels call
#: the echoes', the particles' and the soft targets' functions, so those stay together (in
#: the second). Run at once on a clean cache, the halves took 55 and 60 CPU s (user and
#: system, load 3-6; 107 CPU s of compiling in one process), and compiled no kernel twice.
FIRST_HALF: frozenset[str] = frozenset(
    {"hits", "see_through", "rays", "record", "cull", "refine", "merge", "footprint", "echoes"}
)


def half_backend(half: int) -> Any:
    """The numba backend with the steps of the other half's kernel modules computed by
    their numpy specification: ``half`` 0 keeps :data:`FIRST_HALF`'s kernels, 1 the rest."""
    from simulator.backend import STEPS, NumbaBackend

    backend = NumbaBackend()
    for step in STEPS:
        if (step.kernel in FIRST_HALF) != (half == 0):
            setattr(backend, step.name, step.specification_function())
    return backend


@contextmanager
def lock_cache_saves(lock_file: Path) -> Iterator[None]:
    """Each of numba's cache saves in this process holds an exclusive lock on
    ``lock_file`` (``fcntl.flock``), so that no other process holding it for its saves
    reads a kernel's index while this one rewrites it."""
    import fcntl

    from numba.core.caching import IndexDataCacheFile

    save = IndexDataCacheFile.save

    def locked_save(self: Any, key: Any, data: Any) -> None:
        with lock_file.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            save(self, key, data)  # (closing the file releases the lock)

    IndexDataCacheFile.save = locked_save  # type: ignore[method-assign]
    try:
        yield
    finally:
        IndexDataCacheFile.save = save  # type: ignore[method-assign]


def compiled_kernels() -> list[str]:
    """The kernel functions this process compiled (numba's cache misses), as
    ``module.function`` under :mod:`simulator.kernels`, sorted."""
    from numba.core.registry import CPUDispatcher

    package = "simulator.kernels."
    found = {
        f"{name[len(package):]}.{value.py_func.__name__}"
        for name, module in list(sys.modules.items()) if name.startswith(package)
        for value in vars(module).values()
        if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name
        and sum(value.stats.cache_misses.values())
    }  # fmt: skip
    return sorted(found)


def warm_half(half: int, lock_file: Path) -> list[str]:
    """Scan :data:`WARM_UP`'s surveys with :func:`half_backend`, saving to numba's cache
    under ``lock_file``: the kernels compiled. The scans are written to npz, and by the
    half that holds the LAS packing's kernel module to LAS too (the LAS writer packs with
    the default backend's kernel, not the simulation's)."""
    import simulator
    from simulator.backend import STEPS

    backend = half_backend(half)
    las = any(s.name == "pack_las" and (s.kernel in FIRST_HALF) == (half == 0) for s in STEPS)
    with lock_cache_saves(lock_file), tempfile.TemporaryDirectory() as tmp:
        outputs = [Path(tmp) / "warm.npz", *([Path(tmp) / "warm.las"] if las else [])]
        for survey, overrides in WARM_UP:
            sim = simulator.Simulation.from_file(REPO / survey, list(overrides), backend=backend)
            sim.write(outputs)
    return compiled_kernels()


def main() -> None:
    half, lock_file = int(sys.argv[1]), Path(sys.argv[2])
    import simulator

    compiled = warm_half(half, lock_file)
    print(json.dumps({"package": str(Path(simulator.__file__).parent), "compiled": compiled}))


if __name__ == "__main__":
    main()
