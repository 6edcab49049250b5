"""Ouster OSF recordings are read by every command that takes a capture: frame by frame as
the pcap reader reads its frames, the unit's scanner from the metadata inside the file, the
per-column poses it holds, and one line with exit code 2 for a broken file.

The recording is ouster-sdk's own test file (an OS0 with 8 beams, 2048 columns, 10 scans),
read from ``../shared/realdata`` beside the checkout; without it (a user's fresh clone) or
without ouster-sdk the tests skip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.config import load_scanner
from simulator.errors import InputError
from simulator.io.ouster import column_poses, scanner_of_capture
from simulator.io.read import ReadOptions, read, read_frames

from .conftest import lidar_sim

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
OSF = REALDATA / "ouster" / "osf_fw_3.2_10scans.osf"
PCAP = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10_lb_n3.pcap"

#: Returns (pixels with RANGE > 0) of each of the 10 scans, as read once from the file.
OSF_RETURNS = [6156, 6145, 6180, 6173, 6186, 6151, 6079, 6097, 6085, 6104]


@pytest.fixture
def osf() -> Path:
    if not OSF.exists():
        pytest.skip(f"{OSF.name} not found: the shared real captures are not in this checkout")
    pytest.importorskip("ouster.sdk", reason="ouster-sdk is not installed ([ouster] extra)")
    return OSF


def test_osf_frames_are_the_whole_beam_grid_of_each_scan(osf: Path) -> None:
    """The 10 scans, frame by frame: the 8 x 2048 grid, the returns of each scan, rings and
    columns inside the grid, and frame 0's ranges are RANGE / 1000 of the SDK's own scan."""
    from ouster.sdk import core, open_source

    frames = list(read_frames(osf))
    assert len(frames) == 10
    assert [len(f) for f in frames] == OSF_RETURNS
    for k, cloud in enumerate(frames):
        assert cloud.meta["beam_grid"] == {"rows": 8, "columns": 2048}
        assert cloud.meta["firings_per_ring"] == 2048
        assert cloud.meta["frame_id"] == 58684 + k
        assert cloud.meta["source"] == str(osf)
        assert cloud["ring"].max() < 8 and cloud["column"].max() < 2048
        assert np.all(cloud["range_m"] > 0) and np.all(cloud["return_number"] == 1)
        assert cloud["time_s"].min() >= 0.0 and cloud["time_s"].max() < 0.1  # one 10 Hz turn
    first = frames[0]
    assert first.meta["intensity_max"] == 255.0
    assert first.meta["range_reference"] == "lidar_origin"
    source = open_source(str(osf))
    scan = next(iter(source))[0]
    lut = core.XYZLut(source.sensor_info[0])
    rng = scan.field("RANGE")
    hit = rng > 0
    grid = np.zeros((8, 2048), dtype=bool)
    grid[first["ring"], first["column"]] = True
    np.testing.assert_array_equal(grid, hit)
    np.testing.assert_array_equal(first["range_m"], (rng[hit] / 1000.0).astype(np.float32))
    np.testing.assert_array_equal(first["intensity"], scan.field("REFLECTIVITY")[hit])
    np.testing.assert_array_equal(first["xyz"], lut(scan)[hit].astype(np.float32))
    source.close()
    # --frame picks a frame; one that is not there says how many there are.
    assert len(read(osf, ReadOptions(frame=9))) == OSF_RETURNS[9]
    with pytest.raises(InputError, match=r"has 10 frame\(s\); frame 10 is not there"):
        read(osf, ReadOptions(frame=10))


def test_osf_and_pcap_frames_carry_the_same_record(osf: Path) -> None:
    """One converter makes both: the same fields (dtypes) and the same meta keys; the pcap's
    low-bandwidth profile adds NEAR_IR, which the OSF did not record."""
    if not PCAP.exists():
        pytest.skip(f"{PCAP.name} not found: the shared real captures are not in this checkout")
    a, b = read(osf), read(PCAP)
    assert {k: v.dtype for k, v in a.fields.items()} == {
        k: v.dtype for k, v in b.fields.items() if k != "near_ir"
    }
    assert set(b.fields) - set(a.fields) == {"near_ir"}
    assert set(a.meta) == set(b.meta)
    assert b.meta["source"] == str(PCAP) and b.meta["metadata"].endswith(".json")


def test_compare_an_osf_with_itself(osf: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    res = lidar_sim("compare", osf, osf, "--json", out)
    assert res.returncode == 0, res.stderr
    figures = json.loads(out.read_text())
    assert figures["points"] == [OSF_RETURNS[0]] * 2
    assert figures["chamfer_m"] == 0.0 and figures["f_score"] == 1.0
    assert figures["same_beams"]["ray_drop_accuracy"] == 1.0


def test_scanners_import_reads_the_metadata_inside_the_osf(osf: Path, tmp_path: Path) -> None:
    """``scanners import`` of the OSF: the OS0-8's 8 beams and 2048 columns; with no OS0
    preset, the radiometry is the nearest Ouster preset's, and the header says so. The
    library gives the same mapping, and a pcap's (its JSON beside it) or None."""
    out = tmp_path / "os0.yaml"
    res = lidar_sim("scanners", "import", osf, "-o", out)
    assert res.returncode == 0, res.stderr
    scanner = load_scanner(out)
    assert scanner.channels is not None and scanner.channels.count == 8
    assert scanner.firings_per_revolution == 2048
    assert scanner.name == "os0-8-122321000098"
    text = out.read_text()
    assert "No preset named os0-8: os1-32 is the nearest Ouster preset" in text
    mapping = scanner_of_capture(osf)
    assert mapping is not None and mapping["name"] == scanner.name
    assert mapping["channels"]["elevation_deg"][0] == 45.03  # beam_altitude_angles[0]
    if PCAP.exists():
        os1 = scanner_of_capture(PCAP)
        assert os1 is not None and len(os1["channels"]["elevation_deg"]) == 128
    npz = tmp_path / "cloud.npz"
    npz.write_bytes(b"")
    assert scanner_of_capture(npz) is None


