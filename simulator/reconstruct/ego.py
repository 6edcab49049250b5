"""The vehicle under the sensor, estimated from a capture's frames on their beam grid.

A beam the sensor's own platform blocks gives nothing, or only a return from the body, in
every frame, whatever the vehicle drives past: the drop-outs a real sensor shows behind and
below itself. Per beam (ring, column), across the frames:

1. **blocked in a frame**: no return, or a return within the *body radius* (the gap in the
   distribution of the beams' nearest returns below the ground the lowest ring sees: the
   body's own points, when the driver keeps them, lie well inside it);
2. **candidate**: blocked in every frame its column fired, below the horizon (elevation
   < 0 in the sensor frame), on a ring that returns from beyond the body on at least
   ``min_ring_share`` of its beams (its neighbours do see the ground elsewhere);
3. **contiguous in azimuth**: runs of fewer than ``min_run_columns`` candidates on a ring
   are scattered drop-outs (a dark patch, a puddle), not a vehicle;
4. **held up from below**: only the candidates connected (ring and column neighbours,
   azimuth wrapping round) to the lowest live ring are the ego. A body under the sensor
   blocks a lower beam before a higher one at the same azimuth; the far ground a ring just
   below the horizon cannot reach, and the sky, are not held up by lower beams that drop
   out, as the lower beams see the ground there.

The ego found is written as a mesh in the sensor frame: for each blocked beam a quad across
the beam's footprint (half the column step either side in azimuth, half the gap to the next
ring above and below in elevation) about the beam's own origin, at ``distance_m``: just
inside the nearest return any ego beam or the lowest ring gave. An ``ego:`` section with
``mesh`` pointing to it blocks exactly these beams of the same scanner.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..io.atomic import atomic_path

__all__ = ["EgoEstimate", "EgoParams", "ego_section", "estimate_ego", "write_ego_mesh"]


@dataclass(frozen=True)
class EgoParams:
    """How the ego is told from the frames.

    Attributes
    ----------
    min_run_columns : int
        Fewest successive blocked columns on a ring that count (shorter runs are drop-outs).
    min_ring_share : float
        A ring counts when at least this share of its beams returns from beyond the body
        in some frame.
    body_gap_ratio : float
        The nearest returns below the lowest ring's ground are the body's when a gap of at
        least this ratio separates them from the rest.
    body_radius_m : float or None
        The body radius, m, when known; None: from the gap.
    inside : float
        The quads sit at this fraction of the nearest return (just inside it).
    """

    min_run_columns: int = 4
    min_ring_share: float = 0.5
    body_gap_ratio: float = 2.0
    body_radius_m: float | None = None
    inside: float = 0.9


@dataclass(frozen=True)
class EgoEstimate:
    """The beams the vehicle under the sensor blocks.

    Attributes
    ----------
    blocked : (C, W) bool
        The ego's beams (ring, column).
    body_radius_m : float
        Returns nearer than this count as the body's (0: none seen).
    distance_m : float
        Where the quads sit along each beam, m (0 when nothing is blocked).
    frames : int
        Frames it was estimated from.
    """

    blocked: NDArray[np.bool_]
    body_radius_m: float
    distance_m: float
    frames: int

    @property
    def empty(self) -> bool:
        """Whether no beam is blocked."""
        return not bool(self.blocked.any())

    def per_ring(self) -> list[int]:
        """Blocked beams of each ring (row of the grid)."""
        return self.blocked.sum(axis=1).astype(int).tolist()

    def line(self) -> str:
        """One line: the beams blocked and their rings."""
        rings = np.flatnonzero(self.blocked.any(axis=1))
        where = f" on rings {rings[0]} to {rings[-1]}" if len(rings) else ""
        return f"ego: {int(self.blocked.sum())} beams blocked{where} (from {self.frames} frames)"

    def summary(self, mesh: str | None) -> dict[str, Any]:
        """The figures ``summary.json`` records (``mesh``: the file written, if any)."""
        return {
            "beams": int(self.blocked.sum()),
            "blocked_per_ring": self.per_ring(),
            "body_radius_m": round(self.body_radius_m, 4),
            "distance_m": round(self.distance_m, 4),
            "frames": self.frames,
            "mesh": mesh,
        }


def _body_radius_m(
    nearest_m: NDArray[np.float64], below: NDArray[np.bool_], floor_m: float, ratio: float
) -> float:
    """The widest gap (as a ratio) among the beams' nearest returns below ``floor_m``; its
    geometric middle when at least ``ratio``, else 0 (no body returns)."""
    r = np.sort(nearest_m[below & np.isfinite(nearest_m) & (nearest_m > 0)])
    r = r[r <= floor_m]
    if len(r) < 2:
        return 0.0
    gaps = r[1:] / r[:-1]
    k = int(np.argmax(gaps))
    return float(np.sqrt(r[k] * r[k + 1])) if gaps[k] >= ratio else 0.0


def _long_runs(mask: NDArray[np.bool_], min_run: int) -> NDArray[np.bool_]:
    """``mask`` (C, W) without its runs along W (wrapping round) shorter than ``min_run``."""
    c, w = mask.shape
    start = np.argmin(mask, axis=1)  # a gap of each ring (a full ring: one run of W)
    cols = (np.arange(w)[None, :] + start[:, None]) % w
    rolled = np.take_along_axis(mask, cols, axis=1)  # no run wraps round now
    flat = np.pad(rolled, ((0, 0), (0, 1))).ravel()  # a gap after each ring
    edges = np.flatnonzero(np.diff(np.concatenate([[0], flat.astype(np.int8), [0]])))
    starts, ends = edges[::2], edges[1::2]
    long = (ends - starts) >= min_run
    marks = np.zeros(len(flat) + 1, dtype=np.int64)
    np.add.at(marks, starts[long], 1)
    np.add.at(marks, ends[long], -1)
    kept = (np.cumsum(marks)[:-1] > 0).reshape(c, w + 1)[:, :w]
    keep = np.zeros_like(mask)
    np.put_along_axis(keep, cols, kept, axis=1)
    return keep


def _held_from_below(
    mask: NDArray[np.bool_], order: NDArray[np.int64], bottom: int
) -> NDArray[np.bool_]:
    """The cells of ``mask`` (C, W) connected to row ``bottom`` through ring neighbours
    (rows adjacent in elevation, ``order`` lowest first) and column neighbours (wrapping
    round): a reconstruction by dilation, one whole-grid step at a time."""
    m = mask[order]  # lowest ring first
    low = int(np.flatnonzero(order == bottom)[0])
    reached = np.zeros_like(m)
    reached[low] = m[low]
    while True:
        grown = reached.copy()
        grown[1:] |= reached[:-1]
        grown[:-1] |= reached[1:]
        grown |= np.roll(reached, 1, axis=1) | np.roll(reached, -1, axis=1)
        grown &= m
        if (grown == reached).all():
            break
        reached = grown
    out = np.zeros_like(mask)
    out[order] = reached
    return out


def estimate_ego(
    range_m: NDArray[np.float64],
    fired: NDArray[np.bool_],
    elevation_rad: NDArray[np.float64],
    params: EgoParams | None = None,
) -> EgoEstimate:
    """The beams the vehicle under the sensor blocks, from frames on their beam grid (see
    the module).

    Parameters
    ----------
    range_m : (F, C, W) float64
        Each frame's first-return range per beam, m; NaN where the beam returned nothing.
    fired : (F, W) bool
        The columns each frame fired and received (a lost packet's are False).
    elevation_rad : (C,) float64
        Each ring's elevation in the sensor frame, rad.
    params : EgoParams, optional

    Returns
    -------
    EgoEstimate
    """
    p = params or EgoParams()
    range_m = np.asarray(range_m, dtype=np.float64)
    f, c, w = range_m.shape
    fired3 = np.broadcast_to(np.asarray(fired, dtype=bool)[:, None, :], range_m.shape)
    returned = np.isfinite(range_m) & fired3
    below = np.broadcast_to((np.asarray(elevation_rad) < 0.0)[:, None], (c, w))
    nearest = np.min(np.where(returned, range_m, np.inf), axis=0)  # (C, W)
    order = np.argsort(elevation_rad, kind="stable")
    radius = p.body_radius_m
    if radius is None:
        floor = nearest[order[0]]
        floor_m = float(np.median(floor[np.isfinite(floor)])) if np.isfinite(floor).any() else 0.0
        radius = _body_radius_m(nearest, below, floor_m, p.body_gap_ratio)
    beyond = returned & (range_m >= radius)  # a return from the scene, not the body
    live = beyond.any(axis=0).mean(axis=1) >= p.min_ring_share  # (C,)
    candidate = fired3.any(axis=0) & ~beyond.any(axis=0) & below & live[:, None]
    candidate = _long_runs(candidate, p.min_run_columns)
    lowest_live = order[np.isin(order, np.flatnonzero(live & (elevation_rad < 0)))]
    if len(lowest_live) == 0 or not candidate.any():
        return EgoEstimate(np.zeros((c, w), dtype=bool), float(radius), 0.0, f)
    blocked = _held_from_below(candidate, order, int(lowest_live[0]))
    if not blocked.any():
        return EgoEstimate(blocked, float(radius), 0.0, f)
    ego_near = nearest[blocked & np.isfinite(nearest)]
    floor = nearest[int(lowest_live[0])]
    near_m = min([*ego_near.tolist(), float(np.min(floor[np.isfinite(floor)]))])
    return EgoEstimate(blocked, float(radius), p.inside * near_m, f)


def ego_mesh(
    estimate: EgoEstimate, origin_m: NDArray[np.float64], direction: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The ego as quads, one a blocked beam, in the frame of the beams given.

    Parameters
    ----------
    estimate : EgoEstimate
    origin_m, direction : (C, W, 3) float64
        The scanner's beams (:func:`simulator.reconstruct.grid.beam_rays`).

    Returns
    -------
    vertices : (4K, 3) float64
    faces : (2K, 3) int64
        K blocked beams; each quad faces its beam's origin.
    """
    c, w = estimate.blocked.shape
    ring, column = np.nonzero(estimate.blocked)
    d = direction[ring, column]
    azimuth = np.arctan2(d[:, 1], d[:, 0])
    elevation = np.arcsin(np.clip(d[:, 2], -1.0, 1.0))
    # half the gap to the ring above and below (each ring's mean elevation)
    ring_el = np.arcsin(np.clip(direction[..., 2], -1.0, 1.0)).mean(axis=1)
    order = np.argsort(ring_el)
    sorted_el = ring_el[order]
    gaps = np.diff(sorted_el)
    edge = gaps.min() if len(gaps) else np.radians(1.0)
    half_up = np.zeros(c)
    half_down = np.zeros(c)
    half_up[order] = np.r_[gaps, edge] / 2
    half_down[order] = np.r_[edge, gaps] / 2
    half_az = np.pi / w
    corners_az = azimuth[:, None] + half_az * np.array([-1.0, 1.0, 1.0, -1.0])
    corners_el = elevation[:, None] + np.stack(
        [-half_down[ring], -half_down[ring], half_up[ring], half_up[ring]], axis=1
    )
    unit = np.stack(
        [np.cos(corners_el) * np.cos(corners_az), np.cos(corners_el) * np.sin(corners_az),
         np.sin(corners_el)], axis=-1,
    )  # (K, 4, 3)  # fmt: skip
    vertices = origin_m[ring, column][:, None, :] + estimate.distance_m * unit
    base = 4 * np.arange(len(ring))[:, None]
    faces = np.concatenate([base + np.array([0, 2, 1]), base + np.array([0, 3, 2])])
    return vertices.reshape(-1, 3), faces.astype(np.int64)


def write_ego_mesh(
    path: Path,
    estimate: EgoEstimate,
    origin_m: NDArray[np.float64],
    direction: NDArray[np.float64],
) -> Path:
    """Write :func:`ego_mesh` as a PLY file (through a temporary file); the path."""
    import trimesh

    vertices, faces = ego_mesh(estimate, origin_m, direction)
    mesh = trimesh.Trimesh(vertices, faces, process=False)
    with atomic_path(path) as tmp:
        mesh.export(tmp, file_type="ply")
    return path


def ego_section(mesh: str) -> dict[str, Any]:
    """A survey's ``ego:`` section for the mesh at ``mesh`` (relative to the survey)."""
    return {"mesh": mesh}
