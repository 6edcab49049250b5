"""``lidar-sim reconstruct`` on real captures: the OS1-128 pcap's held-out and reproduction
protocols against the goals, the reprojection baseline against the issue's figures, the
10-scan OSF of an 8-beam OS0, a VLP-16 frame on its beam grid, and the refusals of bad
input on the real pcap. The captures are shared beside the checkout, never copied into it;
each test skips when its capture is absent.

A goal not met yet is an ``xfail(strict=True)`` naming the figure measured: it turns into
a failure the day it is met, so that the mark goes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.config import load_scanner
from simulator.io.read import read, read_frames
from simulator.reconstruct import ReconstructOptions, format_summary, reconstruct
from simulator.reconstruct.grid import beam_indices, beam_rays, organize
from simulator.sensor.scanner import SpinningPattern

from .conftest import lidar_sim, refused_in_one_line

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
PCAP = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"
POSES = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3_poses_kitti.txt"
OSF = REALDATA / "ouster" / "osf_fw_3.2_10scans.osf"
VLP16 = REALDATA / "nebula" / "velodyne-vlp16-1673400472138016708.pcd"
IDENTITY = "1 0 0 0 0 1 0 0 0 0 1 0"

#: The goals (nvs figures): key -> (sense, bound).
HELDOUT_GOALS = {
    "ray_drop_accuracy": (">=", 0.97),
    "ray_drop_f1": (">=", 0.90),
    "depth_medae_m": ("<=", 0.02),
    "depth_rmse_m": ("<=", 5.0),
    "cd": ("<=", 0.04),
    "f_score": (">=", 0.96),
    "intensity_rmse": ("<=", 0.030),
}
REPRODUCTION_GOALS = {
    "ray_drop_accuracy": (">=", 0.98),
    "depth_medae_m": ("<=", 0.02),
    "f_score": (">=", 0.97),
    "intensity_rmse": ("<=", 0.03),
}

#: The held-out goals not met yet: frame 1 scanned from the scene of frames 0 and 2, with
#: the ego estimated from them (measured 2026-12-05 on the ego branch; the baseline's
#: figure beside it).
HELDOUT_UNMET = {
    "ray_drop_accuracy": "0.9454 (baseline 0.9546)",
    "depth_medae_m": "0.0315 m (baseline 0.0283)",
    "depth_rmse_m": "7.3109 m (baseline 7.0063)",
    "cd": "0.0722 (baseline 0.0722)",
    "f_score": "0.9449 (baseline 0.9409)",
    "intensity_rmse": "0.0425 (baseline 0.0370)",
}


def need(*paths: Path) -> None:
    """Skip unless every capture is there (and the Ouster reader, for an Ouster one)."""
    for path in paths:
        if not path.is_file():
            pytest.skip(f"{path.name}: the shared real captures are not beside this checkout")
        if path.suffix in (".pcap", ".osf"):
            pytest.importorskip("ouster.sdk", reason="ouster-sdk is not installed ([ouster])")


def _goal_params(goals: dict[str, tuple[str, float]], unmet: dict[str, str]) -> list[Any]:
    """One param a goal; an unmet one is a strict xfail naming its figure."""
    return [
        pytest.param(
            key,
            marks=pytest.mark.xfail(
                strict=True, reason=f"{key} {unmet[key]}, goal {goals[key][0]} {goals[key][1]}"
            ),
        )
        if key in unmet
        else key
        for key in goals
    ]


def _meets(value: float, sense: str, bound: float) -> bool:
    return value >= bound if sense == ">=" else value <= bound


def _row(summary: dict[str, Any], frame: int, protocol: str, method: str) -> dict[str, Any]:
    (row,) = [
        r
        for r in summary["results"]
        if (r["frame"], r["protocol"], r["method"]) == (frame, protocol, method)
    ]
    return row


def _print(summary: dict[str, Any]) -> None:
    print()
    print(format_summary(summary))
    for row in summary["results"]:
        sb = row["same_beams"]
        print(f"{row['frame']} {row['protocol']} {row['method']} same_beams: ray_drop_accuracy "
              f"{sb['ray_drop_accuracy']:.4f} ray_drop_f1 {sb['ray_drop_f1']:.4f} depth_medae_m "
              f"{sb['depth_medae_m']:.4f} intensity_rmse {sb['intensity_rmse']:.4f}")  # fmt: skip


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The OS1-128 pcap reconstructed from frames 0 and 2 (its own calibration, the
    capture's poses file), frame 1 held out, every scene frame rescanned."""
    need(PCAP, POSES)
    options = ReconstructOptions(poses=POSES, hold_out=(1,), rescan=True, pages=False)
    result = reconstruct([PCAP], tmp_path_factory.mktemp("os1_heldout"), options)
    _print(result.summary)
    return result.summary


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The OS1-128 pcap's frame 0 alone as the scene, rescanned from its own pose."""
    need(PCAP, POSES)
    options = ReconstructOptions(poses=POSES, frames=(0, 1), rescan=True, pages=False)
    result = reconstruct([PCAP], tmp_path_factory.mktemp("os1_reproduction"), options)
    _print(result.summary)
    return result.summary


