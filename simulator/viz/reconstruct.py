"""The page of ``lidar-sim reconstruct``: the scene it made, the frames it used, its scores.

:func:`write_reconstruct_page` writes ``index.html`` into the reconstruction's folder, beside
three PNGs (matplotlib, Agg):

``mesh_top.png``
    The mesh from straight above, every face coloured by its reflectance and darkened by
    its slope, with the sensor's path over it and each frame's number (an inset enlarges
    the path when it is small beside the scene).
``mesh_oblique.png``
    The mesh in perspective, from behind and above the path's start, looking along it.
``reflectance_hist.png``
    How many faces have each reflectance, the bars coloured as the faces are.

One colour scale serves all three: viridis in :data:`COLOUR_STEPS` steps, logarithmic, over
the faces' 1st to 99th percentile of reflectance (a street's span two decades: asphalt a
few per cent, paint and signs tens of per cent, retro-reflectors above 1).

Then come the scores (a row per frame, protocol and method, linked to the row's compare
page where one was written), the frames and their poses, the mesh's facts, the detection
threshold and the seconds each stage took. The page reads offline: relative links, no
script, no external style; every text is escaped.

**How a view is drawn.** The faces are projected (orthographically from above, or through a
pinhole camera) and drawn in one call of the renderer (:class:`FlatTriangles`), in order:
in perspective far to near (the painter's algorithm, by the centroid's depth); from above
longest first, so that the finely sampled surfaces lie over the long slivers that bridge
gaps between returns. Faces outside the picture are left out, and of the faces smaller
than a pixel only the one drawn last in each pixel is kept (the others could not show);
every other face is drawn, none is sampled away. The pictures are then written as
palette PNGs: their colours are the scale's steps (times the top view's
:data:`SHADE_STEPS` slope shades), greys and the held-out red, so each fits 256 colours
(Agg's anti-aliased edges take the nearest). On the Ouster OS-1-128 sample (460 k faces)
the page takes about 2 s and its PNGs 0.5 MB together.
"""

from __future__ import annotations

import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from numpy.typing import ArrayLike, NDArray

from ..compare import NVS_TABLE_KEYS as TABLE_KEYS
from ..io.atomic import atomic_path, write_atomic, write_figure
from ..transforms import rpy_deg_from_rotation

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

#: Most frame numbers written along the path (the first, the last and every held-out frame
#: are always written).
MAX_PATH_LABELS = 20

#: The perspective view's picture, pixels, and its horizontal field of view, degrees.
OBLIQUE_PX = (1280, 760)
OBLIQUE_FOV_DEG = 70.0

#: The top-down view's height, inches at 100 dpi.
TOP_INCHES = 9.0

#: The colour scale's steps.
COLOUR_STEPS = 48

#: The share of its colour a vertical face keeps in the top-down view (a level face keeps
#: all of it), and how many shades there are from one to the other.
WALL_SHADE = 0.3
SHADE_STEPS = 4

#: The colour of a held-out frame's marker and number.
HELD_OUT_COLOUR = "tab:red"


@dataclass(frozen=True)
class ColourScale:
    """The reflectance colours of every picture.

    Attributes
    ----------
    norm : matplotlib.colors.LogNorm
        Over the faces' 1st to 99th percentile (at least a decade).
    cmap : matplotlib.colors.Colormap
        viridis in :data:`COLOUR_STEPS` steps.
    """

    norm: Any
    cmap: Any

    @classmethod
    def of(cls, reflectance: NDArray[np.float64]) -> ColourScale:
        """The scale for these per-face reflectances, (F,)."""
        from matplotlib import colormaps
        from matplotlib.colors import LogNorm

        positive = reflectance[np.isfinite(reflectance) & (reflectance > 0)]
        lo, hi = np.percentile(positive, [1, 99]) if len(positive) else (0.01, 1.0)
        lo = max(float(lo), 1e-4)
        norm = LogNorm(lo, max(float(hi), 10.0 * lo))
        return cls(norm, colormaps["viridis"].resampled(COLOUR_STEPS))

    def rgba(self, reflectance: NDArray[np.float64]) -> NDArray[np.float64]:
        """(F, 4) colours of reflectances (F,); zero or less takes the lowest colour."""
        r = np.maximum(np.nan_to_num(reflectance, nan=0.0), self.norm.vmin * 1e-3)
        return self.cmap(self.norm(r))

    def colorbar(self, fig: Any, **kwargs: Any) -> None:
        """A colour bar of the scale (``kwargs``: where, as :meth:`Figure.colorbar`)."""
        from matplotlib.cm import ScalarMappable

        fig.colorbar(ScalarMappable(self.norm, self.cmap), extend="both",
                     label="reflectance (log scale)", **kwargs)  # fmt: skip

    def palette(self, shades: int = 1) -> NDArray[np.uint8]:
        """(P, 3) every colour a picture may hold, P <= 256: the steps (in ``shades`` slope
        shades, as :func:`slope_shaded` makes them), 16 greys and the held-out red."""
        from matplotlib.colors import to_rgb

        steps = self.cmap(np.arange(COLOUR_STEPS))[:, :3]
        factors = _shade_factors(shades)
        colours = [steps * f for f in factors]
        colours += [np.linspace(0.0, 1.0, 16)[:, None].repeat(3, axis=1)]
        colours += [np.array([to_rgb(HELD_OUT_COLOUR)])]
        return np.unique(np.round(np.vstack(colours) * 255).astype(np.uint8), axis=0)[:256]


