"""What the per-hit model looks up besides the rays: the scene's per-object tables
(:class:`SceneTables`) and the survey's random streams (:class:`Streams`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..chunk import Hits
from ..constants import STREAM_MICRO_SLOPE, STREAM_RELIEF, STREAM_SENSOR_NOISE, stream_seed
from ..world.scene import MaterialTable, Scene

__all__ = ["SceneTables", "Streams"]


@dataclass(frozen=True)
class Streams:
    """Hash seeds of the independent random quantities, derived from the survey seed.

    Stream ``s`` is ``mix64(seed + s * GOLDEN_GAMMA)``: the s-th output of a SplitMix64
    generator started at the survey seed (:func:`simulator.constants.stream_seed`).
    """

    micro_slope: np.uint64
    relief: np.uint64
    sensor_noise: np.uint64

    @classmethod
    def from_seed(cls, seed: int) -> Streams:
        """Derive the streams of a survey seed."""
        return cls(
            np.uint64(stream_seed(seed, STREAM_MICRO_SLOPE)),
            np.uint64(stream_seed(seed, STREAM_RELIEF)),
            np.uint64(stream_seed(seed, STREAM_SENSOR_NOISE)),
        )

    def kernel_args(self) -> tuple[np.uint64, np.uint64, np.uint64]:
        """The streams as the kernels take them: ``(micro_slope, relief, sensor_noise)``."""
        return self.micro_slope, self.relief, self.sensor_noise


@dataclass(frozen=True)
class SceneTables:
    """Per-object lookups of material, label and instance, and the material table.

    Attributes
    ----------
    material_of_object, label_of_object, instance_of_object : (O,) int32, uint16, uint16
        By object (and by the weather's pseudo-objects after the scene's,
        :meth:`with_media`).
    materials : MaterialTable
        The named materials, then (with per-face materials) one row a face.
    material_of_row : (R,) int32 or None
        With per-face materials: the material of each material row (``Hits.material_row``):
        the objects' own ``material_of_object`` (rows ``0..O-1``), then each face's own
        row of ``materials`` (:meth:`simulator.world.scene.Scene.face_row_starts`). None
        without: the per-hit model looks materials up by object.
    """

    material_of_object: NDArray[np.int32]
    label_of_object: NDArray[np.uint16]
    instance_of_object: NDArray[np.uint16]
    materials: MaterialTable
    material_of_row: NDArray[np.int32] | None = None

    @classmethod
    def from_scene(cls, scene: Scene) -> SceneTables:
        """Build the lookups of a scene (with its faces' rows if some object has per-face
        materials: each face its object's material with the face's values in place,
        :meth:`MaterialTable.of_faces`)."""
        mat, lab, ins = scene.object_tables()
        materials = scene.material_table()
        if scene.face_row_starts() is None:
            return cls(mat, lab, ins, materials)
        faces = [MaterialTable.of_faces(scene.materials[o.material], o.face_materials)
                 for o in scene.objects if o.face_materials is not None]  # fmt: skip
        named = len(materials.reflectance)
        count = sum(len(f.reflectance) for f in faces)
        rows = np.concatenate([mat, named + np.arange(count)]).astype(np.int32)
        return cls(mat, lab, ins, materials.joined(faces), rows)

    def with_media(self, labels: NDArray[np.uint16]) -> SceneTables:
        """These tables with pseudo-objects after the scene's: one per kind of medium
        (weather), of the given labels, instance 0; no ray hits them."""
        n = len(labels)
        return SceneTables(
            np.concatenate([self.material_of_object, np.zeros(n, np.int32)]),
            np.concatenate([self.label_of_object, np.asarray(labels, np.uint16)]),
            np.concatenate([self.instance_of_object, np.zeros(n, np.uint16)]),
            self.materials,
            self.material_of_row,
        )

    def material_rows(self, hits: Hits) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
        """What the per-hit model looks each hit's material up by: ``(rows, material_of)``,
        the hit's material is ``material_of[rows[i]]`` (by object, or with per-face
        materials by material row).

        Raises
        ------
        ValueError
            If the hits and the tables disagree on per-face materials (hits cast without
            the scene's face rows would silently take their objects' materials).
        """
        if (hits.material_row is None) != (self.material_of_row is None):
            raise ValueError(
                "hits and scene tables disagree on per-face materials: cast the rays with "
                "a RayEngine of the scene the tables were made of"
            )
        if self.material_of_row is None:
            return hits.object_index, self.material_of_object
        assert hits.material_row is not None
        return hits.material_row, self.material_of_row

    def kernel_args(self, hits: Hits) -> tuple[NDArray[np.int32], tuple[NDArray, ...]]:
        """What the per-hit kernel looks materials up by (:meth:`material_rows`): ``(rows,
        (material_of, reflectance, minnaert_k, roughness_m, micro_slope_rad,
        micro_slope_cell_m))``, the hit's material ``material_of[rows[i]]`` and its values
        in the material table."""
        rows, material_of = self.material_rows(hits)
        mt = self.materials
        return rows, (material_of, mt.reflectance, mt.minnaert_k, mt.roughness_m,
                      mt.micro_slope_rad, mt.micro_slope_cell_m)  # fmt: skip
