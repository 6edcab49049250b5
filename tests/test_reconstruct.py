"""``lidar-sim reconstruct`` in a closed loop, without real data (runs in CI).

The "capture": generated street 0 without its moving objects (the generator's mapping,
``simulator.generators.street(0)``, less the 64 parts that follow a trajectory: a scene
reconstructed from a still sensor is static, and a passing car would leave a trail in it
that no static scene can scan back), its materials known, scanned by the ``os1-128``
preset from one spot in the ego lane (the pose of ``scenes/street/os1-128.yaml``) for 8
revolutions, one frame (``.npz``, sensor frame, diagnostic fields) a revolution. One
survey, one seed: the world (each place's micro-slope tilt and range relief) is the same in
every frame, and the sensor's jitter differs, as it hashes the pulse id. It is
reconstructed with a poses file of identity lines and ``--rescan``; the truth of each return
(its object, so its material, and its effective incidence) comes from the diagnostics.

Also here: each refusal of bad input is one line on stderr and exit code 2, on these frames
(``test_reconstruct_real.py`` checks them on the real OS1-128 capture).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import simulator
import simulator.reconstruct as steps
from simulator.config import load_scanner
from simulator.generators import street
from simulator.io.read import read
from simulator.reconstruct import ReconstructOptions, ReconstructResult, reconstruct
from simulator.reconstruct.grid import beam_indices
from simulator.reconstruct.mesh import FrameMesh
from simulator.reconstruct.reflectance import FaceReflectance, Readings
from simulator.scanner import SpinningPattern
from simulator.scene import Scene, load_scene

from .conftest import lidar_sim

SCANNER = "os1-128"
#: Frames of the capture: a face's readings are its three corners' returns in every frame
#: that sees them, so 8 frames let a face be read up to 24 times.
FRAMES = 8
#: The sensor in the ego lane of street 0, as ``scenes/street/os1-128.yaml`` places it.
POSE = {"position_m": [0.0, -1.6, 2.01], "rotation_deg": [0.0, 0.0, 0.0]}
IDENTITY = "1 0 0 0 0 1 0 0 0 0 1 0"
#: Faces read at least this often are judged.
MIN_READINGS = 20

#: The reproduction goals (``--rescan``, nvs figures): (key, sense, bound).
REPRODUCTION_GOALS = {
    "ray_drop_accuracy": (">=", 0.98),
    "depth_medae_m": ("<=", 0.02),
    "f_score": (">=", 0.97),
    "intensity_rmse": ("<=", 0.03),
}


def poses_file(path: Path, lines: int) -> Path:
    """A KITTI poses file of ``lines`` identity poses."""
    path.write_text("\n".join([IDENTITY] * lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The static street scanned from one spot: ``FRAMES`` revolutions, one ``.npz`` a
    revolution, in the sensor frame, with the diagnostic fields."""
    folder = tmp_path_factory.mktemp("street_capture")
    scene = street(0)
    scene["objects"] = [o for o in scene["objects"] if "trajectory" not in o]
    (folder / "street.yaml").write_text(yaml.safe_dump(scene, sort_keys=False), encoding="utf-8")
    survey = {
        "scanner": SCANNER,
        "scene": "street.yaml",
        "pose": POSE,
        "revolutions": FRAMES,
        "seed": 0,
        "output": {"path": "frame.npz", "frame": "sensor", "diagnostics": True},
    }
    path = folder / "survey.yaml"
    path.write_text(yaml.safe_dump(survey, sort_keys=False), encoding="utf-8")
    sim = simulator.Simulation.from_file(path)
    frames = []
    for frame in sim.frames():
        frames.append(folder / f"{frame.index:02d}.npz")
        sim.write([frames[-1]], window=frame.window())
    assert len(frames) == FRAMES
    return frames


@dataclass
class Loop:
    """The closed loop's reconstruction and what its steps computed."""

    folder: Path
    result: ReconstructResult
    mesh: FrameMesh
    readings: Readings
    faces: FaceReflectance