def _shade_factors(shades: int) -> NDArray[np.float64]:
    """(shades,) the factors of :func:`slope_shaded`, from a vertical face's to 1."""
    return np.linspace(WALL_SHADE, 1.0, shades) if shades > 1 else np.ones(1)


def slope_shaded(
    corners_m: NDArray[np.float64], colours: NDArray[np.float64]
) -> NDArray[np.float64]:
    """Colours (F, 4) darkened by each face's slope, in :data:`SHADE_STEPS` shades: a level
    face keeps its colour, a vertical one :data:`WALL_SHADE` of it. From above, walls,
    trunks and kerbs then draw dark lines around the ground's colours.

    Parameters
    ----------
    corners_m : (F, 3, 3) float64
        The faces' corners, m.
    colours : (F, 4) float64
        Their RGBA colours.
    """
    normal = np.cross(corners_m[:, 1] - corners_m[:, 0], corners_m[:, 2] - corners_m[:, 0])
    length = np.linalg.norm(normal, axis=1)
    level = np.divide(np.abs(normal[:, 2]), length, out=np.zeros(len(normal)), where=length > 0)
    factors = _shade_factors(SHADE_STEPS)
    shaded = colours.copy()
    shaded[:, :3] *= factors[np.rint(level * (SHADE_STEPS - 1)).astype(np.int64)][:, None]
    return shaded


def longest_edge_m(corners_m: NDArray[np.float64]) -> NDArray[np.float64]:
    """(F,) each face's longest edge, m, of its corners (F, 3, 3) m."""
    edges = corners_m - np.roll(corners_m, 1, axis=1)
    return np.sqrt((edges**2).sum(axis=2)).max(axis=1)


def faces_to_draw(
    corners_px: NDArray[np.float64], depth: NDArray[np.float64], size_px: tuple[int, int]
) -> NDArray[np.int64]:
    """The faces a picture needs, in the order to draw them (farthest first).

    A face is left out when it lies wholly outside the picture, or when it is smaller than
    a pixel and another such face nearer the viewer falls in the same pixel.

    Parameters
    ----------
    corners_px : (F, 3, 2) float64
        The faces' corners in the picture, pixels (x right, y up; the picture is
        ``[0, width] x [0, height]``).
    depth : (F,) float64
        How far each face is from the viewer (any unit; larger is farther, drawn first).
    size_px : (int, int)
        The picture's width and height, pixels.

    Returns
    -------
    (D,) int64
        Indices of the faces to draw, farthest first.
    """
    width, height = size_px
    lo, hi = corners_px.min(axis=1), corners_px.max(axis=1)
    inside = (hi[:, 0] >= 0) & (lo[:, 0] <= width) & (hi[:, 1] >= 0) & (lo[:, 1] <= height)
    small = inside & ((hi - lo).max(axis=1) < 1.0)
    big = np.flatnonzero(inside & ~small)
    tiny = np.flatnonzero(small)
    cell = np.floor(corners_px[tiny].mean(axis=1)).astype(np.int64) + 1  # from 0
    pixel = cell[:, 1] * (width + 3) + cell[:, 0]
    order = np.lexsort((depth[tiny], pixel))
    first = np.ones(len(order), dtype=bool)
    first[1:] = pixel[order][1:] != pixel[order][:-1]
    keep = np.concatenate([big, tiny[order[first]]])
    return keep[np.argsort(-depth[keep], kind="stable")]


