"""The help a user reads and the one-line errors of options with fixed choices (issue 44).

Help: ``--version``; every command's help at 80 columns has no line over 80 characters,
no fake ``<bool>`` value, no reST double backticks, one example that parses and the guide
page it links to; every value of every option with fixed choices (and every dataset
layout) is named. Choices: a value that is not one is one line on stderr starting
``error:``, naming the option, the value, the valid ones and the closest, exit code 2.
``view`` without a display ends at once (a child process with no display variables).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import typer

from simulator.cli import CHOICES, HELP_LISTS, app

from .conftest import REPO, lidar_sim

LIDAR_SIM = [sys.executable, "-m", "simulator.cli"]
COMMANDS = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def _help(monkeypatch: pytest.MonkeyPatch, *command: str) -> str:
    """``lidar-sim [COMMAND] --help`` at 80 columns, in this process."""
    monkeypatch.setenv("COLUMNS", "80")
    res = lidar_sim(*command, "--help")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    return res.stdout


def _one_error_line(res: object, *fragments: str) -> str:
    """The single ``error:`` line of a run that exited 2, holding every fragment."""
    assert res.returncode == 2, (res.stdout, res.stderr)  # type: ignore[attr-defined]
    lines = res.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def test_version_is_the_installed_distributions() -> None:
    res = lidar_sim("--version")
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"lidar-sim {version('lidar-sim')}\n"


def test_every_command_is_listed_with_a_whole_first_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The top-level help lists every command, each with its first sentence whole (none
    cut with "..." at 80 columns), and leaks no reST literals."""
    text = _help(monkeypatch)
    listed = dict(re.findall(r"^  (\w+) +(.+)$", text.split("Commands:")[1], re.MULTILINE))
    assert sorted(listed) == COMMANDS
    for name, line in listed.items():
        assert not line.endswith("..."), (name, line)
    assert "``" not in text and "<bool>" not in text
    assert "Example:" in text and "Guide: docs/index.md" in text


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_reads_cleanly_at_80_columns(monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    text = _help(monkeypatch, *([command] if command else []))
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, long
    assert "<bool>" not in text  # a flag takes no value
    assert "``" not in text  # the docstrings' reST literals are plain quotes
    # Every {key} placeholder was filled with its list.
    assert not [key for key in HELP_LISTS if f"{{{key}}}" in text]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_an_example_that_parses_and_a_guide_page(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """One example, which the command's own parser accepts (its options exist and take
    the values given) and whose repository files exist; a guide page that exists."""
    text = _help(monkeypatch, command)
    examples = re.findall(r"^  Example:\n    (lidar-sim .+)$", text, re.MULTILINE)
    assert len(examples) == 1, text
    args = shlex.split(examples[0])
    assert args[1] == command
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    click_command.make_context(f"lidar-sim {command}", args[2:])  # raises on a bad example
    for arg in args[2:]:
        if arg.startswith(("scenes/", "configs/")):
            assert (REPO / arg).is_file(), arg
    pages = re.findall(r"^  Guide: (docs/[\w-]+\.md)$", text, re.MULTILINE)
    assert len(pages) == 1 and (REPO / pages[0]).is_file(), text


def test_dataset_help_names_every_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layout the writers know (``kitti`` and ``openpcdet`` too), and every layout a
    dataset spec accepts: the two lists are the same."""
    import typing

    from simulator.config.dataset import DatasetSpec
    from simulator.io.layouts import LAYOUTS

    accepted = typing.get_args(DatasetSpec.model_fields["layout"].annotation)
    assert sorted(accepted) == sorted(LAYOUTS)
    text = " ".join(_help(monkeypatch, "dataset").split())
    for layout in LAYOUTS:
        assert re.search(rf"\b{layout}\b", text), layout


@pytest.mark.parametrize(
    ("command", "choices", "expected"),
    [
        ("sequence", "frame_format", ["npz", "bin", "pcd", "ply", "las", "laz", "rosbag2"]),
        ("render", "color", ["intensity", "label", "ring", "range", "return"]),
        ("render", "view", ["sensor", "bev"]),
        ("view", "color", ["intensity", "label", "ring", "range", "return"]),
        ("bench", "bench_format", ["npz", "las", "none"]),
        ("bench", "beam_sampling", ["full", "adaptive"]),
        ("bench", "bench_scene", ["bench", "street", "farm_yard"]),
    ],
)
def test_help_names_every_choice(
    monkeypatch: pytest.MonkeyPatch, command: str, choices: str, expected: list[str]
) -> None:
    valid = list(CHOICES[choices]())
    assert set(expected) <= set(valid)
    text = " ".join(_help(monkeypatch, command).split())
    for value in valid:
        assert re.search(rf"(?<![\w-]){value}(?![\w-])", text), value


@pytest.mark.parametrize("command", ["compare", "render", "rangeimage", "view", "report",
                                     "calibrate"])  # fmt: skip
def test_help_names_every_format_a_cloud_is_read_from(
    monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    from simulator.io.read import READ_FORMATS

    assert " ".join(READ_FORMATS.split()) in " ".join(_help(monkeypatch, command).split())


@pytest.mark.parametrize(
    ("args", "option", "bad", "closest"),
    [
        (["render", "x.npz", "-o", "x.png", "--color", "labels"], "--color", "labels", "label"),
        (["render", "x.npz", "-o", "x.png", "--view", "top"], "--view", "top", None),
        (["view", "x.npz", "--color", "rang"], "--color", "rang", "range"),
        (["sequence", "x.yaml", "-o", "seq", "--format", "xyz"], "--format", "xyz", None),
        (["sequence", "x.yaml", "-o", "seq", "--format", "rosbag"], "--format", "rosbag",
         "rosbag2"),
        (["bench", "--format", "lass"], "--format", "lass", "las"),
        (["bench", "--beam-sampling", "adaptiv"], "--beam-sampling", "adaptiv", "adaptive"),
        (["bench", "--scene", "streets"], "--scene", "streets", "street"),
    ],
)  # fmt: skip
def test_a_value_that_is_not_a_choice_is_one_line(
    tmp_path: Path, args: list[str], option: str, bad: str, closest: str | None
) -> None:
    """Checked before anything is read or scanned (the files named need not exist)."""
    choices = {"--color": "color", "--view": "view", "--beam-sampling": "beam_sampling",
               "--scene": "bench_scene"}  # fmt: skip
    key = choices.get(option) or ("frame_format" if args[0] == "sequence" else "bench_format")
    valid = list(CHOICES[key]())
    line = _one_error_line(lidar_sim(*args, cwd=tmp_path), f"error: {option}: {bad!r}", *valid)
    if closest is not None:
        assert line.endswith(f"(did you mean {closest!r}?)"), line
    else:
        assert "did you mean" not in line
    assert not list(tmp_path.iterdir())  # nothing written


def _no_display_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR")}  # fmt: skip


@pytest.mark.parametrize("display", [None, ":4077"])
def test_view_without_a_display_ends_at_once(display: str | None, tmp_path: Path) -> None:
    """No DISPLAY (or one that does not answer): exit 2 at once with one line that says
    what to do instead, before the survey is scanned; never a hang, and no line of
    libwayland's (``error: XDG_RUNTIME_DIR is invalid or not set``)."""
    env = _no_display_env()
    if display is not None:
        env["DISPLAY"] = display
    res = subprocess.run(
        [*LIDAR_SIM, "view", str(REPO / "scenes/farm/survey.yaml")],
        capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path,
    )  # fmt: skip
    line = _one_error_line(res, "no display", "--screenshot", "lidar-sim render", "xvfb-run")
    assert "XDG_RUNTIME_DIR" not in res.stderr
    if display is not None:
        assert repr(display) in line


def test_view_screenshot_needs_no_display(tmp_path: Path) -> None:
    """``--screenshot`` draws offscreen without a display, and libwayland's line about
    XDG_RUNTIME_DIR is not printed."""
    xyz = np.stack(np.meshgrid(np.linspace(-5, 5, 40), np.linspace(-5, 5, 40), [0.0]), -1)
    xyz = xyz.reshape(-1, 3).astype(np.float32)
    intensity = np.linspace(0, 255, len(xyz), dtype=np.float32)
    np.savez(tmp_path / "grid.npz", xyz=xyz, intensity=intensity)
    shot = tmp_path / "shot.png"
    res = subprocess.run(
        [*LIDAR_SIM, "view", str(tmp_path / "grid.npz"), "--screenshot", str(shot)],
        capture_output=True, text=True, timeout=120, env=_no_display_env(),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert shot.stat().st_size > 1000
    assert "XDG_RUNTIME_DIR" not in res.stderr
    assert not [line for line in res.stderr.splitlines() if line.startswith("error:")]
