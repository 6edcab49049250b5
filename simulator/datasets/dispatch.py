"""Which worker runs which frame, and where: the :class:`Dispatcher` that keeps workers on
the sequences they have built, local worker processes (forked where that is safe:
:func:`start_method`) and a Dask cluster. Which worker computes a frame never changes its
bytes.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

import numpy as np

from .tasks import SequenceResult, SequenceTask, frame_task
from .worker import CACHE_ENTRIES, clear_cache, run_sequence, worker_name

__all__ = [
    "Dispatcher",
    "all_threads",
    "import_for_workers",
    "run_dask",
    "run_local",
    "start_method",
    "threads_started",
]


class Dispatcher:
    """Which frame each worker runs next, so that workers keep to the sequences they
    have built and the frames still balance.

    A worker is given, in this order: the next frame of a sequence it holds; the first
    frame of a sequence nobody has started; a frame from the end of the sequence with the
    most frames left, if that is worth a build (more frames left than a build takes in
    frame times, by the running means; two without figures yet), or if nobody who holds
    that sequence is at work; else nothing (it waits, and the run ends when every worker
    waits). Which worker computes a frame never changes its bytes.

    Parameters
    ----------
    pending : mapping of int to iterable of int
        The frames to do of each sequence, in order.
    """

    def __init__(self, pending: dict[int, Iterable[int]]) -> None:
        self.pending = {s: deque(fr) for s, fr in pending.items() if fr}
        self.order = sorted(self.pending)
        self.started: set[int] = set()
        self.held: dict[str, list[int]] = {}  # worker -> sequences it has built, newest last
        self.busy: dict[str, int] = {}  # worker -> sequence it is running a frame of
        self._build_s: list[float] = []
        self._frame_s: list[float] = []

    def __bool__(self) -> bool:
        return any(self.pending.values())

    def done(self, result: SequenceResult, worker: str) -> None:
        """Note a finished task of ``worker`` (its sequence is held there now)."""
        self.busy.pop(worker, None)
        held = self.held.setdefault(worker, [])
        if result.index in held:
            held.remove(result.index)
        held.append(result.index)
        del held[:-CACHE_ENTRIES]
        if result.build_s > 0:
            self._build_s.append(result.build_s)
        if result.frames_written:
            self._frame_s.append(result.scan_s / result.frames_written)

    def _worth_a_build(self, left: int) -> bool:
        if not self._build_s or not self._frame_s:
            return left >= 2
        return left * float(np.mean(self._frame_s)) > float(np.mean(self._build_s))

    def next(self, worker: str | None) -> tuple[int, int] | None:
        """The (sequence, frame) for ``worker`` (None: a worker not yet known), or None."""
        for s in reversed(self.held.get(worker, []) if worker is not None else []):
            if self.pending.get(s):
                return self._take(worker, s, self.pending[s].popleft())
        for s in self.order:
            if s not in self.started and self.pending[s]:
                self.started.add(s)
                return self._take(worker, s, self.pending[s].popleft())
        left = [s for s in self.order if self.pending[s]]
        if not left:
            return None
        s = max(left, key=lambda q: len(self.pending[q]))
        if self._worth_a_build(len(self.pending[s])) or s not in self.busy.values():
            return self._take(worker, s, self.pending[s].pop())
        return None

    def _take(self, worker: str | None, s: int, frame: int) -> tuple[int, int]:
        if worker is not None:
            self.busy[worker] = s
        return s, frame


def start_method() -> str:
    """How local worker processes start: ``"fork"`` where the platform has it (Linux) and
    no kernel has run in this process yet, else ``"spawn"``.

    A forked worker inherits this process's imports (Open3D, trimesh, numba, the
    simulator), which a spawned one spends about two CPU seconds importing again. Forking
    is safe only before any thread pool exists: GNU OpenMP (numba's ``omp`` layer) aborts
    a child forked after a parallel kernel ran ("fork() called from a process already
    using GNU OpenMP"). So :func:`run_dataset` forks at its start, before it casts or
    computes anything, and falls back to ``spawn`` in a process whose numba threads have
    started (a second run in one Python session, e.g. a notebook or the bench) and on
    macOS and Windows (no safe ``fork``). The start method never changes the files
    written (a test writes a dataset both ways).

    Returns
    -------
    str
        A :mod:`multiprocessing` start method.
    """
    import multiprocessing

    if sys.platform != "linux" or "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    return "spawn" if threads_started() else "fork"


def import_for_workers() -> None:
    """Import what a worker needs, for forked workers to inherit instead of importing it
    again (Open3D alone is about 1 CPU s a process; importing starts no thread)."""
    from ..pipeline import simulation  # noqa: F401
    from ..world import scene  # noqa: F401
    from ..world.raycast import import_open3d

    import_open3d()


def threads_started() -> bool:
    """Whether numba's parallel threads have started in this process."""
    parallel = sys.modules.get("numba.np.ufunc.parallel")
    return parallel is not None and bool(getattr(parallel, "_is_initialized", True))


def run_local(
    tasks: dict[int, SequenceTask],
    dispatcher: Dispatcher,
    workers: int,
    collect: Callable[[SequenceResult], None],
) -> str:
    """Run the dispatcher's frames on ``workers`` local workers: this process (which has
    its imports and compiled kernels already, and starts at once) and ``workers - 1``
    processes started by :func:`start_method` (forked, they inherit the imports), one
    frame in flight each (so a frame submitted when a process
    finishes goes to that process). A thread of this process hands the spawned ones their
    frames while this one scans its own. Returns the start method used."""
    import multiprocessing

    lock = threading.Lock()
    failure: list[BaseException] = []
    method = start_method()
    if method == "fork":
        import_for_workers()
    ctx = multiprocessing.get_context(method)
    with ProcessPoolExecutor(max_workers=workers - 1, mp_context=ctx) as pool:
        running: dict[Any, tuple[int, int]] = {}
        with lock:
            for _ in range(workers - 1):
                job = dispatcher.next(None)
                if job is None:
                    break
                running[pool.submit(run_sequence, frame_task(tasks[job[0]], job[1]))] = job

        def hand_out() -> None:  # the spawned processes' frames
            try:
                while running:
                    finished, _ = wait_futures(list(running), return_when="FIRST_COMPLETED")
                    for fut in finished:
                        del running[fut]
                        result = fut.result()
                        with lock:
                            dispatcher.done(result, result.worker)
                            collect(result)
                            job = dispatcher.next(result.worker)
                        if job is not None:
                            task = frame_task(tasks[job[0]], job[1])
                            running[pool.submit(run_sequence, task)] = job
            except BaseException as exc:  # raised again in this thread
                failure.append(exc)

        helper = threading.Thread(target=hand_out, name="dataset-dispatch", daemon=True)
        helper.start()
        me = worker_name()
        try:
            while True:
                with lock:
                    job = dispatcher.next(me)
                if job is None:
                    break
                result = run_sequence(frame_task(tasks[job[0]], job[1]))
                with lock:
                    dispatcher.done(result, me)
                    collect(result)
        finally:
            clear_cache()
            all_threads()
            helper.join()
    if failure:
        raise failure[0]
    return method


def all_threads() -> None:
    """This process's kernels back on every core (a worker's share was set for a run)."""
    from ..backend import select_backend

    select_backend().set_threads(0)


def run_dask(
    tasks: dict[int, SequenceTask],
    dispatcher: Dispatcher,
    client: Any,
    collect: Callable[[SequenceResult], None],
) -> None:
    """Run the dispatcher's frames on a Dask cluster: as many in flight a worker as it
    has threads, each asked of the worker the dispatcher chose (others may take it)."""
    from dask.distributed import as_completed as dask_completed

    info = client.scheduler_info(n_workers=-1)["workers"]
    slots = [addr for addr, w in sorted(info.items()) for _ in range(max(1, w.get("nthreads", 1)))]
    if not slots:
        slots = [None]

    def submit(job: tuple[int, int], worker: str | None) -> Any:
        return client.submit(run_sequence, frame_task(tasks[job[0]], job[1]), pure=False,
                             workers=None if worker is None else [worker],
                             allow_other_workers=True)  # fmt: skip

    running = dask_completed()
    for addr in slots:
        job = dispatcher.next(addr)
        if job is None:
            break
        running.add(submit(job, addr))
    for fut in running:
        result = fut.result()
        dispatcher.done(result, result.worker)
        collect(result)
        job = dispatcher.next(result.worker)
        if job is not None:
            running.add(submit(job, result.worker))
