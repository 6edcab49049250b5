"""The SemanticKITTI label codec: one uint32 a point, semantic id in the low 16 bits and
instance id in the high 16 (little-endian on disk)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["pack_labels", "unpack_labels"]


def pack_labels(label: ArrayLike, instance: ArrayLike) -> NDArray[np.uint32]:
    """Pack semantic and instance ids into SemanticKITTI ``.label`` words.

    Parameters
    ----------
    label : (N,) array of uint16
        SemanticKITTI semantic ids.
    instance : (N,) array of uint16
        Instance ids.

    Returns
    -------
    (N,) ndarray of ``<u4``
        ``label | instance << 16``; ``.tobytes()`` is the ``.label`` file's content.
    """
    label, instance = np.asarray(label), np.asarray(instance)
    if label.shape != instance.shape:
        raise ValueError(f"label {label.shape} and instance {instance.shape} differ in shape")
    return label.astype("<u4") | (instance.astype("<u4") << np.uint32(16))


def unpack_labels(raw: ArrayLike) -> tuple[NDArray[np.uint16], NDArray[np.uint16]]:
    """Split SemanticKITTI ``.label`` words into semantic and instance ids.

    Parameters
    ----------
    raw : (N,) array of uint32
        The words, as ``np.fromfile(path, dtype="<u4")`` reads them.

    Returns
    -------
    label, instance : (N,) ndarray of uint16
        The low and the high 16 bits.
    """
    raw = np.asarray(raw, dtype="<u4")
    return (raw & 0xFFFF).astype(np.uint16), (raw >> 16).astype(np.uint16)
