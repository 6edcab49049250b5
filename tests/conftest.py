"""Shared helpers: write scanners, scenes and surveys to a temporary folder and scan them;
run ``lidar-sim`` in this process."""

from __future__ import annotations

import io
import os
import traceback
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import settings

import simulator
from simulator.pointcloud import PointCloud

REPO = Path(__file__).resolve().parent.parent

# The CLI's consoles are made at import: wide lines, as the child-process tests set them.
os.environ.setdefault("COLUMNS", "200")

# The property tests draw the same examples on every run, everywhere (a failure
# reproduces, and whether a run passes does not depend on luck). To explore new examples,
# run with LIDAR_SIM_HYPOTHESIS=explore.
settings.register_profile("fixed", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("LIDAR_SIM_HYPOTHESIS", "fixed"))

#: A material with every stochastic effect off.
PLAIN = {
    "reflectance": 0.5,
    "minnaert_k": 1.0,
    "roughness_m": 0.0,
    "micro_slope_deg": 0.0,
    "micro_slope_cell_m": 0.1,
    "label": "other-structure",
}


def single_channel_scanner(**overrides: Any) -> dict[str, Any]:
    """A one-channel spinning scanner at elevation 0 with no noise, as a mapping."""
    base: dict[str, Any] = {
        "name": "test-1ch",
        "pattern": "spinning",
        "rotation_hz": 10.0,
        "firings_per_revolution": 3600,
        "channels": {"elevation_deg": [0.0]},
        "range_min_m": 0.1,
        "range_max_m": 1000.0,
        "range_resolution_m": 0.0,
        "divergence_mrad": {"horizontal": 0.0, "vertical": 0.0},
        "pulse_length_ns": 5.0,
        "detection": {"reference_range_m": 110.0, "reference_reflectance": 0.1},
        "range_noise_m": 0.0,
        "intensity_scale": 100.0,
    }
    return simulator.config.deep_merge(base, overrides)


class Workspace:
    """A temporary folder holding one survey, its scene and optionally its scanner."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, name: str, data: dict[str, Any]) -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        return path

    def survey(
        self,
        objects: list[dict[str, Any]],
        scanner: str | dict[str, Any] = "rs-helios-5515",
        **keys: Any,
    ) -> Path:
        """Write scene.yaml (and scanner.yaml if a mapping is given) and survey.yaml."""
        self.write("scene.yaml", {"objects": objects})
        if isinstance(scanner, dict):
            self.write("scanner.yaml", scanner)
            scanner = "scanner.yaml"
        survey = {
            "scanner": scanner,
            "scene": "scene.yaml",
            "pose": {"position_m": [0.0, 0.0, 0.0], "rotation_deg": [0.0, 0.0, 0.0]},
            "revolutions": 1,
            "seed": 0,
            "output": {"path": "out/scan.npz", "frame": "world", "diagnostics": True},
        }
        survey.update(keys)
        survey = {k: v for k, v in survey.items() if v is not None}  # None drops a key
        return self.write("survey.yaml", survey)

    def scan(self, objects: list[dict[str, Any]], **kw: Any) -> PointCloud:
        """Write the survey and scan it."""
        overrides = kw.pop("overrides", None)
        return simulator.scan(self.survey(objects, **kw), overrides)


@dataclass
class Ran:
    """What a ``lidar-sim`` command gave: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def lidar_sim(*args: str | Path, cwd: Path | None = None) -> Ran:
    """``lidar-sim ARGS`` run in this process (:func:`simulator.cli.main`), as a child
    process would run it: the exit code (``sys.exit``'s, 1 and the traceback on stderr for an
    exception the command let through), stdout and stderr. It saves the child's start
    (Python and numba imports, ~2-3 s); the tests of the process itself (the entry point,
    exit codes, what a command imports) keep a child process."""
    from simulator.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main([str(a) for a in args])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except Exception:  # what a process would print before exit code 1
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(here)
    return Ran(code, out.getvalue(), err.getvalue())


def count_cast_in_full(sim: simulator.Simulation) -> tuple[PointCloud, int]:
    """Scan ``sim`` counting the pulses adaptive sampling casts in full (those whose
    footprint's remaining sub-rays, beyond its probes, are cast): the cloud and the count.
    Full sampling, or adaptive sampling that casts nothing more, counts 0."""
    from simulator.footprint import neighbour_stride, probe_indices

    probes = len(probe_indices(sim.beam, neighbour_stride(sim.pattern, sim.beam) == 0))
    full = [0]
    original = sim.footprint_rays

    def counting(rays: Any, which: Any = None) -> Any:
        if which is not None and len(which) == sim.beam.samples - probes:
            full[0] += len(rays.beams)
        return original(rays, which)

    sim.footprint_rays = counting  # type: ignore[method-assign]
    try:
        cloud = sim.run()
    finally:
        del sim.footprint_rays
    return cloud, full[0]


def judged_in_full(sim: simulator.Simulation) -> np.ndarray:
    """(P,) bool: the pulses the numpy specification of the footprint test
    (:func:`simulator.footprint.single_surface`, and what is cast in full whatever the
    witnesses say) leaves to full sampling."""
    from simulator.footprint import single_surface

    parts = []
    for a, b in sim.chunk_spans():
        chunk = sim.cast(sim.aim(a, b, footprints=False))
        smooth = single_surface(chunk.beams, chunk.hits, sim.witnesses(chunk))
        parts.append(~smooth | sim.cast_in_full(chunk, []))
    return np.concatenate(parts)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without the interpreter's teardown once pytest has reported.

    Once (of many runs) the test process crashed after printing its summary, while native
    libraries (Open3D's TBB, numba's OpenMP, Filament) were shutting down. The results were
    already final; the exit code is pytest's own. The CLI's own exits stay tested: the
    process tests of ``test_cli.py`` run the command in a child process and check its exit
    code.
    """
    import os
    import sys

    status = getattr(config, "_exit_status", None)
    if status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(status))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._exit_status = exitstatus  # type: ignore[attr-defined]
