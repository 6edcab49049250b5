"""Ray-traced synthetic LiDAR scans with the calibrated radiometry of a real sensor.

The public API::

    import simulator
    cloud = simulator.scan("scenes/farm/survey.yaml")   # -> PointCloud
    simulator.write(cloud, "out/scan.las")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, OutputError, SceneError, SimulatorError

if TYPE_CHECKING:
    from .config import Material, ScannerConfig, Survey, load_scanner, load_survey, scanner_presets
    from .io import write
    from .pipeline import Simulation, scan
    from .pointcloud import PointCloud
    from .scene import Scene, load_scene

#: Public names and the module each comes from: imported on first use, so that ``import
#: simulator`` (and ``lidar-sim --help``) does not load trimesh, Open3D and numba.
_LAZY = {
    "Material": "config", "ScannerConfig": "config", "Survey": "config",
    "load_scanner": "config", "load_survey": "config", "scanner_presets": "config",
    "write": "io", "Simulation": "pipeline", "scan": "pipeline",
    "PointCloud": "pointcloud", "Scene": "scene", "load_scene": "scene",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    """The lazy public names, and the submodules (``simulator.config``, ...) by attribute."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    else:
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # a dependency of that submodule is missing: say so
            raise AttributeError(f"module 'simulator' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Material",
    "OutputError",
    "PointCloud",
    "ScannerConfig",
    "Scene",
    "SceneError",
    "Simulation",
    "SimulatorError",
    "Survey",
    "__version__",
    "load_scanner",
    "load_scene",
    "load_survey",
    "scan",
    "scanner_presets",
    "write",
]
