"""Looking at clouds: renders, range images, the viewer under Xvfb, reports, reading back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.io.read import read
from simulator.pointcloud import PointCloud
from simulator.viz.colors import SEMANTIC_KITTI_RGB, colors_for
from simulator.viz.rangeimage import range_image

from .conftest import PLAIN, REPO, Workspace, single_channel_scanner


@pytest.fixture(scope="module")
def demo() -> PointCloud:
    return simulator.scan(REPO / "scenes" / "farm" / "survey.yaml", ["revolutions=0.5"])


def _ring_cloud(radius: float = 10.0, n: int = 720) -> PointCloud:
    a = np.linspace(0, 2 * np.pi, n, endpoint=False)
    xyz = np.stack([radius * np.cos(a), radius * np.sin(a), np.zeros(n)], axis=1)
    return PointCloud({
        "xyz": xyz.astype(np.float32), "intensity": np.full(n, 50, np.float32),
        "range_m": np.full(n, radius, np.float32), "ring": np.zeros(n, np.uint16),
        "label": np.full(n, 10, np.uint16),
    })  # fmt: skip


def _renders(
    cloud: PointCloud | None, *calls: tuple, commands: tuple[list[str], ...] = ()
) -> list[np.ndarray]:
    """render_array of each argument tuple, then each ``lidar-sim`` command of ``commands``
    (its exit code must be 0), in one child process: Filament (the offscreen renderer)
    then never lives in the test process, whose exit it could disturb; one child for all
    saves a start (~2-4 s) a render."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        if cloud is not None:
            np.savez(Path(tmp) / "c.npz", **cloud.fields)
        code = (
            "import sys, numpy as np; from simulator.io.npz import read_npz; "
            "from simulator.viz.render import render_array; from simulator.cli import main\n"
            "calls, commands = eval(sys.argv[2]), eval(sys.argv[4])\n"
            "c = read_npz(sys.argv[1]) if calls else None\n"
            "for k, a in enumerate(calls):\n"
            "    np.save(f'{sys.argv[3]}{k}.npy', render_array(c, *a))\n"
            "for argv in commands:\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit as exc:\n"
            "        if exc.code:\n"
            "            raise\n"
        )
        res = subprocess.run([sys.executable, "-c", code, str(Path(tmp) / "c.npz"), repr(calls),
                              str(Path(tmp) / "img"), repr(commands)], capture_output=True,
                             text=True, timeout=300)  # fmt: skip
        assert res.returncode == 0, res.stderr
        return [np.load(Path(tmp) / f"img{k}.npy") for k in range(len(calls))]


def _render(cloud: PointCloud, *args: object) -> np.ndarray:
    return _renders(cloud, args)[0]


def _ink(image: np.ndarray) -> np.ndarray:
    return np.any(image < 250, axis=2)


def test_birds_eye_render_puts_points_where_the_geometry_says() -> None:
    """A ring of points round the sensor: a ring of ink centred in a bird's-eye render."""
    image = _render(_ring_cloud(), "label", "bev", 400, 400, 3.0)
    ink = _ink(image)
    assert 500 < ink.sum() < 0.2 * ink.size
    rows, cols = np.nonzero(ink)
    assert abs(rows.mean() - 200) < 8 and abs(cols.mean() - 200) < 8
    assert not ink[180:220, 180:220].any()  # the ring's empty middle
    radius = np.hypot(rows - 200, cols - 200)
    assert np.ptp(radius) < 0.15 * radius.mean()  # a circle, not a blob
    # Label colours are SemanticKITTI's: car (10) points are drawn in its colour.
    drawn = image[ink].astype(int)
    car = np.array(SEMANTIC_KITTI_RGB[10])
    assert np.mean(np.abs(drawn - car).sum(axis=1) < 30) > 0.5


