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

from .io.labels import unpack_labels

__all__ = ["SemanticKittiDataset", "torch_dataset"]


class SemanticKittiDataset:
    """Frames of a SemanticKITTI-layout folder, in sequence then frame order.

    Item ``i`` is a dict: ``points`` (N, 4) float32, ``label`` (N,) uint16, ``instance``
    (N,) uint16, ``pose`` (4, 4) float64 world from sensor, ``sequence`` and ``frame``.
    """

    def __init__(self, root: str | Path, sequences: list[str] | None = None) -> None:
        self.root = Path(root)
        folders = sorted(p for p in (self.root / "sequences").iterdir() if p.is_dir())
        if sequences is not None:
            folders = [f for f in folders if f.name in sequences]
        self.items: list[tuple[Path, Path, np.ndarray]] = []
        for seq in folders:
            poses = np.loadtxt(seq / "poses.txt", ndmin=2).reshape(-1, 3, 4)
            for k, scan in enumerate(sorted((seq / "velodyne").glob("*.bin"))):
                pose = np.eye(4)
                pose[:3] = poses[int(scan.stem)] if int(scan.stem) < len(poses) else poses[k]
                self.items.append((scan, seq / "labels" / f"{scan.stem}.label", pose))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        scan, label_path, pose = self.items[i]
        points = np.fromfile(scan, dtype="<f4").reshape(-1, 4)
        raw = np.fromfile(label_path, dtype="<u4") if label_path.exists() else np.zeros(0, "<u4")
        label, instance = unpack_labels(raw)
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
