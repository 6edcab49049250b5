"""The page of ``lidar-sim reconstruct``: the scene it made, the frames it used, its scores.

:func:`write_reconstruct_page` writes ``index.html`` into the reconstruction's folder, beside
three PNGs of the mesh (``mesh_top.png``, ``mesh_oblique.png``, ``reflectance_hist.png``:
:func:`simulator.viz.mesh.mesh_pictures`, where how they are drawn is told).

Then come the scores (a row per frame, protocol and method, linked to the row's compare
page where one was written), the frames and their poses, the mesh's facts, the detection
threshold and the seconds each stage took. The page reads offline: relative links, no
script, no external style; every text is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..compare import NVS_TABLE_KEYS as TABLE_KEYS
from ..io.atomic import write_atomic
from ..transforms import rpy_deg_from_rotation
from .mesh import mesh_pictures

__all__ = ["write_reconstruct_page"]

#: The figures of the results table where more is better (for the rest less is).
HIGHER_IS_BETTER = frozenset({"ray_drop_accuracy", "ray_drop_f1", "f_score"})

#: The results table's column names, shorter than the figures' keys.
COLUMN_NAMES = {
    "ray_drop_accuracy": "drop acc.",
    "ray_drop_f1": "drop F1",
    "depth_medae_m": "depth MedAE m",
    "depth_rmse_m": "depth RMSE m",
    "cd": "CD m²",
    "f_score": "F-score",
    "intensity_rmse": "intensity RMSE",
}


def _plain(value: Any) -> str:
    """A fact's text: ints with thousands separated, floats to 4 significant digits, a dict
    as ``key: value`` pairs, a list comma-separated."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        return f"{float(value):.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) or "none"
    if isinstance(value, list | tuple):
        return ", ".join(_plain(v) for v in value) or "none"
    return str(value)


def _fixed(value: Any, decimals: int = 4) -> str:
    """A number to ``decimals`` places (no minus sign on a zero); "–" if not a number."""
    if not isinstance(value, int | float | np.integer | np.floating) or isinstance(value, bool):
        return "–"
    return f"{round(float(value), decimals) + 0.0:.{decimals}f}"


def _link(folder: Path, relative: str, text: str) -> str:
    """An escaped link to ``folder / relative`` if that file exists, else ``''``."""
    if not (folder / relative).is_file():
        return ""
    return f'<a href="{html.escape(relative)}">{html.escape(text)}</a>'


def _page_of(row: dict[str, Any]) -> str:
    """The relative path of a results row's compare page."""
    kind = "baseline" if row.get("method") == "baseline" else str(row.get("protocol"))
    return f"{kind}/{int(row['frame']):04d}/index.html"


def _best(rows: list[dict[str, Any]], group: str, key: str) -> set[int]:
    """The rows (by index) holding the best ``row[group][key]`` among the rows of one frame
    and protocol, where more than one row of them has it."""
    best: set[int] = set()
    together: dict[tuple[Any, Any], list[int]] = {}
    for i, row in enumerate(rows):
        together.setdefault((row.get("frame"), row.get("protocol")), []).append(i)
    for members in together.values():
        values = {i: (rows[i].get(group) or {}).get(key) for i in members}
        numbers = {i: float(v) for i, v in values.items() if isinstance(v, int | float)}
        if len(numbers) < 2:
            continue
        top = (max if key in HIGHER_IS_BETTER else min)(numbers.values())
        best |= {i for i, v in numbers.items() if v == top}
    return best


def _results_table(folder: Path, rows: list[dict[str, Any]]) -> str:
    e = html.escape
    if not rows:
        return "<p>No frame was scored (hold frames out with --hold-out, or --rescan).</p>"
    same = [k for k in TABLE_KEYS if any(k in (r.get("same_beams") or {}) for r in rows)]
    groups = [("nvs", k) for k in TABLE_KEYS] + [("same_beams", k) for k in same]
    best = {(g, k): _best(rows, g, k) for g, k in groups}

    def name(key: str) -> str:
        arrow = "↑" if key in HIGHER_IS_BETTER else "↓"
        return f"<th title='{e(key)}'>{e(COLUMN_NAMES.get(key, key))} {arrow}</th>"

    head = (
        "<tr><th rowspan='2'>frame</th><th rowspan='2'>protocol</th>"
        "<th rowspan='2'>method</th>"
        f"<th colspan='{len(TABLE_KEYS)}'>nvs (LiDAR4D's measures)</th>"
        + (f"<th colspan='{len(same)}'>same beams</th>" if same else "")
        + "<th rowspan='2'>compare page</th></tr>\n<tr>"
        + "".join(name(k) for _, k in groups)
        + "</tr>"
    )
    body = []
    for i, row in enumerate(rows):
        cells = []
        for g, k in groups:
            text = e(_fixed((row.get(g) or {}).get(k)))
            cells.append(f"<td><b>{text}</b></td>" if i in best[(g, k)] else f"<td>{text}</td>")
        page = _page_of(row)
        link = _link(folder, page, page.removesuffix("/index.html")) or "–"
        body.append(
            f"<tr><td>{e(_plain(row.get('frame')))}</td><td>{e(str(row.get('protocol')))}</td>"
            f"<td>{e(str(row.get('method')))}</td>{''.join(cells)}<td>{link}</td></tr>"
        )
    return f"<table class='num'>{head}\n" + "\n".join(body) + "</table>"


