"""The one place that chooses how the pipeline's steps are computed.

A backend offers the steps that have both a numpy specification and a numba kernel, with
one name and one signature each. :data:`STEPS` lists them, once, with what each does: a
:class:`Step` names its specification's module and its kernel's module. Both backends, the
count of compiled kernels and the tests' list of steps are read from it; the
:class:`Backend` protocol gives each step's types, and a test holds it to the list.

:class:`NumpyBackend` runs the specification; :class:`NumbaBackend` the kernels of
:mod:`simulator.kernels`, over every core. The kernels cover what the hot path needs; the
steps whose kernels are specific to spinning scanners (``for_spinning``: their kernels
derive directions, rings and times from the spinning tables) run the specification for
the other patterns. :func:`select_backend` picks one, once, for a
:class:`~simulator.pipeline.simulation.Simulation`.

numba compiles a kernel on its first call unless its cache holds the kernel's machine code
for this machine and these sources (beside the package, or under ``NUMBA_CACHE_DIR``). That
takes tens of seconds once, after an install or a change of the kernels, so the numba
backend says so on stderr before the first compile of a process
(:func:`announce_first_compile`).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from .beam import BeamPattern
from .chunk import CastChunk, Hits, PulsePoses, Rays
from .constants import PASS_THROUGH_M
from .kernels import AVAILABLE as KERNELS_AVAILABLE
from .pointcloud import PointCloud
from .sensor.scanner import ScanPattern, SpinningPattern
from .steps.footprint import Part, Witnesses
from .steps.hits import HitResults, ReturnModel
from .steps.particles import Particles, Population
from .steps.returns import Returns
from .steps.tables import SceneTables, Streams
from .steps.transmittance import Behind
from .steps.weather import Medium
from .world.triangles import Triangles

__all__ = [
    "COMPILE_NOTE",
    "FIRST_COMPILE_S",
    "KERNELS_AVAILABLE",
    "STEPS",
    "Backend",
    "NumbaBackend",
    "NumpyBackend",
    "Step",
    "announce_first_compile",
    "select_backend",
]

#: Seconds the first scan of a fresh clone spends compiling the kernels: the set-up of
#: ``lidar-sim scan scenes/farm/survey.yaml -o out/demo.npz -o out/demo.pcd -o out/demo.las``
#: (``make demo``'s scan) with numba's cache empty, on this project's 2-core machines:
#: 23-26 s measured (up to 36 s with other work on the cores). Two thirds of it is the
#: see-through kernel the farm's vegetation needs; a survey with weather or footprints
#: compiles more kernels.
FIRST_COMPILE_S = 18
#: What the numba backend prints on stderr before the first kernel of a process compiles.
COMPILE_NOTE = f"compiling the kernels once for this machine (about {FIRST_COMPILE_S} s)"


@dataclass(frozen=True)
class Step:
    """One step both backends compute: the numpy specification
    ``simulator.<specification>.<name>`` and the numba kernel
    ``simulator.kernels.<kernel>.<kernel_name>`` (by default ``<name>``), of the same
    signature. A kernel ``for_spinning`` computes spinning patterns only; the numba
    backend runs the specification for the others."""

    name: str
    specification: str
    kernel: str
    kernel_name: str = ""
    for_spinning: bool = False

    def specification_function(self) -> Callable[..., Any]:
        """The numpy specification."""
        return getattr(importlib.import_module(f"{__package__}.{self.specification}"), self.name)

    def kernel_module(self) -> Any:
        """The module of :mod:`simulator.kernels` that holds the kernel (needs numba)."""
        return importlib.import_module(f"{__package__}.kernels.{self.kernel}")

    def kernel_function(self) -> Callable[..., Any]:
        """The numba kernel (needs numba)."""
        return getattr(self.kernel_module(), self.kernel_name or self.name)


#: Every step of a backend, in the pipeline's order: the one list of them.
STEPS: tuple[Step, ...] = (
    # each pulse's firing time (the kernel: spinning patterns)
    Step("pulse_times", "steps.rays", "rays", kernel_name="spinning_times", for_spinning=True),
    # a scan pattern's rays with the sensor's pose (the kernel: spinning patterns)
    Step("pattern_rays", "steps.rays", "rays", kernel_name="spinning_rays", for_spinning=True),
    # the footprint sub-rays of each beam
    Step("sub_rays", "steps.rays", "rays"),
    # the rays cast on behind the see-through surfaces they met
    Step("rays_behind", "steps.rays", "rays"),
    # which rays can meet which moving objects: the ray engine's cull
    Step("rays_into_boxes", "world.raycast", "cull"),
    # the rays the cull kept, moved into a moving group's frame at each one's pose
    Step("into_group_frame", "world.raycast", "cull"),
    # a moving group's hits put in place of the hits so far where nearer
    Step("nearer_hits", "world.raycast", "cull"),
    # the hits' range and normal recomputed in float64, and the ties among them
    Step("refine_hits", "world.refine", "refine"),
    # the per-hit model
    Step("evaluate_hits", "steps.hits", "hits"),
    # which footprints adaptive sampling leaves to the central ray
    Step("single_surface", "steps.footprint", "footprint"),
    # the sub-rays adaptive sampling casts in parts, put in pulse-major order
    Step("interleave", "steps.footprint", "footprint"),
    # echoes of sub-rays and of the surfaces behind see-through ones: formed, measured,
    # selected
    Step("echo_returns", "steps.echoes", "echoes"),
    # the returns of a chunk cast one ray a pulse where some rays passed see-through
    # surfaces
    Step("see_through_returns", "steps.see_through", "see_through"),
    # a chunk's single-ray returns joined with those recomputed for some of its pulses
    Step("merge_returns", "steps.merge", "merge"),
    # the weather's particles counted, then drawn, per pulse
    Step("count_particles", "steps.particles", "particles"),
    Step("draw_particles", "steps.particles", "particles"),
    # the returns of the pulses the weather touches
    Step("medium_returns", "steps.weather", "weather"),
    # the point record of the returns (the kernel: spinning patterns)
    Step("record", "steps.record", "record", for_spinning=True),
    # LAS records of a point record
    Step("pack_las", "steps.record", "record"),
)

_first_compile: Any = None  # the numba event listener, once registered


def announce_first_compile(say: Callable[[str], None] | None = None) -> None:
    """Have ``say`` (default: a line on stderr) told :data:`COMPILE_NOTE` before numba
    compiles the first kernel of :mod:`simulator.kernels` in this process, i.e. on the
    first call that misses numba's cache; nothing when every kernel comes from the cache.
    Once a process: a second call changes nothing (needs numba)."""
    global _first_compile
    if _first_compile is not None:
        return
    from numba.core import event

    package = f"{__package__}.kernels"

    def to_stderr(note: str) -> None:
        print(note, file=sys.stderr, flush=True)

    class FirstCompile(event.Listener):  # type: ignore[misc]
        """Says the note at the start of the first compile of one of the kernels."""

        said = False

        def on_start(self, ev: event.Event) -> None:
            func = getattr((ev.data or {}).get("dispatcher"), "py_func", None)
            if not self.said and getattr(func, "__module__", "").startswith(package):
                self.said = True
                (say or to_stderr)(COMPILE_NOTE)

        def on_end(self, ev: event.Event) -> None:
            del ev

    _first_compile = FirstCompile()
    event.register("numba:compile", _first_compile)


class Backend(Protocol):
    """The steps a backend computes (see the module docstring)."""

    name: str

    def pulse_times(self, pattern: ScanPattern, start: int, stop: int) -> NDArray[np.float64]:
        """Firing times of pulses ``start..stop`` (see
        :func:`simulator.steps.rays.pulse_times`)."""
        ...

    def pattern_rays(
        self,
        pattern: ScanPattern,
        start: int,
        stop: int,
        poses: PulsePoses,
        shift_m: NDArray[np.float64],
    ) -> NDArray[np.float32]:
        """Rays of pulses ``start..stop`` (see :func:`simulator.steps.rays.pattern_rays`)."""
        ...

    def sub_rays(
        self,
        rays: NDArray[np.float32],
        sensor_up: NDArray[np.float64],
        sensor_forward: NDArray[np.float64],
        beam: BeamPattern,
    ) -> NDArray[np.float32]:
        """The rays to cast (see :func:`simulator.steps.rays.sub_rays`)."""
        ...

    def rays_behind(
        self,
        rays: NDArray[np.float32],
        on: NDArray[np.int64],
        range_m: NDArray[np.floating],
        passes: NDArray[np.int64],
        pass_through_m: float = PASS_THROUGH_M,
    ) -> tuple[NDArray[np.float32], NDArray[np.float64]]:
        """The rays cast on behind see-through surfaces, and where they start (see
        :func:`simulator.steps.rays.rays_behind`)."""
        ...

    def evaluate_hits(
        self,
        chunk: CastChunk,
        tables: SceneTables,
        model: ReturnModel,
        streams: Streams,
        *,
        full: bool = True,
        jitter: bool = True,
        detect: bool = True,
    ) -> HitResults:
        """The per-hit model (see :func:`simulator.steps.hits.evaluate_hits`)."""
        ...

    def echo_returns(
        self,
        results: HitResults,
        hits: Hits,
        pulse_id: NDArray[np.uint64],
        beam: BeamPattern,
        model: ReturnModel,
        streams: Streams,
        behind: Sequence[Behind] = (),
        pulses: NDArray[np.intp] | None = None,
    ) -> Returns:
        """Returns of footprint sub-rays and the surfaces behind see-through ones (see
        :func:`simulator.steps.echoes.echo_returns`)."""
        ...

    def see_through_returns(
        self,
        results: HitResults,
        hits: Hits,
        pulse_id: NDArray[np.uint64],
        beam: BeamPattern,
        model: ReturnModel,
        streams: Streams,
        behind: Sequence[Behind] = (),
        *,
        diagnostics: bool = False,
    ) -> Returns:
        """Returns of one ray a pulse through see-through surfaces (see
        :func:`simulator.steps.see_through.see_through_returns`)."""
        ...

    def single_surface(
        self, rays: NDArray[np.float32], hits: Hits, witnesses: Witnesses
    ) -> NDArray[np.bool_]:
        """Footprints on one smooth surface (see
        :func:`simulator.steps.footprint.single_surface`)."""
        ...

    def interleave(self, parts: list[Part], samples: int) -> tuple[NDArray[np.float32], Hits]:
        """Sub-rays cast in parts, pulse-major (see
        :func:`simulator.steps.footprint.interleave`)."""
        ...

    def record(
        self,
        returns: Returns,
        rays: Rays,
        frame: PulsePoses | None,
        tables: SceneTables,
        pattern: ScanPattern,
    ) -> PointCloud:
        """The point record (see :func:`simulator.steps.record.record`)."""
        ...

    def pack_las(
        self,
        fields: dict[str, NDArray[Any]],
        offset_m: NDArray[np.float64],
        scale_m: NDArray[np.float64],
        data: NDArray[Any],
    ) -> None:
        """LAS records (see :func:`simulator.steps.record.pack_las`)."""
        ...

    def rays_into_boxes(
        self,
        rays: NDArray[np.float32],
        shift_m: NDArray[np.float64],
        range_max_m: NDArray[Any],
        slot: NDArray[np.int64],
        lo_m: NDArray[np.float64],
        hi_m: NDArray[np.float64],
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Which rays meet which boxes (see :func:`simulator.world.raycast.rays_into_boxes`)."""
        ...

    def into_group_frame(
        self,
        rays: NDArray[np.float32],
        rows: NDArray[np.int64],
        shift_m: NDArray[np.float64],
        rotation: NDArray[np.float64],
        position_m: NDArray[np.float64],
        local_m: NDArray[np.float64],
    ) -> NDArray[np.float32]:
        """Rays in a moving group's frame (see
        :func:`simulator.world.raycast.into_group_frame`)."""
        ...

    def nearer_hits(
        self,
        range_m: NDArray[np.float32],
        object_index: NDArray[np.int32],
        normal: NDArray[np.float32],
        rows: NDArray[np.int64],
        t: NDArray[np.float32],
        geometry: NDArray[np.int32],
        normal_local: NDArray[np.float32],
        rotation: NDArray[np.float64],
        members: NDArray[np.int32],
    ) -> NDArray[np.int64]:
        """A moving group's hits put in place where nearer (see
        :func:`simulator.world.raycast.nearer_hits`)."""
        ...

    def refine_hits(
        self,
        rays: NDArray[np.float32],
        t_hit: NDArray[np.float32],
        geometry: NDArray[np.uint32],
        primitive: NDArray[np.uint32],
        normal: NDArray[np.float32],
        triangles: Triangles,
    ) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64], NDArray[np.int64]]:
        """Hits refined in float64, the faces hit (coplanar ties decided) and the possible
        ties with a neighbour (see :func:`simulator.world.refine.refine_hits`)."""
        ...

    def medium_returns(
        self,
        results: HitResults,
        hits: Hits,
        pulse_id: NDArray[np.uint64],
        beam: BeamPattern,
        model: ReturnModel,
        streams: Streams,
        medium: Medium,
        particles: list[Particles] | None = None,
        behind: Sequence[Behind] = (),
        pulses: NDArray[np.intp] | None = None,
    ) -> Returns:
        """The returns of pulses (all, or ``pulses`` among them) through the weather (see
        :func:`simulator.steps.weather.medium_returns`)."""
        ...

    def draw_particles(self, population: Population, pulse_id: NDArray[np.uint64]) -> Particles:
        """The detectable particles in each pulse's beam (see
        :func:`simulator.steps.particles.draw_particles`)."""
        ...

    def merge_returns(
        self,
        single: Returns | None,
        kept: NDArray[np.bool_] | None,
        footprint: Returns,
        pulses: NDArray[np.intp],
        *,
        diagnostics: bool = False,
    ) -> Returns:
        """One chunk's returns from the single-ray ones kept and those recomputed for
        some pulses, in pulse order (see :func:`simulator.steps.merge.merge_returns`)."""
        ...

    def count_particles(
        self, population: Population, pulse_id: NDArray[np.uint64]
    ) -> NDArray[np.int64]:
        """How many particles :meth:`draw_particles` draws in each pulse's beam (see
        :func:`simulator.steps.particles.count_particles`)."""
        ...

    def set_threads(self, threads: int) -> None:
        """Compute on ``threads`` threads (0: every core)."""
        ...

    def compiled_kernels(self) -> int:
        """How many kernels this process compiled (rather than loaded from a cache)."""
        ...


