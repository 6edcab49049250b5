"""``lidar-sim calibrate`` on real captures: no traceback, only physical values written, the
ego vehicle's points removed and counted. The captures are shared beside the checkout,
never copied into it; the test skips when they are absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from .conftest import Ran, lidar_sim

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"

#: (capture, scanner preset, extra arguments)
FRAMES = {
    "vlp16": ("nebula/velodyne-vlp16-1673400472138016708.pcd", "vlp-16", []),
    "helios": ("nebula/robosense-helios5515-1691141763462381376.pcd", "rs-helios-5515", []),
    # Ouster's sensor frame has its origin 36.18 mm below the optical centre (the model's).
    "os1": ("ouster/OS-1-128_v2.3.0_1024x10_lb_n3.pcap", "os1-128",
            ["--meta", "ouster/OS-1-128_v2.3.0_1024x10.json", "--origin", "0,0,0.03618"]),
}  # fmt: skip


def _check_library(lib: dict, notes: str) -> None:
    for name, m in lib.items():
        retro = "retroreflective" in m["description"]
        assert m["reflectance"] >= 0.005, name  # response.RHO_BOUNDS
        assert m["reflectance"] <= 1.5 or retro, name
        assert 0.0 <= m["minnaert_k"] < 3.0, name  # at the bound 3: no diffuse law
        assert 0.0 <= m["roughness_m"] < 0.2, name
        assert 0.0 <= m["micro_slope_deg"] < 90.0, name


def _check_no_default(text: str, lib: dict) -> None:
    """Every material written is the one fitted: its reflectance is the value the header's
    comment line gives for that surface (a surface whose reflectance was not fitted is
    left out with a note, never written with a default)."""
    for name, m in lib.items():
        line = next(ln for ln in text.splitlines() if ln.startswith(f"#   {name} ("))
        assert " reflectance " in line, (name, line)
        value = float(line.split(" reflectance ")[1].split()[0])
        assert abs(value - m["reflectance"]) <= 1e-4 + 1e-3 * value, (name, line)


def _fitted(text: str, name: str, key: str) -> tuple[float, float]:
    """(value, standard error) of ``key`` in the library's comment line of ``name``."""
    line = next(ln for ln in text.splitlines() if ln.startswith(f"#   {name} ("))
    value, _, error = line.split(f" {key} ")[1].split(",")[0].split()[:3]
    return float(value), float(error)


def _check_os1(lib: dict, gains: np.ndarray, twin: dict, text: str) -> None:
    """The OS1-128 frame outdoors: the ground's reflectance, k and the ring gains are
    fitted where the data fix them. Ring gains come only from surfaces seen at several
    incidences within a ring (the walls): the ground meets each ring at one incidence, so
    a ring meeting only the ground and plane_4 (a second horizontal plane 0.24 m lower;
    rings 95, 97-127) keeps a gain of 1.
    Measured (2026-12-04): gains 0.59-1.67 (before: 0.033-1.75, the ground's law in 128
    gains); the ground's reflectance 0.0343 +- 0.0032, k 0 at its bound (the reflectivity
    on the ground falls as the incidence steepens, from 5-13 at cos 0.05 to 1 at cos 0.37:
    a near-range roll-off no k >= 0 follows); the twin's ground median intensity 0.75x the
    real one (before 0.0: the default reflectance 0.3 with k 2.07), 7 of 56 rings within
    15 % (before 0). The road's two planes (the ground and plane_4, 0.24 m lower) get one
    reflectance: 0.0343 +- 0.0032 and 0.0354 +- 0.0045 (before: plane_4 0.0199 +- 0.0004,
    its law held by the outliers at a noise of 0.011)."""
    assert "ground" in lib, "the ground left out of the library"
    # the sensor's calibrated reflectivity of road asphalt at 865 nm: a few per cent
    assert 0.02 <= lib["ground"]["reflectance"] <= 0.15, lib["ground"]
    fitted = gains[gains != 1.0]
    assert len(fitted) >= 64 and (fitted >= 0.5).all() and (fitted <= 2.0).all(), gains
    ground = twin["ground"]
    assert ground["rings_judged"] >= 40
    assert 0.67 <= ground["intensity_median_ratio"] <= 1.5, ground
    assert ground["intensity_within_15pct"] >= 0.05, ground
    assert ground["share_within_0.05"] >= 0.5, ground
    (a, se_a), (b, se_b) = (
        _fitted(text, "ground", "reflectance"),
        _fitted(text, "plane_4", "reflectance"),
    )
    assert abs(a - b) <= 2.0 * np.hypot(se_a, se_b), (a, se_a, b, se_b)


