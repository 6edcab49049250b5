"""compare's ``nvs`` block (LiDAR4D's measures) and the per-beam figures: known answers
computed by hand on tiny range images, returns at 80 m or beyond (drops to the range
images), the intensity full scale, bad values, and a real OS1-128 frame against itself
with beams dropped or shifted by a known pose."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.compare import compare_clouds, format_compare
from simulator.pointcloud import PointCloud

from .test_compare import REALDATA, grid_cloud, with_fields

PCAP = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"
IMAGE_KEYS = ("depth_rmse_m", "depth_medae_m", "ssim", "psnr", "intensity_rmse",
              "intensity_medae", "intensity_ssim", "intensity_psnr", "ray_drop_rmse",
              "ray_drop_accuracy", "ray_drop_precision", "ray_drop_recall",
              "ray_drop_f1")  # fmt: skip


def on_x_axis(
    pixels: list[int], depth_m: list[float], intensity: list[float], shape: tuple[int, int],
    intensity_max: float = 100.0,
) -> PointCloud:  # fmt: skip
    """One point per listed pixel (row-major index into ``shape``) at ``(depth, 0, 0)``:
    its norm, and so its range, is the depth; every value is exact in float32."""
    rows, columns = shape
    pix = np.asarray(pixels)
    d = np.asarray(depth_m, dtype=np.float32)
    return PointCloud(
        {
            "xyz": np.stack([d, np.zeros_like(d), np.zeros_like(d)], axis=1),
            "range_m": d,
            "intensity": np.asarray(intensity, dtype=np.float32),
            "ring": (pix // columns).astype(np.uint16),
            "column": (pix % columns).astype(np.uint16),
        },
        {"beam_grid": {"rows": rows, "columns": columns}, "intensity_max": intensity_max},
    )


def tiny_pair() -> tuple[PointCloud, PointCloud]:
    """A 2 x 4 grid: A returns pixels 0-6 (7 dropped), B pixels 2-7 (0 and 1 dropped).
    Depths past 80 m on pixel 6 (100 and 90 m: drops to the nvs range images, returns to
    ``same_beams``) and B's intensity past its scale on pixel 7 (150 of 100, clipped to
    1)."""
    a = on_x_axis([0, 1, 2, 3, 4, 5, 6], [10, 20, 30, 40, 50, 60, 100],
                  [10, 20, 30, 40, 50, 60, 70], (2, 4))  # fmt: skip
    b = on_x_axis([2, 3, 4, 5, 6, 7], [31, 38, 50, 60, 90, 70],
                  [35, 40, 50, 60, 100, 150], (2, 4))  # fmt: skip
    return a, b


def test_nvs_known_answers_on_a_2x4_grid() -> None:
    a, b = tiny_pair()
    r = compare_clouds(a, b)
    n = r["nvs"]
    e = 1e-6  # LiDAR4D's floor: a pixel with no return is depth 0 and intensity 0, so 1e-6
    # Pixel 6 (A 100 m, B 90 m) is at 80 m or beyond in both: a drop in both range images.
    # So A returns pixels 0-5, B pixels 2-5 and 7.
    # Points on the x axis. B -> A squared distances: 31->30 1, 38->40 4, 50 0, 60 0,
    # 70->60 100; A -> B: 10->31 441, 20->31 121, 30->31 1, 40->38 4, 50 0, 60 0. CD is the
    # sum of both means, in m².
    assert n["points"] == [6, 5] and n["points_from"] == "beam grid"
    assert n["cd"] == pytest.approx(105 / 5 + 567 / 6, rel=1e-12)
    # Below 0.05 m²: B's 50 and 60 (precision 2/5), A's 50 and 60 (recall 2/6).
    assert n["f_score_precision"] == pytest.approx(2 / 5, rel=1e-12)
    assert n["f_score_recall"] == pytest.approx(1 / 3, rel=1e-12)
    assert n["f_score"] == pytest.approx(4 / 11, rel=1e-12)  # 2 (2/15) / (11/15)
    # Depth images, clipped to [1e-6, 80]: A 10 20 30 40 50 60 e e, B e e 31 38 50 60 e 70.
    sq = [(10 - e) ** 2, (20 - e) ** 2, 1, 4, 0, 0, 0, (70 - e) ** 2]
    assert n["depth_rmse_m"] == pytest.approx(math.sqrt(sum(sq) / 8), rel=1e-12)
    assert n["depth_medae_m"] == 1.5  # |diff| sorted 0 0 0 1 2 ..: the middle two, 1 and 2
    assert n["psnr"] == pytest.approx(10 * math.log10(80**2 / (sum(sq) / 8)), rel=1e-12)
    assert n["ssim"] is None and n["intensity_ssim"] is None  # under 7 x 7
    # Intensities over 100 (A's scale): A .1 .2 .3 .4 .5 .6 e e, B e e .35 .4 .5 .6 e 1.
    di = [0.1 - e, 0.2 - e, 0.05, 0, 0, 0, 0, 1 - e]
    assert n["intensity_rmse"] == pytest.approx(math.sqrt(sum(x * x for x in di) / 8), rel=1e-12)
    # |di| sorted 0 0 0 0 .05 ..: the middle two, 0 and 0.05.
    assert n["intensity_medae"] == pytest.approx(0.05 / 2, rel=1e-12)
    assert n["intensity_psnr"] == pytest.approx(
        10 * math.log10(1 / (sum(x * x for x in di) / 8)), rel=1e-12
    )
    # Ray drop, LiDAR4D's class 1 = returned: TP 4 (pixels 2-5), FP 1 (7), FN 2 (0, 1),
    # TN 1 (6, dropped in both).
    assert n["ray_drop_accuracy"] == 5 / 8
    assert n["ray_drop_rmse"] == math.sqrt(3 / 8)
    assert n["ray_drop_precision"] == 4 / 5
    assert n["ray_drop_recall"] == 4 / 6
    assert n["ray_drop_f1"] == pytest.approx(8 / 11, rel=1e-12)  # 2 (8/15) / (22/15)
    assert n["points_left_out"] == [0, 0]
    # same_beams, our own measures (no 80 m rule): over pixels 2-6 returned in both, not
    # clipped.
    s = r["same_beams"]
    assert s["returned_both"] == 5
    assert s["depth_rmse_m"] == math.sqrt((1 + 4 + 0 + 0 + 100) / 5)  # 100 m against 90
    assert s["depth_medae_m"] == s["range_median_abs_m"] == 1.0
    assert s["intensity_rmse"] == pytest.approx(math.sqrt((0.05**2 + 0.3**2) / 5), rel=1e-12)
    assert s["intensity_medae"] == 0.0
    # The drop class: A dropped pixel 7, B pixels 0 and 1: no pixel dropped by both.
    assert (s["ray_drop_precision"], s["ray_drop_recall"], s["ray_drop_f1"]) == (0.0, 0.0, 0.0)
    json.dumps(r, allow_nan=False)


def test_nvs_without_a_shared_grid_keeps_the_point_measures() -> None:
    """No ``column``: the image measures are None; CD and F-score come from every first
    return, at any range: the 80 m rule is the range images', so A's 100 m and B's 90 m
    points count here (7 and 6 points, where the grid has 6 and 5)."""
    a, b = tiny_pair()
    a = PointCloud({k: v for k, v in a.fields.items() if k != "column"}, dict(a.meta))
    r = compare_clouds(a, b)
    n = r["nvs"]
    assert r["same_beams"] is None
    assert all(n[k] is None for k in IMAGE_KEYS)
    assert n["points_from"] == "first returns" and n["points"] == [7, 6]
    # B -> A: 31->30 1, 38->40 4, 50 0, 60 0, 90->100 100, 70->60 100; A -> B: 10->31 441,
    # 20->31 121, 30->31 1, 40->38 4, 50 0, 60 0, 100->90 100. Below 0.05 m²: 2 of B's 6,
    # 2 of A's 7.
    assert n["cd"] == pytest.approx(205 / 6 + 667 / 7, rel=1e-12)
    assert n["f_score"] == pytest.approx(4 / 13, rel=1e-12)
    # A second return is no point of LiDAR4D's range image: it changes nothing.
    ghost = with_fields(b, return_number=np.full(len(b), 2, np.uint8))
    ghost.fields["xyz"] = ghost["xyz"] + np.float32(0.5)
    b2 = PointCloud.concatenate([with_fields(b, return_number=np.ones(len(b), np.uint8)), ghost])
    assert compare_clouds(a, b2)["nvs"]["cd"] == n["cd"]


def test_returns_at_80_m_or_beyond_are_drops_in_both_range_images() -> None:
    """LiDAR4D's preprocessing leaves returns at 80 m or beyond out of its range images
    (``max_depth``): on a 1 x 3 grid, a pixel at 85 m (or exactly 80 m) in A and in B is a
    drop in both, and one at 79 m in A and 85 m in B is returned against dropped."""
    e = 1e-6
    # Pixel 0 at 10 m in both, pixel 1 at 85 m in both, pixel 2 at 80 m in both; the far
    # pixels' intensities differ, which no nvs measure sees.
    a = on_x_axis([0, 1, 2], [10, 85, 80], [40, 50, 60], (1, 3))
    b = on_x_axis([0, 1, 2], [10, 85, 80], [40, 90, 20], (1, 3))
    r = compare_clouds(a, b)
    n = r["nvs"]
    assert n["points"] == [1, 1]  # only the 10 m point: the far ones are not in CD
    assert (n["cd"], n["f_score"]) == (0.0, 1.0)
    # Masks A 1 0 0, B 1 0 0: both far pixels are drops in both, so they agree.
    assert (n["ray_drop_accuracy"], n["ray_drop_rmse"]) == (1.0, 0.0)
    assert (n["ray_drop_precision"], n["ray_drop_recall"], n["ray_drop_f1"]) == (1.0, 1.0, 1.0)
    # Depth and intensity images: 10 e e and .4 e e in both.
    assert (n["depth_rmse_m"], n["depth_medae_m"], n["psnr"]) == (0.0, 0.0, None)
    assert (n["intensity_rmse"], n["intensity_medae"]) == (0.0, 0.0)
    # same_beams has no 80 m rule: all three pixels are returned in both there.
    s = r["same_beams"]
    assert (s["returned_both"], s["ray_drop_accuracy"]) == (3, 1.0)
    assert s["intensity_rmse"] == pytest.approx(math.sqrt((0.4**2 + 0.4**2) / 3), rel=1e-12)

    # Pixel 2 at 79 m in A, 85 m in B: returned in A, dropped in B.
    a = on_x_axis([0, 1, 2], [10, 85, 79], [40, 50, 60], (1, 3))
    b = on_x_axis([0, 1, 2], [10, 85, 85], [40, 50, 70], (1, 3))
    r = compare_clouds(a, b)
    n = r["nvs"]
    assert n["points"] == [2, 1]  # A: 10 and 79 m; B: 10 m
    # B -> A: 10->10 0; A -> B: 10->10 0, 79->10 69² (with B's 85 m point it would be 6²).
    assert n["cd"] == 0.0 + 69**2 / 2
    assert (n["f_score_precision"], n["f_score_recall"]) == (1.0, 0.5)
    assert n["f_score"] == pytest.approx(2 / 3, rel=1e-12)
    # Masks A 1 0 1, B 1 0 0: TP 1 (pixel 0), TN 1 (pixel 1), FN 1 (pixel 2).
    assert n["ray_drop_accuracy"] == 2 / 3
    assert n["ray_drop_rmse"] == math.sqrt(1 / 3)
    assert (n["ray_drop_precision"], n["ray_drop_recall"]) == (1.0, 0.5)
    assert n["ray_drop_f1"] == pytest.approx(2 / 3, rel=1e-12)
    # Depth images A 10 e 79, B 10 e e; intensities A .4 e .6, B .4 e e.
    assert n["depth_rmse_m"] == pytest.approx(math.sqrt((79 - e) ** 2 / 3), rel=1e-12)
    assert n["depth_medae_m"] == 0.0
    assert n["psnr"] == pytest.approx(10 * math.log10(80**2 / ((79 - e) ** 2 / 3)), rel=1e-12)
    assert n["intensity_rmse"] == pytest.approx(math.sqrt((0.6 - e) ** 2 / 3), rel=1e-12)
    assert n["intensity_medae"] == 0.0
    # same_beams: 79 m against 85 m, returned in both.
    s = r["same_beams"]
    assert (s["returned_both"], s["ray_drop_accuracy"]) == (3, 1.0)
    assert s["depth_rmse_m"] == math.sqrt(6**2 / 3)


def test_f_score_threshold_is_a_squared_distance_of_0_05() -> None:
    """LiDAR4D compares squared distances with 0.05: B 0.2236 m off (0.04999696 m²) all
    match, 0.2237 m off (0.05004169 m²) none; our own F-score at 0.1 m matches neither."""
    a = grid_cloud()
    near = compare_clouds(a, grid_cloud(shift_x_m=0.2236))
    assert near["nvs"]["f_score"] == 1.0
    assert near["f_score"] == 0.0  # at f_score_threshold_m = 0.1 m
    # Every point's nearest is its own shifted copy (the lattice is 0.5 m): CD 2 d².
    assert near["nvs"]["cd"] == pytest.approx(2 * 0.2236**2, rel=1e-5)  # float32 coordinates
    far = compare_clouds(a, grid_cloud(shift_x_m=0.2237))["nvs"]
    assert (far["f_score"], far["f_score_precision"], far["f_score_recall"]) == (0.0, 0.0, 0.0)


def test_f_score_precision_and_recall_are_told_apart() -> None:
    """B is the lower half of A (rings 0-3): every point of B lies on A (precision 1),
    half of A lies near B (recall 1/2); rings 4-7 are 0.5, 1, 1.5, 2 m from ring 3."""
    a = grid_cloud()
    keep = np.zeros((8, 64), dtype=bool)
    keep[:4] = True
    b = grid_cloud(keep)
    r = compare_clouds(a, b)
    n = r["nvs"]
    assert n["points"] == [512, 256]
    assert n["f_score_precision"] == 1.0
    assert n["f_score_recall"] == 0.5
    assert n["f_score"] == 2 / 3
    assert n["cd"] == 0.0 + (0.25 + 1.0 + 2.25 + 4.0) * 64 / 512
    # Returned class: TP 256, FP 0, FN 256; the drop class of same_beams: B dropped 256
    # pixels A returned (precision 0), A dropped none (recall 0/0).
    assert (n["ray_drop_precision"], n["ray_drop_recall"]) == (1.0, 0.5)
    assert n["ray_drop_f1"] == 2 / 3 and n["ray_drop_accuracy"] == 0.5
    s = r["same_beams"]
    assert (s["ray_drop_precision"], s["ray_drop_recall"], s["ray_drop_f1"]) == (0.0, None, 0.0)
    assert r["f_score"] == 2 / 3  # our own F-score: the same shares at 0.1 m


def seven_by_seven() -> tuple[PointCloud, PointCloud]:
    """A 7 x 7 grid (SSIM's window): A's depths 2 + 0.5 i, B's off by a pattern of
    -0.75..0.75 m, B's pixel 10 dropped; intensities i and a pattern, of 100."""
    i = np.arange(49)
    a = on_x_axis(list(i), list(2 + 0.5 * i), list(i.astype(float)), (7, 7))
    keep = i != 10
    b = on_x_axis(list(i[keep]), list((2 + 0.5 * i + ((3 * i) % 7 - 3) * 0.25)[keep]),
                  list((((5 * i) % 11) * 4.0)[keep]), (7, 7))  # fmt: skip
    return a, b


def ssim_by_hand(x: np.ndarray, y: np.ndarray) -> float:
    """SSIM of pred ``x`` against truth ``y`` (7 x 7): one window, the whole image, with
    sample (co)variances, C1 = (0.01 L)², C2 = (0.03 L)², L = max(y) - min(y)."""
    x, y = x.ravel(), y.ravel()
    big_l = y.max() - y.min()
    c1, c2 = (0.01 * big_l) ** 2, (0.03 * big_l) ** 2
    ux, uy = x.mean(), y.mean()
    vx, vy = x.var(ddof=1), y.var(ddof=1)
    vxy = ((x - ux) * (y - uy)).sum() / (len(x) - 1)
    return float(((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux**2 + uy**2 + c1) * (vx + vy + c2)))


def test_ssim_and_psnr_on_a_7x7_range_image() -> None:
    pytest.importorskip("skimage", reason="scikit-image gives SSIM (pip install scikit-image)")
    a, b = seven_by_seven()
    n = compare_clouds(a, b)["nvs"]
    i = np.arange(49)
    da = 2 + 0.5 * i
    db = 2 + 0.5 * i + ((3 * i) % 7 - 3) * 0.25
    db[10] = 1e-6  # dropped: depth 0, clipped to 1e-6
    assert n["ssim"] == pytest.approx(ssim_by_hand(db, da), rel=1e-9)
    assert n["psnr"] == pytest.approx(10 * math.log10(80**2 / np.mean((db - da) ** 2)), rel=1e-12)
    ia = np.maximum(i / 100, 1e-6)  # pixel 0's intensity 0 is clipped to 1e-6
    ib = np.maximum(((5 * i) % 11) * 4.0 / 100, 1e-6)
    ib[10] = 1e-6
    assert n["intensity_ssim"] == pytest.approx(ssim_by_hand(ib, ia), rel=1e-9)
    assert n["intensity_psnr"] == pytest.approx(10 * math.log10(1 / np.mean((ib - ia) ** 2)),
                                                rel=1e-12)  # fmt: skip
    assert 0 < n["ssim"] < 1


def test_without_scikit_image_ssim_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "skimage.metrics", None)  # the import fails
    a, b = seven_by_seven()
    n = compare_clouds(a, b)["nvs"]
    assert n["ssim"] is None and n["intensity_ssim"] is None
    assert n["psnr"] is not None and n["depth_rmse_m"] > 0


