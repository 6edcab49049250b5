"""Speed work that must not change behaviour: the lazy parts of start-up."""

from __future__ import annotations

import subprocess
import sys

LAZY_OPEN3D = """
import sys
from simulator.world.raycast import import_open3d

o3d = import_open3d()
web = [m for m in ("dash", "plotly", "werkzeug") if m in sys.modules]
scene = o3d.t.geometry.RaycastingScene()
print("web-before", ",".join(web) or "-")
print("draw", callable(o3d.visualization.draw_geometries))
from open3d.visualization import gui, rendering
print("gui", gui.Application is not None, rendering.OffscreenRenderer is not None)
print("web-after", "dash" in sys.modules)
print("same", import_open3d() is o3d)
"""


def test_open3d_imports_without_its_web_visualizer_and_loads_it_on_use() -> None:
    """The ray engine's Open3D comes without Dash/plotly (half a second of start-up);
    the visualization package is executed, whole, on its first use."""
    out = subprocess.run(
        [sys.executable, "-c", LAZY_OPEN3D], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:5] == ["web-before -", "draw True", "gui True True", "web-after True",
                       "same True"]  # fmt: skip
