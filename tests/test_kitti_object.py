"""The KITTI object-detection layout, read back with a few lines of numpy (KITTI's own
file formats): every box, taken from the camera back to the velodyne frame with the
frame's calib, holds the object's points; truncation and occlusion from the camera."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.datasets.generate import run_dataset

GROUP = {
    "name": "street", "generator": "street", "scanner": "vlp-16", "sequences": 1, "frames": 2,
    "trajectory": {"start": {"position_m": [-20, -1.6, 0]}, "velocity_mps": [8, 0, 0]},
    "mount": {"position_m": [0, 0, 1.9]},
    # the scan's seam behind, as KITTI's HDL-64E has it: the camera's view is mid-scan
    "scanner_overrides": {"start_azimuth_deg": 180.0},
}  # fmt: skip


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same street in the kitti layout and in the SemanticKITTI one (whose labels give
    each point's instance; asked not to compensate, as KITTI's object scans are not, and
    both at the camera's time, so the scans are the same bytes)."""
    tmp = tmp_path_factory.mktemp("kitti")
    out = {}
    for layout in ("kitti", "semantickitti"):
        spec = tmp / f"{layout}.yaml"
        group = {**GROUP, "motion_compensated": False}
        spec.write_text(yaml.safe_dump({"seed": 3, "layout": layout, "groups": [group]}))
        assert run_dataset(spec, tmp / layout, workers=1)["errors"] == []
        out[layout] = tmp / layout
    return out["kitti"], out["semantickitti"]


def _calib(path: Path) -> dict[str, np.ndarray]:
    rows = (line.split(":", 1) for line in path.read_text().splitlines() if line.strip())
    return {k: np.array(v.split(), dtype=np.float64) for k, v in rows}


def _labels(path: Path) -> list[dict[str, object]]:
    out = []
    for line in path.read_text().splitlines():
        f = line.split()
        assert len(f) == 15
        out.append({"type": f[0], "truncated": float(f[1]), "occluded": int(f[2]),
                    "alpha": float(f[3]), "bbox": np.array(f[4:8], float),
                    "hwl": np.array(f[8:11], float), "xyz": np.array(f[11:14], float),
                    "ry": float(f[14])})  # fmt: skip
    return out


def test_the_files_and_splits(twins: tuple[Path, Path]) -> None:
    kitti, sk = twins
    top = kitti / "training"
    names = ["000000", "000001"]
    for folder, suffix in (("velodyne", ".bin"), ("label_2", ".txt"), ("calib", ".txt")):
        assert sorted(p.name for p in (top / folder).iterdir()) == [n + suffix for n in names]
    train = (kitti / "ImageSets" / "train.txt").read_text().split()
    val = (kitti / "ImageSets" / "val.txt").read_text().split()
    assert sorted(train + val) == names
    calib = _calib(top / "calib" / "000000.txt")
    assert set(calib) == {"P0", "P1", "P2", "P3", "R0_rect", "Tr_velo_to_cam", "Tr_imu_to_velo"}
    assert calib["P2"].shape == (12,) and calib["R0_rect"].shape == (9,)
    # KITTI's scans are not motion-compensated: the same bytes as the raw SemanticKITTI scan
    raw = (sk / "sequences" / "00" / "velodyne" / "000000.bin").read_bytes()
    assert (top / "velodyne" / "000000.bin").read_bytes() == raw


def test_every_box_holds_its_objects_points(twins: tuple[Path, Path]) -> None:
    kitti, sk = twins
    checked, occlusion = 0, set()
    for frame in ("000000", "000001"):
        calib = _calib(kitti / "training" / "calib" / f"{frame}.txt")
        velo_to_cam = np.vstack([calib["Tr_velo_to_cam"].reshape(3, 4), [0, 0, 0, 1]])
        rect = np.eye(4)
        rect[:3, :3] = calib["R0_rect"].reshape(3, 3)
        cam_to_velo = np.linalg.inv(rect @ velo_to_cam)
        p2 = calib["P2"].reshape(3, 4)
        points = np.fromfile(kitti / "training" / "velodyne" / f"{frame}.bin", "<f4")
        xyz = points.reshape(-1, 4)[:, :3].astype(np.float64)
        raw = np.fromfile(sk / "sequences" / "00" / "labels" / f"{frame}.label", "<u4")
        instance = raw >> 16
        labels = _labels(kitti / "training" / "label_2" / f"{frame}.txt")
        assert labels
        for obj in labels:
            h, w, length = obj["hwl"]
            bottom = cam_to_velo @ np.append(obj["xyz"], 1.0)
            centre = bottom[:3] + np.array([0.0, 0.0, h / 2])
            yaw = -obj["ry"] - np.pi / 2  # KITTI's rotation_y to the velodyne heading
            c, s = np.cos(yaw), np.sin(yaw)
            d = xyz - centre
            local = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2]], 1)
            # the scans are as fired (KITTI's are not compensated): the ego's 8 m/s over the
            # camera's +-40 deg is +-9 cm, oncoming traffic's up to 0.3 m, and mixed echoes
            inside = np.all(np.abs(local) <= np.array([length, w, h]) / 2 + 0.3, axis=1)
            owners, counts = np.unique(instance[inside], return_counts=True)
            things = owners > 0
            if not things.any():  # no point of any object: occluded from the lidar
                continue
            mine = owners[things][np.argmax(counts[things])]
            own = instance == mine
            assert inside[own].mean() >= 0.9, (obj["type"], inside[own].mean())
            checked += 1
            occlusion.add(obj["occluded"])
            # alpha is rotation_y less the ray's angle in the camera's x-z plane
            x, _, z = obj["xyz"]
            diff = np.angle(np.exp(1j * (obj["alpha"] - obj["ry"] + np.arctan2(x, z))))
            assert abs(diff) < 0.01
            # truncation: whether the box's corners all project inside the 1242 x 375 image
            corners = np.array([[sx * length / 2, sy * w / 2, sz * h / 2] for sx in (-1, 1)
                                for sy in (-1, 1) for sz in (-1, 1)])  # fmt: skip
            rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
            cam = (corners @ rot.T + centre) @ velo_to_cam[:3, :3].T + velo_to_cam[:3, 3]
            uvw = np.hstack([cam, np.ones((8, 1))]) @ p2.T
            uv = uvw[:, :2] / uvw[:, 2:]
            whole = (cam[:, 2] > 0.1).all() and (uv >= 0).all() and (uv[:, 0] < 1242).all() \
                and (uv[:, 1] < 375).all()  # fmt: skip
            assert (obj["truncated"] == 0) == bool(whole)
            assert 0 <= obj["truncated"] < 1 and obj["occluded"] in (0, 1, 2)
            if whole:  # the 2D box is the corners' projection
                np.testing.assert_allclose(obj["bbox"], [*uv.min(0), *uv.max(0)], atol=0.02)
    # KITTI's occlusion is by other objects: the street's objects span more than one level
    assert checked >= 4 and occlusion <= {0, 1, 2} and len(occlusion) >= 2, occlusion