@pytest.mark.parametrize("key", _goal_params(HELDOUT_GOALS, HELDOUT_UNMET))
def test_os1_held_out_frame(heldout: dict[str, Any], key: str) -> None:
    """Frame 1 of the OS1-128 capture, scanned from its pose in the scene of frames 0 and
    2, meets the held-out goals (nvs): ray-drop accuracy >= 0.97, ray-drop F1 >= 0.90,
    depth MedAE <= 0.02 m, depth RMSE <= 5 m, CD <= 0.04, F-score >= 0.96, intensity RMSE
    <= 0.030. Measured (2026-12-05 on the ego branch, the vehicle under the sensor estimated
    from frames 0 and 2; the baseline's in brackets): 0.9454 (0.9546), 0.9669 (0.9727),
    0.0315 m (0.0283), 7.3109 m (7.0063), 0.0722 (0.0722), 0.9449 (0.9409), 0.0425
    (0.0370): only the ray-drop F1 is met; the scene is ahead of the baseline (moved
    points) on the F-score only, level on CD. Without the ego (at 707a1a9): 0.9432, 0.9656,
    0.0319 m, 7.3158 m, 0.0722, 0.9448, 0.0425."""
    sense, bound = HELDOUT_GOALS[key]
    value = _row(heldout, 1, "heldout", "simulated")["nvs"][key]
    base = _row(heldout, 1, "heldout", "baseline")["nvs"][key]
    print(f"{key}: simulated {value:.4f}, baseline {base:.4f}, goal {sense} {bound}")
    assert _meets(value, sense, bound), (key, value)


@pytest.mark.parametrize("key", _goal_params(REPRODUCTION_GOALS, {}))
def test_os1_reproduction(reproduction: dict[str, Any], key: str) -> None:
    """Frame 0 of the OS1-128 capture, from a scene of frame 0 alone, scanned back from its
    own pose meets the reproduction goals (nvs): ray-drop accuracy >= 0.98, depth MedAE <=
    0.02 m, F-score >= 0.97, intensity RMSE <= 0.03. Measured (2026-12-05 on the ego
    branch, the ego estimated from frame 0): 0.9937, 0.0068 m, 0.9987, 0.0123 (without it,
    at 707a1a9: 0.9936)."""
    sense, bound = REPRODUCTION_GOALS[key]
    assert reproduction["scene_frames"] == [0] and reproduction["held_out"] == []
    value = _row(reproduction, 0, "rescan", "simulated")["nvs"][key]
    print(f"{key}: {value:.4f}, goal {sense} {bound}")
    assert _meets(value, sense, bound), (key, value)


#: The reprojection baseline of held-out frame 1 as the code gives it (nvs; and
#: same_beams where named).
BASELINE = {
    ("nvs", "ray_drop_accuracy"): 0.9546,
    ("nvs", "ray_drop_f1"): 0.9727,
    ("nvs", "depth_medae_m"): 0.0283,
    ("nvs", "depth_rmse_m"): 7.0063,
    ("nvs", "intensity_rmse"): 0.0370,
    ("nvs", "cd"): 0.0722,
    ("nvs", "f_score"): 0.9409,
    ("same_beams", "ray_drop_accuracy"): 0.9538,
    ("same_beams", "ray_drop_f1"): 0.8627,
}


