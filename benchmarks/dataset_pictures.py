"""Pictures of one generated frame per dataset layout, its boxes drawn from the layout's files.

    python benchmarks/dataset_pictures.py [--out docs/img/datasets] [--work out/dataset_pictures]

One street frame (an HDL-64E driving at 6 m/s through the street generator's traffic,
cyclists and walkers) is generated with ``run_dataset`` in each layout, from the same spec
and seed, so the five frames are the same pulses. Each is then read back as its users read
it and drawn from above, 40 m ahead and behind the sensor and 22 m to each side, to
``<out>/<layout>.png``:

- ``nuscenes``: nuscenes-devkit's ``NuScenes.render_sample_data`` of the sample's
  LIDAR_TOP (the points from ``samples/``, the annotations from the tables through
  ``get_sample_data``, each drawn by the devkit's ``Box.render``);
- ``kitti``: ``training/velodyne``, and each line of ``training/label_2`` made into its
  eight corners in the rectified camera frame (h w l, the bottom centre, rotation_y: as
  the KITTI object devkit's ``computeBox3D`` does) and taken to the velodyne frame through
  the frame's ``training/calib`` (``R0_rect``, ``Tr_velo_to_cam``, read with pykitti's
  ``read_calib_file`` when pykitti is installed);
- ``openpcdet``: ``points/*.npy`` and ``labels/*.txt`` (``x y z dx dy dz heading class``),
  the corners made as OpenPCDet's ``boxes_to_corners_3d`` makes them (written here);
- ``semantickitti``: ``SemanticKittiDataset`` (the ``.bin`` scan, its ``.label`` classes as
  the colours, the ``boxes/*.npz`` boxes);
- ``npz``: the frame's ``frames/*.npz`` through ``simulator.io.read.read`` and its
  ``boxes/*.npz`` through ``read_boxes``.

It takes about 10 s on one core (the five scans, their files and the drawing), and about
20 s more the first time on a machine, compiling the kernels. The pictures are PNGs of
990 x 594 px, under 300 kB each.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import matplotlib
import numpy as np
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt

#: The layouts, in the order the guide shows them.
LAYOUTS = ("semantickitti", "npz", "kitti", "nuscenes", "openpcdet")
#: The view around the sensor (m): 40 m ahead and behind (nuScenes' default), 22 m to
#: each side (the street's houses).
AXES_LIMIT_M = 40.0
SIDE_LIMIT_M = 22.0
#: Figure size (inches, at 110 dpi).
FIGSIZE = (9.0, 5.4)
#: One sequence of one frame of the street (as ``tests/test_boxes_hold.py``'s): the scan's
#: seam behind the car, where KITTI's is.
STREET = {
    "name": "street", "generator": "street", "scanner": "hdl-64e", "sequences": 1, "frames": 1,
    "trajectory": {"start": {"position_m": [-20, -1.6, 0]}, "velocity_mps": [6, 0, 0]},
    "mount": {"position_m": [0, 0, 1.9]},
    "scanner_overrides": {"start_azimuth_deg": 180.0},
}  # fmt: skip
#: Box colours by class name (any layout's spelling).
COLOURS = {
    "car": "tab:orange", "truck": "tab:brown", "bus": "tab:brown", "pedestrian": "tab:blue",
    "person": "tab:blue", "cyclist": "tab:red", "bicycle": "tab:red", "bicyclist": "tab:red",
    "misc": "tab:gray",
}  # fmt: skip


def generate(work: Path, seed: int) -> dict[str, Path]:
    """The street frame in every layout, under ``work/<layout>``."""
    from simulator.datasets.generate import run_dataset

    out = {}
    for layout in LAYOUTS:
        root = work / layout
        spec = work / f"{layout}.yaml"
        spec.write_text(yaml.safe_dump({"seed": seed, "layout": layout, "groups": [STREET]}))
        t0 = time.perf_counter()
        manifest = run_dataset(spec, root, workers=1)
        if manifest["errors"]:
            raise SystemExit(f"{layout}: {manifest['errors']}")
        print(f"{layout}: generated in {time.perf_counter() - t0:.1f} s")
        out[layout] = root
    return out


# ------------------------------------------------------------------------------ drawing


def corners_upright(centre: np.ndarray, size: np.ndarray, heading: float) -> np.ndarray:
    """(9, 3): the eight corners of an upright box (centre, size dx dy dz along its own
    x y z, turned by ``heading`` about z), bottom four first, then the centre of its front
    face (+x), as OpenPCDet's ``boxes_to_corners_3d`` orders a box's corners."""
    unit = np.array([[1, 1, -1], [1, -1, -1], [-1, -1, -1], [-1, 1, -1],
                     [1, 1, 1], [1, -1, 1], [-1, -1, 1], [-1, 1, 1], [1, 0, 0]], float)  # fmt: skip
    local = unit * np.asarray(size, float) / 2
    c, s = np.cos(heading), np.sin(heading)
    turn = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    return local @ turn.T + np.asarray(centre, float)


def draw_box(ax: plt.Axes, corners: np.ndarray, colour: str) -> None:
    """A box from above: its bottom rectangle (corners 0-3) and a tick to its front (row 8)."""
    ring = corners[[0, 1, 2, 3, 0], :2]
    ax.plot(ring[:, 0], ring[:, 1], color=colour, lw=1.2)
    mid = corners[:4, :2].mean(axis=0)
    ax.plot([mid[0], corners[8, 0]], [mid[1], corners[8, 1]], color=colour, lw=1.2)


def bev(xyz: np.ndarray, colours: np.ndarray | None = None) -> tuple[plt.Figure, plt.Axes]:
    """A figure of the points from above, in greys by height (the ground light, the tops
    dark) unless ``colours``."""
    fig, ax = plt.subplots(figsize=FIGSIZE)
    near = (np.abs(xyz[:, 0]) <= AXES_LIMIT_M) & (np.abs(xyz[:, 1]) <= SIDE_LIMIT_M)
    if colours is None:
        ax.scatter(xyz[near, 0], xyz[near, 1], c=xyz[near, 2], s=0.3, cmap="Greys",
                   vmin=-3.5, vmax=1.0, linewidths=0)  # fmt: skip
    else:
        ax.scatter(xyz[near, 0], xyz[near, 1], c=colours[near], s=0.3, linewidths=0)
    ax.plot(0, 0, "x", color="red")
    ax.set_xlim(-AXES_LIMIT_M, AXES_LIMIT_M)
    ax.set_ylim(-SIDE_LIMIT_M, SIDE_LIMIT_M)
    ax.set_aspect("equal")
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    return fig, ax


def save(fig: plt.Figure, path: Path, title: str) -> None:
    fig.axes[0].set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def class_colour(name: str) -> str:
    return COLOURS.get(name.lower().split(".")[-1], "magenta")


# ------------------------------------------------------------------------------ layouts


def draw_semantickitti(root: Path, path: Path) -> int:
    """SemanticKittiDataset's first frame: points coloured by their ``.label`` classes
    (SemanticKITTI's colours), the boxes in black."""
    from simulator.datasets.read import SemanticKittiDataset
    from simulator.viz.colors import label_colors

    item = SemanticKittiDataset(root)[0]
    boxes = item["boxes"]
    fig, ax = bev(item["points"][:, :3], label_colors(item["label"]))
    for b in range(len(boxes)):
        corners = corners_upright(boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b])
        draw_box(ax, corners, "black")
    save(fig, path, f"semantickitti: velodyne/000000.bin, labels/, boxes/ ({len(boxes)} boxes)")
    return len(boxes)


