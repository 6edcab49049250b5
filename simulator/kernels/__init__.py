"""Numba kernels of the pipeline's steps: each mirrors the numpy specification of the same
name and signature, computed in one pass per pulse over every core, without temporaries.

Which kernel mirrors which specification is listed once, in
:data:`simulator.backend.STEPS` (a step's specification module and kernel module).

The tests compare each kernel with its specification value for value. Each pulse is
computed on its own from its inputs and its global pulse id, so results do not depend on
threads or chunks. The submodules need numba; :data:`AVAILABLE` says whether it imports
(:func:`simulator.backend.select_backend` falls back to the specification without it).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_HERE = Path(__file__).resolve().parent
#: Beside numba's cache files: the digest of the sources they were compiled from.
SOURCE_STAMP = _HERE / "__pycache__" / "kernels-source.sha1"


def source_digest(folder: Path = _HERE) -> str:
    """SHA-1 of every source a kernel is compiled from: the modules of the kernels'
    ``folder`` and the constants they read (numba freezes globals into machine code)."""
    h = hashlib.sha1()
    for path in [*sorted(folder.glob("*.py")), folder.parent / "constants.py"]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def drop_stale_caches(folder: Path = _HERE) -> bool:
    """Delete numba's cached kernels here if any of their sources changed since.

    numba checks only the modification time of the file that defines a cached function,
    not of the helpers it inlines from ``common.py`` or the constants it froze in: after
    an edit of those, it would load machine code of the old source. Returns whether
    caches were dropped. Does nothing where the folder is not writable (an installed
    copy's sources change only on reinstall, and then every file is new).
    """
    digest = source_digest(folder)
    stamp = folder / "__pycache__" / SOURCE_STAMP.name
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    try:
        stamp.parent.mkdir(exist_ok=True)
        for cached in stamp.parent.glob("*.nb[ic]"):
            cached.unlink(missing_ok=True)
        stamp.write_text(digest)
    except OSError:
        return False
    return True


#: OpenMP's threads sleep when a parallel kernel ends instead of spinning for the next
#: one: spinning, they took the cores from Open3D's casts between two kernels (the cast
#: of the bench ran 5 M rays/s instead of 7.5 M). Read when numba first starts its
#: threads; a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numba

    # OpenMP first: numba's TBB layer wants a newer TBB than Open3D's, and warns.
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]
    AVAILABLE = True
    drop_stale_caches()
except ImportError:  # pragma: no cover - exercised only without numba
    AVAILABLE = False

__all__ = ["AVAILABLE", "SOURCE_STAMP", "drop_stale_caches", "source_digest"]
