"""Comparing two clouds: laws with known answers, absent fields, the HTML page."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.compare import compare_clouds, firings_per_ring, format_compare
from simulator.errors import SimulatorError
from simulator.pointcloud import PointCloud
from simulator.viz.compare import write_compare_page

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
VLP16 = REALDATA / "nebula" / "velodyne-vlp16-1673400472138016708.pcd"

KEYS = {"points", "chamfer_m", "f_score", "f_score_threshold_m", "rings", "intensity", "range",
        "same_beams", "nvs"}  # fmt: skip
H, W = 8, 64  # rings, columns of the test grid


def grid_cloud(
    keep: np.ndarray | None = None, *, shift_x_m: float = 0.0, meta: dict | None = None
) -> PointCloud:
    """One point per pixel (ring, column) of an H x W beam grid, on a 0.5 m lattice.

    Points are 0.5 m apart, ranges are multiples of 0.25 m and intensities 10.5 + (column
    mod 4), all exact in float32. ``keep`` (H, W) bool leaves pixels out (drop-outs).
    """
    ring, column = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    keep = np.ones((H, W), dtype=bool) if keep is None else keep
    ring, column = ring[keep], column[keep]
    xyz = np.stack([column * 0.5 + shift_x_m, ring * 0.5, np.full(ring.shape, 2.0)], axis=1)
    fields = {
        "xyz": xyz.astype(np.float32),
        "range_m": (1.0 + 0.25 * column).astype(np.float32),
        "intensity": (10.5 + column % 4).astype(np.float32),
        "ring": ring.astype(np.uint16),
        "column": column.astype(np.uint16),
        "return_number": np.ones(len(ring), dtype=np.uint8),
    }
    base = {"beam_grid": {"rows": H, "columns": W}, "intensity_max": 64.0}
    return PointCloud(fields, {**base, **(meta or {})})


def with_fields(cloud: PointCloud, **fields: np.ndarray) -> PointCloud:
    return PointCloud({**cloud.fields, **fields}, dict(cloud.meta))


def test_a_cloud_against_itself_scores_perfectly() -> None:
    a = grid_cloud()
    r = compare_clouds(a, a)
    assert set(r) == KEYS
    assert r["points"] == [H * W, H * W]
    assert r["chamfer_m"] == 0.0
    assert r["f_score"] == 1.0
    assert r["rings"]["max_abs_diff"] == 0.0
    assert r["rings"]["share_a"] == [1.0] * H
    assert r["rings"]["firings_estimated"] is False
    assert r["intensity"]["tv_distance"] == 0.0
    assert r["range"]["tv_distance"] == 0.0
    # Nothing dropped in either: the drop class's ratios are 0/0, no figure.
    assert r["same_beams"] == {"ray_drop_accuracy": 1.0, "ray_drop_precision": None,
                               "ray_drop_recall": None, "ray_drop_f1": None,
                               "range_median_abs_m": 0.0, "depth_rmse_m": 0.0,
                               "depth_medae_m": 0.0, "intensity_rmse": 0.0,
                               "intensity_medae": 0.0, "intensity_full_scale": 64.0,
                               "intensity_max_declared": [64.0, 64.0],
                               "intensity_scales_differ": False, "pixels": H * W,
                               "returned_both": H * W}  # fmt: skip
    nvs = r["nvs"]
    assert (nvs["cd"], nvs["f_score"], nvs["depth_rmse_m"], nvs["ssim"]) == (0.0, 1.0, 0.0, 1.0)
    assert nvs["psnr"] is None  # infinite: equal images
    assert (nvs["ray_drop_accuracy"], nvs["ray_drop_f1"]) == (1.0, 1.0)
    assert nvs["points_left_out"] == [0, 0]
    json.dumps(r, allow_nan=False)
    text = format_compare(r)
    assert "chamfer 0.0000 m" in text
    assert "CD 0.0000 m²" in text and "PSNR inf (equal images)" in text
    assert "warning" not in text


def test_shift_along_x_gives_the_shift_as_chamfer_and_thresholded_f_score() -> None:
    a = grid_cloud()
    b = grid_cloud(shift_x_m=0.05)
    r = compare_clouds(a, b, f_score_threshold_m=0.1)
    # 0.05 is not exact in float32: the coordinates carry ~1e-7 m of rounding.
    assert abs(r["chamfer_m"] - 0.05) < 1e-6
    assert r["f_score"] == 1.0
    assert compare_clouds(a, b, f_score_threshold_m=0.04)["f_score"] == 0.0
    # A shift exact in binary gives the chamfer distance exactly.
    assert compare_clouds(a, grid_cloud(shift_x_m=0.0625))["chamfer_m"] == 0.0625


def test_chamfer_averages_both_directions() -> None:
    # B holds A and as many extra points 0.25 m above A's: A -> B is 0 everywhere, B -> A
    # is 0 for half of B and 0.25 for the other half (mean 0.125); chamfer 0.0625.
    a = grid_cloud()
    above = PointCloud(dict(a.fields), dict(a.meta))
    above.fields["xyz"] = a["xyz"] + np.array([0, 0, 0.25], np.float32)
    b = PointCloud.concatenate([a, above])
    r = compare_clouds(a, b, f_score_threshold_m=0.1)
    assert r["chamfer_m"] == 0.0625
    assert r["f_score"] == 2 * 0.5 * 1.0 / (0.5 + 1.0)  # precision 0.5, recall 1
    assert compare_clouds(b, a)["chamfer_m"] == 0.0625


def test_half_a_ring_removed_halves_its_share() -> None:
    a = grid_cloud(meta={"firings_per_ring": W})
    keep = np.ones((H, W), dtype=bool)
    keep[3, ::2] = False
    b = grid_cloud(keep, meta={"firings_per_ring": W})
    r = compare_clouds(a, b)["rings"]
    assert r["share_b"][3] == 0.5
    assert r["max_abs_diff"] == 0.5
    assert r["firings_per_ring"] == [W, W]
    assert r["firings_estimated"] is False


def test_firings_per_ring_sources_in_order() -> None:
    c = grid_cloud(meta={"firings_per_ring": 100})
    assert firings_per_ring(c) == (100, False)
    assert firings_per_ring(grid_cloud()) == (W, False)  # beam_grid columns
    bare = PointCloud(dict(grid_cloud().fields), {"pulses": 4 * H * W})
    assert firings_per_ring(bare) == (4 * W, False)  # pulses / (max ring + 1)
    keep = np.ones((H, W), dtype=bool)
    keep[:, 40:] = False
    keep[5, 40:50] = True  # ring 5 has the most points: 50
    est = PointCloud(dict(grid_cloud(keep).fields), {})
    assert firings_per_ring(est) == (50, True)
    r = compare_clouds(est, est)["rings"]
    assert r["firings_estimated"] is True
    assert r["share_a"][5] == 1.0
    assert r["share_a"][0] == 40 / 50


def test_intensity_shifted_by_one_bin() -> None:
    # intensity_max 64 and 64 bins: bins of width 1. A fills 10-14 equally (0.25 each);
    # B, one bin up, fills 11-15: they share three bins, so TV = 0.5 * (0.25 + 0.25).
    a = grid_cloud()
    b = with_fields(a, intensity=a["intensity"] + np.float32(1.0))
    r = compare_clouds(a, b)["intensity"]
    assert r["tv_distance"] == 0.25
    assert r["scale_max"] == 64.0
    assert (r["median_a"], r["median_b"]) == (12.0, 13.0)
    two = with_fields(a, intensity=a["intensity"] + np.float32(2.0))
    assert compare_clouds(a, two)["intensity"]["tv_distance"] == 0.5


def test_range_histogram_distance_by_hand() -> None:
    # Ranges 1.0 + 0.25 k (k = column), one per 0.25 m bin; B moves every range up by one
    # bin: only A's first bin and B's last bin are unshared, each 1/64 of the points.
    a = grid_cloud()
    b = with_fields(a, range_m=a["range_m"] + np.float32(0.25))
    assert compare_clouds(a, b)["range"]["tv_distance"] == 1 / 64


def test_ray_drop_pattern_and_per_beam_errors() -> None:
    keep_a = np.ones((H, W), dtype=bool)
    keep_a[0, :] = False  # A: ring 0 dropped (64 pixels)
    keep_b = np.ones((H, W), dtype=bool)
    keep_b[:, :16] = False  # B: columns 0-15 dropped (128 pixels)
    a = grid_cloud(keep_a, meta={"intensity_max": 128.0})
    b = grid_cloud(keep_b, meta={"intensity_max": 1.0})
    a = with_fields(a, intensity=np.full(len(a), 64.0, np.float32))  # 0.5 of its scale
    b = with_fields(b, intensity=np.full(len(b), 0.25, np.float32),  # 0.25 of its scale
                    range_m=b["range_m"] + np.float32(0.25))  # fmt: skip
    # A second return where B dropped its first one must not count as returned.
    ghost = grid_cloud(~keep_b)
    b = PointCloud.concatenate([b, with_fields(
        ghost, intensity=np.full(len(ghost), 0.25, np.float32),
        return_number=np.full(len(ghost), 2, np.uint8))])  # fmt: skip
    r = compare_clouds(a, b)
    s = r["same_beams"]
    # Disagree: ring 0 at columns 16-63 (48) and rings 1-7 at columns 0-15 (112).
    assert s["ray_drop_accuracy"] == (H * W - 48 - 112) / (H * W)
    # The drop class: both dropped ring 0 at columns 0-15 (16 pixels); B dropped 128
    # pixels, A 64: precision 16/128, recall 16/64, F1 2*16 / (2*16 + 112 + 48).
    assert s["ray_drop_precision"] == 0.125
    assert s["ray_drop_recall"] == 0.25
    assert s["ray_drop_f1"] == 32 / 192
    assert s["returned_both"] == 7 * 48
    assert s["range_median_abs_m"] == s["depth_medae_m"] == s["depth_rmse_m"] == 0.25
    # One full scale, A's (128): |64 - 0.25| / 128, not 0.5 - 0.25 on each side's own.
    assert s["intensity_rmse"] == s["intensity_medae"] == 63.75 / 128
    assert s["intensity_full_scale"] == 128.0
    assert s["intensity_max_declared"] == [128.0, 1.0]
    assert s["intensity_scales_differ"] is True
    assert "declare different intensity full scales (A 128, B 1)" in format_compare(r)


def test_same_beams_needs_one_shared_grid() -> None:
    a = grid_cloud()
    other = PointCloud(dict(a.fields), {**a.meta, "beam_grid": {"rows": H, "columns": 2 * W}})
    assert compare_clouds(a, other)["same_beams"] is None
    no_column = PointCloud({k: v for k, v in a.fields.items() if k != "column"}, dict(a.meta))
    assert compare_clouds(no_column, a)["same_beams"] is None


def test_empty_cloud_is_named() -> None:
    a = grid_cloud()
    empty = PointCloud.empty()
    with pytest.raises(SimulatorError, match="cloud B is empty"):
        compare_clouds(a, empty)
    with pytest.raises(SimulatorError, match="cloud A is empty"):
        compare_clouds(empty, a)
    nan = PointCloud({"xyz": np.full((3, 3), np.nan, np.float32)})
    with pytest.raises(SimulatorError, match="cloud A has no finite coordinates"):
        compare_clouds(nan, a)
    holes = PointCloud({"xyz": np.concatenate([a["xyz"], nan["xyz"]])})
    assert compare_clouds(holes, a)["chamfer_m"] == 0.0


def test_xyz_only_capture_gives_nulls_and_a_page(tmp_path: Path) -> None:
    b = grid_cloud()
    a = PointCloud({"xyz": b["xyz"].copy()})
    r = compare_clouds(a, b)
    assert set(r) == KEYS
    assert r["chamfer_m"] == 0.0
    assert r["rings"]["share_a"] is None
    assert r["rings"]["share_b"] == [1.0] * H
    assert r["rings"]["max_abs_diff"] is None
    assert r["intensity"]["tv_distance"] is None
    assert r["intensity"]["median_a"] is None
    assert r["intensity"]["median_b"] == 12.0
    assert r["range"]["tv_distance"] > 0  # A's range is the norm of xyz
    assert r["same_beams"] is None
    assert "n/a" in format_compare(r)
    files = write_compare_page(a, b, r, tmp_path, ("a.pcd", "b.npz"))
    assert all(f.is_file() for f in files)
    page = (tmp_path / "index.html").read_text()
    assert "null (A and B do not share one beam grid)" in page
    assert "<th>nvs.ssim</th><td>null (undefined here: no shared beam grid" in page


def test_page_files_are_written_whole(tmp_path: Path) -> None:
    a = with_fields(grid_cloud(), label=np.full(H * W, 40, np.uint16))
    keep = np.ones((H, W), dtype=bool)
    keep[2:4, 10:30] = False
    b = grid_cloud(keep)
    b = with_fields(b, label=np.where(b["ring"] < 4, 40, 70).astype(np.uint16))
    r = compare_clouds(a, b)
    out = tmp_path / "page"
    files = write_compare_page(a, b, r, out, ("real.pcd", "sim.npz"))
    names = sorted(f.name for f in files)
    assert names == sorted(["index.html", "rings.png", "range_hist.png", "intensity_hist.png",
                            "intensity_per_ring.png", "intensity_per_label.png",
                            "intensity_vs_range.png", "range_images.png"])  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == names  # no temporaries left
    page = (out / "index.html").read_text()
    for f in files:
        if f.suffix == ".png":
            assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            assert f'src="{f.name}"' in page
    assert "real.pcd" in page
    assert "ray_drop_accuracy" in page
    assert "<th>nvs.cd</th>" in page and "<th>nvs.ray_drop_f1</th>" in page


@pytest.mark.skipif(not VLP16.is_file(), reason=f"real VLP-16 capture not found at {VLP16}")
def test_real_vlp16_capture_against_itself() -> None:
    import open3d as o3d

    p = o3d.t.io.read_point_cloud(str(VLP16)).point
    a = PointCloud({
        "xyz": p.positions.numpy().astype(np.float32),
        "intensity": p.intensity.numpy().reshape(-1).astype(np.float32),
        "range_m": p.distance.numpy().reshape(-1).astype(np.float32),
        "ring": p.channel.numpy().reshape(-1).astype(np.uint16),
    })  # fmt: skip
    r = compare_clouds(a, a)
    assert r["points"] == [14831, 14831]
    assert r["chamfer_m"] == 0.0
    assert r["f_score"] == 1.0
    assert r["rings"]["max_abs_diff"] == 0.0
    assert r["rings"]["firings_estimated"] is True
    assert r["intensity"]["tv_distance"] == 0.0
    assert r["range"]["tv_distance"] == 0.0
    assert r["same_beams"] is None


def _rings_at(elevation_deg: list[float], rings: list[int], points: int = 50) -> PointCloud:
    """Points of each ring at its elevation, 10 m out, around the circle."""
    az = np.linspace(0, 2 * np.pi, points, endpoint=False)
    xyz, ring = [], []
    for el, r in zip(elevation_deg, rings, strict=True):
        e = np.radians(el)
        xyz.append(np.stack([10 * np.cos(e) * np.cos(az), 10 * np.cos(e) * np.sin(az),
                             np.full(points, 10 * np.sin(e))], axis=1))  # fmt: skip
        ring.append(np.full(points, r))
    return PointCloud({"xyz": np.concatenate(xyz).astype(np.float32),
                       "ring": np.concatenate(ring).astype(np.uint16)})  # fmt: skip


def test_match_rings_by_elevation_order_with_a_ring_out_of_reach() -> None:
    """A VLP-16 frame numbered as the ROS driver numbers it (by elevation, lowest first)
    with its lowest ring empty: laser id c is ring rank(c); numbered by channel, identity;
    an unordered numbering with a ring missing cannot be matched."""
    from simulator.compare import match_rings

    lasers = [-15.0, 1, -13, 3, -11, 5, -9, 7, -7, 9, -5, 11, -3, 13, -1, 15]
    by_elevation = sorted(lasers)[1:]  # ring 0 (-15 deg) saw nothing
    capture = _rings_at(by_elevation, list(range(1, 16)))
    expected = [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert match_rings(capture, np.array(lasers)).tolist() == expected
    assert match_rings(_rings_at(lasers, list(range(16))), np.array(lasers)).tolist() == list(
        range(16)
    )
    shuffled = [3, 1, 4, 0, 5, 9, 2, 6, 8, 7, 10, 12, 11, 13, 14]
    assert match_rings(_rings_at(lasers[:15], shuffled), np.array(lasers)) is None
    if (REALDATA / "nebula").is_dir():  # nebula's own VLP-16 frame numbers rings so too
        from simulator.io.read import read

        real = read(REALDATA / "nebula" / "velodyne-vlp16-1673400472138016708.pcd")
        assert match_rings(real, np.array(lasers)).tolist() == expected


def test_compare_command_on_an_ouster_frame_against_itself(tmp_path: Path) -> None:
    """`lidar-sim compare` of a capture against itself: chamfer 0, F 1, every distance 0,
    ray-drop accuracy 1 on its own beam grid; the JSON has exactly the contract's keys.
    The nvs points are the returns nearer than 80 m (LiDAR4D's range images)."""
    from .conftest import lidar_sim

    pcap = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"
    if not pcap.exists():
        pytest.skip(f"{pcap.name} not found: the shared real captures are not in this checkout")
    pytest.importorskip("ouster.sdk")
    out = tmp_path / "cmp.json"
    res = lidar_sim("compare", pcap, pcap, "--json", out, "--frame", "1")
    assert res.returncode == 0, res.stderr
    got = json.loads(out.read_text())
    assert set(got) == KEYS
    assert got["points"] == [107_357, 107_357]  # frame 1
    assert got["chamfer_m"] == 0.0 and got["f_score"] == 1.0
    assert got["rings"]["max_abs_diff"] == 0.0 and len(got["rings"]["share_a"]) == 128
    assert got["intensity"]["tv_distance"] == 0.0 and got["range"]["tv_distance"] == 0.0
    same = got["same_beams"]
    assert same["ray_drop_accuracy"] == 1.0 and same["range_median_abs_m"] == 0.0
    assert same["intensity_rmse"] == 0.0 and same["intensity_full_scale"] == 255.0
    assert (same["ray_drop_precision"], same["ray_drop_recall"], same["ray_drop_f1"]) == (1, 1, 1)
    nvs = got["nvs"]
    assert (nvs["cd"], nvs["f_score"], nvs["ssim"], nvs["intensity_ssim"]) == (0, 1, 1, 1)
    from simulator.io.read import ReadOptions, read

    frame = read(pcap, ReadOptions(frame=1))
    near = np.linalg.norm(frame["xyz"].astype(np.float64), axis=1) < 80.0
    pix = frame["ring"].astype(np.int64) * 1024 + frame["column"]
    assert len(np.unique(pix[near])) == np.count_nonzero(near) == 107_274  # 83 at 80 m+
    assert nvs["points"] == [107_274, 107_274] and nvs["points_from"] == "beam grid"
    assert (nvs["depth_rmse_m"], nvs["intensity_rmse"], nvs["ray_drop_accuracy"]) == (0, 0, 1)
