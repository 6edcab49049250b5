"""What the machine reports to the benchmarks: the processor's name, this process's
resident memory (now and at its peak) and the CPU seconds of it and its ended children."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path

__all__ = ["cpu_name", "cpu_seconds", "peak_rss_mib", "reset_peak_rss", "rss_mib"]


def cpu_name() -> str:
    """The processor's model name (Linux), else the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{platform.machine()} {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_mib() -> float:
    """This process's peak resident memory so far (since :func:`reset_peak_rss`, where
    Linux allows it), MiB: ``VmHWM`` of ``/proc/self/status``, else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reset_peak_rss() -> bool:
    """Start :func:`peak_rss_mib` again from the memory resident now (Linux's
    ``clear_refs`` 5); False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return False
    return True


def rss_mib() -> float:
    """This process's resident memory now, MiB (Linux)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime
