"""The page of ``lidar-sim compare``: two clouds' plots and their figures in ``index.html``.

:func:`write_compare_page` draws A and B overlaid or side by side into PNG files, one
function a figure (:func:`rings_figure`, :func:`range_histogram`,
:func:`intensity_histogram`, :func:`intensity_per_ring`, :func:`intensity_per_label`,
:func:`intensity_against_range`, :func:`range_images`), and writes an ``index.html`` that
shows them under a table of :func:`simulator.compare.compare_clouds`' figures.

Fields a cloud lacks (a real capture may hold only ``xyz``) make the plots that need them
say "not in A" (or B).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..compare.common import (
    AZIMUTH_COLUMNS,
    finite_values,
    first_returns,
    nearest_per_pixel,
    ranges_m,
    usable_points,
)
from ..compare.metrics import INTENSITY_BINS, RANGE_BIN_M, intensity_scale, range_edges
from ..compare.rings import first_returns_per_ring
from ..io.atomic import write_atomic, write_figure
from ..labels import label_name
from ..pointcloud import PointCloud

_COLOURS = ("tab:blue", "tab:orange")


def _image_of(c: PointCloud) -> tuple[NDArray, NDArray, str] | None:
    """(returned, range image, x-axis label) of a cloud's first returns, None without ring."""
    if "ring" not in c:
        return None
    sel = first_returns(c)
    grid = c.meta.get("beam_grid")
    ring = np.asarray(c["ring"], dtype=np.int64)[sel]
    if "column" in c:
        column = np.asarray(c["column"], dtype=np.int64)[sel]
        w = int(grid["columns"]) if grid else int(column.max()) + 1
        xlabel = "column (firing)"
    else:
        xyz = np.asarray(c["xyz"], dtype=np.float64)[sel]
        az = np.arctan2(xyz[:, 1], xyz[:, 0])
        column = np.floor((az + np.pi) / (2 * np.pi) * AZIMUTH_COLUMNS).astype(np.int64)
        column = np.clip(column, 0, AZIMUTH_COLUMNS - 1)
        w = AZIMUTH_COLUMNS
        xlabel = f"azimuth column ({AZIMUTH_COLUMNS} over -180..180 deg of atan2(y, x))"
    h = int(grid["rows"]) if grid else int(ring.max()) + 1
    ret, (rng,) = nearest_per_pixel(ring, column, [ranges_m(c)[sel]], (h, w))
    return ret, rng, xlabel


def _ring_ticks(ax: Any, n_rings: int) -> None:
    """Every ring ticked up to 32 rings, else integer ticks matplotlib chooses."""
    from matplotlib.ticker import MaxNLocator

    if n_rings <= 32:
        ax.set_xticks(np.arange(n_rings))
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _missing(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=12)
    ax.set_xticks([])
    ax.set_yticks([])


class Side(NamedTuple):
    """One of the page's two clouds, as every figure draws it."""

    cloud: PointCloud
    """Its usable points (:func:`simulator.compare.common.usable_points`)."""
    label: str
    """The legend's ``"A: name"`` or ``"B: name"``."""
    colour: str
    """Its matplotlib colour."""
    letter: str
    """``"A"`` or ``"B"``."""


def sides_of(a: PointCloud, b: PointCloud, names: tuple[str, str]) -> tuple[Side, Side]:
    """A and B as the figures draw them: the points :func:`compare_clouds` leaves out are
    left out here too, each with its label and colour."""
    a, b = (c.select(usable_points(c)) for c in (a, b))  # as compare_clouds leaves them out
    return (
        Side(a, f"A: {names[0]}", _COLOURS[0], "A"),
        Side(b, f"B: {names[1]}", _COLOURS[1], "B"),
    )


def _legend(ax: Any) -> None:
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2,
              frameon=False)  # fmt: skip


