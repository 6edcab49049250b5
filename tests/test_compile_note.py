"""No silent minute: before numba compiles the first kernel of a process, the numba backend
says so on stderr, once; when the kernels come from numba's cache it says nothing.

Each run is a child process with its own ``NUMBA_CACHE_DIR``, empty at first, so that what
the test process (or a warm cache beside the package) compiled does not count. It calls one
step of the backend, the cull, whose two kernels compile in a few seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.backend import COMPILE_NOTE, KERNELS_AVAILABLE

pytestmark = pytest.mark.skipif(not KERNELS_AVAILABLE, reason="numba is not installed")

#: One step of the numba backend on a few rays, then how many kernels the process compiled.
CHILD = """
import numpy as np
from simulator.backend import NumbaBackend

backend = NumbaBackend()
rng = np.random.default_rng(1)
rays = np.hstack([rng.uniform(-1, 1, (64, 3)), np.tile([1.0, 0.0, 0.0], (64, 1))])
starts, _ = backend.rays_into_boxes(
    rays.astype(np.float32), np.zeros(3), np.full(64, 10.0), np.zeros(64, np.int64),
    np.array([[[2.0, -1.0, -1.0]]]), np.array([[[3.0, 1.0, 1.0]]]),
)
print(int(starts[-1]), backend.compiled_kernels())
"""


def _run(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    res = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         timeout=600, env=env)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res


def test_one_note_before_the_first_compile_and_none_from_the_cache(tmp_path: Path) -> None:
    cold = _run(tmp_path / "numba")
    met, compiled = map(int, cold.stdout.split())
    assert met == 64  # every ray runs through the box ahead
    assert compiled >= 2  # both passes of the cull compiled: one note for both
    assert cold.stderr.splitlines() == [COMPILE_NOTE]
    assert COMPILE_NOTE.startswith("compiling the kernels once for this machine (about ")

    warm = _run(tmp_path / "numba")
    assert warm.stdout.split() == ["64", "0"]  # loaded from the cache: nothing compiled
    assert warm.stderr == ""


def test_the_guide_shows_the_note_as_printed() -> None:
    """The getting-started page quotes the note, with its figure, as the backend prints it."""
    page = Path(__file__).resolve().parent.parent / "docs" / "getting-started.md"
    assert COMPILE_NOTE in page.read_text()