def draw_npz(root: Path, path: Path) -> int:
    """The frame's npz and its boxes npz."""
    from simulator.datasets.read import read_boxes
    from simulator.io.read import read
    from simulator.labels import label_name

    seq = root / "sequences" / "00"
    cloud = read(seq / "frames" / "000000.npz")
    boxes = read_boxes(seq / "boxes" / "000000.npz")
    fig, ax = bev(np.asarray(cloud["xyz"], float))
    for b in range(len(boxes)):
        corners = corners_upright(boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b])
        draw_box(ax, corners, class_colour(label_name(int(boxes.label[b])).split("-")[-1]))
    save(fig, path, f"npz: frames/000000.npz, boxes/000000.npz ({len(boxes)} boxes)")
    return len(boxes)


def read_calib(path: Path) -> dict[str, np.ndarray]:
    """A KITTI calib file as pykitti reads it (``key: numbers`` a line)."""
    try:
        from pykitti.utils import read_calib_file
    except ImportError:
        read_calib_file = None
    if read_calib_file is not None:
        return read_calib_file(str(path))
    rows = (line.split(":", 1) for line in path.read_text().splitlines() if ":" in line)
    return {k: np.array(v.split(), float) for k, v in rows}


def kitti_corners(h: float, w: float, length: float, bottom: np.ndarray, ry: float) -> np.ndarray:
    """(9, 3) corners of a KITTI label in the rectified camera frame (x right, y down, z
    ahead): the box is ``length`` along its x, ``w`` along z, ``h`` up from its bottom
    centre, turned by ``rotation_y`` about the camera's y axis (the object devkit's
    ``computeBox3D``); bottom four first, then the centre of the front face (+x)."""
    x = length / 2 * np.array([1, 1, -1, -1, 1, 1, -1, -1, 1])
    y = -h * np.array([0, 0, 0, 0, 1, 1, 1, 1, 0.5])
    z = w / 2 * np.array([1, -1, -1, 1, 1, -1, -1, 1, 0])
    c, s = np.cos(ry), np.sin(ry)
    turn = np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
    return (turn @ np.stack([x, y, z])).T + bottom