def _ring_count(sides: tuple[Side, Side]) -> int:
    """Rings 0 .. the highest ring of either cloud (0 when neither has ``ring``)."""
    return max((int(c["ring"].max()) + 1 for c, *_ in sides if "ring" in c), default=0)


def _range_edges_of(sides: tuple[Side, Side]) -> NDArray[np.float64]:
    """The range histograms' edges of both clouds' finite ranges."""
    a, b = (s.cloud for s in sides)
    return range_edges(finite_values(ranges_m(a)), finite_values(ranges_m(b)))


def rings_figure(out: Path, sides: tuple[Side, Side], result: dict) -> tuple[str, Path]:
    """``rings.png``: points per ring and return share per ring (``result["rings"]``)."""
    import matplotlib.pyplot as plt

    n_rings = _ring_count(sides)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    rings = np.arange(n_rings)
    for i, (c, lab, col, _side) in enumerate(sides):
        if "ring" not in c:
            continue
        counts = first_returns_per_ring(c, n_rings)
        if n_rings <= 32:
            axes[0].bar(rings + (i - 0.5) * 0.4, counts, width=0.4, color=col, label=lab)
        else:  # bars of 100+ rings alias: steps instead
            axes[0].step(rings, counts, where="mid", color=col, label=lab)
    share = result["rings"]
    for key, (_, lab, col, _side) in zip(("share_a", "share_b"), sides, strict=True):
        if share[key] is not None:
            s = share[key]
            axes[1].plot(np.arange(len(s)), s, "o-", color=col, label=lab,
                         ms=4 if n_rings <= 32 else 2)  # fmt: skip
    axes[0].set(xlabel="ring", ylabel="first returns", title="Points per ring")
    axes[0].set_ylim(bottom=0)
    est = " (firings estimated)" if share.get("firings_estimated") else ""
    top = max([1.0] + [max(share[k]) for k in ("share_a", "share_b") if share[k]])
    axes[1].set(xlabel="ring", ylabel="returns / firings", ylim=(0, 1.05 * top),
                title=f"Return share per ring{est}")  # fmt: skip
    for ax in axes:
        if n_rings:
            _ring_ticks(ax, n_rings)
            _legend(ax)
        else:
            _missing(ax, "no ring field in A or B")
    missing = [s for c, _, _, s in sides if "ring" not in c]
    if missing and n_rings:
        for ax, what in zip(axes, ("Points", "Return share"), strict=True):
            ax.set_title(f"{what} per ring (ring not in {' or '.join(missing)})")
    return "Points and return share per ring", write_figure(fig, out / "rings.png")


def range_histogram(out: Path, sides: tuple[Side, Side], result: dict) -> tuple[str, Path]:
    """``range_hist.png``: both clouds' range densities, :data:`RANGE_BIN_M` bins."""
    import matplotlib.pyplot as plt

    a, b = (s.cloud for s in sides)
    ra, rb = finite_values(ranges_m(a)), finite_values(ranges_m(b))
    edges = _range_edges_of(sides)
    fig, ax = plt.subplots(figsize=(10, 4))
    for r, (_, lab, col, _s) in zip((ra, rb), sides, strict=True):
        ax.hist(r, bins=edges, histtype="step", density=True, color=col, lw=1.5, label=lab)
    ax.set(xlabel="range (m)", ylabel="density (1/m)", xlim=(0, edges[-1]),
           title=f"Range histogram ({RANGE_BIN_M} m bins), TV distance "
                 f"{result['range']['tv_distance']:.3f}")  # fmt: skip
    _legend(ax)
    return "Range histogram", write_figure(fig, out / "range_hist.png")