def test_intensity_errors_are_on_as_full_scale() -> None:
    """A on 0-255 reads 102 (0.4 of its scale), B on 0-100 reads 51 (0.51 of its own): on
    A's scale the error is 51 / 255 = 0.2 (0.11 on each side's own scale, 0.51 on B's)."""
    a = grid_cloud(meta={"intensity_max": 255.0})
    a = with_fields(a, intensity=np.full(len(a), 102.0, np.float32))
    b = grid_cloud(meta={"intensity_max": 100.0})
    b = with_fields(b, intensity=np.full(len(b), 51.0, np.float32))
    r = compare_clouds(a, b)
    for block in (r["same_beams"], r["nvs"]):
        assert block["intensity_rmse"] == pytest.approx(0.2, abs=1e-15)
        assert block["intensity_medae"] == pytest.approx(0.2, abs=1e-15)
        assert block["intensity_full_scale"] == 255.0
        assert block["intensity_max_declared"] == [255.0, 100.0]
        assert block["intensity_scales_differ"] is True
    text = format_compare(r)
    assert "warning      A and B declare different intensity full scales (A 255, B 100)" in text
    assert "(of 255)" in text
    same = compare_clouds(a, with_fields(a, intensity=np.full(len(a), 51.0, np.float32)))
    assert same["nvs"]["intensity_scales_differ"] is False
    assert "warning" not in format_compare(same)