#: Measured (2026-12-05) on the indoor frames, where the planes are a room's clutter: each
#: library's reflectances, the surfaces left out, and per surface of the twin the rings
#: judged and the share of them whose return share is within 0.05 of the real frame's.
#: The fit is deterministic (hashed RANSAC, seeded subsets): the tolerance is for BLAS.
MEASURED = {
    "vlp16": {
        "reflectance": {"ground": 0.3321, "plane_4": 0.07433, "plane_5": 0.06618,
                        "wall_1": 0.1667, "plane_7": 0.05256, "wall_2": 0.1852},
        # plane_1: k at its bound 3 (reflectance 60.9: no diffuse law); plane_3: its
        # reflectance 4.7 +- 170 unconstrained
        "left_out": {"plane_1", "plane_3"},
        # both left out fitted a threshold (plane_1 19.3 +- 130 m, plane_3 8.32 +- 0.68 m):
        # a surface left out has no say, and no kept surface fixed one
        "detection": None,
        "thresholds_left_out": {"plane_1": 19.3, "plane_3": 8.32},
        # the ground: 3 / 10 before this stop's model change (the relief's new draws)
        "twin": {"ground": (10, 0.2), "plane_4": (10, 0.0), "plane_5": (6, 0.0),
                 "wall_1": (7, 0.0), "plane_7": (8, 0.0), "wall_2": (6, 0.0)},
    },
    "helios": {
        "reflectance": {"plane_1": 0.1954, "ground": 0.498, "plane_3": 0.4215,
                        "plane_4": 0.2755, "plane_5": 0.1503, "plane_6": 0.07278,
                        "plane_7": 0.05687},
        "left_out": set(),
        "detection": 5.26,  # plane_3's (5.256 +- 0.86 m), the only one fitted
        "thresholds_left_out": {},
        # the ground: 2 / 18 without the ego estimated from the frame (the twin now has it)
        "twin": {"plane_1": (9, 1 / 9), "ground": (18, 5 / 18), "plane_3": (19, 0.0),
                 "plane_4": (19, 1 / 19), "plane_5": (11, 0.0), "plane_6": (9, 0.0),
                 "plane_7": (6, 1 / 6)},
    },
}  # fmt: skip

#: One calibration a frame for the module's tests: (result, its folder).
_RUNS: dict[str, tuple[Ran, Path]] = {}


def _calibrated(frame: str, factory: pytest.TempPathFactory) -> tuple[Ran, Path]:
    """``lidar-sim calibrate FRAME --twin`` run once a frame (skips without the captures)."""
    if not REALDATA.is_dir():
        pytest.skip(f"{frame}: the shared real captures are not in this checkout")
    if frame not in _RUNS:
        capture, scanner, extra = FRAMES[frame]
        folder = factory.mktemp(frame)
        args = [a if not a.endswith(".json") else str(REALDATA / a) for a in extra]
        res = lidar_sim("calibrate", REALDATA / capture, "--scanner", scanner, "-o",
                        folder / "lib.yaml", "--twin", folder / "twin", *args)  # fmt: skip
        _RUNS[frame] = (res, folder)
    return _RUNS[frame]


