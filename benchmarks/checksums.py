"""Checksums of reference scans: a change that should not change the output must not move them.

``python benchmarks/checksums.py [--only NAME ...]`` scans a fixed set of surveys (the farm
with four presets, the tree with footprints and multiple returns, one revolution of the
street drive with moving objects, the HDL-64E in 50 m fog, a VLP-16 in rain, adaptive
footprints of 7 sub-rays on the farm and of 19 on half a revolution of the street, with
the diagnostic fields) and prints, per survey, the point count and a 16-hex-digit BLAKE2
digest of every field of the point record (names, dtypes and bytes, in name order). Run it
before and after a change and compare. ``--set KEY=VALUE ...`` adds overrides to every case
(``tests/test_same_bytes.py`` scans shortened cases under other instruction sets).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

import simulator

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, tuple[str, list[str]]] = {
    "farm-helios": ("scenes/farm/survey.yaml", []),
    "farm-vlp-16": ("scenes/farm/survey.yaml", ["scanner=vlp-16"]),
    "farm-pandar64": ("scenes/farm/survey.yaml", ["scanner=pandar64"]),
    "farm-os1-128": ("scenes/farm/survey.yaml", ["scanner=os1-128"]),
    "tree": ("scenes/tree/survey.yaml", []),
    "street-rev1": ("scenes/street/drive.yaml", ["revolutions=1"]),
    "farm-hdl-64e-fog50": (
        "scenes/farm/survey.yaml",
        ["scanner=hdl-64e", "weather.fog.visibility_m=50"],
    ),
    "farm-vlp-16-rain10": (
        "scenes/farm/survey.yaml",
        ["scanner=vlp-16", "weather.rain.rate_mm_h=10"],
    ),
    "farm-adaptive-7": (
        "scenes/farm/survey.yaml",
        [
            "scanner_overrides.beam_samples=7",
            "scanner_overrides.beam_sampling=adaptive",
            "output.diagnostics=true",
        ],
    ),
    "street-adaptive-19": (
        "scenes/street/drive.yaml",
        [
            "revolutions=0.5",
            "scanner_overrides.beam_samples=19",
            "scanner_overrides.beam_sampling=adaptive",
            "output.diagnostics=true",
        ],
    ),
}


def digest(cloud: simulator.PointCloud) -> str:
    """A 16-hex-digit BLAKE2b digest of every field (name, dtype, bytes) in name order."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(cloud.fields):
        values = np.ascontiguousarray(cloud[name])
        h.update(name.encode())
        h.update(str(values.dtype).encode())
        h.update(values.tobytes())
    return h.hexdigest()


def main() -> None:
    """Scan each case and print its name, point count and digest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="case names to run")
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides added to every case's (e.g. revolutions=0.1 for a short check; "
        "the digests are then not the reference ones)",
    )
    args = parser.parse_args()
    for name, (survey, overrides) in CASES.items():
        if args.only and name not in args.only:
            continue
        cloud = simulator.scan(ROOT / survey, [*overrides, *args.set])
        print(f"{name:22s} {len(cloud):8d} {digest(cloud)}", flush=True)


if __name__ == "__main__":
    main()
