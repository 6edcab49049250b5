"""Scene models: materials, primitives and mesh objects, and the scene file."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..labels import SEMANTIC_KITTI
from .base import FiniteFloat, Model, NonNegFloat, PositiveFloat, Vec2Pos, Vec3, Vec3Pos
from .pose import TrajectorySpec

__all__ = [
    "GLASS_PANE_REFLECTANCE",
    "GLASS_REFRACTIVE_INDEX",
    "TRANSMITTANCE_LAWS",
    "BoxSpec",
    "CylinderSpec",
    "GeneratorRef",
    "Material",
    "ObjectSpec",
    "PartMapping",
    "PartRule",
    "PlaneSpec",
    "SceneSpec",
    "SphereSpec",
]


#: Refractive index of the glass of a pane of ``transmittance_law: fresnel``.
GLASS_REFRACTIVE_INDEX = 1.5
#: What such a pane reflects at normal incidence: ``2 r / (1 + r)`` (two faces, the
#: reflections between them summed incoherently), ``r = ((n - 1) / (n + 1))^2`` a face:
#: 0.0769 for n = 1.5 (Born & Wolf, Principles of Optics, 1.5.3).
_GLASS_FACE = ((GLASS_REFRACTIVE_INDEX - 1.0) / (GLASS_REFRACTIVE_INDEX + 1.0)) ** 2
GLASS_PANE_REFLECTANCE = 2.0 * _GLASS_FACE / (1.0 + _GLASS_FACE)
#: The transmittance laws, in the order of their codes (``law_of_object``).
TRANSMITTANCE_LAWS = ("constant", "fresnel", "path_length")


class Material(Model):
    """Surface properties that the per-hit model needs."""

    reflectance: NonNegFloat = Field(description="diffuse reflectance at normal incidence")
    minnaert_k: NonNegFloat
    roughness_m: NonNegFloat = 0.0
    micro_slope_deg: Annotated[float, Field(ge=0, lt=90, allow_inf_nan=False)] = 0.0
    micro_slope_cell_m: PositiveFloat = 0.1
    #: The share of the beam that passes the surface (clear glass 0.8-0.9, foliage as a
    #: porous layer); the pulse continues behind it with that share, each way.
    transmittance: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    #: A see-through surface is a pane (``false``: glass; it returns ``reflectance`` of the
    #: light that meets it and passes ``transmittance`` each way, ``T^2`` there and back) or
    #: a porous layer (``true``: foliage, wire mesh; by the gap model of canopy lidar, the
    #: share ``1 - T`` of the beam meets its elements and returns ``reflectance`` of that,
    #: and the share ``T`` goes through a gap and comes back through the same gap, ``T``
    #: there and back).
    porous: bool = False
    #: How the transmittance depends on the incidence ``theta`` (the angle between the
    #: ray and the surface's normal): ``constant`` (the same at every angle), ``fresnel``
    #: (a pane's law: an uncoated glass pane, n = 1.5, two faces, unpolarised light;
    #: ``transmittance`` at normal incidence times ``T(theta) / T(0)`` of the Fresnel
    #: equations, 0 at grazing incidence, and the pane's own echo ``reflectance`` times
    #: ``R(theta) / R(0)``, what the pane reflects, ``R = 1 - T``; needs ``reflectance``
    #: at most ``R(0)`` = 0.0769 and ``reflectance + transmittance`` at most 1, so that
    #: the pane never returns and passes more than the light that meets it) or
    #: ``path_length`` (a porous layer's law: the beam crosses ``1 / cos(theta)`` times
    #: the layer's depth, so the gap probability is ``T(theta) = transmittance^(1 /
    #: cos(theta))``, Beer-Lambert's gap model of a canopy, Nilson 1971; the layer's echo
    #: is ``(1 - T(theta)) reflectance``).
    transmittance_law: Literal["constant", "fresnel", "path_length"] = "constant"
    label: str = "unlabeled"
    description: str = ""

    @field_validator("transmittance_law")
    @classmethod
    def _law_of_its_kind(cls, v: str, info: ValidationInfo) -> str:
        porous = info.data.get("porous", False)
        if v == "fresnel" and porous:
            raise ValueError("fresnel is the law of a glass pane; expected porous: false")
        if v == "path_length" and not porous:
            raise ValueError("path_length is the law of a porous layer; expected porous: true")
        if v == "fresnel":
            rho, t = info.data.get("reflectance", 0.0), info.data.get("transmittance", 0.0)
            if rho > GLASS_PANE_REFLECTANCE:
                raise ValueError(
                    f"a fresnel pane's reflectance {rho} would return more than the light "
                    f"that meets it at grazing incidence; expected reflectance at most "
                    f"{GLASS_PANE_REFLECTANCE:.4f} (the pane's Fresnel reflectance at "
                    f"normal incidence, n = {GLASS_REFRACTIVE_INDEX})"
                )
            if rho + t > 1.0:
                raise ValueError(
                    f"a fresnel pane returns and passes more than the light that meets it "
                    f"(reflectance {rho} + transmittance {t}); expected at most 1"
                )
        return v

    @field_validator("label")
    @classmethod
    def _known_label(cls, v: str) -> str:
        if v not in SEMANTIC_KITTI:
            raise ValueError(
                f"unknown SemanticKITTI class {v!r}; expected one of {', '.join(SEMANTIC_KITTI)}"
            )
        return v


class PlaneSpec(Model):
    size_m: Vec2Pos


class BoxSpec(Model):
    size_m: Vec3Pos


class CylinderSpec(Model):
    radius_m: PositiveFloat
    height_m: PositiveFloat
    sections: Annotated[int, Field(ge=3, le=4096)] = 32


class SphereSpec(Model):
    radius_m: PositiveFloat
    subdivisions: Annotated[int, Field(ge=0, le=6)] = 3


_GEOMETRY_KEYS = ("mesh", "plane", "box", "cylinder", "sphere")


def _optional_label(v: str | None) -> str | None:
    """A SemanticKITTI class name, or None (a label override left out)."""
    if v is not None and v not in SEMANTIC_KITTI:
        raise ValueError(f"unknown SemanticKITTI class {v!r}")
    return v


class PartRule(Model):
    """Which label, material and instance the parts of a mesh file get, by name.

    A part (a geometry node of a glTF, OBJ or PLY file) is matched by ``match``, a glob on
    its node name (``car_*/window*``), and/or ``match_material``, a glob on the mesh's own
    material name; the first rule that matches decides. ``instance``: ``part`` gives each
    matching part an id of its own, ``object`` the object's one id, a number that id;
    ``group``, a regular expression, gives the parts whose first group (or whole match)
    is the same one id (``^(car_\\d+)/`` makes every part of ``car_3`` one car).
    ``heading_deg``: where the countable object's front points in the part's own frame
    (deg about its z axis from its x axis; the file's node transform and the object's
    placement turn it into the world), so a static car from a mesh file gets a box that
    faces its front instead of the long-side rule's (which cannot tell front from back).
    """

    match: str | None = None
    match_material: str | None = None
    label: str | None = None
    material: str | Material | None = None
    instance: Literal["part", "object"] | Annotated[int, Field(ge=0, le=65535)] | None = None
    group: str | None = None
    heading_deg: FiniteFloat | None = None

    @model_validator(mode="after")
    def _matches_something(self) -> PartRule:
        if self.match is None and self.match_material is None:
            raise ValueError("a rule needs match (node name) or match_material (a glob)")
        if self.group is not None:
            try:
                re.compile(self.group)
            except re.error as exc:
                raise ValueError(f"group is not a regular expression: {exc}") from None
        return self

    @field_validator("label")
    @classmethod
    def _known_label(cls, v: str | None) -> str | None:
        return _optional_label(v)


class PartMapping(Model):
    """A mapping file: the rules for the parts of a mesh, first match first."""

    parts: Annotated[list[PartRule], Field(min_length=1)]


class ObjectSpec(Model):
    """One object of a scene: a mesh file or a primitive, placed and given a material."""

    name: Annotated[str, Field(min_length=1)]
    mesh: str | None = None
    plane: PlaneSpec | None = None
    box: BoxSpec | None = None
    cylinder: CylinderSpec | None = None
    sphere: SphereSpec | None = None
    position_m: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation_deg: Vec3 = Field(default_factory=lambda: [0.0, 0.0, 0.0])
    scale: PositiveFloat | Vec3Pos = 1.0
    material: str | Material | None = None
    label: str | None = None
    instance: Annotated[int, Field(ge=0, le=65535)] | None = None
    #: A moving object: its pose over time (world from object); the placement above is
    #: then within the object's own frame.
    trajectory: TrajectorySpec | None = None
    #: For a mesh file: rules that give its parts labels, materials and instances by
    #: name, inline or in a mapping YAML file (``{parts: [...]}``, relative to the scene).
    parts: list[PartRule] | str | None = None

    @model_validator(mode="after")
    def _one_geometry(self) -> ObjectSpec:
        given = [k for k in _GEOMETRY_KEYS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one of {', '.join(_GEOMETRY_KEYS)}; got "
                f"{', '.join(given) if given else 'none'}"
            )
        if self.mesh is None and self.material is None:
            raise ValueError("a primitive needs a material (a library name or a mapping)")
        if self.mesh is None and self.parts is not None:
            raise ValueError("parts (rules for a mesh file's parts) needs mesh")
        return self

    @field_validator("label")
    @classmethod
    def _known_label(cls, v: str | None) -> str | None:
        return _optional_label(v)

    @property
    def geometry_kind(self) -> str:
        """Which of mesh, plane, box, cylinder, sphere this object is."""
        return next(k for k in _GEOMETRY_KEYS if getattr(self, k) is not None)


class GeneratorRef(Model):
    """A procedural scene (``street``, ``farm_yard``) and its seed."""

    name: Annotated[str, Field(min_length=1)]
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0


class SceneSpec(Model):
    """A scene file: an optional material library, an optional generated scene, and a list
    of objects (added to the generated ones)."""

    materials: dict[str, Material] = Field(default_factory=dict)
    default_material: str | None = None
    generator: GeneratorRef | None = None
    objects: list[ObjectSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _something(self) -> SceneSpec:
        if not self.objects and self.generator is None:
            raise ValueError("a scene needs objects (a list of at least one) or a generator")
        return self
