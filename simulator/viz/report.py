"""A report on a scan: does the physics behave? Plots and an HTML page that shows them.

For a survey (scanned with diagnostics) the report knows each point's material, so it
draws per material: intensity against the incidence cosine from the mesh's normal, with
the Minnaert curve ``intensity_scale * rho * cos^k`` the material should follow and the
exponent fitted to the points as a user would fit a real scan (saturated points left out
and counted; :func:`fit_scan_minnaert`), the detected fraction of hits against range with
the range at which the threshold stops a normal-incidence target of that material, and the range
error against incidence with the rough-surface law ``sqrt((roughness cos^-1.5)^2 +
range_noise^2)``. For any cloud: points per ring and a histogram of ranges.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import physics
from ..labels import label_name
from ..pointcloud import PointCloud

__all__ = [
    "MinnaertFit",
    "fit_minnaert",
    "fit_scan_minnaert",
    "material_lines",
    "material_palette",
    "write_report",
]


def fit_minnaert(cos: np.ndarray, intensity: np.ndarray) -> tuple[float, float]:
    """Least-squares ``log I = log(a) + k log(cos)``: returns (k, a)."""
    ok = (cos > 1e-3) & (intensity > 0)
    if ok.sum() < 3 or np.ptp(np.log(cos[ok])) < 1e-6:
        return float("nan"), float("nan")
    k, log_a = np.polyfit(np.log(cos[ok]), np.log(intensity[ok]), 1)
    return float(k), float(np.exp(log_a))


@dataclass(frozen=True)
class MinnaertFit:
    """A Minnaert exponent fitted to a material's points.

    Attributes
    ----------
    k, scale : float
        ``intensity = scale * cos^k``; NaN when too few points are left to fit.
    points : int
        Points the fit used.
    saturated : int
        Points left out because their intensity reads the sensor's maximum (the law's
        value there is unknown: it is clipped).
    """

    k: float
    scale: float
    points: int
    saturated: int


#: Fewest unsaturated points, and the least spread of incidence (in log cos), to fit.
MIN_FIT_POINTS = 20


def fit_scan_minnaert(
    cos_incidence: np.ndarray, intensity: np.ndarray, intensity_max: float
) -> MinnaertFit:
    """Fit the Minnaert law to what a scan holds: measured intensities against the
    incidence from the mesh's normal (not the hidden, micro-slope-tilted one), leaving
    out saturated points.

    Parameters
    ----------
    cos_incidence : (N,) float
        Cosine between each point's beam and the surface normal of the mesh.
    intensity : (N,) float
        Measured intensity.
    intensity_max : float
        The sensor's top reading; points at it are clipped and left out.
    """
    cos = np.asarray(cos_incidence, dtype=np.float64)
    inten = np.asarray(intensity, dtype=np.float64)
    saturated = inten >= intensity_max
    ok = ~saturated & (cos > 1e-3) & (inten > 0)
    if ok.sum() < MIN_FIT_POINTS or np.ptp(np.log(cos[ok])) < 0.05:
        return MinnaertFit(float("nan"), float("nan"), int(ok.sum()), int(saturated.sum()))
    k, scale = fit_minnaert(cos[ok], inten[ok])
    return MinnaertFit(k, scale, int(ok.sum()), int(saturated.sum()))


def material_palette(n: int) -> list[tuple[float, float, float]]:
    """``n`` colours that stay apart: matplotlib's tab10, then tab20's light halves, then
    evenly spaced hues for more than 20."""
    import matplotlib

    if n <= 10:
        return [matplotlib.colormaps["tab10"](i)[:3] for i in range(n)]
    if n <= 20:
        tab20 = matplotlib.colormaps["tab20"]
        order = [*range(0, 20, 2), *range(1, 20, 2)]  # the ten strong colours first
        return [tab20(i)[:3] for i in order[:n]]
    hsv = matplotlib.colormaps["hsv"]
    return [hsv(i / n)[:3] for i in range(n)]


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path.name


def write_report(
    cloud: PointCloud,
    out_dir: str | Path,
    *,
    simulation: Any = None,
    title: str = "scan",
) -> dict[str, Any]:
    """Write plots, ``report.html`` and ``report.json`` into ``out_dir``.

    Parameters
    ----------
    cloud : PointCloud
        The scan (with diagnostics for the per-material plots).
    simulation : Simulation, optional
        The simulation it came from: gives materials, the scanner and all hits.

    Returns
    -------
    dict
        The summary written to ``report.json`` (per-material fitted exponents etc.).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images: list[tuple[str, str]] = []
    summary: dict[str, Any] = {"title": title, "points": len(cloud), "materials": {}}
    summary["labels"] = {
        label_name(int(k)): int(v) for k, v in zip(*np.unique(cloud["label"], return_counts=True),
                                                   strict=True)
    }  # fmt: skip
    has_diag = "object_id" in cloud and "cos_effective" in cloud
    if simulation is not None and has_diag:
        sim = simulation
        mat_of_obj = sim.tables.material_of_object
        names = sim.tables.materials.names
        mats = sim.scene.materials
        # Weather points (object ids past the scene's) belong to no material.
        scene_point = cloud["object_id"] < len(sim.scene.objects)
        material = np.where(scene_point, mat_of_obj[cloud["object_id"]], -1)
        scanner, model = sim.scanner, sim.model
        present = [m for m in np.unique(material[scene_point])
                   if np.count_nonzero(material == m) >= 20]  # fmt: skip
        # 1. intensity against incidence, fitted from what a user's scan would hold
        fig, ax = plt.subplots(figsize=(10, 4.8))
        c = np.linspace(0.02, 1.0, 200)
        palette = material_palette(len(present))
        for colour, m in zip(palette, present, strict=True):
            sel = material == m
            name, mt = names[m], mats[names[m]]
            fit = fit_scan_minnaert(
                cloud["cos_incidence"][sel], cloud["intensity"][sel], scanner.intensity_max
            )
            cos = cloud["cos_incidence"][sel].astype(float)
            inten = cloud["intensity"][sel].astype(float)
            clipped = inten >= scanner.intensity_max
            ax.plot(cos[~clipped], inten[~clipped], ".", ms=2, alpha=0.35, color=colour)
            if clipped.any():
                ax.plot(cos[clipped], inten[clipped], "x", ms=3, alpha=0.5, color=colour)
            law = np.minimum(scanner.intensity_scale * mt.reflectance * c**mt.minnaert_k,
                             scanner.intensity_max)  # fmt: skip
            fitted = "not fitted" if np.isnan(fit.k) else f"fit {fit.k:.3f}"
            note = f", {fit.saturated} saturated" if fit.saturated else ""
            ax.plot(c, law, "-", color=colour, lw=1.5,
                    label=f"{name}: k {mt.minnaert_k:g} ({fitted}{note})")  # fmt: skip
            summary["materials"][name] = {
                "points": int(sel.sum()), "minnaert_k": mt.minnaert_k, "fitted_k": fit.k,
                "fitted_points": fit.points, "saturated_points": fit.saturated,
                "reflectance": mt.reflectance,
            }  # fmt: skip
        ax.axhline(scanner.intensity_max, color="0.5", ls="--", lw=0.8)
        ax.set(xlabel="incidence cosine (from the mesh normal)", ylabel="intensity",
               xlim=(0, 1), ylim=(0, scanner.intensity_max * 1.05))  # fmt: skip
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  title="points: the scan (x: saturated,\nleft out of the fit); lines: the law",
                  title_fontsize=7)  # fmt: skip
        images.append(("Intensity against incidence (Minnaert law per material)",
                       _save(fig, out / "intensity_vs_incidence.png")))  # fmt: skip
        # 2. detected fraction against range, from every hit of the survey
        hit_range, hit_mat, hit_keep = [], [], []
        for chunk, res in sim.evaluated_chunks():
            hit_range.append(chunk.hits.range_m[res.idx].astype(float))
            hit_mat.append(mat_of_obj[chunk.hits.object_index[res.idx]])
            hit_keep.append(res.keep)
        hr, hm, hk = (np.concatenate(v) for v in (hit_range, hit_mat, hit_keep))
        fig, ax = plt.subplots(figsize=(7, 4.5))
        edges = np.linspace(0, min(scanner.range_max_m, np.percentile(hr, 99.5) * 1.1), 40)
        for m in present:
            sel = hm == m
            counts, _ = np.histogram(hr[sel], edges)
            kept, _ = np.histogram(hr[sel & hk], edges)
            frac = np.where(counts > 0, kept / np.maximum(counts, 1), np.nan)
            (line,) = ax.plot(0.5 * (edges[1:] + edges[:-1]), frac, "-o", ms=2, label=names[m])
            r_max = model.max_range_m(mats[names[m]].reflectance)
            if r_max < edges[-1]:
                ax.axvline(r_max, color=line.get_color(), ls=":", lw=1)
            summary["materials"].setdefault(names[m], {})["max_range_normal_m"] = r_max
        ax.set(xlabel="range (m)", ylabel="detected fraction of hits", ylim=(0, 1.05),
               xlim=(0, edges[-1]))  # fmt: skip
        ax.legend(fontsize=7, title="dotted: threshold range at normal incidence",
                  title_fontsize=7)  # fmt: skip
        images.append(("Detected fraction against range", _save(fig, out / "detection.png")))
        # 3. range error against incidence
        if "range_true_m" in cloud:
            fig, ax = plt.subplots(figsize=(7, 4.5))
            bins = np.linspace(0.05, 1.0, 20)
            centres = 0.5 * (bins[1:] + bins[:-1])
            err = cloud["range_m"].astype(float) - cloud["range_true_m"]
            for m in present:
                sel = material == m
                cos = cloud["cos_effective"][sel].astype(float)
                which = np.digitize(cos, bins) - 1
                std = [np.std(err[sel][which == b]) if np.sum(which == b) > 10 else np.nan
                       for b in range(len(centres))]  # fmt: skip
                (line,) = ax.plot(centres, std, "o", ms=3, label=names[m])
                law = np.hypot(physics.rough_range_sigma_m(mats[names[m]].roughness_m, centres),
                               model.range_noise_m)  # fmt: skip
                ax.plot(centres, law, "-", color=line.get_color(), lw=1)
            ax.set(xlabel="effective incidence cosine", ylabel="range error std (m)")
            if np.any(err != 0):
                ax.set_yscale("log")
            ax.legend(fontsize=7, title="lines: rough-surface law + sensor noise", title_fontsize=7)
            images.append(("Range error against incidence", _save(fig, out / "range_error.png")))
    # 3b. the weather against clear air
    if simulation is not None and not simulation.survey.weather.clear:
        from ..config import Weather

        weather = simulation.survey.weather
        summary["weather"] = weather_panel(
            simulation, [("clear air", Weather()), (weather.describe(), weather)],
            out / "weather.png",
        )  # fmt: skip
        images.append(("Detection in this weather and in clear air", "weather.png"))
    # 4. points per ring, 5. ranges
    if "ring" in cloud and len(cloud):
        fig, ax = plt.subplots(figsize=(7, 3.5))
        rings, counts = np.unique(cloud["ring"], return_counts=True)
        ax.bar(rings, counts)
        ax.set(xlabel="ring", ylabel="points")
        images.append(("Points per ring", _save(fig, out / "points_per_ring.png")))
        summary["points_per_ring"] = {int(r): int(n) for r, n in zip(rings, counts, strict=True)}
    if len(cloud):
        fig, ax = plt.subplots(figsize=(7, 3.5))
        r = cloud["range_m"] if "range_m" in cloud else np.linalg.norm(cloud["xyz"], axis=1)
        ax.hist(r, bins=100)
        ax.set(xlabel="range (m)", ylabel="points")
        images.append(("Ranges", _save(fig, out / "ranges.png")))
    (out / "report.json").write_text(json.dumps(summary, indent=2, default=float))
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v:,}</td></tr>" for k, v in summary["labels"].items()
    )
    mat_rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{v.get('points', 0):,}</td>"
        f"<td>{v.get('minnaert_k', float('nan')):.3g}</td>"
        f"<td>{v.get('fitted_k', float('nan')):.3f}</td>"
        f"<td>{v.get('max_range_normal_m', float('nan')):.1f}</td></tr>"
        for k, v in summary["materials"].items()
    )
    figures = "".join(f"<h2>{html.escape(t)}</h2><img src='{html.escape(f)}'>" for t, f in images)
    page = (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:900px;margin:2em auto}"
        "td,th{padding:2px 10px;text-align:right}</style>"
        f"<h1>{html.escape(title)}</h1><p>{len(cloud):,} points</p>"
        f"<table><tr><th>label</th><th>points</th></tr>{rows}</table>"
        + (
            "<h2>Materials</h2><table><tr><th>material</th><th>points</th><th>k</th>"
            f"<th>fitted k</th><th>max range at normal incidence (m)</th></tr>{mat_rows}</table>"
            if mat_rows
            else ""
        )
        + figures
    )
    (out / "report.html").write_text(page, encoding="utf-8")
    return summary