def test_the_baseline_of_the_held_out_frame(heldout: dict[str, Any]) -> None:
    """The reprojection baseline of frame 1 (frames 0 and 2 moved by the poses onto its
    beams), pinned to 4 decimals as the code gives it, against the issue's figures.

    Reproduced within rounding: the drop-class F1 0.863 (same_beams.ray_drop_f1 0.8627)
    and the ray-drop accuracy 0.954 as same_beams has it (0.9538; nvs, which now drops
    returns at 80 m or beyond as LiDAR4D's preprocessing does, gives 0.9546).
    Not reproduced: depth RMSE 7.37 m (7.0063 now: the 80 m rule; compare as it was before
    that rule, 1aff0d7^, gives 7.3722, which does round to 7.37), depth MedAE 0.0278 m
    (0.0283; same_beams 0.0363), intensity RMSE 0.0386 (0.0370; before the 80 m rule
    0.0388), CD 0.0499 (0.0722; before the 80 m rule 0.156), F-score 0.949 (0.9409;
    before 0.9402).
    """
    row = _row(heldout, 1, "heldout", "baseline")
    print({f"{block}.{key}": round(row[block][key], 4) for block, key in BASELINE})
    for (block, key), pinned in BASELINE.items():
        assert row[block][key] == pytest.approx(pinned, abs=5e-5), (block, key, row[block][key])


# ------------------------------------------------------------------------------- the OSF


def test_osf_of_ten_scans_reconstructed(tmp_path: Path) -> None:
    """The OSF of 10 scans of an 8-beam OS0 (2048 columns), its own calibration, scan 5
    held out: the command runs and writes the contract's outputs, and the held-out scan is
    compared on the real scan's own beams (8 x 2048).

    Poses: an identity poses file, not KISS-ICP (the OSF's own per-column poses are all
    identity, so without a file KISS-ICP would run): on these 8 beams KISS-ICP moves the
    sensor 6.5 m over the 10 scans (see the next test), while scans 0 and 9 agree within
    5 cm on 38 % of their common beams, so the sensor moved centimetres, and the identity
    is the nearer pose."""
    need(OSF)
    poses = tmp_path / "identity.txt"
    poses.write_text("\n".join([IDENTITY] * 10) + "\n", encoding="utf-8")
    out = tmp_path / "osf"
    res = lidar_sim("reconstruct", OSF, "-o", out, "--poses", poses, "--hold-out", "5")
    print(res.stdout)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scanner"] == "the capture's own calibration"
    assert summary["poses_from"] == f"the poses file {poses.name}"
    assert summary["frames"] == list(range(10)) and summary["held_out"] == [5]
    assert summary["scene_frames"] == [k for k in range(10) if k != 5]
    assert set(summary["mesh"]["faces_by_frame"]) == {str(k) for k in summary["scene_frames"]}
    scanner = load_scanner(str(out / "scanner.yaml"))
    assert len(scanner.channels.elevation_deg) == 8 and scanner.firings_per_revolution == 2048
    assert sorted(p.name for p in (out / "frames").iterdir()) == [
        f"{k:04d}.yaml" for k in range(10)
    ]
    assert (out / "scene.yaml").is_file() and any((out / "meshes").glob("*.ply"))
    for kind in ("heldout", "baseline"):
        saved = json.loads((out / kind / "0005" / "compare.json").read_text())
        assert saved["same_beams"]["pixels"] == 8 * 2048, kind
        nvs = saved["nvs"]
        assert 0.0 <= nvs["ray_drop_accuracy"] <= 1.0 and np.isfinite(nvs["cd"]), kind
        assert (out / kind / "0005" / "index.html").is_file(), kind
    assert [(r["frame"], r["protocol"], r["method"]) for r in summary["results"]] == [
        (5, "heldout", "simulated"),
        (5, "heldout", "baseline"),
    ]


@pytest.mark.xfail(
    strict=True,
    reason="KISS-ICP moves the OS0-8 6.51 m over the 10 scans (0.46-0.79 m a scan, along -x)",
)
def test_kiss_icp_poses_of_the_osf_stay_near() -> None:
    """KISS-ICP's poses of the 10 scans keep the sensor within 1 m of scan 0: scans 0 and
    9 agree within 5 cm on 38 % of their common beams (1 cm: 11 %), which a sensor that
    moved metres between them would not give. Measured (2026-12-05): 6.51 m."""
    need(OSF)
    pytest.importorskip("kiss_icp", reason="KISS-ICP is not installed ([odometry])")
    from simulator.odometry import poses_for

    frames = list(read_frames(OSF))
    agree = _agreement(frames[0], frames[9])
    print(f"scans 0 and 9: within 5 cm on {agree:.2f} of the common beams")
    assert agree >= 0.3
    travel = np.linalg.norm(poses_for(frames)[:, :3, 3], axis=1)
    print("KISS-ICP travel from scan 0 (m):", np.round(travel, 3))
    assert travel.max() < 1.0, travel


