"""``lidar-sim compare``, ``render``, ``rangeimage``, ``view`` and ``report``: a cloud (a
file, a capture, or a survey scanned: :func:`simulator.sources.cloud_of`) measured or
drawn."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from .common import (
    FrameOption,
    MetaOption,
    SetOption,
    SourceArgument,
    TopicOption,
    choose,
    command,
    out,
    read_options,
)

__all__ = ["compare", "rangeimage", "render", "report", "view"]

ColorOption = Annotated[str, typer.Option(help="Colour by: {color}.")]


@command("lidar-sim compare out/farm.las scenes/farm/survey.yaml -o out/compare",
         "real-sensors.md")  # fmt: skip
def compare(
    a: SourceArgument,
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

    from ..compare import format_compare
    from ..io.atomic import write_atomic
    from ..sources import compare_sources
    from ..viz.compare import write_compare_page

    if not f_score_threshold_m > 0:
        raise ConfigError("--f-score-threshold", "f_score_threshold_m", "expected a number > 0")
    options = read_options(frame, topic, meta)
    cloud_a, cloud_b, result = compare_sources(
        a, b, set_ or [], options=options, f_score_threshold_m=f_score_threshold_m
    )
    if "renumbered" in result["rings"]:
        out.print(f"rings: {result['rings']['renumbered']}", highlight=False)
    out.print(format_compare(result), highlight=False)
    if output is not None:
        for path in write_compare_page(cloud_a, cloud_b, result, output, (a.name, b.name)):
            out.print(f"wrote {path}")
    if json_path is not None:
        write_atomic(json_path, json.dumps(result, indent=2) + "\n")
        out.print(f"wrote {json_path}")


@command("lidar-sim render scenes/farm/survey.yaml -o out/farm.png --color label", "scan.md")
def render(
    source: SourceArgument,
    output: Annotated[Path, typer.Option("--output", "-o", help="PNG to write.")],
    color: ColorOption = "intensity",
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
    from ..datasets.read import read_boxes
    from ..sources import cloud_of
    from ..viz.colors import check_color_field
    from ..viz.render import render as render_png

    choose("--color", color, "color")
    choose("--view", view_, "view")
    cloud, _ = cloud_of(source, set_ or [], options=read_options(frame, topic, meta))
    check_color_field(cloud, color, source)
    shown = None
    if boxes is not None:
        if not boxes.is_file():
            raise ConfigError("--boxes", "boxes", f"{boxes}: no such file")
        shown = read_boxes(boxes)
    path = render_png(cloud, output, color, view_, width, height, point_size,
                      title=source.name, boxes=shown)  # fmt: skip
    out.print(f"wrote {path}")


@command("lidar-sim rangeimage scenes/farm/survey.yaml -o out/farm_range.png", "scan.md")
def rangeimage(
    source: SourceArgument,
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
    from ..sources import cloud_of
    from ..viz.rangeimage import write_range_image

    cloud, _ = cloud_of(source, set_ or [], options=read_options(frame, topic, meta))
    for path in write_range_image(cloud, output, width, npy):
        out.print(f"wrote {path}")


@command("lidar-sim view scenes/farm/survey.yaml --color label", "scan.md")
def view(
    source: SourceArgument,
    color: ColorOption = "intensity",
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
    from ..sources import cloud_of
    from ..viz.colors import check_color_field
    from ..viz.viewer import require_display
    from ..viz.viewer import view as open_view

    choose("--color", color, "color")
    if screenshot is None:
        require_display()  # at once, before any scanning
    # A survey is scanned in the world frame, so that the scene mesh lines up.
    sets = [*(set_ or []), "output.frame=world"]
    cloud, sim = cloud_of(source, sets, options=read_options(frame, topic, meta))
    check_color_field(cloud, color, source)
    path = open_view(cloud, color, sim.scene if sim is not None else None, screenshot)
    if path is not None:
        out.print(f"wrote {path}")


@command("lidar-sim report scenes/farm/survey.yaml -o out/report", "scan.md")
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
    from ..sources import cloud_of
    from ..viz.report import material_lines, write_report

    options = read_options(frame, topic, meta)
    cloud, sim = cloud_of(source, set_ or [], diagnostics=True, options=options)
    for line in material_lines(write_report(cloud, output, simulation=sim, title=source.name)):
        out.print(line)
    out.print(f"wrote {output / 'report.html'}")
