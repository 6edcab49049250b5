"""The ``lidar-sim`` command: a thin shell over the Python API.

This package holds the app, its ``--version`` and :func:`main`, and registers the commands,
one module a command or a small family of them: :mod:`.scan` (scan, sequence, dataset),
:mod:`.clouds` (compare, render, rangeimage, view, report), :mod:`.scanners` (scanners,
validate), :mod:`.calibrate`, :mod:`.reconstruct` and :mod:`.bench`. Each command parses its
input, calls one library function and prints; what they share (options, the lists of
choices, the help's form, the consoles) is in :mod:`.common`.

Bad input (a malformed file, an unknown key, a missing mesh, an unwritable output)
prints one message naming the file, the key and what was expected, and exits with
code 2, without a traceback.

Kept for compatibility (the package was one module, ``simulator/cli.py``): ``app`` and
``main`` (the entry point ``simulator.cli:main``), and ``CHOICES`` and ``HELP_LISTS``
(from :mod:`.common`), importable from ``simulator.cli`` as before; ``python -m
simulator.cli`` runs :func:`main` (``__main__.py``).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.markup import escape

from ..errors import SimulatorError
from . import bench, calibrate, clouds, reconstruct, scan, scanners
from .common import CHOICES, HELP_LISTS, HelpCommand, epilog, err

__all__ = ["CHOICES", "COMMANDS", "HELP_LISTS", "app", "main"]


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


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """The options before a command: --version (the help is the app's)."""


#: Every command, in the order the help lists them.
COMMANDS = (
    scan.scan,
    scan.sequence,
    scan.dataset,
    clouds.compare,
    clouds.render,
    clouds.rangeimage,
    clouds.view,
    clouds.report,
    scanners.scanners,
    scanners.validate,
    calibrate.calibrate,
    reconstruct.reconstruct,
    bench.bench,
)
for _command in COMMANDS:
    app.command(cls=HelpCommand, epilog=epilog(_command))(_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``lidar-sim``: run the app, turning input errors into exit code 2."""
    try:
        app(args=argv)
    except SimulatorError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted; nothing was written")
        sys.exit(130)