@pytest.fixture(scope="module")
def loop(capture: list[Path]) -> Loop:
    """The capture reconstructed with ``--rescan``; the fused mesh, its readings and the
    faces' reflectance kept as ``reconstruct`` computed them (its steps' results, taken
    on their way: the written files do not hold the readings per face)."""
    folder = capture[0].parent / "scene"
    kept: dict[str, Any] = {}

    def keep(name: str) -> Any:
        step = getattr(steps, name)

        def spy(*args: Any, **kwargs: Any) -> Any:
            kept[name] = (args, step(*args, **kwargs))
            return kept[name][1]

        return spy

    options = ReconstructOptions(
        scanner=SCANNER,
        poses=poses_file(capture[0].parent / "poses.txt", FRAMES),
        rescan=True,
        pages=False,
    )
    with pytest.MonkeyPatch.context() as mp:
        for name in ("read_faces", "face_reflectance"):
            mp.setattr(steps, name, keep(name))
        result = reconstruct(capture, folder, options)
    print(steps.format_summary(result.summary))
    print("timings (s):", result.summary["timings_s"])
    (mesh, *_), readings = kept["read_faces"]
    return Loop(folder, result, mesh, readings, kept["face_reflectance"][1])


def _truth(capture: list[Path]) -> tuple[np.ndarray, np.ndarray]:
    """(frames, C * W) each pixel's object (-1: none) and effective incidence cosine, from
    the frames' diagnostics (pixel ``channel * W + column``, as the mesh's ``pixels``)."""
    pattern = SpinningPattern(load_scanner(SCANNER))
    columns = int(pattern.scanner.firings_per_revolution or 1)
    size = pattern.channels * columns
    obj = np.full((len(capture), size), -1, dtype=np.int64)
    cos = np.full((len(capture), size), np.nan)
    for k, path in enumerate(capture):
        cloud = read(path)
        pixel = cloud["ring"].astype(np.int64) * columns + pattern.column(cloud["pulse_id"])
        obj[k, pixel] = cloud["object_id"]
        cos[k, pixel] = cloud["cos_effective"]
    return obj, cos


def _material_arrays(scene: Scene) -> dict[str, np.ndarray]:
    """Per object (and a last row for none): reflectance, k, transmittance, material name."""
    mats = [scene.materials[o.material] for o in scene.objects]
    return {
        "reflectance": np.array([m.reflectance for m in mats] + [np.nan]),
        "minnaert_k": np.array([m.minnaert_k for m in mats] + [np.nan]),
        "transmittance": np.array([m.transmittance for m in mats] + [np.nan]),
        "name": np.array([o.material for o in scene.objects] + ["-"]),
    }


def test_a_scanned_frame_lands_on_its_own_beams(capture: list[Path]) -> None:
    """Organising a scanned frame by its points' azimuths (the frames carry no recorded
    grid) puts every return on the beam that fired it: its ring's channel and its
    firing's column, one return a pixel."""
    pattern = SpinningPattern(load_scanner(SCANNER))
    cloud = read(capture[0])
    channel, column = beam_indices(cloud, pattern)
    np.testing.assert_array_equal(channel, cloud["ring"].astype(np.int64))
    np.testing.assert_array_equal(column, pattern.column(cloud["pulse_id"]))
    pixel = channel * int(pattern.scanner.firings_per_revolution or 1) + column
    assert len(np.unique(pixel)) == len(cloud)


