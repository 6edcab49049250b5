"""The page of ``lidar-sim reconstruct`` (``simulator.viz.reconstruct``, its pictures in
``simulator.viz.mesh``), on a small made-up reconstruction: a patch of ground and a wall,
three frames (one held out), a results table of a held-out frame and its baseline."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread
from PIL import Image

from simulator.transforms import rotation_from_rpy_deg
from simulator.viz.mesh import ColourScale, faces_to_draw, histogram_edges
from simulator.viz.reconstruct import write_reconstruct_page

FRAMES = [17, 18, 19]
HELD_OUT = 18


def _mesh() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 4 m x 4 m ground of 8 triangles 1.8 m below the sensor, and a 4 m wall of 2 at
    y = 3 m; the reflectances step from 0.02 to 0.9, and one face has 0."""
    xs = np.linspace(-1.0, 3.0, 3)
    ground = np.array([[x, y, -1.8] for y in np.linspace(-2.0, 2.0, 3) for x in xs])
    faces = []
    for j in range(2):
        for i in range(2):
            a = 3 * j + i
            faces += [[a, a + 1, a + 4], [a, a + 4, a + 3]]
    wall = np.array([[-1.0, 3.0, -1.8], [3.0, 3.0, -1.8], [3.0, 3.0, 2.0], [-1.0, 3.0, 2.0]])
    faces += [[9, 10, 11], [9, 11, 12]]
    vertices = np.vstack([ground, wall])
    reflectance = np.array([0.02, 0.05, 0.08, 0.1, 0.15, 0.3, 0.5, 0.0, 0.9, 0.25])
    return vertices, np.array(faces, dtype=np.int64), reflectance


def _poses() -> np.ndarray:
    """Frames 1 m apart along x, the last turned 30 deg to the left."""
    poses = np.repeat(np.eye(4)[None], 3, axis=0)
    poses[:, :3, 3] = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0]]
    poses[2, :3, :3] = rotation_from_rpy_deg([0.0, 0.0, 30.0])
    return poses


def _summary() -> dict[str, Any]:
    nvs = {"ray_drop_accuracy": 0.912345, "ray_drop_f1": 0.95, "depth_medae_m": 0.031234,
           "depth_rmse_m": 1.23456, "cd": 0.0947, "f_score": 0.9368, "intensity_rmse": None,
           "ssim": 0.7}  # fmt: skip
    base = {"ray_drop_accuracy": 0.95, "ray_drop_f1": 0.97, "depth_medae_m": 0.02,
            "depth_rmse_m": 2.5, "cd": 0.07, "f_score": 0.94, "intensity_rmse": 0.037}  # fmt: skip
    return {
        "captures": ["/data/<b>street</b>.pcap"],
        "scanner": "the capture's own calibration",
        "frames": FRAMES,
        "scene_frames": [17, 19],
        "held_out": [HELD_OUT],
        "poses_from": "the poses file poses.txt",
        "detection": {"reference_range_m": 55.0, "reference_reflectance": 0.04511703958},
        "mesh": {
            "faces": 1234567,
            "vertices": 12,
            "faces_by_frame": {"17": 6, "19": 4},
            "reflectance_median": 0.125,
            "minnaert_k_of_label": {},
        },
        "results": [
            {
                "frame": HELD_OUT,
                "protocol": "heldout",
                "method": "simulated",
                "nvs": nvs,
                "same_beams": {"ray_drop_accuracy": 0.8, "depth_rmse_m": 0.5},
            },
            {
                "frame": HELD_OUT,
                "protocol": "heldout",
                "method": "baseline",
                "nvs": base,
                "same_beams": None,
            },
        ],
        "timings_s": {"read": 0.5, "mesh": 1.25, "compare": 4.0},
    }


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], str]:
    """The page written into a folder holding the held-out frame's compare page and one
    frame survey, but no baseline page."""
    folder = tmp_path_factory.mktemp("recon")
    (folder / "heldout" / "0018").mkdir(parents=True)
    (folder / "heldout" / "0018" / "index.html").write_text("<html></html>")
    (folder / "frames").mkdir()
    (folder / "frames" / "0017.yaml").write_text("revolutions: 1\n")
    (folder / "summary.json").write_text("{}\n")
    vertices, faces, reflectance = _mesh()
    files = write_reconstruct_page(folder, _summary(), vertices, faces, reflectance, _poses())
    return folder, files, (folder / "index.html").read_text(encoding="utf-8")


def test_the_page_and_its_pictures_are_written(page: tuple[Path, list[Path], str]) -> None:
    """The files returned are the three PNGs and the page, all there; each PNG opens as a
    picture of a useful size, and the views hold the faces' own colours."""
    folder, files, _ = page
    names = ["mesh_top.png", "mesh_oblique.png", "reflectance_hist.png", "index.html"]
    assert files == [folder / n for n in names]
    assert all(p.is_file() for p in files)
    for p in files[:3]:
        with Image.open(p) as im:
            im.verify()
        pixels = imread(p)
        assert pixels.ndim == 3 and pixels.shape[0] > 200 and pixels.shape[1] > 300
        assert p.stat().st_size < 1_000_000
    _, _, reflectance = _mesh()
    rgb = np.round(ColourScale.of(reflectance).rgba(reflectance)[:, :3] * 255).astype(int)
    face_codes = rgb @ [65536, 256, 1]
    for name in ("mesh_top.png", "mesh_oblique.png"):
        pixels = np.round(imread(folder / name)[..., :3] * 255).astype(int).reshape(-1, 3)
        shown = np.isin(face_codes, pixels @ [65536, 256, 1])
        assert shown.sum() >= 3, f"{name} shows {shown.sum()} of the faces' colours"


