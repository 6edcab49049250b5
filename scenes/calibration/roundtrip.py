"""The calibration workflow end to end: a scan -> ``lidar-sim calibrate`` -> a survey with
the fitted materials -> a synthetic scan whose statistics match the first.

    python scenes/calibration/roundtrip.py [--out out/calibration] [--plot FILE.png]

Here the "real" scan is itself simulated from ``scene.yaml``, so that the fitted numbers
can be checked against the hidden ones; with a real scan, start at step 2.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "simulator.cli", *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/calibration"))
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    # 1. the real scan
    cli("scan", str(HERE / "survey.yaml"), "-o", str(out / "real.npz"), "-q")
    # 2. calibrate from the file alone
    cli("calibrate", str(out / "real.npz"), "--scanner", "rs-helios-5515",
        "-o", str(out / "fitted.yaml"), "--report", str(out / "report"))  # fmt: skip
    # 3. a survey that uses the fitted library as it is
    fitted = yaml.safe_load((out / "fitted.yaml").read_text())
    scene = yaml.safe_load((HERE / "scene.yaml").read_text())
    scene["materials"] = {"hidden_ground": fitted["ground"], "hidden_wall": fitted["wall_1"]}
    (out / "scene.yaml").write_text(yaml.safe_dump(scene))
    survey = yaml.safe_load((HERE / "survey.yaml").read_text())
    survey["scanner_overrides"] = yaml.safe_load((out / "fitted_scanner.yaml").read_text())
    survey["seed"] = 7
    (out / "survey.yaml").write_text(yaml.safe_dump(survey))
    cli("scan", str(out / "survey.yaml"), "-o", str(out / "synthetic.npz"), "-q")
    # 4. compare
    real, syn = np.load(out / "real.npz"), np.load(out / "synthetic.npz")
    rings_real = np.bincount(real["ring"], minlength=32)
    rings_syn = np.bincount(syn["ring"], minlength=32)
    edges = np.arange(0, 101, 2)
    h_real = np.histogram(real["intensity"], edges)[0] / len(real["intensity"])
    h_syn = np.histogram(syn["intensity"], edges)[0] / len(syn["intensity"])
    print(f"points: real {len(real['intensity']):,}, synthetic {len(syn['intensity']):,}")
    busy = rings_real > 500
    worst = np.max(np.abs(rings_syn[busy] / rings_real[busy] - 1))
    print(f"per-ring counts: worst difference {100 * worst:.1f} % over {busy.sum()} rings")
    print(f"intensity histograms: total variation distance {np.abs(h_real - h_syn).sum():.4f}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4))
        x = np.arange(32)
        a.bar(x - 0.2, rings_real, 0.4, label="real scan")
        a.bar(x + 0.2, rings_syn, 0.4, label="synthetic, fitted materials")
        a.set(xlabel="ring", ylabel="points", title="Points per ring")
        a.legend()
        b.step(edges[:-1], h_real, where="post", label="real scan")
        b.step(edges[:-1], h_syn, where="post", label="synthetic, fitted materials")
        b.set(xlabel="intensity", ylabel="share of points", title="Intensity histogram")
        b.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
