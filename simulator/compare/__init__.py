"""Compare two point clouds, typically a real capture (A) against a simulated scan (B).

:func:`compare_clouds` gives the figures (a JSON-ready dict of fixed keys): geometric
agreement (chamfer distance, F-score from nearest neighbours found with Open3D), the
return share per ring, the distance between the intensity and range distributions and,
when both clouds share one beam grid, the per-beam agreement (``same_beams``: ray drop,
depth and intensity errors). The ``nvs`` block gives the measures of the neural LiDAR
novel-view-synthesis papers computed as LiDAR4D's evaluation code computes them
(:func:`nvs_figures`; its definitions differ from ours, see there). :func:`format_compare`
is the short terminal summary; the page (PNG plots under a table of the figures) is
:func:`simulator.viz.compare.write_compare_page`.

The package, one module a part:

- :mod:`.metrics`: :func:`compare_clouds` and its figures (rings, distributions, same
  beams), :func:`format_compare`;
- :mod:`.nvs`: the ``nvs`` block, LiDAR4D's measures (:func:`nvs_figures`);
- :mod:`.rings`: ring matching by elevation (:func:`match_rings`,
  :func:`ring_elevations_deg`), :func:`firings_per_ring`, :func:`grouped_median`;
- :mod:`.common`: what all of them (and the page) read of a cloud: first returns, ranges,
  usable points, the shared beam grid, nearest neighbours.

Fields a cloud lacks (a real capture may hold only ``xyz``) make the figures that need
them ``None`` and the plots say "not in A" (or B).

Bad values: the ``compare`` command refuses them. It reads its clouds with
:func:`simulator.io.read.read`, which refuses a file holding a non-finite or out-of-range
coordinate, range or intensity (one line naming the file, the field and how many points:
:func:`simulator.io.read.check_values`), and a survey's scan holds none. A cloud handed to
:func:`compare_clouds` in code is not refused: its points with a non-finite coordinate, range
or intensity, or a coordinate or range beyond :data:`RANGE_LIMIT_M`, are left out of every
figure (as if they had not returned), never binned, and counted in ``nvs["points_left_out"]``.

Names kept here for compatibility (``simulator.compare`` was one module until the package
was split; import them from their module in new code): the constants
``DEFAULT_INTENSITY_MAX`` (:mod:`.common`), ``NVS_MIN_DEPTH_M``, ``NVS_MAX_DEPTH_M``,
``NVS_MIN_INTENSITY``, ``NVS_F_SCORE_THRESHOLD_M2``, ``NVS_RAY_DROP_RATIO`` and
``SSIM_WINDOW`` (:mod:`.nvs`), and :func:`ring_elevations_deg` (:mod:`.rings`), none of
them in ``__all__``. The names of ``__all__`` are the package's public face.
``write_compare_page`` is no longer here: it moved to :mod:`simulator.viz.compare`, which
imports this package, so re-exporting it here would make an import circle.
"""

from __future__ import annotations

from .common import AZIMUTH_COLUMNS, RANGE_LIMIT_M
from .common import DEFAULT_INTENSITY_MAX as DEFAULT_INTENSITY_MAX
from .metrics import INTENSITY_BINS, RANGE_BIN_M, compare_clouds, format_compare
from .nvs import LIDAR4D_COMMIT, NVS_TABLE_KEYS, nvs_figures
from .nvs import NVS_F_SCORE_THRESHOLD_M2 as NVS_F_SCORE_THRESHOLD_M2
from .nvs import NVS_MAX_DEPTH_M as NVS_MAX_DEPTH_M
from .nvs import NVS_MIN_DEPTH_M as NVS_MIN_DEPTH_M
from .nvs import NVS_MIN_INTENSITY as NVS_MIN_INTENSITY
from .nvs import NVS_RAY_DROP_RATIO as NVS_RAY_DROP_RATIO
from .nvs import SSIM_WINDOW as SSIM_WINDOW
from .rings import firings_per_ring, grouped_median, match_rings
from .rings import ring_elevations_deg as ring_elevations_deg

__all__ = [
    "AZIMUTH_COLUMNS",
    "INTENSITY_BINS",
    "LIDAR4D_COMMIT",
    "NVS_TABLE_KEYS",
    "RANGE_BIN_M",
    "RANGE_LIMIT_M",
    "compare_clouds",
    "firings_per_ring",
    "format_compare",
    "grouped_median",
    "match_rings",
    "nvs_figures",
]
