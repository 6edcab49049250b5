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
(its object, so its material; its effective incidence; whether it is one surface's echo)
comes from the diagnostics. Its module fixture (the scans, the reconstruction, the rescans
and their comparisons) is the suite's largest single cost: 60 s of setup on two cores in a
clean clone's ``make test`` (2026-12-05; 86 s before the rescans' mesh went into Embree once).

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
from simulator.reconstruct.reflectance import FaceReflectance
from simulator.sensor.scanner import SpinningPattern
from simulator.world.scene import Scene, load_scene

from .conftest import lidar_sim, refused_in_one_line

SCANNER = "os1-128"
#: Frames of the capture: a face's readings are its three corners' returns in every frame
#: that sees them, so 8 frames let a face be read up to 24 times.
FRAMES = 8
#: The sensor in the ego lane of street 0, as ``scenes/street/os1-128.yaml`` places it.
POSE = {"position_m": [0.0, -1.6, 2.01], "rotation_deg": [0.0, 0.0, 0.0]}
IDENTITY = "1 0 0 0 0 1 0 0 0 0 1 0"
#: Faces read at least this often are judged.
MIN_READINGS = 20

#: The reproduction goals (``--rescan``, nvs figures): key -> (sense, bound).
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
    faces: FaceReflectance


@pytest.fixture(scope="module")
def loop(capture: list[Path]) -> Loop:
    """The capture reconstructed with ``--rescan``; the fused mesh and the faces'
    reflectance kept as ``reconstruct`` computed them (its steps' results, taken on their
    way: the written files do not hold a face's corners' returns or its count of
    readings)."""
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
        for name in ("read_faces", "face_reflectance"):  # (read_faces: the fused mesh)
            mp.setattr(steps, name, keep(name))
        result = reconstruct(capture, folder, options)
    print(steps.format_summary(result.summary))
    print("timings (s):", result.summary["timings_s"])
    (mesh, *_), _ = kept["read_faces"]
    return Loop(folder, result, mesh, kept["face_reflectance"][1])


