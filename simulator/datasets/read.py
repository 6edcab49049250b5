"""Read generated datasets back for training: numpy arrays, or a PyTorch ``Dataset``.

``SemanticKittiDataset(root)`` reads ``sequences/NN/velodyne/*.bin`` (float32 x, y, z,
reflectance), ``labels/*.label`` (uint32: semantic id in the low 16 bits, instance in the
high 16) and ``poses.txt`` by the layout's own rules. ``torch_dataset(root)`` wraps it as a
``torch.utils.data.Dataset``; torch is imported only then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..io.layouts import read_semantickitti_frame, semantickitti_frames
from ..world.boxes import Boxes

__all__ = ["SemanticKittiDataset", "boxes_7", "read_boxes", "torch_dataset"]


def read_boxes(path: str | Path) -> Boxes:
    """A frame's ``boxes/*.npz`` file (an empty :class:`Boxes` if there is none)."""
    path = Path(path)
    if not path.exists():
        return Boxes()
    with np.load(path) as data:
        return Boxes.from_arrays(dict(data))


def boxes_7(boxes: Boxes) -> np.ndarray:
    """(B, 7) float32 ``x y z dx dy dz yaw``: centre and size (m), heading (rad)."""
    out = np.zeros((len(boxes), 7), dtype=np.float32)
    out[:, :3], out[:, 3:6], out[:, 6] = boxes.centre_m, boxes.size_m, boxes.yaw_rad
    return out


class SemanticKittiDataset:
    """Frames of a SemanticKITTI-layout folder, in sequence then frame order.

    Item ``i`` is a dict: ``points`` (N, 4) float32, ``label`` (N,) uint16, ``instance``
    (N,) uint16, ``pose`` (4, 4) float64 world from sensor, ``sequence``, ``frame`` and
    ``boxes``, the frame's :class:`~simulator.world.boxes.Boxes` (empty when the dataset has no
    ``boxes/`` files).
    """

    def __init__(self, root: str | Path, sequences: list[str] | None = None) -> None:
        self.root = Path(root)
        self.items: list[tuple[Path, Path, np.ndarray]] = semantickitti_frames(root, sequences)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        scan, label_path, pose = self.items[i]
        points, label, instance = read_semantickitti_frame(scan, label_path)
        return {
            "points": points,
            "label": label,
            "instance": instance,
            "pose": pose,
            "sequence": scan.parent.parent.name,
            "frame": int(scan.stem),
            "boxes": read_boxes(scan.parent.parent / "boxes" / f"{scan.stem}.npz"),
        }


def torch_dataset(root: str | Path, sequences: list[str] | None = None) -> Any:
    """The dataset as a ``torch.utils.data.Dataset`` of tensors (needs torch)."""
    try:
        import torch
        from torch.utils.data import Dataset
    except ImportError:
        raise ImportError("torch_dataset needs PyTorch: pip install torch") from None
    base = SemanticKittiDataset(root, sequences)

    class _TorchDataset(Dataset):  # type: ignore[misc]
        def __len__(self) -> int:
            return len(base)

        def __getitem__(self, i: int) -> dict[str, Any]:
            item = base[i]
            return {
                "points": torch.from_numpy(item["points"]),
                "label": torch.from_numpy(item["label"].astype(np.int64)),
                "instance": torch.from_numpy(item["instance"].astype(np.int64)),
                "pose": torch.from_numpy(item["pose"]),
                # (B, 7): x, y, z, dx, dy, dz, yaw, as detectors take them
                "boxes": torch.from_numpy(boxes_7(item["boxes"])),
                "box_label": torch.from_numpy(item["boxes"].label.astype(np.int64)),
                "box_instance": torch.from_numpy(item["boxes"].instance.astype(np.int64)),
            }

    return _TorchDataset()
