"""Exceptions of the simulator: one base class, specific subclasses."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "ConfigError",
    "InputError",
    "OutputError",
    "SceneError",
    "SceneMemoryError",
    "SimulatorError",
]


class SimulatorError(Exception):
    """Base class of every error the simulator raises on bad input or output."""


class ConfigError(SimulatorError):
    """A configuration file (or override) is malformed or inconsistent.

    Parameters
    ----------
    source : str or Path
        The file (or ``--set`` override) the bad value came from.
    key : str
        Dotted key path inside it, e.g. ``objects[2].box.size_m``; empty for the
        whole file.
    problem : str
        What is wrong and what was expected.
    """

    def __init__(self, source: str | Path, key: str, problem: str) -> None:
        self.source = str(source)
        self.key = key
        self.problem = problem
        where = f"{self.source}: {key}" if key else self.source
        super().__init__(f"{where}: {problem}")


class SceneError(SimulatorError):
    """A scene cannot be built: a mesh file is missing, unreadable or empty."""


class SceneMemoryError(SceneError):
    """A scene is too large to scan in the memory available (checked before the ray
    engine is built, :mod:`simulator.world.memory`)."""


class OutputError(SimulatorError):
    """An output cannot be written: unknown format or unwritable path."""


class InputError(SimulatorError):
    """A point-cloud file (a capture or a scan) cannot be read: not found, not the format
    its name says, a field of the wrong type, a topic or frame that is not there.

    Parameters
    ----------
    source : str or Path
        The file (or bag folder).
    problem : str
        What is wrong and what was expected.
    """

    def __init__(self, source: str | Path, problem: str) -> None:
        self.source = str(source)
        # One line, whatever a library's error text (quoted in ``problem``) holds.
        self.problem = " ".join(str(problem).split())
        super().__init__(f"{self.source}: {self.problem}")
