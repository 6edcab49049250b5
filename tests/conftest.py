"""Shared helpers: write scanners, scenes and surveys to a temporary folder and scan them;
run ``lidar-sim`` in this process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import settings

import simulator
from simulator.backend import KERNELS_AVAILABLE, Backend, NumbaBackend, NumpyBackend
from simulator.pipeline.adaptive import cast_in_full, witnesses
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


def dataset_files(root: Path) -> dict[str, bytes]:
    """A dataset folder's files by relative path, with their bytes (the manifest, which
    holds timings, left out): what two runs that should agree are compared by."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}  # fmt: skip


def refused_in_one_line(res: Ran, fragment: str, out: Path) -> None:
    """A command's bad input: exit code 2, one line on stderr naming ``fragment``, no
    traceback, and nothing written at ``out``."""
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()


def count_cast_in_full(sim: simulator.Simulation) -> tuple[PointCloud, int]:
    """Scan ``sim`` counting the pulses adaptive sampling casts in full (those whose
    footprint's remaining sub-rays, beyond its probes, are cast): the cloud and the count.
    Full sampling, or adaptive sampling that casts nothing more, counts 0."""
    from simulator.steps.footprint import centre_sub_ray, neighbour_stride, probe_indices

    probe = probe_indices(sim.beam, neighbour_stride(sim.pattern, sim.beam) == 0)
    centre = centre_sub_ray(sim.beam)
    full = [0]
    original = sim.footprint_rays

    def counting(rays: Any, which: Any = None) -> Any:
        # (the unprobed sub-rays: without the central one, which is made apart, or all
        # of them where the pattern has none; one call a fan)
        rest = sim.beam.samples - len(probe)
        if (
            which is not None
            and len(which) in (rest - 1, rest)
            and centre not in which
            and not np.isin(which, probe).any()
        ):
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
    (:func:`simulator.steps.footprint.single_surface`, and what is cast in full whatever the
    witnesses say) leaves to full sampling."""
    from simulator.steps.footprint import single_surface

    parts = []
    for a, b in sim.chunk_spans():
        chunk = sim.cast(sim.aim(a, b, footprints=False))
        smooth = single_surface(chunk.beams, chunk.hits, witnesses(sim, chunk))
        parts.append(~smooth | cast_in_full(sim, chunk, []))
    return np.concatenate(parts)


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return Workspace(tmp_path)


@pytest.fixture(params=["numpy", "numba"])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Each backend in turn, by name: the numpy specification, then the numba kernels
    (skipped without numba). A test that compares a step with its specification takes
    this fixture, so that it runs the step on both (as trimesh's ray tests run every ray
    engine)."""
    if request.param == "numpy":
        return NumpyBackend()
    if not KERNELS_AVAILABLE:
        pytest.skip("numba is not installed")
    return NumbaBackend()


class DaskProcesses:
    """The processes of the run's Dask cluster (:func:`dask_scheduler`), stopped once:
    after the last test that uses them (:func:`pytest_runtest_protocol`), or else at the
    end of the run."""

    #: The cluster of this process, while it runs.
    running: DaskProcesses | None = None

    def __init__(self, procs: list[subprocess.Popen[bytes]], log: Any) -> None:
        self.procs, self.log = procs, log

    def stop(self) -> None:
        """Stop the workers, then the scheduler (idempotent).

        The workers first: a worker closing says goodbye to the scheduler, and with the
        scheduler already gone it retried for distributed's 30 s connect timeout (then was
        killed): the 30-60 s teardown stall of the last test on the cluster's xdist worker.
        Measured (a scheduler, two workers, one task; 8 runs each, alternating): all
        stopped at once, 4 of 8 stalled 30 s; in this order, none, 0.3-0.6 s."""
        if DaskProcesses.running is self:
            DaskProcesses.running = None
        procs, self.procs = self.procs, []
        for group in (procs[1:], procs[:1]):
            for proc in group:
                proc.terminate()
            for proc in group:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        if not self.log.closed:
            self.log.close()


