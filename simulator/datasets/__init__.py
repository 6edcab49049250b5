"""Datasets: many labelled sequences generated in the layouts training code reads
(:mod:`~simulator.datasets.generate`), and read back for training
(:mod:`~simulator.datasets.read`). The layouts themselves are :mod:`simulator.io.layouts`.
"""

from __future__ import annotations

from .generate import SampleError, SequenceTask, run_dataset, run_sequence
from .read import SemanticKittiDataset, torch_dataset

__all__ = [
    "SampleError",
    "SemanticKittiDataset",
    "SequenceTask",
    "run_dataset",
    "run_sequence",
    "torch_dataset",
]
