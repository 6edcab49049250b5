"""``simulator.config.vendor``: a unit's own calibration becomes a scanner YAML.

The Ouster import is checked pixel by pixel against ouster-sdk's own ``XYZLut`` on the
shared OS1-128 metadata; the Velodyne and Hesai imports against the drivers' point
formulas (written out here in numpy) and the repository's presets, on small calibration
files written by the tests (made-up values in the vendors' formats).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.config import ScannerConfig, load_scanner, load_yaml, scanner_presets
from simulator.config.vendor import import_scanner, write_imported_scanner, write_scanner_yaml
from simulator.errors import ConfigError
from simulator.sensor.scanner import pattern_for

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
OS1_JSON = REALDATA / "ouster" / "OS-1-128_v2.3.0_1024x10.json"


def _os1_json() -> Path:
    if not OS1_JSON.is_file():
        pytest.skip(f"{OS1_JSON.name} not found: the shared real captures are not in this checkout")
    return OS1_JSON


def _schedule_grid(mapping: dict, rows: int, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The pattern's directions and origins of one revolution as (rows, columns, 3)."""
    sched = pattern_for(ScannerConfig.model_validate(mapping)).schedule(0, rows * columns)
    firing = sched.pulse_id // np.uint64(rows)
    assert np.array_equal(sched.channel, np.tile(np.arange(rows), columns))
    assert np.array_equal(firing, np.repeat(np.arange(columns, dtype=np.uint64), rows))
    d = sched.direction.reshape(columns, rows, 3).transpose(1, 0, 2)
    o = sched.origin_m.reshape(columns, rows, 3).transpose(1, 0, 2)
    return d, o


def _head_rad(mapping: dict, rows: int, columns: int) -> np.ndarray:
    """(rows, columns) the head's azimuth at each firing of each channel (its beam's
    azimuth less the channel's offset), rad."""
    sched = pattern_for(ScannerConfig.model_validate(mapping)).schedule(0, rows * columns)
    offsets = np.radians(mapping["channels"]["azimuth_offset_deg"])
    return sched.azimuth_rad.reshape(columns, rows).T - offsets[:, None]


