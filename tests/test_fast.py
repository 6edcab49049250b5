"""The fused numba kernels against the numpy specification, value for value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import simulator
import simulator.steps.footprint
from simulator.backend import KERNELS_AVAILABLE, Backend, NumpyBackend
from simulator.beam import BeamPattern
from simulator.chunk import PulsePoses
from simulator.pipeline.layers import layers_of
from simulator.steps import echoes, hits, rays, record
from simulator.steps.returns import DIAGNOSTIC_FIELDS, single_returns
from simulator.steps.see_through import see_through_returns
from simulator.world import raycast

from .conftest import REPO, Workspace

pytestmark = pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")
if KERNELS_AVAILABLE:
    from simulator.kernels import common
    from simulator.kernels import cull as k_cull
    from simulator.kernels import echoes as k_echoes
    from simulator.kernels import hits as k_hits

SURVEY = REPO / "scenes" / "farm" / "survey.yaml"


def _parameters(function) -> list:  # type: ignore[no-untyped-def]
    import inspect

    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def test_each_kernel_has_its_specifications_name_and_signature() -> None:
    """The backend swaps one for the other: same names, same parameters, same defaults,
    for every registered step (simulator.backend.STEPS), which are the steps of the
    Backend protocol (less the bookkeeping), on both backends."""
    from simulator.backend import STEPS, Backend, NumbaBackend

    names = [step.name for step in STEPS]
    assert len(set(names)) == len(names)
    steps = {n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_")}
    assert steps - {"set_threads", "compiled_kernels"} == set(names)
    numpy, numba = NumpyBackend(), NumbaBackend()
    for step in STEPS:
        spec, kernel = getattr(numpy, step.name), getattr(numba, step.name)
        assert spec.__name__ == kernel.__name__ == step.name
        assert _parameters(kernel) == _parameters(spec), step.name
        assert _parameters(spec) == _parameters(getattr(Backend, step.name))[1:], step.name
        # The functions the numba backend dispatches to, in their modules: each mirrors
        # its specification (pattern_rays to the spinning kernel, with the spec's name).
        spec, kernel = step.specification_function(), step.kernel_function()
        assert spec is getattr(numpy, step.name)
        assert kernel.__name__ == (step.kernel_name or step.name)
        assert _parameters(kernel) == _parameters(spec), step.name
    # Every kernel file is a registered step's or one they import kernels from, and each is
    # counted by compiled_kernels (the weather's included).
    files = {p.stem for p in (REPO / "simulator" / "kernels").glob("*.py")} - {"__init__"}
    assert {step.kernel for step in STEPS} < files
    assert {m.__name__ for m in numba.kernel_modules} == {f"simulator.kernels.{f}" for f in files}


def test_record_kernel_matches_the_specification_in_every_frame(
    sim: simulator.Simulation, backend: Backend
) -> None:
    """World, the sensor at one pose, and a pose per pulse: the record kernel's fields
    equal the specification's (xyz to float32 rounding, the rest exactly)."""
    chunk = sim.cast_pulses(0, 60_000)
    res = hits.evaluate_hits(chunk, sim.tables, sim.model, sim.streams)
    returns = single_returns(res, chunk.hits)
    rng = np.random.default_rng(3)
    per_pulse = PulsePoses(
        np.broadcast_to(np.eye(3), (chunk.pulses, 3, 3)).copy(),
        rng.normal(0.0, 5.0, (chunk.pulses, 3)),
    )
    for frame in (None, chunk.poses, per_pulse):
        ref = record.record(returns, chunk, frame, sim.tables, sim.pattern)
        got = backend.record(returns, chunk, frame, sim.tables, sim.pattern)
        assert got.names == ref.names and len(got) > 20_000
        for name in got.names:
            if name == "xyz":
                np.testing.assert_allclose(got[name], ref[name], rtol=0, atol=1e-5)
            else:
                np.testing.assert_array_equal(got[name], ref[name], err_msg=name)


@pytest.fixture(scope="module")
def sim() -> simulator.Simulation:
    return simulator.Simulation.from_file(
        SURVEY, ["output.diagnostics=true", "seed=11", "revolutions=0.5"]
    )


def _reference_rays(sim: simulator.Simulation, start: int, stop: int) -> np.ndarray:
    poses, _ = sim.poses(start, stop)
    return rays.pattern_rays(sim.pattern, start, stop, poses, sim.engine.origin_shift_m)


def test_spinning_rays_match_the_schedule(sim: simulator.Simulation, backend: Backend) -> None:
    """The ray kernel gives the numpy schedule's rays, to float32 rounding."""
    start, stop = 12_345, 12_345 + 40_000
    poses, _ = sim.poses(start, stop)
    got = backend.pattern_rays(sim.pattern, start, stop, poses, sim.engine.origin_shift_m)
    ref = _reference_rays(sim, start, stop)
    assert got.dtype == np.float32 and got.shape == ref.shape
    ulp = np.spacing(np.abs(ref).max(axis=0))
    assert np.all(np.abs(got - ref) <= ulp)
    assert np.mean(got == ref) > 0.999


