"""``lidar-sim reconstruct``: a real capture as a scene any survey can scan
(:func:`simulator.reconstruct.reconstruct`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from .common import QuietOption, command, out

__all__ = ["reconstruct"]


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


@command("lidar-sim reconstruct capture.pcap --frames 0:10 --hold-out 5 -o out/place",
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
    no_ego: Annotated[
        bool,
        typer.Option(
            "--no-ego",
            help="Estimate no vehicle under the sensor (a capture whose beams nothing blocks).",
        ),
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Turn a real capture into a scene any survey can scan.

    Meshes with a reflectance per face and a survey per frame on its beam grid, scored the
    way the neural LiDAR simulators are scored: held-out frames and rescans against the
    real frames, beside the reprojection baseline."""
    from ..reconstruct import ReconstructOptions, format_summary
    from ..reconstruct import reconstruct as run
    from ..reconstruct.ego import EgoParams

    options = ReconstructOptions(
        scanner=scanner,
        poses=poses,
        frames=_frame_range(frames),
        hold_out=_frame_list(hold_out),
        rescan=rescan,
        ego=None if no_ego else EgoParams(),
    )
    result = run(captures, output, options, report=None if quiet else out.print)
    if not quiet:
        out.print(format_summary(result.summary), highlight=False, soft_wrap=True)
        out.print(f"wrote {output}/summary.json, scene.yaml and {len(result.files)} files")
