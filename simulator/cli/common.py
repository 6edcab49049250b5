"""What the commands share: the options several take, the lists of fixed choices their
help names and their checks refuse, the help's form, the consoles and the progress bar.

Nothing here imports numpy, pydantic or the pipeline at start-up: ``lidar-sim --help``
answers at once. A list is looked up when a help page names it or a command checks one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from typer.core import TyperCommand

from ..constants import OUTPUT_SUFFIXES
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..io.read import ReadOptions

__all__ = [
    "CHOICES",
    "HELP_LISTS",
    "RENDER_VIEWS",
    "FrameOption",
    "HelpCommand",
    "MetaOption",
    "QuietOption",
    "SetOption",
    "SourceArgument",
    "TopicOption",
    "choose",
    "command",
    "epilog",
    "err",
    "listing",
    "out",
    "progress_bar",
    "read_options",
    "warn",
]

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
#: What a command that draws or measures one cloud takes (:func:`simulator.sources.cloud_of`).
SourceArgument = Annotated[
    Path, typer.Argument(help="A survey YAML to scan, or a cloud: {read_formats}.")
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
    from ..viz.colors import COLOR_FIELDS

    return COLOR_FIELDS


def _point_layouts() -> tuple[str, ...]:
    from ..config.rosbag import POINT_LAYOUTS

    return POINT_LAYOUTS


def _bag_storages() -> tuple[str, ...]:
    from ..config.rosbag import BAG_STORAGES

    return BAG_STORAGES


def _bench_scenes() -> tuple[str, ...]:
    from ..generators import GENERATORS

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
    "storage": _bag_storages,
    "point_layout": _point_layouts,
}


def listing(choices: Sequence[str] | Mapping[str, str]) -> str:
    """``a, b, c``, each with its description when there is one."""
    if isinstance(choices, Mapping):
        return ", ".join(f"{name} ({what})" for name, what in choices.items())
    return ", ".join(choices)


def _read_formats() -> str:
    from ..io.read import READ_FORMATS

    return READ_FORMATS


#: What a help text's ``{key}`` stands for: each option's choices, and the formats a cloud
#: is read from.
HELP_LISTS: dict[str, Callable[[], str]] = {
    **{key: (lambda key=key: listing(CHOICES[key]())) for key in CHOICES},
    "read_formats": _read_formats,
}


def choose(option: str, value: str, choices: str) -> str:
    """``value`` when it is one of the ``CHOICES[choices]``, else a :class:`ConfigError`
    naming the option, the value, the valid ones and the closest of them."""
    valid = CHOICES[choices]()
    if value in valid:
        return value
    from ..config.base import did_you_mean

    hint = did_you_mean(value, valid)
    raise ConfigError(
        option, "", f"{value!r} is not one of {listing(valid)}" + (f" ({hint})" if hint else "")
    )


def _for_the_terminal(text: str) -> str:
    """A docstring's reST literals (````x````) as plain quotes: help is read as text."""
    return re.sub(r"``(.+?)``", r"'\1'", text, flags=re.DOTALL)


class HelpCommand(TyperCommand):
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


_F = TypeVar("_F", bound=Callable[..., Any])
#: Each command's help epilog, by function (:func:`command` marks, ``simulator.cli``
#: registers).
_EPILOGS: dict[Callable[..., Any], str] = {}


def command(example: str, guide: str) -> Callable[[_F], _F]:
    """Mark a function as a command whose help ends with one example and its page of the
    guide; the app registers it (:mod:`simulator.cli`)."""

    def mark(fn: _F) -> _F:
        _EPILOGS[fn] = f"\b\nExample:\n  {example}\n\nGuide: docs/{guide}"
        return fn

    return mark


def epilog(fn: Callable[..., Any]) -> str:
    """The help epilog :func:`command` gave ``fn``."""
    return _EPILOGS[fn]


out = Console()
err = Console(stderr=True)


def warn(notes: Sequence[str]) -> None:
    """Each of a scene's warnings on stderr."""
    for note in notes:
        err.print(f"[yellow]warning:[/] {escape(note)}", soft_wrap=True)


def progress_bar(label: str, disable: bool) -> Progress:
    """A pulse-count progress bar on stderr, gone when done."""
    return Progress(
        TextColumn(label),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} pulses"),
        TimeRemainingColumn(),
        console=err,
        disable=disable,
        transient=True,
    )


def read_options(frame: int, topic: str | None, meta: Path | None) -> ReadOptions:
    """The ``--frame``, ``--topic`` and ``--meta`` of a command that reads a cloud."""
    from ..io.read import ReadOptions

    return ReadOptions(frame=frame, topic=topic, meta=meta)