@pytest.mark.parametrize("name", ["rs-helios-5515", "vlp-16", "vls-128", "pandar128"])
@pytest.mark.parametrize("start", [0, 7, 2_073_600_001])  # the first pulses, an hour in
def test_pulse_times_kernel_matches_the_specification(
    name: str, start: int, backend: Backend
) -> None:
    """Each pulse's firing time: the kernel's equals the pattern's own
    (``time_and_channel``) bit for bit, from any start (mid-firing, an hour in), with
    each channel's firing offset (at least 16 different ones in each preset here)."""
    from simulator.config import load_scanner
    from simulator.sensor.scanner import pattern_for

    pattern = pattern_for(load_scanner(name))
    stop = start + 3 * pattern.channels * 1000 + 5
    got = backend.pulse_times(pattern, start, stop)
    want, _ = pattern.time_and_channel(np.arange(start, stop, dtype=np.uint64))
    assert got.dtype == np.float64
    assert got.tobytes() == want.tobytes()
    assert len(backend.pulse_times(pattern, start, start)) == 0
    firing = (start + np.arange(stop - start)) // pattern.channels
    channel = (start + np.arange(stop - start)) % pattern.channels
    np.testing.assert_array_equal(got, firing * pattern.period_s + pattern.firing_offset_s[channel])
    assert len(np.unique(pattern.firing_offset_s)) >= 16  # offsets that differ by channel


@pytest.mark.parametrize(
    "name", ["rs-helios-5515", "vlp-16", "os1-64", "hdl-64e", "pandar64:block"]
)
@pytest.mark.parametrize("start", [0, 7, 2_073_600_001])  # the first pulses, an hour in
def test_spinning_rays_match_the_schedule_of_every_preset(
    name: str, start: int, backend: Backend
) -> None:
    """Any spinning preset, any start (mid-firing included, an hour of spin in): the ray
    kernel's angle-addition form gives the schedule's rays to float32 rounding (with
    ``firing_azimuth: block`` too, the decoded cloud's azimuths)."""
    from simulator.config import load_scanner
    from simulator.sensor.scanner import pattern_for

    name, _, firing_azimuth = name.partition(":")
    scanner = load_scanner(name)
    if firing_azimuth:
        scanner = scanner.model_copy(update={"firing_azimuth": firing_azimuth})
    pattern = pattern_for(scanner)
    stop = start + 3 * pattern.channels * 1000 + 5
    rot = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    pos = np.array([100.0, -20.0, 2.0])
    got = backend.pattern_rays(pattern, start, stop, PulsePoses.one(rot, pos), np.zeros(3))
    schedule = pattern.schedule(start, stop)
    ref = np.concatenate([schedule.origin_m @ rot.T + pos, schedule.direction @ rot.T], axis=1)
    # A float32 step, plus 1e-10 rad: the float64 head angle an hour in (2 pi x 36,000
    # turns) is itself only that exact, in either form (15 nm at 150 m).
    ulp = np.spacing(np.abs(ref).astype(np.float32)) + 1e-10
    assert np.all(np.abs(got - ref) <= ulp)
    assert np.mean(got == ref.astype(np.float32)) > 0.99


def test_hit_kernel_matches_the_numpy_model(sim: simulator.Simulation) -> None:
    """Every per-hit quantity of the kernel equals the specification's."""
    sim.backend = NumpyBackend()  # the specification's rays: the kernel's input is the spec's
    try:
        chunk = sim.cast_pulses(0, sim.total_pulses)
    finally:
        sim.backend = simulator.backend.select_backend()
    args = (chunk, sim.tables, sim.model, sim.streams)
    ref = hits.evaluate_hits(*args)
    got = k_hits.evaluate_hits(*args)
    assert len(ref.idx) > 15_000
    np.testing.assert_array_equal(got.idx, ref.idx)
    np.testing.assert_array_equal(got.keep, ref.keep)
    np.testing.assert_allclose(got.cos_incidence, ref.cos_incidence, rtol=1e-12, atol=1e-15)
    # The kernel tilts by the addition formulas, the spec by acos then cos: they agree to
    # 1e-14 in the cosine (near grazing the spec is the less exact, see the next test),
    # and the quantities made from it to 1e-9 of themselves.
    np.testing.assert_allclose(got.cos_effective, ref.cos_effective, rtol=1e-11, atol=1e-14)
    for name in ("intensity", "spread_m", "peak_factor", "backscatter", "relief_m"):
        np.testing.assert_allclose(
            getattr(got, name), getattr(ref, name), rtol=1e-9, atol=1e-15, err_msg=name
        )
    # Backscatter before the clip at intensity_max: the retroreflective sign is compared
    # where the clipped intensity cannot tell (its intensities all read 255).
    objects = chunk.hits.object_index[ref.idx]
    rho = sim.tables.materials.reflectance[sim.tables.material_of_object[objects]]
    retro = rho > 1.0
    assert np.count_nonzero(retro) >= 40
    assert np.all(ref.intensity[retro] == sim.scanner.intensity_max)
    assert np.unique(ref.backscatter[retro]).size > 10
    # The relief is non-trivial where the materials are rough.
    assert np.count_nonzero(ref.relief_m) > 1000
    # Measured ranges are quantised: equal, bar a rounding tie flipped by the last bit.
    steps = np.abs(got.range_m - ref.range_m) / sim.scanner.range_resolution_m
    assert np.all((steps < 1e-6) | (np.abs(steps - 1) < 1e-6))
    assert np.count_nonzero(steps > 0.5) <= 1
    # The record-only form computes the same three fields, bit for bit, and no others.
    brief = k_hits.evaluate_hits(*args, full=False)
    for name in ("idx", "keep", "range_m", "intensity"):
        np.testing.assert_array_equal(getattr(brief, name), getattr(got, name), err_msg=name)
    assert brief.cos_effective.shape == brief.relief_m.shape == (0,)
    # The echo-inputs form (footprint sub-rays) computes what echo formation reads, bit
    # for bit, and none of the detection.
    echo = k_hits.evaluate_hits(*args, jitter=False, detect=False)
    for name in ("idx", "cos_incidence", "cos_effective", "spread_m", "backscatter", "relief_m"):
        np.testing.assert_array_equal(getattr(echo, name), getattr(got, name), err_msg=name)
    for name in ("keep", "range_m", "intensity", "peak_factor"):
        assert getattr(echo, name).shape == (0,), name


