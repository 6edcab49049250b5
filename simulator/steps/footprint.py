"""Adaptive footprint sampling: which pulses need their sub-rays cast.

With ``beam_sampling: adaptive`` a pulse's footprint is first judged from a few rays
that are cheap or already cast, its *witnesses*:

- the pulse's own central ray;
- two probe rays, the footprint's own sub-rays at its vertical extremes (the top and
  bottom of the sampling pattern: full sampling sees nothing beyond them), which catch
  horizontal edges (a roof line, the top of a wall, a kerb);
- horizontally, for a spinning scanner whose azimuth step reaches the footprint's
  1/e^2 half-width, the central rays of the same channel's previous and next firing,
  which the scan casts anyway; otherwise (other patterns, or a finer step) two more
  probes, the sub-rays at the pattern's horizontal extremes.

The footprint is taken to lie on **one smooth surface** when the central ray and every
witness hit the same object, each witness within :data:`PLANE_TOLERANCE_M` (along its
own ray) of the plane of the central hit, with a normal within
:data:`NORMAL_TOLERANCE_DEG` of the central one, and within half the echo separation of
the central range (on grazing ground the footprint stretches over metres of range, and
full sampling splits it into several echoes); or when the central ray and every witness
miss (open sky). Such a pulse is reported as a single ray would report it,
bit for bit the ``beam_samples: 1`` result (on one plane the sub-ray model differs from
it only in averaging the micro-slope and relief over the footprint). Every other pulse
is cast as its full fan of sub-rays (the probes already cast are kept) and goes
through echo formation exactly as in ``full`` sampling, bit for bit. A pulse whose
neighbour firing does not exist (the first and last firing of the survey) is cast in
full.

What it can miss: an object that lies entirely inside the footprint and between the
witnesses, hit by none of them: a pole or a wire thinner than the gap between the
centre and its neighbours, or a twig between the probes. Full sampling would give
such a pulse a mixed or second echo; adaptive sampling reports the surface behind.
The tests measure how often that happens on scenes with edges, poles, a fence and
foliage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..sensor.scanner import ScanPattern, SpinningPattern

__all__ = [
    "NORMAL_TOLERANCE_DEG",
    "PLANE_TOLERANCE_M",
    "Part",
    "Witnesses",
    "adaptive_chunk_pulses",
    "centre_sub_ray",
    "interleave",
    "neighbour_stride",
    "probe_indices",
    "single_surface",
    "sub_pattern",
]

#: A witness farther than this from the central hit's plane (along its ray) is taken to
#: be on another surface, or across an edge or a bend.
PLANE_TOLERANCE_M = 0.02
#: A witness whose surface normal turns more than this from the central one is taken to
#: be across a bend or a crease.
NORMAL_TOLERANCE_DEG = 5.0


def neighbour_stride(pattern: ScanPattern, beam: BeamPattern) -> int:
    """The pulse-id step to a pulse's horizontal neighbours, when they can witness its
    footprint: a spinning scanner's channel count (``pulse_id = firing * channels +
    channel``), if its azimuth step is at least the footprint's 1/e^2 half-width; 0
    otherwise (the footprint is then probed at its horizontal extremes)."""
    if not isinstance(pattern, SpinningPattern):
        return 0
    step_rad = 2.0 * math.pi / pattern.scanner.firings_per_revolution
    return pattern.channels if step_rad >= beam.half_angle_h_rad else 0


def probe_indices(beam: BeamPattern, horizontal: bool) -> NDArray[np.intp]:
    """The sub-rays of the pattern that probe each footprint: the highest and the
    lowest, and with ``horizontal`` the rightmost and the leftmost too."""
    v, h = beam.offsets[:, 1], beam.offsets[:, 0]
    picks = [int(np.argmax(v)), int(np.argmin(v))]
    if horizontal:
        picks += [int(np.argmax(h)), int(np.argmin(h))]
    return np.array(picks, dtype=np.intp)


def adaptive_chunk_pulses(chunk_rays: int, pattern: ScanPattern, beam: BeamPattern) -> int:
    """Pulses a chunk of adaptive sampling: as many as keep its beams and its witnesses'
    cast (the probes, and the neighbours' beams beyond its ends) to ``chunk_rays`` rays
    together, the rays a chunk of full sampling holds (at least one pulse). The fans of
    its pulses cast in full are formed in batches of their own
    (:func:`simulator.pipeline.adaptive.adaptive_returns`), so no cast exceeds
    ``chunk_rays`` rays either way. (A chunk of ``chunk_rays // beam_samples`` pulses is
    sized for every sub-ray of every pulse; on the bench scene adaptive sampling casts
    about 3.8 rays a pulse with 7 sub-rays.)"""
    stride = neighbour_stride(pattern, beam)
    probes = len(probe_indices(beam, stride == 0))
    return max(1, (chunk_rays - 2 * stride) // (1 + probes))


def centre_sub_ray(beam: BeamPattern) -> int:
    """The sub-ray of the pattern on the beam's axis (offset 0, 0; row 0 of
    :func:`~simulator.beam.beam_pattern`), or -1 if it has none."""
    on_axis = np.flatnonzero(~beam.offsets.any(axis=1))
    return int(on_axis[0]) if len(on_axis) else -1


def sub_pattern(beam: BeamPattern, which: NDArray[np.intp]) -> BeamPattern:
    """The sub-rays ``which`` of a pattern, as a pattern of their own (the sub-ray kernel
    then casts exactly those rays of each footprint; the weights are not renormalised)."""
    return BeamPattern(len(which), beam.offsets[which], beam.weights[which],
                       beam.half_angle_h_rad, beam.half_angle_v_rad)  # fmt: skip


#: Some of the sub-rays of F footprints, cast together: ``(which, rays, hits,
#: footprints)``: sub-rays ``which`` (W,) of each footprint, ``rays`` (R * W, 6) float32
#: footprint-major and their ``hits``, of R footprints: the F footprints themselves
#: (``footprints`` None), or more, of which rows ``footprints`` (F,) intp are taken (the
#: probes of the pulses cast in full, read where the probes of every pulse lie).
Part = tuple[NDArray[np.intp], NDArray[np.float32], Hits, NDArray[np.intp] | None]


@dataclass(frozen=True)
class Witnesses:
    """What vouches for the footprints of a chunk's pulses ``start .. start + P``.

    Attributes
    ----------
    probes : (W,) intp
        Which sub-rays of the pattern probe each footprint (:func:`probe_indices`).
    probe_rays : (P * W, 6) float32
        The probe rays, footprint-major.
    probe_hits : Hits
        Their hits.
    stride : int
        Pulse-id step to the horizontal neighbours (0: none; the probes then include
        the horizontal extremes).
    before : (B, 6) float32
        Central rays of the pulses ``start - B .. start`` (B <= ``stride``): the
        neighbours before the chunk that exist (the chunk's own are its beams).
    before_hits : Hits
        Their hits.
    after : (A, 6) float32
        Central rays of the pulses ``start + P .. start + P + A`` (A <= ``stride``):
        the neighbours after the chunk that exist.
    after_hits : Hits
        Their hits.
    start : int
        Global id of the chunk's first pulse.
    total : int
        Pulses in the survey (a neighbour beyond either end does not exist).
    separation_m : float
        The range separation at which echoes split (witnesses must lie within half of it
        of the central range).
    """

    probes: NDArray[np.intp]
    probe_rays: NDArray[np.float32]
    probe_hits: Hits
    stride: int
    before: NDArray[np.float32]
    before_hits: Hits
    after: NDArray[np.float32]
    after_hits: Hits
    start: int
    total: int
    separation_m: float


def _on_plane(
    point: NDArray[np.float64],
    normal: NDArray[np.float64],
    centre: Hits,
    rays: NDArray[np.float32],
    hits: Hits,
    separation_m: float,
) -> NDArray[np.bool_]:
    """(C,) bool: whether witness rays (one a footprint) hit the object of the central
    hit ``centre``, on its plane through ``point`` with ``normal`` (within the tolerance,
    along the witness ray), as smooth, and within half the separation of its range."""
    r = rays.astype(np.float64)
    along = np.einsum("ck,ck->c", r[:, 3:], normal)
    height = np.einsum("ck,ck->c", point - r[:, :3], normal)
    r_w = hits.range_m.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # misses: inf, and NaN from them
        close = np.abs(r_w - height / along) <= PLANE_TOLERANCE_M
        close &= np.abs(r_w - centre.range_m) <= 0.5 * separation_m
    turn = np.abs(np.einsum("ck,ck->c", hits.normal.astype(np.float64), normal))
    smooth = turn >= math.cos(math.radians(NORMAL_TOLERANCE_DEG))
    return (hits.object_index == centre.object_index) & close & smooth


def single_surface(
    rays: NDArray[np.float32], hits: Hits, witnesses: Witnesses
) -> NDArray[np.bool_]:
    """Which footprints lie on one smooth surface (or on nothing), by the criterion of
    the module docstring.

    Parameters
    ----------
    rays : (P, 6) float32
        The central rays of the chunk's pulses.
    hits : Hits
        Their hits.
    witnesses : Witnesses

    Returns
    -------
    (P,) bool
        True where the single-ray result stands for the footprint.
    """
    p, w = len(rays), len(witnesses.probes)
    obj = hits.object_index
    probe_obj = witnesses.probe_hits.object_index.reshape(p, w)
    all_missed = (obj < 0) & np.all(probe_obj < 0, axis=1)
    hit = obj >= 0
    r64 = rays.astype(np.float64)
    normal = hits.normal.astype(np.float64)
    range_m = np.where(hit, hits.range_m, 0.0).astype(np.float64)
    point = r64[:, :3] + range_m[:, None] * r64[:, 3:]
    ok = hit.copy()
    for k in range(w):
        rows = np.arange(p) * w + k
        ok &= _on_plane(point, normal, hits, witnesses.probe_rays[rows],
                        witnesses.probe_hits.take(rows), witnesses.separation_m)  # fmt: skip
    if witnesses.stride:
        # The central rays of the chunk's pulses and of their neighbours beyond its ends.
        beams = np.concatenate([witnesses.before, rays, witnesses.after])
        beam_hits = Hits.concatenate([witnesses.before_hits, hits, witnesses.after_hits])
        beams_start = witnesses.start - len(witnesses.before)
        ids = witnesses.start + np.arange(p, dtype=np.int64)
        for neighbour in (ids - witnesses.stride, ids + witnesses.stride):
            exists = (neighbour >= 0) & (neighbour < witnesses.total)
            at = np.where(exists, neighbour, witnesses.start) - beams_start
            seen = beam_hits.take(at)
            all_missed &= exists & (seen.object_index < 0)
            ok &= exists & _on_plane(point, normal, hits, beams[at], seen,
                                     witnesses.separation_m)  # fmt: skip
    return np.where(hit, ok, all_missed)


def interleave(parts: list[Part], samples: int) -> tuple[NDArray[np.float32], Hits]:
    """Rays and hits of F footprints, pulse-major (sub-ray ``k`` of footprint ``f`` is row
    ``f * samples + k``), from parts that each cast some of the sub-rays of every
    footprint (see :data:`Part`)."""
    which0, r0, _, footprints0 = parts[0]
    f = len(r0) // len(which0) if footprints0 is None else len(footprints0)
    rays = np.empty((f, samples, 6), dtype=np.float32)
    range_m = np.empty((f, samples), dtype=np.float32)
    obj = np.empty((f, samples), dtype=np.int32)
    normal = np.empty((f, samples, 3), dtype=np.float32)
    # (the material rows, where the scene has per-face materials)
    faces = any(h.material_row is not None for _, _, h, _ in parts)
    face = np.zeros((f, samples) if faces else (0, 0), dtype=np.int32)
    for which, r, h, footprints in parts:
        n = len(which)
        rows = slice(None) if footprints is None else footprints
        rays[:, which] = r.reshape(-1, n, 6)[rows]
        range_m[:, which] = h.range_m.reshape(-1, n)[rows]
        obj[:, which] = h.object_index.reshape(-1, n)[rows]
        normal[:, which] = h.normal.reshape(-1, n, 3)[rows]
        if faces:
            face[:, which] = h.rows.reshape(-1, n)[rows]
    hits = Hits(range_m.reshape(-1), obj.reshape(-1), normal.reshape(-1, 3),
                face.reshape(-1) if faces else None)  # fmt: skip
    return rays.reshape(-1, 6), hits
