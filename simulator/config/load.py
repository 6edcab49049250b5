"""Reading configuration files: YAML (safe loader only), presets, overrides, validation.

Paths inside a YAML file are relative to that file. Any problem is raised as
:class:`~simulator.errors.ConfigError`, naming the file, the dotted key and what was
expected.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..errors import ConfigError
from .base import did_you_mean, raise_validation
from .dataset import DatasetSpec
from .scanner import ScannerConfig
from .scene import Material, SceneSpec
from .survey import Survey

__all__ = [
    "apply_overrides",
    "config_dir",
    "deep_merge",
    "load_dataset_spec",
    "load_materials",
    "load_scanner",
    "load_scene_spec",
    "load_survey",
    "load_yaml",
    "referenced_file",
    "scanner_presets",
]


def config_dir() -> Path:
    """Directory of the bundled configuration (scanner presets, materials)."""
    source_tree = Path(__file__).resolve().parents[2] / "configs"
    if (source_tree / "materials.yaml").is_file():
        return source_tree
    return Path(str(resources.files("simulator") / "presets"))


def scanner_presets() -> dict[str, Path]:
    """Bundled scanner presets by name."""
    folder = config_dir() / "scanners"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


#: PyYAML's safe loader, in C where PyYAML was built with libyaml (ten times faster: the
#: 17 presets took 0.36 s to parse in Python, a third of ``lidar-sim scanners``).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with the safe loader.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    dict
        Its top-level mapping.

    Raises
    ------
    ConfigError
        If the file is missing, unreadable, not valid YAML or not a mapping.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(path, "", f"cannot be read ({exc})") from None
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(path, "", f"not valid YAML{where}: {problem}") from None
    if data is None:
        raise ConfigError(path, "", "file is empty; expected a mapping of keys")
    if not isinstance(data, dict):
        raise ConfigError(path, "", f"expected a mapping of keys, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError(path, str(bad[0]), "keys must be strings")
    return data


def referenced_file(base_dir: Path, name: str | Path, source: str | Path, key: str) -> Path:
    """The file that ``key`` of ``source`` names, relative to ``base_dir``.

    Raises
    ------
    ConfigError
        Naming ``source`` and ``key``, if there is no such file.
    """
    path = Path(base_dir) / name
    if not path.is_file():
        raise ConfigError(source, key, f"file not found: {path}")
    return path


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``extra`` merged in: mappings recursively, the rest replaced."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides (values parsed as YAML) to a mapping.

    Parameters
    ----------
    data : dict
        The parsed file.
    overrides : list of str
        E.g. ``["seed=3", "scanner_overrides.range_noise_m=0", "pose.position_m=[0,0,2]"]``.

    Returns
    -------
    dict
        A new mapping.
    """
    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError("--set", item, "expected dotted.key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError("--set", key, f"{part!r} is not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def _scanner_path(name: str, base_dir: Path, source: str | Path) -> Path:
    looks_like_path = name.endswith((".yaml", ".yml")) or "/" in name or "\\" in name
    if looks_like_path:
        path = Path(name)
        return path if path.is_absolute() else base_dir / path
    presets = scanner_presets()
    if name not in presets:
        hint = did_you_mean(name, presets)
        raise ConfigError(
            source,
            "scanner",
            f"unknown scanner preset {name!r}{f' ({hint})' if hint else ''}; "
            f"choose one of {', '.join(presets)}",
        )
    return presets[name]


def load_scanner(
    name_or_path: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    base_dir: Path | None = None,
    source: str | Path = "",
) -> ScannerConfig:
    """Load a scanner preset by name, or a scanner YAML by path, with overrides merged in.

    Parameters
    ----------
    name_or_path : str or Path
        A preset name (see :func:`scanner_presets`) or a path.
    overrides : dict, optional
        Deep-merged into the file's mapping before validation.
    base_dir : Path, optional
        Directory that a relative path is taken from (the survey's).
    source : str or Path
        The file that named the scanner, for error messages.
    """
    base = base_dir if base_dir is not None else Path.cwd()
    path = _scanner_path(str(name_or_path), base, source or str(name_or_path))
    data = load_yaml(path)
    table = data.get("table")
    if isinstance(table, dict) and isinstance(table.get("file"), str):
        table_path = Path(table["file"])
        if not table_path.is_absolute():
            data = {**data, "table": {**table, "file": str(path.parent / table_path)}}
    if overrides:
        data = deep_merge(data, overrides)
    try:
        return ScannerConfig.model_validate(data)
    except ValidationError as err:
        loc = err.errors(include_url=False)[0]["loc"]
        if overrides and source and loc and loc[0] in overrides:
            raise_validation(source, err, prefix="scanner_overrides")  # the survey's mistake
        raise_validation(f"{path} (with scanner_overrides)" if overrides else path, err)


def load_materials(path: str | Path | None = None) -> dict[str, Material]:
    """Load a material library (by default the bundled ``configs/materials.yaml``)."""
    path = Path(path) if path is not None else config_dir() / "materials.yaml"
    data = load_yaml(path)
    out: dict[str, Material] = {}
    for name, entry in data.items():
        try:
            out[name] = Material.model_validate(entry)
        except ValidationError as err:
            raise_validation(path, err, prefix=name)
    return out


def load_scene_spec(path: str | Path) -> SceneSpec:
    """Load and validate a scene YAML (meshes are not read here)."""
    data = load_yaml(path)
    try:
        return SceneSpec.model_validate(data)
    except ValidationError as err:
        raise_validation(path, err)


def load_survey(path: str | Path, overrides: list[str] | None = None) -> tuple[Survey, Path]:
    """Load and validate a survey YAML, with ``--set`` style overrides applied.

    Returns
    -------
    survey : Survey
        The validated survey.
    base_dir : Path
        The survey file's directory, which relative paths inside it start from.
    """
    path = Path(path)
    data = load_yaml(path)
    # An override of one of two alternatives replaces the other one given in the file.
    alternatives = {"duration_s": "revolutions", "revolutions": "duration_s",
                    "trajectory": "pose", "pose": "trajectory"}  # fmt: skip
    given = {o.partition("=")[0].strip().split(".")[0] for o in overrides or []}
    for key in given:
        other = alternatives.get(key)
        if other is not None and other not in given:
            data.pop(other, None)
    data = apply_overrides(data, overrides or [])
    try:
        survey = Survey.model_validate(data)
    except ValidationError as err:
        raise_validation(path, err)
    return survey, path.resolve().parent


def load_dataset_spec(path: str | Path) -> DatasetSpec:
    """Load and validate a dataset YAML."""
    try:
        spec = DatasetSpec.model_validate(load_yaml(path))
    except ValidationError as err:
        raise_validation(path, err)
    for i, g in enumerate(spec.groups):
        if (g.generator is None) == (g.scene is None):
            raise ConfigError(path, f"groups[{i}]", "give exactly one of generator or scene")
    return spec