def test_renders_of_the_demo_change_with_the_field(demo: PointCloud, tmp_path: Path) -> None:
    simulator.write(demo, tmp_path / "demo.npz")
    path = tmp_path / "demo.png"
    command = ["render", str(tmp_path / "demo.npz"), "-o", str(path), "--color", "label",
               "--view", "bev", "--width", "320", "--height", "200"]  # fmt: skip
    by_intensity, by_label = _renders(
        demo, ("intensity", "sensor", 320, 200), ("label", "sensor", 320, 200),
        commands=(command,),
    )  # fmt: skip
    assert _ink(by_intensity).sum() > 2000
    np.testing.assert_array_equal(_ink(by_intensity), _ink(by_label))  # same points drawn
    assert np.abs(by_intensity.astype(int) - by_label.astype(int)).sum() > 1e5  # other colours
    import matplotlib.pyplot as plt

    picture = plt.imread(path)
    assert picture.shape[0] == 200 and picture.shape[1] > 320  # the legend beside it


def test_colours_by_field() -> None:
    """Labels in SemanticKITTI's colours, intensity on viridis over 0-100, rings on tab20
    (ring 20 wraps to ring 0's colour), range on turbo between its 2nd and 98th
    percentiles, return number on plasma over 1-4."""
    from matplotlib import colormaps

    n = 5
    cloud = PointCloud({
        "xyz": np.zeros((n, 3), np.float32),
        "intensity": np.array([0, 25, 50, 100, 300], np.float32),
        "range_m": np.array([1, 2, 3, 4, 5], np.float32),
        "ring": np.array([0, 1, 19, 20, 3], np.uint16),
        "label": np.array([10, 40, 70, 9999, 0], np.uint16),
        "return_number": np.array([1, 2, 3, 4, 1], np.uint8),
    })  # fmt: skip
    label = colors_for(cloud, "label")
    np.testing.assert_allclose(label[0] * 255, [100, 150, 245])  # car
    np.testing.assert_allclose(label[1] * 255, [255, 0, 255])  # road
    np.testing.assert_allclose(label[2] * 255, [0, 175, 0])  # vegetation
    np.testing.assert_allclose(label[3] * 255, [128, 128, 128])  # unknown: grey
    np.testing.assert_allclose(label[4], [0, 0, 0])  # unlabelled
    viridis = colormaps["viridis"]
    want = viridis(np.array([0.0, 0.25, 0.5, 1.0, 1.0]))[:, :3]  # 300 saturates
    np.testing.assert_allclose(colors_for(cloud, "intensity"), want)
    ring = colors_for(cloud, "ring")
    np.testing.assert_allclose(ring, colormaps["tab20"](np.array([0, 1, 19, 0, 3]) / 19)[:, :3])
    assert not np.allclose(ring[0], ring[1])
    lo, hi = np.percentile([1, 2, 3, 4, 5], [2, 98])
    want = colormaps["turbo"](np.clip((np.arange(1, 6) - lo) / (hi - lo), 0, 1))[:, :3]
    np.testing.assert_allclose(colors_for(cloud, "range"), want)
    want = colormaps["plasma"](np.array([0, 1, 2, 3, 0]) / 3)[:, :3]
    np.testing.assert_allclose(colors_for(cloud, "return"), want)
    with pytest.raises(ValueError, match="cannot colour by"):
        colors_for(_ring_cloud(), "spin")


def test_range_image_rows_are_rings_by_elevation_and_nearest_wins() -> None:
    xyz = np.array([[10, 0, 1], [10, 0, -1], [20, 0, -2], [0, 10, 1], [-10, 0.001, 1]], float)
    cloud = PointCloud({
        "xyz": xyz.astype(np.float32), "ring": np.array([1, 0, 0, 1, 1], np.uint16),
        "range_m": np.linalg.norm(xyz, axis=1).astype(np.float32),
        "intensity": np.array([1, 2, 3, 4, 5], np.float32), "label": np.full(5, 40, np.uint16),
    })  # fmt: skip
    images = range_image(cloud, width=8)
    assert images["range"].shape == (2, 8)
    # Ring 1 looks up (elevation > 0): top row. Front is the middle column, left a quarter.
    assert images["intensity"][0, 4] == 1 and images["intensity"][0, 2] == 4
    assert images["intensity"][1, 4] == 2  # nearer than the 20 m point in the same pixel
    assert images["intensity"][0, 0] == 5  # straight back: the left edge
    assert (images["range"] == -1).sum() == 16 - 4


