"""The package's layout: the returns plan chosen once per survey, and the old module paths
of the modules that moved into folders still loading (for one release)."""

from __future__ import annotations

import importlib
import pickle
import sys

import pytest

import simulator
from simulator.pipeline.plans import (
    AdaptiveReturns,
    EchoReturns,
    LayeredReturns,
    SeeThroughReturns,
    SingleReturns,
)

from .conftest import REPO

FARM = REPO / "scenes/farm/survey.yaml"  # vegetation lets light through
PLAIN = REPO / "scenes/calibration/survey.yaml"  # nothing does
FULL = ["scanner_overrides.beam_samples=7", "scanner_overrides.beam_sampling=full"]
ADAPTIVE = ["scanner_overrides.beam_samples=7", "scanner_overrides.beam_sampling=adaptive"]
FOG = ["weather.fog.visibility_m=50"]


@pytest.mark.parametrize(
    ("survey", "overrides", "plan", "first"),
    [
        (PLAIN, [], SingleReturns, None),
        (PLAIN, FULL, EchoReturns, None),
        (FARM, [], SeeThroughReturns, None),
        (FARM, FOG, LayeredReturns, SingleReturns),
        (PLAIN, FOG, LayeredReturns, SingleReturns),
        (FARM, FULL, LayeredReturns, EchoReturns),
        (PLAIN, FULL + FOG, LayeredReturns, EchoReturns),
        (FARM, ADAPTIVE, AdaptiveReturns, None),
        (PLAIN, ADAPTIVE + FOG, AdaptiveReturns, None),
    ],
    ids=[
        "single",
        "echoes",
        "see-through",
        "farm-fog",
        "fog",
        "farm-echoes",
        "echoes-fog",
        "adaptive",
        "adaptive-fog",
    ],
)
def test_the_survey_picks_one_returns_plan_at_set_up(
    survey: object, overrides: list[str], plan: type, first: type | None
) -> None:
    """Each kind of survey gets its plan once, when the simulation is built; the chunks
    then call it (the plan's class, and the plan a layered one falls back on)."""
    sim = simulator.Simulation.from_file(survey, overrides)  # type: ignore[arg-type]
    assert type(sim.returns) is plan
    if first is not None:
        assert type(sim.returns.first) is first  # type: ignore[attr-defined]
    assert sim.see_through.any == (survey == FARM)


@pytest.mark.parametrize("old", sorted(simulator.MOVED))
def test_an_old_module_path_loads_the_moved_module_with_a_warning(old: str) -> None:
    """``import simulator.<old>`` gives the module at its new path (the same object), and
    says where it went."""
    name = f"simulator.{old}"
    sys.modules.pop(name, None)
    with pytest.warns(DeprecationWarning, match=f"simulator.{simulator.MOVED[old]}"):
        module = importlib.import_module(name)
    assert module is importlib.import_module(f"simulator.{simulator.MOVED[old]}")


def test_an_object_pickled_under_an_old_path_loads() -> None:
    """A pickle that names a class by its old module (a parts cache, a Dask graph from the
    last release) loads as the class at its new path."""
    from simulator.sensor.trajectory import Trajectory

    data = pickle.dumps(Trajectory.__new__(Trajectory), protocol=0)  # (text: the module by name)
    old = data.replace(b"simulator.sensor.trajectory", b"simulator.trajectory")
    assert old != data
    with pytest.warns(DeprecationWarning):
        sys.modules.pop("simulator.trajectory", None)
        loaded = pickle.loads(old)
    assert type(loaded) is Trajectory


def test_the_licence_and_the_citation_name_the_projects_authors() -> None:
    """LICENSE is MIT as pyproject says, and CITATION.cff cites the version and the authors
    that pyproject.toml names."""
    import tomllib
    import yaml

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    licence = (REPO / "LICENSE").read_text()
    assert licence.startswith("MIT License")
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["version"] == project["version"] == simulator.__version__
    assert [a["name"] for a in cff["authors"]] == [a["name"] for a in project["authors"]]
    assert all(a["name"] in licence for a in project["authors"])
