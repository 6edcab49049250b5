"""The per-hit model in one fused kernel (the specification: :mod:`simulator.steps.hits`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..chunk import CastChunk
from ..steps.hits import HitResults, ReturnModel
from ..steps.tables import SceneTables, Streams
from .common import (
    COS_HALF_PI_BELOW,
    GAMMA,
    HALF_PI,
    U,
    cell_hash_of,
    cell_of,
    hash_normal,
    hash_normal_pair,
    measured_range,
    mix64,
    peak_factor,
    received_peak,
    reported_intensity,
    tilted_cos,
    tilted_cos_by,
)
from .receiver import received_energies, soft_detected

__all__ = ["evaluate_hits"]


@njit(parallel=True, cache=True, nogil=True)
def _evaluate_hits(  # type: ignore[no-untyped-def]
    idx, rays, shift, range_true, normals, obj, pulse_start, up, materials, model, streams,
    keep, range_meas, intensity, full, jitter, detect, cos_inc_out, cos_eff_out, spread_out,
    peak_out, backscatter_out, relief_out,
):  # fmt: skip
    """:func:`simulator.steps.hits.evaluate_hits` of the hits ``idx`` of the cast ``rays``:
    ``obj`` is what each ray's material is looked up by, ``materials``
    :meth:`simulator.steps.tables.SceneTables.kernel_args`' table, ``model``
    :meth:`simulator.steps.hits.ReturnModel.kernel_args`, ``streams``
    :meth:`simulator.steps.tables.Streams.kernel_args`."""
    mat_of_obj = materials[0]
    refl = materials[1]
    mk = materials[2]
    rough = materials[3]
    slope = materials[4]
    cell = materials[5]
    beta_h = model[0]
    beta_v = model[1]
    pulse_m = model[2]
    threshold = model[3]
    ext = model[4]
    rmin = model[5]
    rmax = model[6]
    res = model[7]
    noise = model[8]
    iscale = model[9]
    imax = model[10]
    istep = model[11]
    response = model[12:17]
    rec = model[20:26]
    seed_slope = streams[0]
    seed_noise = streams[2]
    per_pulse_up = up.shape[0] > 1
    slope_key = mix64(seed_slope + GAMMA)
    n_hits = len(idx)
    blocks = min(n_hits, 256)
    for block in prange(blocks):
        # The place of the hit before in the block (material, cell) and what was made
        # of it: the hashed normals, the tilt, its cosine and sine (``big``: a tilt of
        # pi/2 or more, which tilted_cos takes whole).
        last_m, last_i, last_j = np.int64(-1), U(0), U(0)
        slope_z = relief_z = delta = cos_delta = sin_delta = 0.0
        big = False
        for q in range(block * n_hits // blocks, (block + 1) * n_hits // blocks):
            i = idx[q]
            m = mat_of_obj[obj[i]]
            d0, d1, d2 = np.float64(rays[i, 3]), np.float64(rays[i, 4]), np.float64(rays[i, 5])
            n0, n1, n2 = (
                np.float64(normals[i, 0]),
                np.float64(normals[i, 1]),
                np.float64(normals[i, 2]),
            )
            r = np.float64(range_true[i])
            # 1. incidence, normal turned to face the sensor
            ndd = n0 * d0 + n1 * d1 + n2 * d2
            if ndd > 0.0:
                n0, n1, n2 = -n0, -n1, -n2
            cos_inc = min(abs(ndd), 1.0)
            # 2. micro-slope at the hit point, coordinates across the dominant axis
            p0 = (np.float64(rays[i, 0]) + shift[0]) + r * d0
            p1 = (np.float64(rays[i, 1]) + shift[1]) + r * d1
            p2 = (np.float64(rays[i, 2]) + shift[2]) + r * d2
            a0, a1, a2 = abs(n0), abs(n1), abs(n2)
            if a0 >= a1 and a0 >= a2:
                u, v = p1, p2
            elif a1 >= a2:
                u, v = p0, p2
            else:
                u, v = p0, p1
            c = cell[m]
            cos_eff = cos_inc
            if slope[m] != 0.0 or rough[m] != 0.0:  # one Box-Muller pair a place
                ci, cj = cell_of(u, c), cell_of(v, c)
                if m != last_m or ci != last_i or cj != last_j:
                    last_m, last_i, last_j = m, ci, cj
                    slope_z, relief_z = hash_normal_pair(cell_hash_of(ci, cj, slope_key))
                    delta = slope[m] * slope_z
                    big = abs(delta) >= HALF_PI
                    if not big:
                        cos_delta, sin_delta = math.cos(delta), math.sin(delta)
            if slope[m] != 0.0:
                if big:
                    cos_eff = tilted_cos(cos_inc, delta)
                else:
                    cos_eff = tilted_cos_by(cos_inc, cos_delta, sin_delta)
            elif cos_inc == 0.0:  # tilted_cos keeps theta below pi/2
                cos_eff = COS_HALF_PI_BELOW
            # 3. Minnaert backscatter
            k = mk[m]
            cm = min(max(cos_eff, 1e-4), 1.0)
            if k == 0.0:
                b = refl[m]
            elif k == 1.0:
                b = refl[m] * cm
            elif k == 0.5:
                b = refl[m] * math.sqrt(cm)
            else:
                b = refl[m] * cm**k
            # 4. in-plane divergence
            e0, e1, e2 = n0 + cos_inc * d0, n1 + cos_inc * d1, n2 + cos_inc * d2
            j = i if per_pulse_up else 0
            w0, w1, w2 = up[j, 0], up[j, 1], up[j, 2]
            ud = w0 * d0 + w1 * d1 + w2 * d2
            w0, w1, w2 = w0 - ud * d0, w1 - ud * d1, w2 - ud * d2
            le = math.sqrt(e0 * e0 + e1 * e1 + e2 * e2)
            lw = math.sqrt(w0 * w0 + w1 * w1 + w2 * w2)
            cos_psi = 1.0
            if le > 1e-12 and lw > 1e-12:
                cos_psi = abs(e0 * w0 + e1 * w1 + e2 * w2) / (le * lw)
            cp = min(max(cos_psi, 0.0), 1.0)
            beta = math.sqrt((beta_v * cp) ** 2 + beta_h * beta_h * (1.0 - cp * cp))
            # 5. footprint spread and peak factor
            spread = r * (math.sqrt(1.0 - cm * cm) / cm) * beta
            # 7a. the place-fixed relief of the range
            relief = 0.0
            if rough[m] != 0.0:
                cr = min(max(cos_eff, 0.05), 1.0)
                relief = rough[m] / (cr * math.sqrt(cr))
                relief *= relief_z
            if detect:
                peak = peak_factor(pulse_m, spread)
                # 6. detection, through the receiver's overlap and speckle where it has them
                key = U(0)  # the pulse's jitter key, made where it is used
                if rec[0] != 0.0 or (noise != 0.0 and jitter):
                    key = mix64(seed_noise + U(pulse_start + i))
                energy, energy_read = received_energies(rec, key, r, b)
                received = received_peak(energy, peak, r, ext)
                # 7b. range: relief + per-pulse jitter, quantised, windowed
                noise_m = 0.0
                if noise != 0.0 and jitter:
                    noise_m = noise * hash_normal(key)
                rm = measured_range(r, relief, noise_m, res)
                keep[q] = soft_detected(rec, received, threshold, key) and rm >= rmin and rm <= rmax
                range_meas[q] = rm
                # 8. intensity, as the pulse's only return (ray i is pulse pulse_start + i)
                pid = np.int64(pulse_start) + np.int64(i)
                intensity[q] = reported_intensity(energy_read, rm, pid, iscale, imax, istep,
                                                  response)  # fmt: skip
                if full:
                    peak_out[q] = peak
            if not full:  # the point record needs no more
                continue
            cos_inc_out[q] = cos_inc
            cos_eff_out[q] = cos_eff
            spread_out[q] = spread
            backscatter_out[q] = b
            relief_out[q] = relief


def evaluate_hits(
    chunk: CastChunk,
    tables: SceneTables,
    model: ReturnModel,
    streams: Streams,
    *,
    full: bool = True,
    jitter: bool = True,
    detect: bool = True,
) -> HitResults:
    """:func:`simulator.steps.hits.evaluate_hits` in one fused kernel over every core.

    With ``full=False`` only ``keep``, ``range_m`` and ``intensity`` are computed (all a
    single-return point record without diagnostics needs); the other fields are empty.
    With ``detect=False`` (footprint sub-rays, whose echoes are detected once formed)
    ``keep``, ``range_m``, ``intensity`` and ``peak_factor`` are empty.
    """
    hits = chunk.hits
    idx = np.flatnonzero(hits.hit)
    h = len(idx)
    d = h if detect else 0
    keep, range_m, intensity = np.empty(d, dtype=np.bool_), np.empty(d), np.empty(d)
    extra = [np.empty(h if full and (k != 3 or detect) else 0) for k in range(6)]
    rows, materials = tables.kernel_args(hits)  # (by object, or by face row)
    _evaluate_hits(
        idx, chunk.cast, chunk.shift_m, hits.range_m, hits.normal, rows,
        np.uint64(chunk.start), np.ascontiguousarray(chunk.cast_up, dtype=np.float64),
        materials, model.kernel_args(), streams.kernel_args(),
        keep, range_m, intensity, full, jitter, detect, *extra,
    )  # fmt: skip
    return HitResults(idx, keep, range_m, intensity, *extra)
