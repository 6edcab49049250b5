"""The receiver's laws against a real frame's readings: the picture on the physics page.

Calibrates a capture, fits the receiver's laws beam by beam (``calibrate --twin``), and
draws what the beams did against each law: the readings over the fitted law by range with
the near overlap, the readings' scatter far above the threshold with the speckle's law,
and the return share against the predicted received peak with the soft threshold.

    python benchmarks/receiver_laws.py CAPTURE.pcap --scanner os1-128 \\
        --meta META.json --origin 0,0,0.03618 -o docs/img/receiver_os1.png
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from simulator.calibrate.outputs import calibrate_to_files
from simulator.calibrate.receiver import SPECKLE_DRAWS, normal_cdf
from simulator.io.read import ReadOptions
from simulator.physics import mix64
from simulator.reconstruct.twin import twin_of
from simulator.steps.receiver import gamma_unit_mean, near_overlap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    ap.add_argument("--scanner", default="os1-128")
    ap.add_argument("--meta", type=Path, default=None)
    ap.add_argument("--origin", default="0,0,0")
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    origin = np.array([float(v) for v in a.origin.split(",")])
    with tempfile.TemporaryDirectory() as tmp:
        calibrated = calibrate_to_files(
            a.capture, Path(tmp) / "lib.yaml", a.scanner, origin_m=origin,
            read_options=ReadOptions(meta=a.meta),
        )  # fmt: skip
        result = twin_of(calibrated, Path(tmp) / "twin", a.scanner, receiver=True)
    ev, fit = result.evidence, result.receiver
    assert ev is not None and fit is not None
    print("\n".join(fit.lines()))
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))

    ok = ev.returned & (ev.predicted > 0) & (ev.reading > 0)
    ratio = ev.reading[ok] / ev.predicted[ok]
    edges = np.arange(0.0, 40.5, 1.0)
    which = np.digitize(ev.range_m[ok], edges) - 1
    med = np.array([np.median(ratio[which == b]) if np.sum(which == b) >= 20 else np.nan
                    for b in range(len(edges) - 1)])  # fmt: skip
    centre = 0.5 * (edges[:-1] + edges[1:])
    far = np.nanmedian(med[centre >= 20.0])
    ax[0].plot(centre, med / far, "o", label="real readings / fitted law (median)")
    if fit.overlap_m is not None:
        r = np.linspace(0.0, 40.0, 400)
        ax[0].plot(r, near_overlap(r, *fit.overlap_m), "-",
                   label=f"overlap {fit.overlap_m[0]:.1f}-{fit.overlap_m[1]:.1f} m")  # fmt: skip
    ax[0].set(xlabel="range, m", ylabel="relative reading", title="near range", ylim=(0, 1.6))
    ax[0].legend(fontsize=8)

    beyond = 0.0 if fit.overlap_m is None else fit.overlap_m[1]
    sel = ok & (ev.x >= 8.0) & (ev.range_m >= beyond)
    logs = np.log(ev.reading[sel] / ev.predicted[sel])
    bins = np.linspace(-2.5, 2.0, 60)
    ax[1].hist(logs - np.median(logs), bins, density=True, alpha=0.6, label="real, x >= 8")
    if fit.speckle_cells is not None:
        keys = mix64(np.arange(200_000, dtype=np.uint64))
        g = np.log(gamma_unit_mean(keys, fit.speckle_cells))
        ax[1].hist(g - np.median(g), bins, density=True, histtype="step", lw=2,
                   label=f"speckle M = {fit.speckle_cells:.1f}")  # fmt: skip
    ax[1].set(xlabel="log(reading / law), centred", title="scatter far above the threshold")
    ax[1].legend(fontsize=8)

    overlap = 1.0 if fit.overlap_m is None else near_overlap(ev.range_m, *fit.overlap_m)
    lx = np.log10(np.maximum(ev.x * overlap * fit.reflectance_factor, 1e-6))
    e = np.linspace(-1.0, 3.0, 33)
    w = np.digitize(lx, e) - 1
    share = np.array([ev.returned[w == b].mean() if np.sum(w == b) >= 30 else np.nan
                      for b in range(len(e) - 1)])  # fmt: skip
    c = 10 ** (0.5 * (e[:-1] + e[1:]))
    ax[2].semilogx(c, share, "o", label="real return share")
    keys = mix64(np.arange(SPECKLE_DRAWS, dtype=np.uint64) + np.uint64(0x51ED))
    g = gamma_unit_mean(keys, fit.speckle_cells) if fit.speckle_cells else np.ones(1)
    xs = np.logspace(-1, 3, 200)
    if fit.threshold_width is not None:
        p = normal_cdf((g[None, :] * xs[:, None] / fit.threshold_scale - 1.0)
                       / fit.threshold_width).mean(axis=1) * (1.0 - fit.drop_share)  # fmt: skip
        ax[2].semilogx(xs, p, "-", label=f"fitted: width {fit.threshold_width:.2f}, scale "
                                         f"{fit.threshold_scale:.2f}")  # fmt: skip
    ax[2].semilogx(xs, (xs >= 1.0).astype(float), ":", label="hard threshold (before)")
    ax[2].set(xlabel="predicted received peak / threshold", ylabel="share returned",
              title="detection", ylim=(-0.02, 1.05))  # fmt: skip
    ax[2].legend(fontsize=8)
    fig.suptitle(f"The receiver's laws against {a.capture.name}")
    fig.tight_layout()
    a.output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.output, dpi=90)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
