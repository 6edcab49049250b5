"""Fused numba kernels of the hot path: ray generation, the per-hit model, the record.

The numpy functions in :mod:`simulator.physics`, :mod:`simulator.scanner` and
:mod:`simulator.returns` are the specification; these kernels compute the same
quantities in one pass per pulse, over both cores, without temporary arrays. The
tests compare the two value for value. Each pulse is computed on its own from its
inputs and its global pulse id, so the result does not depend on threads or chunks.

If numba cannot be imported, :data:`AVAILABLE` is false and the pipeline uses the
numpy path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

try:
    import numba
    from numba import njit, prange

    # OpenMP first: numba's TBB layer wants a newer TBB than Open3D's, and warns.
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]
    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without numba
    AVAILABLE = False

__all__ = ["AVAILABLE", "assemble", "evaluate_hits", "spinning_rays", "threads"]

if AVAILABLE:
    _U = np.uint64
    _M1 = _U(0xBF58476D1CE4E5B9)
    _M2 = _U(0x94D049BB133111EB)
    _GAMMA = _U(0x9E3779B97F4A7C15)
    _S30, _S27, _S31, _S11 = _U(30), _U(27), _U(31), _U(11)
    _TWO_M53 = 2.0**-53
    _TOP = 1.0 - 2.0**-53
    _HALF_PI_BELOW = float(np.nextafter(np.pi / 2.0, 0.0))
    _TWO_PI = 2.0 * math.pi

    @njit(inline="always", cache=True)
    def _mix64(x):  # type: ignore[no-untyped-def]
        x = (x ^ (x >> _S30)) * _M1
        x = (x ^ (x >> _S27)) * _M2
        return x ^ (x >> _S31)

    @njit(inline="always", cache=True)
    def _uniform(h):  # type: ignore[no-untyped-def]
        return min((float(h >> _S11) + 0.5) * _TWO_M53, _TOP)

    @njit(inline="always", cache=True)
    def _hash_normal(h):  # type: ignore[no-untyped-def]
        u1 = _uniform(h)
        u2 = _uniform(_mix64(h + _GAMMA))
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(_TWO_PI * u2)

    @njit(inline="always", cache=True)
    def _cell_hash(x, y, cell, seed_mixed):  # type: ignore[no-untyped-def]
        """place_normal's hash; ``seed_mixed`` is ``mix64(seed + GAMMA)``, made once."""
        i = _U(np.int64(math.floor(x / cell)))
        j = _U(np.int64(math.floor(y / cell)))
        return _mix64(_mix64(seed_mixed + i) + j)

    @njit(parallel=True, cache=True, nogil=True)
    def _spinning_rays(  # type: ignore[no-untyped-def]
        start, n, channels, period_s, offset_s, el_cos, el_sin, az_offset, sign, az0, rate,
        r0, rot, pos, rays,
    ):  # fmt: skip
        for k in prange(n):
            pid = start + k
            firing = pid // channels
            ch = pid - firing * channels
            t = firing * period_s + offset_s[ch]
            head = (az0 + sign * _TWO_PI * (rate * t)) % _TWO_PI
            az = head + az_offset[ch]
            ca, sa = math.cos(az), math.sin(az)
            ds0, ds1, ds2 = el_cos[ch] * ca, el_cos[ch] * sa, el_sin[ch]
            if az_offset[ch] != 0.0:
                ca, sa = math.cos(head), math.sin(head)
            os0, os1 = r0 * ca, r0 * sa
            for a in range(3):
                rays[k, a] = rot[a, 0] * os0 + rot[a, 1] * os1 + pos[a]
                rays[k, 3 + a] = rot[a, 0] * ds0 + rot[a, 1] * ds1 + rot[a, 2] * ds2

    @njit(parallel=True, cache=True, nogil=True)
    def _evaluate_hits(  # type: ignore[no-untyped-def]
        idx, rays, shift, range_true, normals, obj, pulse_start, up,
        mat_of_obj, refl, mk, rough, slope, cell,
        beta_h, beta_v, pulse_m, threshold, ext, rmin, rmax, res, noise, iscale, imax,
        seed_slope, seed_relief, seed_noise,
        keep, range_meas, intensity, cos_inc_out, cos_eff_out, spread_out, peak_out,
        backscatter_out, relief_out,
    ):  # fmt: skip
        per_pulse_up = up.shape[0] > 1
        slope_key = _mix64(seed_slope + _GAMMA)
        relief_key = _mix64(seed_relief + _GAMMA)
        for q in prange(len(idx)):
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
            if slope[m] != 0.0:
                delta = slope[m] * _hash_normal(_cell_hash(u, v, c, slope_key))
                theta = math.acos(cos_inc) + delta
                cos_eff = math.cos(min(max(theta, 0.0), _HALF_PI_BELOW))
            elif cos_inc == 0.0:  # tilted_cos keeps theta below pi/2
                cos_eff = math.cos(_HALF_PI_BELOW)
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
            peak = 1.0
            if pulse_m > 0.0:
                peak = pulse_m / math.sqrt(pulse_m * pulse_m + spread * spread)
            # 6. detection
            rs = max(r, 1e-6)
            received = b * peak / (rs * rs)
            if ext > 0.0:
                received *= math.exp(-2.0 * ext * r)
            # 7. range: place-fixed relief + per-pulse jitter, quantised, windowed
            relief = 0.0
            if rough[m] != 0.0:
                cr = min(max(cos_eff, 0.05), 1.0)
                relief = rough[m] / (cr * math.sqrt(cr))
                relief *= _hash_normal(_cell_hash(u, v, c, relief_key))
            rm = r + relief
            if noise != 0.0:
                rm += noise * _hash_normal(_mix64(seed_noise + _U(pulse_start + i)))
            if res > 0.0:
                rm = np.rint(rm / res) * res
            keep[q] = received >= threshold and rm >= rmin and rm <= rmax
            range_meas[q] = rm
            # 8. intensity
            intensity[q] = min(max(iscale * b, 0.0), imax)
            cos_inc_out[q] = cos_inc
            cos_eff_out[q] = cos_eff
            spread_out[q] = spread
            peak_out[q] = peak
            backscatter_out[q] = b
            relief_out[q] = relief

    @njit(parallel=True, cache=True, nogil=True)
    def _assemble(  # type: ignore[no-untyped-def]
        sel_idx, sel_hit, rays, shift, range_meas, intensity, obj, pulse_start, channels,
        period_s, offset_s, rot, pos, sensor_frame, labels, instances,
        xyz, intensity_out, range_out, ring, time_s, label, instance,
    ):  # fmt: skip
        for q in prange(len(sel_idx)):
            i = sel_idx[q]
            h = sel_hit[q]
            r = range_meas[h]
            p0 = (np.float64(rays[i, 0]) + shift[0]) + r * np.float64(rays[i, 3])
            p1 = (np.float64(rays[i, 1]) + shift[1]) + r * np.float64(rays[i, 4])
            p2 = (np.float64(rays[i, 2]) + shift[2]) + r * np.float64(rays[i, 5])
            if sensor_frame:
                p0, p1, p2 = p0 - pos[0], p1 - pos[1], p2 - pos[2]
                for a in range(3):
                    xyz[q, a] = rot[0, a] * p0 + rot[1, a] * p1 + rot[2, a] * p2
            else:
                xyz[q, 0], xyz[q, 1], xyz[q, 2] = p0, p1, p2
            pid = pulse_start + i
            firing = pid // channels
            ch = pid - firing * channels
            ring[q] = ch
            time_s[q] = firing * period_s + offset_s[ch]
            intensity_out[q] = intensity[h]
            range_out[q] = r
            label[q] = labels[obj[i]]
            instance[q] = instances[obj[i]]