def _check_measured(frame: str, lib: dict, twin: dict, stdout: str, text: str,
                    overrides: dict) -> None:  # fmt: skip
    """The indoor frames' figures as measured (:data:`MEASURED`), and the rule that the
    threshold written is a kept surface's (on the VLP-16 frame the two surfaces that
    fitted one are both left out, so none is written)."""
    want = MEASURED[frame]
    detection = overrides.get("detection", {}).get("reference_range_m")
    assert detection == want["detection"], overrides
    for name, ref in want["thresholds_left_out"].items():
        assert _fitted(text, name, "reference_range_m")[0] == pytest.approx(ref, rel=2e-3)
        assert name not in lib
    assert set(lib) == set(want["reflectance"]), sorted(lib)
    for name, rho in want["reflectance"].items():
        assert lib[name]["reflectance"] == pytest.approx(rho, rel=2e-3), name
    for name in want["left_out"]:
        assert f"{name} (" in stdout and "left out of the library" in stdout, name
    got = {name: (f["rings_judged"], f["share_within_0.05"]) for name, f in twin.items()}
    assert set(got) == set(want["twin"])
    for name, (rings, share) in want["twin"].items():
        assert got[name][0] == rings and got[name][1] == pytest.approx(share, abs=1e-9), name


@pytest.mark.parametrize("frame", ["vlp16", "helios"])
@pytest.mark.xfail(
    strict=True,
    reason="goal: the twin returns as the real frame does, 90 % of the rings within 0.05 in "
    "return share on every surface judged on 6 rings or more; measured 0-30 % (VLP-16) and "
    "0-17 % (Helios): indoors the planes are a room's clutter, and the twin's share is "
    "0.29-0.52 above the real one (detection or the surfaces' extent)",
)
def test_the_twin_of_an_indoor_frame_meets_the_goal(
    frame: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import json

    res, folder = _calibrated(frame, tmp_path_factory)
    assert res.returncode == 0, res.stderr
    twin = json.loads((folder / "twin" / "twin.json").read_text())
    judged = {n: f for n, f in twin.items() if f["rings_judged"] >= 6}
    assert judged
    assert all(f["share_within_0.05"] >= 0.9 for f in judged.values()), {
        n: f["share_within_0.05"] for n, f in judged.items()
    }


@pytest.mark.parametrize("frame", list(FRAMES))
def test_calibrate_a_real_frame(frame: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    res, tmp_path = _calibrated(frame, tmp_path_factory)
    out = tmp_path / "lib.yaml"
    assert "Traceback" not in res.stderr, res.stderr
    print(frame, res.stdout, res.stderr)
    if res.returncode == 2:  # a verdict: one line
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        return
    assert res.returncode == 0, res.stderr
    lib = yaml.safe_load(out.read_text())
    assert lib, "no surface written"
    _check_library(lib, res.stdout)
    overrides = yaml.safe_load((tmp_path / "lib_scanner.yaml").read_text()) or {}
    if "range_noise_m" in overrides:
        assert 0.0 <= overrides["range_noise_m"] < 0.2
    response = overrides.get("intensity_response", {})
    gains = np.asarray(response.get("channel_gain", [1.0]), dtype=float)
    assert (gains > 0).all() and np.isfinite(gains).all()
    assert "ego points removed" in res.stdout
    count = int(res.stdout.split("note: ")[1].split(" ego points")[0])
    assert count >= 0
    # The twin: what was found, re-scanned and compared beam by beam (figures printed; the
    # goals are reported per surface, not asserted: see the README for how far they are).
    import json

    twin = json.loads((tmp_path / "twin" / "twin.json").read_text())
    assert set(twin) == set(lib)
    for name, f in twin.items():
        print(
            f"{frame} twin {name}: rings judged {f['rings_judged']}, share within 0.05 "
            f"{f['share_within_0.05']}, intensity within 15 % {f['intensity_within_15pct']}"
        )
        assert len(f["share_a"]) == len(f["share_b"]) == len(f["beams_per_ring"])
        assert (f["share_within_0.05"] is None) == (f["rings_judged"] == 0)
        assert (
            f["verdicts"]
            or f["rings_judged"] == 0
            or (f["share_within_0.05"] >= 0.9 and (f["intensity_within_15pct"] or 1.0) >= 0.9)
        )
    _check_no_default(out.read_text(), lib)
    if frame == "os1":
        _check_os1(lib, gains, twin, out.read_text())
    else:
        _check_measured(frame, lib, twin, res.stdout, out.read_text(), overrides)
    saved = json.loads((tmp_path / "twin" / "compare.json").read_text())
    assert set(saved) == {"points", "chamfer_m", "f_score", "f_score_threshold_m", "rings",
                          "intensity", "range", "same_beams", "nvs"}  # fmt: skip
