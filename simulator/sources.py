"""The clouds a user names: a file or capture, read, or a survey, scanned.

What ``lidar-sim compare``, ``render``, ``rangeimage``, ``view`` and ``report`` take.
:func:`cloud_of` gives one cloud (and the simulation, for a survey); :func:`compare_sources`
gives two, made comparable, and their figures: a scanned survey on its beam grid
(:func:`simulator.reconstruct.grid.with_beam_grid`), its rings numbered as the capture
beside it numbers them (:func:`rings_as_the_capture`), then
:func:`simulator.compare.compare_clouds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .compare import compare_clouds, match_rings
from .config import ScannerConfig
from .io.read import ReadOptions, read
from .pipeline.simulation import Simulation
from .pointcloud import PointCloud
from .reconstruct.grid import with_beam_grid
from .sensor.scanner import SpinningPattern

__all__ = ["SURVEY_SUFFIXES", "cloud_of", "compare_sources", "rings_as_the_capture"]

#: A source with one of these suffixes is a survey, scanned; any other is a cloud, read.
SURVEY_SUFFIXES = (".yaml", ".yml")


def cloud_of(
    source: str | Path,
    overrides: Sequence[str] = (),
    *,
    diagnostics: bool = False,
    options: ReadOptions | None = None,
) -> tuple[PointCloud, Simulation | None]:
    """A file's or capture's cloud, or a survey's, scanned.

    Parameters
    ----------
    source : path
        A survey YAML (:data:`SURVEY_SUFFIXES`), or a cloud
        (:data:`simulator.io.read.READ_FORMATS`).
    overrides : sequence of str
        A survey's ``dotted.key=value`` overrides (a cloud read ignores them).
    diagnostics : bool
        Scan a survey with the diagnostic fields (``pulse_id``, ``material`` ...).
    options : ReadOptions, optional
        Which frame of a multi-frame capture.

    Returns
    -------
    (PointCloud, Simulation or None)
        The cloud, and the simulation that scanned it (None for a cloud read).
    """
    source = Path(source)
    if source.suffix.lower() in SURVEY_SUFFIXES:
        extra = ["output.diagnostics=true"] if diagnostics else []
        sim = Simulation.from_file(source, [*overrides, *extra])
        return sim.run(), sim
    return read(source, options), None


def rings_as_the_capture(
    clouds: Sequence[PointCloud], scanners: Sequence[ScannerConfig | None]
) -> str | None:
    """Renumber a scanned cloud's rings the way the capture beside it numbers them.

    Drivers number rings their own way (ROS drivers by elevation, the simulator by channel);
    the rings are matched by elevation (:func:`simulator.compare.match_rings`). Only where
    one of the two was scanned (its scanner given, with a channel table) and the other was
    not; the scanned cloud's ``ring`` field is rewritten in place.

    Parameters
    ----------
    clouds : two PointCloud
        A and B.
    scanners : two ScannerConfig or None
        The scanner that scanned each cloud; None for a cloud read from a file.

    Returns
    -------
    str or None
        What was done (``"A's channels renumbered as B numbers its rings ..."``), or None
        when nothing was: no scanned cloud beside a capture, rings that cannot be matched,
        or a capture that numbers them as the scanner does.
    """
    for i, j in ((1, 0), (0, 1)):
        scanner, capture = scanners[i], clouds[j]
        if scanner is None or scanners[j] is not None or scanner.channels is None:
            continue
        ring_of_channel = match_rings(capture, np.asarray(scanner.channels.elevation_deg))
        if ring_of_channel is None or np.array_equal(
            ring_of_channel, np.arange(len(ring_of_channel))
        ):
            return None
        clouds[i].fields["ring"] = ring_of_channel[clouds[i]["ring"]].astype(np.uint16)
        side, other = "AB"[i], "AB"[j]
        return f"{side}'s channels renumbered as {other} numbers its rings (matched by elevation)"
    return None


def compare_sources(
    a: str | Path,
    b: str | Path,
    overrides: Sequence[str] = (),
    *,
    options: ReadOptions | None = None,
    f_score_threshold_m: float = 0.1,
) -> tuple[PointCloud, PointCloud, dict]:
    """Two clouds (:func:`cloud_of`) made comparable, and their figures.

    A survey is scanned with its diagnostics; a scanned spinning scanner's cloud gets its
    beam grid (firing ``f`` of the revolution is column ``f``, as a capture's measurement
    id is), and its rings are numbered as a capture beside it numbers them
    (:func:`rings_as_the_capture`; what was done is the figures' ``rings["renumbered"]``).

    Parameters
    ----------
    a, b : path
        Each a survey YAML or a cloud (A: typically the real capture).
    overrides : sequence of str
        Survey overrides, for whichever of the two is a survey.
    options : ReadOptions, optional
        Which frame of a multi-frame capture.
    f_score_threshold_m : float
        The F-score's distance (:func:`simulator.compare.compare_clouds`).

    Returns
    -------
    (PointCloud, PointCloud, dict)
        A and B as compared, and :func:`simulator.compare.compare_clouds`'s figures.
    """
    clouds: list[PointCloud] = []
    scanners: list[ScannerConfig | None] = []
    for source in (a, b):
        cloud, sim = cloud_of(source, overrides, diagnostics=True, options=options)
        if (
            sim is not None
            and isinstance(sim.pattern, SpinningPattern)
            and "pulse_id" in cloud.names
        ):
            cloud = with_beam_grid(cloud, sim.pattern, sim.total_pulses)
        clouds.append(cloud)
        scanners.append(None if sim is None else sim.scanner)
    renumbered = rings_as_the_capture(clouds, scanners)
    figures = compare_clouds(clouds[0], clouds[1], f_score_threshold_m=f_score_threshold_m)
    if renumbered:
        figures["rings"]["renumbered"] = renumbered
    return clouds[0], clouds[1], figures