class FlatTriangles(Artist):
    """Triangles of one colour each, in data coordinates, drawn in the order given.

    They go to the renderer as Gouraud triangles with three equal corner colours: Agg draws
    those straight from the arrays, where a
    :class:`~matplotlib.collections.PolyCollection` first makes a ``Path`` a triangle (a
    second for 400 k of them) and then draws them more slowly.

    Parameters
    ----------
    corners : (N, 3, 2) float64
        The triangles' corners, data coordinates.
    colours : (N, 4) float64
        Their RGBA colours.
    """

    def __init__(self, corners: NDArray[np.float64], colours: NDArray[np.float64]) -> None:
        super().__init__()
        self.corners = np.ascontiguousarray(corners, dtype=np.float64)
        self.colours = np.ascontiguousarray(np.repeat(colours[:, None, :], 3, axis=1))
        self.set_zorder(1)

    def draw(self, renderer: Any) -> None:
        """Draw the triangles, clipped to the axes."""
        if not self.get_visible() or not len(self.corners) or self.axes is None:
            return
        gc = renderer.new_gc()
        gc.set_clip_rectangle(self.axes.bbox)
        renderer.draw_gouraud_triangles(gc, self.corners, self.colours,
                                        self.axes.transData.frozen())  # fmt: skip
        gc.restore()
        self.stale = False


def write_palette_png(fig: Any, path: Path, palette: NDArray[np.uint8], dpi: int = 100) -> Path:
    """Write a figure as an 8-bit palette PNG (cropped to its contents, written to a
    temporary name and renamed), every pixel taking the nearest of ``palette`` (P, 3)
    colours, P <= 256; close the figure and return ``path``."""
    import matplotlib.pyplot as plt
    from PIL import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight",
                pil_kwargs={"compress_level": 1})  # fmt: skip
    plt.close(fig)
    buffer.seek(0)
    image = Image.open(buffer).convert("RGB")
    table = Image.new("P", (1, 1))
    table.putpalette(np.vstack([palette, np.repeat(palette[-1:], 256 - len(palette), axis=0)])
                     .ravel().tolist())  # fmt: skip
    with atomic_path(path) as tmp:
        image.quantize(palette=table, dither=Image.Dither.NONE).save(tmp, format="PNG")
    return path


