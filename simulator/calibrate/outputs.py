"""What ``lidar-sim calibrate`` writes and says: the material library and the scanner
overrides (:meth:`~simulator.calibrate.Calibration.write`), the report if asked for
(:mod:`~simulator.calibrate.report`), and the lines that tell what was fitted."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from . import Calibration, calibrate
from .report import write_report

__all__ = ["CalibrationFiles", "calibrate_to_files"]


@dataclass
class CalibrationFiles:
    """What ``lidar-sim calibrate`` wrote (:func:`calibrate_to_files`)."""

    calibration: Calibration
    #: The material library and the scanner overrides beside it (:meth:`Calibration.write`).
    written: list[Path]
    #: The report's page and plots (none unless asked for).
    report: list[Path] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What was written, the notes, the ring gains and each surface's fitted values
        with its verdicts, as the command prints them."""
        c, r = self.calibration, self.calibration.response
        lines = [f"wrote {path}" for path in self.written]
        lines += [f"note: {note}" for note in c.all_notes]
        if r is not None and r.gain_fitted.any():
            fitted = zip(r.gain, r.gain_fitted, strict=True)
            gains = " ".join(f"{g:.3f}" if ok else "-" for g, ok in fitted)
            lines.append(f"ring gains (median 1; -: not fitted): {gains}")
        for s in c.surfaces:
            lines.append(f"{s.surface.name} ({len(s.cos):,} points): {s.described()}")
            lines += [f"  note: {verdict}" for verdict in s.verdicts]
        return lines + [f"wrote {path}" for path in self.report]


def calibrate_to_files(
    scan: str | Path,
    output: str | Path,
    scanner: str | Path = "rs-helios-5515",
    *,
    report: str | Path | None = None,
    **options: Any,
) -> CalibrationFiles:
    """Calibrate a scan (:func:`calibrate`) and write the material library and scanner
    overrides (:meth:`Calibration.write`), and the report if asked for.

    Parameters
    ----------
    scan, scanner
        As :func:`calibrate`'s.
    output : path
        The material library YAML (the overrides go beside it).
    report : path, optional
        The folder of the report (``index.html`` and plots).
    **options
        :func:`calibrate`'s keywords.

    Raises
    ------
    ConfigError
        When no surface with enough points was found (nothing is written).
    """
    result = calibrate(scan, scanner, **options)
    if not result.surfaces:
        raise ConfigError(scan, "points", "no surface with enough points was found")
    written = result.write(output)
    return CalibrationFiles(result, written, [] if report is None else write_report(result, report))