def test_kernel_trigonometry_is_as_exact_as_the_spec() -> None:
    """The kernel's tilted cosine (addition formulas) and its cos(2 pi u) (folded to a
    quarter turn) against 80-bit long-double truth: within 2 ulp of 1, and the tilt
    never worse than the numpy spec's acos-then-cos by more than an ulp of 1."""
    from simulator import physics
    from simulator.constants import HALF_PI_BELOW

    rng = np.random.default_rng(8)
    c = np.concatenate([rng.uniform(0, 1, 4000), 1e-3 * rng.uniform(0, 1, 1000), [0.0, 1.0]])
    delta = np.concatenate([rng.normal(0, 0.3, len(c) - 3), [2.0, -1.0, 0.0]])
    wide = np.longdouble
    truth = np.cos(np.clip(np.arccos(c.astype(wide)) + delta, 0.0, wide(HALF_PI_BELOW)))
    kernel = np.array([common.tilted_cos(a, b) for a, b in zip(c, delta, strict=True)])
    spec = physics.tilted_cos(c, delta)
    err_kernel = np.abs(kernel - truth).astype(np.float64)
    err_spec = np.abs(spec - truth).astype(np.float64)
    assert err_kernel.max() <= 3e-16
    assert np.all(err_kernel <= err_spec + 2.3e-16)
    u = np.concatenate([rng.uniform(0, 1, 5000), [0.0, 0.25, 0.5, 0.75, 1 - 2**-53]])
    turns = np.array([common.cos_turns(x) for x in u])
    exact = np.cos(2 * np.pi * u.astype(wide))
    assert np.abs(turns - exact).astype(np.float64).max() <= 4e-16  # under 2 ulp of 1
    zero = pytest.approx(0.0, abs=1e-15)
    assert turns[-5:].tolist() == [1.0, zero, -1.0, zero, pytest.approx(1.0, abs=1e-15)]


@pytest.mark.parametrize("diagnostics", [True, False])
def test_fast_and_numpy_pipelines_give_the_same_cloud(
    sim: simulator.Simulation, diagnostics: bool, backend: Backend
) -> None:
    """Both paths, both record kernels: the same points, fields and values."""
    sim.survey.output.diagnostics = diagnostics
    try:
        sim.backend = backend
        fast_cloud = sim.run()
        sim.backend = NumpyBackend()
        ref_cloud = sim.run()
    finally:
        sim.backend = simulator.backend.select_backend()
        sim.survey.output.diagnostics = True
    assert fast_cloud.names == ref_cloud.names
    assert len(fast_cloud) > 10_000
    exact = ["ring", "time_s", "label", "instance"]
    close = ["xyz", "intensity", "range_m"]
    if diagnostics:
        exact += ["pulse_id", "object_id", "cos_incidence"]
        close += ["cos_effective", "footprint_spread_m", "peak_factor"]
        # Exact but where an echo's range is an energy-weighted mean (the pickup's glass
        # windows: the surface behind joins the echo), which carries the last bit in
        # which Minnaert's power differs between numba and numpy.
        np.testing.assert_array_max_ulp(fast_cloud["range_true_m"], ref_cloud["range_true_m"],
                                        maxulp=4)  # fmt: skip
    for name in exact:
        np.testing.assert_array_equal(fast_cloud[name], ref_cloud[name], err_msg=name)
    # The kernel's rays differ from the spec's by about 1e-10 rad. Every float32 field
    # agrees to two float32 steps, except on the few points where that moves a hit across
    # a micro-slope cell's edge (another hashed tilt) or a range across a rounding tie
    # (one range step): at most 1 point in 10,000, and each such point differs in at
    # most one range step.
    off = np.zeros(len(ref_cloud), dtype=bool)
    for name in close:
        got, want = fast_cloud[name], ref_cloud[name]
        step = 2.0 * np.spacing(np.abs(want).astype(np.float32))
        far = np.abs(got.astype(np.float64) - want) > step
        off |= far.reshape(len(want), -1).any(axis=1)
    assert np.count_nonzero(off) <= max(1, len(ref_cloud) // 10_000), np.count_nonzero(off)
    res_m = sim.scanner.range_resolution_m
    range_steps = np.abs(fast_cloud["range_m"][off] - ref_cloud["range_m"][off]) / res_m
    assert np.all(range_steps <= 1.0 + 1e-3)


def test_echo_kernel_matches_the_numpy_echoes() -> None:
    """Echo formation: the kernel's echoes equal the specification's, field by field."""
    sim = simulator.Simulation.from_file(
        SURVEY,
        ["revolutions=0.3", "scanner_overrides.beam_samples=19",
         "scanner_overrides.divergence_mrad.horizontal=40"],
    )  # fmt: skip
    chunk = sim.cast_pulses(0, sim.total_pulses)
    res = hits.evaluate_hits(chunk, sim.tables, sim.model, sim.streams, jitter=False)
    idx, n, weights = res.idx, 19, sim.beam.weights
    per_hit = echoes.echo_inputs(res, chunk.hits)
    sep, length = 0.75, sim.model.pulse_length_m
    ref = echoes.form_echoes(idx // n, weights[idx % n], *per_hit, sep, length)
    slots = k_echoes.echo_slots(res, chunk.hits, sim.beam, sep)
    got = k_echoes.form_echoes(slots, length)
    assert len(ref.pulse) > chunk.pulses * 0.5
    assert np.count_nonzero(np.bincount(ref.pulse) > 1) > 50  # multi-echo pulses exercised
    for name in ("pulse", "rank", "object_index"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)
    for name in (
        "energy",
        "range_true_m",
        "relief_m",
        "spread_m",
        "peak_factor",
        "energy_fraction",
        "cos_incidence",
        "cos_effective",
    ):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name), err_msg=name)