def intensity_histogram(out: Path, sides: tuple[Side, Side], result: dict) -> tuple[str, Path]:
    """``intensity_hist.png``: both clouds' intensity densities, :data:`INTENSITY_BINS`
    bins over the full scale, a log axis."""
    import matplotlib.pyplot as plt

    scale = intensity_scale(*(s.cloud for s in sides))
    fig, ax = plt.subplots(figsize=(10, 4))
    iedges = np.linspace(0.0, scale, INTENSITY_BINS + 1)
    for c, lab, col, _s in sides:
        if "intensity" in c:
            ax.hist(np.asarray(c["intensity"], dtype=np.float64), bins=iedges, histtype="step",
                    density=True, color=col, lw=1.5, label=lab)  # fmt: skip
    miss = [s for c, _, _, s in sides if "intensity" not in c]
    tv = result["intensity"]["tv_distance"]
    title = "Intensity histogram" + (f", TV distance {tv:.3f}" if tv is not None else "")
    title += f" (intensity not in {' or '.join(miss)})" if miss else ""
    ax.set(xlabel="intensity (scanner scale)", ylabel="density (per intensity unit)",
           xlim=(0, scale), title=title)  # fmt: skip
    ax.set_yscale("log")
    _legend(ax)
    return "Intensity histogram", write_figure(fig, out / "intensity_hist.png")


def intensity_per_ring(out: Path, sides: tuple[Side, Side], result: dict) -> tuple[str, Path]:
    """``intensity_per_ring.png``: the median intensity of each ring's points."""
    import matplotlib.pyplot as plt

    n_rings = _ring_count(sides)
    rings = np.arange(n_rings)
    fig, ax = plt.subplots(figsize=(10, 4))
    ok = [c for c, *_ in sides if "ring" in c and "intensity" in c]
    if ok:
        for c, lab, col, _s in sides:
            if "ring" in c and "intensity" in c:
                r = np.asarray(c["ring"], dtype=np.int64)
                med = [np.median(c["intensity"][r == k]) if np.any(r == k) else np.nan
                       for k in range(n_rings)]  # fmt: skip
                ax.plot(rings, med, "o-", color=col, ms=4, label=lab)
        ax.set(xlabel="ring", ylabel="median intensity", title="Median intensity per ring")
        _ring_ticks(ax, n_rings)
        _legend(ax)
    else:
        _missing(ax, "ring or intensity not in A or B")
    miss = [s for c, _, _, s in sides if "ring" not in c or "intensity" not in c]
    if ok and miss:
        ax.set_title(f"Median intensity per ring (ring/intensity not in {' or '.join(miss)})")
    return "Intensity per ring", write_figure(fig, out / "intensity_per_ring.png")


def intensity_per_label(
    out: Path, sides: tuple[Side, Side], result: dict
) -> tuple[str, Path] | str:
    """``intensity_per_label.png``: the median intensity of each label's points; when a
    cloud lacks ``label`` or ``intensity``, not drawn: the note saying so instead."""
    import matplotlib.pyplot as plt

    a, b = (s.cloud for s in sides)
    if not all("label" in c and "intensity" in c for c in (a, b)):
        miss = [s for c, _, _, s in sides if "label" not in c or "intensity" not in c]
        return (f"Intensity per label: not drawn (label or intensity not in "
                f"{' or '.join(miss)}).")  # fmt: skip
    ids = np.union1d(np.unique(a["label"]), np.unique(b["label"]))
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(ids) + 2), 4.5))
    x = np.arange(len(ids))
    for i, (c, lab, col, _s) in enumerate(sides):
        lbl = np.asarray(c["label"])
        med = [np.median(c["intensity"][lbl == k]) if np.any(lbl == k) else 0 for k in ids]
        ax.bar(x + (i - 0.5) * 0.4, med, width=0.4, color=col, label=lab)
    ax.set_xticks(x, [label_name(int(k)) for k in ids], rotation=45, ha="right")
    ax.set(ylabel="median intensity", title="Median intensity per label")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return "Intensity per label", write_figure(fig, out / "intensity_per_label.png")


