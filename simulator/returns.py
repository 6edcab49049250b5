"""From ray hits to detected returns: the per-hit model of DESIGN.md, vectorised.

For each pulse that hits (origin ``o``, unit direction ``d``, range ``R``, normal
``n`` turned to face the sensor):

1. ``cos_incidence = |n . d|``.
2. Micro-slope: the surface is tilted by ``delta = micro_slope * place_normal(u, v)``
   where ``(u, v)`` are the hit point's two world coordinates across the normal's
   dominant axis; ``cos_effective = tilted_cos(cos_incidence, delta)``.
3. Backscatter ``b = minnaert_backscatter(reflectance, cos_effective, k)``.
4. In-plane divergence from the angle between the direction in which the surface
   recedes (``n`` minus its part along ``d``) and the beam's vertical axis.
5. Footprint range spread and the echo's peak factor.
6. Detection: ``b * peak * exp(-2 alpha R) / R^2`` against the threshold of a
   ``reference_reflectance`` target at normal incidence at ``reference_range_m``.
7. Range: true range + place-fixed relief (rough-surface law) + per-pulse sensor
   noise, quantised, kept inside the range window.
8. Intensity: calibrated reflectivity ``intensity_scale * b``, clipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from . import physics
from .config import ScannerConfig
from .pointcloud import PointCloud
from .raycast import Hits
from .scanner import ScanPattern, SpinningPattern
from .scene import MaterialTable, Scene

__all__ = [
    "HitResults",
    "ReturnModel",
    "SceneTables",
    "Streams",
    "assemble_returns",
    "assemble_returns_fast",
    "echo_inputs",
    "echo_returns",
    "evaluate_hits",
    "evaluate_hits_fast",
]

#: ``to_output(points_m, time_s)``: world points (N, 3) float64 to the output frame.
OutputFrame = Callable[[NDArray[np.float64], NDArray[np.float64]], NDArray[np.float64]]

# Stream numbers of the survey seed (see Streams).
_STREAM_MICRO_SLOPE = 1
_STREAM_RELIEF = 2
_STREAM_SENSOR_NOISE = 3


@dataclass(frozen=True)
class Streams:
    """Hash seeds of the independent random quantities, derived from the survey seed.

    Stream ``s`` is ``mix64(seed + s * GOLDEN_GAMMA)``: the s-th output of a SplitMix64
    generator started at the survey seed.
    """

    micro_slope: np.uint64
    relief: np.uint64
    sensor_noise: np.uint64

    @classmethod
    def from_seed(cls, seed: int) -> Streams:
        """Derive the streams of a survey seed."""

        def stream(s: int) -> np.uint64:
            return np.uint64(physics.mix64((seed + s * physics.GOLDEN_GAMMA) % 2**64))

        return cls(
            stream(_STREAM_MICRO_SLOPE), stream(_STREAM_RELIEF), stream(_STREAM_SENSOR_NOISE)
        )


@dataclass(frozen=True)
class SceneTables:
    """Per-object lookups of material, label and instance, and the material table."""

    material_of_object: NDArray[np.int32]
    label_of_object: NDArray[np.uint16]
    instance_of_object: NDArray[np.uint16]
    materials: MaterialTable

    @classmethod
    def from_scene(cls, scene: Scene) -> SceneTables:
        """Build the lookups of a scene."""
        mat, lab, ins = scene.object_tables()
        return cls(mat, lab, ins, scene.material_table())


@dataclass(frozen=True)
class ReturnModel:
    """Sensor constants of the per-hit model, in SI units."""

    beta_h_rad: float
    beta_v_rad: float
    pulse_length_m: float
    threshold: float
    extinction_per_m: float
    range_min_m: float
    range_max_m: float
    range_resolution_m: float
    range_noise_m: float
    intensity_scale: float
    intensity_max: float

    @classmethod
    def from_scanner(cls, scanner: ScannerConfig) -> ReturnModel:
        """Constants of a scanner.

        The threshold is the received peak of a ``reference_reflectance`` target at
        normal incidence (backscatter = reflectance, peak factor 1) at
        ``reference_range_m``, atmosphere included, so the datasheet statement holds.
        """
        det = scanner.detection
        alpha = scanner.atmospheric_extinction_per_m
        threshold = (
            det.reference_reflectance
            * np.exp(-2.0 * alpha * det.reference_range_m)
            / det.reference_range_m**2
        )
        return cls(
            beta_h_rad=scanner.divergence_mrad.horizontal * 1e-3,
            beta_v_rad=scanner.divergence_mrad.vertical * 1e-3,
            pulse_length_m=float(physics.pulse_length_m(scanner.pulse_length_ns)),
            threshold=float(threshold),
            extinction_per_m=alpha,
            range_min_m=scanner.range_min_m,
            range_max_m=scanner.range_max_m,
            range_resolution_m=scanner.range_resolution_m,
            range_noise_m=scanner.range_noise_m,
            intensity_scale=scanner.intensity_scale,
            intensity_max=scanner.intensity_max,
        )

    def max_range_m(self, backscatter: float) -> float:
        """Farthest range at which a target of this backscatter and peak 1 is detected."""
        if self.extinction_per_m == 0.0:
            return float(np.sqrt(backscatter / self.threshold))
        # Solve b exp(-2 a R) / R^2 = S_th by bisection (monotone in R).
        lo, hi = 1e-6, 1e7
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            s = backscatter * np.exp(-2 * self.extinction_per_m * mid) / mid**2
            lo, hi = (mid, hi) if s >= self.threshold else (lo, mid)
        return lo


def _rowdot(a: NDArray[np.float64], b: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.einsum("ij,ij->i", a, b)


def _in_plane_coords(
    point_m: NDArray[np.float64], normal: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two world coordinates across the normal's dominant axis: (x, y) for ground,
    (y, z) for a wall facing x, (x, z) for a wall facing y."""
    axis = np.argmax(np.abs(normal), axis=1)
    u = np.where(axis == 0, point_m[:, 1], point_m[:, 0])
    v = np.where(axis == 2, point_m[:, 1], point_m[:, 2])
    return u, v