def test_the_frames_table_lists_each_frame_and_its_role(page: tuple[Path, list[Path], str]) -> None:
    """A row per frame in order, the held-out one marked as such, with its pose: position
    in m to 3 decimals, roll pitch yaw in degrees to 2."""
    _, _, text = page
    rows = re.findall(r"<tr class='(\w+)'><td>(\d+)</td><td>([\w ]+)</td>(.*?)</tr>", text)
    assert [(int(n), role, kind) for kind, n, role, _ in rows] == [
        (17, "scene", "scene"),
        (18, "held out", "held"),
        (19, "scene", "scene"),
    ]
    cells = re.findall(r"<td>([^<]*)</td>", rows[2][3])
    assert cells[:6] == ["2.000", "0.000", "0.000", "0.00", "0.00", "30.00"]
    assert "1 held out (18)" in text


def test_the_values_are_formatted(page: tuple[Path, list[Path], str]) -> None:
    """The results to 4 decimals (a missing figure as a dash, the better of simulated and
    baseline in bold), the facts to 4 significant digits with thousands separated, the
    timings to hundredths with their total."""
    _, _, text = page
    simulated = re.search(r"<tr><td>18</td><td>heldout</td><td>simulated</td>(.*?)</tr>", text)
    assert simulated is not None
    cells = re.findall(r"<td>(?:<b>)?([^<]*)(?:</b>)?</td>", simulated.group(1))
    assert cells[:7] == ["0.9123", "0.9500", "0.0312", "1.2346", "0.0947", "0.9368", "–"]
    assert cells[7:] == ["0.8000", "0.5000"]  # same beams: the figures some row has
    assert "<td><b>1.2346</b></td>" in simulated.group(1)  # less depth RMSE than 2.5
    assert "<td><b>0.9123</b></td>" not in simulated.group(1)  # less accuracy than 0.95
    assert "<td>1,234,567</td>" in text and "<td>0.04512</td>" in text
    assert "<td>17: 6, 19: 4</td>" in text
    assert "<th>mesh</th><td>1.25</td>" in text and "<th>total</th><td>5.75</td>" in text
    assert "the poses file poses.txt" in text


def test_links_go_only_to_files_that_exist(page: tuple[Path, list[Path], str]) -> None:
    """Every link and picture is relative and there; the held-out frame's compare page is
    linked, the baseline's (not written) is not, nor a missing frame survey."""
    folder, _, text = page
    targets = re.findall(r'(?:href|src)="([^"]*)"', text)
    assert targets
    for target in targets:
        assert not target.startswith(("/", "http")), target
        assert (folder / target).is_file(), target
    assert "heldout/0018/index.html" in targets
    assert "baseline/0018/index.html" not in text
    assert "frames/0017.yaml" in targets and "frames/0018.yaml" not in text
    assert "summary.json" in targets and "scene.yaml" not in targets


def test_text_from_the_summary_is_escaped(page: tuple[Path, list[Path], str]) -> None:
    """A capture named with markup shows as text."""
    _, _, text = page
    assert "&lt;b&gt;street&lt;/b&gt;.pcap" in text
    assert "<b>street" not in text


def test_poses_must_be_one_a_frame(tmp_path: Path) -> None:
    vertices, faces, reflectance = _mesh()
    with pytest.raises(ValueError, match=r"poses must be \(3, 4, 4\)"):
        write_reconstruct_page(tmp_path, _summary(), vertices, faces, reflectance, _poses()[:2])
    assert not (tmp_path / "index.html").exists()


def test_faces_to_draw_keeps_what_can_show_far_first() -> None:
    """Of two sub-pixel faces in one pixel only the nearer is kept; a large face is kept
    whatever its depth; a face outside the picture is not; the order is far to near."""
    tiny = np.array([[0.1, 0.1], [0.3, 0.1], [0.1, 0.3]])
    corners = np.stack([tiny + 5, tiny + 5, tiny * 40, tiny + 500, tiny + 7])
    depth = np.array([2.0, 1.0, 0.5, 1.0, 3.0])
    assert faces_to_draw(corners, depth, (100, 100)).tolist() == [4, 1, 2]


def test_histogram_bins_of_stepped_values_are_never_empty() -> None:
    """Reflectances in steps of 0.005 (as reconstruct rounds them): log-even bins snapped
    between steps, so every bin holds at least one step."""
    values = np.repeat(np.arange(2, 400) * 0.005, 3)
    edges = histogram_edges(values)
    counts, _ = np.histogram(values, edges)
    assert counts.sum() == len(values) and (counts > 0).all()
    assert 20 <= len(counts) <= 60
    smooth = np.geomspace(0.01, 2.0, 1000)
    assert (np.histogram(smooth, histogram_edges(smooth))[0] > 0).all()
