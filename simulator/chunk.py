"""What one chunk of pulses carries between the pipeline's steps.

A chunk is a contiguous range of global pulse ids. These records hold its rays as cast,
the sensor's pose at its pulses and the ray engine's hits; every step of the pipeline
(:mod:`simulator.pipeline.simulation`) takes and returns them, so each step can be called and tested
on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["CastChunk", "Hits", "Layer", "PulsePoses", "Rays", "positions_in", "world_rays"]


#: :func:`positions_in` uses a rank table when it has at most this many entries a key or
#: value (a chunk's indices: one entry a ray or pulse), else binary searches.
_RANK_TABLE_MOST = 64


def positions_in(
    keys: NDArray[np.integer], values: NDArray[np.integer]
) -> tuple[NDArray[np.intp], NDArray[np.bool_]]:
    """Where each of ``values`` stands in the increasing ``keys``, and whether it is there
    at all: (V,) intp positions (meaningful where found) and (V,) bool found.

    Keys and values are indices (rays, pulses) of a chunk: where they are small
    non-negative integers the positions come from a table of each key's rank (a scatter
    and a gather, a tenth of the binary searches' time), else from ``np.searchsorted``.
    """
    keys, values = np.asarray(keys), np.asarray(values)
    if len(keys) == 0 or len(values) == 0:
        return np.zeros(len(values), dtype=np.intp), np.zeros(len(values), dtype=bool)
    lowest = min(int(keys[0]), int(values.min()))
    top = max(int(keys[-1]), int(values.max())) + 1
    if lowest >= 0 and top <= _RANK_TABLE_MOST * (len(keys) + len(values)):
        rank = np.full(top, -1, dtype=np.intp)
        rank[keys] = np.arange(len(keys))
        pos = rank[values]
        return pos, pos >= 0
    pos = np.searchsorted(keys, values)
    return pos, keys[np.minimum(pos, len(keys) - 1)] == values


@dataclass
class Hits:
    """Result of casting N rays.

    Attributes
    ----------
    range_m : (N,) float32
        Distance along the unit direction to the first hit; ``inf`` for a miss.
    object_index : (N,) int32
        Index into ``Scene.objects``; -1 for a miss.
    normal : (N, 3) float32
        Unit normal of the hit triangle (as wound, not yet turned to the sensor);
        zero for a miss.
    material_row : (N,) int32 or None
        The row of the scene's material lookups of each hit
        (:attr:`simulator.steps.tables.SceneTables.material_of_row`): the object's index for an
        object of one material, its face's own row for an object with per-face
        materials (:meth:`simulator.world.scene.Scene.face_row_starts`); -1 for a miss. None
        when no object of the scene has per-face materials (the row is the object).
        Only the per-hit model reads it: everything else (echoes, labels, the
        footprint test, see-through surfaces) goes by the object.
    """

    range_m: NDArray[np.float32]
    object_index: NDArray[np.int32]
    normal: NDArray[np.float32]
    material_row: NDArray[np.int32] | None = None

    @property
    def hit(self) -> NDArray[np.bool_]:
        """(N,) bool: which rays hit something."""
        return self.object_index >= 0

    @property
    def rows(self) -> NDArray[np.int32]:
        """(N,) int32: each hit's material row (``material_row``, or the object where
        there are no per-face materials)."""
        return self.object_index if self.material_row is None else self.material_row

    def take(self, rows: NDArray[np.intp]) -> Hits:
        """The hits of some of the rays."""
        face = None if self.material_row is None else self.material_row[rows]
        return Hits(self.range_m[rows], self.object_index[rows], self.normal[rows], face)

    def put(self, rows: NDArray[np.intp], other: Hits) -> None:
        """Replace the hits of the rays ``rows`` by ``other``'s, in place."""
        self.range_m[rows], self.object_index[rows] = other.range_m, other.object_index
        self.normal[rows] = other.normal
        if self.material_row is not None:
            self.material_row[rows] = other.rows

    @classmethod
    def concatenate(cls, parts: list[Hits]) -> Hits:
        """The hits of several casts, one after the other."""
        faces = any(h.material_row is not None for h in parts)
        return cls(
            np.concatenate([h.range_m for h in parts]),
            np.concatenate([h.object_index for h in parts]),
            np.concatenate([h.normal for h in parts]),
            np.concatenate([h.rows for h in parts]) if faces else None,
        )


@dataclass(frozen=True)
class PulsePoses:
    """World-from-sensor poses: one for every pulse of a chunk, or one for all.

    Attributes
    ----------
    rotation : (1, 3, 3) or (P, 3, 3) float64
        Its columns are the sensor's axes in the world. One row when the sensor does not
        turn during the chunk.
    position_m : (1, 3) or (P, 3) float64
        The sensor's origin in the world. One row when the sensor does not move.
    """

    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]

    @classmethod
    def one(cls, rotation: NDArray[np.float64], position_m: NDArray[np.float64]) -> PulsePoses:
        """A single pose that holds for every pulse."""
        return cls(
            np.ascontiguousarray(np.asarray(rotation, np.float64).reshape(1, 3, 3)),
            np.ascontiguousarray(np.asarray(position_m, np.float64).reshape(1, 3)),
        )

    @property
    def up(self) -> NDArray[np.float64]:
        """(1 or P, 3) float64: the sensor's z axis in the world (the beam's vertical)."""
        return np.ascontiguousarray(self.rotation[:, :, 2])

    @property
    def forward(self) -> NDArray[np.float64]:
        """(1 or P, 3) float64: the sensor's x axis in the world."""
        return np.ascontiguousarray(self.rotation[:, :, 0])


