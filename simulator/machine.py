"""The machine a result was computed on: its CPU and the versions of the libraries whose
arithmetic reaches the output (issue 49).

A scan's bytes do not depend on the x86-64 CPU's instruction set (see
``docs/architecture.md``, rule 8), except where glibc's libm takes another code path (its
FMA or non-FMA ``exp``, ``log``, ``pow``, ...) and where Embree's hit-or-miss at an edge
differs. A dataset's manifest records :func:`machine_summary`, so that a user who finds two
datasets differ can tell whether they were made on different machines or libraries.
"""

from __future__ import annotations

import os
import platform
from importlib import metadata
from typing import Any

__all__ = ["ISA_FLAGS", "machine_summary"]

#: The CPU flags (``/proc/cpuinfo``) that select code paths in numpy, numba, Embree or libm.
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
    "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_fp16",
)  # fmt: skip
#: Environment variables that change those code paths.
ISA_ENVIRONMENT = ("NPY_DISABLE_CPU_FEATURES", "NUMBA_CPU_NAME", "GLIBC_TUNABLES", "LD_PRELOAD")


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_summary() -> dict[str, Any]:
    """The CPU and libraries, as JSON-ready values.

    Returns
    -------
    dict
        ``cpu``: the model name, vendor, family, model and stepping, the core count and the
        :data:`ISA_FLAGS` it has; ``numpy_cpu_features``: numpy's SIMD targets in use;
        ``libraries``: the versions of Python, glibc, numpy, numba, Open3D (from the
        installed packages' metadata: nothing is imported but numpy); ``environment``: the
        variables of :data:`ISA_ENVIRONMENT` that are set.
    """
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    cpu = {
        "machine": platform.machine(),
        "model_name": info.get("model name") or platform.processor() or None,
        "vendor": info.get("vendor_id"),
        "family": info.get("cpu family"),
        "model": info.get("model"),
        "stepping": info.get("stepping"),
        "cores": os.cpu_count(),
        "isa_flags": [f for f in ISA_FLAGS if f in flags],
    }
    try:
        from numpy._core import _multiarray_umath as umath

        features = umath.__cpu_features__
        numpy_targets = [f for f in (*umath.__cpu_baseline__, *umath.__cpu_dispatch__)
                         if features.get(f)]  # fmt: skip
    except (ImportError, AttributeError):
        numpy_targets = []
    libc, libc_version = platform.libc_ver()
    libraries = {
        "python": platform.python_version(),
        libc or "libc": libc_version or None,
        **{name: _version(name) for name in ("numpy", "numba", "llvmlite", "open3d")},
    }
    environment = {k: os.environ[k] for k in ISA_ENVIRONMENT if k in os.environ}
    return {
        "cpu": cpu,
        "numpy_cpu_features": numpy_targets,
        "libraries": libraries,
        "environment": environment,
    }