def test_bad_values_are_left_out_counted_and_said() -> None:
    """A range of 1e30, an infinite intensity and NaN coordinates in B: no error, no NaN
    or infinity in the JSON; the three points are left out (counted) and every figure is
    that of B without them."""
    a = grid_cloud()
    b = grid_cloud()
    rng, inten, xyz = b["range_m"].copy(), b["intensity"].copy(), b["xyz"].copy()
    rng[5], inten[70], xyz[300] = 1e30, np.inf, np.nan
    bad = with_fields(b, range_m=rng, intensity=inten, xyz=xyz)
    r = compare_clouds(a, bad)
    json.dumps(r, allow_nan=False)
    assert r["points"] == [512, 512]
    assert r["nvs"]["points_left_out"] == [0, 3]
    keep = np.ones(len(b), dtype=bool)
    keep[[5, 70, 300]] = False
    clean = compare_clouds(a, b.select(keep))
    assert r["nvs"] == {**clean["nvs"], "points_left_out": [0, 3]}
    assert r["same_beams"] == clean["same_beams"]
    assert r["same_beams"]["ray_drop_accuracy"] == 509 / 512  # left out = not returned
    assert (r["chamfer_m"], r["rings"], r["intensity"], r["range"]) == (
        clean["chamfer_m"], clean["rings"], clean["intensity"], clean["range"])  # fmt: skip
    assert "left out, non-finite or beyond 1e+08 m: A 0, B 3" in format_compare(r)
    # The same in A, and a far but finite coordinate (1e30 m) in B.
    far = b["xyz"].copy()
    far[7] = (1e30, 0, 0)
    r2 = compare_clouds(bad, with_fields(b, xyz=far))
    assert r2["nvs"]["points_left_out"] == [3, 1]
    json.dumps(r2, allow_nan=False)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("range_m", 1e30, "range_m: 1 of 512 points negative, non-finite or beyond"),
        ("intensity", np.inf, "intensity: 1 of 512 points negative, non-finite or above"),
    ],
    ids=["range-1e30", "intensity-inf"],
)
def test_the_command_refuses_a_file_with_a_bad_value(
    tmp_path: Path, field: str, value: float, said: str
) -> None:
    """``compare`` on a file with one range of 1e30 (once: a histogram of 4e30 bins) or one
    intensity of inf (once: a TV distance of 1.000 between otherwise equal clouds): one
    line naming the file, the field and how many points, exit code 2, no figures. The
    library's leave-out (above) is for clouds made in code."""
    from simulator.io import write

    from .conftest import lidar_sim

    good = grid_cloud()
    values = good[field].copy()
    values[9] = value
    write(good, tmp_path / "good.npz")
    write(with_fields(good, **{field: values}), tmp_path / "bad.npz")
    json_path = tmp_path / "r.json"
    for args in (("good.npz", "bad.npz"), ("bad.npz", "good.npz")):
        res = lidar_sim("compare", *(tmp_path / a for a in args), "--json", json_path)
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1, res.stderr
        assert lines[0].startswith(f"error: {tmp_path / 'bad.npz'}: ") and said in lines[0]
        assert not json_path.exists() and not res.stdout