def draw_kitti(root: Path, path: Path) -> int:
    """training/velodyne with training/label_2 taken to the velodyne frame by its calib."""
    top = root / "training"
    scan = np.fromfile(top / "velodyne" / "000000.bin", "<f4").reshape(-1, 4)
    calib = read_calib(top / "calib" / "000000.txt")
    velo_to_cam = np.eye(4)
    velo_to_cam[:3] = calib["Tr_velo_to_cam"].reshape(3, 4)
    rect = np.eye(4)
    rect[:3, :3] = calib["R0_rect"].reshape(3, 3)
    cam_to_velo = np.linalg.inv(rect @ velo_to_cam)
    fig, ax = bev(scan[:, :3].astype(float))
    # The virtual camera's view: the image's left and right edges, through P2.
    p2 = calib["P2"].reshape(3, 4)
    for u in (0.0, 1242.0):
        ray = np.linalg.solve(p2[:, :3], np.array([u, 187.0, 1.0]))
        far = cam_to_velo @ np.append(ray / ray[2] * AXES_LIMIT_M * 2, 1.0)
        near = cam_to_velo @ np.array([0.0, 0.0, 0.0, 1.0])
        ax.plot([near[0], far[0]], [near[1], far[1]], "k--", lw=0.6)
    n = 0
    for line in (top / "label_2" / "000000.txt").read_text().splitlines():
        f = line.split()
        h, w, length = (float(v) for v in f[8:11])
        corners = kitti_corners(h, w, length, np.array(f[11:14], float), float(f[14]))
        velo = (cam_to_velo @ np.c_[corners, np.ones(9)].T).T[:, :3]
        draw_box(ax, velo, class_colour(f[0]))
        n += 1
    save(fig, path, f"kitti: training/velodyne, label_2 through calib ({n} boxes)")
    return n


def draw_nuscenes(root: Path, path: Path) -> int:
    """The devkit's own render of the first sample's LIDAR_TOP with its annotations."""
    from nuscenes.nuscenes import NuScenes

    nusc = NuScenes(version="v1.0-trainval", dataroot=str(root), verbose=False)
    token = nusc.sample[0]["data"]["LIDAR_TOP"]
    fig, ax = plt.subplots(figsize=FIGSIZE)
    # underlay_map=False: the devkit's map crop fails on numpy 2 (and the map is blank).
    nusc.render_sample_data(token, with_anns=True, axes_limit=AXES_LIMIT_M, ax=ax,
                            underlay_map=False, verbose=False)  # fmt: skip
    ax.set_ylim(-SIDE_LIMIT_M, SIDE_LIMIT_M)  # (the devkit's view is square)
    n = len(nusc.sample[0]["anns"])
    ax.set_title(f"nuscenes: NuScenes.render_sample_data (LIDAR_TOP, {n} annotations)",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return n


def draw_openpcdet(root: Path, path: Path) -> int:
    """points/*.npy and labels/*.txt."""
    points = np.load(root / "points" / "00_000000.npy")
    fig, ax = bev(points[:, :3].astype(float))
    n = 0
    for line in (root / "labels" / "00_000000.txt").read_text().splitlines():
        f = line.split()
        x, y, z, dx, dy, dz, heading = (float(v) for v in f[:7])
        draw_box(ax, corners_upright([x, y, z], [dx, dy, dz], heading), class_colour(f[7]))
        n += 1
    save(fig, path, f"openpcdet: points/00_000000.npy, labels/00_000000.txt ({n} boxes)")
    return n


DRAW = {
    "semantickitti": draw_semantickitti,
    "npz": draw_npz,
    "kitti": draw_kitti,
    "nuscenes": draw_nuscenes,
    "openpcdet": draw_openpcdet,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img/datasets"))
    ap.add_argument("--work", type=Path, default=None,
                    help="where to generate the datasets (default: a temporary one)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=9,
                    help="the root seed (9: a street with traffic, parked cars, cyclists and "
                         "walkers near the sensor)")  # fmt: skip
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        roots = generate(work, args.seed)
        for layout in LAYOUTS:
            path = args.out / f"{layout}.png"
            n = DRAW[layout](roots[layout], path)
            print(f"{path}: {n} boxes, {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
