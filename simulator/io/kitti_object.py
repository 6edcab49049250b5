"""KITTI's 3D object-detection files of a frame, from a virtual front camera.

``training/velodyne/NNNNNN.bin`` (float32 x, y, z, reflectance), ``training/label_2/``
(one object a line, KITTI's 15 fields), ``training/calib/`` (``P0``-``P3``, ``R0_rect``,
``Tr_velo_to_cam``, ``Tr_imu_to_velo``). There is no real camera: the calibration states a
virtual one with KITTI's own intrinsics (:data:`CAMERA_K`, a 1242 x 375 image), its centre
:data:`CAMERA_IN_VELO_M` from the lidar (0.27 m forward, 0.08 m down, as KITTI's cam 0 is),
looking along the lidar's +x, rectified (``R0_rect`` the identity); ``P1``/``P3`` the right
cameras of a 0.54 m stereo baseline; ``Tr_imu_to_velo`` the lidar from the vehicle (the
group's mount inverted). A label line is

``type truncated occluded alpha left top right bottom h w l x y z rotation_y``

with the bottom centre ``x y z`` in the rectified camera frame (x right, y down, z
forward), ``rotation_y`` about its y axis (0: the object's front along camera +x, the
lidar's -y), ``alpha`` the observation angle ``rotation_y - atan2(x, z)``, both in
[-pi, pi). ``truncated`` is the share of the box's volume samples (a 5 x 5 x 5 grid) that
leave the image (or lie behind the camera); ``occluded`` 0 (fully visible), 1 (partly) or
2 (largely) from the camera's share of the object's surface samples it sees (>= 0.8, >= 0.3,
less). Objects wholly outside the image, or with neither a lidar point nor a surface sample
the camera sees, are left out, as KITTI annotates what its camera shows.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from ..labels import label_name
from ..world.boxes import Boxes

__all__ = [
    "CAMERA_IN_VELO_M",
    "CAMERA_K",
    "IMAGE_SIZE_PX",
    "KITTI_TYPES",
    "calib_text",
    "camera_from_velo",
    "label_text",
]

#: The virtual camera's intrinsics (KITTI's P2 without its offset): fx, fy, cx, cy in px.
CAMERA_K = np.array([[721.5377, 0.0, 609.5593], [0.0, 721.5377, 172.854], [0.0, 0.0, 1.0]])
#: Image width and height (px).
IMAGE_SIZE_PX = (1242, 375)
#: The camera centre in the lidar frame (m).
CAMERA_IN_VELO_M = np.array([0.27, 0.0, -0.08])
#: Stereo baseline of the right cameras P1 and P3 (m).
BASELINE_M = 0.54
#: KITTI type of each countable SemanticKITTI class (the others are ``Misc``).
KITTI_TYPES: dict[str, str] = {
    "car": "Car", "moving-car": "Car", "truck": "Truck", "moving-truck": "Truck",
    "person": "Pedestrian", "moving-person": "Pedestrian", "bicyclist": "Cyclist",
    "moving-bicyclist": "Cyclist", "on-rails": "Tram", "moving-on-rails": "Tram",
}  # fmt: skip
_OCCLUSION_LEVELS = (0.8, 0.3)
_AXES = np.array([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]])  # cam from velo


def camera_from_velo() -> NDArray[np.float64]:
    """(4, 4) ``Tr_velo_to_cam``: the rectified camera frame from the lidar's."""
    out = np.eye(4)
    out[:3, :3] = _AXES
    out[:3, 3] = -_AXES @ CAMERA_IN_VELO_M
    return out


def _projections() -> list[NDArray[np.float64]]:
    """P0-P3 (3, 4): left, right, left, right (the right ones ``BASELINE_M`` over)."""
    left = np.hstack([CAMERA_K, np.zeros((3, 1))])
    right = left.copy()
    right[0, 3] = -CAMERA_K[0, 0] * BASELINE_M
    return [left, right, left, right]


def calib_text(velo_from_imu: NDArray[np.float64]) -> str:
    """A frame's ``calib/*.txt``.

    Parameters
    ----------
    velo_from_imu : (4, 4) float
        The lidar from the vehicle (``Tr_imu_to_velo``).
    """

    def row(name: str, m: NDArray) -> str:
        return f"{name}: " + " ".join(f"{v:.12e}" for v in np.asarray(m).ravel()) + "\n"

    lines = [row(f"P{k}", p) for k, p in enumerate(_projections())]
    lines += [row("R0_rect", np.eye(3)), row("Tr_velo_to_cam", camera_from_velo()[:3]),
              row("Tr_imu_to_velo", np.asarray(velo_from_imu)[:3])]  # fmt: skip
    return "".join(lines)


def _wrap(angle: NDArray | float) -> NDArray | float:
    return (np.asarray(angle) + np.pi) % (2 * np.pi) - np.pi


def label_text(boxes: Boxes, camera_visibility: NDArray[np.float64]) -> str:
    """A frame's ``label_2/*.txt``.

    Parameters
    ----------
    boxes : Boxes
        In the lidar frame at the frame's reference time.
    camera_visibility : (B,) float
        Each object's share of its surface samples the camera sees.
    """
    tr = camera_from_velo()
    width, height = IMAGE_SIZE_PX
    grid = np.stack(np.meshgrid(*[np.linspace(-0.5, 0.5, 5)] * 3, indexing="ij"), -1)
    grid = grid.reshape(-1, 3)
    lines = []
    for b in range(len(boxes)):
        name = label_name(int(boxes.label[b]))
        kind = KITTI_TYPES.get(name, "Misc")
        yaw = float(boxes.yaw_rad[b])
        c, s = np.cos(yaw), np.sin(yaw)
        upright = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        samples = boxes.centre_m[b] + (grid * boxes.size_m[b]) @ upright.T  # lidar frame
        cam = samples @ tr[:3, :3].T + tr[:3, 3]
        front = cam[:, 2] > 0.1
        uvw = cam[front] @ CAMERA_K.T
        uv = uvw[:, :2] / uvw[:, 2:]
        in_image = (uv[:, 0] >= 0) & (uv[:, 0] < width) & (uv[:, 1] >= 0) & (uv[:, 1] < height)
        share_in = in_image.sum() / len(samples)
        seen = camera_visibility[b] > 0 or boxes.num_points[b] > 0
        if share_in == 0 or not seen:
            continue
        left, top = np.clip(uv.min(axis=0), 0, [width - 1, height - 1])
        right, bottom = np.clip(uv.max(axis=0), 0, [width - 1, height - 1])
        occluded = int(np.searchsorted(-np.array(_OCCLUSION_LEVELS), -camera_visibility[b],
                                       side="right"))  # fmt: skip
        length, wide, tall = boxes.size_m[b]
        bottom_velo = boxes.centre_m[b] - np.array([0.0, 0.0, tall / 2])
        x, y, z = tr[:3, :3] @ bottom_velo + tr[:3, 3]
        rotation_y = float(_wrap(-yaw - np.pi / 2))
        alpha = float(_wrap(rotation_y - np.arctan2(x, z)))
        values = [1.0 - share_in, occluded, alpha, left, top, right, bottom, tall, wide,
                  length, x, y, z, rotation_y]  # fmt: skip
        lines.append(f"{kind} {values[0]:.2f} {occluded:d} {alpha:.2f} "
                     + " ".join(f"{v:.2f}" for v in values[3:7]) + " "
                     + " ".join(f"{v:.6f}" for v in values[7:]) + "\n")  # fmt: skip
    return "".join(lines)
