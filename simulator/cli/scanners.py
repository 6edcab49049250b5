"""``lidar-sim scanners`` (the presets listed or drawn, a unit's calibration imported) and
``lidar-sim validate`` (a file checked in depth)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError, SimulatorError
from .common import command, out

__all__ = ["scanners", "validate"]

#: The columns of the presets' table (:meth:`simulator.sensor.scanner.PatternSummary.cells`).
_COLUMNS = ("name", "ch", "elevation deg", "azimuth deg", "az step", "points/s", "range m",
            "frame")  # fmt: skip


def _import(files: list[Path], output: Path | None, preset: str | None) -> None:
    """``scanners import FILE... -o scanner.yaml``: a scanner of one unit's calibration."""
    from ..config.vendor import write_imported_scanner

    if not files:
        raise ConfigError("scanners import", "FILE", "expected a calibration file")
    if output is None:
        raise ConfigError("scanners import", "--output", "expected -o scanner.yaml")
    config = write_imported_scanner(files, output, preset)
    out.print(
        f"wrote {output} ({config.name}: {config.channels.count if config.channels else 0} "
        f"channels, {config.firings_per_revolution or 0} firings a revolution)"
    )


def _preset(name: str, presets: dict[str, Path]) -> Path:
    """The preset ``name``'s file, or an error naming the closest and every preset."""
    if name not in presets:
        from ..config.base import did_you_mean

        hint = did_you_mean(name, presets)
        raise SimulatorError(
            f"unknown scanner preset {name!r}{f' ({hint})' if hint else ''}; "
            f"choose one of {', '.join(presets)}"
        )
    return presets[name]


@command("lidar-sim scanners livox-avia --plot out/avia.png", "scanner.md")
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
    from ..config import load_scanner, scanner_presets
    from ..sensor.scanner import pattern_summary

    if name == "import":
        _import(list(files or []), output, preset)
        return
    if files:
        raise ConfigError("scanners", "FILE", f"unexpected {files[0]}; did you mean "
                          "'lidar-sim scanners import FILE'?")  # fmt: skip
    presets = scanner_presets()
    if name is not None:
        if plot is not None:
            from ..viz.pattern import plot_pattern

            out.print(f"wrote {plot_pattern(load_scanner(_preset(name, presets)), plot)}")
            return
        presets = {name: _preset(name, presets)}
    table = Table(box=box.SIMPLE_HEAD)
    for column in _COLUMNS:
        table.add_column(column, no_wrap=True)
    for listed, path in presets.items():
        table.add_row(listed, *pattern_summary(load_scanner(path)).cells())
    Console(width=max(out.width, 110)).print(table)


@command("lidar-sim validate scenes/farm/survey.yaml", "scene.md")
def validate(
    file: Annotated[
        Path, typer.Argument(help="A survey, scanner, scene, material or dataset file.")
    ],
) -> None:
    """Check a survey, scanner, scene, material or dataset file.

    A survey is checked in depth: its scanner (with its overrides) and its scene too."""
    from ..validate import validate_file

    out.print(f"{file}: ok ({validate_file(file)})")
