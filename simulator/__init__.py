"""Ray-traced synthetic LiDAR scans with the calibrated radiometry of a real sensor.

The public API::

    import simulator
    cloud = simulator.scan("scenes/farm/survey.yaml")   # -> PointCloud
    simulator.write(cloud, "out/scan.las")
"""

from __future__ import annotations

from .config import (
    Material,
    ScannerConfig,
    Survey,
    load_scanner,
    load_survey,
    scanner_presets,
)
from .errors import ConfigError, OutputError, SceneError, SimulatorError
from .io import write
from .pipeline import Simulation, scan
from .pointcloud import PointCloud
from .scene import Scene, load_scene

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
