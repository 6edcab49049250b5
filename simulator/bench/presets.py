"""Benchmark: every ground preset (spinning and solid-state) on one generated scene, a row each.

``lidar-sim bench --presets all --scene street`` builds the scene once (the street of
``--seed``), puts each preset in the ego lane (y = -1.6 m, 1.8 m up; driving at 5 m/s with
``--moving``), scans ``--revolutions`` frames of it in clear air or the given weather with
the preset's default physics, and prints a row a preset:

- the preset's pulses per second (its datasheet rate) and the pipeline's in steady state
  (the first chunk, which warms the caches, left out when there are more);
- sensor seconds per wall second (the real-time factor) in steady state;
- CPU seconds per frame (user + system of every thread of the process, in steady state):
  less sensitive than the wall clock to other work on a shared machine; with the cores the
  scan used on average (CPU s over wall s), it says what an idle machine would give;
- the stage split of the whole scan (schedule, cast, physics, output), as ``lidar-sim
  bench`` prints it.

No bare cast is timed: the table is about the pipeline on a street, not its ratio to the cast.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from ..backend import NumpyBackend, select_backend
from ..config import (
    Weather,
    load_scanner,
    load_yaml,
    scanner_presets,
)
from ..errors import ConfigError
from ..pipeline.simulation import Simulation
from ..world.scene import Scene
from .machine import cpu_name, peak_rss_mib
from .scene import bench_survey, scene_of

__all__ = [
    "GROUND_PATTERNS",
    "format_preset_table",
    "ground_presets",
    "preset_names",
    "preset_table_text",
    "run_preset_table",
]

#: The patterns of ground sensors: spinning heads and solid-state (Risley prisms, a recorded
#: table, a raster). The oscillating mirror is an airborne scanner's, left out of ``all``.
GROUND_PATTERNS = ("spinning", "risley", "table", "raster")


def ground_presets() -> list[str]:
    """Names of the bundled presets whose pattern is a ground sensor's (:data:`GROUND_PATTERNS`),
    spinning ones first, each group by name."""
    patterns = {name: load_yaml(path).get("pattern", "spinning")
                for name, path in scanner_presets().items()}  # fmt: skip
    ground = [n for n, p in patterns.items() if p in GROUND_PATTERNS]
    return sorted(ground, key=lambda n: (patterns[n] != "spinning", n))


def preset_names(choice: str) -> list[str]:
    """``all`` as :func:`ground_presets`, else a comma-separated list of preset names
    (each checked).

    Raises
    ------
    ConfigError
        When a name is not a bundled preset.
    """
    if choice.strip() == "all":
        return ground_presets()
    names = [n.strip() for n in choice.split(",") if n.strip()]
    known = scanner_presets()
    for name in names:
        if name not in known:
            raise ConfigError("--presets", name, f"expected all or presets of {', '.join(known)}")
    return names


def _preset_row(name: str, scene: Scene, y0_m: float, options: Any, tmp: Path) -> dict[str, Any]:
    """Scan ``options.revolutions`` frames of ``scene`` with preset ``name``; its figures."""
    survey = bench_survey(name, y0_m, options)
    scanner = load_scanner(name)
    backend = select_backend() if options.use_fast else NumpyBackend()
    sim = Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path("."),
                     backend=backend)  # fmt: skip
    sim.scan_pulses(0, 1000)  # numba's kernels loaded, Open3D's BVH built
    sim.timings_s = dict.fromkeys(sim.timings_s, 0.0)
    fmt = options.output_format
    paths = [] if fmt == "none" else [tmp / f"{name}.{fmt}"]
    marks: list[tuple[int, float, float]] = [(0, time.perf_counter(), time.process_time())]
    summary = sim.write(
        paths,
        progress=lambda done, _: marks.append((done, time.perf_counter(), time.process_time())),
    )
    marks.append((sim.total_pulses, time.perf_counter(), time.process_time()))
    for p in summary.files:
        p.unlink(missing_ok=True)
    # Steady state: from the end of the first chunk to the end (file closed).
    (p0, w0, c0) = marks[1] if len(marks) > 3 else marks[0]
    (p1, w1, c1) = marks[-1]
    rate = sim.pattern.pulses_per_second
    pulses_per_s = (p1 - p0) / (w1 - w0) if w1 > w0 else float("nan")
    frames = (p1 - p0) / sim.pattern.frame_pulses
    return {
        "preset": name,
        "pattern": scanner.pattern,
        "channels": sim.pattern.channels,
        "sensor_pulses_per_s": rate,
        "frame_s": sim.pattern.frame_pulses / rate,
        "pulses": sim.total_pulses,
        "points": summary.points,
        "pipeline_pulses_per_s": pulses_per_s,
        "real_time_factor": pulses_per_s / rate,
        "cpu_s_per_frame": (c1 - c0) / frames if frames > 0 else float("nan"),
        "cpu_cores_used": (c1 - c0) / (w1 - w0) if w1 > w0 else float("nan"),
        "wall_s": marks[-1][1] - marks[0][1],
        "stages_s": dict(sim.timings_s),
    }


def run_preset_table(options: Any, presets: list[str]) -> dict[str, Any]:
    """Scan the scene of ``options`` with each preset in turn (see the module docstring).

    Parameters
    ----------
    options : BenchOptions
        The scene (``scene_name``, ``seed``, ``scene_scale``), the survey's length
        (``revolutions`` frames, or ``duration_s``), ``chunk_pulses``, ``output_format``,
        ``weather``, ``moving`` and ``use_fast``; the rest is ignored.
    presets : list of str
        Preset names, in the order of the rows.

    Returns
    -------
    dict
        ``machine``, ``scene``, ``triangles``, ``scene_build_s``, ``weather``, ``rows`` (a
        dict a preset, see :func:`_preset_row`) and ``peak_rss_mib``.
    """
    import open3d as o3d

    t0 = time.perf_counter()
    scene, y0_m = scene_of(options.scene_name, options.seed, options.scene_scale)
    t_scene = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        rows = [_preset_row(name, scene, y0_m, options, Path(tmp)) for name in presets]
    return {
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, Open3D {o3d.__version__}",
        "scene": f"{options.scene_name} (seed {options.seed})",
        "triangles": scene.triangle_count,
        "scene_build_s": t_scene,
        "weather": Weather.model_validate(options.weather or {}).describe(),
        "moving": options.moving,
        "output_format": options.output_format,
        "load_average": os.getloadavg(),
        "rows": rows,
        "peak_rss_mib": peak_rss_mib(),
    }


def format_preset_table(figures: dict[str, Any]) -> str:
    """The figures of :func:`run_preset_table` as a Markdown table, with a heading line."""
    load = ", ".join(f"{x:.1f}" for x in figures["load_average"])
    lines = [
        f"machine: {figures['machine']}; load average {load}",
        f"scene: {figures['scene']}, {figures['triangles']:,} triangles "
        f"(built in {figures['scene_build_s']:.2f} s); {figures['weather']}; "
        f"{'moving at 5 m/s' if figures['moving'] else 'standing'} in the ego lane; "
        f"output .{figures['output_format']}",
        "",
        "| preset | pattern | beams | pulses/s (sensor) | pulses/s (pipeline) | sensor s / wall s "
        "| CPU s / frame | cores used | points / pulse | stages: schedule, cast, physics, "
        "output (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in figures["rows"]:
        s = r["stages_s"]
        lines.append(
            f"| {r['preset']} | {r['pattern']} | {r['channels']} "
            f"| {r['sensor_pulses_per_s'] / 1e6:.3f} M "
            f"| {r['pipeline_pulses_per_s'] / 1e6:.2f} M | {r['real_time_factor']:.2f} x "
            f"| {r['cpu_s_per_frame']:.3f} ({r['frame_s']:.3f} s a frame) "
            f"| {r['cpu_cores_used']:.2f} | {r['points'] / max(r['pulses'], 1):.2f} "
            f"| {s['schedule']:.2f}, {s['cast']:.2f}, {s['physics']:.2f}, {s['output']:.2f} |"
        )
    lines.append(f"\npeak memory {figures['peak_rss_mib']:.0f} MiB")
    return "\n".join(lines)


def preset_table_text(options: Any, choice: str, as_json: bool = False) -> str:
    """What ``lidar-sim bench --presets CHOICE`` prints: the table, or its figures as JSON."""
    figures = run_preset_table(options, preset_names(choice))
    return json.dumps(figures, indent=2) if as_json else format_preset_table(figures)
