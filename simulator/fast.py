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

__all__ = [
    "AVAILABLE",
    "assemble",
    "echo_slots",
    "evaluate_hits",
    "form_echoes",
    "pack_las",
    "select_echoes",
    "spinning_rays",
    "sub_rays",
]

if AVAILABLE:
    _U = np.uint64
    _M1 = _U(0xBF58476D1CE4E5B9)
    _M2 = _U(0x94D049BB133111EB)
    _GAMMA = _U(0x9E3779B97F4A7C15)
    _S30, _S27, _S31, _S11 = _U(30), _U(27), _U(31), _U(11)
    _TWO_M53 = 2.0**-53
    _TOP = 1.0 - 2.0**-53
    _HALF_PI = 0.5 * math.pi
    _HALF_PI_BELOW = float(np.nextafter(np.pi / 2.0, 0.0))
    _COS_HALF_PI_BELOW = math.cos(_HALF_PI_BELOW)
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
    def _cos_turns(u):  # type: ignore[no-untyped-def]
        """``cos(2 pi u)`` for ``u`` in [0, 1), folded by symmetry so that libm only sees
        angles in [0, pi/2], where it is fastest: with ``w = |u - 1/2|`` (exact where it
        matters), ``cos(2 pi u) = -cos(2 pi w)``, and past a quarter turn
        ``cos(2 pi w) = -cos(2 pi (1/2 - w))``. One cosine, no unpredictable branch."""
        w = abs(u - 0.5)
        c = math.cos(_TWO_PI * min(w, 0.5 - w))
        return c if w > 0.25 else -c

    @njit(inline="always", cache=True)
    def _hash_normal(h):  # type: ignore[no-untyped-def]
        u1 = _uniform(h)
        u2 = _uniform(_mix64(h + _GAMMA))
        return math.sqrt(-2.0 * math.log(u1)) * _cos_turns(u2)

    @njit(inline="always", cache=True)
    def _tilted_cos(cos_theta, delta):  # type: ignore[no-untyped-def]
        """``cos(clip(acos(cos_theta) + delta, 0, pi/2 below))`` without acos: cosine and
        sine of the sum by the addition formulas (the sine's sign tells a sum below 0;
        the clamp at pi/2 is a floor on the cosine). Four times faster than acos + cos."""
        if abs(delta) >= _HALF_PI:  # beyond the formulas' unambiguous range
            theta = math.acos(cos_theta) + delta
            return math.cos(min(max(theta, 0.0), _HALF_PI_BELOW))
        sin_theta = math.sqrt(max(1.0 - cos_theta * cos_theta, 0.0))
        cd, sd = math.cos(delta), math.sin(delta)
        if sin_theta * cd + cos_theta * sd < 0.0:
            return 1.0
        return max(cos_theta * cd - sin_theta * sd, _COS_HALF_PI_BELOW)

    @njit(inline="always", cache=True)
    def _cell_hash(x, y, cell, seed_mixed):  # type: ignore[no-untyped-def]
        """place_normal's hash; ``seed_mixed`` is ``mix64(seed + GAMMA)``, made once."""
        i = _U(np.int64(math.floor(x / cell)))
        j = _U(np.int64(math.floor(y / cell)))
        return _mix64(_mix64(seed_mixed + i) + j)

    @njit(parallel=True, cache=True, nogil=True)
    def _spinning_rays(  # type: ignore[no-untyped-def]
        start, n, channels, period_s, cos_az, sin_az, cos_lag, sin_lag, el_cos, el_sin,
        sign, az0, rate, r0, rot, pos, rays,
    ):  # fmt: skip
        """One firing per iteration: the head's angle at the firing's start is turned by
        each channel's fixed angle (its firing lag times the spin, plus its azimuth
        offset) by the angle-addition formulas, so a firing costs one sin/cos pair."""
        # A rotation and a position per pulse, or one for all (each on its own).
        rs, ps = (1 if rot.shape[0] > 1 else 0), (1 if pos.shape[0] > 1 else 0)
        first = start // channels
        for f in prange((start + n - 1) // channels - first + 1):
            firing = first + f
            head = az0 + sign * _TWO_PI * (rate * (firing * period_s))
            cb, sb = math.cos(head), math.sin(head)
            lo = max(start - firing * channels, 0)
            hi = min(start + n - firing * channels, channels)
            for ch in range(lo, hi):
                k = firing * channels + ch - start
                j, jp = k * rs, k * ps
                ca = cb * cos_az[ch] - sb * sin_az[ch]  # cos(head + lag + azimuth offset)
                sa = sb * cos_az[ch] + cb * sin_az[ch]
                ds0, ds1, ds2 = el_cos[ch] * ca, el_cos[ch] * sa, el_sin[ch]
                oc = cb * cos_lag[ch] - sb * sin_lag[ch]  # the head itself, at this firing
                os_ = sb * cos_lag[ch] + cb * sin_lag[ch]
                os0, os1 = r0 * oc, r0 * os_
                for a in range(3):
                    rays[k, a] = rot[j, a, 0] * os0 + rot[j, a, 1] * os1 + pos[jp, a]
                    rays[k, 3 + a] = rot[j, a, 0] * ds0 + rot[j, a, 1] * ds1 + rot[j, a, 2] * ds2

    @njit(parallel=True, cache=True, nogil=True)
    def _evaluate_hits(  # type: ignore[no-untyped-def]
        idx, rays, shift, range_true, normals, obj, pulse_start, up,
        mat_of_obj, refl, mk, rough, slope, cell,
        beta_h, beta_v, pulse_m, threshold, ext, rmin, rmax, res, noise, iscale, imax,
        seed_slope, seed_relief, seed_noise,
        keep, range_meas, intensity, full, jitter, cos_inc_out, cos_eff_out, spread_out, peak_out,
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
                cos_eff = _tilted_cos(cos_inc, delta)
            elif cos_inc == 0.0:  # tilted_cos keeps theta below pi/2
                cos_eff = _COS_HALF_PI_BELOW
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
            if noise != 0.0 and jitter:
                rm += noise * _hash_normal(_mix64(seed_noise + _U(pulse_start + i)))
            if res > 0.0:
                rm = np.rint(rm / res) * res
            keep[q] = received >= threshold and rm >= rmin and rm <= rmax
            range_meas[q] = rm
            # 8. intensity
            intensity[q] = min(max(iscale * b, 0.0), imax)
            if not full:  # the point record needs no more
                continue
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
        # A rotation and a position per pulse of the chunk, or one (each on its own).
        rs, ps = (1 if rot.shape[0] > 1 else 0), (1 if pos.shape[0] > 1 else 0)
        for q in prange(len(sel_idx)):
            i = sel_idx[q]
            h = sel_hit[q]
            j, jp = i * rs, i * ps
            r = range_meas[h]
            p0 = (np.float64(rays[i, 0]) + shift[0]) + r * np.float64(rays[i, 3])
            p1 = (np.float64(rays[i, 1]) + shift[1]) + r * np.float64(rays[i, 4])
            p2 = (np.float64(rays[i, 2]) + shift[2]) + r * np.float64(rays[i, 5])
            if sensor_frame:
                p0, p1, p2 = p0 - pos[jp, 0], p1 - pos[jp, 1], p2 - pos[jp, 2]
                for a in range(3):
                    xyz[q, a] = rot[j, 0, a] * p0 + rot[j, 1, a] * p1 + rot[j, 2, a] * p2
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
    rotation : (3, 3), (1, 3, 3) or (N, 3, 3) float64
        World from sensor: one rotation, or one per pulse (a turning sensor).
    position_m : (3,), (1, 3) or (N, 3) float64
        Sensor origin in the world: one, or one per pulse (a moving sensor).
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
    lag = p.sign * 2.0 * math.pi * p.scanner.rotation_hz * p.firing_offset_s
    turn = lag + p.azimuth_offset_rad
    _spinning_rays(
        start, stop - start, p.channels, p.period_s, np.cos(turn), np.sin(turn), np.cos(lag),
        np.sin(lag), np.cos(el), np.sin(el), p.sign, math.radians(p.scanner.start_azimuth_deg),
        p.scanner.rotation_hz, p.scanner.beam_origin_offset_m,
        np.ascontiguousarray(np.asarray(rotation, dtype=np.float64).reshape(-1, 3, 3)),
        np.ascontiguousarray(np.asarray(position_m, dtype=np.float64).reshape(-1, 3) - shift_m),
        rays,
    )  # fmt: skip
    return rays


def evaluate_hits(*args: Any) -> None:
    """Run the fused per-hit kernel (see :func:`simulator.returns.evaluate_hits_fast`)."""
    _evaluate_hits(*args)


def assemble(*args: Any) -> None:
    """Run the record kernel (see :func:`simulator.returns.assemble_returns_fast`)."""
    _assemble(*args)


if AVAILABLE:

    @njit(parallel=True, cache=True, nogil=True)
    def _form_echoes(  # type: ignore[no-untyped-def]
        samples, weights, hit_of_ray, rng, relief, b, spread, obj, cos_inc, cos_eff,
        separation, count, e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between,
        e_obj, e_dom, e_cos_inc, e_cos_eff,
    ):  # fmt: skip
        """Per pulse: sort its sub-ray hits by range, split at gaps, accumulate each echo.

        The per-hit inputs are indexed by hit; ``hit_of_ray`` maps each cast ray to its
        hit (-1: a miss). Sub-ray ``k`` of pulse ``p`` is ray ``p * samples + k``."""
        pulses = hit_of_ray.shape[0] // samples
        blocks = min(pulses, 256)  # scratch arrays once a block of pulses, not once a pulse
        for block in prange(blocks):
            order = np.zeros(samples, dtype=np.int64)  # sub-ray numbers by range
            hit = np.zeros(samples, dtype=np.int64)  # their hits
            objs = np.zeros(samples, dtype=np.int64)
            obj_e = np.zeros(samples)
            obj_w = np.zeros(samples)
            obj_wr = np.zeros(samples)
            for p in range(block * pulses // blocks, (block + 1) * pulses // blocks):
                _echoes_of_pulse(
                    p, samples, weights, hit_of_ray, rng, relief, b, spread, obj, cos_inc,
                    cos_eff, separation, count, e_energy, e_norm, e_range, e_relief,
                    e_spread_plane, e_between, e_obj, e_dom, e_cos_inc, e_cos_eff, order, hit,
                    objs, obj_e, obj_w, obj_wr,
                )  # fmt: skip

    @njit(inline="always", cache=True)
    def _echoes_of_pulse(  # type: ignore[no-untyped-def]
        p, samples, weights, hit_of_ray, rng, relief, b, spread, obj, cos_inc, cos_eff,
        separation, count, e_energy, e_norm, e_range, e_relief, e_spread_plane, e_between,
        e_obj, e_dom, e_cos_inc, e_cos_eff, order, hit, objs, obj_e, obj_w, obj_wr,
    ):  # fmt: skip
        """One pulse of :func:`_form_echoes` (``order`` to ``obj_wr`` are scratch)."""
        base = p * samples
        n = 0
        for k in range(samples):  # insertion sort of the sub-rays that hit, by range
            h = hit_of_ray[base + k]
            if h >= 0:
                j = n
                while j > 0 and rng[hit[j - 1]] > rng[h]:
                    order[j], hit[j] = order[j - 1], hit[j - 1]
                    j -= 1
                order[j], hit[j] = k, h
                n += 1
        echo = -1
        start = 0
        prev = 0.0
        for q in range(n + 1):
            close = q == n
            if not close:
                r = rng[hit[q]]
                close = q > 0 and r - prev > separation
            if close and echo >= 0:  # finish echo `echo` over sub-rays start..q-1
                slot = base + echo
                energy = 0.0
                for t in range(start, q):
                    energy += weights[order[t]] * b[hit[t]]
                wsum = wr = wrel = wsp = wci = wce = 0.0
                m = 0
                for t in range(start, q):
                    i = hit[t]
                    e = weights[order[t]] * b[i]
                    ew = e if energy > 0.0 else weights[order[t]]
                    wsum += ew
                    wr += ew * rng[i]
                    wrel += ew * relief[i]
                    wsp += ew * spread[i]
                    wci += ew * cos_inc[i]
                    wce += ew * cos_eff[i]
                    f = 0
                    while f < m and objs[f] != obj[i]:
                        f += 1
                    if f == m:
                        objs[m] = obj[i]
                        obj_e[m] = obj_w[m] = obj_wr[m] = 0.0
                        m += 1
                    obj_e[f] += e
                    obj_w[f] += ew
                    obj_wr[f] += ew * rng[i]
                mean_r = wr / wsum
                var = 0.0
                best = 0
                for f in range(m):
                    var += obj_w[f] * (obj_wr[f] / obj_w[f] - mean_r) ** 2
                    # Most energy; on a tie the higher object index, as the numpy spec.
                    if obj_e[f] > obj_e[best] or (obj_e[f] == obj_e[best] and objs[f] > objs[best]):
                        best = f
                e_energy[slot] = energy
                e_norm[slot] = wsum
                e_range[slot] = mean_r
                e_relief[slot] = wrel / wsum
                e_spread_plane[slot] = wsp / wsum
                e_between[slot] = var / wsum
                e_obj[slot] = objs[best]
                e_dom[slot] = obj_e[best]
                e_cos_inc[slot] = wci / wsum
                e_cos_eff[slot] = wce / wsum
            if q == n:
                break
            if q == 0 or close:
                echo += 1
                start = q
            prev = r
        count[p] = echo + 1


#: Return modes by number, for the selection kernel.
RETURN_MODES = {"strongest": 0, "first": 1, "last": 2, "dual": 3, "multi": 4}


def echo_slots(
    samples: int,
    weights: NDArray[np.float64],
    total_rays: int,
    idx: NDArray[np.int64],
    range_m: NDArray[np.float64],
    relief_m: NDArray[np.float64],
    backscatter: NDArray[np.float64],
    spread_m: NDArray[np.float64],
    object_index: NDArray[np.int32],
    cos_incidence: NDArray[np.float64],
    cos_effective: NDArray[np.float64],
    separation_m: float,
) -> dict[str, NDArray]:
    """The echo kernel's raw output: per pulse ``p``, its echoes in slots
    ``p * samples + k`` for ``k < count[p]``, in order of true range.

    Returns a dict of (P * samples,) arrays ``energy, norm, range, relief, spread_plane,
    between, object, dominant, cos_incidence, cos_effective`` and the (P,) ``count``.
    """
    hit_of_ray = np.full(total_rays, -1, dtype=np.int64)
    hit_of_ray[idx] = np.arange(len(idx))
    names = ("energy", "norm", "range", "relief", "spread_plane", "between")
    # Only slots below a pulse's count are written and read: no need to zero the rest.
    out = {k: np.empty(total_rays) for k in (*names, "dominant", "cos_incidence", "cos_effective")}
    out["object"] = np.empty(total_rays, dtype=np.int64)
    out["count"] = np.zeros(total_rays // samples, dtype=np.int64)
    _form_echoes(
        samples, weights, hit_of_ray, range_m, relief_m, backscatter, spread_m,
        object_index.astype(np.int64), cos_incidence, cos_effective, separation_m,
        out["count"], *(out[k] for k in names), out["object"], out["dominant"],
        out["cos_incidence"], out["cos_effective"],
    )  # fmt: skip
    return out


def form_echoes(e: dict[str, NDArray], samples: int, pulse_length_m: float) -> Any:
    """:func:`simulator.echoes.form_echoes`'s :class:`~simulator.echoes.Echoes` from the
    slots of :func:`echo_slots` (echoes in pulse, then true-range order)."""
    from . import physics
    from .echoes import Echoes

    total_rays = len(e["count"]) * samples
    slot_echo = np.arange(total_rays) % samples
    used = slot_echo < np.repeat(e["count"], samples)
    spread = np.sqrt(e["spread_plane"][used] ** 2 + 4.0 * e["between"][used])
    energy = e["energy"][used]
    return Echoes(
        pulse=np.flatnonzero(used) // samples,
        rank=slot_echo[used],
        energy=energy,
        range_true_m=e["range"][used],
        relief_m=e["relief"][used],
        spread_m=spread,
        peak_factor=np.asarray(physics.pulse_peak_factor(pulse_length_m, spread), np.float64),
        object_index=e["object"][used].astype(np.int32),
        energy_fraction=np.where(
            energy > 0.0, e["dominant"][used] / np.maximum(energy, 1e-300), 1.0
        ),
        cos_incidence=e["cos_incidence"][used],
        cos_effective=e["cos_effective"][used],
    )


if AVAILABLE:

    @njit(parallel=True, cache=True, nogil=True)
    def _select_echoes(  # type: ignore[no-untyped-def]
        samples, count, energy, range_true, relief, spread_plane, between, pulse_start,
        noise_seed, noise_m, resolution, pulse_m, threshold, ext, rmin, rmax, mode,
        max_returns, out_slot, out_number, out_total, out_range, out_spread, out_peak,
    ):  # fmt: skip
        """Per pulse: measure its echoes (range jitter by pulse and echo rank,
        quantisation, detection, as :func:`simulator.returns.echo_returns`) and pick
        the reported ones (as :func:`simulator.echoes.select_returns`), in range order
        into slots ``p * R ...`` of the (P, R) outputs (slot -1: none)."""
        for p in prange(count.shape[0]):
            n = count[p]
            base = p * samples
            rm = np.zeros(samples)
            received = np.zeros(samples)
            spread = np.zeros(samples)
            peak = np.zeros(samples)
            order = np.zeros(samples, dtype=np.int64)  # detected echoes by measured range
            key0 = _mix64(noise_seed + _U(pulse_start + p))
            m = 0
            for k in range(n):
                s = base + k
                spread[k] = math.sqrt(spread_plane[s] ** 2 + 4.0 * between[s])
                peak[k] = 1.0
                if pulse_m > 0.0:
                    peak[k] = pulse_m / math.sqrt(pulse_m * pulse_m + spread[k] * spread[k])
                rs = max(range_true[s], 1e-6)
                received[k] = energy[s] * peak[k] / (rs * rs)
                if ext > 0.0:
                    received[k] *= math.exp(-2.0 * ext * range_true[s])
                key = key0 if k == 0 else _mix64(key0 + _U(k))
                r = range_true[s] + relief[s] + noise_m * _hash_normal(key)
                if resolution > 0.0:
                    r = np.rint(r / resolution) * resolution
                rm[k] = r
                if received[k] >= threshold and r >= rmin and r <= rmax:
                    j = m  # insertion by range, stable: equal ranges keep echo order
                    while j > 0 and rm[order[j - 1]] > r:
                        order[j] = order[j - 1]
                        j -= 1
                    order[j] = k
                    m += 1
            if m == 0:
                continue
            # Strongest and second strongest, in echo order on ties (a stable sort).
            detected = np.zeros(samples, dtype=np.bool_)
            for t in range(m):
                detected[order[t]] = True
            first = second = -1
            for k in range(n):
                if not detected[k]:
                    continue
                if first < 0 or received[k] > received[first]:
                    first, second = k, first
                elif second < 0 or received[k] > received[second]:
                    second = k
            last = order[m - 1]
            out = 0
            for t in range(m):
                k = order[t]
                if mode == 0:
                    keep = k == first
                elif mode == 1:
                    keep = t == 0
                elif mode == 2:
                    keep = t == m - 1
                elif mode == 3:  # strongest, and the last, or the second if it is the last
                    keep = k == first or (k == second if first == last else t == m - 1)
                else:
                    keep = t < max_returns
                if keep:
                    out_slot[p, out] = base + k
                    out_range[p, out] = rm[k]
                    out_spread[p, out] = spread[k]
                    out_peak[p, out] = peak[k]
                    out += 1
            for t in range(out):
                out_number[p, t] = t + 1
                out_total[p, t] = out


def select_echoes(
    slots: dict[str, NDArray],
    samples: int,
    pulse_start: int,
    noise_seed: int,
    model: Any,
    mode: str,
    max_returns: int,
) -> dict[str, NDArray]:
    """Measured, detected and selected returns of :func:`echo_slots`' echoes.

    Returns (K,) arrays in pulse then range order: ``slot`` (into the slot arrays),
    ``pulse`` (in the chunk), ``return_number``, ``num_returns`` (uint8), ``range_m``
    (measured), ``spread_m`` and ``peak_factor``.
    """
    pulses = len(slots["count"])
    width = max_returns
    out_slot = np.full((pulses, width), -1, dtype=np.int64)
    out_number = np.zeros((pulses, width), dtype=np.uint8)
    out_total = np.zeros((pulses, width), dtype=np.uint8)
    extra = [np.zeros((pulses, width)) for _ in range(3)]
    _select_echoes(
        samples, slots["count"], slots["energy"], slots["range"], slots["relief"],
        slots["spread_plane"], slots["between"], np.uint64(pulse_start), np.uint64(noise_seed),
        model.range_noise_m, model.range_resolution_m, model.pulse_length_m, model.threshold,
        model.extinction_per_m, model.range_min_m, model.range_max_m, RETURN_MODES[mode],
        max_returns, out_slot, out_number, out_total, *extra,
    )  # fmt: skip
    flat = np.flatnonzero(out_slot.ravel() >= 0)
    return {
        "slot": out_slot.ravel()[flat],
        "pulse": flat // width,
        "return_number": out_number.ravel()[flat],
        "num_returns": out_total.ravel()[flat],
        "range_m": extra[0].ravel()[flat],
        "spread_m": extra[1].ravel()[flat],
        "peak_factor": extra[2].ravel()[flat],
    }


if AVAILABLE:

    @njit(parallel=True, cache=True, nogil=True)
    def _sub_rays(rays, up, fwd, tan_h, tan_v, out):  # type: ignore[no-untyped-def]
        """Fan each beam into sub-rays: d + tan_h e_h + tan_v e_v, normalised (beam.py)."""
        n = tan_h.shape[0]
        stride = 1 if up.shape[0] > 1 else 0  # one axis row per beam, or one for all
        for p in prange(rays.shape[0]):
            a = p * stride
            u0, u1, u2 = up[a, 0], up[a, 1], up[a, 2]
            d0, d1, d2 = np.float64(rays[p, 3]), np.float64(rays[p, 4]), np.float64(rays[p, 5])
            ud = u0 * d0 + u1 * d1 + u2 * d2
            v0, v1, v2 = u0 - ud * d0, u1 - ud * d1, u2 - ud * d2
            lv = math.sqrt(v0 * v0 + v1 * v1 + v2 * v2)
            if lv < 1e-9:
                f0, f1, f2 = fwd[a, 0], fwd[a, 1], fwd[a, 2]
                fd = f0 * d0 + f1 * d1 + f2 * d2
                v0, v1, v2 = f0 - fd * d0, f1 - fd * d1, f2 - fd * d2
                lv = math.sqrt(v0 * v0 + v1 * v1 + v2 * v2)
            v0, v1, v2 = v0 / lv, v1 / lv, v2 / lv
            h0, h1, h2 = d1 * v2 - d2 * v1, d2 * v0 - d0 * v2, d0 * v1 - d1 * v0
            for k in range(n):
                s0 = d0 + tan_h[k] * h0 + tan_v[k] * v0
                s1 = d1 + tan_h[k] * h1 + tan_v[k] * v1
                s2 = d2 + tan_h[k] * h2 + tan_v[k] * v2
                ls = math.sqrt(s0 * s0 + s1 * s1 + s2 * s2)
                row = p * n + k
                out[row, 0], out[row, 1], out[row, 2] = rays[p, 0], rays[p, 1], rays[p, 2]
                out[row, 3], out[row, 4], out[row, 5] = s0 / ls, s1 / ls, s2 / ls


def sub_rays(
    rays: NDArray[np.float32],
    sensor_up: NDArray[np.float64],
    sensor_forward: NDArray[np.float64],
    half_angle_h_rad: float,
    half_angle_v_rad: float,
    offsets: NDArray[np.float64],
) -> NDArray[np.float32]:
    """:func:`simulator.beam.sub_ray_directions` fused with the ray layout: (P*N, 6) float32.

    ``sensor_up`` and ``sensor_forward`` are (3,), (1, 3) or one row per beam.
    """
    tan_h = np.tan(offsets[:, 0] * half_angle_h_rad)
    tan_v = np.tan(offsets[:, 1] * half_angle_v_rad)
    out = np.zeros((len(rays) * len(offsets), 6), dtype=np.float32)
    up = np.ascontiguousarray(np.asarray(sensor_up, np.float64).reshape(-1, 3))
    fwd = np.ascontiguousarray(np.asarray(sensor_forward, np.float64).reshape(-1, 3))
    _sub_rays(rays, up, fwd, tan_h, tan_v, out)
    return out


if AVAILABLE:

    @njit(parallel=True, cache=True, nogil=True)
    def _pack_las(  # type: ignore[no-untyped-def]
        xyz, intensity, return_number, num_returns, label, time_s, ring, instance, range_m,
        offset, scale, X, Y, Z, level, bits, cls, gps, ring_out, label_out, instance_out,
        range_out,
    ):  # fmt: skip
        for i in prange(xyz.shape[0]):
            X[i] = np.int32(np.rint((np.float64(xyz[i, 0]) - offset[0]) / scale[0]))
            Y[i] = np.int32(np.rint((np.float64(xyz[i, 1]) - offset[1]) / scale[1]))
            Z[i] = np.int32(np.rint((np.float64(xyz[i, 2]) - offset[2]) / scale[2]))
            level[i] = np.uint16(min(max(np.rint(np.float64(intensity[i])), 0.0), 65535.0))
            bits[i] = (return_number[i] & 0x0F) | (num_returns[i] << 4)
            cls[i] = label[i] if label[i] < 256 else 0
            gps[i] = time_s[i]
            ring_out[i] = ring[i]
            label_out[i] = label[i]
            instance_out[i] = instance[i]
            range_out[i] = range_m[i]


def pack_las(
    fields: dict[str, NDArray], offset_m: NDArray, scale_m: NDArray, data: NDArray
) -> None:
    """Fill LAS point-format-6 records ``data`` (with the ring, label, instance, range
    extra bytes) from a point record's fields; the same values as :mod:`simulator.io.las`'s
    numpy packing. ``data`` is the point format's structured array, fields written in place.
    """
    f = fields
    _pack_las(
        f["xyz"], f["intensity"], f["return_number"], f["num_returns"], f["label"], f["time_s"],
        f["ring"], f["instance"], f["range_m"], np.asarray(offset_m, np.float64),
        np.asarray(scale_m, np.float64), data["X"], data["Y"], data["Z"], data["intensity"],
        data["bit_fields"], data["classification"], data["gps_time"], data["ring"],
        data["label"], data["instance"], data["range"],
    )  # fmt: skip
