"""A survey scanned chunk by chunk: :class:`Simulation` (set-up and steps, in
:mod:`.simulation`), its runs (:mod:`.run`), the returns step's plan chosen once
(:mod:`.plans`, with :mod:`.layers` and :mod:`.adaptive`), and :func:`scan`."""

from .records import Frame, OutputFrame, ProgressCallback, ScanSummary, Window
from .simulation import Simulation, scan

__all__ = [
    "Frame",
    "OutputFrame",
    "ProgressCallback",
    "ScanSummary",
    "Simulation",
    "Window",
    "scan",
]