def spinning_rays(
    pattern: Any,
    start: int,
    stop: int,
    rotation: NDArray[np.float64],
    position_m: NDArray[np.float64],
    shift_m: NDArray[np.float64],
) -> NDArray[np.float32]:
    """Open3D rays of pulses ``start..stop`` of a :class:`~simulator.scanner.SpinningPattern`.

    Parameters
    ----------
    pattern : SpinningPattern
    start, stop : int
        Global pulse ids.
    rotation : (3, 3) float64
        World from sensor.
    position_m : (3,) float64
        Sensor origin in the world.
    shift_m : (3,) float64
        The ray engine's local origin, subtracted from the ray origins.

    Returns
    -------
    (N, 6) float32
        Origins (world, less ``shift_m``) and unit directions.
    """
    p = pattern
    rays = np.zeros((stop - start, 6), dtype=np.float32)
    el = p.elevation_rad
    _spinning_rays(
        start, stop - start, p.channels, p.period_s, p.firing_offset_s, np.cos(el), np.sin(el),
        p.azimuth_offset_rad, p.sign, math.radians(p.scanner.start_azimuth_deg),
        p.scanner.rotation_hz, p.scanner.beam_origin_offset_m,
        np.ascontiguousarray(rotation, dtype=np.float64),
        np.ascontiguousarray(position_m, dtype=np.float64) - shift_m, rays,
    )  # fmt: skip
    return rays


def evaluate_hits(*args: Any) -> None:
    """Run the fused per-hit kernel (see :func:`simulator.returns.evaluate_hits_fast`)."""
    _evaluate_hits(*args)


def assemble(*args: Any) -> None:
    """Run the record kernel (see :func:`simulator.returns.assemble_returns_fast`)."""
    _assemble(*args)


def threads() -> int:
    """Number of threads the kernels use."""
    return int(numba.get_num_threads()) if AVAILABLE else 1