def test_reader_returns_every_format(demo: PointCloud, tmp_path: Path) -> None:
    for ext in ("npz", "pcd", "ply", "las", "laz", "bin"):
        simulator.write(demo, tmp_path / f"d.{ext}")
        back = read(tmp_path / f"d.{ext}")
        assert len(back) == len(demo), ext
        np.testing.assert_allclose(back["xyz"], demo["xyz"], atol=1e-4, err_msg=ext)
        np.testing.assert_array_equal(back["label"], demo["label"], err_msg=ext)


def _report_of_a_slope(ws: Workspace, tmp_path: Path, material: dict) -> tuple[dict, object]:
    from simulator.viz.report import write_report

    plane = {"name": "slope", "plane": {"size_m": [200, 200]}, "position_m": [0, 0, -2],
             "rotation_deg": [0, 25, 0], "material": material}  # fmt: skip
    survey = ws.survey([plane], scanner=single_channel_scanner(
        channels={"elevation_deg": [-10.0, -20.0, -30.0, -45.0]}))  # fmt: skip
    sim = simulator.Simulation.from_file(survey)
    cloud = sim.run()
    summary = write_report(cloud, tmp_path / "rep", simulation=sim)
    return summary["materials"]["slope:inline"], cloud


def test_report_fits_the_minnaert_exponent_from_what_a_scan_holds(
    ws: Workspace, tmp_path: Path
) -> None:
    """On a tilted plane of k = 0.6 with a 3 deg micro-slope, the report fits measured
    intensity against the mesh's incidence (the micro-slope unknown to it, as to a user):
    0.6 to within 0.03, not to the 1e-4 a fit on the hidden tilted cosine would give."""
    material = {**PLAIN, "reflectance": 0.4, "minnaert_k": 0.6, "micro_slope_deg": 3.0,
                "micro_slope_cell_m": 0.05}  # fmt: skip
    fitted, cloud = _report_of_a_slope(ws, tmp_path, material)
    assert fitted["fitted_k"] == pytest.approx(0.6, abs=0.03)
    assert fitted["fitted_k"] != pytest.approx(0.6, abs=1e-3)  # the micro-slope scatters
    assert fitted["points"] == fitted["fitted_points"] == len(cloud) > 1000
    assert fitted["saturated_points"] == 0
    page = (tmp_path / "rep" / "report.html").read_text()
    for image in ("intensity_vs_incidence.png", "detection.png", "range_error.png",
                  "points_per_ring.png", "ranges.png"):  # fmt: skip
        assert (tmp_path / "rep" / image).stat().st_size > 5000 and image in page


def test_report_leaves_saturated_points_out_of_the_fit(ws: Workspace, tmp_path: Path) -> None:
    """A retroreflector (rho 3, k 0.6) reads 300 cos^0.6, clipped at 255 above cos 0.76:
    the clipped points are counted and left out, and the rest give k = 0.6 (no micro-slope
    here, so exactly). Fitting all points would give 0.585."""
    from simulator.viz.report import fit_minnaert

    material = {**PLAIN, "reflectance": 3.0, "minnaert_k": 0.6}
    fitted, cloud = _report_of_a_slope(ws, tmp_path, material)
    clipped = cloud["intensity"] >= 255.0
    assert 100 < clipped.sum() < len(cloud) - 100
    assert fitted["saturated_points"] == int(clipped.sum())
    assert fitted["fitted_points"] == len(cloud) - int(clipped.sum())
    assert fitted["fitted_k"] == pytest.approx(0.6, abs=1e-4)
    naive, _ = fit_minnaert(cloud["cos_incidence"].astype(float), cloud["intensity"].astype(float))
    assert naive < 0.59  # the clipped points pull a fit of everything off


