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

__all__ = ["SemanticKittiDataset", "torch_dataset"]


class SemanticKittiDataset:
    """Frames of a SemanticKITTI-layout folder, in sequence then frame order.

    Item ``i`` is a dict: ``points`` (N, 4) float32, ``label`` (N,) uint16, ``instance``
    (N,) uint16, ``pose`` (4, 4) float64 world from sensor, ``sequence`` and ``frame``.
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
            }

    return _TorchDataset()