@pytest.mark.parametrize("mode", ["strongest", "first", "last", "dual", "multi"])
def test_echo_record_kernels_give_the_numpy_record(mode: str, backend: Backend) -> None:
    """Footprint sampling, every return mode, range noise on: the kernels' echo
    measurement and selection give the specification's points, field for field."""
    sim = simulator.Simulation.from_file(
        SURVEY,
        ["revolutions=0.3", "output.diagnostics=true", "scanner_overrides.beam_samples=19",
         "scanner_overrides.divergence_mrad.horizontal=30",
         "scanner_overrides.divergence_mrad.vertical=30",
         "scanner_overrides.min_return_separation_m=0.5", "scanner_overrides.range_noise_m=0.02",
         f"scanner_overrides.return_mode={mode}"]
        + (["scanner_overrides.max_returns=4"] if mode == "multi" else []),
    )  # fmt: skip
    sim.backend = backend
    got = sim.run()
    sim.backend = NumpyBackend()
    ref = sim.run()
    assert got.names == ref.names
    assert len(ref) > 10_000
    if mode in ("dual", "multi"):
        assert np.count_nonzero(ref["num_returns"] > 1) > 100  # several returns exercised
    for name in ("pulse_id", "return_number", "num_returns", "ring", "time_s", "label",
                 "instance", "object_id"):  # fmt: skip
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    # Measured ranges are quantised: equal, bar a rounding tie flipped by the last bit.
    np.testing.assert_allclose(got["range_m"], ref["range_m"], rtol=0, atol=2.6e-3)
    assert np.count_nonzero(got["range_m"] != ref["range_m"]) <= 2
    for name in ("range_true_m", "intensity", "cos_incidence", "cos_effective",
                 "footprint_spread_m", "peak_factor", "energy_fraction"):  # fmt: skip
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(got["xyz"], ref["xyz"], atol=3e-3)


def test_sub_ray_kernel_matches_the_beam_frame(sim: simulator.Simulation, backend: Backend) -> None:
    from simulator.beam import beam_pattern, sub_ray_directions

    offsets, _ = beam_pattern(19)
    beams = _reference_rays(sim, 0, 20_000)
    rot = sim.trajectory.pose_at(0.0)[0]
    beam = BeamPattern.of(19, 8.0, 7.0)  # 1/e^2 half-angles 4 and 3.5 mrad
    got = backend.sub_rays(beams, rot[None, :, 2], rot[None, :, 0], beam).reshape(-1, 19, 6)
    ref = sub_ray_directions(beams[:, 3:].astype(np.float64), rot[:, 2], rot[:, 0], 0.004,
                             0.0035, offsets)  # fmt: skip
    np.testing.assert_array_equal(got[:, :, :3], np.repeat(beams[:, None, :3], 19, axis=1))
    np.testing.assert_allclose(got[:, :, 3:], ref, atol=1.5e-7)  # float32 rounding