@pytest.fixture(scope="module")
def display() -> str:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (make test installs it)")
    proc = subprocess.Popen(["Xvfb", ":97", "-screen", "0", "1600x1000x24"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(1.0)
    yield ":97"
    proc.terminate()


def test_viewer_opens_a_window_under_xvfb(display: str, tmp_path: Path) -> None:
    """The real Open3D window, drawn on a virtual screen; its screenshot shows the cloud."""
    shot = tmp_path / "view.png"
    env = {**os.environ, "DISPLAY": display}
    res = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "view", str(REPO / "scenes/farm/survey.yaml"),
         "--color", "label", "--screenshot", str(shot), "--set", "revolutions=0.5"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    import matplotlib.pyplot as plt

    picture = (plt.imread(shot)[:, :, :3] * 255).astype(int)
    ink = np.any(picture < 250, axis=2)
    assert ink.sum() > 3000
    terrain = np.array(SEMANTIC_KITTI_RGB[72])
    assert np.mean(np.abs(picture[ink] - terrain).sum(axis=1) < 40) > 0.3  # mostly terrain


def test_render_draws_a_dataset_boxes_over_the_cloud(tmp_path: Path) -> None:
    """``lidar-sim render --boxes``: a 4 m x 2 m box at the centre of a 10 m ring of points
    adds ink inside the ring only, in the box class's colour (darkened)."""
    from simulator.world.boxes import Boxes

    cloud = _ring_cloud()
    np.savez(tmp_path / "ring.npz", **cloud.fields)
    boxes = Boxes(
        centre_m=np.zeros((1, 3)), size_m=np.array([[4.0, 2.0, 1.5]]),
        rotation=np.eye(3)[None], yaw_rad=np.zeros(1), label=np.array([10], np.uint16),
        instance=np.array([1], np.uint16), velocity_mps=np.zeros((1, 3)),
        num_points=np.zeros(1, np.int64), visibility=np.zeros(1),
    )  # fmt: skip
    np.savez(tmp_path / "boxes.npz", **boxes.arrays())
    from PIL import Image

    runs = {"plain": [], "boxes": ["--boxes", str(tmp_path / "boxes.npz")]}
    _renders(None, commands=tuple(
        ["render", str(tmp_path / "ring.npz"), "-o", str(tmp_path / f"{name}.png"), "--view",
         "bev", "--width", "400", "--height", "400", *extra] for name, extra in runs.items()
    ))  # fmt: skip
    images = {name: np.asarray(Image.open(tmp_path / f"{name}.png").convert("RGB"))[:, :400]
              .astype(int) for name in runs}  # fmt: skip
    changed = np.any(np.abs(images["boxes"] - images["plain"]) > 40, axis=2)
    rows, cols = np.nonzero(changed)
    assert changed.sum() > 50
    ring = np.nonzero(_ink(images["plain"].astype(np.uint8)))
    centre = np.array([np.mean(ring[0]), np.mean(ring[1])])
    radius = np.hypot(ring[0] - centre[0], ring[1] - centre[1]).mean()
    # the box's 4 m side is well inside the 10 m ring
    assert np.hypot(rows - centre[0], cols - centre[1]).max() < 0.35 * radius
    ink = images["boxes"][changed]
    car = np.array(SEMANTIC_KITTI_RGB[10]) * 0.8
    assert np.median(np.abs(ink - car).sum(axis=1)) < 60


def test_render_by_a_field_the_cloud_lacks_is_a_clear_error(tmp_path: Path) -> None:
    xyz = np.zeros((10, 4), dtype="<f4")
    xyz.tofile(tmp_path / "scan.bin")  # a KITTI scan with no .label beside it
    res = subprocess.run([sys.executable, "-m", "simulator.cli", "render",
                          str(tmp_path / "scan.bin"), "-o", str(tmp_path / "x.png"),
                          "--color", "label"], capture_output=True, text=True)  # fmt: skip
    assert res.returncode == 2
    assert "--color: label: the cloud has no label field" in res.stderr
    assert "Traceback" not in res.stderr