class NumpyBackend:
    """The numpy specification of every step of :data:`STEPS`."""

    name = "numpy"

    def __init__(self) -> None:
        for step in STEPS:
            setattr(self, step.name, step.specification_function())

    def compiled_kernels(self) -> int:
        """None: the specification is plain numpy."""
        return 0

    def set_threads(self, threads: int) -> None:
        """numpy's own threads are not managed here."""
        del threads


def spinning_or_specification(
    kernel: Callable[..., Any], specification: Callable[..., Any]
) -> Callable[..., Any]:
    """A step that runs ``kernel`` for a spinning pattern (its ``pattern`` argument) and
    ``specification`` for the others; with the specification's name and signature."""
    where = list(inspect.signature(specification).parameters).index("pattern")

    @functools.wraps(specification)
    def step(*args: Any, **kwargs: Any) -> Any:
        pattern = kwargs["pattern"] if "pattern" in kwargs else args[where]
        spinning = isinstance(pattern, SpinningPattern)
        return (kernel if spinning else specification)(*args, **kwargs)

    return step


class NumbaBackend:
    """The numba kernels of every step of :data:`STEPS`, over every core (needs numba)."""

    name = "numba"

    def __init__(self) -> None:
        announce_first_compile()
        for step in STEPS:
            kernel = step.kernel_function()
            if step.for_spinning:
                kernel = spinning_or_specification(kernel, step.specification_function())
            setattr(self, step.name, kernel)
        # The steps' kernel modules and the modules they import kernels from (the shared
        # helpers, the soft targets', the overlap's): every module of the kernels' folder.
        package = f"{__package__}.kernels."
        self.kernel_modules = tuple(
            module for name, module in sorted(sys.modules.items()) if name.startswith(package)
        )

    def compiled_kernels(self) -> int:
        """Kernels compiled in this process: numba's cache misses over every kernel (each
        once, in whichever modules it is imported into)."""
        from numba.core.registry import CPUDispatcher

        kernels = {
            id(value): value
            for module in self.kernel_modules
            for value in vars(module).values()
            if isinstance(value, CPUDispatcher)
        }
        return sum(sum(k.stats.cache_misses.values()) for k in kernels.values())

    def set_threads(self, threads: int) -> None:
        """Run the kernels on ``threads`` threads (0: every core numba was started with)."""
        import numba

        most = numba.config.NUMBA_NUM_THREADS
        numba.set_num_threads(most if threads <= 0 else max(1, min(threads, most)))


def select_backend(kernels: bool | None = None) -> Backend:
    """The backend of a simulation.

    Parameters
    ----------
    kernels : bool, optional
        ``True``: the numba kernels (an error without numba); ``False``: the numpy
        specification; ``None`` (default): the kernels when numba is installed.
    """
    if kernels is None:
        kernels = KERNELS_AVAILABLE
    if kernels and not KERNELS_AVAILABLE:
        raise RuntimeError("the numba kernels need numba: pip install numba")
    return NumbaBackend() if kernels else NumpyBackend()