def test_column_poses_are_none_when_identity_and_read_when_recorded(
    osf: Path, tmp_path: Path
) -> None:
    """The shared file's poses are all the identity (None); a copy of two of its scans with
    a pose per column (moving 1 m along x over a scan) gives them back, frame by frame."""
    from ouster.sdk import open_source
    from ouster.sdk import osf as sdk_osf

    assert column_poses(osf) is None
    if PCAP.exists():
        assert column_poses(PCAP) is None
    source = open_source(str(osf))
    info = source.sensor_info[0]
    scans = [frame[0] for _, frame in zip(range(2), source, strict=False)]
    source.close()
    posed = tmp_path / "posed.osf"
    writer = sdk_osf.Writer(str(posed), info)
    expected = []
    for k, scan in enumerate(scans):
        pose = np.tile(np.eye(4), (scan.w, 1, 1))
        pose[:, 0, 3] = k + np.arange(scan.w) / scan.w
        scan.body_to_world[:] = pose
        writer.save(0, scan)
        expected.append(pose)
    writer.close()
    poses = column_poses(posed)
    assert poses is not None and len(poses) == 2
    for got, want in zip(poses, expected, strict=True):
        assert got.shape == (2048, 4, 4) and got.dtype == np.float64
        np.testing.assert_array_equal(got, want)


def test_a_truncated_osf_is_one_line_and_exit_2(osf: Path, tmp_path: Path) -> None:
    """Cut short, the file is refused before ouster-sdk reads it (which would print its own
    warnings and yield no frame): one line, exit code 2, in a child process so that anything
    the SDK writes to the process's stderr would show."""
    cut = tmp_path / "cut.osf"
    cut.write_bytes(osf.read_bytes()[:100_000])
    res = subprocess.run(
        [sys.executable, "-m", "simulator.cli", "compare", str(cut), str(cut)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(cut) in lines[0]
    assert "truncated: 100,000 bytes of the 415,072 its OSF header declares" in lines[0]
    res = lidar_sim("scanners", "import", cut, "-o", tmp_path / "cut.yaml")
    assert res.returncode == 2 and "truncated: 100,000 bytes" in res.stderr
    assert not (tmp_path / "cut.yaml").exists()
    with pytest.raises(InputError, match=r"cut\.osf: cannot import its scanner: truncated"):
        scanner_of_capture(cut)
    garbage = tmp_path / "garbage.osf"
    garbage.write_bytes(b"not an OSF at all\n" * 10)
    with pytest.raises(InputError, match=r"garbage\.osf: not a readable Ouster OSF recording"):
        read(garbage)
