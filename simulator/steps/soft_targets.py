"""Soft targets of the weather (fog, dust): media that backscatter all along the beam,
whose echo is the peak of the received waveform.

**Soft targets** (fog, dust). The medium backscatters ``beta`` per metre and
steradian along the whole beam (fog: ``beta = 0.046 / MOR``, Rasshofer et al. 2011;
dust: a lidar ratio of 45 sr). A slab ``dr`` at range ``r`` returns what a
Lambertian target of reflectance ``pi beta dr`` would, so the received waveform, in
the units of the hard targets' ``b / R^2``, is

``S(R) = integral(pi beta zeta(r) exp(-2 alpha r) / r^2 lit(r) h(R - r) dr)``

where ``h`` is the pulse's shape in range (a Gaussian of FWHM the pulse length
``L``), ``zeta`` the receiver's near-field overlap (``overlap_m`` of the scanner)
and ``lit(r)`` the share of the beam not yet stopped by the scene at ``r`` (1, or 0
behind the hit; with footprints the energy share of the sub-rays that reach ``r``).
The medium's echo is the waveform's peak: at range ``R*`` with received peak
``S(R*)``, detected when it reaches the threshold. Its reported intensity is the
reflectivity a hard target there would have needed, ``S(R*) R*^2 exp(2 alpha R*)``
times the intensity scale. With a pulse length of 0 the medium returns nothing.

The numba kernels (:mod:`simulator.kernels.soft_targets`) give the same peaks, value for
value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..beam import BeamOptics, BeamPattern
from .echoes import Echoes
from .hits import ReturnModel

__all__ = ["SoftTarget", "WaveformPeaks", "cut_peak_bins", "peak_echoes"]


#: Source samples per pulse length in the soft-target waveform.
_SOFT_SAMPLES_PER_PULSE = 100


#: Most samples of a soft-target waveform.
_SOFT_MAX_SAMPLES = 1500


#: Waveform values gathered at once for footprints that cut a soft target at several
#: places (bounds the memory: 32 MB).
_SOFT_BLOCK_VALUES = 4_000_000


@dataclass(frozen=True)
class SoftTarget:
    """A medium that backscatters all along the beam (fog, dust), tabulated for a scanner.

    Attributes
    ----------
    kind : str
        ``fog`` or ``dust``.
    backscatter_per_m_sr : float
        ``beta``.
    object_index : int
        The object id its points get.
    stream : np.uint64
        Hash seed of its points' range jitter.
    range_m : (G,) float64
        Where the medium is sampled, from the overlap's start to 12 pulse lengths beyond
        its end; the waveform is received at the first ``W`` of them.
    source : (G,) float64
        ``pi beta zeta(r) exp(-2 alpha r) / r^2 dr`` of each sample.
    waveform : (G + 1, W) float64
        Row ``c``: the waveform at ``range_m[:W]`` of a beam cut after its first ``c``
        samples (the sum of their sources times the pulse shape); row ``G`` is uncut.
        ``W`` ends just beyond the uncut peak, beyond which no cut beam peaks.
    peak_range_m, peak_received : float
        The waveform's peak when nothing cuts the beam.
    reach_m : float
        A beam cut beyond this leaves the peak as it is (the pulse shape has fallen to
        1e-19 of its peak four pulse lengths away).
    """

    kind: str
    backscatter_per_m_sr: float
    object_index: int
    stream: np.uint64
    range_m: NDArray[np.float64]
    source: NDArray[np.float64]
    waveform: NDArray[np.float64]
    peak_range_m: float
    peak_received: float
    reach_m: float

    @classmethod
    def of(
        cls,
        kind: str,
        beta: float,
        optics: BeamOptics,
        model: ReturnModel,
        object_index: int,
        stream: np.uint64,
    ) -> SoftTarget:
        """Tabulate the waveform of a medium of backscatter ``beta`` for a scanner's beam."""
        length = model.pulse_length_m
        start, full = optics.overlap_range_m
        end = full + 12.0 * length
        step = max(length / _SOFT_SAMPLES_PER_PULSE, (end - start) / _SOFT_MAX_SAMPLES)
        first = max(start, step)
        r = first + step * np.arange(int(np.ceil((end - first) / step)) + 1)
        src = np.pi * beta * optics.overlap(r) * model.two_way_transmission(r)
        src = src / r**2 * step
        shape = np.exp(-4.0 * np.log(2.0) * ((r[:, None] - r[None, :]) / length) ** 2)
        uncut = shape @ src
        peak_r, peak_s = _peak(r, uncut[None, :])
        reach = float(peak_r[0]) + 4.0 * length
        # A cut beam's waveform peaks no farther than the uncut one (what the cut removes
        # grows towards the cut), so the receiving ranges stop just beyond that peak.
        receiving = int(np.searchsorted(r, peak_r[0])) + 4
        waveform = np.zeros((len(r) + 1, receiving))
        np.cumsum(shape[:receiving].T * src[:, None], axis=0, out=waveform[1:])
        return cls(kind, beta, object_index, stream, r, src, waveform, float(peak_r[0]),
                   float(peak_s[0]), reach)  # fmt: skip

    @cached_property
    def peak_bins(self) -> NDArray[np.int64]:
        """(G, 2) int64: :func:`cut_peak_bins` of the waveform, made on first use."""
        return cut_peak_bins(self.waveform)

    def echoes(
        self,
        sub_range_m: NDArray[np.float64],
        weights: NDArray[np.float64],
        behind_m: NDArray[np.float64] | None = None,
        two_way: NDArray[np.float64] | None = None,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The waveform peak of each pulse, its beam cut by the scene.

        Without ``behind_m`` the light stops at each sub-ray's first surface. With it, it
        goes on through see-through surfaces to the first opaque one, and the medium
        behind each surface is seen through it: its sources are weighted by the two-way
        factors of the surfaces in front (``T^2`` a pane, ``T`` a porous layer), as the
        surfaces behind them are. The waveform is then ``sum_k P_k (1 - f_k) W(c_k) +
        P_L W(inf)``, with ``W(c)`` the waveform of a beam cut at ``c``, ``c_k`` the
        ``k``-th surface, ``f_k`` its factor and ``P_k`` the product of the factors in
        front of it.

        Parameters
        ----------
        sub_range_m : (P, S) float64
            Range of each sub-ray's hit (``inf``: a miss); the light stops there unless
            ``behind_m`` is given.
        weights : (S,) float64
            The sub-rays' energy shares.
        behind_m : (L, P, S) float64, optional
            Range of each sub-ray's surface in each layer behind the first (``inf``:
            none), increasing along the layers.
        two_way : (L + 1, P, S) float64, optional
            The two-way factor of seeing through each of those surfaces (the first, then
            one a layer behind); 0 for an opaque surface or none. Given with ``behind_m``.

        Returns
        -------
        range_m, received : (P,) float64
        """
        n_pulses = len(sub_range_m)
        range_m = np.full(n_pulses, self.peak_range_m)
        received = np.full(n_pulses, self.peak_received)
        rows = np.flatnonzero((sub_range_m < self.reach_m).any(axis=1))
        if len(rows) == 0:
            return range_m, received
        g, receiving = self.waveform.shape[0] - 1, self.waveform.shape[1]
        step = self.range_m[1] - self.range_m[0]
        share = weights / weights.sum()
        layers = 1 if behind_m is None else len(behind_m) + 2
        block = max(1, _SOFT_BLOCK_VALUES // (len(weights) * receiving * layers))

        def cut(at_m: NDArray[np.float64]) -> NDArray[np.float64]:
            # Cell j spans r_j -+ step / 2; the beam lights the cells before the cut,
            # and the cut cell in part: (n, S, receiving).
            x = np.clip((at_m - self.range_m[0]) / step + 0.5, 0.0, float(g))
            full = np.minimum(np.floor(x).astype(np.int64), g - 1)
            frac = (x - full)[:, :, None]
            below, above = self.waveform[full], self.waveform[full + 1]
            return below + frac * (above - below)

        for lo in range(0, len(rows), block):
            part = rows[lo : lo + block]
            if behind_m is None or two_way is None:
                wave = np.einsum("s,psg->pg", share, cut(sub_range_m[part]))
            else:
                # The share of each sub-ray's sources up to its k-th surface:
                # P_k (1 - f_k); what passes its last surface is uncut. A layer where a
                # sub-ray meets nothing adds exactly nothing, so the sum does not depend
                # on how many layers a chunk has.
                passing = np.ones((len(part), len(weights)))
                wave = np.zeros((len(part), receiving))
                for k in range(len(behind_m) + 1):
                    at = sub_range_m[part] if k == 0 else behind_m[k - 1][part]
                    met = np.isfinite(at)
                    f = two_way[k][part]
                    up_to = np.where(met, share * passing * (1.0 - f), 0.0)
                    wave += np.einsum("ps,psg->pg", up_to, cut(at))
                    passing = np.where(met, passing * f, passing)
                uncut = (passing * share).sum(axis=1)
                wave += uncut[:, None] * self.waveform[g][None, :receiving]
            range_m[part], received[part] = _peak(self.range_m[:receiving], wave)
        return range_m, received


#: Below the waveform's largest value times this, two values count as equal where
#: :func:`cut_peak_bins` bounds a cut's peak (rounding moves the interpolation by a
#: few parts in 1e16 of it).
_PEAK_BIN_MARGIN = 1e-12


def cut_peak_bins(waveform: NDArray[np.float64]) -> NDArray[np.int64]:
    """Where the first maximum of a beam cut between two rows of a soft target's waveform
    can lie, for a single ray (the cut ``below + frac * (above - below)``, ``frac`` in
    [0, 1]): row ``c`` gives the bins ``lo .. hi`` (inclusive) for a cut between rows ``c``
    and ``c + 1``.

    A cut lies between its two rows in every bin (within rounding), so its maximum is at
    least ``L``, the largest of the two rows' smaller values, and a bin where both rows
    are below ``L`` (by more than :data:`_PEAK_BIN_MARGIN` of the largest value) holds
    a value strictly below that maximum: it is neither the maximum nor its first bin.
    ``lo .. hi`` spans every other bin: 3.3 bins of 118 on average for the Helios in fog at
    50 m (3.8 over the rows the bench scene's beams cut).

    Parameters
    ----------
    waveform : (G + 1, W) float64
        :attr:`SoftTarget.waveform`, non-negative.

    Returns
    -------
    (G, 2) int64
    """
    below, above = waveform[:-1], waveform[1:]
    least = np.minimum(below, above).max(axis=1)
    margin = _PEAK_BIN_MARGIN * float(waveform.max(initial=0.0))
    may = np.maximum(below, above) >= (least - margin)[:, None]
    lo = np.argmax(may, axis=1)
    hi = waveform.shape[1] - 1 - np.argmax(may[:, ::-1], axis=1)
    return np.stack([lo, hi], axis=1).astype(np.int64)


def _peak(r: NDArray[np.float64], wave: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
    """Peak of sampled waveforms (rows), refined by the parabola through the top three
    samples: (range, value), each (rows,) float64."""
    i = np.clip(np.argmax(wave, axis=1), 1, wave.shape[1] - 2)
    rows = np.arange(len(wave))
    a, b, c = wave[rows, i - 1], wave[rows, i], wave[rows, i + 1]
    denom = a - 2.0 * b + c
    shift = np.where(denom < 0.0, 0.5 * (a - c) / np.where(denom < 0.0, denom, -1.0), 0.0)
    shift = np.clip(shift, -0.5, 0.5)
    step = r[1] - r[0]
    return r[i] + shift * step, b - 0.25 * (a - c) * shift


#: :meth:`SoftTarget.echoes` as a function of the target: ``(soft, sub_range_m, weights,
#: behind_m, two_way) -> (range_m, received)``.
WaveformPeaks = Callable[
    ["SoftTarget", NDArray[np.float64], NDArray[np.float64], NDArray[np.float64] | None,
     NDArray[np.float64] | None],
    tuple[NDArray[np.float64], NDArray[np.float64]],
]  # fmt: skip


def peak_echoes(
    soft: SoftTarget,
    sub_range: NDArray[np.float64],
    beam: BeamPattern,
    pulse_id: NDArray[np.uint64],
    model: ReturnModel,
    behind_m: NDArray[np.float64] | None = None,
    two_way: NDArray[np.float64] | None = None,
    waveform_peaks: WaveformPeaks | None = None,
) -> tuple[Echoes, NDArray[np.uint64]]:
    """One echo a pulse: the soft target's waveform peak (:meth:`SoftTarget.echoes`, its
    beam going on through see-through surfaces when ``behind_m`` and ``two_way`` are
    given; or ``waveform_peaks(soft, ...)`` with the same arguments, a kernel that gives
    its values), as an echo of peak factor 1 whose energy gives that received peak; and
    its jitter keys."""
    weights = beam.weights.astype(np.float64)
    if waveform_peaks is None:
        range_m, received = soft.echoes(sub_range, weights, behind_m, two_way)
    else:
        range_m, received = waveform_peaks(soft, sub_range, weights, behind_m, two_way)
    if model.extinction_relief is None:
        back = np.exp(2.0 * model.extinction_per_m * range_m)
    else:
        back = 1.0 / model.two_way_transmission(range_m)
    energy = received * range_m**2 * back
    n = len(pulse_id)
    zeros, ones = np.zeros(n), np.ones(n)
    echoes = Echoes(
        pulse=np.arange(n, dtype=np.int64), rank=np.zeros(n, dtype=np.int64), energy=energy,
        range_true_m=range_m, relief_m=zeros, spread_m=zeros, peak_factor=ones,
        object_index=np.full(n, soft.object_index, dtype=np.int32), energy_fraction=ones,
        cos_incidence=ones, cos_effective=ones,
    )  # fmt: skip
    with np.errstate(over="ignore"):
        key = physics.mix64(soft.stream + pulse_id)
    return echoes, key