def _frames_table(
    folder: Path, numbers: Sequence[int], held_out: set[int], poses: NDArray[np.float64]
) -> str:
    rows = []
    for n, pose in zip(numbers, poses, strict=True):
        held = n in held_out
        cells = [_fixed(v, 3) for v in pose[:3, 3]]
        cells += [_fixed(v, 2) for v in rpy_deg_from_rotation(pose[:3, :3])]
        survey = _link(folder, f"frames/{n:04d}.yaml", f"{n:04d}.yaml") or "–"
        rows.append(
            f"<tr class='{'held' if held else 'scene'}'><td>{n}</td>"
            f"<td>{'held out' if held else 'scene'}</td>"
            + "".join(f"<td>{c}</td>" for c in cells)
            + f"<td>{survey}</td></tr>"
        )
    return (
        "<table class='num'><tr><th>frame</th><th>role</th><th>x m</th><th>y m</th>"
        "<th>z m</th><th>roll °</th><th>pitch °</th><th>yaw °</th><th>survey</th></tr>\n"
        + "\n".join(rows)
        + "</table>"
    )


def _facts_table(facts: dict[str, Any]) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><th>{e(str(k))}</th><td>{e(_plain(v))}</td></tr>" for k, v in facts.items()
    )
    return f"<table class='num'>{rows}</table>"


def _timings_table(timings: dict[str, float]) -> str:
    e = html.escape
    total = float(sum(timings.values()))
    rows = "".join(
        f"<tr><th>{e(k)}</th><td>{v:.2f}</td><td>{100 * v / (total or 1.0):.0f} %</td></tr>"
        for k, v in timings.items()
    )
    return (
        "<table class='num'><tr><th>stage</th><th>s</th><th>share</th></tr>"
        f"{rows}<tr><th>total</th><td>{total:.2f}</td><td></td></tr></table>"
    )


