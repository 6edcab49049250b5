"""Write-then-rename, so that no partial file ever appears under the target's name."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path"]


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same extension); rename it on success.

    On an exception the temporary file is removed and the target is left untouched.
    """
    tmp = path.with_name(f".{path.stem}.tmp-{secrets.token_hex(4)}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