def _angle_rad(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Angle between unit vectors, rad (atan2 form: accurate near 0)."""
    return np.arctan2(np.linalg.norm(np.cross(a, b), axis=-1), (a * b).sum(-1))


# --------------------------------------------------------------------------- Ouster


@pytest.fixture(scope="module")
def ouster_sdk():
    return pytest.importorskip("ouster.sdk.core")


def test_ouster_every_pixel_matches_the_sdk_xyzlut(ouster_sdk) -> None:
    path = _os1_json()
    mapping, _ = import_scanner([path])
    info = ouster_sdk.SensorInfo(path.read_text())
    rows, columns = info.format.pixels_per_column, info.format.columns_per_frame
    assert (rows, columns) == (128, 1024)
    lut = ouster_sdk.XYZLut(info)
    xyz10 = lut(np.full((rows, columns), 10_000, np.uint32))  # RANGE in mm -> m
    xyz20 = lut(np.full((rows, columns), 20_000, np.uint32))
    sdk_dir = (xyz20 - xyz10) / 10.0
    sdk_offset = xyz10 - 10.0 * sdk_dir  # xyz = offset + RANGE * direction
    direction, origin = _schedule_grid(mapping, rows, columns)

    # Every one of the 131072 pixels points the same way, to rounding.
    assert _angle_rad(direction, sdk_dir).max() < 1e-12

    # The SDK's beam origin (offset + n * direction) is the pattern's, lifted by exactly
    # lidar_to_sensor_transform's translation (0, 0, 36.18 mm), which the pattern leaves out.
    n_m = info.lidar_origin_to_beam_origin_mm / 1000.0
    assert n_m == mapping["beam_origin_offset_m"] == 0.015806
    residual = sdk_offset + n_m * sdk_dir - origin
    lift_m = np.asarray(info.lidar_to_sensor_transform)[:3, 3] / 1000.0
    assert lift_m.tolist() == [0.0, 0.0, 0.03618]
    assert np.abs(residual - lift_m).max() < 1e-14

    # RANGE counts from the lidar origin: the SDK's point at RANGE 10 m lies 10 m - n from
    # the beam's exit, which the simulator reports as 10 m with range_reference lidar_origin.
    assert mapping["range_reference"] == "lidar_origin"
    from_exit_m = np.linalg.norm(xyz10 - lift_m - origin, axis=-1)
    assert np.abs(from_exit_m + mapping["beam_origin_offset_m"] - 10.0).max() < 1e-12


def test_ouster_reproduces_the_os1_128_preset_geometry() -> None:
    mapping, header = import_scanner([_os1_json()])
    preset = load_yaml(scanner_presets()["os1-128"])
    for key in ("rotation_hz", "rotation", "start_azimuth_deg", "firings_per_revolution",
                "beam_origin_offset_m"):  # fmt: skip
        assert mapping[key] == preset[key], key
    assert mapping["channels"]["elevation_deg"] == preset["channels"]["elevation_deg"]
    assert mapping["channels"]["azimuth_offset_deg"] == preset["channels"]["azimuth_offset_deg"]
    assert "firing_offset_us" not in mapping["channels"]  # one timestamp per column: all 0
    radiometry = {k: v for k, v in preset.items() if k not in mapping["channels"]}
    for key in ("range_min_m", "range_max_m", "divergence_mrad", "detection", "intensity_scale"):
        assert mapping[key] == radiometry[key], key
    assert mapping["name"] == "os1-128-122201000998"
    assert mapping["description"].startswith("Ouster OS-1-128 unit 122201000998 (fw v2.3.0)")
    assert header.splitlines()[0] == (
        "# os1-128-122201000998: Ouster OS-1-128 from its own sensor metadata."
    )
    assert all(line.startswith("#") for line in header.splitlines())
    assert "OS-1-128_v2.3.0_1024x10.json (sha256 " in header
    assert "(0, 0, 36.18) mm in the sensor frame" in header
    assert "column_window: [0, 1023], the full revolution." in header
    assert "preset os1-128" in header


def test_ouster_nested_layout_and_plain_json_fallback_agree(
    ouster_sdk, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _os1_json()
    reference, _ = import_scanner([path])
    nested = tmp_path / "os1_nested.json"
    nested.write_text(ouster_sdk.SensorInfo(path.read_text()).to_json_string())
    assert "beam_intrinsics" in json.loads(nested.read_text())

    def same(mapping: dict) -> None:
        strip = {k: v for k, v in mapping.items() if k != "description"}
        assert strip == {k: v for k, v in reference.items() if k != "description"}

    mapping, header = import_scanner([nested])
    same(mapping)
    assert "layout nested" in header and "Read with ouster-sdk SensorInfo" in header
    monkeypatch.setitem(sys.modules, "ouster.sdk.core", None)  # import fails: no SDK
    for source in (path, nested):
        mapping, header = import_scanner([source])
        same(mapping)
        assert "Read with a plain JSON reading" in header


def test_ouster_narrow_column_window_is_stated(tmp_path: Path) -> None:
    doc = json.loads(_os1_json().read_text())
    doc["data_format"]["column_window"] = [256, 767]
    path = tmp_path / "windowed.json"
    path.write_text(json.dumps(doc))
    mapping, header = import_scanner([path])
    assert mapping["firings_per_revolution"] == 1024  # every column is still simulated
    assert "column_window: [256, 767] of 1024 columns" in header
    assert "The spinning pattern has no azimuth window" in header


def test_written_yaml_loads_and_round_trips(tmp_path: Path) -> None:
    mapping, header = import_scanner([_os1_json()])
    out = tmp_path / "scanner.yaml"
    out.write_text("stale")
    assert write_scanner_yaml(mapping, header, out) == out
    assert [p.name for p in tmp_path.iterdir()] == ["scanner.yaml"]  # no temporary left
    text = out.read_text()
    assert text.startswith(header)
    loaded = load_scanner(out)
    assert loaded == ScannerConfig.model_validate(mapping)
    assert yaml.safe_load(text) == mapping


def test_write_imported_scanner_is_the_import_written_and_loaded_back(tmp_path: Path) -> None:
    """What ``lidar-sim scanners import`` does: the import written with its header, and
    the scanner loaded back from the file; a bad file writes nothing."""
    vert = [math.radians(e) for e in VLP16_ELEVATION_DEG]
    calibration = _velodyne_file(tmp_path, vert, [0.0] * 16)
    out = tmp_path / "scanner.yaml"
    config = write_imported_scanner([calibration], out)
    mapping, header = import_scanner([calibration])
    assert out.read_text().startswith(header)
    assert config == load_scanner(out) == ScannerConfig.model_validate(mapping)
    assert config.name == "vlp-16-unit-db"
    bad = tmp_path / "bad.csv"
    bad.write_text("Laser id,Elevation,Azimuth\n")
    with pytest.raises(ConfigError):
        write_imported_scanner([bad], tmp_path / "never.yaml")
    assert not (tmp_path / "never.yaml").exists()


# --------------------------------------------------------------------------- Velodyne

VLP16_ELEVATION_DEG = [-15.0, 1.0, -13.0, 3.0, -11.0, 5.0, -9.0, 7.0,
                       -7.0, 9.0, -5.0, 11.0, -3.0, 13.0, -1.0, 15.0]  # fmt: skip


def _velodyne_file(tmp_path: Path, vert_rad: list[float], rot_rad: list[float]) -> Path:
    """A calibration in velodyne_pointcloud's format (flow mappings, as its files)."""
    lines = ["lasers:"]
    for i, (v, r) in enumerate(zip(vert_rad, rot_rad, strict=True)):
        lines.append(
            f"- {{dist_correction: 0.0, dist_correction_x: 0.0, dist_correction_y: 0.0, "
            f"focal_distance: 0.0, focal_slope: 0.0, horiz_offset_correction: 0.0, "
            f"laser_id: {i}, rot_correction: {r!r}, vert_correction: {v!r}, "
            f"vert_offset_correction: 0.0}}"
        )
    lines += [f"num_lasers: {len(vert_rad)}", "distance_resolution: 0.002"]
    path = tmp_path / "unit_db.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_velodyne_vlp16_file_gives_the_vlp16_preset(tmp_path: Path) -> None:
    vert = [math.radians(e) for e in VLP16_ELEVATION_DEG]
    mapping, header = import_scanner([_velodyne_file(tmp_path, vert, [0.0] * 16)])
    preset = load_yaml(scanner_presets()["vlp-16"])
    assert mapping["channels"]["elevation_deg"] == preset["channels"]["elevation_deg"]
    assert mapping["channels"]["azimuth_offset_deg"] == [0.0] * 16
    assert mapping["channels"]["firing_offset_us"] == preset["channels"]["firing_offset_us"]
    for key in ("rotation_hz", "firings_per_revolution", "divergence_mrad", "detection"):
        assert mapping[key] == preset[key], key
    assert mapping["range_resolution_m"] == 0.002
    assert mapping["name"] == "vlp-16-unit-db"
    # The driver's ring is the rank of vert_correction, lowest first.
    ring = [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15]
    assert f"\n#   {ring}\n" in header
    assert "unit_db.yaml (sha256 " in header


def test_velodyne_sign_matches_the_driver_point_formula(tmp_path: Path) -> None:
    # VLP-32C-like: made-up vertical and rotational corrections, radians.
    rng = np.random.default_rng(7)
    vert = np.radians(np.linspace(-25.0, 15.0, 32) + rng.uniform(-0.3, 0.3, 32)).tolist()
    rot = np.radians(rng.choice([-4.2, -1.4, 1.4, 4.2], 32) + rng.uniform(-0.05, 0.05, 32))
    mapping, _ = import_scanner([_velodyne_file(tmp_path, vert, rot.tolist())])
    assert mapping["name"].startswith("vlp-32c-")  # 32 lasers, lowest above -28 deg
    columns = 50
    direction, _ = _schedule_grid(mapping, 32, columns)
    head = _head_rad(mapping, 32, columns)
    theta = -head  # the driver's block rotation counts clockwise
    # rawdata.cc RawData::unpack: angle = theta - rot_correction; x_v = d cos(v) sin(angle),
    # y_v = d cos(v) cos(angle), z = d sin(v); ROS frame x = y_v, y = -x_v.
    v, r = np.asarray(vert)[:, None], rot[:, None]
    x_v, y_v = np.cos(v) * np.sin(theta - r), np.cos(v) * np.cos(theta - r)
    driver = np.stack([y_v, -x_v, np.sin(v) * np.ones_like(theta)], axis=-1)
    assert _angle_rad(direction, driver).max() < 1e-7  # angles rounded to 1e-6 deg


# --------------------------------------------------------------------------- Hesai


def _hesai_files(tmp_path: Path, firing_us: list[float]) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(3)
    n = len(firing_us)
    angles = np.column_stack([np.round(np.linspace(15.0, -16.0, n), 3),
                              np.round(rng.uniform(-1.5, 1.5, n), 3)])  # fmt: skip
    rows = ["Laser id,Elevation,Azimuth"]
    rows += [f"{i + 1},{e:g},{a:g}" for i, (e, a) in enumerate(angles)]
    angle_path = tmp_path / "PandarXT32_unit.csv"
    angle_path.write_text("\r\n".join(rows) + "\r\n")
    # The firetime files start with a BOM and count from the block start (PandarXT-32).
    fire = ["\ufeffChannel,fire time(us)"] + [f"{i + 1},{t:g}" for i, t in enumerate(firing_us)]
    fire_path = tmp_path / "PandarXT32_firetime.csv"
    fire_path.write_text("\n".join(fire) + "\n", encoding="utf-8")
    return angle_path, fire_path, angles


def test_hesai_angles_and_firetime(tmp_path: Path) -> None:
    preset = load_yaml(scanner_presets()["pandar-xt32"])
    base_us = np.asarray(preset["channels"]["firing_offset_us"])
    # A firetime file whose zero lies 5.632 us before the base's earliest channel.
    angle_path, fire_path, angles = _hesai_files(tmp_path, np.round(base_us + 5.632, 3).tolist())
    mapping, header = import_scanner([fire_path, angle_path])
    assert mapping["channels"]["elevation_deg"] == angles[:, 0].tolist()
    assert mapping["channels"]["azimuth_offset_deg"] == (-angles[:, 1] + 0.0).tolist()
    assert mapping["channels"]["firing_offset_us"] == base_us.tolist()
    assert mapping["name"] == "pandar-xt32-pandarxt32-unit"
    assert "PandarXT32_unit.csv (sha256 " in header
    assert "PandarXT32_firetime.csv (sha256 " in header

    # nebula: az = block azimuth + Azimuth, x = cos(el) sin(az), y = cos(el) cos(az)
    # (x right, y forward); the simulator's frame: x forward = y_n, y left = -x_n.
    columns = 40
    direction, _ = _schedule_grid(mapping, 32, columns)
    head = _head_rad(mapping, 32, columns)
    block = -head  # the block azimuth grows clockwise
    el, az = np.radians(angles[:, :1]), block + np.radians(angles[:, 1:])
    x_n, y_n = np.cos(el) * np.sin(az), np.cos(el) * np.cos(az)
    nebula = np.stack([y_n, -x_n, np.sin(el) * np.ones_like(az)], axis=-1)
    assert _angle_rad(direction, nebula).max() < 1e-12


def test_hesai_without_firetime_keeps_the_base_timing(tmp_path: Path) -> None:
    angle_path, _, _ = _hesai_files(tmp_path, [0.0] * 64)
    mapping, header = import_scanner([angle_path])
    preset = load_yaml(scanner_presets()["pandar64"])
    assert mapping["channels"]["firing_offset_us"] == preset["channels"]["firing_offset_us"]
    assert "firing_offset_us: preset pandar64 (no firetime file given)" in header


# --------------------------------------------------------------------------- bad input


def _error(files: list[Path]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        import_scanner(files)
    return info.value


def test_bad_input_raises_config_errors(tmp_path: Path) -> None:
    txt = tmp_path / "notes.txt"
    txt.write_text("hello\n")
    err = _error([txt])
    assert err.source == str(txt) and err.key == ""
    assert err.problem.startswith("unknown file kind; expected an Ouster metadata .json")

    no_angles = tmp_path / "meta.json"
    no_angles.write_text(json.dumps({"prod_line": "OS-1-64", "lidar_mode": "1024x10"}))
    err = _error([no_angles])
    assert err.key == "beam_altitude_angles"
    assert err.problem.startswith("no beam angles: not Ouster sensor metadata")

    header = tmp_path / "angles.csv"
    header.write_text("id,elev,az\n1,2.0,0.1\n")
    err = _error([header])
    assert err.key == "header"
    assert err.problem.startswith("unknown CSV header 'id,elev,az'")

    angle_path, _, _ = _hesai_files(tmp_path, [1.0] * 32)
    short = tmp_path / "short_firetime.csv"
    short.write_text("Channel,fire time(us)\n" + "".join(f"{i},1.0\n" for i in range(1, 31)))
    err = _error([angle_path, short])
    assert (err.key, err.problem) == (
        "Channel",
        "has 30 channels; the angle file PandarXT32_unit.csv has 32",
    )

    bad_type = _velodyne_file(tmp_path, [0.1] * 16, [0.0] * 16)
    bad_type.write_text(
        bad_type.read_text().replace("vert_correction: 0.1", "vert_correction: x", 1)
    )
    err = _error([bad_type])
    assert (err.key, err.problem) == (
        "lasers[0].vert_correction",
        "expected a finite number, got 'x'",
    )
    assert str(err) == f"{bad_type}: lasers[0].vert_correction: expected a finite number, got 'x'"

    err = _error([angle_path, angle_path])
    assert "cannot combine a hesai_angles file with a hesai_angles file" in err.problem


def test_ouster_beam_origin_above_the_lidar_origin(ouster_sdk, tmp_path: Path) -> None:
    # A newer unit's beam_to_lidar_transform may lift the beam origin (here by a made-up
    # 5 mm): the pattern keeps its origins in the plane; the lift joins the pose offset and
    # RANGE exceeds the simulator's lidar_origin range by |(n_x, n_z)| - n_x.
    doc = json.loads(ouster_sdk.SensorInfo(_os1_json().read_text()).to_json_string())
    doc["beam_intrinsics"]["beam_to_lidar_transform"][11] = 5.0
    path = tmp_path / "lifted.json"
    path.write_text(json.dumps(doc))
    mapping, header = import_scanner([path])
    info = ouster_sdk.SensorInfo(path.read_text())
    rows, columns = 128, 1024
    lut = ouster_sdk.XYZLut(info)
    xyz10 = lut(np.full((rows, columns), 10_000, np.uint32))
    sdk_dir = (lut(np.full((rows, columns), 20_000, np.uint32)) - xyz10) / 10.0
    direction, origin = _schedule_grid(mapping, rows, columns)
    assert _angle_rad(direction, sdk_dir).max() < 1e-12
    n_x, n_eucl = 0.015806, math.hypot(0.015806, 0.005)
    residual = xyz10 - 10.0 * sdk_dir + n_eucl * sdk_dir - origin
    assert np.abs(residual - [0.0, 0.0, 0.03618 + 0.005]).max() < 1e-14
    from_exit_m = np.linalg.norm(xyz10 - [0.0, 0.0, 0.04118] - origin, axis=-1)
    assert np.abs(from_exit_m + n_x - (10.0 - (n_eucl - n_x))).max() < 1e-12
    assert "(0, 0, 41.18) mm in the sensor frame" in header
    assert f"RANGE exceeds this model's range_m by {(n_eucl - n_x) * 1000:g} mm" in header