def _truth(capture: list[Path]) -> dict[str, np.ndarray]:
    """(frames, C * W) each pixel's ``object_id`` (-1: none), ``cos_effective`` and
    ``energy_fraction``, from the frames' diagnostics (pixel ``channel * W + column``, as
    the mesh's ``pixels``)."""
    pattern = SpinningPattern(load_scanner(SCANNER))
    columns = int(pattern.scanner.firings_per_revolution or 1)
    size = (len(capture), pattern.channels * columns)
    truth = {
        "object_id": np.full(size, -1, dtype=np.int64),
        "cos_effective": np.full(size, np.nan),
        "energy_fraction": np.zeros(size),
    }
    for k, path in enumerate(capture):
        cloud = read(path)
        pixel = cloud["ring"].astype(np.int64) * columns + pattern.column(cloud["pulse_id"])
        for name, grid in truth.items():
            grid[k, pixel] = cloud[name]
    return truth


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
    firing's column, one return a pixel (the first frame and the last, whose pulse ids
    start 7 revolutions in)."""
    pattern = SpinningPattern(load_scanner(SCANNER))
    for path in (capture[0], capture[-1]):
        cloud = read(path)
        channel, column = beam_indices(cloud, pattern)
        np.testing.assert_array_equal(channel, cloud["ring"].astype(np.int64))
        np.testing.assert_array_equal(column, pattern.column(cloud["pulse_id"]))
        pixel = channel * int(pattern.scanner.firings_per_revolution or 1) + column
        assert len(np.unique(pixel)) == len(cloud)


def test_the_reflectance_of_a_face_gives_back_its_readings(loop: Loop, capture: list[Path]) -> None:
    """The recovered reflectance is within 5 % of the truth in the median (of the absolute
    relative error) and unbiased to 2 %: on all the faces judged, on those of the classes
    whose fitted Minnaert exponent is not 0 (where the inversion divides by ``cos^k``),
    and, to 5 %, on the faces of each material that has 500 judged or more.

    Judged: the faces read at least 20 times whose three corners are echoes of one
    surface (``energy_fraction`` 1: a mixed echo, as on the walkers' clothes, has no one
    material) of one object, of an opaque material that does not saturate the sensor
    (reflectance x intensity_scale < intensity_max) and whose reading at that incidence is
    10 counts or more (rounded to whole counts, a weaker one is known to no better than
    5 %).

    The truth: the reflectance that, under the exponent the reconstruction fitted for the
    face's class (``k_fit``), gives back what the material returned at the true effective
    incidence of the face's returns (with the micro-slope tilt): ``rho cos_eff^(k -
    k_fit)``, the median over the face's corners; a face whose class's fitted exponent is
    its material's (asphalt, lane paint: 0) is compared with its material's reflectance
    itself. Not the material's reflectance on every face: the frames are scanned from one
    spot, so each face is seen at one incidence; the class fits (calibrate's fit over a
    class's readings) find exponents well below the materials' (measured 2026-12-05: car
    0.09 against car paint's 1.03, building 0.32 against the walls' 0.71, pole 0 against
    1.04), and the reflectance of such a face absorbs the difference at the incidence it
    was seen at.

    Measured (2026-12-05), 161,570 faces judged: median error +0.3 %, absolute 1.8 % (the
    92,192 with k_fit > 0: +0.1 %, 3.0 %; the worst material, car paint, 4.3 %); against
    the material's own reflectance -6.2 % and 8.6 %. With the division by ``cos^k`` left
    out of the inversion (a scratch break): those with k_fit > 0 -7.1 %, 7.6 %; the
    building walls 9.6 %. Left out: see-through materials (glass, foliage, wire mesh: a
    pane or gap model), and the retroreflective signs (4.3 x 100 > 255: every reading
    saturated).
    """
    mesh, faces = loop.mesh, loop.faces
    truth = _truth(capture)
    scanner = load_scanner(SCANNER)
    m = _material_arrays(load_scene(capture[0].parent / "street.yaml"))
    corner = {name: grid[mesh.frame[:, None], mesh.pixels] for name, grid in truth.items()}
    o = corner["object_id"][:, 0]
    cos = np.median(corner["cos_effective"], axis=1)
    rho, k = m["reflectance"][o], m["minnaert_k"][o]
    judged = (
        (corner["object_id"] == o[:, None]).all(axis=1)
        & (o >= 0)
        & (corner["energy_fraction"] >= 0.99).all(axis=1)
        & (m["transmittance"][o] == 0)
        & (rho * scanner.intensity_scale < scanner.intensity_max)
        & (rho * cos**k * scanner.intensity_scale >= 10 * scanner.intensity_step)
        & (faces.readings >= MIN_READINGS)
    )
    expected = rho * cos ** (k - faces.minnaert_k)
    rel = faces.reflectance[judged] / expected[judged] - 1.0
    own = faces.reflectance[judged] / rho[judged] - 1.0
    bent = faces.minnaert_k[judged] > 0
    names = m["name"][o[judged]]
    print(f"faces {len(faces.reflectance)}, judged {judged.sum()}, k_fit > 0 {bent.sum()}")
    for what, r in (("all", rel), ("k_fit > 0", rel[bent]), ("against rho", own)):
        print(f"  {what:12s} median error {np.median(r):+.4f}, |.| {np.median(np.abs(r)):.4f}")
    worst = {}
    for name in np.unique(names):
        sel = names == name
        print(f"  {name:20s} faces {sel.sum():7d}  k {np.median(k[judged][sel]):.2f}  k_fit "
              f"{np.median(faces.minnaert_k[judged][sel]):.2f}  median error "
              f"{np.median(rel[sel]):+.3f}  |.| {np.median(np.abs(rel[sel])):.3f}")  # fmt: skip
        if sel.sum() >= 500:
            worst[str(name)] = float(np.median(np.abs(rel[sel])))
    assert judged.sum() >= 100_000 and bent.sum() >= 50_000, (judged.sum(), bent.sum())
    for r in (rel, rel[bent]):
        assert np.median(np.abs(r)) <= 0.05
        assert abs(np.median(r)) <= 0.02
    assert len(worst) >= 8 and max(worst.values()) <= 0.05, worst


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
    reflectance step computed, and the summary counts the fused mesh's faces. The street
    was scanned with no vehicle under the sensor, and no ego is estimated: no ``ego.ply``,
    no ``ego:`` section in a frame survey."""
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
    # no vehicle under this sensor: the ego estimate (simulator/reconstruct/ego.py) finds none
    assert summary["ego"]["beams"] == 0 and summary["ego"]["mesh"] is None
    assert not (folder / "ego.ply").exists()
    assert all("ego" not in yaml.safe_load(p.read_text()) for p in (folder / "frames").iterdir())
    scene = load_scene(folder / "scene.yaml")
    written = np.concatenate([o.face_materials["reflectance"] for o in scene.objects])
    np.testing.assert_allclose(np.sort(written), np.sort(loop.faces.reflectance), rtol=1e-12)


# ---------------------------------------------------------------------------- bad input


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
    refused_in_one_line(lidar_sim(*argv), fragment, tmp_path / "out")


def test_no_poses_without_kiss_icp_names_the_extra(
    capture: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No poses file and no per-column poses: KISS-ICP would estimate them; without it
    installed, one line naming the extra ``lidar-sim[odometry]``, exit code 2."""
    for name in [m for m in sys.modules if m == "kiss_icp" or m.startswith("kiss_icp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "kiss_icp", None)  # None in sys.modules: ImportError
    res = lidar_sim("reconstruct", *capture[:3], "-o", tmp_path / "out", "--scanner", SCANNER)
    refused_in_one_line(res, "pip install 'lidar-sim[odometry]'", tmp_path / "out")