def test_page_of_clouds_with_bad_values(tmp_path: Path) -> None:
    from simulator.viz.compare import write_compare_page

    a = grid_cloud()
    inten = a["intensity"].copy()
    inten[3] = np.inf
    rng = a["range_m"].copy()
    rng[4] = 1e30
    b = with_fields(a, intensity=inten, range_m=rng)
    r = compare_clouds(a, b)
    files = write_compare_page(a, b, r, tmp_path, ("a", "b"))
    assert (tmp_path / "index.html") in files
    assert "<th>nvs.points_left_out</th><td>0, 2</td>" in (tmp_path / "index.html").read_text()


# --------------------------------------------------------------------------- a real frame


@pytest.fixture(scope="module")
def os1_frame() -> PointCloud:
    """Frame 0 of the shared OS1-128 capture (128 x 1024 beams, 107,647 returns)."""
    if not PCAP.exists():
        pytest.skip(f"{PCAP.name} not found: the shared real captures are not in this checkout")
    pytest.importorskip("ouster.sdk", reason="reading an Ouster pcap needs ouster-sdk")
    from simulator.io.read import read

    frame = read(PCAP)
    assert len(frame) == 107_647
    pix = frame["ring"].astype(np.int64) * 1024 + frame["column"]
    assert len(np.unique(pix)) == len(frame)  # one return a pixel: the pixels are the points
    return frame