def _checked(
    summary: dict[str, Any],
    vertices_m: ArrayLike,
    faces: ArrayLike,
    reflectance: ArrayLike,
    poses: ArrayLike,
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """The arrays as float64 / int64, their shapes checked against each other and against
    the summary's frames (``ValueError`` naming the argument otherwise)."""
    v = np.asarray(vertices_m, dtype=np.float64)
    f = np.asarray(faces, dtype=np.int64)
    r = np.asarray(reflectance, dtype=np.float64)
    p = np.asarray(poses, dtype=np.float64)
    if v.ndim != 2 or v.shape[1] != 3:
        raise ValueError(f"vertices_m must be (V, 3); got {v.shape}")
    if f.ndim != 2 or f.shape[1] != 3:
        raise ValueError(f"faces must be (F, 3); got {f.shape}")
    if f.size and (f.min() < 0 or f.max() >= len(v)):
        raise ValueError(f"faces must index vertices in [0, {len(v)})")
    if r.shape != (len(f),):
        raise ValueError(f"reflectance must be ({len(f)},), one a face; got {r.shape}")
    n = len(summary["frames"])
    if n == 0 or p.shape != (n, 4, 4):
        raise ValueError(f"poses must be ({n}, 4, 4), one a frame of summary['frames'] "
                         f"(at least one); got {p.shape}")  # fmt: skip
    return v, f, r, p


def write_reconstruct_page(
    folder: Path,
    summary: dict[str, Any],
    vertices_m: NDArray[np.float64],
    faces: NDArray[np.int64],
    reflectance: NDArray[np.float64],
    poses: NDArray[np.float64],
) -> list[Path]:
    """Write ``index.html`` and its PNGs into a reconstruction's folder (see the module).

    Parameters
    ----------
    folder : Path
        The reconstruction's folder (made if missing). The files the page links to are
        looked for in it, and linked only if there: each results row's compare page
        (``heldout/NNNN/index.html``, ``rescan/NNNN/index.html``,
        ``baseline/NNNN/index.html``), ``frames/NNNN.yaml``, ``summary.json``,
        ``scene.yaml`` and ``scanner.yaml``.
    summary : dict
        ``reconstruct``'s summary: ``frames``, ``held_out``, ``results`` (rows of
        ``frame``, ``protocol``, ``method``, and ``nvs`` and ``same_beams`` figures),
        ``timings_s``, ``mesh``, ``detection``, ``poses_from``; ``captures`` and
        ``scanner`` when present.
    vertices_m : (V, 3) float64
        The fused mesh's vertices, world frame, m.
    faces : (F, 3) int64
        Its triangles, as vertex indices.
    reflectance : (F,) float64
        Each face's reflectance (1: a white Lambertian surface).
    poses : (K, 4, 4) float64
        The world-from-sensor poses of the frames of ``summary["frames"]``, in that order
        (translations in m).

    Returns
    -------
    list of Path
        The files written: ``mesh_top.png``, ``mesh_oblique.png``,
        ``reflectance_hist.png``, then ``index.html``.

    Raises
    ------
    ValueError
        Arrays of the wrong shapes, faces indexing missing vertices, or not one pose a frame
        of the summary.
    """
    import matplotlib

    matplotlib.use("Agg")

    v, f, r, p = _checked(summary, vertices_m, faces, reflectance, poses)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    numbers = [int(n) for n in summary["frames"]]
    held_out = {int(n) for n in summary.get("held_out", [])}
    figures = mesh_pictures(folder, v, f, r, p, numbers, held_out)
    page = _html(folder, summary, numbers, held_out, p, figures)
    return [path for path, _ in figures] + [write_atomic(folder / "index.html", page)]


def _html(
    folder: Path,
    summary: dict[str, Any],
    numbers: list[int],
    held_out: set[int],
    poses: NDArray[np.float64],
    figures: list[tuple[Path, str]],
) -> str:
    """The page's text (every value from the summary escaped)."""
    e = html.escape
    captures = [str(c) for c in summary.get("captures", [])]
    names = ", ".join(Path(c).name for c in captures) or "a capture"
    links = [_link(folder, name, name) for name in ("summary.json", "scene.yaml", "scanner.yaml")]
    detection = summary.get("detection") or {}
    explain = ""
    if {"reference_range_m", "reference_reflectance"} <= detection.keys():
        explain = (
            "<p>The scene's scanner (scanner.yaml) detects a target of reflectance "
            f"{e(_plain(detection['reference_reflectance']))} at normal incidence just at "
            f"{e(_plain(detection['reference_range_m']))} m: the threshold found from the "
            "weakest echoes of the scene frames.</p>"
        )
    scene_frames = [n for n in numbers if n not in held_out]
    poses_from = e(str(summary.get("poses_from", "–")))
    shown = "\n".join(
        f'<figure><img src="{e(path.name)}" alt="{e(caption)}">'
        f"<figcaption>{e(caption)}</figcaption></figure>"
        for path, caption in figures
    )
    timings = {str(k): float(v) for k, v in (summary.get("timings_s") or {}).items()}
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>reconstruct {e(names)}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1500px}}
table{{border-collapse:collapse;margin:0.5em 0}}th,td{{border:1px solid #ccc;padding:2px 8px;
font-size:13px}}th{{text-align:left;background:#f4f4f4}}table.num td{{text-align:right}}
tr.held td{{background:#fde8e8}}img{{max-width:100%}}figure{{margin:1em 0}}
figcaption{{font-size:13px;color:#333;max-width:1100px}}</style></head><body>
<h1>Reconstruction of {e(names)}</h1>
<p>{len(numbers)} frame(s) used: {len(scene_frames)} in the scene ({e(_plain(scene_frames))}),
{len(held_out)} held out ({e(_plain(sorted(held_out)))}).
Scanner: {e(str(summary.get("scanner", "–")))}. Poses from {poses_from}.
{"Captures: " + e(", ".join(captures)) + "." if captures else ""}</p>
<p>{" · ".join(link for link in links if link)}</p>
<h2>Results</h2>
<p>A row per frame, protocol (heldout: a frame left out of the scene, scanned from its
pose; rescan: a scene frame scanned back from its own) and method (simulated: the scene
scanned; baseline: the scene frames' points moved into the frame's pose). ↑: more is
better, ↓: less is; bold: the better of a frame's simulated and baseline rows. A column's
key shows when the pointer rests on its name.</p>
{_results_table(folder, list(summary.get("results", [])))}
<h2>The mesh</h2>
{shown}
{_facts_table(summary.get("mesh") or {})}
<h2>Frames and poses</h2>
<p>World-from-sensor poses, from {poses_from}; roll, pitch and yaw about the x, y and z
axes (R = Rz(yaw) Ry(pitch) Rx(roll)).</p>
{_frames_table(folder, numbers, held_out, poses)}
<h2>Detection threshold</h2>
{explain}
{_facts_table(detection)}
<h2>Timings</h2>
<p>Seconds per stage of the run (this page's own not counted).</p>
{_timings_table(timings)}
</body></html>
"""
