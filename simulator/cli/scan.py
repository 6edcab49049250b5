"""``lidar-sim scan``, ``sequence`` and ``dataset``: a survey scanned, as one cloud, as
frames with poses, or as many samples of a dataset spec."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..constants import OUTPUT_SUFFIXES
from .common import QuietOption, SetOption, choose, command, err, out, progress_bar, warn

if TYPE_CHECKING:  # the commands import what they use, so that --help answers at once
    from ..pipeline.simulation import ScanSummary, Simulation

__all__ = ["dataset", "scan", "sequence"]


def _setup_note(sim: Simulation) -> str:
    """What the one-time set-up before a timed scan was."""
    compiled = sim.backend.compiled_kernels()
    if sim.backend.name != "numba":
        return "ray-casting structure"
    if compiled:
        kernels = "kernel" if compiled == 1 else "kernels"
        return f"ray-casting structure, {compiled} {kernels} compiled (once: numba caches them)"
    return "ray-casting structure, kernels loaded from numba's cache"


def _print_summary(summary: ScanSummary) -> None:
    n, pulses, seconds = summary.points, summary.pulses, summary.seconds
    rate = pulses / seconds if seconds > 0 else float("inf")
    out.print(
        f"[bold]{n:,}[/] points from {pulses:,} pulses "
        f"({100.0 * n / max(pulses, 1):.1f} % detected) in {seconds:.2f} s "
        f"({rate / 1e6:.2f} M pulses/s)"
    )
    if n:
        out.print(
            f"range {summary.range_m[0]:.2f}-{summary.range_m[1]:.2f} m, "
            f"intensity {summary.intensity[0]:.1f}-{summary.intensity[1]:.1f}"
        )
    table = Table("label", "points", "share", box=None, pad_edge=False)
    for name, count in summary.named_label_counts().items():
        table.add_row(name, f"{count:,}", f"{100.0 * count / max(n, 1):.1f} %")
    out.print(table)
    for f in summary.files:
        out.print(f"wrote {f}")


@command("lidar-sim scan scenes/farm/survey.yaml -o out/farm.las --set scanner=vlp-16", "scan.md")
def scan(
    survey: Annotated[Path, typer.Argument(help="Survey YAML.")],
    output: Annotated[
        list[Path] | None,
        typer.Option(
            "--output",
            "-o",
            help=f"Output file; format by extension ({', '.join(OUTPUT_SUFFIXES)}). "
            "Repeat for several.",
        ),
    ] = None,
    set_: SetOption = None,
    quiet: QuietOption = False,
) -> None:
    """Scan a survey and write the point cloud."""
    from ..io import check_space, check_writable
    from ..pipeline.simulation import Simulation

    loading = time.perf_counter()
    sim = Simulation.from_file(survey, set_ or [])
    loaded_s = time.perf_counter() - loading
    outputs = list(output) if output else [sim.output_path]
    for path in outputs:
        check_writable(path)  # before hours of work, not after
    check_space(outputs, sim.total_pulses * sim.scanner.returns_per_pulse,
                sim.survey.output.diagnostics)  # fmt: skip
    warn(sim.scene.warnings)
    setup_s = sim.warm_up(outputs)  # the timed scan below is the scan alone
    show_bar = not quiet and sim.total_pulses > sim.survey.chunk_pulses
    with progress_bar("scanning", disable=not show_bar) as bar:
        task = bar.add_task("scan", total=sim.total_pulses)
        summary = sim.write(outputs, progress=lambda done, _: bar.update(task, completed=done))
    if not quiet:
        out.print(
            f"{sim.scanner.name} on {len(sim.scene.objects)} objects "
            f"({sim.scene.triangle_count:,} triangles, loaded in {loaded_s:.2f} s; "
            f"set-up {setup_s:.2f} s: {_setup_note(sim)})"
        )
        _print_summary(summary)


@command("lidar-sim sequence scenes/street/drive.yaml -o out/street --format bin", "motion.md")
def sequence(
    survey: Annotated[Path, typer.Argument(help="Survey YAML (usually with a trajectory).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Output folder.")],
    fmt: Annotated[
        str,
        typer.Option("--format", help="Frame format: {frame_format}."),
    ] = "npz",
    compensate: Annotated[
        bool, typer.Option(help="Remove the motion: points in the frame-start sensor frame.")
    ] = False,
    storage: Annotated[str, typer.Option(help="rosbag2: the bag's storage: {storage}.")] = "mcap",
    point_layout: Annotated[
        str, typer.Option(help="rosbag2: the PointCloud2 point layout: {point_layout}.")
    ] = "lidar-sim",
    set_: SetOption = None,
    quiet: QuietOption = False,
) -> None:
    """Write a survey as frames with ground-truth poses.

    One frame per revolution, in frames/ (rosbag2: one bag in bag/), with poses_tum.txt,
    poses_kitti.txt and times.txt beside them."""
    from ..io import check_writable
    from ..io.pointcloud2 import BagOptions
    from ..pipeline.simulation import Simulation
    from ..sequence import write_sequence

    fmt = choose("--format", fmt.lstrip(".").lower(), "frame_format")
    bag = BagOptions(choose("--storage", storage, "storage"),
                     choose("--point-layout", point_layout, "point_layout"))  # type: ignore[arg-type]  # fmt: skip
    if fmt != "rosbag2":
        check_writable(output / "frames" / f"000000.{fmt}")
    sim = Simulation.from_file(survey, set_ or [])
    warn(sim.scene.warnings)
    sim.warm_up()
    with progress_bar("frames", disable=quiet) as bar:
        task = bar.add_task("sequence", total=sim.total_pulses)
        summary = write_sequence(
            sim,
            output,
            fmt,
            compensate=compensate,
            progress=lambda done, _: bar.update(task, completed=done),
            bag=bag,
        )
    if not quiet:
        out.print(
            f"{summary.frames} frames, {summary.points:,} points from {summary.pulses:,} pulses "
            f"in {summary.seconds:.2f} s -> {output}/"
            + ("bag" if fmt == "rosbag2" else "frames")
            + ", poses_tum.txt, poses_kitti.txt, times.txt"
        )


@command("lidar-sim dataset configs/datasets/demo.yaml -o out/dataset", "datasets.md")
def dataset(
    spec: Annotated[Path, typer.Argument(help="Dataset YAML (e.g. configs/datasets/demo.yaml).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Output folder.")],
    scheduler: Annotated[
        str | None,
        typer.Option(help="local:N for a Dask LocalCluster, or a Dask scheduler's address."),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Local worker processes.")] = None,
    resume: Annotated[bool, typer.Option(help="Skip samples already written.")] = False,
    storage: Annotated[
        str | None, typer.Option(help="rosbag2: the bags' storage, over the spec's: {storage}.")
    ] = None,
    point_layout: Annotated[
        str | None,
        typer.Option(help="rosbag2: the point layout, over the spec's: {point_layout}."),
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Generate a labelled training dataset from a dataset YAML.

    The spec's layout key chooses how the samples are written: {layout}."""
    from ..config import load_dataset_spec
    from ..datasets import run_dataset
    from ..datasets.generate import with_bag_options

    given = {key: choose(f"--{key.replace('_', '-')}", value, key)
             for key, value in (("storage", storage), ("point_layout", point_layout))
             if value is not None}  # fmt: skip
    parsed = with_bag_options(load_dataset_spec(spec), spec, given)  # bad input fails here
    with _samples_bar(parsed.sample_count, quiet) as update:
        manifest = run_dataset(spec, output, scheduler=scheduler, workers=workers,
                               resume=resume, progress=update, rosbag2=given)  # fmt: skip
    for failed in manifest["errors"]:
        err.print(
            f"[red]failed:[/] sequence {failed['sequence']} frame {failed['frame']} "
            f"(seed {failed['seed']}): {escape(failed['error'])}",
            soft_wrap=True,
        )
    if not quiet:
        out.print(
            f"{manifest['frames']} samples ({manifest['points_written']:,} points written) in "
            f"{manifest['seconds']:.1f} s -> {output} ({parsed.layout}), manifest.json"
        )
    if manifest["errors"]:
        raise typer.Exit(1)


@contextmanager
def _samples_bar(total: int, quiet: bool) -> Iterator[Callable[[Any, int], None]]:
    """A sample-count progress bar on stderr with the points written per second; gives the
    ``progress`` callback of :func:`simulator.datasets.run_dataset`."""
    started, points = time.perf_counter(), [0]
    with Progress(
        TextColumn("samples"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=err,
        disable=quiet,
        transient=True,
    ) as bar:
        task = bar.add_task("dataset", total=total, rate="")

        def update(result: Any, done: int) -> None:
            points[0] += result.points
            rate = points[0] / max(time.perf_counter() - started, 1e-9)
            bar.update(task, completed=done, rate=f"{rate / 1e3:,.0f} k points/s")

        yield update
