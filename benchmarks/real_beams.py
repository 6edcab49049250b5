"""How well the scanner presets' beams fit real decoded frames (tier4/nebula's test frames).

    python benchmarks/real_beams.py REALDATA_DIR

``REALDATA_DIR`` is the folder holding ``nebula/`` (the four decoded frames: VLP-16,
VLS-128, Pandar64, RS-Helios 5515). For every frame the points are compared with the
matching preset's channel elevations (:func:`simulator.calibrate.beamcheck.beam_residuals`),
with the channel the decoder wrote where the frame has one, else the nearest channel. The
Pandar64 frame has a second row against its preset with ``firing_azimuth: block`` (nebula's
Hesai decoder leaves out the turn during each channel's firing delay). One table row per
frame (and fit) is printed. The VLS-128 frame is not locked to its preset's column grid (min
R near 0), so its phase column means nothing; tests/test_real_beams.py checks its azimuths
within each firing sequence.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.calibrate.beamcheck import BeamFit, beam_residuals, firing_order
from simulator.config import ScannerConfig, load_scanner, scanner_presets
from simulator.io.read import read

FRAMES = {
    "vlp-16": "velodyne-vlp16-1673400472138016708.pcd",
    "vls-128": "velodyne-vls128-1585897255376374245.pcd",
    "pandar64": "hesai-pandar64-1673403880898440686.pcd",
    "rs-helios-5515": "robosense-helios5515-1691141763462381376.pcd",
}


@dataclass
class Frame:
    """One real frame prepared for the check."""

    name: str
    xyz_m: np.ndarray
    scanner: ScannerConfig
    ring: np.ndarray | None
    time_s: np.ndarray | None
    note: str


def helios_laser_slot(nebula_channel: np.ndarray) -> np.ndarray:
    """Packet slot (laser id - 1) of each channel of a nebula-decoded RS-Helios frame.

    nebula numbers the channels by elevation (0: lowest) but writes a block's points in
    packet order, laser 1 first, i.e. from the top down, so a new block starts where the
    channel number rises by more than 2 (the two inverted pairs rise by 1).
    """
    ring = nebula_channel.astype(np.intp)
    block = np.concatenate([[0], np.cumsum(np.diff(ring) > 2)])
    return firing_order(ring, block, 32)


def load_frames(realdata: Path) -> list[Frame]:
    """The four frames with their presets (channels in the presets' numbering), and the
    Pandar64 frame once more against its preset with ``firing_azimuth: block``."""
    presets = scanner_presets()
    out = []
    for name, file in FRAMES.items():
        cloud = read(realdata / "nebula" / file)
        f = cloud.fields
        xyz = f["xyz"].astype(np.float64)
        scanner = load_scanner(presets[name])
        ring = time = None
        note = "nearest channel"
        if name == "vlp-16":
            # nebula numbers Velodyne channels by elevation (0: lowest).
            order = np.argsort(np.asarray(scanner.channels.elevation_deg))
            ring = order[f["ring"].astype(np.intp)]
            time = f["time_s"]
            note = "nebula channel (by elevation) -> laser id"
        elif name == "rs-helios-5515":
            slot = helios_laser_slot(f["ring"])
            ring = slot[f["ring"].astype(np.intp)]
            note = "laser id from packet order"
        out.append(Frame(name, xyz, scanner, ring, time, note))
        if name == "pandar64":
            block = scanner.model_copy(update={"firing_azimuth": "block"})
            out.append(Frame("pandar64 (block)", xyz, block, None, None, "firing_azimuth: block"))
    return out


def fits(frame: Frame) -> dict[str, BeamFit]:
    """The nearest-channel fit, and the given-channel fit where the frame has channels."""
    res = {"nearest": beam_residuals(frame.xyz_m, frame.scanner)}
    if frame.ring is not None:
        res["ring"] = beam_residuals(frame.xyz_m, frame.scanner, frame.ring, frame.time_s)
    return res


def table(frames: list[Frame]) -> str:
    """The figures table (markdown)."""
    head = (
        "| frame | matched | points | median deg | p99 deg | worst ch (median deg) "
        "| max abs phase deg (min R) | time p99 us | off beam |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    rows = [head]
    for fr in frames:
        for how, fit in fits(fr).items():
            s = fit.summary()
            tp = f"{s['time_max_channel_p99_us']:.3f}" if "time_max_channel_p99_us" in s else "-"
            ph = (
                f"{s['max_abs_phase_deg']:.3f} ({s['min_phase_resultant']:.2f})"
                if np.isfinite(s["max_abs_phase_deg"])
                else "-"
            )
            rows.append(
                f"| {fr.name} | {how} | {int(s['points'])} | {s['median_abs_deg']:.4f} "
                f"| {s['p99_abs_deg']:.4f} | {int(s['worst_channel'])} "
                f"({s['max_channel_median_deg']:.4f}) | {ph} | {tp} | {int(s['off_beam'])} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("realdata", type=Path, help="folder holding nebula/")
    parser.add_argument("--channels", action="store_true", help="also print per-channel rows")
    args = parser.parse_args()
    frames = load_frames(args.realdata)
    print(table(frames))
    if args.channels:
        for fr in frames:
            for how, fit in fits(fr).items():
                print(f"\n{fr.name} ({how}): ch count median|med| p99 phase R time_off_us")
                for c in range(len(fit.count)):
                    t = "" if fit.time_offset_us is None else f" {fit.time_offset_us[c]:+.3f}"
                    print(
                        f"  {c:3d} {fit.count[c]:6d} {fit.elevation_median_deg[c]:+.4f} "
                        f"{fit.elevation_p99_abs_deg[c]:.4f} {fit.phase_deg[c]:+.4f} "
                        f"{fit.phase_resultant[c]:.2f}{t}"
                    )


if __name__ == "__main__":
    main()