@pytest.fixture(scope="session")
def dask_scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``dask scheduler`` and two single-threaded ``dask worker`` processes on
    127.0.0.1, started once a test run (a worker process of xdist runs every test that asks
    for it: :data:`DASK_GROUP`): the scheduler's address. Tests take :func:`dask_cluster`.
    The workers run without a nanny (no process a worker to restart it): a test run does
    not need one, and each nanny cost a Python process and 7 s of closing at the end.
    Stopped after the last test that uses it (:func:`pytest_runtest_protocol`): idle, the
    three processes took 3.5 CPU s a minute (measured at load 2.5), 43 CPU s of a run of
    the suite at load 5-7 whose Dask tests ran first."""
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    from distributed import Client

    tmp = tmp_path_factory.mktemp("dask")
    address_file = tmp / "scheduler.json"
    dask = Path(sys.executable).with_name("dask")
    log = (tmp / "cluster.log").open("wb")
    cluster = DaskProcesses([], log)
    cluster.procs.append(subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port",
                                           "0", "--no-dashboard", "--scheduler-file",
                                           address_file], stdout=log, stderr=log))  # fmt: skip
    try:
        for k in range(2):
            cluster.procs.append(subprocess.Popen(
                [dask, "worker", "--scheduler-file", address_file, "--nthreads", "1",
                 "--no-nanny", "--no-dashboard", "--host", "127.0.0.1",
                 "--local-directory", tmp / f"worker{k}"], stdout=log, stderr=log))  # fmt: skip
        deadline = time.monotonic() + 120
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        address = json.loads(address_file.read_text())["address"]
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        DaskProcesses.running = cluster
        yield address
    finally:
        cluster.stop()


@pytest.fixture
def dask_cluster(dask_scheduler: str) -> str:
    """The run's Dask cluster (:func:`dask_scheduler`) with its workers holding no built
    sequence, as a new cluster's would (a dataset run's workers keep theirs for later
    runs: a test counting builds must not see another test's): the scheduler's address."""
    from distributed import Client

    from simulator.datasets.worker import clear_cache

    if DaskProcesses.running is None:  # (stopped after what was taken for its last test)
        raise RuntimeError("the run's Dask cluster was stopped before this test")
    with Client(dask_scheduler, timeout=60) as client:
        client.run(clear_cache)
    return dask_scheduler


# ---------------------------------------------------------------- parallel runs (xdist)
#
# The suite runs on pytest-xdist's workers (``-n auto --dist loadgroup`` in pyproject.toml;
# ``-n 0`` runs it in this one process). Three rules keep that sound:
#
# - numba's cache is filled once, by the controller, before the workers start: on a clean
#   clone two workers would otherwise compile the same kernels at the same time (each
#   paying the ~60 s of CPU, and each rewriting the other's cache index); the controller
#   has two processes compile half of the kernels each (:func:`warm_kernels`);
# - the tests that share a module- or class-scoped fixture of their module run on one
#   worker, in one process (:func:`pytest_collection_modifyitems`), so the fixture is
#   built once, as in a serial run;
# - a test that must share a process with others, or must not run beside them, says so
#   with ``@pytest.mark.xdist_group("name")`` (``test_docs.py``: one page's blocks);
# - the tests on the run's Dask cluster (:func:`dask_cluster`) run on one worker, so that
#   the cluster starts once (:data:`DASK_GROUP`);
# - a worker's numpy does its linear algebra on one thread (:func:`pytest_configure`): the
#   workers fill the cores already, and OpenBLAS's threads, each a core, spun while they
#   waited for the other worker's.
#
# The groups are scheduled here (:func:`group_scheduling`), not by xdist's ``loadgroup``:
# that one marks a group by appending it to the test's node id, which pytest 9 no longer
# lets a plugin change (every test became a group of its own). The workers write each
# test's group to a file the controller's scheduler reads.


def warm_kernels(say: Any = print) -> Path | None:
    """Fill numba's cache with the kernels of :data:`~tests.support.warm_up.WARM_UP`'s
    scans, in two processes at once, each compiling half of the kernels
    (``tests/support/warm_up.py``), unless a stamp says this was done for the kernels'
    present sources (``say`` is told when it is not). Returns the stamp written, or None
    when nothing was to do (or numba is absent). Raises RuntimeError if a half failed."""
    import hashlib

    from simulator import kernels

    from .support.warm_up import WARM_UP

    if not kernels.AVAILABLE:
        return None
    digest = hashlib.sha1(f"{kernels.source_digest()} {WARM_UP!r}".encode()).hexdigest()
    stamp = kernels.SOURCE_STAMP.with_name("tests-warm-up.sha1")
    elsewhere = bool(os.environ.get("NUMBA_CACHE_DIR"))  # numba's cache is not beside us
    try:
        if not elsewhere and stamp.read_text() == digest:
            return None
    except OSError:
        pass
    say("numba: compiling the kernels once before the workers start (a clean cache), "
        "half of them in each of two processes")  # fmt: skip
    package = Path(simulator.__file__).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(package.parent), *filter(None, [os.environ.get("PYTHONPATH")])]))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        lock = Path(tmp) / "numba-cache.lock"
        outs = [Path(tmp) / f"half{half}.out" for half in (0, 1)]
        procs = []
        for half, out in enumerate(outs):
            with out.open("wb") as sink:  # (the child holds its own copy)
                procs.append(subprocess.Popen(
                    [sys.executable, REPO / "tests" / "support" / "warm_up.py", str(half), lock],
                    env=env, cwd=tmp, stdout=sink, stderr=subprocess.STDOUT))  # fmt: skip
        for proc in procs:
            proc.wait()
        compiled = []
        for proc, out in zip(procs, outs, strict=True):
            text = out.read_text(errors="replace")
            if proc.returncode != 0:
                raise RuntimeError(f"exit code {proc.returncode}: {text.strip()[-2000:]}")
            report = json.loads(text.strip().splitlines()[-1])
            if report["package"] != str(package):  # its cache is not the one the tests read
                raise RuntimeError(f"the warm-up imported {report['package']}, not {package}")
            compiled.append(set(report["compiled"]))
    both = sorted(compiled[0] & compiled[1])
    if both:  # correct (the saves were locked), but compiled twice: move a module over
        say(f"numba warm-up: compiled in both halves: {', '.join(both)}")
    try:
        stamp.write_text(digest)
    except OSError:
        return None
    return stamp


def _controller_of_workers(config: pytest.Config) -> bool:
    """This process hands the tests to xdist workers (it runs none itself)."""
    return not hasattr(config, "workerinput") and bool(getattr(config.option, "tx", None))


def pytest_configure(config: pytest.Config) -> None:
    """Before xdist starts its workers: OpenBLAS (numpy's matrix products, least squares)
    on one thread in each worker process and what it starts, unless the environment says
    otherwise. The results are the same on one thread (the checksums and the closed loop
    of ``test_reconstruct`` compared); the CPU is not: test_reconstruct's reconstruction
    took 62-64 CPU s against 70-71 with a thread a core (paired, alternating, load 3-4)."""
    if _controller_of_workers(config):
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Before xdist starts its workers (its own hook runs last): fill numba's cache, for a
    run of the whole suite (``pytest`` without paths, as ``make test`` runs it; a run of
    some files compiles what they call, in the workers)."""
    config = session.config
    if _controller_of_workers(config) and config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        say = reporter.write_line if reporter is not None else print
        try:
            warm_kernels(say)
        except Exception as exc:  # the tests that scan report it, each on its own
            say(f"numba warm-up failed ({type(exc).__name__}: {exc}); the tests go on")


_SHARED_SCOPES = ("class", "module", "package", "session")


def _shares_a_fixture_of_its_module(item: pytest.Item) -> bool:
    """The test uses a class-, module-, package- or session-scoped fixture defined in its
    own module."""
    module = getattr(item, "module", None)
    info = getattr(item, "_fixtureinfo", None)
    if module is None or info is None:
        return False
    return any(
        defs[-1].scope in _SHARED_SCOPES
        and getattr(defs[-1].func, "__module__", None) == module.__name__
        for defs in info.name2fixturedefs.values()
        if defs
    )


#: The xdist group of the tests on the run's Dask cluster: ``test_dataset``'s module group,
#: since its cluster tests also share that module's fixtures (built once so).
DASK_GROUP = "tests.test_dataset"


def group_of(item: pytest.Item) -> str | None:
    """The test's xdist group: its ``xdist_group`` marks' names, else :data:`DASK_GROUP`
    when it runs on the Dask cluster, else its module's name when it shares a fixture of
    its module (:func:`_shares_a_fixture_of_its_module`)."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    if names:
        return "_".join(sorted(names))
    if "dask_scheduler" in getattr(item, "fixturenames", ()):
        return DASK_GROUP
    if _shares_a_fixture_of_its_module(item):
        return item.module.__name__  # type: ignore[attr-defined]
    return None


@pytest.hookimpl(tryfirst=True)  # every test, before any is deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker: write each grouped test's group for the controller's scheduler."""
    folder = getattr(config, "workerinput", {}).get("lidar_sim_groups")
    if folder is None:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item)) is not None}
    path = Path(folder) / f"{config.workerinput['workerid']}.json"
    part = path.with_suffix(".part")
    part.write_text(json.dumps(groups), encoding="utf-8")
    part.replace(path)  # whole, or not there


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """The folder the workers write the tests' groups to (:func:`pytest_collection_modifyitems`)."""
    config = node.config
    if not hasattr(config, "_lidar_sim_groups"):
        config._lidar_sim_groups = tempfile.mkdtemp(prefix="xdist-groups-")
    node.workerinput["lidar_sim_groups"] = config._lidar_sim_groups


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: the scheduling of :func:`group_scheduling`."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return group_scheduling()(config, log)