def _label_indices(numbers: Sequence[int], held_out: set[int]) -> list[int]:
    """Which frames' numbers are written along the path."""
    n = len(numbers)
    step = max(1, -(-n // MAX_PATH_LABELS))
    return [i for i in range(n) if i % step == 0 or i == n - 1 or numbers[i] in held_out]


def _draw_path(
    ax: Any, xy_m: NDArray[np.float64], numbers: Sequence[int], held_out: set[int], labels: bool
) -> None:
    """The sensor's path on a top-down axes: a line, a marker a frame, the numbers."""
    import matplotlib.patheffects as pe

    held = np.array([n in held_out for n in numbers], dtype=bool)
    ax.plot(xy_m[:, 0], xy_m[:, 1], "-", color="black", lw=1.2, zorder=3)
    ax.plot(*xy_m[~held].T, "o", ms=6, mfc="white", mec="black", zorder=4, label="scene frame")
    if held.any():
        ax.plot(*xy_m[held].T, "s", ms=7, mfc=HELD_OUT_COLOUR, mec="black", zorder=4,
                label="held-out frame")  # fmt: skip
    if not labels:
        return
    outline = [pe.withStroke(linewidth=3, foreground="white")]
    for i in _label_indices(numbers, held_out):
        ax.annotate(str(numbers[i]), xy_m[i], xytext=(5, 5), textcoords="offset points",
                    fontsize=9, fontweight="bold" if held[i] else "normal",
                    color=HELD_OUT_COLOUR if held[i] else "black", path_effects=outline,
                    zorder=5)  # fmt: skip


def _top_window(
    centroids_m: NDArray[np.float64], positions_m: NDArray[np.float64]
) -> tuple[NDArray[np.float64], float]:
    """The top-down view's centre (2,) and half side, m: about the path, wide enough for
    95 % of the faces (their centroids (F, 3), m)."""
    centre = 0.5 * (positions_m[:, :2].min(axis=0) + positions_m[:, :2].max(axis=0))
    half = 0.6 * float(np.ptp(positions_m[:, :2], axis=0).max()) + 1.0
    if len(centroids_m):
        reach = np.abs(centroids_m[:, :2] - centre).max(axis=1)
        half = max(half, 1.05 * float(np.percentile(reach, 95)))
    return centre, half


def _top_view(
    ax: Any,
    corners_m: NDArray[np.float64],
    colours: NDArray[np.float64],
    longest_m: NDArray[np.float64],
    centre: NDArray[np.float64],
    half_m: float,
    cells: int,
) -> int:
    """Draw faces (F, 3, 3) m from above into ``ax``, over the square ``centre +- half_m``,
    longest first; ``cells`` pixels a side for leaving out hidden sub-pixel faces. Returns
    how many faces were drawn."""
    xy = corners_m[:, :, :2]
    order = faces_to_draw((xy - (centre - half_m)) * (cells / (2.0 * half_m)), longest_m,
                          (cells, cells))  # fmt: skip
    ax.add_artist(FlatTriangles(xy[order], colours[order]))
    ax.set_xlim(centre[0] - half_m, centre[0] + half_m)
    ax.set_ylim(centre[1] - half_m, centre[1] + half_m)
    ax.set_aspect("equal")
    return len(order)


def _emptiest_corner(
    xy_m: NDArray[np.float64], centre: NDArray[np.float64], half_m: float, share: float
) -> tuple[float, float]:
    """The lower-left corner, in axes units, of the corner square (``share`` of the side) of
    the view holding the fewest of the points (N, 2) m."""
    rel = (xy_m - (centre - half_m)) / (2.0 * half_m)
    corners = [(x, y) for y in (1.0 - share, 0.0) for x in (1.0 - share, 0.0)]
    counts = [
        int(np.count_nonzero(((rel >= (x, y)) & (rel <= (x + share, y + share))).all(axis=1)))
        for x, y in corners
    ]
    return corners[int(np.argmin(counts))]


def _draw_top(
    path: Path,
    corners_m: NDArray[np.float64],
    colours: NDArray[np.float64],
    scale: ColourScale,
    positions_m: NDArray[np.float64],
    numbers: Sequence[int],
    held_out: set[int],
) -> tuple[Path, str]:
    """``mesh_top.png`` and its caption."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(TOP_INCHES + 1.2, TOP_INCHES), dpi=100)
    longest = longest_edge_m(corners_m)
    shaded = slope_shaded(corners_m, colours)
    centroids = corners_m.mean(axis=1)
    centre, half = _top_window(centroids, positions_m)
    drawn = _top_view(ax, corners_m, shaded, longest, centre, half, int(TOP_INCHES * 100))
    extent = float(np.ptp(positions_m[:, :2], axis=0).max())
    inset = extent < 0.1 * half
    _draw_path(ax, positions_m[:, :2], numbers, held_out, labels=not inset)
    ax.set(xlabel="x, m (world)", ylabel="y, m (world)",
           title=f"The mesh from above: {drawn:,} of {len(corners_m):,} faces drawn")  # fmt: skip
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=2, fontsize=8,
              frameon=False)  # fmt: skip
    if inset:  # the path is a speck beside the scene: enlarge it
        inner = max(0.75 * extent, 0.08 * half, 1.0)
        middle = 0.5 * (positions_m[:, :2].min(axis=0) + positions_m[:, :2].max(axis=0))
        x, y = _emptiest_corner(centroids[:, :2], centre, half, 0.36)
        sub = ax.inset_axes((x + 0.01, y + 0.01, 0.34, 0.34))
        near = np.abs(centroids[:, :2] - middle).max(axis=1) < 4 * inner
        _top_view(sub, corners_m[near], shaded[near], longest[near], middle, inner, 300)
        _draw_path(sub, positions_m[:, :2], numbers, held_out, labels=True)
        sub.set_xticks([])
        sub.set_yticks([])
        sub.text(0.5, 0.98, f"the path, enlarged: {2 * inner:.1f} m across", fontsize=8,
                 ha="center", va="top", transform=sub.transAxes,
                 bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8})  # fmt: skip
        ax.indicate_inset_zoom(sub, edgecolor="black")
    scale.colorbar(fig, ax=ax, fraction=0.046, pad=0.02)
    caption = (
        f"The mesh from straight above, {2 * half:.0f} m across about the path (95 % of its "
        "faces fall in it). Each face is coloured by its reflectance and darkened by its "
        f"slope: a level face shows the colour bar's colour, a vertical one {WALL_SHADE:.0%} "
        "of it, so walls, trunks and kerbs draw dark lines. Where faces overlap the shorter "
        "shows: the long slivers that bridge gaps between returns lie under the finely "
        "sampled surfaces. Faces not drawn lie outside the view or under another in a "
        "pixel. Line and markers: the sensor's path, a marker a frame (white circle: in the "
        "scene; red square: held out), with the frames' numbers"
        + (" in the enlarged inset." if inset else ".")
    )
    return write_palette_png(fig, path, scale.palette(SHADE_STEPS)), caption


def _camera(
    positions_m: NDArray[np.float64], poses: NDArray[np.float64], half_m: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The perspective view's eye and the point it looks at, (3,) m each: behind the path's
    start and above it, looking along the path (or the first frame's forward axis when the
    path is under a metre)."""
    travel = positions_m[-1, :2] - positions_m[0, :2]
    heading = travel if np.linalg.norm(travel) > 1.0 else poses[0, :2, 0]
    if np.linalg.norm(heading) < 1e-6:
        heading = np.array([1.0, 0.0])
    ahead = np.append(heading / np.linalg.norm(heading), 0.0)
    start = positions_m[0]
    eye = start - 0.45 * half_m * ahead + np.array([0.0, 0.0, 0.35 * half_m])
    return eye, start + 0.35 * half_m * ahead


def _project(
    points_m: NDArray[np.float64], eye: NDArray[np.float64], target: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Pinhole projection of points (..., 3) m: their pixels (..., 2) in the
    :data:`OBLIQUE_PX` picture (x right, y up), and their depth along the view (...,), m."""
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    rel = points_m - eye
    depth = rel @ forward
    width, height = OBLIQUE_PX
    focal = 0.5 * width / np.tan(np.radians(OBLIQUE_FOV_DEG) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 0.5 * width + focal * (rel @ right) / depth
        y = 0.5 * height + focal * (rel @ up) / depth
    return np.stack([x, y], axis=-1), depth


def _draw_oblique(
    path: Path,
    vertices_m: NDArray[np.float64],
    faces: NDArray[np.int64],
    colours: NDArray[np.float64],
    scale: ColourScale,
    poses: NDArray[np.float64],
    held: NDArray[np.bool_],
    first_frame: int,
    half_m: float,
) -> tuple[Path, str]:
    """``mesh_oblique.png`` and its caption."""
    import matplotlib.pyplot as plt

    positions = poses[:, :3, 3]
    eye, target = _camera(positions, poses, half_m)
    px, depth = _project(vertices_m, eye, target)
    corners, face_depth = px[faces], depth[faces]
    ahead = np.flatnonzero((face_depth > 0.5).all(axis=1))
    order = ahead[faces_to_draw(corners[ahead], face_depth[ahead].mean(axis=1), OBLIQUE_PX)]
    width, height = OBLIQUE_PX
    fig = plt.figure(figsize=(width / 100 + 1.3, height / 100), dpi=100)
    ax = fig.add_axes((0.0, 0.0, width / (width + 130.0), 1.0))
    ax.add_artist(FlatTriangles(corners[order], colours[order]))
    sensor_px, sensor_depth = _project(positions, eye, target)
    seen = sensor_depth > 0.5
    ax.plot(*sensor_px[seen & ~held].T, "o", ms=6, mfc="white", mec="black")
    ax.plot(*sensor_px[seen & held].T, "s", ms=7, mfc=HELD_OUT_COLOUR, mec="black")
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    scale.colorbar(fig, cax=fig.add_axes((width / (width + 130.0) + 0.01, 0.1, 0.018, 0.8)))
    d = target - eye
    caption = (
        f"The mesh in perspective ({OBLIQUE_FOV_DEG:.0f}° across), seen from "
        f"{eye[2] - positions[0, 2]:.0f} m above and {np.hypot(*(positions[0, :2] - eye[:2])):.0f}"
        f" m behind frame {first_frame}, looking along yaw "
        f"{np.degrees(np.arctan2(d[1], d[0])):.0f}° and "
        f"{np.degrees(np.arctan2(-d[2], np.hypot(d[0], d[1]))):.0f}° down; each face in the "
        f"colour of its reflectance, the nearest in front; {len(order):,} faces drawn. "
        "Markers: the sensor at each frame (red: held out)."
    )
    return write_palette_png(fig, path, scale.palette()), caption


def histogram_edges(values: NDArray[np.float64], bins: int = 60) -> NDArray[np.float64]:
    """Bin edges even on a log scale over positive values, snapped between steps when the
    values come in steps (as a reflectance rounded to 0.005 does), so that no bin falls
    between two steps and stays empty.

    Parameters
    ----------
    values : (N,) float64
        Positive values, N >= 1.
    bins : int
        How many bins before snapping (fewer after: two edges may snap together).

    Returns
    -------
    (B + 1,) float64
        Increasing edges, the first below every value and the last above.
    """
    lo, hi = float(values.min()), float(values.max())
    if hi <= lo * 1.01:
        return np.array([lo / 1.1, hi * 1.1])
    gaps = np.diff(np.unique(values))
    gaps = gaps[gaps > 1e-9 * hi]
    step = float(np.median(gaps)) if len(gaps) else 0.0
    steps = values / step if step > 0 else values
    stepped = step > 0 and bool(np.all(np.abs(steps - np.rint(steps)) < 0.01))
    first = (np.floor(lo / step - 0.5) + 0.5) * step if stepped else 0.0
    if first <= 0 or step > 0.25 * (hi - lo):
        return np.geomspace(lo, hi, bins + 1) * np.r_[0.999, np.ones(bins - 1), 1.001]
    last = (np.ceil(hi / step - 0.5) + 0.5) * step
    return np.unique((np.round(np.geomspace(first, last, bins + 1) / step - 0.5) + 0.5) * step)


def _draw_histogram(
    path: Path, reflectance: NDArray[np.float64], scale: ColourScale
) -> tuple[Path, str]:
    """``reflectance_hist.png`` and its caption."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 3.8), dpi=100)
    positive = reflectance[np.isfinite(reflectance) & (reflectance > 0)]
    if len(positive):
        edges = histogram_edges(positive)
        counts, _ = np.histogram(positive, edges)
        mid = np.sqrt(edges[1:] * edges[:-1])
        ax.bar(edges[:-1], counts, width=np.diff(edges), align="edge",
               color=scale.cmap(scale.norm(mid)), edgecolor="none")  # fmt: skip
        median = float(np.median(reflectance))
        ax.axvline(median, color="black", ls="--", lw=1, label=f"median {median:.3g}")
        ax.legend(fontsize=8)
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no face with a reflectance above 0", ha="center",
                transform=ax.transAxes)  # fmt: skip
    ax.set(xlabel="reflectance (log scale)", ylabel="faces in the bin",
           title=f"Reflectance of the {len(reflectance):,} faces")  # fmt: skip
    caption = (
        "Each face's reflectance: bins even on the log scale (where the values come in "
        "steps, each bin holds whole steps, the narrowest one), coloured as the views."
    )
    rest = len(reflectance) - len(positive)
    if rest:
        caption += f" {rest:,} faces at 0 or less (or not a number) are not drawn."
    return write_figure(fig, path, dpi=100), caption


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
    held = np.array([n in held_out for n in numbers], dtype=bool)
    scale = ColourScale.of(r)
    colours = scale.rgba(r)
    corners = v[f]
    _, half = _top_window(corners.mean(axis=1), p[:, :3, 3])
    figures = [
        _draw_top(folder / "mesh_top.png", corners, colours, scale, p[:, :3, 3], numbers,
                  held_out),
        _draw_oblique(folder / "mesh_oblique.png", v, f, colours, scale, p, held, numbers[0],
                      half),
        _draw_histogram(folder / "reflectance_hist.png", r, scale),
    ]  # fmt: skip
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
