"""Beam-pattern check: do a real frame's points lie on a scanner preset's beams?

:func:`beam_residuals` takes a decoded frame (points in the sensor frame, optionally the
channel of every point and its time) and a :class:`~simulator.config.ScannerConfig`, and
measures, per channel, how far the points are from the preset's beam elevations, how the
points' azimuths sit on the preset's firing grid, and (with times) how the times sit on the
preset's firing cycle. :func:`elevation_clusters` finds a frame's own beam elevations, for a
sensor without a preset. :func:`firing_order` recovers the packet (laser-id) order of the
channels from the order in which a decoder wrote the points.

Angles follow :mod:`simulator.sensor.scanner`: azimuth from +x towards +y, elevation up from the
xy plane, a beam's origin ``beam_origin_offset_m`` from the spin axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..config import ScannerConfig

__all__ = ["BeamFit", "beam_residuals", "elevation_clusters", "firing_order", "swapped_pairs"]


@dataclass
class BeamFit:
    """Per-channel residuals of a frame against a preset's beams (``C`` channels).

    Attributes
    ----------
    matched_by : {"ring", "nearest"}
        Points compared with their given channel, or with the nearest channel elevation.
    channel : (N,) intp
        The channel each point was compared with.
    elevation_residual_deg : (N,) float64
        Measured elevation (seen from the beam origin) minus the channel's, deg.
    count : (C,) int64
        Points per channel.
    elevation_median_deg : (C,) float64
        Signed median elevation residual per channel, deg (NaN for an empty channel).
    elevation_median_abs_deg, elevation_p99_abs_deg : (C,) float64
        Median and 99th percentile of the absolute elevation residual per channel, deg.
    half_spacing_deg : (C,) float64
        Half the gap from each channel's elevation to its nearest neighbour's, deg.
    off_beam : int
        Points farther than their channel's ``half_spacing_deg`` from its elevation.
    phase_deg : (C,) float64
        Azimuth phase residual per channel, deg of head rotation, the common phase of all
        channels removed (see :func:`beam_residuals`); NaN for a non-spinning scanner.
    phase_common_deg : float
        The common phase removed, deg (the preset's ``start_azimuth_deg`` is arbitrary).
    phase_resultant : (C,) float64
        Mean resultant length of each channel's grid phases: 1 when every point sits at the
        same place on the firing grid, near 0 when the azimuths are not locked to the grid.
    time_median_abs_us, time_p99_abs_us : (C,) float64 or None
        With times: median and 99th percentile of the absolute time residual on the firing
        cycle, us, the common offset removed.
    time_offset_us : (C,) float64 or None
        With times: the circular-mean time residual of each channel, us (common removed).
    """

    matched_by: str
    channel: NDArray[np.intp]
    elevation_residual_deg: NDArray[np.float64]
    count: NDArray[np.int64]
    elevation_median_deg: NDArray[np.float64]
    elevation_median_abs_deg: NDArray[np.float64]
    elevation_p99_abs_deg: NDArray[np.float64]
    half_spacing_deg: NDArray[np.float64]
    off_beam: int
    phase_deg: NDArray[np.float64]
    phase_common_deg: float
    phase_resultant: NDArray[np.float64]
    time_median_abs_us: NDArray[np.float64] | None = None
    time_p99_abs_us: NDArray[np.float64] | None = None
    time_offset_us: NDArray[np.float64] | None = None

    @property
    def max_median_abs_deg(self) -> float:
        """Largest per-channel median |elevation residual|, deg (channels with points)."""
        return float(np.nanmax(self.elevation_median_abs_deg))

    @property
    def worst_channel(self) -> int:
        """The channel with the largest median |elevation residual|."""
        return int(np.nanargmax(self.elevation_median_abs_deg))

    @property
    def p99_abs_deg(self) -> float:
        """99th percentile of |elevation residual| over all points, deg."""
        return float(np.percentile(np.abs(self.elevation_residual_deg), 99))

    def large_channels(self, threshold_deg: float) -> NDArray[np.intp]:
        """Channels whose median |elevation residual| exceeds ``threshold_deg``."""
        return np.flatnonzero(np.nan_to_num(self.elevation_median_abs_deg) > threshold_deg)

    def summary(self) -> dict[str, float]:
        """The figures of the frame: one number each (deg, us, counts)."""
        phase = np.abs(self.phase_deg[self.count > 0])
        out = {
            "points": float(self.count.sum()),
            "median_abs_deg": float(np.median(np.abs(self.elevation_residual_deg))),
            "p99_abs_deg": self.p99_abs_deg,
            "max_channel_median_deg": self.max_median_abs_deg,
            "worst_channel": float(self.worst_channel),
            "max_abs_phase_deg": float(np.nanmax(phase)) if phase.size else float("nan"),
            "min_phase_resultant": float(np.nanmin(self.phase_resultant[self.count > 0])),
            "off_beam": float(self.off_beam),
        }
        if self.time_p99_abs_us is not None:
            out["time_max_channel_p99_us"] = float(np.nanmax(self.time_p99_abs_us))
        return out


def _circular_mean(angle_rad: NDArray, weight: NDArray | None = None) -> tuple[float, float]:
    """Circular mean (rad, in (-pi, pi]) and mean resultant length of angles."""
    w = np.ones_like(angle_rad) if weight is None else weight
    s = np.sum(w * np.exp(1j * angle_rad))
    total = float(np.sum(w))
    if total == 0.0:
        return float("nan"), float("nan")
    return float(np.angle(s)), float(np.abs(s) / total)


def _wrap(x: NDArray, period: float) -> NDArray:
    """``x`` wrapped to ``[-period / 2, period / 2)``."""
    return np.mod(x + 0.5 * period, period) - 0.5 * period


def beam_residuals(
    xyz_m: np.ndarray,
    scanner: ScannerConfig,
    ring: np.ndarray | None = None,
    time_s: np.ndarray | None = None,
) -> BeamFit:
    """Residuals of a frame's points against a preset's beams.

    Parameters
    ----------
    xyz_m : (N, 3) float
        Points in the sensor frame, m.
    scanner : ScannerConfig
        The preset; its ``channels`` table gives the elevations, azimuth offsets and
        firing offsets, ``beam_origin_offset_m`` the beam origin's distance from the axis.
    ring : (N,) int, optional
        Each point's channel, as the preset numbers them (index into ``elevation_deg``).
        Without it each point is compared with the nearest channel elevation.
    time_s : (N,) float, optional
        Each point's firing time, s (any origin).

    Returns
    -------
    BeamFit

    Notes
    -----
    Elevation: the beam origin lies ``r0 = beam_origin_offset_m`` from the spin axis along
    the point's azimuth (the head's azimuth differs by the channel's azimuth offset, a few
    degrees at most, which moves the origin sideways by ``r0 sin(offset)`` and changes
    the elevation by far less than 0.001 deg at the ranges of these frames), so the
    elevation seen from it is ``atan2(z, hypot(x, y) - r0)``.

    Azimuth phase (spinning scanners): channel ``c`` fires at ``t = k T + tau_c`` with the
    head at ``start + s (k + tau_c / T) D`` (``D = 360 / firings_per_revolution`` deg,
    ``s = -1`` clockwise) and points ``offset_c`` further round. A point's grid position
    ``u = s (a - offset_c - start) / D - tau_c / T`` is then a whole number ``k``. The
    fractional part of ``u`` is a phase on a circle of one column, so each channel's phase
    is the circular mean of ``exp(2 pi i u)`` over its points (not the arithmetic mean:
    points near a half-column would otherwise average to nonsense); its argument times ``D``
    is the phase in deg of head rotation, and its length ``R`` says how tightly the points
    sit on the grid. With ``firing_azimuth: block`` the head's azimuth is taken at ``k T``
    (``u = s (a - offset_c - start) / D``), as the decoded cloud reports it. The
    count-weighted circular mean over all channels (the sensor's start
    phase, which no preset fixes) is removed. A phase residual is only defined modulo ``D``:
    it is reported in ``[-D/2, D/2)``.

    Time (with ``time_s``): the decoders' time origins differ (per packet, per scan), so the
    time is compared with the firing cycle: ``t - tau_c`` modulo ``T`` should be the same
    for every channel; per point it is wrapped to ``[-T/2, T/2)`` about the common circular
    mean, per channel its circular mean is reported. This checks the per-channel firing
    offsets; it does not check the time against the azimuth over a revolution.
    """
    xyz = np.asarray(xyz_m, dtype=np.float64)
    ch_cfg = scanner.channels
    if ch_cfg is None:
        raise ValueError(f"{scanner.name}: no channels table to check against")
    elev_c = np.asarray(ch_cfg.elevation_deg, dtype=np.float64)
    n_ch = len(elev_c)
    r0 = float(scanner.beam_origin_offset_m)
    rho = np.hypot(xyz[:, 0], xyz[:, 1])
    elev = np.degrees(np.arctan2(xyz[:, 2], rho - r0))
    azim = np.degrees(np.arctan2(xyz[:, 1], xyz[:, 0]))

    order = np.argsort(elev_c)
    sorted_el = elev_c[order]
    gaps = np.diff(sorted_el)
    left = np.concatenate([[np.inf], gaps])
    right = np.concatenate([gaps, [np.inf]])
    half = np.empty(n_ch)
    half[order] = 0.5 * np.minimum(left, right)
    if ring is None:
        matched_by = "nearest"
        i = np.clip(np.searchsorted(sorted_el, elev), 1, n_ch - 1) if n_ch > 1 else None
        if i is None:
            channel = np.zeros(len(elev), np.intp)
        else:
            lower = np.abs(elev - sorted_el[i - 1]) <= np.abs(elev - sorted_el[i])
            channel = order[np.where(lower, i - 1, i)]
    else:
        matched_by = "ring"
        channel = np.asarray(ring, dtype=np.intp)
        if channel.size and (channel.min() < 0 or channel.max() >= n_ch):
            raise ValueError(f"ring values outside 0..{n_ch - 1}")
    res = elev - elev_c[channel]
    off_beam = int(np.count_nonzero(np.abs(res) > half[channel]))

    count = np.bincount(channel, minlength=n_ch).astype(np.int64)
    med = np.full(n_ch, np.nan)
    med_abs = np.full(n_ch, np.nan)
    p99 = np.full(n_ch, np.nan)
    by = np.argsort(channel, kind="stable")
    starts = np.concatenate([[0], np.cumsum(count)])
    res_by = res[by]
    for c in range(n_ch):
        r = res_by[starts[c] : starts[c + 1]]
        if r.size:
            med[c] = np.median(r)
            med_abs[c] = np.median(np.abs(r))
            p99[c] = np.percentile(np.abs(r), 99)

    phase = np.full(n_ch, np.nan)
    resultant = np.full(n_ch, np.nan)
    common_deg = float("nan")
    t_med = t_p99 = t_off = None
    if scanner.pattern == "spinning" and scanner.firings_per_revolution:
        step = 360.0 / scanner.firings_per_revolution
        sign = -1.0 if scanner.rotation == "clockwise" else 1.0
        az_off = np.asarray(ch_cfg.azimuth_offset_deg or [0.0] * n_ch, np.float64)
        tau_s = np.asarray(ch_cfg.firing_offset_us or [0.0] * n_ch, np.float64) * 1e-6
        period = scanner.firing_period_s
        u = sign * (azim - az_off[channel] - scanner.start_azimuth_deg) / step
        if scanner.firing_azimuth == "physical":  # block: the head's azimuth at k T
            u = u - tau_s[channel] / period
        ang = 2.0 * np.pi * u
        cm = np.array([_circular_mean(ang[by][starts[c] : starts[c + 1]]) for c in range(n_ch)])
        has = count > 0
        common, _ = _circular_mean(cm[has, 0], count[has].astype(np.float64))
        common_deg = common / (2.0 * np.pi) * step
        phase = _wrap((cm[:, 0] - common) / (2.0 * np.pi), 1.0) * step
        resultant = cm[:, 1]
        if time_s is not None:
            t = np.asarray(time_s, dtype=np.float64)
            tang = 2.0 * np.pi * (t - tau_s[channel]) / period
            tc, _ = _circular_mean(tang)
            dt_us = _wrap((tang - tc) / (2.0 * np.pi), 1.0) * period * 1e6
            t_med = np.full(n_ch, np.nan)
            t_p99 = np.full(n_ch, np.nan)
            t_off = np.full(n_ch, np.nan)
            dt_by = dt_us[by]
            tang_by = tang[by]
            for c in np.flatnonzero(has):
                d = dt_by[starts[c] : starts[c + 1]]
                t_med[c] = np.median(np.abs(d))
                t_p99[c] = np.percentile(np.abs(d), 99)
                a, _ = _circular_mean(tang_by[starts[c] : starts[c + 1]] - tc)
                t_off[c] = a / (2.0 * np.pi) * period * 1e6
    return BeamFit(
        matched_by=matched_by,
        channel=channel,
        elevation_residual_deg=res,
        count=count,
        elevation_median_deg=med,
        elevation_median_abs_deg=med_abs,
        elevation_p99_abs_deg=p99,
        half_spacing_deg=half,
        off_beam=off_beam,
        phase_deg=phase,
        phase_common_deg=common_deg,
        phase_resultant=resultant,
        time_median_abs_us=t_med,
        time_p99_abs_us=t_p99,
        time_offset_us=t_off,
    )


def swapped_pairs(fit: BeamFit, scanner: ScannerConfig, threshold_deg: float) -> list[tuple]:
    """Pairs of channels that look exchanged: each one's points sit on the other's beam.

    Parameters
    ----------
    fit : BeamFit
        A fit with ``matched_by == "ring"``.
    scanner : ScannerConfig
        The preset it was fitted against.
    threshold_deg : float
        A channel is suspect when its median |elevation residual| exceeds this, deg.

    Returns
    -------
    list of (int, int)
        Channel pairs ``(a, b)``, ``a < b``: the points of ``a`` are nearest ``b``'s
        elevation and those of ``b`` nearest ``a``'s.
    """
    assert scanner.channels is not None
    elev_c = np.asarray(scanner.channels.elevation_deg, dtype=np.float64)
    measured = elev_c + np.nan_to_num(fit.elevation_median_deg)
    nearest = np.argmin(np.abs(measured[:, None] - elev_c[None, :]), axis=1)
    pairs = []
    for a in fit.large_channels(threshold_deg):
        b = int(nearest[a])
        if b != a and nearest[b] == a and a < b:
            pairs.append((int(a), b))
    return pairs


def elevation_clusters(
    elevation_deg: np.ndarray, bin_deg: float = 0.01, min_fraction: float = 0.1
) -> NDArray[np.float64]:
    """The beam elevations of a frame: the peaks of its elevation histogram.

    Parameters
    ----------
    elevation_deg : (N,) float
        Point elevations, deg.
    bin_deg : float
        Histogram bin, deg; beams closer than about three bins merge.
    min_fraction : float
        A bin belongs to a beam when it holds at least this fraction of the points of an
        average beam bin (``N / number of non-empty bins``).

    Returns
    -------
    (B,) float64
        The count-weighted mean elevation of each run of consecutive populated bins, deg,
        in ascending order.
    """
    el = np.asarray(elevation_deg, dtype=np.float64)
    lo = np.floor(el.min() / bin_deg) * bin_deg
    idx = np.floor((el - lo) / bin_deg).astype(np.intp)
    hist = np.bincount(idx)
    level = min_fraction * len(el) / max(1, np.count_nonzero(hist))
    full = hist >= level
    edges = np.diff(np.concatenate([[0], full.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    sums = np.bincount(idx, weights=el, minlength=len(hist))
    cs, cn = np.concatenate([[0.0], np.cumsum(sums)]), np.concatenate([[0], np.cumsum(hist)])
    return (cs[stops] - cs[starts]) / (cn[stops] - cn[starts])


def firing_order(ring: np.ndarray, block: np.ndarray, n_channels: int) -> NDArray[np.intp]:
    """The order in which a decoder wrote the channels within a firing block.

    A decoder writes a block's points in the packet's slot (laser-id) order even when it
    renumbers the channels (nebula's RoboSense and Velodyne decoders number them by
    elevation). For every pair of channels present in a block, count which came first;
    each channel's slot is the number of channels it precedes in most blocks, counted
    from the end (a Copeland ranking; exact when the blocks agree).

    Parameters
    ----------
    ring : (N,) int
        Channel of each point in file order.
    block : (N,) int
        Block index of each point (non-decreasing); a channel at most once per block.
    n_channels : int
        Number of channels.

    Returns
    -------
    (n_channels,) intp
        ``slot[ring]``: the position of each channel in the block order.
    """
    ring = np.asarray(ring, dtype=np.intp)
    block = np.asarray(block, dtype=np.intp)
    first = np.concatenate([[0], np.flatnonzero(np.diff(block)) + 1])
    pos_in_block = np.arange(len(ring)) - np.repeat(first, np.diff(np.append(first, len(ring))))
    n_blocks = int(block.max()) + 1
    pos = np.full((n_blocks, n_channels), -1, dtype=np.int64)
    pos[block, ring] = pos_in_block
    present = pos >= 0
    before = np.zeros((n_channels, n_channels), dtype=np.int64)
    for a in range(n_channels):
        both = present[:, a : a + 1] & present
        before[a] = np.sum(both & (pos[:, a : a + 1] < pos), axis=0)
    wins = np.sum(before > before.T, axis=1)
    slot = np.empty(n_channels, dtype=np.intp)
    slot[np.argsort(-wins, kind="stable")] = np.arange(n_channels)
    return slot