def material_lines(summary: dict[str, Any]) -> list[str]:
    """A line a material whose exponent was fitted (:func:`write_report`'s summary): its
    points, its Minnaert k, and the k fitted to its points (or why not), with the
    saturated points left out."""
    lines = []
    for name, m in summary["materials"].items():
        if "fitted_k" not in m:
            continue
        left_out = (
            f", {m['saturated_points']:,} saturated left out" if m["saturated_points"] else ""
        )
        fitted = (
            f"not fitted ({m['fitted_points']} unsaturated points)"
            if np.isnan(m["fitted_k"])
            else f"fitted {m['fitted_k']:.3f} from {m['fitted_points']:,}"
        )
        lines.append(f"{name}: {m['points']:,} points, k {m['minnaert_k']:g}, {fitted}{left_out}")
    return lines


def weather_panel(
    simulation: Any,
    conditions: list[tuple[str, Any]],
    path: str | Path,
    *,
    range_max_m: float | None = None,
) -> dict[str, Any]:
    """Detected fraction against range under each weather condition, and where the
    weather's own points lie: one PNG.

    Every condition scans the same survey (its ``weather`` replaced). For each pulse the
    ray engine gives the range of the surface its central ray meets; the left panel is the
    fraction of those pulses that report the surface (a return of a scene object), the
    right one the weather points per pulse by range.

    Parameters
    ----------
    simulation : Simulation
        The survey to scan (its scanner, scene and pose).
    conditions : list of (str, Weather)
        A name and the weather of each condition.
    path : str or Path
        The PNG to write.
    range_max_m : float, optional
        Right edge of the plots (default: the 99.5th percentile of the hit ranges).

    Returns
    -------
    dict
        Per condition: scene points, weather points, and the range at which the detected
        fraction first falls below one half.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..pipeline.simulation import Simulation

    base = simulation
    hit_range = []
    for start, stop in base.chunk_spans():
        chunk = base.cast(base.aim(start, stop, footprints=False))
        hit_range.append(chunk.hits.range_m.astype(np.float64))
    r_hit = np.concatenate(hit_range)
    hit = np.isfinite(r_hit)
    top = range_max_m or float(np.percentile(r_hit[hit], 99.5)) * 1.05
    edges = np.linspace(0.0, top, 60)
    centres = 0.5 * (edges[1:] + edges[:-1])
    counts, _ = np.histogram(r_hit[hit], edges)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    out: dict[str, Any] = {}
    objects = len(base.scene.objects)
    for name, weather in conditions:
        output = base.survey.output.model_copy(update={"diagnostics": True})
        survey = base.survey.model_copy(update={"weather": weather, "output": output})
        sim = Simulation(survey=survey, scanner=base.scanner, scene=base.scene,
                         base_dir=base.base_dir, backend=base.backend)  # fmt: skip
        cloud = sim.run()
        scene_pts = cloud["object_id"] < objects
        seen = np.zeros(len(r_hit), dtype=bool)
        seen[cloud["pulse_id"][scene_pts]] = True
        kept, _ = np.histogram(r_hit[hit & seen], edges)
        frac = np.where(counts > 0, kept / np.maximum(counts, 1), np.nan)
        left.plot(centres, frac, "-", lw=1.5, label=name)
        wx, _ = np.histogram(cloud["range_m"][~scene_pts], edges)
        right.plot(centres, wx / len(r_hit), "-", lw=1.5, label=name)
        below = np.flatnonzero(np.nan_to_num(frac, nan=1.0) < 0.5)
        out[name] = {
            "scene_points": int(scene_pts.sum()),
            "weather_points": int((~scene_pts).sum()),
            "half_detected_m": float(centres[below[0]]) if len(below) else None,
        }
    left.set(xlabel="range of the surface the beam meets (m)", ylim=(0, 1.05), xlim=(0, top),
             ylabel="fraction of pulses that report it")  # fmt: skip
    right.set(xlabel="range (m)", ylabel="weather points per pulse", xlim=(0, top), yscale="log")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.suptitle(f"{base.scanner.name}: detection under each condition", fontsize=10)
    _save(fig, Path(path))
    return out