@pytest.fixture(scope="module")
def rolling_beams() -> tuple[np.ndarray, PulsePoses]:
    """A driving sensor that turns (360 deg/s) and rolls (+-25 deg, 0.1 s period): a pose per
    pulse whose up and forward axes both change from pulse to pulse. The beams of 30,000
    pulses, and 64 more cast straight up their own pulse's z axis (the forward-axis branch:
    those pulses upright, each at its own heading, so that up is exact in float32)."""
    sim = simulator.Simulation.from_file(
        REPO / "scenes/farm/drive.yaml",
        ["duration_s=0.2", "trajectory.yaw_rate_deg_s=360",
         "trajectory.swing={axis: roll, amplitude_deg: 25, period_s: 0.1}"],
    )  # fmt: skip
    poses, _ = sim.poses(1_000, 31_064)
    assert poses.rotation.shape == (30_064, 3, 3)
    beams = rays.pattern_rays(sim.pattern, 1_000, 31_064, poses, sim.engine.origin_shift_m)
    heading = np.linspace(0.0, 2.0 * np.pi, 64, endpoint=False)
    upright = np.zeros((64, 3, 3))
    upright[:, 0, 0], upright[:, 0, 1], upright[:, 2, 2] = np.cos(heading), -np.sin(heading), 1.0
    upright[:, 1, 0], upright[:, 1, 1] = np.sin(heading), np.cos(heading)
    rotation = poses.rotation.copy()
    rotation[-64:] = upright
    beams[-64:, 3:] = (0.0, 0.0, 1.0)  # along up: e_v from the forward axis
    return beams, PulsePoses(rotation, poses.position_m)


@pytest.mark.parametrize("samples", [7, 19])
def test_sub_ray_kernel_is_the_specification_with_a_pose_per_pulse(
    rolling_beams: tuple[np.ndarray, PulsePoses], samples: int, backend: Backend
) -> None:
    """The kernel's sub-rays equal :func:`simulator.steps.rays.sub_rays`'s value for value when each
    pulse has its own pose: each beam's frame from its own pulse's up (or, along up, its
    forward) axis. Row 0's axes for every pulse would move sub-rays by milliradians."""
    beams, poses = rolling_beams
    up, forward = poses.up, poses.forward
    assert np.ptp(up, axis=0).max() > 0.5 and np.ptp(forward, axis=0).max() > 0.25  # rolls, turns
    beam = BeamPattern.of(samples, 9.0, 5.0)
    ref = rays.sub_rays(beams, up, forward, beam)
    got = backend.sub_rays(beams, up, forward, beam)
    assert got.dtype == ref.dtype == np.float32 and got.shape == (len(beams) * samples, 6)
    # Bit for bit, bar a float64 result that lies at a float32 rounding tie (one value
    # of 3.4 million for 19 samples: the kernel's and numpy's float64 sums differ in the
    # last bit): never more than one float32 step.
    assert np.all(np.abs(got - ref) <= np.spacing(np.abs(ref)))
    assert np.count_nonzero(got != ref) <= 4
    # The test can tell the poses apart: one pose for all is a different fan.
    one = rays.sub_rays(beams, up[:1], forward[:1], beam)
    assert np.abs(one - ref)[:, 3:].max() > 1e-3


def test_rays_behind_kernel_is_the_specification(backend: Backend) -> None:
    """The rays cast on behind see-through surfaces, bit for bit: the gather of ``on``, the
    float64 starts of the surfaces' ranges, and the float32 step added to the float32
    origins (the kernel adds in float64 and rounds once), far and near, any direction;
    no ray: typed empties."""
    rng = np.random.default_rng(7)
    n = 50_000
    direction = rng.normal(size=(n, 3))
    direction /= np.linalg.norm(direction, axis=1, keepdims=True)
    origin = rng.uniform(-2e3, 2e3, (n, 3)) * rng.choice([1e-3, 1.0], (n, 1))
    cast = np.concatenate([origin, direction], axis=1).astype(np.float32)
    cast[:100, 3:] = (0.0, 0.0, -1.0)  # straight down: two components exactly 0
    range_m = rng.uniform(0.0, 300.0, 30_000) ** rng.choice([1.0, 0.3], 30_000)
    range_m = range_m.astype(np.float32)
    passes = np.sort(rng.choice(len(range_m), 20_000, replace=False)).astype(np.int64)
    on = np.sort(rng.choice(n, len(passes), replace=False)).astype(np.int64)
    ref, ref_start = rays.rays_behind(cast, on, range_m, passes)
    got, got_start = backend.rays_behind(cast, on, range_m, passes)
    assert got.dtype == np.float32 and got.shape == (len(on), 6)
    assert got_start.dtype == np.float64 and got_start.shape == (len(on),)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    np.testing.assert_array_equal(got_start.view(np.uint64), ref_start.view(np.uint64))
    np.testing.assert_array_equal(got[:, 3:], cast[on, 3:])
    moved = np.linalg.norm(got[:, :3].astype(np.float64) - cast[on, :3], axis=1)
    np.testing.assert_allclose(moved, ref_start, rtol=1e-5, atol=1e-3)
    assert np.count_nonzero(got[:, :3] != cast[on, :3]) > len(on)  # (it moved them)
    empty, start = backend.rays_behind(cast, on[:0], range_m, passes[:0])
    assert empty.shape == (0, 6) and empty.dtype == np.float32 and start.shape == (0,)


@pytest.mark.parametrize("yaw_rate_deg_s", [0.0, 40.0])  # driving straight (one rotation), turning
def test_moving_sensor_fast_path_matches_numpy(yaw_rate_deg_s: float, backend: Backend) -> None:
    """Per-pulse poses in the ray kernel: the same cloud as the numpy path."""
    sim = simulator.Simulation.from_file(
        REPO / "scenes/farm/drive.yaml",
        ["duration_s=0.15", f"trajectory.yaw_rate_deg_s={yaw_rate_deg_s}"],
    )
    sim.backend = backend
    fast_cloud = sim.run()
    sim.backend = NumpyBackend()
    ref_cloud = sim.run()
    assert len(fast_cloud) > 10_000
    np.testing.assert_array_equal(fast_cloud["ring"], ref_cloud["ring"])
    np.testing.assert_array_equal(fast_cloud["time_s"], ref_cloud["time_s"])
    np.testing.assert_allclose(fast_cloud["xyz"], ref_cloud["xyz"], atol=3e-3)