def test_the_reflectance_of_a_face_gives_back_its_readings(loop: Loop, capture: list[Path]) -> None:
    """On the faces read at least 20 times whose corners are returns of one object of an
    opaque material that does not saturate the sensor (reflectance x intensity_scale <
    intensity_max), the recovered reflectance is within 5 % of the truth in the median
    (of the absolute relative error), and unbiased to 2 %.

    The truth: the reflectance that, under the Minnaert exponent the reconstruction fitted
    for the face's class (``k_fit``), returns the backscatter the material returned at the
    true effective incidence of the face's returns (with the micro-slope tilt):
    ``rho cos_eff^(k - k_fit)``, the median over the face's corners. A face of a class
    whose fitted exponent is its material's (asphalt, lane paint: k 0) is compared with
    its material's reflectance itself.

    Not the material's reflectance on every face: the frames are scanned from one spot, so
    each face is seen at one incidence; the class fits (calibrate's fit over a class's
    readings) find exponents well below the materials' (measured 2026-12-05: car 0.10
    against car paint's 1.03, building 0.32 against the walls' 0.71, pole 0 against 1.04),
    and the reflectance of such a face absorbs the difference at the incidence it was seen
    at. Measured (2026-12-05) on 177,745 faces: median error +0.2 %, median absolute error
    2.3 % (against the material's own reflectance: -7.5 % and 9.1 %). Left out:
    see-through materials (glass, foliage, wire mesh: a pane or gap model), and the
    retroreflective signs (4.3 x 100 > 255: every reading saturated).
    """
    mesh, faces = loop.mesh, loop.faces
    obj, cos_eff = _truth(capture)
    scanner = load_scanner(SCANNER)
    m = _material_arrays(load_scene(capture[0].parent / "street.yaml"))
    corner_obj = obj[mesh.frame[:, None], mesh.pixels]
    o = corner_obj[:, 0]
    one_object = (corner_obj == o[:, None]).all(axis=1) & (o >= 0)
    plain = (m["transmittance"][o] == 0) & (
        m["reflectance"][o] * scanner.intensity_scale < scanner.intensity_max
    )
    judged = one_object & plain & (faces.readings >= MIN_READINGS)
    c = np.median(cos_eff[mesh.frame[:, None], mesh.pixels], axis=1)
    truth = m["reflectance"][o] * c ** (m["minnaert_k"][o] - faces.minnaert_k)
    rel = faces.reflectance[judged] / truth[judged] - 1.0
    print(f"faces {len(faces.reflectance)}, judged {judged.sum()}; relative error: median "
          f"{np.median(rel):+.4f}, median |.| {np.median(np.abs(rel)):.4f}")  # fmt: skip
    plain_rel = faces.reflectance[judged] / m["reflectance"][o[judged]] - 1.0
    print(f"against the material's own reflectance: median {np.median(plain_rel):+.4f}, "
          f"median |.| {np.median(np.abs(plain_rel)):.4f}")  # fmt: skip
    names, k, k_fit = m["name"][o[judged]], m["minnaert_k"][o[judged]], faces.minnaert_k[judged]
    for name in np.unique(names):
        s = names == name
        print(f"  {name:20s} faces {s.sum():7d}  k {np.median(k[s]):.2f}  k_fit "
              f"{np.median(k_fit[s]):.2f}  median error {np.median(rel[s]):+.3f}  |.| "
              f"{np.median(np.abs(rel[s])):.3f}")  # fmt: skip
    assert judged.sum() >= 10_000, judged.sum()
    assert np.median(np.abs(rel)) <= 0.05
    assert abs(np.median(rel)) <= 0.02


def _goal(value: float, sense: str, bound: float) -> bool:
    return value >= bound if sense == ">=" else value <= bound


@pytest.mark.parametrize("key", list(REPRODUCTION_GOALS))
def test_a_rescan_reproduces_its_frame(loop: Loop, key: str) -> None:
    """Every frame scanned back from its own pose meets the reproduction goals (nvs):
    ray-drop accuracy >= 0.98, depth MedAE <= 0.02 m, F-score >= 0.97, intensity RMSE
    <= 0.03. Measured (2026-12-05), the worst of the 8 rescans: 0.9951, 0.016 m, 0.9981,
    0.0114 (frame 0's depth MedAE is 0.008 m: its scan back draws the capture's own
    jitter, the same seed and pulse ids; the other frames' do not)."""
    sense, bound = REPRODUCTION_GOALS[key]
    rows = [r for r in loop.result.summary["results"] if r["protocol"] == "rescan"]
    assert [r["frame"] for r in rows] == list(range(FRAMES))
    values = [r["nvs"][key] for r in rows]
    print(key, [round(v, 4) for v in values])
    assert all(_goal(v, sense, bound) for v in values), (key, values)


