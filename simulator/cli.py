"""The ``lidar-sim`` command: a thin shell over the Python API.

Bad input (a malformed file, an unknown key, a missing mesh, an unwritable output)
prints one message naming the file, the key and what was expected, and exits with
code 2, without a traceback.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from typer.core import TyperCommand

from .constants import OUTPUT_SUFFIXES
from .errors import ConfigError, SimulatorError

if TYPE_CHECKING:  # the commands import what they use, so that --help answers at once
    from .pipeline import ScanSummary, Simulation

__all__ = ["app", "main"]

#: ``--set dotted.key=value`` (repeatable), as every survey-taking command accepts it.
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="KEY=VALUE", help="Override a survey key: dotted.key=value (YAML value)."
    ),
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar or summary.")]
#: Which frame of a multi-frame capture (an Ouster pcap, a ROS 2 bag), as every command that
#: reads a cloud accepts it.
FrameOption = Annotated[int, typer.Option("--frame", help="Frame of a pcap or bag (from 0).")]
TopicOption = Annotated[
    str | None, typer.Option("--topic", help="A ROS 2 bag's PointCloud2 topic, e.g. /points.")
]
MetaOption = Annotated[
    Path | None,
    typer.Option("--meta", help="An Ouster pcap's metadata JSON (default: found beside it)."),
]

#: The cameras of ``render --view`` (:func:`simulator.viz.render.render_array` draws them).
RENDER_VIEWS = {"sensor": "a chase view from behind the sensor", "bev": "bird's-eye: the top view"}


def _literal(module: str, model: str, field: str) -> tuple[str, ...]:
    """The values a config model's ``Literal`` field accepts."""
    import importlib
    import typing

    cls = getattr(importlib.import_module(f"simulator.config.{module}"), model)
    return typing.get_args(cls.model_fields[field].annotation)


def _color_fields() -> tuple[str, ...]:
    from .viz.colors import COLOR_FIELDS

    return COLOR_FIELDS


def _bench_scenes() -> tuple[str, ...]:
    from .generators import GENERATORS

    return ("bench", *GENERATORS)


#: The values of each option with fixed choices, each taken from the list it is registered
#: in; looked up when a command checks one or a help page names them (so that --help does
#: not import pydantic and numpy).
CHOICES: dict[str, Callable[[], Sequence[str] | Mapping[str, str]]] = {
    "color": _color_fields,
    "view": lambda: RENDER_VIEWS,
    "frame_format": lambda: (*(s.lstrip(".") for s in OUTPUT_SUFFIXES), "rosbag2"),
    "bench_format": lambda: (*(s.lstrip(".") for s in OUTPUT_SUFFIXES), "none"),
    "beam_sampling": lambda: _literal("scanner", "ScannerConfig", "beam_sampling"),
    "bench_scene": _bench_scenes,
    "layout": lambda: _literal("dataset", "DatasetSpec", "layout"),
}


def _listing(choices: Sequence[str] | Mapping[str, str]) -> str:
    """``a, b, c``, each with its description when there is one."""
    if isinstance(choices, Mapping):
        return ", ".join(f"{name} ({what})" for name, what in choices.items())
    return ", ".join(choices)


def _read_formats() -> str:
    from .io.read import READ_FORMATS

    return READ_FORMATS


#: What a help text's ``{key}`` stands for: each option's choices, and the formats a cloud
#: is read from.
HELP_LISTS: dict[str, Callable[[], str]] = {
    **{key: (lambda key=key: _listing(CHOICES[key]())) for key in CHOICES},
    "read_formats": _read_formats,
}


def _choose(option: str, value: str, choices: str) -> str:
    """``value`` when it is one of the ``CHOICES[choices]``, else a :class:`ConfigError`
    naming the option, the value, the valid ones and the closest of them."""
    valid = CHOICES[choices]()
    if value in valid:
        return value
    from .config.base import did_you_mean

    hint = did_you_mean(value, valid)
    raise ConfigError(
        option, "", f"{value!r} is not one of {_listing(valid)}" + (f" ({hint})" if hint else "")
    )


def _for_the_terminal(text: str) -> str:
    """A docstring's reST literals (````x````) as plain quotes: help is read as text."""
    return re.sub(r"``(.+?)``", r"'\1'", text, flags=re.DOTALL)


class _Command(TyperCommand):
    """A command whose help reads as text: reST literals become quotes, and ``{color}``
    (any key of :data:`HELP_LISTS`) names that option's values, looked up when the help is
    shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _for_the_terminal(self.help or "")

    def format_help(self, ctx: Any, formatter: Any) -> None:
        def fill(text: str) -> str:
            return re.sub(
                r"\{(\w+)\}",
                lambda m: HELP_LISTS[m[1]]() if m[1] in HELP_LISTS else m[0],
                text,
            )

        self.help = fill(self.help or "")
        for param in self.params:
            if getattr(param, "help", None):
                param.help = fill(param.help)  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)


def _progress_bar(label: str, disable: bool) -> Progress:
    """A pulse-count progress bar on stderr, gone when done."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} pulses"),
        TimeRemainingColumn(),
        console=_err,
        disable=disable,
        transient=True,
    )


