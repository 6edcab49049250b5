"""The vehicle under the sensor estimated from a capture (``reconstruct`` and
``calibrate --twin``, :mod:`simulator.reconstruct.ego`).

Synthetic: flat ground and a wall scanned by the ``vlp-16`` preset from 3 poses with a
known car roof under the sensor (``ego: boxes``), reconstructed: the estimated ego
(``ego.ply``, cast with the scanner's beams) blocks the beams the roof blocks, and no beam
above the horizon. Real: the shared OS1-128 pcap (3 frames), whose lowest rings lose their
beams behind the sensor; the rescans with the estimate come back to the real frames' return
share on those rings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import simulator
from simulator.calibrate.outputs import calibrate_to_files
from simulator.config import load_scanner
from simulator.io.read import read
from simulator.reconstruct import ReconstructOptions, reconstruct
from simulator.reconstruct.grid import beam_rays
from simulator.reconstruct.protocol import scan_frame, surface_ranges
from simulator.reconstruct.twin import twin_of
from simulator.sensor.scanner import SpinningPattern
from simulator.transforms import compose, rotation_from_rpy_deg

from .conftest import lidar_sim

SCANNER = "vlp-16"
#: A car roof under the sensor, reaching 3 m behind it and 1 m ahead (as test_ego's).
ROOF = {"size_m": [4.0, 2.0, 0.5], "position_m": [-1.0, 0.0, -0.6], "rotation_deg": [0, 0, 15]}
#: The sensor's poses: 1.8 m above the ground, driving 3 m a frame and turning.
#: The ground ends 15 m ahead of the first: the rings at -5 deg and above reach past its edge
#: ahead in every frame, and return nothing there (not the ego: the lower rings return there).
POSES = [([0.0, 0.0, 1.8], [0, 0, 0]), ([3.0, 0.3, 1.8], [0, 0, 5]), ([6.0, 0.8, 1.8], [0, 0, 10])]
SCENE = {
    "materials": {
        "ground": {"reflectance": 0.25, "minnaert_k": 0.6, "label": "terrain"},
        "wall": {"reflectance": 0.5, "minnaert_k": 1.0, "label": "building"},
    },
    "objects": [
        {"name": "ground", "plane": {"size_m": [40, 120]}, "position_m": [-5, 0, 0],
         "material": "ground"},
        {"name": "wall", "box": {"size_m": [40, 0.4, 8]}, "position_m": [0, 12, 4],
         "material": "wall"},
    ],
}  # fmt: skip

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
PCAP = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"
POSES_FILE = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3_poses_kitti.txt"


def roof_blocks(origin: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """(C, W) bool: whether each beam (sensor frame) meets ``ROOF`` (slabs in its frame)."""
    rot = rotation_from_rpy_deg(ROOF["rotation_deg"])
    half = np.asarray(ROOF["size_m"]) / 2
    o = (origin - np.asarray(ROOF["position_m"])) @ rot
    d = direction @ rot
    with np.errstate(divide="ignore", invalid="ignore"):
        t1, t2 = (-half - o) / d, (half - o) / d
    t_in = np.nanmax(np.minimum(t1, t2), axis=-1)
    t_out = np.nanmin(np.maximum(t1, t2), axis=-1)
    return (t_in <= t_out) & (t_out > 0.0)


def mesh_blocks(path: Path, origin: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """(C, W) bool: the beams the mesh at ``path`` (sensor frame) meets."""
    import trimesh

    mesh = trimesh.load(path, force="mesh")
    t = surface_ranges(np.asarray(mesh.vertices), np.asarray(mesh.faces), origin, direction)
    return np.isfinite(t)


@pytest.fixture(scope="module", params=[False, True], ids=["dark", "returning"])
def capture(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> list[Path]:
    """The yard scanned from ``POSES`` with the roof (one revolution a pose, the sensor
    frame), and the KITTI poses file of those poses. The roof is dark (it blocks), or it
    returns (``returns: true``, reflectance 0.1: the body's own points, 1.3 to 3 m away)."""
    folder = tmp_path_factory.mktemp("returning" if request.param else "dark")
    (folder / "scene.yaml").write_text(yaml.safe_dump(SCENE), encoding="utf-8")
    frames, lines = [], []
    for k, (position, rotation) in enumerate(POSES):
        survey = {
            "scanner": SCANNER,
            "scene": "scene.yaml",
            "pose": {"position_m": position, "rotation_deg": rotation},
            "ego": {"boxes": [ROOF], "returns": request.param},
            "revolutions": 1,
            "seed": k,
            "output": {"path": f"{k}.npz", "frame": "sensor"},
        }
        path = folder / f"survey_{k}.yaml"
        path.write_text(yaml.safe_dump(survey), encoding="utf-8")
        simulator.io.write(simulator.scan(path), folder / f"{k}.npz")
        frames.append(folder / f"{k}.npz")
        lines.append(" ".join(f"{v:.12g}" for v in compose(position, rotation)[:3].ravel()))
    (folder / "poses.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return frames


def test_the_estimated_ego_blocks_the_roofs_beams(capture: list[Path]) -> None:
    """The ego ``reconstruct`` estimates from the 3 frames, cast with the scanner's beams,
    blocks the beams the roof blocks: at least 95 % of the union of both sets of beams is
    common to both (intersection over union), and it blocks no beam above the horizon
    (the sky beams never return either). ``summary.json`` gives its beams per ring as the
    mesh blocks them, and every frame survey points to the mesh; a rescan returns nothing on
    those beams."""
    folder = capture[0].parent / "scene"
    options = ReconstructOptions(
        scanner=SCANNER, poses=capture[0].parent / "poses.txt", pages=False
    )
    summary = reconstruct(capture, folder, options).summary
    pattern = SpinningPattern(load_scanner(SCANNER))
    origin, direction = beam_rays(pattern)
    truth = roof_blocks(origin, direction)
    assert (folder / "ego.ply").is_file()
    found = mesh_blocks(folder / "ego.ply", origin, direction)
    sky = np.degrees(pattern.elevation_rad) >= 0
    iou = (found & truth).sum() / (found | truth).sum()
    print(f"roof blocks {truth.sum()} beams, the estimate {found.sum()}, common "
          f"{(found & truth).sum()}: IoU {iou:.4f}; per ring {summary['ego']}")  # fmt: skip
    assert truth.sum() > 1000  # (not vacuous: rings -15 to -7 deg behind the sensor)
    assert iou >= 0.95
    assert not found[sky].any()
    assert summary["ego"]["blocked_per_ring"] == found.sum(axis=1).tolist()
    assert summary["ego"]["frames"] == 3 and summary["ego"]["mesh"] == "ego.ply"
    body = summary["ego"]["body_radius_m"]
    near = read(capture[0])["range_m"]
    if capture[0].parent.name.startswith("returning"):  # between the roof's and the ground's
        assert near[near < body].size > 1000 and near[near < body].max() < 3.0 < body
        assert near[near > body].min() > 6.0
    else:
        assert body == 0.0
    for k in range(3):
        survey = yaml.safe_load((folder / "frames" / f"{k:04d}.yaml").read_text())
        assert survey["ego"] == {"mesh": "../ego.ply"}
    rescan, _ = scan_frame(folder / "frames" / "0001.yaml")
    assert len(rescan) > 0.5 * truth.size
    assert not found[rescan["ring"].astype(np.int64), rescan["column"].astype(np.int64)].any()


def test_no_ego_switches_it_off(capture: list[Path]) -> None:
    """``lidar-sim reconstruct ... --no-ego``: no ``ego.ply``, no ``ego:`` section in the
    frame surveys, ``summary.json``'s ego null."""
    folder = capture[0].parent / "no_ego"
    poses = capture[0].parent / "poses.txt"
    res = lidar_sim("reconstruct", *capture, "-o", folder, "--scanner", SCANNER,
                    "--poses", poses, "--no-ego")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads((folder / "summary.json").read_text())["ego"] is None
    assert not (folder / "ego.ply").exists()
    for k in range(3):
        assert "ego" not in yaml.safe_load((folder / "frames" / f"{k:04d}.yaml").read_text())


def test_the_twin_scans_the_estimated_ego(capture: list[Path], tmp_path: Path) -> None:
    """``calibrate --twin`` on the first frame: the ego it estimates from that frame alone
    blocks the roof's beams (intersection over union >= 0.95), and on the rings the roof
    blocks the twin's ground returns on the dark roof's real frame's share of beams (within
    0.01); without it (``ego=None``) the twin's ground returns on every one of them."""
    calibrated = calibrate_to_files(capture[0], tmp_path / "lib.yaml", SCANNER)
    with_ego = twin_of(calibrated, tmp_path / "with", SCANNER)
    without = twin_of(calibrated, tmp_path / "without", SCANNER, None)
    pattern = SpinningPattern(load_scanner(SCANNER))
    origin, direction = beam_rays(pattern)
    truth = roof_blocks(origin, direction)
    found = mesh_blocks(tmp_path / "with" / "ego.ply", origin, direction)
    assert (found & truth).sum() >= 0.95 * (found | truth).sum()
    assert with_ego.ego is not None and without.ego is None
    assert with_ego.ego["blocked_per_ring"] == found.sum(axis=1).tolist()
    rings = np.flatnonzero(truth.any(axis=1))
    real = np.array(with_ego.surfaces["ground"]["share_a"], dtype=float)[rings]
    twin = np.array(with_ego.surfaces["ground"]["share_b"], dtype=float)[rings]
    bare = np.array(without.surfaces["ground"]["share_b"], dtype=float)[rings]
    print(f"ground on rings {rings.tolist()}: real {real.round(3)}, twin with the ego "
          f"{twin.round(3)}, without {bare.round(3)}")  # fmt: skip
    if capture[0].parent.name.startswith("dark"):  # (a returning roof's beams: not ground)
        np.testing.assert_allclose(twin, real, atol=0.01)
        assert (real < 0.9).all()
        np.testing.assert_array_equal(bare, 1.0)


# ------------------------------------------------------------------------------ the pcap


def need_pcap() -> None:
    for path in (PCAP, POSES_FILE):
        if not path.is_file():
            pytest.skip(f"{path.name}: the shared real captures are not beside this checkout")
    pytest.importorskip("ouster.sdk", reason="ouster-sdk is not installed ([ouster])")


def test_os1_ego_brings_the_lowest_rings_back(tmp_path: Path) -> None:
    """The OS1-128 pcap's 3 frames reconstructed and rescanned with the ego and without:
    the ego blocks beams on the lowest rings only (below -15 deg), most on the lowest ring,
    every one behind the sensor (``ego.ply`` cast with the beams); on rings 125 to 127 the
    rescans of frames 0 and 1 without it return on 5.6 to 8.5 points more of the beams than
    the real frames, and with it within 0.01 of the real share (figures printed; frame 2's
    rescan was within 0.01 without it already: the ground behind it was in no frame)."""
    need_pcap()
    shares: dict[str, Any] = {}
    for name, params in (("with", {}), ("without", {"ego": None})):
        opts = ReconstructOptions(poses=POSES_FILE, rescan=True, pages=False, **params)
        summary = reconstruct([PCAP], tmp_path / name, opts).summary
        shares[name] = {
            k: json.loads((tmp_path / name / "rescan" / f"{k:04d}" / "compare.json").read_text())
            for k in (0, 1, 2)
        }
        if name == "with":
            ego = summary["ego"]
    per_ring = np.array(ego["blocked_per_ring"])
    print("ego:", {c: int(n) for c, n in enumerate(per_ring) if n}, ego["body_radius_m"])
    scanner = load_scanner(str(tmp_path / "with" / "scanner.yaml"))
    elevation = np.array(scanner.channels.elevation_deg)
    assert per_ring.sum() > 500 and (elevation[per_ring > 0] < -15).all()
    assert per_ring.argmax() == np.argmin(elevation)
    origin, direction = beam_rays(SpinningPattern(scanner))
    found = mesh_blocks(tmp_path / "with" / "ego.ply", origin, direction)
    assert found.sum(axis=1).tolist() == ego["blocked_per_ring"]
    assert (direction[found][:, 0] < 0).all()  # every one behind the sensor
    for k in (0, 1, 2):
        real = np.array(shares["with"][k]["rings"]["share_a"])
        after = np.array(shares["with"][k]["rings"]["share_b"])
        before = np.array(shares["without"][k]["rings"]["share_b"])
        np.testing.assert_array_equal(real, shares["without"][k]["rings"]["share_a"])
        low = [125, 126, 127]
        print(f"frame {k} rings {low}: real {real[low].round(3)}, rescan without the ego "
              f"{before[low].round(3)}, with it {after[low].round(3)}")  # fmt: skip
        assert (np.abs(after[low] - real[low]) <= 0.01).all()
        if k < 2:
            assert (before[low] - real[low] >= 0.05).all()