def test_the_outputs_are_those_of_the_contract(loop: Loop) -> None:
    """``scene.yaml`` with its meshes, ``scanner.yaml``, a survey per frame, a
    ``compare.json`` per rescan (compare's schema, with ``nvs``) and ``summary.json``; the
    meshes' per-face reflectances, read back as a scan reads them, are those the
    reflectance step computed, and the summary counts the fused mesh's faces."""
    folder, summary = loop.folder, loop.result.summary
    for name in ("scene.yaml", "scanner.yaml", "summary.json"):
        assert (folder / name).is_file(), name
    assert sorted(p.name for p in (folder / "frames").iterdir()) == [
        f"{k:04d}.yaml" for k in range(FRAMES)
    ]
    for k in range(FRAMES):
        saved = json.loads((folder / "rescan" / f"{k:04d}" / "compare.json").read_text())
        assert {"points", "chamfer_m", "f_score", "same_beams", "nvs"} <= set(saved)
    saved = json.loads((folder / "summary.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    assert summary["mesh"]["faces"] == len(loop.mesh.faces) == len(loop.faces.reflectance)
    scene = load_scene(folder / "scene.yaml")
    written = np.concatenate([o.face_materials["reflectance"] for o in scene.objects])
    np.testing.assert_allclose(np.sort(written), np.sort(loop.faces.reflectance), rtol=1e-12)


# ---------------------------------------------------------------------------- bad input


def _refused(res: Any, fragment: str, out: Path) -> None:
    """Exit code 2, one line on stderr naming ``fragment``, no traceback, nothing written."""
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert fragment in lines[0], (fragment, lines[0])
    assert not out.exists()


@pytest.mark.parametrize(
    ("frames", "args", "fragment"),
    [
        (1, ["--frames", "0:1", "--hold-out", "0", "--poses", 1], "--hold-out leaves no frame"),
        (3, ["--hold-out", "7", "--poses", 3], "--hold-out 7: no such frame"),
        (3, ["--poses", 2], "2 poses for 3 frames"),
        (3, ["--scanner", "vlp-16", "--poses", 3], "cannot be matched to the scanner's 16"),
        (3, ["--scanner", None, "--poses", 3], "does not carry its unit's calibration"),
    ],
    ids=[
        "one-frame-held-out",
        "held-out-not-in-capture",
        "poses-lines",
        "scanner-beams",
        "no-scanner",
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    capture: list[Path], tmp_path: Path, frames: int, args: list[Any], fragment: str
) -> None:
    """A single frame held out, a held-out frame not in the capture, a poses file of
    another length, a scanner whose beams are not the capture's, and a capture without its
    unit's calibration given no scanner: one line each, exit code 2."""
    argv: list[Any] = ["reconstruct", *capture[:frames], "-o", tmp_path / "out"]
    if "--scanner" not in args:
        argv += ["--scanner", SCANNER]
    for a, b in zip(args[::2], args[1::2], strict=True):
        if b is None:
            continue
        argv += [a, poses_file(tmp_path / f"poses{b}.txt", b) if a == "--poses" else b]
    _refused(lidar_sim(*argv), fragment, tmp_path / "out")


def test_no_poses_without_kiss_icp_names_the_extra(
    capture: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No poses file and no per-column poses: KISS-ICP would estimate them; without it
    installed, one line naming the extra ``lidar-sim[odometry]``, exit code 2."""
    for name in [m for m in sys.modules if m == "kiss_icp" or m.startswith("kiss_icp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "kiss_icp", None)  # None in sys.modules: ImportError
    res = lidar_sim("reconstruct", *capture[:3], "-o", tmp_path / "out", "--scanner", SCANNER)
    _refused(res, "pip install 'lidar-sim[odometry]'", tmp_path / "out")
