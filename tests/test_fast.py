"""The fused numba kernels against the numpy specification, value for value."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator import fast
from simulator.returns import evaluate_hits, evaluate_hits_fast

from .conftest import REPO

pytestmark = pytest.mark.skipif(not fast.AVAILABLE, reason="numba is not installed")

SURVEY = REPO / "scenes" / "farm" / "survey.yaml"


@pytest.fixture(scope="module")
def sim() -> simulator.Simulation:
    return simulator.Simulation.from_file(
        SURVEY, ["output.diagnostics=true", "seed=11", "revolutions=0.5"]
    )


def _reference_rays(sim: simulator.Simulation, start: int, stop: int) -> np.ndarray:
    schedule = sim.pattern.schedule(start, stop)
    origins, directions, _ = sim.trajectory.to_world(
        schedule.origin_m, schedule.direction, schedule.time_s
    )
    return sim.engine.rays(origins, directions)


def test_spinning_rays_match_the_schedule(sim: simulator.Simulation) -> None:
    """The ray kernel gives the numpy schedule's rays, to float32 rounding."""
    start, stop = 12_345, 12_345 + 40_000
    t = sim.trajectory
    rays = fast.spinning_rays(
        sim.pattern, start, stop, t.rotation, t.position_m, sim.engine.origin_shift_m
    )
    ref = _reference_rays(sim, start, stop)
    assert rays.dtype == np.float32 and rays.shape == ref.shape
    ulp = np.spacing(np.abs(ref).max(axis=0))
    assert np.all(np.abs(rays - ref) <= ulp)
    assert np.mean(rays == ref) > 0.999


def test_hit_kernel_matches_the_numpy_model(sim: simulator.Simulation) -> None:
    """Every per-hit quantity of the kernel equals the specification's."""
    start, stop = 0, sim.total_pulses
    rays = _reference_rays(sim, start, stop)
    hits = sim.engine.cast_rays(rays)
    up = sim.trajectory.sensor_up()
    args = (start, rays, sim.engine.origin_shift_m, up, hits, sim.tables, sim.model, sim.streams)
    ref = evaluate_hits(*args)
    got = evaluate_hits_fast(*args)
    assert len(ref.idx) > 15_000
    np.testing.assert_array_equal(got.idx, ref.idx)
    np.testing.assert_array_equal(got.keep, ref.keep)
    for name in ("intensity", "cos_incidence", "cos_effective", "spread_m", "peak_factor"):
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), rtol=1e-11, atol=1e-15)
    # Measured ranges are quantised: equal, bar a rounding tie flipped by the last bit.
    steps = np.abs(got.range_m - ref.range_m) / sim.scanner.range_resolution_m
    assert np.all((steps < 1e-6) | (np.abs(steps - 1) < 1e-6))
    assert np.count_nonzero(steps > 0.5) <= 1


@pytest.mark.parametrize("diagnostics", [True, False])
def test_fast_and_numpy_pipelines_give_the_same_cloud(
    sim: simulator.Simulation, diagnostics: bool
) -> None:
    """Both paths, both record kernels: the same points, fields and values."""
    sim.survey.output.diagnostics = diagnostics
    try:
        fast_cloud = sim.run()
        sim.use_fast = False
        ref_cloud = sim.run()
    finally:
        sim.use_fast = True
        sim.survey.output.diagnostics = True
    assert fast_cloud.names == ref_cloud.names
    assert len(fast_cloud) > 10_000
    exact = ["ring", "time_s", "label", "instance"]
    close = ["xyz", "intensity", "range_m"]
    if diagnostics:
        exact += ["pulse_id", "object_id"]
        close += ["cos_effective"]
    for name in exact:
        np.testing.assert_array_equal(fast_cloud[name], ref_cloud[name], err_msg=name)
    for name in close:
        np.testing.assert_allclose(
            fast_cloud[name], ref_cloud[name], rtol=1e-6, atol=3e-3, err_msg=name
        )
