"""The point record: one set of parallel, named arrays per scan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .labels import count_labels, named_counts

__all__ = ["DIAGNOSTIC_FIELDS", "FIELDS", "FieldSpec", "PointCloud", "record_spec"]

#: Field name -> (dtype, trailing shape).
FieldSpec = dict[str, tuple[np.dtype, tuple[int, ...]]]

#: Always present: name -> (dtype, trailing shape).
FIELDS: dict[str, tuple[type, tuple[int, ...]]] = {
    "xyz": (np.float32, (3,)),
    "intensity": (np.float32, ()),
    "range_m": (np.float32, ()),
    "ring": (np.uint16, ()),
    "time_s": (np.float64, ()),
    "return_number": (np.uint8, ()),
    "num_returns": (np.uint8, ()),
    "label": (np.uint16, ()),
    "instance": (np.uint16, ()),
}

#: Present with ``output.diagnostics: true``: ground truth of the per-hit model.
DIAGNOSTIC_FIELDS: dict[str, tuple[type, tuple[int, ...]]] = {
    "range_true_m": (np.float64, ()),
    "cos_incidence": (np.float32, ()),
    "cos_effective": (np.float32, ()),
    "footprint_spread_m": (np.float32, ()),
    "peak_factor": (np.float32, ()),
    "object_id": (np.int32, ()),
    "pulse_id": (np.uint64, ()),
    "energy_fraction": (np.float32, ()),
}


def record_spec(diagnostics: bool = False) -> FieldSpec:
    """The fields of the point record, with the diagnostics or without."""
    spec = {**FIELDS, **(DIAGNOSTIC_FIELDS if diagnostics else {})}
    return {k: (np.dtype(d), s) for k, (d, s) in spec.items()}


@dataclass
class PointCloud:
    """Detected returns of a scan as parallel arrays.

    Attributes
    ----------
    fields : dict of str to ndarray
        ``xyz`` (N, 3) float32 in the output frame; ``intensity`` (N,) float32
        (calibrated reflectivity); ``range_m`` (N,) float32 (measured); ``ring`` (N,)
        uint16; ``time_s`` (N,) float64 from the survey start; ``return_number`` and
        ``num_returns`` (N,) uint8; ``label`` (N,) uint16 (SemanticKITTI);
        ``instance`` (N,) uint16; and with diagnostics the fields of
        :data:`DIAGNOSTIC_FIELDS`.
    meta : dict
        Scan facts that writers need: ``scanner``, ``frame``, ``intensity_max``,
        ``pulses``, ``seed``, ``sensor_position_m``, ``sensor_rotation``.
    """

    fields: dict[str, NDArray[Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = {k: len(v) for k, v in self.fields.items()}
        if len(set(n.values())) > 1:
            raise ValueError(f"fields differ in length: {n}")
        for name, (dtype, shape) in {**FIELDS, **DIAGNOSTIC_FIELDS}.items():
            if name in self.fields:
                arr = self.fields[name]
                if arr.dtype != dtype or arr.shape[1:] != shape:
                    raise ValueError(
                        f"field {name} must be {np.dtype(dtype)} {shape}, got {arr.dtype} "
                        f"{arr.shape[1:]}"
                    )

    def __len__(self) -> int:
        return len(self.fields["xyz"])

    def __getitem__(self, name: str) -> NDArray[Any]:
        return self.fields[name]

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    @property
    def names(self) -> list[str]:
        """Field names, in record order."""
        return list(self.fields)

    @classmethod
    def empty(cls, diagnostics: bool = False, meta: dict[str, Any] | None = None) -> PointCloud:
        """A cloud with no points and correctly typed fields."""
        spec = record_spec(diagnostics)
        return cls({k: np.zeros((0, *s), dtype=d) for k, (d, s) in spec.items()}, meta or {})

    @property
    def spec(self) -> FieldSpec:
        """Names, dtypes and trailing shapes of this cloud's fields."""
        return {k: (v.dtype, v.shape[1:]) for k, v in self.fields.items()}

    @classmethod
    def concatenate(cls, parts: list[PointCloud], meta: dict[str, Any] | None = None) -> PointCloud:
        """Join clouds with the same fields, in order."""
        if not parts:
            return cls.empty(meta=meta)
        names = parts[0].names
        fields = {k: np.concatenate([p.fields[k] for p in parts]) for k in names}
        return cls(fields, dict(meta if meta is not None else parts[0].meta))

    def select(self, mask: NDArray[np.bool_]) -> PointCloud:
        """The points where ``mask`` is true."""
        return PointCloud({k: v[mask] for k, v in self.fields.items()}, dict(self.meta))

    def label_counts(self) -> dict[str, int]:
        """Number of points per SemanticKITTI class name, most common first."""
        # Ties in the order of first appearance, as collections.Counter.most_common has it.
        return named_counts(count_labels(self.fields["label"], order="first"))