def _agreement(a: Any, b: Any) -> float:
    """The share of the beams returned in both frames whose ranges agree within 5 cm."""
    images = []
    for cloud in (a, b):
        image = np.full((8, 2048), np.nan)
        image[cloud["ring"].astype(int), cloud["column"].astype(int)] = cloud["range_m"]
        images.append(image)
    both = np.isfinite(images[0]) & np.isfinite(images[1])
    return float((np.abs(images[0] - images[1])[both] < 0.05).mean())


# ---------------------------------------------------------------------------- the VLP-16


def test_vlp16_frame_on_its_beam_grid() -> None:
    """The VLP-16 PCD (a ROS driver's frame: ring and azimuth, no recorded grid) organised
    with the ``vlp-16`` preset: a 16 x 1808 grid; each point's ring matches the channel
    nearest its elevation; each point's azimuth is within half a column step of its
    column's beam (the pattern's own schedule).

    Not every point gets a pixel of its own: of the 14,643 first returns, 1,619 fall on a
    pixel another one of their ring holds (the nearer wins), so the grid holds 13,024.
    1,189 of them have the very azimuth of the point they meet (the decoder gives two
    successive firings of a ring one azimuth, once every 2.4 deg); the other 430 are
    within 0.19 deg of it (the firings' azimuths drift against the grid's columns, 0.2
    deg apart both)."""
    need(VLP16)
    pattern = SpinningPattern(load_scanner("vlp-16"))
    cloud = read(VLP16)
    grid = organize(cloud, pattern)
    columns = int(pattern.scanner.firings_per_revolution or 1)
    assert grid.shape == (16, columns) == (16, 1808)
    first = cloud["return_number"] <= 1
    channel, column = beam_indices(cloud, pattern)
    channel, column = channel[first], column[first]
    xyz = cloud["xyz"][first].astype(np.float64)
    # the ring's channel is the channel nearest the point's elevation
    elevation = np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1])))
    nearest = np.argmin(np.abs(elevation[:, None] - np.degrees(pattern.elevation_rad)), axis=1)
    np.testing.assert_array_equal(channel, nearest)
    # the azimuth is within half a column step of the column's beam
    _, direction = beam_rays(pattern)
    beam = direction[channel, column]
    step_deg = 360.0 / columns
    off = np.degrees(np.arctan2(xyz[:, 1], xyz[:, 0]) - np.arctan2(beam[:, 1], beam[:, 0]))
    off = (off + 180.0) % 360.0 - 180.0
    print(f"azimuth off its column: at most {np.abs(off).max():.5f} deg (half a step "
          f"{step_deg / 2:.5f})")  # fmt: skip
    assert np.abs(off).max() <= step_deg / 2 + 1e-6
    # the pixels: one a point but for the collisions counted
    pixels = channel * columns + column
    assert len(pixels) == 14_643
    assert len(np.unique(pixels)) == int(grid.returned.sum()) == 13_024
    assert len(pixels) - len(np.unique(pixels)) == 1_619


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--frames", "0:1", "--hold-out", "0", "--poses", POSES], "--hold-out leaves no frame"),
        (["--hold-out", "7", "--poses", POSES], "--hold-out 7: no such frame"),
        (["--poses", 2], "2 poses for 3 frames"),
        (["--scanner", "vlp-16", "--poses", POSES], "has 128 rows but the scanner has 16"),
    ],
    ids=["one-frame-held-out", "held-out-not-in-capture", "poses-lines", "scanner-beams"],
)
def test_bad_input_on_the_pcap(tmp_path: Path, args: list[Any], fragment: str) -> None:
    """On the 3-frame OS1-128 pcap: a single frame held out, a held-out frame not in the
    capture, a poses file of 2 lines, and the VLP-16 named as its scanner: one line each,
    exit code 2."""
    need(PCAP, POSES)
    if 2 in args:  # the capture's first two poses
        short = tmp_path / "two.txt"
        short.write_text("".join(POSES.read_text().splitlines(keepends=True)[:2]))
        args = [short if a == 2 else a for a in args]
    out = tmp_path / "out"
    refused_in_one_line(lidar_sim("reconstruct", PCAP, "-o", out, *args), fragment, out)


def test_pcap_without_poses_or_kiss_icp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pcap without a poses file (it holds no per-column poses) and KISS-ICP not
    installed: one line naming the extra ``lidar-sim[odometry]``, exit code 2."""
    need(PCAP)
    for name in [m for m in sys.modules if m == "kiss_icp" or m.startswith("kiss_icp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "kiss_icp", None)  # None in sys.modules: ImportError
    out = tmp_path / "out"
    refused_in_one_line(
        lidar_sim("reconstruct", PCAP, "-o", out), "pip install 'lidar-sim[odometry]'", out
    )
