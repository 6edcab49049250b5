"""The same bytes on any x86-64 machine (issue 49, point 1): short reference scans under
every instruction set this machine can force give the digests of the host's.

Each variant runs ``tests/support/same_bytes_run.py`` in a process of its own:

- numpy's SIMD loops: without AVX-512, and down to its baseline (``NPY_DISABLE_CPU_FEATURES``);
- numba compiling for a generic x86-64 (``NUMBA_CPU_NAME=generic``, a cache of its own);
- Embree (inside libOpen3D), shown another CPU by an ``LD_PRELOAD`` shim
  (``tests/support/cpuid_shim.c``, compiled here with gcc) that edits the CPUID answers
  libOpen3D reads: no AVX2 (Embree's AVX kernels), and an Intel Skylake-SP model (Embree's
  BVH of width 4). The shim needs Linux CPUID faulting (the ``cpuid_fault`` CPU flag):
  without it or without gcc, those variants are skipped, with the reason.

Every variant also casts a sphere, and 480,000 rays into the bundled street from two
points: Embree's raw sphere ranges and street faces must differ under some forced Embree
(the shim reached it, and the street holds rays whose face Embree's instruction set
decides: 195 under AVX, 303 under the Skylake-SP's BVH4), the refined ones must not. The
scans are four cases' first 0.1 revolution; still, seven processes and numba compiling
every kernel for the generic CPU take 60 s on two quiet cores (2.5-4.5 min on busy ones),
so the test runs only when ``LIDAR_SIM_SAME_BYTES=1``:
``LIDAR_SIM_SAME_BYTES=1 pytest -n 0 -s tests/test_same_bytes.py`` (``-s`` prints the
digests of every variant).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import REPO

CASES = ("farm-helios", "tree", "street-adaptive-19", "farm-adaptive-7")
SHORT = ("revolutions=0.1",)
RUNNER = REPO / "tests" / "support" / "same_bytes_run.py"
SHIM = REPO / "tests" / "support" / "cpuid_shim.c"


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _numpy_variants() -> dict[str, dict[str, str]]:
    """numpy without its AVX-512 loops, and with none above its baseline, where this CPU
    has them."""
    from numpy._core import _multiarray_umath as umath

    dispatch = [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]
    out = {}
    wide = [f for f in dispatch if f.startswith(("X86_V4", "AVX512"))]
    if wide:
        out["numpy-no-avx512"] = {"NPY_DISABLE_CPU_FEATURES": " ".join(wide)}
    if len(dispatch) > len(wide):
        out["numpy-baseline"] = {"NPY_DISABLE_CPU_FEATURES": " ".join(dispatch)}
    return out


def _shim(tmp: Path) -> tuple[Path | None, str]:
    """The compiled shim, or None and why not."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return None, "the CPUID shim is for x86-64 Linux"
    if "cpuid_fault" not in _cpu_flags():
        return None, "this CPU (or hypervisor) has no CPUID faulting (cpuid_fault flag)"
    gcc = shutil.which("gcc")
    if gcc is None:
        return None, "gcc is not installed: the CPUID shim cannot be compiled"
    out = tmp / "cpuid_shim.so"
    done = subprocess.run(
        [gcc, "-O2", "-shared", "-fPIC", "-o", str(out), str(SHIM), "-ldl"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None, f"gcc could not compile the CPUID shim: {done.stderr.strip()[:300]}"
    return out, ""


def _run(env: dict[str, str]) -> dict[str, str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    done = subprocess.run(
        [sys.executable, str(RUNNER), *CASES, "--set", *SHORT],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    os.environ.get("LIDAR_SIM_SAME_BYTES") != "1",
    reason="slow (60 s on two quiet cores): set LIDAR_SIM_SAME_BYTES=1 to run it",
)
def test_reference_scans_are_the_same_under_every_instruction_set(tmp_path: Path) -> None:
    """Every digest of every variant equals the host's; the Embree variants change
    Embree's raw answers (so the shim took effect) but not the refined ones."""
    pytest.importorskip("numba")
    variants: dict[str, dict[str, str]] = {"host": {}}
    variants.update(_numpy_variants())
    cache = tmp_path / "numba-generic"
    cache.mkdir()
    variants["numba-generic"] = {"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(cache)}
    shim, why = _shim(tmp_path)
    if shim is not None:
        base = {"LD_PRELOAD": str(shim), "CPUID_SHIM_MODULE": "libOpen3D"}
        variants["embree-avx"] = {**base, "CPUID_SHIM_NO_AVX2": "1", "CPUID_SHIM_NO_AVX512": "1"}
        variants["embree-skylake-sp"] = {**base, "CPUID_SHIM_MODEL": "0x55"}
        for name in ("embree-avx", "embree-skylake-sp"):
            variants[name]["CPUID_SHIM_REPORT"] = str(tmp_path / f"{name}.report")
    got = {name: _run(env) for name, env in variants.items()}
    host = got["host"]
    table = "\n".join(f"{n:18s} {json.dumps(d)}" for n, d in got.items())
    print(f"\nvariants:\n{table}")
    for name, digests in got.items():
        raw = {k: v for k, v in digests.items() if not k.endswith("_raw")}
        want = {k: v for k, v in host.items() if not k.endswith("_raw")}
        assert raw == want, f"{name} differs from the host:\n{table}"
    if shim is None:
        pytest.skip(f"numpy and numba variants agree; Embree not forced: {why}")
    for name in ("embree-avx", "embree-skylake-sp"):
        edited, seen = np.loadtxt(tmp_path / f"{name}.report", dtype=np.int64)
        assert edited > 0 and seen >= edited, f"{name}: the shim edited no CPUID of libOpen3D"
    assert any(got[n]["embree_raw"] != host["embree_raw"] for n in ("embree-avx",)), (
        f"forcing Embree's AVX kernels changed none of its raw answers: did the shim work?\n{table}"
    )
    for name in ("embree-avx", "embree-skylake-sp"):
        assert got[name]["street_raw"] != host["street_raw"], (
            f"{name}: Embree picked the same face for every street ray: the probe proves "
            f"nothing\n{table}"
        )