@dataclass
class HitResults:
    """The per-hit model's results for the pulses of a chunk that hit something.

    Attributes
    ----------
    idx : (H,) int64
        Positions of the hits in the chunk.
    keep : (H,) bool
        Detected and inside the range window.
    range_m : (H,) float64
        Measured range (relief, jitter, quantisation).
    intensity : (H,) float64
        Calibrated reflectivity.
    cos_incidence, cos_effective, spread_m, peak_factor : (H,) float64
        Diagnostics.
    backscatter : (H,) float64
        Minnaert backscatter (before the intensity scale and clip).
    relief_m : (H,) float64
        The place-fixed relief offset of the range.
    """

    idx: NDArray[np.int64]
    keep: NDArray[np.bool_]
    range_m: NDArray[np.float64]
    intensity: NDArray[np.float64]
    cos_incidence: NDArray[np.float64]
    cos_effective: NDArray[np.float64]
    spread_m: NDArray[np.float64]
    peak_factor: NDArray[np.float64]
    backscatter: NDArray[np.float64]
    relief_m: NDArray[np.float64]


def _world_rays(
    rays: NDArray[np.float32], shift_m: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """World origins and directions of the rays as cast (float32 rays, float64 shift)."""
    return rays[:, :3].astype(np.float64) + shift_m, rays[:, 3:].astype(np.float64)


def evaluate_hits(
    pulse_start: int,
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    sensor_up: NDArray[np.float64],
    hits: Hits,
    tables: SceneTables,
    model: ReturnModel,
    streams: Streams,
) -> HitResults:
    """Apply the per-hit model to one chunk of N pulses (pure numpy: the specification).

    Parameters
    ----------
    pulse_start : int
        Global id of the chunk's first pulse (pulse ``i`` of the chunk has id
        ``pulse_start + i``).
    rays : (N, 6) float32
        The rays as cast (:meth:`RayEngine.rays`): they are the geometry's truth.
    shift_m : (3,) float64
        The engine's local origin (added back to the ray origins).
    sensor_up : (N, 3) or (1, 3) float64
        Sensor z axis in the world at each firing (the beam's vertical reference).
    hits : Hits
        First hits of the N rays.
    tables : SceneTables
    model : ReturnModel
    streams : Streams

    Returns
    -------
    HitResults
    """
    origins_m, directions = _world_rays(rays, shift_m)
    idx = np.flatnonzero(hits.hit)
    d = directions[idx]
    range_true = hits.range_m[idx].astype(np.float64)
    obj = hits.object_index[idx]
    mat = tables.material_of_object[obj]
    mt = tables.materials
    hit_normal = hits.normal[idx].astype(np.float64)

    # 1. incidence, with the normal turned to face the sensor
    n_dot_d = _rowdot(hit_normal, d)
    normal = hit_normal * np.where(n_dot_d > 0.0, -1.0, 1.0)[:, None]
    cos_inc = np.minimum(np.abs(n_dot_d), 1.0)

    # 2. micro-slope tilt, fixed to the place
    point = origins_m[idx] + range_true[:, None] * d
    u, v = _in_plane_coords(point, normal)
    cell = mt.micro_slope_cell_m[mat]
    delta = mt.micro_slope_rad[mat] * physics.place_normal(u, v, cell, streams.micro_slope)
    cos_eff = physics.tilted_cos(cos_inc, delta)

    # 3. backscatter
    backscatter = physics.minnaert_backscatter(mt.reflectance[mat], cos_eff, mt.minnaert_k[mat])

    # 4. in-plane divergence: angle between the receding direction and the beam's vertical
    recede = normal + cos_inc[:, None] * d  # n minus its part along d (n . d = -cos_inc)
    up = np.broadcast_to(sensor_up, d.shape) if len(sensor_up) == 1 else sensor_up[idx]
    beam_v = up - _rowdot(up, d)[:, None] * d
    recede_len = np.linalg.norm(recede, axis=1)
    beam_v_len = np.linalg.norm(beam_v, axis=1)
    ok = (recede_len > 1e-12) & (beam_v_len > 1e-12)
    cos_psi = np.ones_like(recede_len)
    np.divide(np.abs(_rowdot(recede, beam_v)), recede_len * beam_v_len, out=cos_psi, where=ok)
    beta = physics.in_plane_divergence(model.beta_h_rad, model.beta_v_rad, cos_psi)

    # 5. footprint spread and peak factor
    spread = physics.footprint_range_spread_m(range_true, cos_eff, beta)
    peak = physics.pulse_peak_factor(model.pulse_length_m, spread)

    # 6. detection
    r_safe = np.maximum(range_true, 1e-6)
    received = backscatter * peak / (r_safe * r_safe)
    if model.extinction_per_m > 0.0:
        received *= np.exp(-2.0 * model.extinction_per_m * range_true)
    detected = received >= model.threshold

    # 7. measured range
    pulse_id = np.uint64(pulse_start) + idx.astype(np.uint64)
    relief = physics.rough_range_sigma_m(mt.roughness_m[mat], cos_eff) * physics.place_normal(
        u, v, cell, streams.relief
    )
    with np.errstate(over="ignore"):
        jitter_hash = physics.mix64(streams.sensor_noise + pulse_id)
    jitter = model.range_noise_m * physics.hash_normal(jitter_hash)
    range_meas = range_true + relief + jitter
    if model.range_resolution_m > 0.0:
        range_meas = np.round(range_meas / model.range_resolution_m) * model.range_resolution_m
    keep = detected & (range_meas >= model.range_min_m) & (range_meas <= model.range_max_m)

    # 8. intensity (calibrated reflectivity, an energy measure: no range, no peak factor)
    intensity = np.clip(model.intensity_scale * backscatter, 0.0, model.intensity_max)
    return HitResults(
        idx, keep, range_meas, intensity, cos_inc, cos_eff, spread, peak, backscatter, relief
    )


def evaluate_hits_fast(
    pulse_start: int,
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    sensor_up: NDArray[np.float64],
    hits: Hits,
    tables: SceneTables,
    model: ReturnModel,
    streams: Streams,
    *,
    full: bool = True,
    jitter: bool = True,
) -> HitResults:
    """The same as :func:`evaluate_hits`, in one fused numba kernel over both cores.

    With ``full=False`` only ``keep``, ``range_m`` and ``intensity`` are computed (all a
    single-return point record without diagnostics needs); the other fields are empty.
    With ``jitter=False`` the per-pulse range jitter is left out of ``range_m`` (and so of
    ``keep``): footprint sub-rays need neither, their echoes are jittered once formed.
    """
    from . import fast

    idx = np.flatnonzero(hits.hit)
    h = len(idx)
    out = [np.empty(h, dtype=np.bool_), np.empty(h), np.empty(h)]
    extra = [np.empty(h if full else 0) for _ in range(6)]
    mt = tables.materials
    fast.evaluate_hits(
        idx, rays, shift_m, hits.range_m, hits.normal, hits.object_index,
        np.uint64(pulse_start), np.ascontiguousarray(sensor_up, dtype=np.float64),
        tables.material_of_object, mt.reflectance, mt.minnaert_k, mt.roughness_m,
        mt.micro_slope_rad, mt.micro_slope_cell_m,
        model.beta_h_rad, model.beta_v_rad, model.pulse_length_m, model.threshold,
        model.extinction_per_m, model.range_min_m, model.range_max_m, model.range_resolution_m,
        model.range_noise_m, model.intensity_scale, model.intensity_max,
        streams.micro_slope, streams.relief, streams.sensor_noise, *out, full, jitter, *extra,
    )  # fmt: skip
    return HitResults(idx, *out, *extra)


def assemble_returns(
    results: HitResults,
    pulse_start: int,
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    hits: Hits,
    tables: SceneTables,
    pattern: ScanPattern,
    to_output: OutputFrame,
    *,
    diagnostics: bool = False,
) -> PointCloud:
    """Turn the per-hit results of a chunk into its point record (detected returns only).

    ``xyz`` is the measured range along the world ray, moved to the output frame by
    ``to_output(points_m, time_s)``; ``ring`` and ``time_s`` come from the scan pattern by
    pulse id.
    """
    keep = results.keep
    sel = results.idx[keep]
    r = results.range_m[keep]
    pulse_id = np.uint64(pulse_start) + sel.astype(np.uint64)
    time_s, ring = pattern.time_and_channel(pulse_id)
    origins_m, directions = _world_rays(rays[sel], shift_m)
    xyz = to_output(origins_m + r[:, None] * directions, time_s)
    obj = hits.object_index[sel]
    count = len(sel)
    fields = {
        "xyz": xyz.astype(np.float32),
        "intensity": results.intensity[keep].astype(np.float32),
        "range_m": r.astype(np.float32),
        "ring": ring,
        "time_s": time_s,
        "return_number": np.ones(count, dtype=np.uint8),
        "num_returns": np.ones(count, dtype=np.uint8),
        "label": tables.label_of_object[obj],
        "instance": tables.instance_of_object[obj],
    }
    if diagnostics:
        fields.update(
            range_true_m=hits.range_m[sel].astype(np.float64),
            cos_incidence=results.cos_incidence[keep].astype(np.float32),
            cos_effective=results.cos_effective[keep].astype(np.float32),
            footprint_spread_m=results.spread_m[keep].astype(np.float32),
            peak_factor=results.peak_factor[keep].astype(np.float32),
            object_id=obj.astype(np.int32),
            pulse_id=pulse_id,
            energy_fraction=np.ones(count, dtype=np.float32),
        )
    return PointCloud(fields)


def assemble_returns_fast(
    results: HitResults,
    pulse_start: int,
    rays: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    hits: Hits,
    tables: SceneTables,
    pattern: SpinningPattern,
    rotation: NDArray[np.float64],
    position_m: NDArray[np.float64],
    *,
    sensor_frame: bool = True,
) -> PointCloud:
    """:func:`assemble_returns` as one numba kernel (no diagnostics).

    ``xyz`` is in the sensor frame at each pulse's firing when ``sensor_frame``, else in
    the world; ``rotation`` (1 or P, 3, 3) and ``position_m`` (1 or P, 3) are the sensor's
    pose, once or for every pulse of the chunk.
    """
    from . import fast

    sel_hit = np.flatnonzero(results.keep)
    sel = results.idx[sel_hit]
    n = len(sel)
    fields = {
        "xyz": np.zeros((n, 3), dtype=np.float32),
        "intensity": np.zeros(n, dtype=np.float32),
        "range_m": np.zeros(n, dtype=np.float32),
        "ring": np.zeros(n, dtype=np.uint16),
        "time_s": np.zeros(n, dtype=np.float64),
        "return_number": np.ones(n, dtype=np.uint8),
        "num_returns": np.ones(n, dtype=np.uint8),
        "label": np.zeros(n, dtype=np.uint16),
        "instance": np.zeros(n, dtype=np.uint16),
    }
    fast.assemble(
        sel, sel_hit, rays, shift_m, results.range_m, results.intensity, hits.object_index,
        pulse_start, pattern.channels, pattern.period_s, pattern.firing_offset_s,
        np.ascontiguousarray(rotation, dtype=np.float64).reshape(-1, 3, 3),
        np.ascontiguousarray(position_m, dtype=np.float64).reshape(-1, 3), sensor_frame,
        tables.label_of_object, tables.instance_of_object,
        fields["xyz"], fields["intensity"], fields["range_m"], fields["ring"], fields["time_s"],
        fields["label"], fields["instance"],
    )  # fmt: skip
    return PointCloud(fields)


def echo_returns(
    results: HitResults,
    samples: int,
    weights: NDArray[np.float64],
    pulse_start: int,
    beams: NDArray[np.float32],
    shift_m: NDArray[np.float64],
    hits: Hits,
    tables: SceneTables,
    model: ReturnModel,
    streams: Streams,
    scanner: ScannerConfig,
    pattern: ScanPattern,
    to_output: OutputFrame,
    *,
    diagnostics: bool = False,
    use_fast: bool = False,
) -> PointCloud:
    """The point record of a chunk cast as footprint sub-rays (see :mod:`simulator.echoes`).

    Parameters
    ----------
    results : HitResults
        The per-hit model of the sub-ray hits (sub-ray ``k`` of pulse ``p`` is ray
        ``p * samples + k``).
    samples : int
        Sub-rays per pulse.
    weights : (samples,) float64
        Their energy shares.
    beams : (P, 6) float32
        The pulses' central rays (points are reported along them).
    hits : Hits
        The sub-rays' hits.
    use_fast : bool
        Form the echoes with the numba kernel (else the numpy specification).
    """
    from .echoes import form_echoes, select_returns

    idx = results.idx
    separation = max(scanner.min_return_separation_m, model.pulse_length_m)
    per_hit = echo_inputs(results, hits)
    record = (pulse_start, beams, shift_m, tables, model, pattern, to_output, diagnostics)
    if use_fast:
        from . import fast

        e = fast.echo_slots(samples, weights, len(hits.range_m), idx, *per_hit, separation)
        chosen = fast.select_echoes(
            e, samples, pulse_start, streams.sensor_noise, model, scanner.return_mode,
            scanner.returns_per_pulse,
        )  # fmt: skip
        slot = chosen["slot"]
        energy = e["energy"][slot]
        fraction = np.where(energy > 0.0, e["dominant"][slot] / np.maximum(energy, 1e-300), 1.0)
        return _echo_points(
            chosen["pulse"], chosen["range_m"], energy, e["object"][slot],
            chosen["return_number"], chosen["num_returns"], e["range"][slot],
            e["cos_incidence"][slot], e["cos_effective"][slot], chosen["spread_m"],
            chosen["peak_factor"], fraction, *record,
        )  # fmt: skip
    echoes = form_echoes(
        idx // samples, weights[idx % samples], *per_hit, separation, model.pulse_length_m
    )
    r_true = echoes.range_true_m
    r_safe = np.maximum(r_true, 1e-6)
    received = echoes.energy * echoes.peak_factor / (r_safe * r_safe)
    if model.extinction_per_m > 0.0:
        received *= np.exp(-2.0 * model.extinction_per_m * r_true)
    pulse_id = np.uint64(pulse_start) + echoes.pulse.astype(np.uint64)
    with np.errstate(over="ignore"):
        key = physics.mix64(streams.sensor_noise + pulse_id)
        later = physics.mix64(key + echoes.rank.astype(np.uint64))
    key = np.where(echoes.rank == 0, key, later)
    range_meas = r_true + echoes.relief_m + model.range_noise_m * physics.hash_normal(key)
    if model.range_resolution_m > 0.0:
        range_meas = np.round(range_meas / model.range_resolution_m) * model.range_resolution_m
    ok = (
        (received >= model.threshold)
        & (range_meas >= model.range_min_m)
        & (range_meas <= model.range_max_m)
    )
    sel = np.flatnonzero(ok)
    chosen, number, total = select_returns(
        echoes.pulse[sel], range_meas[sel], received[sel], scanner.return_mode,
        scanner.returns_per_pulse,
    )  # fmt: skip
    e = sel[chosen]
    return _echo_points(
        echoes.pulse[e], range_meas[e], echoes.energy[e], echoes.object_index[e], number, total,
        r_true[e], echoes.cos_incidence[e], echoes.cos_effective[e], echoes.spread_m[e],
        echoes.peak_factor[e], echoes.energy_fraction[e], *record,
    )  # fmt: skip


def echo_inputs(results: HitResults, hits: Hits) -> tuple:
    """The per-hit inputs of echo formation, in the order :func:`simulator.echoes.form_echoes`
    takes them: true range, relief, backscatter, spread, object, cos incidence, cos effective.
    """
    idx = results.idx
    return (
        hits.range_m[idx].astype(np.float64),
        results.relief_m,
        results.backscatter,
        results.spread_m,
        hits.object_index[idx],
        results.cos_incidence,
        results.cos_effective,
    )


def _echo_points(
    pulse: NDArray[np.int64], range_m: NDArray[np.float64], energy: NDArray[np.float64],
    obj: NDArray, number: NDArray[np.uint8], total: NDArray[np.uint8],
    range_true_m: NDArray[np.float64], cos_incidence: NDArray, cos_effective: NDArray,
    spread_m: NDArray, peak_factor: NDArray, energy_fraction: NDArray, pulse_start: int,
    beams: NDArray[np.float32], shift_m: NDArray[np.float64], tables: SceneTables,
    model: ReturnModel, pattern: ScanPattern, to_output: OutputFrame, diagnostics: bool,
) -> PointCloud:  # fmt: skip
    """The point record of the reported echoes (K,): ``pulse`` in the chunk, measured
    ``range_m`` along the pulse's central ray, and what each field is made from."""
    pulse_id = np.uint64(pulse_start) + pulse.astype(np.uint64)
    time_s, ring = pattern.time_and_channel(pulse_id)
    origins_m, directions = _world_rays(beams[pulse], shift_m)
    xyz = to_output(origins_m + range_m[:, None] * directions, time_s)
    obj = obj.astype(np.int32)
    fields = {
        "xyz": xyz.astype(np.float32),
        "intensity": np.clip(model.intensity_scale * energy, 0.0, model.intensity_max).astype(
            np.float32
        ),
        "range_m": range_m.astype(np.float32),
        "ring": ring,
        "time_s": time_s,
        "return_number": number,
        "num_returns": total,
        "label": tables.label_of_object[obj],
        "instance": tables.instance_of_object[obj],
    }
    if diagnostics:
        fields.update(
            range_true_m=range_true_m,
            cos_incidence=cos_incidence.astype(np.float32),
            cos_effective=cos_effective.astype(np.float32),
            footprint_spread_m=spread_m.astype(np.float32),
            peak_factor=peak_factor.astype(np.float32),
            object_id=obj,
            pulse_id=pulse_id,
            energy_fraction=energy_fraction.astype(np.float32),
        )
    return PointCloud(fields)
