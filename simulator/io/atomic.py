"""Write-then-rename, so that no partial file ever appears under the target's name.

Every temporary file is named ``.{stem}.tmp-{hex}{suffix}`` beside its target: hidden,
with the target's extension, and matched by the ``.*.tmp-*`` glob with which a dataset
run clears the leftovers of a killed one.
"""

from __future__ import annotations

import contextvars
import glob
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import OutputError

__all__ = [
    "LOCK_NAME",
    "TEMP_GLOB",
    "atomic_path",
    "folder_lock",
    "no_space",
    "remove_stale_frame_temps",
    "remove_stale_temps",
    "temp_name",
    "without_stale_sweep",
    "write_atomic",
    "write_figure",
]

#: Matches every temporary name :func:`temp_name` makes.
TEMP_GLOB = ".*.tmp-*"
#: The file a run holds locked while it writes into a folder (:func:`folder_lock`).
LOCK_NAME = ".lidar-sim.lock"
#: Whether :func:`atomic_path` looks for a killed writer's temporaries of its target
#: (:func:`without_stale_sweep` turns it off for a block).
_SWEEP_STALE = contextvars.ContextVar("lidar_sim_sweep_stale", default=True)
#: A temporary of a numbered frame file, ``.NNNNNN.tmp-{8 hex}.EXT``.
_FRAME_TEMP = re.compile(r"\.\d+\.tmp-[0-9a-f]{8}\.\w+")


@contextmanager
def folder_lock(folder: str | Path, what: str = "dataset run") -> Iterator[None]:
    """Hold ``folder`` for one writer: an exclusive ``flock`` on ``folder/.lidar-sim.lock``
    for as long as the block runs, released by the system if the process dies (a killed
    run leaves nothing that blocks its ``--resume``); the file goes when the block ends.

    Raises
    ------
    OutputError
        Naming the folder, when another process holds it (a second run into the same
        folder would interleave its files with the first's).
    """
    folder = Path(folder)
    try:
        import fcntl
    except ImportError:  # (not POSIX: no lock; the run goes on as before)
        yield
        return
    path = folder / LOCK_NAME
    handle = path.open("a")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise OutputError(
            f"{folder}: another {what} is writing into this folder; wait for it to end, or "
            "write elsewhere"
        ) from None
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        handle.close()


def no_space(exc: BaseException | None) -> bool:
    """Whether ``exc``, or the error it was raised from, is the device being full (ENOSPC,
    or EDQUOT: a quota)."""
    import errno

    seen = 0
    while exc is not None and seen < 8:  # (a writer's OutputError wraps the OSError)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def temp_name(path: Path) -> Path:
    """A fresh hidden temporary path beside ``path``: ``.{stem}.tmp-{8 hex}{suffix}``."""
    return path.with_name(f".{path.stem}.tmp-{secrets.token_hex(4)}{path.suffix}")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same extension); rename it on success.

    On an exception the temporary file is removed and the target is left untouched. The
    temporaries of this same target that a killed writer left (``kill -9`` gives it no
    chance to clean up) are removed first, so that re-running the command tidies up.
    """
    stale_glob = f".{glob.escape(path.stem)}.tmp-{'[0-9a-f]' * 8}*"
    for stale in path.parent.glob(stale_glob) if _SWEEP_STALE.get() else ():
        if stale.name.endswith(path.suffix) and stale.is_file():
            stale.unlink(missing_ok=True)
    tmp = temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextmanager
def without_stale_sweep() -> Iterator[None]:
    """Within the block, :func:`atomic_path` does not look for a killed writer's temporaries:
    for a writer that swept its folder once (:func:`remove_stale_frame_temps`), so that a
    sequence's frames folder is not listed again for every file (an hour of frames holds
    72,000 files, and listing them took 80 ms: a quadratic cost of tens of minutes)."""
    token = _SWEEP_STALE.set(False)
    try:
        yield
    finally:
        _SWEEP_STALE.reset(token)


def remove_stale_frame_temps(folder: str | Path) -> list[Path]:
    """Delete the temporaries of numbered frame files (``.NNNNNN.tmp-{8 hex}.EXT``) that a
    killed writer left directly in ``folder`` (what :func:`atomic_path` would remove one
    target at a time).

    Returns
    -------
    list of Path
        The files removed.
    """
    stale = [Path(e.path) for e in os.scandir(folder) if _FRAME_TEMP.fullmatch(e.name)]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` all at once: to a temporary name beside it, then renamed.

    Parameters
    ----------
    path : str or Path
        The target; its parent folders are created.
    data : bytes or str
        The whole content; a ``str`` is written as UTF-8 (no newline translation).

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    OutputError
        If the folder cannot be created or the file cannot be written.
    """
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp:
            tmp.write_bytes(payload)
    except OSError as exc:
        raise OutputError(f"{path}: writing failed ({exc.strerror or exc})") from None
    return path


def write_figure(fig: Any, path: str | Path, dpi: int = 90) -> Path:
    """Write a matplotlib figure as PNG (cropped to its contents) to a temporary name beside
    ``path``, rename it into place, and close the figure; return ``path``."""
    import matplotlib.pyplot as plt

    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def remove_stale_temps(folder: str | Path) -> list[Path]:
    """Delete the temporary files a killed writer left anywhere under ``folder``.

    Returns
    -------
    list of Path
        The files removed.
    """
    stale = [p for p in Path(folder).rglob(TEMP_GLOB) if p.is_file()]
    for p in stale:
        p.unlink()
    return stale
