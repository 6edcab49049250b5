"""``lidar-sim validate``: what a file is, checked in depth (a survey with its scanner and
scene, a dataset spec, a scanner, a scene or a material library)."""

from __future__ import annotations

from pathlib import Path

from .config import (
    load_dataset_spec,
    load_materials,
    load_scanner,
    load_survey,
    load_yaml,
    referenced_file,
)
from .errors import ConfigError
from .sensor.scanner import pattern_for

__all__ = ["validate_file"]


def validate_file(path: str | Path) -> str:
    """Validate a survey, scanner, scene or material file; return what it was found to be.

    A survey is checked in depth: its scanner (with overrides) and scene file too.
    """
    path = Path(path)
    data = load_yaml(path)
    if "scene" in data and "scanner" in data:
        from .world.ego import ego_geometry
        from .world.scene import load_scene  # trimesh: only for the files that hold a scene

        survey, base = load_survey(path)
        scanner = load_scanner(survey.scanner, survey.scanner_overrides, base_dir=base, source=path)
        scene = load_scene(referenced_file(base, survey.scene, path, "scene"))
        ego = ego_geometry((scanner.ego, survey.ego), base, path)
        blocker = "" if ego is None else f", a vehicle of {len(ego[1])} triangles under the sensor"
        return (
            f"survey: scanner {scanner.name} ({pattern_for(scanner).channels} channels), "
            f"scene with {len(scene.objects)} objects, {scene.triangle_count} triangles, "
            f"{survey.weather.describe()}{blocker}"
        )
    if "pattern" in data or "channels" in data:
        scanner = load_scanner(path)
        return f"scanner: {scanner.name}, {pattern_for(scanner).channels} channels"
    if "groups" in data:
        spec = load_dataset_spec(path)
        bags, how = spec.rosbag2, ""
        if bags is not None:
            how = f" ({bags.storage}, {bags.point_layout} points, frame {bags.frame_id})"
        groups, samples = len(spec.groups), spec.sample_count
        return f"dataset: {groups} groups, {samples} samples, {spec.layout} layout{how}"
    if "objects" in data or "generator" in data:
        from .world.scene import load_scene

        scene = load_scene(path)
        return f"scene: {len(scene.objects)} objects, {scene.triangle_count} triangles"
    if all(isinstance(v, dict) and "reflectance" in v for v in data.values()):
        return f"materials: {len(load_materials(path))} entries"
    raise ConfigError(
        path,
        "",
        "not a recognised file: a survey has 'scanner' and 'scene', a scanner 'pattern', "
        "a scene 'objects' or 'generator', a material library maps names to entries with "
        "'reflectance'",
    )