def intensity_against_range(out: Path, sides: tuple[Side, Side], result: dict) -> tuple[str, Path]:
    """``intensity_vs_range.png``: each cloud's 2D histogram of intensity against range
    (one log colour scale), and the median intensity per range bin of both."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    a, b = (s.cloud for s in sides)
    edges = _range_edges_of(sides)
    scale = intensity_scale(a, b)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    redges = np.linspace(0.0, edges[-1], 81)
    iedges2 = np.linspace(0.0, scale, 65)
    hists = []
    for c, *_ in sides:
        if "intensity" in c:
            h, _, _ = np.histogram2d(ranges_m(c), np.asarray(c["intensity"], np.float64),
                                     bins=(redges, iedges2))  # fmt: skip
            hists.append(h / h.sum())
        else:
            hists.append(None)
    shown = [h[h > 0] for h in hists if h is not None]
    vmin = min((float(s.min()) for s in shown if s.size), default=1e-6)
    vmax = max((float(s.max()) for s in shown if s.size), default=1.0)
    mesh = None
    for ax, h, (_, lab, _col, side) in zip(axes[:2], hists, sides, strict=True):
        if h is None:
            _missing(ax, f"intensity not in {side}")
            continue
        mesh = ax.pcolormesh(redges, iedges2, np.ma.masked_equal(h.T, 0), cmap="viridis",
                             norm=LogNorm(vmin=vmin, vmax=vmax))  # fmt: skip
        ax.set(xlabel="range (m)", ylabel="intensity", title=lab)
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:2].tolist(), label="share of points", pad=0.01)
    mid = 0.5 * (redges[:-1] + redges[1:])
    for c, lab, col, _s in sides:
        if "intensity" in c:
            r = ranges_m(c)
            k = np.clip(np.digitize(r, redges) - 1, 0, len(mid) - 1)
            k[~np.isfinite(r)] = -1  # in no bin
            inten = np.asarray(c["intensity"], np.float64)
            med = np.array([np.median(inten[k == j]) if np.any(k == j) else np.nan
                            for j in range(len(mid))])  # fmt: skip
            axes[2].plot(mid, med, ".-", color=col, label=lab, ms=3)
    axes[2].set(xlabel="range (m)", ylabel="median intensity", title="Median per range bin",
                ylim=(0, scale))  # fmt: skip
    if any("intensity" in c for c in (a, b)):
        axes[2].legend(fontsize=7, loc="upper right")
    return "Intensity against range", write_figure(fig, out / "intensity_vs_range.png")


def range_images(out: Path, sides: tuple[Side, Side], result: dict) -> tuple[str, Path]:
    """``range_images.png``: both clouds' first returns as range images (rows = rings,
    columns = ``column`` or :data:`AZIMUTH_COLUMNS` azimuth bins), one colour scale,
    magenta where nothing returned."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    images = [_image_of(s.cloud) for s in sides]
    rows = max((im[0].shape[0] for im in images if im is not None), default=16)
    fig, axes = plt.subplots(
        2, 1, figsize=(16, 2 * max(2.2, min(rows * 0.09, 6.0)) + 1.6), layout="constrained"
    )
    rmax = max(float(np.nanmax(im[1])) for im in images if im is not None) if any(
        im is not None for im in images) else 1.0  # fmt: skip
    cmap = colormaps["turbo"].with_extremes(bad="magenta")
    mappable = None
    for ax, im, (_, lab, _c, side) in zip(axes, images, sides, strict=True):
        if im is None:
            _missing(ax, f"ring not in {side}")
            continue
        ret, rng, xlabel = im
        mappable = ax.imshow(np.ma.masked_invalid(rng), aspect="auto", origin="lower",
                             interpolation="nearest", cmap=cmap, vmin=0, vmax=rmax)  # fmt: skip
        dropped = 1 - float(ret.mean())
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(
            ylabel="ring",
            xlabel=xlabel,
            title=f"{lab}: range image, magenta = no return ({dropped:.1%} of pixels)",
        )
    if mappable is not None:
        fig.colorbar(mappable, ax=axes.tolist(), label="range (m)", pad=0.005, aspect=30)
    return "Range images (first returns)", write_figure(fig, out / "range_images.png")


