"""Write-then-rename, so that no partial file ever appears under the target's name.

Every temporary file is named ``.{stem}.tmp-{hex}{suffix}`` beside its target: hidden,
with the target's extension, and matched by the ``.*.tmp-*`` glob with which a dataset
run clears the leftovers of a killed one.
"""

from __future__ import annotations

import glob
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import OutputError

__all__ = [
    "TEMP_GLOB",
    "atomic_path",
    "remove_stale_temps",
    "temp_name",
    "write_atomic",
    "write_figure",
]

#: Matches every temporary name :func:`temp_name` makes.
TEMP_GLOB = ".*.tmp-*"


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
    for stale in path.parent.glob(f".{glob.escape(path.stem)}.tmp-{'[0-9a-f]' * 8}*"):
        if stale.name.endswith(path.suffix) and stale.is_file():
            stale.unlink(missing_ok=True)
    tmp = temp_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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