_THREADS_SCRIPT = """
import json
import sys
import numba
import numpy as np
import simulator

runs, out = json.loads(sys.argv[1]), sys.argv[2]
clouds = {}
for key, (survey, overrides) in runs.items():
    sim = simulator.Simulation.from_file(survey, overrides)
    for threads in (1, 4):
        sim.limit_threads(threads)  # Open3D's casts and numba's kernels
        assert numba.get_num_threads() == threads and sim.engine.threads == threads
        clouds[key, threads] = sim.run()
np.savez(out, **{f"{k}:{t}:{n}": c[n] for (k, t), c in clouds.items() for n in c.names})
"""


def test_kernels_give_the_same_cloud_on_any_number_of_threads(tmp_path: Path) -> None:
    """Each pulse is computed on its own: one thread or four (numba's kernels and Open3D's
    casts alike), bit for bit the same cloud, for single rays, full and adaptive footprint
    sampling, a moving sensor and moving objects (the cull kernel).

    The runs are one child process with ``NUMBA_NUM_THREADS=4``, so that four threads
    exist whatever the machine's core count (numba fixes its pool when it starts). Open3D's
    casts get at most the core count (TBB caps its pool there and says so on stderr): on
    two cores, one thread against two.
    """
    import json
    import os
    import subprocess
    import sys

    ws = Workspace(tmp_path)
    car = {"name": "car", "box": {"size_m": [4.0, 2.0, 1.6]}, "material": "car_paint",
           "label": "car", "trajectory": {"start": {"position_m": [-15.0, 6.0, 0.8]},
                                          "velocity_mps": [15.0, 0.0, 0.0]}}  # fmt: skip
    ground = {"name": "ground", "plane": {"size_m": [80, 80]}, "material": "asphalt"}
    moving_objects = ws.survey([ground, car], pose={"position_m": [0, 0, 1.8]}, revolutions=1)
    common = ["revolutions=0.2", "output.diagnostics=true"]
    runs = {
        "single": (str(SURVEY), common),
        "full": (str(SURVEY), [*common, "scanner_overrides.beam_samples=7"]),
        "adaptive": (str(SURVEY), [*common, "scanner_overrides.beam_samples=7",
                                   "scanner_overrides.beam_sampling=adaptive"]),
        "moving_sensor": (str(REPO / "scenes" / "farm" / "drive.yaml"),
                          ["duration_s=0.02", "output.diagnostics=true"]),
        "moving_objects": (str(moving_objects), ["output.diagnostics=true"]),
    }  # fmt: skip
    out = tmp_path / "clouds.npz"
    env = {**os.environ, "NUMBA_NUM_THREADS": "4"}
    res = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, json.dumps(runs), str(out)],
                         env=env, capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr
    clouds = np.load(out)
    car_id = simulator.labels.label_id("car")
    assert np.sum(clouds["moving_objects:1:label"] == car_id) > 200  # the car is hit
    for key in runs:
        names = sorted(k.split(":")[2] for k in clouds.files if k.startswith(f"{key}:1:"))
        assert "pulse_id" in names and len(clouds[f"{key}:1:ring"]) > 2000, key
        for name in names:
            np.testing.assert_array_equal(
                clouds[f"{key}:1:{name}"], clouds[f"{key}:4:{name}"], err_msg=f"{key} {name}"
            )


def test_cached_kernels_are_dropped_when_an_inlined_source_changes(tmp_path: Path) -> None:
    """numba would reload a kernel compiled before an edit of common.py (which it
    inlines) or of the constants it froze in; the source stamp drops such caches."""
    import shutil

    from simulator.kernels import drop_stale_caches

    package = tmp_path / "simulator"
    folder = package / "kernels"
    shutil.copytree(
        REPO / "simulator" / "kernels", folder, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "simulator" / "constants.py", package / "constants.py")
    cache = folder / "__pycache__"
    cache.mkdir()

    def fake_cache() -> list[Path]:
        files = [cache / "hits.evaluate-30.py311.nbi", cache / "hits.evaluate-30.py311.1.nbc"]
        for f in files:
            f.write_bytes(b"machine code")
        return files

    files = fake_cache()
    assert drop_stale_caches(folder) is True  # no stamp yet: nothing is known to be fresh
    assert not any(f.exists() for f in files)
    files = fake_cache()
    assert drop_stale_caches(folder) is False  # the same sources: the caches stay
    assert all(f.exists() for f in files)
    common = folder / "common.py"
    common.write_text(common.read_text().replace("-2.0 * ext * r", "-1.0 * ext * r"))
    assert drop_stale_caches(folder) is True
    assert not any(f.exists() for f in files)
    files = fake_cache()
    constants = package / "constants.py"
    constants.write_text(constants.read_text() + "\nEXTRA = 1\n")
    assert drop_stale_caches(folder) is True
    assert not any(f.exists() for f in files)


