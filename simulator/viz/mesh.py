"""The pictures of a reconstruction's mesh, for the page of ``lidar-sim reconstruct``
(:mod:`simulator.viz.reconstruct`).

:func:`mesh_pictures` draws three PNGs (matplotlib, Agg) into the reconstruction's folder:

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

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from numpy.typing import NDArray

from ..io.atomic import atomic_path, write_figure

__all__ = [
    "ColourScale",
    "FlatTriangles",
    "faces_to_draw",
    "histogram_edges",
    "longest_edge_m",
    "mesh_pictures",
    "slope_shaded",
    "write_palette_png",
]

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


def mesh_pictures(
    folder: Path,
    vertices_m: NDArray[np.float64],
    faces: NDArray[np.int64],
    reflectance: NDArray[np.float64],
    poses: NDArray[np.float64],
    numbers: Sequence[int],
    held_out: set[int],
) -> list[tuple[Path, str]]:
    """Draw the mesh's three pictures into ``folder`` (see the module), in one colour scale.

    Parameters
    ----------
    folder : Path
        Where to write them (it exists).
    vertices_m : (V, 3) float64
        The mesh's vertices, world frame, m.
    faces : (F, 3) int64
        Its triangles, as vertex indices.
    reflectance : (F,) float64
        Each face's reflectance.
    poses : (K, 4, 4) float64
        The world-from-sensor poses of the frames ``numbers``, in that order.
    numbers : sequence of int
        The frames' numbers.
    held_out : set of int
        The numbers of the held-out frames (drawn in red).

    Returns
    -------
    list of (Path, str)
        ``mesh_top.png``, ``mesh_oblique.png`` and ``reflectance_hist.png``, each with its
        caption.
    """
    held = np.array([n in held_out for n in numbers], dtype=bool)
    scale = ColourScale.of(reflectance)
    colours = scale.rgba(reflectance)
    corners = vertices_m[faces]
    _, half = _top_window(corners.mean(axis=1), poses[:, :3, 3])
    return [
        _draw_top(folder / "mesh_top.png", corners, colours, scale, poses[:, :3, 3], numbers,
                  held_out),
        _draw_oblique(folder / "mesh_oblique.png", vertices_m, faces, colours, scale, poses,
                      held, numbers[0], half),
        _draw_histogram(folder / "reflectance_hist.png", reflectance, scale),
    ]  # fmt: skip