def nn_squared_m2(query: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Squared distance from each query row to its nearest row of ``points`` (scipy)."""
    from scipy.spatial import cKDTree

    d, _ = cKDTree(points).query(query, k=1)
    return d**2


def test_real_frame_with_every_tenth_beam_dropped(os1_frame: PointCloud) -> None:
    a = os1_frame
    n_a, pixels = len(a), 128 * 1024
    keep = np.arange(n_a) % 10 != 0
    b = a.select(keep)
    k = n_a - len(b)  # beams B dropped that A returned
    assert k == (n_a + 9) // 10
    dropped = pixels - n_a  # A's own drop-outs, dropped in B too
    r = compare_clouds(a, b)
    s, n = r["same_beams"], r["nvs"]
    assert s["ray_drop_accuracy"] == (pixels - k) / pixels
    # The drop class: TP = A's drops, FP = k, FN = 0.
    assert s["ray_drop_precision"] == dropped / (dropped + k)
    assert s["ray_drop_recall"] == 1.0
    assert s["ray_drop_f1"] == 2 * dropped / (2 * dropped + k)
    assert (s["depth_rmse_m"], s["depth_medae_m"], s["intensity_rmse"]) == (0.0, 0.0, 0.0)
    # LiDAR4D's range images hold the returns nearer than 80 m: the others are drops in
    # both, so the pixels that differ are the k' dropped ones nearer than 80 m.
    xyz = a["xyz"].astype(np.float64)
    near = np.linalg.norm(xyz, axis=1) < 80.0
    n_near = int(np.count_nonzero(near))
    lost = ~keep & near  # returned in A's image, dropped in B's
    k_img = int(np.count_nonzero(lost))
    assert (n_a - n_near, k - k_img) == (77, 6)  # 77 returns at 80 m or beyond, 6 dropped
    assert n["ray_drop_accuracy"] == (pixels - k_img) / pixels
    # LiDAR4D's class, returned: TP = n_near - k', FP = 0, FN = k'.
    recall = (n_near - k_img) / n_near
    assert n["ray_drop_precision"] == 1.0
    assert n["ray_drop_recall"] == recall
    assert n["ray_drop_f1"] == pytest.approx(2 * recall / (1 + recall), rel=1e-12)
    assert n["ray_drop_rmse"] == pytest.approx(math.sqrt(k_img / pixels), rel=1e-12)
    # Depth: the k' pixels are depth 1e-6 in B, A's |xyz| (under 80) in A; the other pixels
    # agree, the far ones 1e-6 in both (k' is under half of them, so the median is 0).
    dep = np.clip(np.linalg.norm(xyz[lost], axis=1), 1e-6, 80.0) - 1e-6
    assert n["depth_rmse_m"] == pytest.approx(math.sqrt(np.sum(dep**2) / pixels), rel=1e-9)
    assert n["depth_medae_m"] == 0.0
    assert n["psnr"] == pytest.approx(10 * math.log10(6400 / (np.sum(dep**2) / pixels)), rel=1e-9)
    assert 0 < n["ssim"] < 1
    di = np.clip(a["intensity"][lost].astype(np.float64) / 255, 1e-6, 1.0) - 1e-6
    assert n["intensity_rmse"] == pytest.approx(math.sqrt(np.sum(di**2) / pixels), rel=1e-9)
    assert n["intensity_medae"] == 0.0
    # Points, those nearer than 80 m: B lies on A (precision 1, B -> A all 0); A -> B by
    # scipy's KD-tree.
    d2 = nn_squared_m2(xyz[near], xyz[keep & near])
    assert n["f_score_precision"] == 1.0
    assert n["f_score_recall"] == np.count_nonzero(d2 < 0.05) / n_near
    assert n["cd"] == pytest.approx(d2.mean(), rel=1e-9)
    assert n["points"] == [n_near, n_near - k_img]


def test_real_frame_shifted_by_a_known_pose(os1_frame: PointCloud) -> None:
    """B is A moved 0.1 m along x (its ranges the norms of the moved points). Eleven
    returns nearer than 80 m in A move to 80 m or beyond in B, where they are drops (none
    moves the other way): B's every point has a partner 0.1 m away in A (precision 1),
    A's eleven lose theirs; elsewhere the depth errors are at most 0.1 m (triangle
    inequality). Every figure equals the hand-computed one."""
    a = os1_frame
    xyz_b = a["xyz"] + np.array([0.1, 0, 0], np.float32)
    range_b = np.linalg.norm(xyz_b.astype(np.float64), axis=1).astype(np.float32)
    b = with_fields(a, xyz=xyz_b, range_m=range_b)
    r = compare_clouds(a, b)
    n, s = r["nvs"], r["same_beams"]
    xa, xb = a["xyz"].astype(np.float64), xyz_b.astype(np.float64)
    na, nb = np.linalg.norm(xa, axis=1), np.linalg.norm(xb, axis=1)
    near_a, near_b = na < 80.0, nb < 80.0
    assert np.count_nonzero(near_b & ~near_a) == 0
    moved_out = near_a & ~near_b  # returned in A's image, dropped in B's
    m = int(np.count_nonzero(moved_out))
    assert m == 11
    pa, pb = xa[near_a], xb[near_b]
    assert n["points"] == [len(pa), len(pb)]
    d2_ba, d2_ab = nn_squared_m2(pb, pa), nn_squared_m2(pa, pb)
    assert n["cd"] == pytest.approx(d2_ba.mean() + d2_ab.mean(), rel=1e-9)
    assert d2_ba.max() <= 0.1**2 + 1e-6  # each B point's own partner is in A
    assert n["f_score_precision"] == 1.0
    recall = np.count_nonzero(d2_ab < 0.05) / len(pa)
    assert n["f_score_recall"] == recall
    assert n["f_score"] == pytest.approx(2 * recall / (1 + recall), rel=1e-12)
    assert r["chamfer_m"] <= 0.1 + 1e-6  # our own chamfer: every point, no 80 m rule
    # Depth images on A's pixels: |xyz| nearer than 80 m, else 1e-6; drops agree (0 error).
    pixels = 128 * 1024
    dd = np.where(near_b, nb, 1e-6) - np.where(near_a, na, 1e-6)
    assert np.abs(dd[~moved_out]).max() <= 0.1 + 1e-6
    assert n["depth_rmse_m"] == pytest.approx(math.sqrt(np.sum(dd**2) / pixels), rel=1e-9)
    medae = np.median(np.concatenate([np.abs(dd), np.zeros(pixels - len(dd))]))
    assert n["depth_medae_m"] == pytest.approx(medae, rel=1e-9)
    assert n["depth_medae_m"] <= 0.1 + 1e-6
    # Ray drop: A's returned pixels but the m moved out are returned in B.
    assert n["ray_drop_accuracy"] == (pixels - m) / pixels
    r_recall = (len(pa) - m) / len(pa)
    assert (n["ray_drop_precision"], n["ray_drop_recall"]) == (1.0, r_recall)
    assert n["ray_drop_f1"] == pytest.approx(2 * r_recall / (1 + r_recall), rel=1e-12)
    # Intensity: equal but on the m pixels, 1e-6 in B.
    di = np.clip(a["intensity"][moved_out].astype(np.float64) / 255, 1e-6, 1.0) - 1e-6
    assert n["intensity_rmse"] == pytest.approx(math.sqrt(np.sum(di**2) / pixels), rel=1e-9)
    # same_beams measures the range fields: Ouster's RANGE against B's norms.
    dr = np.abs(a["range_m"].astype(np.float64) - range_b.astype(np.float64))
    assert s["depth_rmse_m"] == pytest.approx(math.sqrt(np.mean(dr**2)), rel=1e-9)
    assert s["depth_medae_m"] == pytest.approx(np.median(dr), rel=1e-9)
    assert s["ray_drop_accuracy"] == 1.0