@pytest.mark.parametrize(("n", "groups", "slots"), [(20_000, 7, 5), (4_000, 130, 3)])
def test_cull_kernel_matches_the_specification(
    n: int, groups: int, slots: int, monkeypatch: pytest.MonkeyPatch, backend: Backend
) -> None:
    """Which rays meet which boxes of their time slot: the kernel's answer equals the
    specification's for rays from inside, outside, along an axis and short of a box; with
    130 boxes, more than one word of the kernel's bits (three), rays meeting boxes of each."""
    rng = np.random.default_rng(5)
    d = rng.normal(size=(n, 3))
    d[: n // 10, 1:] = 0.0  # along x: parallel to two slabs
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    rays = np.hstack([rng.uniform(-3, 3, (n, 3)), d]).astype(np.float32)
    shift = np.array([100.0, -50.0, 2.0])
    centre = shift + rng.uniform(-4, 4, (groups, slots, 3))
    half = rng.uniform(0.5, 2.5, (groups, slots, 3))
    range_max = np.where(rng.random(n) < 0.2, np.inf, rng.uniform(0.5, 8.0, n))
    slot = rng.integers(0, slots, n)
    want = raycast.rays_into_boxes(rays, shift, range_max, slot, centre - half, centre + half)
    got = backend.rays_into_boxes(rays, shift, range_max, slot, centre - half, centre + half)
    assert 0.05 < len(want[1]) / (n * groups) < 0.6
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    met = np.diff(want[0]) > 0  # boxes some ray meets, in each word of 64
    assert all(met[w : w + 64].any() for w in range(0, groups, 64))
    for block_rays in (1, 777, n):  # each block culls on its own: any blocking, one answer
        monkeypatch.setattr(k_cull, "BLOCK_RAYS", block_rays)
        got = backend.rays_into_boxes(rays, shift, range_max, slot, centre - half, centre + half)
        np.testing.assert_array_equal(got[1], want[1])
    # the spec's answer is each box's slab test, ray by ray (brute force here)
    origins, directions = rays[:, :3] + shift, rays[:, 3:].astype(np.float64)
    for g in range(groups):
        with np.errstate(divide="ignore", invalid="ignore"):
            a = (centre[g, slot] - half[g, slot] - origins) / directions
            b = (centre[g, slot] + half[g, slot] - origins) / directions
        inside = (origins >= centre[g, slot] - half[g, slot]) & (
            origins <= centre[g, slot] + half[g, slot]
        )
        near = np.where(directions == 0, np.where(inside, -np.inf, np.inf), np.minimum(a, b))
        far = np.where(directions == 0, np.where(inside, np.inf, -np.inf), np.maximum(a, b))
        enter = np.maximum(near.max(axis=1), 0.0)
        leave = np.minimum(far.min(axis=1), range_max)
        np.testing.assert_array_equal(
            want[1][want[0][g] : want[0][g + 1]], np.flatnonzero(enter <= leave)
        )


@pytest.mark.parametrize("broadcast", [False, True])
def test_nearer_hits_kernel_matches_the_specification(backend: Backend, broadcast: bool) -> None:
    """A moving group's hits put in place of the hits so far where nearer: the kernel
    changes the same rays to the same bits as the specification (ranges, objects, normals
    turned to the world) and names the same rays, with misses on both sides, ties (the
    hit so far kept) and a rotation broadcast over the rays or one a ray."""
    rng = np.random.default_rng(11)
    n, k = 5_000, 1_500
    range_m = rng.uniform(1.0, 30.0, n).astype(np.float32)
    range_m[rng.random(n) < 0.2] = np.inf  # misses so far
    object_index = np.where(np.isinf(range_m), -1, rng.integers(0, 9, n)).astype(np.int32)
    normal = rng.normal(size=(n, 3)).astype(np.float32)
    rows = np.sort(rng.choice(n, k, replace=False)).astype(np.int64)
    t = rng.uniform(1.0, 30.0, k).astype(np.float32)
    t[rng.random(k) < 0.2] = np.inf  # the group missed
    tie = rng.random(k) < 0.1
    t[tie] = range_m[rows[tie]]
    geometry = np.where(np.isinf(t), -1, rng.integers(0, 4, k)).astype(np.int32)
    local = rng.normal(size=(k, 3))
    local /= np.linalg.norm(local, axis=1, keepdims=True)
    local = local.astype(np.float32)
    local[: k // 10, 1:] = 0.0  # zero components: a sum of zeros is +0
    q, _ = np.linalg.qr(rng.normal(size=(k, 3, 3)))
    rotation = np.broadcast_to(q[0], (k, 3, 3)) if broadcast else q
    members = np.array([10, 11, 12, 13], np.int32)
    want = [a.copy() for a in (range_m, object_index, normal)]
    got = [a.copy() for a in (range_m, object_index, normal)]
    w = raycast.nearer_hits(*want, rows, t, geometry, local, rotation, members)
    g = backend.nearer_hits(*got, rows, t, geometry, local, rotation, members)
    np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(w, np.flatnonzero(t < range_m[rows]))
    assert 0 < len(w) < k - tie.sum()
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes()  # bit for bit, signed zeros included
    untouched = np.setdiff1d(np.arange(n), rows[w])
    assert want[0][untouched].tobytes() == range_m[untouched].tobytes()
    np.testing.assert_array_equal(want[1][rows[w]], members[geometry[w]])


def test_layered_echo_kernel_matches_the_specification(backend: Backend) -> None:
    """Echoes with the surfaces behind glass and foliage (a generated street, footprints
    of 7 sub-rays, up to 4 surfaces a ray), of every pulse and of a selection: the
    kernel's returns equal the specification's, field by field."""

    sim = simulator.Simulation.from_file(
        REPO / "scenes" / "street" / "drive.yaml",
        ["revolutions=0.2", "scanner_overrides={beam_samples: 7, return_mode: multi}"],
    )
    chunk = sim.cast_pulses(0, 20_000)
    assert len(chunk.behind) == 3 and len(chunk.behind[1].rays) > 500
    results = sim.evaluate(chunk)
    behind = layers_of(sim, chunk, results)
    ids = chunk.pulse_ids
    args = (results, chunk.hits, ids, sim.beam, sim.model, sim.streams, behind)
    # the pulses with a ray that passed a see-through surface
    picked = np.flatnonzero(chunk.behind[0].pulses(chunk.pulses, len(chunk.cast) // chunk.pulses))
    for pulses in (None, picked):
        want = echoes.echo_returns(*args, pulses)
        got = backend.echo_returns(*args, pulses)
        assert len(want) > (5000 if pulses is None else 1000)
        assert (want.return_number > 1).sum() > 300
        for f in ("pulse", "range_m", "intensity", "object_index", "return_number",
                  "num_returns", *DIAGNOSTIC_FIELDS):  # fmt: skip
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)


@pytest.mark.parametrize("mode", ["strongest", "first", "last", "dual", "multi"])
def test_see_through_kernel_matches_the_specification(mode: str, backend: Backend) -> None:
    """One ray a pulse through glass and foliage (a generated street, up to 4 surfaces a
    ray): the fused kernel's returns equal the specification's (single returns where a
    ray met one surface, echoes of all its surfaces where it passed one), field by field,
    with the diagnostics and without."""
    sim = simulator.Simulation.from_file(
        REPO / "scenes" / "street" / "drive.yaml",
        ["revolutions=0.3", "scanner=rs-helios-5515",
         f"scanner_overrides={{return_mode: {mode}"
         + (", max_returns: 3}" if mode == "multi" else "}")],
    )  # fmt: skip
    chunk = sim.cast_pulses(0, 60_000)
    assert len(chunk.behind) == 3 and len(chunk.behind[2].rays) > 300
    results = sim.evaluate(chunk)
    behind = layers_of(sim, chunk, results)
    args = (results, chunk.hits, chunk.pulse_ids, sim.beam, sim.model, sim.streams, behind)
    for diagnostics in (False, True):
        want = see_through_returns(*args, diagnostics=diagnostics)
        got = backend.see_through_returns(*args, diagnostics=diagnostics)
        assert len(want) > 40_000
        if mode in ("dual", "multi"):
            assert (want.num_returns > 1).sum() > 1000
        names = ["pulse", "range_m", "intensity", "object_index", "return_number",
                 "num_returns", *(DIAGNOSTIC_FIELDS if diagnostics else ())]  # fmt: skip
        for f in names:
            np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)
        assert got.range_true_m is None or diagnostics


def test_interleave_kernel_is_the_specification(backend: Backend) -> None:
    """The sub-rays adaptive sampling casts in parts, put in pulse-major order: every
    field of every row as the numpy specification places it (19 sub-rays in three parts
    of 2, 1 and 16 a footprint; the first part cast for three times as many footprints,
    of which some are taken, out of order, as the probes of the pulses cast in full)."""
    from simulator.chunk import Hits
    from simulator.steps.footprint import interleave

    gen = np.random.default_rng(7)
    f, samples = 501, 19
    taken = gen.permutation(3 * f)[:f]
    parts = []
    for which, footprints in (
        (np.array([13, 4]), taken),
        (np.array([0]), None),
        (np.setdiff1d(np.arange(1, 19), [4, 13]), None),
    ):
        n = (3 * f if footprints is not None else f) * len(which)
        hits = Hits(gen.random(n, dtype=np.float32), gen.integers(-1, 9, n).astype(np.int32),
                    gen.random((n, 3), dtype=np.float32))  # fmt: skip
        parts.append((which, gen.random((n, 6), dtype=np.float32), hits, footprints))
    want_rays, want = interleave(parts, samples)
    got_rays, got = backend.interleave(parts, samples)
    assert got_rays.shape == want_rays.shape == (f * samples, 6)
    np.testing.assert_array_equal(got_rays, want_rays)
    for name in ("range_m", "object_index", "normal"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    # sub-ray 13 of footprint 7 is row 7 * 19 + 13; it came first in the first part, in
    # its footprint taken[7]; sub-ray 0 of footprint 7 is the second part's row 7
    np.testing.assert_array_equal(got_rays[7 * 19 + 13], parts[0][1][taken[7] * 2])
    np.testing.assert_array_equal(got.range_m[7 * 19 + 4], parts[0][2].range_m[taken[7] * 2 + 1])
    np.testing.assert_array_equal(got_rays[7 * 19], parts[1][1][7])
