"""A survey scanned chunk by chunk: :class:`Simulation` (set-up and steps), :func:`scan`."""

from .simulation import Frame, OutputFrame, ProgressCallback, ScanSummary, Simulation, Window, scan

__all__ = [
    "Frame",
    "OutputFrame",
    "ProgressCallback",
    "ScanSummary",
    "Simulation",
    "Window",
    "scan",
]
