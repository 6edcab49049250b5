"""``lidar-sim calibrate``: the per-hit model and the sensor's response fitted to a real scan
(:func:`simulator.calibrate.outputs.calibrate_to_files`), and, if asked, its twin re-scanned
(:func:`simulator.reconstruct.twin.twin_of`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from .common import FrameOption, MetaOption, TopicOption, command, out, read_options

__all__ = ["calibrate"]

# The options, declared here so that the command reads as what it does.
ScanArgument = Annotated[Path, typer.Argument(help="A real scan: {read_formats}.")]
OutputOption = Annotated[
    Path, typer.Option("--output", "-o", help="The material library YAML to write.")
]
ScannerOption = Annotated[
    str, typer.Option(help="The scanner that took it: a preset name or a YAML.")
]
ReportOption = Annotated[
    Path | None, typer.Option(help="Write the report (index.html and plots) here.")
]
LabelsOption = Annotated[
    bool, typer.Option("--labels", help="Group points by the file's labels, not planes.")
]
SceneOption = Annotated[
    Path | None, typer.Option(help="A scene YAML aligned with the scan, for its surfaces.")
]
OriginOption = Annotated[str, typer.Option(help="Sensor origin in the scan's frame, x,y,z m.")]
MaxPlanesOption = Annotated[int, typer.Option(help="Planes to look for.")]
DivisorOption = Annotated[
    float, typer.Option(help="Divide the file's intensities by this (256: 16-bit LAS).")
]
SurfaceOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="NAME=A,B", help="Group and name surfaces: NAME=found1,found2 (repeatable)."
    ),
]
EgoBoxOption = Annotated[
    str | None,
    typer.Option(help="The ego vehicle's box, xmin,ymin,zmin,xmax,ymax,zmax m (scan frame)."),
]
TwinOption = Annotated[
    Path | None,
    typer.Option(
        help="Re-scan what was found (its surfaces, fitted) here and compare it "
        "with the scan beam by beam: compare.json, twin.json, index.html."
    ),
]

ReceiverOption = Annotated[
    bool,
    typer.Option(
        "--receiver/--no-receiver",
        help="With --twin: fit the receiver's laws (near overlap, speckle, soft threshold) "
        "beam by beam, write them into the scanner overrides, and scan the twin with them.",
    ),
]


def _origin(text: str) -> tuple[float, float, float]:
    """``--origin x,y,z`` in metres."""
    try:
        xyz = [float(v) for v in text.split(",")]
        if len(xyz) != 3:
            raise ValueError
    except ValueError:
        raise ConfigError("--origin", "origin", f"expected x,y,z in metres, got {text!r}") from None
    return xyz[0], xyz[1], xyz[2]


def _ego_box(text: str | None) -> tuple[float, float, float, float, float, float] | None:
    """``--ego-box xmin,ymin,zmin,xmax,ymax,zmax`` in metres, each min at most its max."""
    if text is None:
        return None
    try:
        v = [float(x) for x in text.split(",")]
        if len(v) != 6 or not all(lo <= hi for lo, hi in zip(v[:3], v[3:], strict=True)):
            raise ValueError
    except ValueError:
        raise ConfigError(
            "--ego-box", "ego_box",
            f"expected xmin,ymin,zmin,xmax,ymax,zmax in metres, min <= max; got {text!r}",
        ) from None  # fmt: skip
    return v[0], v[1], v[2], v[3], v[4], v[5]


def _surface_names(items: list[str]) -> dict[str, list[str]]:
    """``--surface NAME=a,b`` (repeated) as ``{NAME: [a, b]}``."""
    names: dict[str, list[str]] = {}
    for item in items:
        new, _, old = item.partition("=")
        if not new or not old:
            raise ConfigError("--surface", "surface", f"expected NAME=a,b; got {item!r}")
        names[new.strip()] = [o.strip() for o in old.split(",") if o.strip()]
    return names


@command("lidar-sim calibrate out/farm.las --scanner rs-helios-5515 -o out/farm.yaml",
         "calibrate.md")  # fmt: skip
def calibrate(
    scan: ScanArgument,
    output: OutputOption,
    scanner: ScannerOption = "rs-helios-5515",
    report: ReportOption = None,
    labels: LabelsOption = False,
    scene: SceneOption = None,
    origin: OriginOption = "0,0,0",
    max_planes: MaxPlanesOption = 8,
    intensity_divisor: DivisorOption = 1.0,
    surface: SurfaceOption = None,
    ego_box: EgoBoxOption = None,
    twin: TwinOption = None,
    receiver: ReceiverOption = False,
    frame: FrameOption = 0,
    topic: TopicOption = None,
    meta: MetaOption = None,
) -> None:
    """Fit the per-hit model and sensor response to a real scan.

    The per-hit model (reflectance, Minnaert k, roughness, micro-slope, threshold) and the
    sensor's intensity response (per-ring gains, range response); writes a material
    library and scanner overrides a survey uses as they are."""
    from ..calibrate.outputs import calibrate_to_files

    origin_m, ego_box_m = _origin(origin), _ego_box(ego_box)
    if not intensity_divisor > 0:
        raise ConfigError("--intensity-divisor", "intensity_divisor", "expected a number > 0")
    names = _surface_names(surface or [])
    calibrated = calibrate_to_files(
        scan, output, scanner, report=report, origin_m=origin_m, labels=labels, scene=scene,
        max_planes=max_planes, intensity_divisor=intensity_divisor, names=names,
        read_options=read_options(frame, topic, meta), ego_box_m=ego_box_m,
    )  # fmt: skip
    for line in calibrated.lines():
        out.print(line)
    if twin is not None:  # above the calibration: the twin scans it (simulator/reconstruct/twin.py)
        from ..reconstruct.twin import twin_of

        for line in twin_of(calibrated, twin, scanner, receiver=receiver).lines():
            out.print(line)
