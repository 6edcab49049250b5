"""Configuration: pydantic models of surveys, scanners, materials, scenes and datasets, and
YAML loading. The foundation of the package: it imports only errors, labels and constants.

Every model forbids unknown keys, so a misspelt key is an error rather than a silently
ignored default. Files are read with ``yaml.safe_load`` only.
"""

from __future__ import annotations

from .base import (
    FiniteFloat,
    Model,
    NonNegFloat,
    PositiveFloat,
    Vec2Pos,
    Vec3,
    Vec3Pos,
    raise_validation,
)
from .dataset import DatasetSpec, SequenceGroup
from .ego import Ego, EgoBox
from .load import (
    apply_overrides,
    config_dir,
    deep_merge,
    load_dataset_spec,
    load_materials,
    load_scanner,
    load_scene_spec,
    load_survey,
    load_yaml,
    referenced_file,
    scanner_presets,
)
from .pose import Pose, Swing, TrajectorySpec, Waypoint
from .rosbag import Rosbag2Spec
from .scanner import (
    Channels,
    Detection,
    Divergence,
    OscillatingSpec,
    Prism,
    RasterSpec,
    Receiver,
    RisleySpec,
    ScannerConfig,
    TableSpec,
)
from .scene import (
    BoxSpec,
    CylinderSpec,
    GeneratorRef,
    Material,
    ObjectSpec,
    PartMapping,
    PartRule,
    PlaneSpec,
    SceneSpec,
    SphereSpec,
)
from .survey import OutputSpec, Survey
from .weather import Dust, Fog, Precipitation, Weather

__all__ = [
    "BoxSpec",
    "Channels",
    "CylinderSpec",
    "DatasetSpec",
    "Detection",
    "Divergence",
    "Dust",
    "Ego",
    "EgoBox",
    "FiniteFloat",
    "Fog",
    "GeneratorRef",
    "Material",
    "Model",
    "NonNegFloat",
    "ObjectSpec",
    "OscillatingSpec",
    "OutputSpec",
    "PartMapping",
    "PartRule",
    "PlaneSpec",
    "Pose",
    "PositiveFloat",
    "Precipitation",
    "Prism",
    "RasterSpec",
    "Receiver",
    "RisleySpec",
    "Rosbag2Spec",
    "ScannerConfig",
    "SceneSpec",
    "SequenceGroup",
    "SphereSpec",
    "Survey",
    "Swing",
    "TableSpec",
    "TrajectorySpec",
    "Vec2Pos",
    "Vec3",
    "Vec3Pos",
    "Waypoint",
    "Weather",
    "apply_overrides",
    "config_dir",
    "deep_merge",
    "load_dataset_spec",
    "load_materials",
    "load_scanner",
    "load_scene_spec",
    "load_survey",
    "load_yaml",
    "raise_validation",
    "referenced_file",
    "scanner_presets",
]