#: The page's figures, in its order: each takes the folder, both sides and the figures, and
#: gives (title, PNG) or a note saying why it was not drawn.
FIGURES = (
    rings_figure,
    range_histogram,
    intensity_histogram,
    intensity_per_ring,
    intensity_per_label,
    intensity_against_range,
    range_images,
)


def write_compare_page(
    a: PointCloud, b: PointCloud, result: dict, out_dir: Path, names: tuple[str, str]
) -> list[Path]:
    """Write ``index.html`` and its PNG plots comparing A and B into ``out_dir``.

    Every file is written to a temporary name beside it, then renamed. The page opens with
    a table of ``result``'s figures, then shows (:data:`FIGURES`): points per ring, return
    share per ring, the range histogram, the intensity histogram, the median intensity per
    ring, the median intensity per label (when both clouds have labels), intensity against
    range (2D histograms side by side and binned medians), and both range images (rows =
    rings, columns = ``column`` or 1024 azimuth bins; magenta where nothing returned).
    Points :func:`compare_clouds` leaves out are left out of the plots too.

    Parameters
    ----------
    a, b : PointCloud
        The clouds :func:`compare_clouds` compared.
    result : dict
        Its result.
    out_dir : Path
        Folder to write into (created).
    names : (str, str)
        The names of A and B (their files), for the legends and the title.

    Returns
    -------
    list of Path
        The files written: the PNGs, then ``index.html``.
    """
    import matplotlib

    matplotlib.use("Agg")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sides = sides_of(a, b, names)
    figures: list[tuple[str, Path]] = []
    notes: list[str] = []
    for draw in FIGURES:
        drawn = draw(out, sides, result)
        if isinstance(drawn, str):
            notes.append(drawn)
        else:
            figures.append(drawn)
    page = _html(result, names, figures, notes)
    index = write_atomic(out / "index.html", page)
    return [p for _, p in figures] + [index]


def _rows(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [r for k, v in value.items() for r in _rows(f"{prefix}.{k}" if prefix else k, v)]
    if value is None:
        return [(prefix, f"null ({_why_null(prefix)})")]
    if isinstance(value, bool):
        return [(prefix, json.dumps(value))]
    if isinstance(value, list):
        text = ", ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in value)
        return [(prefix, text)]
    if isinstance(value, float):
        return [(prefix, f"{value:.6g}")]
    return [(prefix, str(value))]


def _why_null(key: str) -> str:
    """Why the figure ``key`` (a dotted path into the result) is null."""
    if key == "same_beams":
        return "A and B do not share one beam grid"
    if key.startswith("same_beams.ray_drop"):
        return "0/0: no pixel dropped where it divides"
    if key.startswith("nvs."):
        return ("undefined here: no shared beam grid, a field not in both, 0/0, an image "
                "under 7 x 7 or no scikit-image for SSIM, or equal images for PSNR")  # fmt: skip
    return "a field it needs is not in both clouds"


def _html(
    result: dict, names: tuple[str, str], figures: list[tuple[str, Path]], notes: list[str]
) -> str:
    e = html.escape
    table = "\n".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in _rows("", result))
    plots = "\n".join(
        f'<h2>{e(title)}</h2>\n<img src="{e(p.name)}" alt="{e(title)}">' for title, p in figures
    )
    plots += "".join(f"\n<p>{e(n)}</p>" for n in notes)
    raw = e(json.dumps(result, indent=1))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>compare {e(names[0])} / {e(names[1])}</title>
<style>body{{font-family:sans-serif;margin:1.5em;max-width:1500px}}
table{{border-collapse:collapse}}th,td{{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}}img{{max-width:100%}}</style></head><body>
<h1>A: {e(names[0])}<br>B: {e(names[1])}</h1>
<table>
{table}
</table>
{plots}
<details><summary>JSON</summary><pre>{raw}</pre></details>
</body></html>
"""
