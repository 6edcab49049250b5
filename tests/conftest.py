"""Shared helpers: write scanners, scenes and surveys to a temporary folder and scan them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings

import simulator
from simulator.pointcloud import PointCloud

REPO = Path(__file__).resolve().parent.parent

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


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without the interpreter's teardown once pytest has reported.

    Once (of many runs) the test process crashed after printing its summary, while native
    libraries (Open3D's TBB, numba's OpenMP, Filament) were shutting down. The results were
    already final; the exit code is pytest's own. The CLI's own exits stay tested: every
    CLI test runs the command in a child process and checks its exit code.
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
