"""Ray-traced synthetic LiDAR scans with the calibrated radiometry of a real sensor.

The public API::

    import simulator
    cloud = simulator.scan("scenes/farm/survey.yaml")   # -> PointCloud
    simulator.write(cloud, "out/scan.las")
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, OutputError, SceneError, SimulatorError

if TYPE_CHECKING:
    from .config import Material, ScannerConfig, Survey, load_scanner, load_survey, scanner_presets
    from .io import write
    from .pipeline.simulation import Simulation, scan
    from .pointcloud import PointCloud
    from .world.scene import Scene, load_scene

#: Public names and the module each comes from: imported on first use, so that ``import
#: simulator`` (and ``lidar-sim --help``) does not load trimesh, Open3D and numba.
_LAZY = {
    "Material": "config", "ScannerConfig": "config", "Survey": "config",
    "load_scanner": "config", "load_survey": "config", "scanner_presets": "config",
    "write": "io", "Simulation": "pipeline", "scan": "pipeline",
    "PointCloud": "pointcloud", "Scene": "world.scene", "load_scene": "world.scene",
}  # fmt: skip


#: Modules moved into folders in release 0.2, by their old name: importing the old path
#: gives the new module (and a DeprecationWarning) for one release, so that users' imports
#: and objects pickled under the old names (a parts cache, a Dask graph) still load.
MOVED = {
    "scanner": "sensor.scanner", "trajectory": "sensor.trajectory",
    "scene": "world.scene", "meshcache": "world.meshcache", "raycast": "world.raycast",
    "boxes": "world.boxes",
    "rays": "steps.rays", "hits": "steps.hits", "echoes": "steps.echoes",
    "weather": "steps.weather", "footprint": "steps.footprint", "record": "steps.record",
    "twin": "reconstruct.twin", "beamcheck": "calibrate.beamcheck", "bench_scene": "bench.scene",
}  # fmt: skip


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``simulator.<old>`` for each name of :data:`MOVED` and loads it as the module
    at its new path (the same module object under both names)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        old = fullname.removeprefix(f"{__name__}.")
        if old == fullname or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> Any:
        new = f"{__name__}.{MOVED[spec.name.removeprefix(f'{__name__}.')]}"
        warnings.warn(
            f"{spec.name} has moved to {new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: Any) -> None:
        del module  # already executed under its new name


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


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
