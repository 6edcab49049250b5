"""The runs of a survey: its chunks in order, the whole cloud, its frames, and the scan
written to files chunk by chunk (:class:`Runs`, the part of
:class:`~simulator.pipeline.Simulation` that drives its steps, which sit in
:mod:`simulator.pipeline.simulation`)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..chunk import CastChunk
from ..io import check_space, check_writable, open_writer
from ..pointcloud import PointCloud, record_spec
from ..steps.hits import HitResults
from .records import Frame, OutputFrame, ProgressCallback, ScanSummary, Window

__all__ = ["Runs"]


class Runs:
    """Runs over a simulation's steps: what :class:`~simulator.pipeline.Simulation`
    inherits to scan a window chunk by chunk, hold it or write it. Every chunk is computed
    by ``scan_pulses`` from its pulse ids alone."""

    # What the simulation provides (see :class:`~simulator.pipeline.Simulation`).
    survey: Any
    scanner: Any
    pattern: Any
    trajectory: Any
    backend: Any
    tables: Any
    model: Any
    streams: Any
    timings_s: dict[str, float]
    total_pulses: int
    chunk_step: int
    diagnostics: bool

    def scan_pulses(self, start: int, stop: int, window: Window | None = None) -> PointCloud:
        raise NotImplementedError

    def cast_pulses(self, start: int, stop: int) -> CastChunk:
        raise NotImplementedError

    def front_laws(self, chunk: CastChunk, results: HitResults) -> HitResults:
        raise NotImplementedError

    def meta(self, window: Window | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def warm_up(self, paths: Sequence[str | Path] = (), pulses: int = 1000) -> float:
        """Make the one-time set-up happen now, outside any timed scan: Open3D builds its
        ray-casting structure on the first cast, and numba compiles the kernels on their
        first call (or loads them from its cache). Runs every step on ``pulses`` pulses in
        16 short runs spread evenly over the survey (the first pulses alone may meet no
        see-through surface, whose kernels would then compile inside the timed scan), and
        writes them to a throw-away file of each of the formats of ``paths`` (LAS has a
        packing kernel); keeps nothing, and clears the step timings.

        Returns
        -------
        float
            Seconds the set-up took (tens of seconds on the first run after an install,
            when the kernels compile; well under one once they are cached).
        """
        import tempfile

        from ..io import write

        t0 = time.perf_counter()
        runs = 16
        size = max(1, min(pulses, self.total_pulses) // runs)
        starts = np.unique(np.linspace(0, self.total_pulses - size, runs).astype(np.int64))
        clouds = [self.scan_pulses(int(a), int(a) + size) for a in starts]
        cloud = max(clouds, key=len)
        suffixes = {Path(p).suffix.lower() for p in paths} & {".las", ".laz"}
        if suffixes and len(cloud):
            with tempfile.TemporaryDirectory() as tmp:
                for suffix in suffixes:
                    write(cloud, Path(tmp) / f"warm-up{suffix}")
        self.timings_s = dict.fromkeys(self.timings_s, 0.0)
        return time.perf_counter() - t0

    def _span(self, window: Window) -> tuple[int, int]:
        return window.start, self.total_pulses if window.stop is None else window.stop

    def chunk_spans(self, window: Window | None = None) -> Iterator[tuple[int, int]]:
        """The (start, stop) pulse ids of each chunk of the window (default: the survey)."""
        start, stop = self._span(window or Window())
        for a in range(start, stop, self.chunk_step):
            yield a, min(a + self.chunk_step, stop)

    def chunks(
        self, progress: ProgressCallback | None = None, window: Window | None = None
    ) -> Iterator[PointCloud]:
        """Yield the scan of the window's pulses (default: all) chunk by chunk, in order.

        One chunk at a time, each step over all cores: Open3D holds the GIL while it
        casts, so a cast on a second thread cannot overlap Python work, and a cast beside
        the (GIL-free) numba kernels only made the two share the cores; it measured no
        faster (see docs/performance.md). Every chunk is computed from its pulse
        ids alone. ``progress`` gets (pulses done, pulses in all) of the window.
        """
        window = window or Window()
        start, stop = self._span(window)
        for a, b in self.chunk_spans(window):
            yield self.scan_pulses(a, b, window)
            if progress is not None:
                progress(b - start, stop - start)

    def evaluated_chunks(self) -> Iterator[tuple[CastChunk, HitResults]]:
        """Every chunk of the survey cast and through the per-hit model, with every
        per-hit field (what a report of the physics plots)."""
        for start, stop in self.chunk_spans():
            chunk = self.cast_pulses(start, stop)
            results = self.backend.evaluate_hits(
                chunk, self.tables, self.model, self.streams, full=True
            )
            yield chunk, self.front_laws(chunk, results)

    def frames(self) -> list[Frame]:
        """The survey cut into frames: one per turn of the pattern (``frame_pulses``), the
        last one shorter if the survey ends mid-turn; no pulse lost or repeated."""
        # (called unbound on a duck-typed clock too, `datasets.tasks.sequence_frames`)
        return list(Runs.iter_frames(self))  # type: ignore[arg-type]

    @property
    def frame_count(self) -> int:
        """How many frames :meth:`frames` gives."""
        return -(-self.total_pulses // self.pattern.frame_pulses)

    def iter_frames(self) -> Iterator[Frame]:
        """:meth:`frames` one at a time, each made when asked for (a long sequence holds
        no list of them)."""
        total, per_frame = self.total_pulses, self.pattern.frame_pulses
        for k, first in enumerate(range(0, total, per_frame)):
            ref = float(self.pattern.time_and_channel(np.array([first], np.uint64))[0][0])
            rot, pos = self.trajectory.pose_at(ref)
            yield Frame(k, first, min(first + per_frame, total), ref, rot, pos)

    def frame_cloud(self, frame: Frame, output_frame: OutputFrame | None = None) -> PointCloud:
        """One frame's cloud (held in memory), ``time_s`` from the frame's first firing."""
        return PointCloud.concatenate(list(self.chunks(None, frame.window(output_frame))))

    def run(self, progress: ProgressCallback | None = None) -> PointCloud:
        """Simulate the whole survey and return one cloud."""
        return PointCloud.concatenate(list(self.chunks(progress)), meta=self.meta())

    def write(
        self,
        paths: list[str | Path],
        progress: ProgressCallback | None = None,
        *,
        window: Window | None = None,
    ) -> ScanSummary:
        """Simulate the window (default: the survey) and write it to every path, chunk by
        chunk (bounded memory).

        Every path is checked before the scan starts; on any error or interruption all
        outputs are dropped, and no partial file is left. Each chunk is written as soon as
        it is made, on this thread: a writer thread measured slower, since each of its
        GIL-free writes had to win the GIL back from the scan (Open3D holds it for a whole
        cast), often after Python's 5 ms switch interval.
        """
        window = window or Window()
        start, stop = self._span(window)
        for path in paths:
            check_writable(path)
        most = (stop - start) * self.scanner.returns_per_pulse
        check_space([Path(p) for p in paths], most, self.diagnostics)
        started = time.perf_counter()
        # The most points there can be lets the npz writer put chunks in place.
        meta = {**self.meta(window), "max_points": most}
        spec = record_spec(self.diagnostics)
        writers = []
        try:
            for path in paths:
                writers.append(open_writer(path, spec, meta))
            summary = ScanSummary(pulses=stop - start)
            for chunk in self.chunks(progress, window):
                t0 = time.perf_counter()
                for writer in writers:
                    writer.write(chunk)
                self.timings_s["output"] += time.perf_counter() - t0
                summary.add(chunk)
            t0 = time.perf_counter()
            for writer in writers:
                summary.files.extend(writer.close())
            self.timings_s["output"] += time.perf_counter() - t0
        except BaseException:
            for writer in writers:
                writer.abort()
            raise
        summary.seconds = time.perf_counter() - started
        return summary
