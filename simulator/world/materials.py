"""Materials as the per-hit model reads them: the scene's material table (one row a
material, and one a face for a mesh whose faces carry their own values), and the checks of
per-face values (a PLY file's face properties) against what a material allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..config import Material
from ..config.scene import GLASS_PANE_REFLECTANCE
from ..errors import ConfigError

__all__ = [
    "FACE_MATERIAL_KEYS",
    "MaterialTable",
    "check_face_values",
    "check_faces_fit",
]

#: The material keys whose values a mesh's faces may carry (PLY face properties of these
#: names), in place of its object's material: the per-hit model's per-surface quantities
#: that a capture can fit face by face. Everything else (transmittance, micro-slope, label,
#: instance) stays the object's.
FACE_MATERIAL_KEYS = ("reflectance", "minnaert_k", "roughness_m")


@dataclass
class MaterialTable:
    """Material properties as arrays indexed by material number, for vectorised lookup.

    Attributes
    ----------
    names : list of str
        The named materials' names, (M,). A scene with per-face materials has one more
        row a face past them (:meth:`of_faces`, :meth:`joined`), unnamed.
    reflectance, minnaert_k, roughness_m, micro_slope_rad, micro_slope_cell_m : (M,) float64
    transmittance : (M,) float64
        The share of the beam that passes (0: opaque).
    porous : (M,) bool
        A porous layer (what is behind it gets ``T`` of the light there and back, through
        one gap), not a pane (``T^2``).

    A porous layer's ``reflectance`` here is its elements' reflectance times the share of
    the beam that meets them, ``(1 - T) rho``: the per-hit model's reflectance of the layer.
    """

    names: list[str]
    reflectance: NDArray[np.float64]
    minnaert_k: NDArray[np.float64]
    roughness_m: NDArray[np.float64]
    micro_slope_rad: NDArray[np.float64]
    micro_slope_cell_m: NDArray[np.float64]
    transmittance: NDArray[np.float64]
    porous: NDArray[np.bool_]

    @classmethod
    def from_materials(cls, materials: dict[str, Material]) -> MaterialTable:
        """Build the table from named materials (in their order)."""
        ms = list(materials.values())

        def col(attr: str) -> NDArray[np.float64]:
            return np.array([getattr(m, attr) for m in ms], dtype=np.float64)

        t = col("transmittance")
        porous = np.array([m.porous for m in ms], dtype=bool)
        return cls(
            names=list(materials),
            reflectance=np.where(porous, col("reflectance") * (1.0 - t), col("reflectance")),
            minnaert_k=col("minnaert_k"),
            roughness_m=col("roughness_m"),
            micro_slope_rad=np.radians(col("micro_slope_deg")),
            micro_slope_cell_m=col("micro_slope_cell_m"),
            transmittance=t,
            porous=porous,
        )

    @classmethod
    def of_faces(
        cls, material: Material, values: Mapping[str, NDArray[np.float64]]
    ) -> MaterialTable:
        """One row a face: ``material`` with each face's values in place of its own.

        Parameters
        ----------
        material : Material
            The face's object's material (every key a face does not carry, and the
            transmittance, porosity and micro-slope of all of them).
        values : dict of str to (F,) float64
            Some of :data:`FACE_MATERIAL_KEYS` (validated: :func:`check_face_values`).

        Returns
        -------
        MaterialTable
            F unnamed rows. A porous layer's face reflectance is ``(1 - T) rho``, as in
            :meth:`from_materials`.
        """
        n = len(next(iter(values.values())))

        def col(attr: str) -> NDArray[np.float64]:
            given = values.get(attr)
            if given is not None:
                return np.asarray(given, dtype=np.float64)
            return np.full(n, getattr(material, attr), dtype=np.float64)

        t = col("transmittance")
        rho = col("reflectance")
        return cls(
            names=[],
            reflectance=rho * (1.0 - t) if material.porous else rho,
            minnaert_k=col("minnaert_k"),
            roughness_m=col("roughness_m"),
            micro_slope_rad=np.radians(col("micro_slope_deg")),
            micro_slope_cell_m=col("micro_slope_cell_m"),
            transmittance=t,
            porous=np.full(n, material.porous, dtype=bool),
        )

    def joined(self, more: Sequence[MaterialTable]) -> MaterialTable:
        """This table with the rows of ``more`` after its own (their names are not
        kept: they are faces' rows)."""
        if not more:
            return self

        def cat(attr: str) -> NDArray:
            return np.concatenate([getattr(self, attr)] + [getattr(m, attr) for m in more])

        return MaterialTable(
            names=list(self.names),
            **{f: cat(f) for f in ("reflectance", "minnaert_k", "roughness_m",
                                  "micro_slope_rad", "micro_slope_cell_m", "transmittance",
                                  "porous")},
        )  # fmt: skip


def check_face_values(
    values: Mapping[str, Any], faces: int, source: str | Path
) -> dict[str, NDArray[np.float64]]:
    """Per-face material values checked as a material's own values are checked.

    Parameters
    ----------
    values : dict of str to (F,) float
        Some of :data:`FACE_MATERIAL_KEYS`, one value a face (an (F, 1) column is taken
        as (F,)).
    faces : int
        F, the mesh's triangles.
    source : str or Path
        The mesh file, for the message.

    Returns
    -------
    dict of str to (F,) float64
        In the order of :data:`FACE_MATERIAL_KEYS`.

    Raises
    ------
    ConfigError
        Naming ``source``, the key and what was expected: an unknown key, a value that is
        not a float, a length other than F, a value not finite or below 0 (as a
        :class:`~simulator.config.Material`'s ``reflectance``, ``minnaert_k`` and
        ``roughness_m`` must be).
    """
    unknown = sorted(set(values) - set(FACE_MATERIAL_KEYS))
    if unknown:
        raise ConfigError(
            source, unknown[0], f"not a per-face material key; expected one of "
            f"{', '.join(FACE_MATERIAL_KEYS)}"
        )  # fmt: skip
    out: dict[str, NDArray[np.float64]] = {}
    for key in FACE_MATERIAL_KEYS:
        if key not in values:
            continue
        given = np.asarray(values[key])
        if given.ndim == 2 and given.shape[1] == 1:
            given = given[:, 0]
        if given.dtype.kind != "f":
            raise ConfigError(
                source, key, f"a face property of type {given.dtype}; expected float32 or "
                f"float64 values, one a face"
            )  # fmt: skip
        if given.shape != (faces,):
            raise ConfigError(
                source, key, f"{given.shape[0] if given.ndim else 0} values for {faces} "
                f"triangles; expected one a triangle (face properties need a mesh of "
                f"triangles, each face one triangle)"
            )  # fmt: skip
        column = given.astype(np.float64)
        bad = np.flatnonzero(~(np.isfinite(column) & (column >= 0.0)))
        if len(bad):
            raise ConfigError(
                source, key, f"face {bad[0]} is {column[bad[0]]!r} ({len(bad)} of {faces} "
                f"faces are not valid); expected finite values >= 0, as a material's {key}"
            )  # fmt: skip
        out[key] = column
    return out


def check_faces_fit(
    values: dict[str, NDArray[np.float64]], material: Material, source: str | Path
) -> None:
    """Per-face values checked against what their object's material allows beside them:
    a ``fresnel`` pane's reflectance at most the pane's Fresnel reflectance and, with its
    transmittance, at most 1 (as :class:`~simulator.config.Material` checks its own)."""
    rho = values.get("reflectance")
    if rho is None or material.transmittance_law != "fresnel":
        return
    bad = np.flatnonzero((rho > GLASS_PANE_REFLECTANCE) | (rho + material.transmittance > 1.0))
    if len(bad):
        raise ConfigError(
            source, "reflectance", f"face {bad[0]} is {rho[bad[0]]!r}; the faces' material "
            f"is a fresnel pane (transmittance {material.transmittance}): expected at most "
            f"{GLASS_PANE_REFLECTANCE:.4f} and at most 1 - transmittance"
        )  # fmt: skip
