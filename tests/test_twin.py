"""``calibrate --twin``: what calibrate found, re-scanned, meets the scan it came from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import simulator
from simulator.calibrate import calibrate
from simulator.calibrate.outputs import calibrate_to_files
from simulator.io.read import read
from simulator.reconstruct.twin import run_twin, twin_of

from .conftest import REPO


@pytest.fixture(scope="module")
def yard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One revolution of the calibration yard (an RS-Helios 5515 1.8 m above a dark
    ground with two walls), as a "real" scan the twin does not see the scene of."""
    folder = tmp_path_factory.mktemp("yard")
    for name in ("scene.yaml", "survey.yaml"):
        shutil.copy(REPO / "scenes" / "calibration" / name, folder / name)
    survey = yaml.safe_load((folder / "survey.yaml").read_text())
    survey["revolutions"] = 1
    (folder / "survey.yaml").write_text(yaml.safe_dump(survey))
    cloud = simulator.scan(folder / "survey.yaml")
    simulator.io.write(cloud, folder / "real.npz")
    return folder


def test_the_twin_of_a_scan_returns_as_the_scan_does(yard: Path) -> None:
    """Each surface of the twin (ground, two walls) returns on the same beams as the scan
    it was fitted to: per-ring return share within 0.05 and median intensity within 15 %
    on at least 90 % of the rings; compare.json has compare's keys."""
    scan = yard / "real.npz"
    # as ``lidar-sim calibrate real.npz -o fitted.yaml --twin twin`` (the scan is in the
    # sensor frame): the twin takes the scanner overrides as written
    calibrated = calibrate_to_files(scan, yard / "fitted.yaml")
    fitted = calibrated.calibration
    result = twin_of(calibrated, yard / "twin", "rs-helios-5515")
    names = {s.surface.name for s in fitted.surfaces}
    assert {"ground", "wall_1", "wall_2"} <= names
    for name, figures in result.surfaces.items():
        print(name, figures["rings_judged"], figures["share_within_0.05"],
              figures["intensity_within_15pct"])  # fmt: skip
        if name in ("ground", "wall_1", "wall_2"):
            assert figures["rings_judged"] >= 5
            assert figures["share_within_0.05"] >= 0.9
            assert figures["intensity_within_15pct"] >= 0.9
    saved = json.loads((yard / "twin" / "compare.json").read_text())
    assert set(saved) == {"points", "chamfer_m", "f_score", "f_score_threshold_m", "rings",
                          "intensity", "range", "same_beams", "nvs"}  # fmt: skip
    share_a = np.array(saved["rings"]["share_a"], dtype=float)
    assert np.nanmax(share_a) <= 1.0 and len(share_a) == 32
    assert (yard / "twin" / "index.html").is_file() and (yard / "twin" / "rings.png").is_file()
    lines = result.lines()  # what the command prints
    assert lines[-len(result.files) :] == [f"wrote {path}" for path in result.files]
    ground = result.surfaces["ground"]
    assert (f"twin ground: {ground['rings_judged']} rings judged; return share within 0.05 on "
            f"{100 * ground['share_within_0.05']:.0f} %, median intensity within 15 % on "
            f"{100 * ground['intensity_within_15pct']:.0f} %") in lines  # fmt: skip


def test_a_surface_whose_reflectance_was_not_fitted_is_left_out(yard: Path) -> None:
    """A surface whose reflectance the fit could not fix is left out of the library and of
    the twin with a note naming it, never written with a default reflectance; the threshold
    written is a kept surface's: the ground's (the only surface that fits one, 110 m for
    the yard's 110) is written while the ground is kept, and none once it is left out."""
    scan = yard / "real.npz"
    fitted = calibrate(scan, "rs-helios-5515", replicas=0)
    kept = yaml.safe_load(fitted.write(yard / "kept.yaml")[1].read_text())
    assert kept["detection"]["reference_range_m"] == pytest.approx(110, rel=0.03)
    by = {s.surface.name: s for s in fitted.surfaces}
    for name in ("wall_1", "ground"):  # as physical() drops an unconstrained one
        by[name].intensity_fit.values.pop("reflectance")
    assert "reference_range_m" in by["ground"].detection_fit.values
    files = fitted.write(yard / "dropped.yaml")
    library = yaml.safe_load(files[0].read_text())
    assert set(library) == {"wall_2"}
    text = files[0].read_text()
    for name in ("wall_1", "ground"):  # the notes derived from the surfaces as they stand
        assert f"# note: {name} (" in text and "left out of the library" in text, name
    overrides = yaml.safe_load(files[1].read_text()) or {}
    assert "detection" not in overrides, overrides
    result = run_twin(fitted, read(scan), yard / "twin_dropped", "rs-helios-5515", overrides)
    assert set(result.surfaces) == set(library)
