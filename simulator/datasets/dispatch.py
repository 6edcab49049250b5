"""Which worker runs which frame, and where: the :class:`Dispatcher` that keeps workers on
the sequences they have built, local worker processes (forked where that is safe:
:func:`start_method`) and a Dask cluster. Which worker computes a frame never changes its
bytes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from multiprocessing.connection import wait as wait_for
from typing import Any

import numpy as np

from ..errors import OutputError
from .tasks import SequenceResult, SequenceTask, frame_task
from .worker import CACHE_ENTRIES, clear_cache, run_sequence, worker_name

__all__ = [
    "Dispatcher",
    "all_threads",
    "died",
    "import_for_workers",
    "machine_shares",
    "run_dask",
    "run_local",
    "serve",
    "start_method",
    "stop_children",
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

    def ahead(self, worker: str, sequence: int) -> tuple[int, int] | None:
        """The next frame of ``sequence`` for ``worker``, which has one of it to run (its
        build is there): sent ahead, so a worker process never waits between frames for
        the hand-out; None when the sequence has no frame left."""
        if not self.pending.get(sequence):
            return None
        return self._take(worker, sequence, self.pending[sequence].popleft())

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
    processes started by :func:`start_method` (forked, they inherit the imports), each
    with a pipe of its own (:func:`serve`), so the frame the dispatcher chose for a process
    is the one it runs. A process holds the frame it runs and the next frame of the same
    sequence, sent ahead (:meth:`Dispatcher.ahead`): it never waits for this process's
    hand-out thread, which gets the interpreter only between this process's own steps.
    Returns the start method used.

    Raises
    ------
    Exception
        What a worker raised (a full disk), or :class:`~simulator.errors.OutputError` if
        a worker process stopped (:func:`died`).
    """
    import multiprocessing

    method = start_method()
    if method == "fork":
        import_for_workers()
    ctx = multiprocessing.get_context(method)
    lock = threading.Lock()
    failure: list[BaseException] = []
    children: dict[str, tuple[Any, Any]] = {}  # worker -> (its pipe, its process)
    for _ in range(workers - 1):
        mine, theirs = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(theirs,), name="lidar-sim-dataset-worker")
        proc.start()
        theirs.close()
        children[f"pid:{proc.pid}"] = (mine, proc)
    queued: dict[str, deque[tuple[int, int]]] = {w: deque() for w in children}

    def feed(w: str) -> None:  # (holding the lock) the worker's frame, and one ahead
        if not queued[w] and (job := dispatcher.next(w)) is not None:
            queued[w].append(job)
            children[w][0].send(frame_task(tasks[job[0]], job[1]))
        if len(queued[w]) == 1 and (job := dispatcher.ahead(w, queued[w][0][0])) is not None:
            queued[w].append(job)
            children[w][0].send(frame_task(tasks[job[0]], job[1]))

    def hand_out() -> None:  # the worker processes' frames, as their results come
        try:
            by_pipe = {children[w][0]: w for w in children}
            by_sentinel = {children[w][1].sentinel: w for w in children}
            while any(queued.values()) and not failure:
                ready = wait_for([*by_pipe, *by_sentinel], timeout=1.0)
                for conn in [c for c in ready if c in by_pipe]:
                    w = by_pipe[conn]
                    try:
                        result = conn.recv()
                    except (EOFError, OSError):  # (the process is gone: reset, or closed)
                        raise died(w, children[w][1]) from None
                    if isinstance(result, BaseException):
                        raise result
                    with lock:
                        queued[w].popleft()
                        dispatcher.done(result, w)
                        collect(result)
                        feed(w)
                for w in [by_sentinel[c] for c in ready if c in by_sentinel]:
                    if queued[w] and not children[w][0].poll():
                        raise died(w, children[w][1])
        except BaseException as exc:  # raised again in this thread
            failure.append(exc)

    with lock:
        for w in children:
            feed(w)
    helper = threading.Thread(target=hand_out, name="dataset-dispatch", daemon=True)
    helper.start()
    me = worker_name()
    try:
        while not failure:
            with lock:
                job = dispatcher.next(me)
            if job is None:
                break
            result = run_sequence(frame_task(tasks[job[0]], job[1]))
            with lock:
                dispatcher.done(result, me)
                collect(result)
    except BaseException as exc:
        failure.append(exc)
    finally:
        clear_cache()
        all_threads()
        helper.join()
        stop_children(list(children.values()))
    if failure:
        raise failure[0]
    return method


def died(worker: str, proc: Any) -> OutputError:
    """The error of a worker process that ended while it had frames to run (killed, or
    by the system out of memory): the samples written are complete, ``--resume`` goes on."""
    proc.join(5.0)
    return OutputError(
        f"dataset worker {worker} stopped (exit code {proc.exitcode}: killed, or out of "
        "memory?); every sample written is complete: run again with --resume"
    )


def serve(conn: Any) -> None:
    """A local worker process: run each task received on ``conn`` and send its result
    back (or the exception that stops the run), until ``None``, or until the pipe closes
    or the run's process is gone (killed: a forked sibling may hold the pipe open)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the run's to handle: it stops us
    parent = os.getppid()
    while True:
        try:
            if not conn.poll(1.0):
                if os.getppid() != parent:
                    return
                continue
            task = conn.recv()
        except (EOFError, OSError):  # the run is gone
            return
        if task is None:
            return
        try:
            result: Any = run_sequence(task)
        except BaseException as exc:  # (a full disk: the run stops)
            result = exc
        conn.send(result)


def stop_children(children: list[tuple[Any, Any]], grace_s: float = 30.0) -> None:
    """Tell each worker process (its pipe, its process) to stop after its frame, and
    wait for it (a process still running after ``grace_s`` is terminated)."""
    for conn, _ in children:
        with contextlib.suppress(OSError):  # (it is gone)
            conn.send(None)
    for conn, proc in children:
        proc.join(grace_s)
        if proc.is_alive():
            proc.terminate()
            proc.join()
        conn.close()


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
    has threads, each asked of the worker the dispatcher chose (others may take it), and
    each on its share of that worker's machine (:func:`machine_shares`) unless the task
    has a share already."""
    from dask.distributed import as_completed as dask_completed

    info = client.scheduler_info(n_workers=-1)["workers"]
    slots = [addr for addr, w in sorted(info.items()) for _ in range(max(1, w.get("nthreads", 1)))]
    if not slots:
        slots = [None]
    shares = machine_shares(info, client.run(os.cpu_count)) if info else {}

    def submit(job: tuple[int, int], worker: str | None) -> Any:
        task = frame_task(tasks[job[0]], job[1])
        if not task.threads and worker in shares:
            task = dataclasses.replace(task, threads=shares[worker])
        return client.submit(run_sequence, task, pure=False,
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


def machine_shares(workers: dict[str, Any], cores: dict[str, int | None]) -> dict[str, int]:
    """The threads a task of each Dask worker may use: its machine's cores over the
    tasks that machine's workers run at once (at least one), so that workers sharing a
    machine do not oversubscribe it.

    Parameters
    ----------
    workers : mapping of str to dict
        The scheduler's workers by address, each with its ``host`` and ``nthreads``.
    cores : mapping of str to int
        Each worker's ``os.cpu_count()`` (None: unknown, taken as 1).
    """
    at_once: dict[str, int] = {}
    for w in workers.values():
        host = w.get("host", "")
        at_once[host] = at_once.get(host, 0) + max(1, w.get("nthreads", 1))
    return {addr: max(1, (cores.get(addr) or 1) // at_once[w.get("host", "")])
            for addr, w in workers.items()}  # fmt: skip