def group_scheduling() -> type:
    """xdist's scope scheduling (a class) with each test's group for its scope."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling with a test's group (as the workers wrote them) for its
        scope: a group's tests go to one worker, in order; every other test on its own.
        The largest groups are handed out first."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                folder = getattr(self.config, "_lidar_sim_groups", None)
                self._groups = {}
                for path in sorted(Path(folder).glob("*.json")) if folder else ():
                    self._groups.update(json.loads(path.read_text(encoding="utf-8")))
            return self._groups.get(nodeid, nodeid)

    return GroupScheduling


def _last_on_the_cluster(session: pytest.Session) -> pytest.Item | None:
    """The last test of the run (in collection order, the order each xdist worker runs its
    tests in) that uses the Dask cluster, or None."""
    users = [i for i in session.items if "dask_scheduler" in getattr(i, "fixturenames", ())]
    return users[-1] if users else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After the last test that uses the run's Dask cluster, stop it (:class:`DaskProcesses`):
    its tests run on one worker, in order (:data:`DASK_GROUP`), and the cluster idled
    through the rest of the run otherwise."""
    result = yield
    if DaskProcesses.running is not None and item is _last_on_the_cluster(item.session):
        DaskProcesses.running.stop()
    return result


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
    folder = getattr(session.config, "_lidar_sim_groups", None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    session.config._exit_status = exitstatus  # type: ignore[attr-defined]
