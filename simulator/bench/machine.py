"""What the machine reports to the benchmarks: the processor's name, this process's
resident memory (now and at its peak), the CPU seconds of it and its ended children, and
the CPU seconds every process of the machine has used."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path

__all__ = ["busy_seconds", "cpu_name", "cpu_seconds", "peak_rss_mib", "reset_peak_rss", "rss_mib"]


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


def busy_seconds() -> float | None:
    """CPU seconds every process of the machine has used since it started, all cores
    (Linux's ``/proc/stat``: its time not idle nor waiting for I/O); None elsewhere. Less
    this process's own over a run, it is what the rest of the machine took meanwhile."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")