@dataclass
class Rays:
    """A chunk's rays, before the cast.

    Attributes
    ----------
    start : int
        Global id of the chunk's first pulse (pulse ``i`` of the chunk is ``start + i``).
    beams : (P, 6) float32
        The pulses' central rays in Open3D's layout (origin less the engine's local
        origin, unit direction).
    cast : (P * beam_samples, 6) float32
        The rays to cast: ``beams``, or the footprint sub-rays of each pulse
        (pulse-major: sub-ray ``k`` of pulse ``p`` is row ``p * beam_samples + k``).
    shift_m : (3,) float64
        The engine's local origin, which the rays' origins are relative to.
    poses : PulsePoses
        The sensor's pose at each pulse (or one for all).
    cast_up : (1, 3) or (len(cast), 3) float64
        The sensor's up axis in the world for each cast ray (one row if constant).
    cast_time_s : (len(cast),) float64 or None
        Each cast ray's time, when the scene has moving objects.
    """

    start: int
    beams: NDArray[np.float32]
    cast: NDArray[np.float32]
    shift_m: NDArray[np.float64]
    poses: PulsePoses
    cast_up: NDArray[np.float64]
    cast_time_s: NDArray[np.float64] | None

    @property
    def pulses(self) -> int:
        """Pulses in the chunk."""
        return len(self.beams)

    @property
    def pulse_ids(self) -> NDArray[np.uint64]:
        """(P,) uint64: the global ids of the chunk's pulses (``start`` onwards)."""
        return np.arange(self.start, self.start + self.pulses, dtype=np.uint64)

    @property
    def as_beams(self) -> bool:
        """Whether the chunk is cast one ray a pulse (``cast`` is the beams)."""
        return len(self.cast) == len(self.beams)

    def fanned(self, cast: NDArray[np.float32], samples: int) -> Rays:
        """These beams cast as ``cast``, ``samples`` rays a beam (pulse-major), with each
        ray's up axis and time. ``self`` must be cast as beams."""
        up, times = self.cast_up, self.cast_time_s
        return Rays(
            self.start, self.beams, cast, self.shift_m, self.poses,
            up if len(up) == 1 or samples == 1 else np.repeat(up, samples, axis=0),
            None if times is None or samples == 1 else np.repeat(times, samples),
        )  # fmt: skip

    def select(self, pulses: NDArray[np.intp]) -> Rays:
        """The beams of some of the chunk's pulses (indices in the chunk), with their
        poses and times, to cast as they are. ``self`` must be cast as beams (``cast``
        is ``beams``)."""
        rot, pos = self.poses.rotation, self.poses.position_m
        beams = self.beams[pulses]
        up = self.cast_up
        return Rays(
            self.start, beams, beams, self.shift_m,
            PulsePoses(rot[pulses] if len(rot) > 1 else rot,
                       pos[pulses] if len(pos) > 1 else pos),
            up[pulses] if len(up) > 1 else up,
            None if self.cast_time_s is None else self.cast_time_s[pulses],
        )  # fmt: skip


@dataclass
class Layer:
    """The surfaces some of a chunk's cast rays met one layer further behind see-through
    ones (a few of the rays: only those are kept).

    Attributes
    ----------
    rays : (M,) int64
        The cast rays that met a surface in this layer, increasing.
    hits : Hits
        Those surfaces, (M,) (every one a hit); ranges from the rays' origins.
    """

    rays: NDArray[np.int64]
    hits: Hits

    def pulses(self, pulses: int, samples: int) -> NDArray[np.bool_]:
        """(pulses,) bool: the pulses of a chunk cast ``samples`` rays a pulse that have a
        ray in this layer."""
        out = np.zeros(pulses, dtype=bool)
        out[self.rays // samples] = True
        return out


@dataclass
class CastChunk(Rays):
    """The chunk's :class:`Rays` and ``hits``, the hits of ``cast``; and ``behind``, the
    surfaces the rays met behind see-through ones, one :class:`Layer` a layer."""

    hits: Hits
    behind: tuple[Layer, ...] = ()

    def of_layer(self, layer: Layer) -> CastChunk:
        """The rays of a layer behind see-through surfaces, with their hits there: what
        the per-hit model evaluates (ray ``j`` is the chunk's ray ``layer.rays[j]``;
        only ``cast``, ``shift_m``, ``cast_up`` and ``hits`` are the layer's)."""
        up, times, rays = self.cast_up, self.cast_time_s, layer.rays
        # (take: the rows gathered in half the time of indexing, the same values)
        return CastChunk(
            self.start, self.beams, self.cast.take(rays, axis=0), self.shift_m, self.poses,
            up if len(up) == 1 else up.take(rays, axis=0),
            None if times is None else times.take(rays), layer.hits,
        )  # fmt: skip


def world_rays(
    rays: NDArray[np.float32], shift_m: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """World origins and directions, (N, 3) float64 each, of rays as cast (float32 rays
    relative to the float64 local origin ``shift_m``)."""
    return rays[:, :3].astype(np.float64) + shift_m, rays[:, 3:].astype(np.float64)