def _version(show: bool) -> None:
    """``--version``: the installed distribution's version."""
    if show:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"lidar-sim {version('lidar-sim')}")
        except PackageNotFoundError:
            typer.echo("lidar-sim (not installed: run from a source tree)")
        raise typer.Exit()


app = typer.Typer(
    name="lidar-sim",
    help="Ray-traced synthetic LiDAR scans with calibrated sensor radiometry.",
    epilog="\b\nExample:\n  lidar-sim scan scenes/farm/survey.yaml -o out/farm.las\n\n"
    "Guide: docs/index.md; each command's own: lidar-sim COMMAND --help.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: it wraps at any width, and a flag shows no value (rich's shows <bool>).
    rich_markup_mode=None,
)
_out = Console()
_err = Console(stderr=True)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """The options before a command: --version (the help is the app's)."""


def _command(example: str, guide: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a command whose help ends with one example and its page of the guide."""
    return app.command(cls=_Command, epilog=f"\b\nExample:\n  {example}\n\nGuide: docs/{guide}")


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
    _out.print(
        f"[bold]{n:,}[/] points from {pulses:,} pulses "
        f"({100.0 * n / max(pulses, 1):.1f} % detected) in {seconds:.2f} s "
        f"({rate / 1e6:.2f} M pulses/s)"
    )
    if n:
        _out.print(
            f"range {summary.range_m[0]:.2f}-{summary.range_m[1]:.2f} m, "
            f"intensity {summary.intensity[0]:.1f}-{summary.intensity[1]:.1f}"
        )
    table = Table("label", "points", "share", box=None, pad_edge=False)
    for name, count in summary.named_label_counts().items():
        table.add_row(name, f"{count:,}", f"{100.0 * count / max(n, 1):.1f} %")
    _out.print(table)
    for f in summary.files:
        _out.print(f"wrote {f}")


@_command("lidar-sim scan scenes/farm/survey.yaml -o out/farm.las --set scanner=vlp-16", "scan.md")
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
    from .io import check_writable
    from .pipeline import Simulation

    loading = time.perf_counter()
    sim = Simulation.from_file(survey, set_ or [])
    loaded_s = time.perf_counter() - loading
    outputs = list(output) if output else [sim.output_path]
    for path in outputs:
        check_writable(path)  # before hours of work, not after
    from .io import check_space

    check_space(outputs, sim.total_pulses * sim.scanner.returns_per_pulse,
                sim.survey.output.diagnostics)  # fmt: skip
    for note in sim.scene.warnings:
        _err.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)
    total = sim.total_pulses
    setup_s = sim.warm_up(outputs)  # the timed scan below is the scan alone
    setup_note = _setup_note(sim)
    show_bar = not quiet and total > sim.survey.chunk_pulses
    with _progress_bar("scanning", disable=not show_bar) as bar:
        task = bar.add_task("scan", total=total)
        summary = sim.write(outputs, progress=lambda done, _: bar.update(task, completed=done))
    if not quiet:
        _out.print(
            f"{sim.scanner.name} on {len(sim.scene.objects)} objects "
            f"({sim.scene.triangle_count:,} triangles, loaded in {loaded_s:.2f} s; "
            f"set-up {setup_s:.2f} s: {setup_note})"
        )
        _print_summary(summary)


@_command("lidar-sim sequence scenes/street/drive.yaml -o out/street --format bin", "motion.md")
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
    set_: SetOption = None,
    quiet: QuietOption = False,
) -> None:
    """Write a survey as frames with ground-truth poses.

    One frame per revolution, in frames/ (rosbag2: one bag in bag/), with poses_tum.txt,
    poses_kitti.txt and times.txt beside them."""
    from .io import check_writable
    from .pipeline import Simulation
    from .sequence import write_sequence

    fmt = _choose("--format", fmt.lstrip(".").lower(), "frame_format")
    if fmt != "rosbag2":
        check_writable(output / "frames" / f"000000.{fmt}")
    sim = Simulation.from_file(survey, set_ or [])
    for note in sim.scene.warnings:
        _err.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)
    sim.warm_up()
    with _progress_bar("frames", disable=quiet) as bar:
        task = bar.add_task("sequence", total=sim.total_pulses)
        summary = write_sequence(
            sim,
            output,
            fmt,
            compensate=compensate,
            progress=lambda done, _: bar.update(task, completed=done),
        )
    if not quiet:
        _out.print(
            f"{summary.frames} frames, {summary.points:,} points from {summary.pulses:,} pulses "
            f"in {summary.seconds:.2f} s -> {output}/"
            + ("bag" if fmt == "rosbag2" else "frames")
            + ", poses_tum.txt, poses_kitti.txt, times.txt"
        )


@_command("lidar-sim dataset configs/datasets/demo.yaml -o out/dataset", "datasets.md")
def dataset(
    spec: Annotated[Path, typer.Argument(help="Dataset YAML (e.g. configs/datasets/demo.yaml).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Output folder.")],
    scheduler: Annotated[
        str | None,
        typer.Option(help="local:N for a Dask LocalCluster, or a Dask scheduler's address."),
    ] = None,
    workers: Annotated[int | None, typer.Option(help="Local worker processes.")] = None,
    resume: Annotated[bool, typer.Option(help="Skip samples already written.")] = False,
    quiet: QuietOption = False,
) -> None:
    """Generate a labelled training dataset from a dataset YAML.

    The spec's layout key chooses how the samples are written: {layout}."""
    from .config import load_dataset_spec
    from .datasets import run_dataset

    parsed = load_dataset_spec(spec)  # bad input fails here, before any work
    total = sum(g.sequences * g.frames for g in parsed.groups)
    started = time.perf_counter()
    progress = Progress(
        TextColumn("samples"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
        console=_err,
        disable=quiet,
        transient=True,
    )
    points = [0]
    with progress as bar:
        task = bar.add_task("dataset", total=total, rate="")

        def update(result, done: int) -> None:  # type: ignore[no-untyped-def]
            points[0] += result.points
            rate = points[0] / max(time.perf_counter() - started, 1e-9)
            bar.update(task, completed=done, rate=f"{rate / 1e3:,.0f} k points/s")

        manifest = run_dataset(
            spec, output, scheduler=scheduler, workers=workers, resume=resume, progress=update
        )
    for err in manifest["errors"]:
        _err.print(
            f"[red]failed:[/] sequence {err['sequence']} frame {err['frame']} "
            f"(seed {err['seed']}): {escape(err['error'])}",
            soft_wrap=True,
        )
    if not quiet:
        _out.print(
            f"{manifest['frames']} samples ({manifest['points_written']:,} points written) in "
            f"{manifest['seconds']:.1f} s -> {output} ({parsed.layout}), manifest.json"
        )
    if manifest["errors"]:
        raise typer.Exit(1)


def _read_options(frame: int, topic: str | None, meta: Path | None):  # type: ignore[no-untyped-def]
    from .io.read import ReadOptions

    return ReadOptions(frame=frame, topic=topic, meta=meta)


def _cloud_of(source: Path, sets: list[str], diagnostics: bool = False, options=None):  # type: ignore[no-untyped-def]
    """A file's or capture's cloud, or a survey's (scanned), with the simulation for a
    survey."""
    from .pipeline import Simulation

    if source.suffix.lower() in (".yaml", ".yml"):
        extra = ["output.diagnostics=true"] if diagnostics else []
        sim = Simulation.from_file(source, [*sets, *extra])
        return sim.run(), sim
    from .io.read import read

    return read(source, options), None


@_command("lidar-sim compare out/farm.las scenes/farm/survey.yaml -o out/compare",
          "real-sensors.md")  # fmt: skip
def compare(
    a: Annotated[Path, typer.Argument(help="A survey YAML to scan, or a cloud: {read_formats}.")],
    b: Annotated[Path, typer.Argument(help="The other one (e.g. the simulated frame).")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Folder for the HTML page and plots.")
    ] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the figures as JSON here.")
    ] = None,
    f_score_threshold_m: Annotated[
        float, typer.Option("--f-score-threshold", help="F-score distance, m.")
    ] = 0.1,
    set_: SetOption = None,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Compare two clouds: Chamfer distance, F-score and more.

    Real against simulated, or any two: Chamfer distance, F-score, returns per ring,
    intensity and range distributions, and pixel by pixel where both share one beam
    grid."""
    import json

    from .compare import compare_clouds, format_compare, write_compare_page
    from .io.atomic import write_atomic

    if not f_score_threshold_m > 0:
        raise ConfigError("--f-score-threshold", "f_score_threshold_m", "expected a number > 0")
    options = _read_options(frame, topic, meta)
    clouds, sims = [], []
    for source in (a, b):
        cloud, sim = _cloud_of(source, set_ or [], diagnostics=True, options=options)
        clouds.append(_with_beam_grid(cloud, sim))
        sims.append(sim)
    renumbered = _rings_as_the_capture(clouds, sims)
    result = compare_clouds(clouds[0], clouds[1], f_score_threshold_m=f_score_threshold_m)
    if renumbered:
        result["rings"]["renumbered"] = renumbered
        _out.print(f"rings: {renumbered}", highlight=False)
    _out.print(format_compare(result), highlight=False)
    if output is not None:
        for path in write_compare_page(clouds[0], clouds[1], result, output, (a.name, b.name)):
            _out.print(f"wrote {path}")
    if json_path is not None:
        write_atomic(json_path, json.dumps(result, indent=2) + "\n")
        _out.print(f"wrote {json_path}")


def _rings_as_the_capture(clouds, sims) -> str | None:  # type: ignore[no-untyped-def]
    """Renumber a scanned survey's rings the way the capture beside it numbers them (by
    elevation, as ROS drivers do; :func:`simulator.compare.match_rings`); what was done."""
    import numpy as np

    from .compare import match_rings

    for i, j in ((1, 0), (0, 1)):
        sim, capture = sims[i], clouds[j]
        if sim is None or sims[j] is not None or sim.scanner.channels is None:
            continue
        ring_of_channel = match_rings(capture, np.asarray(sim.scanner.channels.elevation_deg))
        if ring_of_channel is None or np.array_equal(
            ring_of_channel, np.arange(len(ring_of_channel))
        ):
            return None
        clouds[i].fields["ring"] = ring_of_channel[clouds[i]["ring"]].astype(np.uint16)
        side, other = "AB"[i], "AB"[j]
        return f"{side}'s channels renumbered as {other} numbers its rings (matched by elevation)"
    return None


def _with_beam_grid(cloud, sim):  # type: ignore[no-untyped-def]
    """A scanned survey's cloud with its beam grid (``column`` and ``meta["beam_grid"]``)
    when its scanner spins: firing ``f`` of the revolution is column ``f``, as a capture's
    measurement id is."""
    if sim is None or "pulse_id" not in cloud.names:
        return cloud
    import numpy as np

    from .io.drivers import grid_meta
    from .scanner import SpinningPattern

    pattern = sim.pattern
    if not isinstance(pattern, SpinningPattern):
        return cloud
    firings = int(sim.scanner.firings_per_revolution)
    cloud.fields["column"] = pattern.column(cloud["pulse_id"]).astype(np.uint16)
    fired = sim.total_pulses // pattern.channels
    cloud.meta.update(grid_meta(pattern.channels, firings, fired))
    return cloud


@_command("lidar-sim render scenes/farm/survey.yaml -o out/farm.png --color label", "scan.md")
def render(
    source: Annotated[
        Path, typer.Argument(help="A survey YAML to scan, or a cloud: {read_formats}.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG to write.")],
    color: Annotated[str, typer.Option(help="Colour by: {color}.")] = "intensity",
    view_: Annotated[str, typer.Option("--view", help="Camera: {view}.")] = "sensor",
    width: Annotated[int, typer.Option(help="Image width, px.")] = 1280,
    height: Annotated[int, typer.Option(help="Image height, px.")] = 720,
    point_size: Annotated[float, typer.Option(help="Point size, px.")] = 2.0,
    boxes: Annotated[
        Path | None,
        typer.Option(help="Draw these boxes (a dataset's boxes/FFFFFF.npz) over the cloud."),
    ] = None,
    set_: SetOption = None,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Render a cloud headless (Open3D offscreen) to a PNG."""
    from .datasets.read import read_boxes
    from .viz.render import render as render_png

    _choose("--color", color, "color")
    _choose("--view", view_, "view")
    cloud, _ = _cloud_of(source, set_ or [], options=_read_options(frame, topic, meta))
    _check_color_field(source, cloud, color)
    shown = None
    if boxes is not None:
        if not boxes.is_file():
            raise ConfigError("--boxes", "boxes", f"{boxes}: no such file")
        shown = read_boxes(boxes)
    path = render_png(cloud, output, color, view_, width, height, point_size,
                      title=source.name, boxes=shown)  # fmt: skip
    _out.print(f"wrote {path}")


def _check_color_field(source: Path, cloud, color: str) -> None:  # type: ignore[no-untyped-def]
    """Refuse to colour ``cloud`` by a field it does not hold."""
    from .viz.colors import COLOR_SOURCES

    needed = COLOR_SOURCES.get(color)
    if needed is not None and needed not in cloud.names:
        raise ConfigError(source, "--color", f"{color}: the cloud has no {needed} "
                          f"field (it has {', '.join(cloud.names)})")  # fmt: skip


@_command("lidar-sim rangeimage scenes/farm/survey.yaml -o out/farm_range.png", "scan.md")
def rangeimage(
    source: Annotated[
        Path, typer.Argument(help="A survey YAML to scan, or a cloud: {read_formats}.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG to write.")],
    width: Annotated[int, typer.Option(help="Azimuth columns.")] = 1024,
    npy: Annotated[bool, typer.Option(help="Also write the (6, rings, width) float32 .npy.")] = (
        False
    ),
    set_: SetOption = None,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Write a range image (rings by azimuth) as a PNG.

    Rows are rings and columns azimuth; the picture shows range, intensity and label."""
    from .viz.rangeimage import write_range_image

    cloud, _ = _cloud_of(source, set_ or [], options=_read_options(frame, topic, meta))
    for path in write_range_image(cloud, output, width, npy):
        _out.print(f"wrote {path}")


@_command("lidar-sim view scenes/farm/survey.yaml --color label", "scan.md")
def view(
    source: Annotated[
        Path, typer.Argument(help="A survey YAML to scan, or a cloud: {read_formats}.")
    ],
    color: Annotated[str, typer.Option(help="Colour by: {color}.")] = "intensity",
    screenshot: Annotated[
        Path | None, typer.Option(help="Draw once, save this PNG and close (no interaction).")
    ] = None,
    set_: SetOption = None,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Open a window on a cloud, coloured by one of its fields.

    A survey is scanned first and also shows its scene (key M). A window needs a display:
    without one, draw a picture (--screenshot, or lidar-sim render), or run it under
    xvfb-run."""
    from .viz.viewer import require_display
    from .viz.viewer import view as open_view

    _choose("--color", color, "color")
    if screenshot is None:
        require_display()  # at once, before any scanning
    sets = list(set_ or [])
    if source.suffix.lower() in (".yaml", ".yml"):
        sets.append("output.frame=world")  # so that the scene mesh lines up
    cloud, sim = _cloud_of(source, sets, options=_read_options(frame, topic, meta))
    _check_color_field(source, cloud, color)
    path = open_view(cloud, color, sim.scene if sim is not None else None, screenshot)
    if path is not None:
        _out.print(f"wrote {path}")


@_command("lidar-sim report scenes/farm/survey.yaml -o out/report", "scan.md")
def report(
    source: Annotated[
        Path, typer.Argument(help="A survey YAML (full report), or a cloud: {read_formats}.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write.")],
    set_: SetOption = None,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Plot the physics of a scan and write an HTML page.

    Minnaert, detection, range error and rings: a survey's full report, or a cloud's."""
    import numpy as np

    from .viz.report import write_report

    options = _read_options(frame, topic, meta)
    cloud, sim = _cloud_of(source, set_ or [], diagnostics=True, options=options)
    summary = write_report(cloud, output, simulation=sim, title=source.name)
    for name, m in summary["materials"].items():
        if "fitted_k" not in m:
            continue
        left_out = (
            f", {m['saturated_points']:,} saturated left out" if m["saturated_points"] else ""
        )
        fitted = (
            f"not fitted ({m['fitted_points']} unsaturated points)"
            if np.isnan(m["fitted_k"])
            else f"fitted {m['fitted_k']:.3f} from {m['fitted_points']:,}"
        )
        _out.print(f"{name}: {m['points']:,} points, k {m['minnaert_k']:g}, {fitted}{left_out}")
    _out.print(f"wrote {output / 'report.html'}")


def _pattern_summary(scanner) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """FOV, angular step and rate of a scanner, from one frame of its pattern."""
    import numpy as np

    from .scanner import SpinningPattern, pattern_for

    pattern = pattern_for(scanner)
    # A spinning scanner's elevations are those of one firing of every channel.
    spinning = isinstance(pattern, SpinningPattern)
    n = pattern.channels if spinning else min(pattern.frame_pulses, 400_000)
    sched = pattern.schedule(0, n)
    el = np.degrees(sched.elevation_rad)
    az = np.degrees(sched.azimuth_rad)
    if spinning:
        h_fov, step = "360", f"{360.0 / (scanner.firings_per_revolution or 1):.3f}"
        frame = f"{scanner.rotation_hz:g} Hz"
    else:
        h_fov, step = f"{np.ptp(az):.1f}", "-"
        frame = f"{pattern.frame_pulses / pattern.pulses_per_second:g} s"
    return {
        "channels": str(pattern.channels),
        "v_fov": f"{el.min():+.1f}..{el.max():+.1f}",
        "h_fov": h_fov,
        "step": step,
        "rate": f"{pattern.pulses_per_second:,.0f}",
        "range": f"{scanner.range_min_m:g}-{scanner.range_max_m:g}",
        "frame": frame,
    }


@_command("lidar-sim scanners livox-avia --plot out/avia.png", "scanner.md")
def scanners(
    name: Annotated[
        str | None, typer.Argument(help="One preset (with --plot), or: import FILE [FILE2].")
    ] = None,
    files: Annotated[
        list[Path] | None,
        typer.Argument(
            help="With import: a unit's calibration (Ouster metadata JSON or OSF, "
            "Velodyne calibration YAML, Hesai angle CSV [+ firetime CSV])."
        ),
    ] = None,
    plot: Annotated[
        Path | None, typer.Option(help="Draw NAME's pattern (one frame) to this PNG.")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="With import: the scanner YAML.")
    ] = None,
    preset: Annotated[
        str | None,
        typer.Option(help="With import: the preset whose radiometry the unit takes."),
    ] = None,
) -> None:
    """List the scanner presets, draw one, or import a unit's own.

    With NAME --plot PNG, draw one preset's pattern; with ``import FILE -o scanner.yaml``,
    make a scanner of one unit's own calibration."""
    from .config import load_scanner, scanner_presets

    if name == "import":
        from .config.vendor import import_scanner, write_scanner_yaml

        if not files:
            raise ConfigError("scanners import", "FILE", "expected a calibration file")
        if output is None:
            raise ConfigError("scanners import", "--output", "expected -o scanner.yaml")
        mapping, header = import_scanner(list(files), preset)
        path = write_scanner_yaml(mapping, header, output)
        config = load_scanner(path)
        _out.print(
            f"wrote {path} ({config.name}: {config.channels.count if config.channels else 0} "
            f"channels, {config.firings_per_revolution or 0} firings a revolution)"
        )
        return
    if files:
        raise ConfigError("scanners", "FILE", f"unexpected {files[0]}; did you mean "
                          "'lidar-sim scanners import FILE'?")  # fmt: skip
    presets = scanner_presets()
    if name is not None:
        if name not in presets:
            from .config.base import did_you_mean

            hint = did_you_mean(name, presets)
            raise SimulatorError(
                f"unknown scanner preset {name!r}{f' ({hint})' if hint else ''}; "
                f"choose one of {', '.join(presets)}"
            )
        if plot is not None:
            from .viz.pattern import plot_pattern

            _out.print(f"wrote {plot_pattern(load_scanner(presets[name]), plot)}")
            return
        presets = {name: presets[name]}
    table = Table(box=box.SIMPLE_HEAD)
    columns = ("name", "ch", "elevation deg", "azimuth deg", "az step", "points/s", "range m",
               "frame")  # fmt: skip
    for column in columns:
        table.add_column(column, no_wrap=True)
    for preset, path in presets.items():
        f = _pattern_summary(load_scanner(path))
        table.add_row(preset, f["channels"], f["v_fov"], f["h_fov"], f["step"], f["rate"],
                      f["range"], f["frame"])  # fmt: skip
    Console(width=max(_out.width, 110)).print(table)


@_command("lidar-sim validate scenes/farm/survey.yaml", "scene.md")
def validate(
    file: Annotated[
        Path, typer.Argument(help="A survey, scanner, scene, material or dataset file.")
    ],
) -> None:
    """Check a survey, scanner, scene, material or dataset file.

    A survey is checked in depth: its scanner (with its overrides) and its scene too."""
    from .validate import validate_file

    _out.print(f"{file}: ok ({validate_file(file)})")


@_command("lidar-sim calibrate out/farm.las --scanner rs-helios-5515 -o out/farm.yaml",
          "calibrate.md")  # fmt: skip
def calibrate(
    scan: Annotated[
        Path,
        typer.Argument(help="A real scan: {read_formats}."),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The material library YAML to write.")
    ],
    scanner: Annotated[
        str, typer.Option(help="The scanner that took it: a preset name or a YAML.")
    ] = "rs-helios-5515",
    report: Annotated[
        Path | None, typer.Option(help="Write the report (index.html and plots) here.")
    ] = None,
    labels: Annotated[
        bool, typer.Option("--labels", help="Group points by the file's labels, not planes.")
    ] = False,
    scene: Annotated[
        Path | None, typer.Option(help="A scene YAML aligned with the scan, for its surfaces.")
    ] = None,
    origin: Annotated[str, typer.Option(help="Sensor origin in the scan's frame, x,y,z m.")] = (
        "0,0,0"
    ),
    max_planes: Annotated[int, typer.Option(help="Planes to look for.")] = 8,
    intensity_divisor: Annotated[
        float, typer.Option(help="Divide the file's intensities by this (256: 16-bit LAS).")
    ] = 1.0,
    surface: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=A,B", help="Group and name surfaces: NAME=found1,found2 (repeatable)."
        ),
    ] = None,
    ego_box: Annotated[
        str | None,
        typer.Option(help="The ego vehicle's box, xmin,ymin,zmin,xmax,ymax,zmax m (scan frame)."),
    ] = None,
    twin: Annotated[
        Path | None,
        typer.Option(
            help="Re-scan what was found (its surfaces, fitted) here and compare it "
            "with the scan beam by beam: compare.json, twin.json, index.html."
        ),
    ] = None,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Fit the per-hit model and sensor response to a real scan.

    The per-hit model (reflectance, Minnaert k, roughness, micro-slope, threshold) and the
    sensor's intensity response (per-ring gains, range response); writes a material
    library and scanner overrides a survey uses as they are."""
    from .calibrate import calibrate as fit
    from .calibrate.report import write_report

    try:
        xyz = [float(v) for v in origin.split(",")]
        if len(xyz) != 3:
            raise ValueError
    except ValueError:
        raise ConfigError(
            "--origin", "origin", f"expected x,y,z in metres, got {origin!r}"
        ) from None
    box: tuple[float, float, float, float, float, float] | None = None
    if ego_box is not None:
        try:
            v = [float(x) for x in ego_box.split(",")]
            if len(v) != 6 or not all(lo <= hi for lo, hi in zip(v[:3], v[3:], strict=True)):
                raise ValueError
        except ValueError:
            raise ConfigError(
                "--ego-box", "ego_box",
                f"expected xmin,ymin,zmin,xmax,ymax,zmax in metres, min <= max; got {ego_box!r}",
            ) from None  # fmt: skip
        box = (v[0], v[1], v[2], v[3], v[4], v[5])
    if not intensity_divisor > 0:
        raise ConfigError("--intensity-divisor", "intensity_divisor", "expected a number > 0")
    names: dict[str, list[str]] = {}
    for item in surface or []:
        new, _, old = item.partition("=")
        if not new or not old:
            raise ConfigError("--surface", "surface", f"expected NAME=a,b; got {item!r}")
        names[new.strip()] = [o.strip() for o in old.split(",") if o.strip()]
    result = fit(scan, scanner, origin_m=(xyz[0], xyz[1], xyz[2]), labels=labels, scene=scene,
                 max_planes=max_planes, intensity_divisor=intensity_divisor,
                 names=names, read_options=_read_options(frame, topic, meta),
                 ego_box_m=box)  # fmt: skip
    if not result.surfaces:
        raise ConfigError(scan, "points", "no surface with enough points was found")
    written = result.write(output)
    for path in written:
        _out.print(f"wrote {path}")
    for note in result.notes:
        _out.print(f"note: {note}")
    if result.response is not None and result.response.gain_fitted.any():
        r = result.response
        gains = " ".join(f"{g:.3f}" if ok else "-" for g, ok in zip(r.gain, r.gain_fitted,
                                                                    strict=True))  # fmt: skip
        _out.print(f"ring gains (median 1; -: not fitted): {gains}")
    for s in result.surfaces:
        vals = {**s.intensity_fit.values, **s.range_fit.values, **s.slope_fit.values,
                **s.detection_fit.values}  # fmt: skip
        text = ", ".join(f"{k} {v:.4g} +- {e:.2g}" for k, (v, e) in vals.items())
        _out.print(f"{s.surface.name} ({len(s.cos):,} points): {text}")
        for verdict in s.verdicts:
            _out.print(f"  note: {verdict}")
    if report is not None:
        for path in write_report(result, report):
            _out.print(f"wrote {path}")
    if twin is not None:
        import yaml

        from .twin import run_twin

        overrides = yaml.safe_load(written[1].read_text()) or {}
        assert result.cloud is not None  # calibrate keeps the scan it read
        made = run_twin(result, result.cloud, twin, scanner, overrides)
        for name, f in made.surfaces.items():
            share, level = f["share_within_0.05"], f["intensity_within_15pct"]
            _out.print(
                f"twin {name}: {f['rings_judged']} rings judged; return share within 0.05 on "
                + ("-" if share is None else f"{100 * share:.0f} %")
                + ", median intensity within 15 % on "
                + ("-" if level is None else f"{100 * level:.0f} %")
            )
            for verdict in f["verdicts"]:
                _out.print(f"  misses: {verdict}")
        for path in made.files:
            _out.print(f"wrote {path}")


@_command("lidar-sim reconstruct capture.pcap --frames 0:10 --hold-out 5 -o out/place",
          "reconstruct.md")  # fmt: skip
def reconstruct(
    captures: Annotated[
        list[Path],
        typer.Argument(help="A capture (pcap, OSF, PCD, .bin, bag...), or several in order."),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The folder to write.")],
    scanner: Annotated[
        str | None,
        typer.Option(help="The unit: a preset or a YAML (default: the capture's own calibration)."),
    ] = None,
    poses: Annotated[
        Path | None, typer.Option(help="A KITTI poses file, a line per frame of the capture.")
    ] = None,
    frames: Annotated[
        str | None, typer.Option(help="The frames used, A:B (from A to B - 1; default all).")
    ] = None,
    hold_out: Annotated[
        str | None,
        typer.Option(help="Frames left out of the scene and scanned from their poses: N[,N...]."),
    ] = None,
    rescan: Annotated[
        bool, typer.Option("--rescan", help="Scan every scene frame back from its own pose.")
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Turn a real capture into a scene any survey can scan.

    Meshes with a reflectance per face and a survey per frame on its beam grid, scored the
    way the neural LiDAR simulators are scored: held-out frames and rescans against the
    real frames, beside the reprojection baseline."""
    from .reconstruct import ReconstructOptions, format_summary
    from .reconstruct import reconstruct as run

    options = ReconstructOptions(
        scanner=scanner,
        poses=poses,
        frames=_frame_range(frames),
        hold_out=_frame_list(hold_out),
        rescan=rescan,
    )
    result = run(captures, output, options, report=None if quiet else _out.print)
    if not quiet:
        _out.print(format_summary(result.summary), highlight=False, soft_wrap=True)
        _out.print(f"wrote {output}/summary.json, scene.yaml and {len(result.files)} files")


def _frame_range(text: str | None) -> tuple[int, int] | None:
    """``A:B`` as two ints."""
    if text is None:
        return None
    try:
        a, b = (int(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError("--frames", "", f"{text!r}: expected A:B, e.g. 0:10") from None
    return a, b


def _frame_list(text: str | None) -> tuple[int, ...]:
    """``N[,N...]`` as ints."""
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(
            "--hold-out", "", f"{text!r}: expected frame numbers N[,N...], e.g. 1,5"
        ) from None


@_command("lidar-sim bench --revolutions 10 --format none", "performance.md")
def bench(
    revolutions: Annotated[float, typer.Option(help="Survey length in revolutions.")] = 50.0,
    duration: Annotated[
        float | None, typer.Option("--duration", help="Survey length in seconds (overrides).")
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="Output written during the run: {bench_format}.")
    ] = "npz",
    chunk_pulses: Annotated[int, typer.Option(help="Pulses per chunk.")] = 2**18,
    scene_scale: Annotated[
        float, typer.Option(help="Scene size: 1 is ~1.15 M triangles, 10 is ~10 M.")
    ] = 1.0,
    compare_trimesh: Annotated[
        bool, typer.Option(help="Also cast with trimesh + embreex (pip install embreex).")
    ] = False,
    numpy: Annotated[bool, typer.Option(help="Use the numpy specification, not numba.")] = False,
    beam_samples: Annotated[int, typer.Option(help="Sub-rays per pulse: 1, 7, 19, ...")] = 1,
    beam_sampling: Annotated[
        str, typer.Option(help="Footprint sampling: {beam_sampling} (full: every sub-ray).")
    ] = "full",
    moving: Annotated[bool, typer.Option(help="Drive the sensor at 5 m/s.")] = False,
    bare_script: Annotated[
        bool, typer.Option(help="Also time benchmarks/bare_cast.py on the same rays.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
    load: Annotated[
        int,
        typer.Option(help="Instead: load a mesh file of this many triangles (e.g. 10000000)."),
    ] = 0,
    sequence: Annotated[
        bool, typer.Option("--sequence", help="Instead: frames/s of a moving sequence (bin).")
    ] = False,
    dataset_workers: Annotated[
        Path | None,
        typer.Option(
            help="Instead: run this dataset spec with 1 and 2 workers and on a two-worker "
            "Dask cluster (scaling)."
        ),
    ] = None,
    weather: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KIND=VALUE",
            help="Weather: fog=MOR_M, dust=MOR_M, rain=MM_H or snow=MM_H (repeatable).",
        ),
    ] = None,
    scene: Annotated[
        str, typer.Option(help="Scene: {bench_scene} (bench: ~1 M triangles; else generated).")
    ] = "bench",
    seed: Annotated[int, typer.Option(help="Scene seed.")] = 0,
) -> None:
    """Benchmark the pipeline against the bare ray cast.

    On a ~1 M-triangle scene by default; --sequence, --load and --dataset-workers time
    something else instead."""
    import json
    import subprocess
    import tempfile

    from .bench import format_load, format_result, run_bench, write_load_mesh

    output_format = _choose("--format", output_format.lstrip("."), "bench_format")
    _choose("--beam-sampling", beam_sampling, "beam_sampling")
    _choose("--scene", scene, "bench_scene")

    if sequence:
        from .bench import format_sequence, run_sequence_bench

        figures = run_sequence_bench(revolutions if revolutions != 50.0 else 20.0, scene_scale)
        typer.echo(json.dumps(figures) if as_json else format_sequence(figures))
        return
    if dataset_workers is not None:
        from .bench import format_dataset_scaling, run_dataset_scaling

        figures = run_dataset_scaling(dataset_workers, cluster_workers=2)
        typer.echo(json.dumps(figures) if as_json else format_dataset_scaling(figures))
        return
    if load:
        with tempfile.TemporaryDirectory() as tmp:
            mesh = Path(tmp) / "terrain.ply"
            write_load_mesh(mesh, load)
            # A fresh process, so that its peak memory is the load's alone.
            code = (
                "import json, sys, simulator.bench as b; "
                "print(json.dumps(b.run_load_bench(sys.argv[1])))"
            )
            res = subprocess.run(
                [sys.executable, "-c", code, str(mesh)], capture_output=True, text=True
            )
        if res.returncode != 0:
            typer.echo(res.stderr, err=True)
            raise typer.Exit(res.returncode)
        figures = json.loads(res.stdout.strip().splitlines()[-1])
        typer.echo(json.dumps(figures, indent=2) if as_json else format_load(figures))
        return

    result = run_bench(
        revolutions,
        duration_s=duration,
        output_format=output_format,
        chunk_pulses=chunk_pulses,
        scene_scale=scene_scale,
        compare_trimesh=compare_trimesh,
        use_fast=not numpy,
        beam_samples=beam_samples,
        beam_sampling=beam_sampling,
        moving=moving,
        bare_script=bare_script,
        weather=_weather_option(weather or []),
        scene_name=scene,
        seed=seed,
    )
    typer.echo(result.to_json() if as_json else format_result(result))


def _weather_option(items: list[str]) -> dict[str, dict[str, float]]:
    """``["fog=50", "rain=25"]`` as a ``weather:`` section."""
    keys = {"fog": "visibility_m", "dust": "visibility_m", "rain": "rate_mm_h",
            "snow": "rate_mm_h"}  # fmt: skip
    out: dict[str, dict[str, float]] = {}
    for item in items:
        kind, _, value = item.partition("=")
        kind = kind.strip()
        if kind not in keys:
            raise ConfigError("--weather", kind, f"expected one of {', '.join(keys)}")
        try:
            out[kind] = {keys[kind]: float(value)}
        except ValueError:
            raise ConfigError("--weather", item, "expected KIND=NUMBER, e.g. fog=50") from None
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``lidar-sim``: run the app, turning input errors into exit code 2."""
    try:
        app(args=argv)
    except SimulatorError as exc:
        _err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        _err.print("interrupted; nothing was written")
        sys.exit(130)


if __name__ == "__main__":
    main()
