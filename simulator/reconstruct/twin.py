"""The calibrated scene re-scanned against the real frame (``lidar-sim calibrate --twin DIR``).

What ``calibrate`` found in a real scan (its surfaces, each a plane with a fitted material,
and the sensor's fitted overrides) is rebuilt as a scene of meshes (:func:`_surface_mesh`: the
ground a rectangle over its points' extent, any other surface the cells its points occupy,
holes closed), seen from the real sensor's pose. The twin survey scans it
with the same scanner, and the two frames are compared beam by beam:

- every beam of one revolution of the scanner (ring ``c``, column ``j``) is aimed in the
  twin's geometry (Open3D casts them); the beams that meet a surface first are its beams;
- the real frame's points are put on the same grid (a capture that records its grid, an
  Ouster frame, gives its own ``column``; for others the column follows from each point's
  azimuth and the pattern, and rings are matched by elevation:
  :func:`simulator.reconstruct.grid.beam_indices`);
- a surface's beam counts where the real frame either returned from that surface or
  returned nothing; a beam whose real return lies on something else (an object in front
  the twin does not have) is left out;
- per ring, the return share of the real frame and of the twin on those beams, the median
  intensity of each, and on the ground the share against range (where a ring drops out).

The vehicle under the sensor is estimated from the frame as ``reconstruct`` estimates it
(:mod:`simulator.reconstruct.ego`: the beams below the horizon that return nothing, or only
from within the body, in runs held up from the lowest ring) and scanned with the twin, as
``DIR/ego.ply`` and the survey's ``ego:`` section, so the twin drops out where the real
frame does behind and below the sensor.

``DIR/compare.json`` has :func:`simulator.compare.compare_clouds`'s keys (the real points on
the surfaces against the twin's points, with ``rings`` the per-surface-beam shares above);
``DIR/twin.json`` the goals per surface (return share per ring within 0.05 on 90 % of the
rings, median intensity per ring within 15 %); ``DIR/index.html`` the plots.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from ..calibrate import Calibration
from ..calibrate.outputs import CalibrationFiles
from ..calibrate.receiver import BeamEvidence, ReceiverFit, fit_receiver
from ..compare import compare_clouds, grouped_median
from ..config import deep_merge
from ..errors import ConfigError
from ..io.atomic import atomic_path, write_atomic
from ..pipeline.simulation import Simulation
from ..pointcloud import PointCloud
from ..sensor.scanner import SpinningPattern
from .ego import EgoEstimate, EgoParams, ego_section, estimate_ego, write_ego_mesh
from .grid import beam_indices, beam_rays, organize

__all__ = [
    "INTENSITY_TOLERANCE",
    "SHARE_TOLERANCE",
    "TwinResult",
    "frame_ego",
    "run_twin",
    "twin_of",
    "write_twin",
]

#: A ring's return share agrees when within this of the real one.
SHARE_TOLERANCE = 0.05
#: A ring's median intensity agrees when within this fraction of the real one.
INTENSITY_TOLERANCE = 0.15
#: Rings with fewer surface beams than this are not judged.
MIN_RING_BEAMS = 20
_MARGIN_M = 0.1


@dataclass
class TwinResult:
    """What the twin found: the compare figures, the per-surface goals, the files, and
    the ego scanned with it (:meth:`.ego.EgoEstimate.summary`; None when not asked for)."""

    compare: dict[str, Any]
    surfaces: dict[str, dict[str, Any]]
    files: list[Path]
    ego: dict[str, Any] | None = None
    #: The receiver's laws fitted to the beams (None: not asked for).
    receiver: ReceiverFit | None = None
    #: The scanner overrides the twin scanned with (the calibrated ones, and the receiver's).
    overrides: dict[str, Any] = field(default_factory=dict)
    #: The beams the receiver's laws were fitted to (None: not asked for).
    evidence: BeamEvidence | None = None

    def lines(self) -> list[str]:
        """Per surface, the rings judged and the shares of them within the goals, and what
        the twin misses; then the files written."""
        lines = [] if self.receiver is None else self.receiver.lines()
        for name, f in self.surfaces.items():
            share, level = f["share_within_0.05"], f["intensity_within_15pct"]
            lines.append(
                f"twin {name}: {f['rings_judged']} rings judged; return share within 0.05 on "
                + ("-" if share is None else f"{100 * share:.0f} %")
                + ", median intensity within 15 % on "
                + ("-" if level is None else f"{100 * level:.0f} %")
            )
            lines += [f"  misses: {verdict}" for verdict in f["verdicts"]]
        if self.ego is not None:
            rings = [c for c, n in enumerate(self.ego["blocked_per_ring"]) if n]
            where = f" (rings {rings[0]} to {rings[-1]})" if rings else ""
            lines.append(f"twin ego: {self.ego['beams']} beams blocked{where}")
        return lines + [f"wrote {path}" for path in self.files]


def _basis(normal: NDArray[np.float64]) -> tuple[NDArray, NDArray]:
    """Two unit vectors spanning the plane of ``normal``."""
    helper = np.array([1.0, 0.0, 0.0]) if abs(normal[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    e1 = np.cross(normal, helper)
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(normal, e1)


#: Occupancy cells of a surface's mesh, m, and the closing radius that fills holes (cells).
CELL_M = 0.2
CLOSING_CELLS = 2


def _dilate(grid: NDArray[np.bool_], r: int) -> NDArray[np.bool_]:
    """Boolean dilation by a (2r + 1)-square, by shifted ORs (no loop over cells)."""
    out = grid.copy()
    padded = np.pad(grid, r)
    h, w = grid.shape
    for di in range(-r, r + 1):  # (2r + 1)^2 shifts, not a loop per cell
        for dj in range(-r, r + 1):
            out |= padded[r + di : r + di + h, r + dj : r + dj + w]
    return out


def _surface_mesh(
    surface: Any, xyz: NDArray[np.float64], origin: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """(V, 3) vertices and (F, 3) faces of a surface's twin, in the scan's frame: cells of
    ``CELL_M`` in the surface's plane.

    The ground (the surface calibrate names ``ground``) starts as every cell over its
    points' extent (0.5th to 99.5th percentile in the plane, 0.1 m more), so the twin can
    return where the real frame dropped out; any other surface as the cells its points
    occupy, with holes of up to ``2 x CLOSING_CELLS`` cells closed (dilation, then
    erosion). Then free space is carved out: a cell that more of the real frame's rays
    crossed on their way to something farther (by 0.1 m, more at grazing incidence) than
    ended in it is left out, so the twin is never opaque where the real sensor saw
    through (a gap, a door, the space between the sensor and a surface it looks past).
    """
    normal = np.asarray(surface.normal, dtype=np.float64)
    e1, e2 = _basis(normal)
    centre = -float(surface.offset_m) * normal
    pts = xyz[surface.index]
    uv = np.stack([(pts - centre) @ e1, (pts - centre) @ e2], axis=1)
    r = CLOSING_CELLS
    if surface.name == "ground":
        lo = np.percentile(uv, 0.5, axis=0) - _MARGIN_M
        hi = np.percentile(uv, 99.5, axis=0) + _MARGIN_M
    else:
        lo, hi = uv.min(axis=0), uv.max(axis=0)
    lo = lo - r * CELL_M
    shape = tuple(np.floor((hi - lo) / CELL_M).astype(np.int64) + r + 1)

    def cells(points_uv: NDArray) -> tuple[NDArray, NDArray, NDArray]:
        ij = np.floor((points_uv - lo) / CELL_M).astype(np.int64)
        inside = np.all((ij >= 0) & (ij < np.array(shape)), axis=1)
        return ij[inside, 0], ij[inside, 1], inside

    ends = np.zeros(shape, dtype=np.int64)
    i, j, _ = cells(uv)
    np.add.at(ends, (i, j), 1)
    if surface.name == "ground":
        gu = lo[0] + (np.arange(shape[0]) + 0.5) * CELL_M
        gv = lo[1] + (np.arange(shape[1]) + 0.5) * CELL_M
        keep = ((gu >= lo[0] + r * CELL_M) & (gu <= hi[0]))[:, None] & (
            (gv >= lo[1] + r * CELL_M) & (gv <= hi[1])
        )[None, :]
    else:
        occupied = ends > 0
        keep = ~_dilate(~_dilate(occupied, r), r) | occupied
    # Free space: where the real rays crossed this plane short of their own point.
    rays = xyz - origin
    rng = np.linalg.norm(rays, axis=1)
    direction = rays / np.maximum(rng, 1e-9)[:, None]
    denom = direction @ normal
    with np.errstate(divide="ignore", invalid="ignore"):
        t = -(origin @ normal + surface.offset_m) / denom
    # Short by 0.1 m, or more at grazing incidence (a plane fitted through noisy ranges
    # lies 0.05 m / cos off a point along the ray).
    through = np.isfinite(t) & (t > 0) & (t < rng - 0.1 - 0.05 / np.maximum(np.abs(denom), 1e-3))
    cross = origin + t[through, None] * direction[through]
    i, j, _ = cells(np.stack([(cross - centre) @ e1, (cross - centre) @ e2], axis=1))
    passed = np.zeros(shape, dtype=np.int64)
    np.add.at(passed, (i, j), 1)
    keep &= passed <= ends
    ci, cj = np.nonzero(keep)
    u0 = lo[0] + ci * CELL_M
    v0 = lo[1] + cj * CELL_M
    corners = np.stack([np.stack([u0, v0], 1), np.stack([u0 + CELL_M, v0], 1),
                        np.stack([u0 + CELL_M, v0 + CELL_M], 1),
                        np.stack([u0, v0 + CELL_M], 1)], axis=1)  # (K, 4, 2)  # fmt: skip
    vertices = centre + corners[..., :1] * e1 + corners[..., 1:] * e2
    base = 4 * np.arange(len(ci))[:, None]
    faces = np.concatenate([base + np.array([0, 1, 2]), base + np.array([0, 2, 3])])
    return vertices.reshape(-1, 3), faces


def _meshes(calibration: Calibration, xyz: NDArray[np.float64]) -> list[tuple[str, Any, Any]]:
    origin = np.asarray(calibration.origin_m, dtype=np.float64)
    return [(s.surface.name, *_surface_mesh(s.surface, xyz, origin))
            for s in _with_material(calibration)]  # fmt: skip


def _with_material(calibration: Calibration) -> list[Any]:
    """The surfaces the library has (a fitted reflectance): the twin's surfaces."""
    return [s for s in calibration.surfaces if s.has_material]


def _first_surface(
    meshes: list[tuple[str, Any, Any]], origin: NDArray, direction: NDArray
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """(N,) index of the first twin surface each ray meets (-1: none) and its distance, m,
    cast by Open3D's ``RaycastingScene``, refined
    (:class:`~simulator.world.refine.RefinedScene`)."""
    from ..world.raycast import import_open3d
    from ..world.refine import RefinedScene

    scene = RefinedScene(
        import_open3d(), [vertices for _, vertices, _ in meshes], [faces for _, _, faces in meshes]
    )
    rays = np.concatenate([origin, direction], axis=1).astype(np.float32)
    hit = scene.cast(rays)
    return hit.geometry.astype(np.int64), hit.t.astype(np.float64)


def write_twin(
    calibration: Calibration,
    xyz_m: NDArray[np.float64],
    folder: Path,
    scanner: str | Path,
    overrides: dict[str, Any],
    meshes: list[tuple[str, Any, Any]] | None = None,
    ego: dict[str, Any] | None = None,
) -> Path:
    """Write the twin's meshes, scene and survey into ``folder``; return the survey path.

    Parameters
    ----------
    calibration : Calibration
        What ``calibrate`` found (its surfaces and fitted materials).
    xyz_m : (N, 3) float
        The scan's points (the frame ``calibration`` was fitted in).
    folder : Path
        Where to write (``meshes/``, ``scene.yaml``, ``survey.yaml``).
    scanner : str or Path
        The scanner that took the scan (a preset name or a YAML file).
    overrides : dict
        The fitted scanner overrides (``Calibration.write``'s ``*_scanner.yaml``).
    meshes : list, optional
        The surfaces' meshes (name, (V, 3) vertices, (F, 3) faces), if made already.
    ego : dict, optional
        The survey's ``ego:`` section (the vehicle under the sensor).
    """
    import trimesh

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meshes").mkdir(exist_ok=True)
    library = calibration.library()
    objects = []
    if meshes is None:
        meshes = _meshes(calibration, np.asarray(xyz_m, dtype=np.float64))
    for name, vertices, faces in meshes:
        mesh = trimesh.Trimesh(vertices, faces, process=False)
        path = folder / "meshes" / f"{name}.ply"
        with atomic_path(path) as tmp:
            mesh.export(tmp, file_type="ply")
        objects.append({"name": name, "mesh": f"meshes/{name}.ply", "material": library[name]})
    write_atomic(
        folder / "scene.yaml",
        "# calibrate --twin: the surfaces found, with their "
        "fitted materials\n" + yaml.safe_dump({"objects": objects}, sort_keys=False),
    )
    scanner_ref = str(Path(scanner).resolve()) if Path(str(scanner)).is_file() else str(scanner)
    origin = [float(v) for v in calibration.origin_m]
    survey = {
        "scanner": scanner_ref,
        "scanner_overrides": overrides,
        "scene": "scene.yaml",
        "pose": {"position_m": origin, "rotation_deg": [0.0, 0.0, 0.0]},
        "revolutions": 1,
        "seed": 0,
        "output": {"path": "twin.npz", "frame": "sensor", "diagnostics": True},
    }
    if ego is not None:
        survey["ego"] = ego
    header = f"# calibrate --twin: the surfaces of {calibration.source}, re-scanned\n"
    return write_atomic(folder / "survey.yaml", header + yaml.safe_dump(survey, sort_keys=False))


def _ring_figures(
    beams: NDArray[np.bool_],
    real: NDArray[np.bool_],
    twin: NDArray[np.bool_],
    real_i: NDArray[np.float64],
    twin_i: NDArray[np.float64],
) -> dict[str, Any]:
    """Per ring (rows of the (C, W) grids): beams, return shares, median intensities."""
    n = beams.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        share_a = (real & beams).sum(axis=1) / n
        share_b = (twin & beams).sum(axis=1) / n
    rows = np.broadcast_to(np.arange(len(n))[:, None], beams.shape)
    med_a = grouped_median(rows[real & beams], real_i[real & beams], len(n))
    med_b = grouped_median(rows[twin & beams], twin_i[twin & beams], len(n))
    judged = n >= MIN_RING_BEAMS
    share_ok = np.abs(share_a - share_b) <= SHARE_TOLERANCE
    both = judged & np.isfinite(med_a) & np.isfinite(med_b) & (med_a > 0)
    intensity_ok = np.abs(med_b - med_a) <= INTENSITY_TOLERANCE * med_a

    def listed(x: NDArray) -> list[float | None]:
        return [None if not np.isfinite(v) else round(float(v), 4) for v in x]

    share_diff = (share_b - share_a)[judged]
    ratio = (med_b / med_a)[both]
    verdicts = []
    if judged.any() and share_ok[judged].mean() < 0.9:
        worst = np.flatnonzero(judged)[np.argsort(-np.abs(share_diff))[:3]]
        verdicts.append(
            f"return share: the twin is {'above' if share_diff.mean() > 0 else 'below'} the "
            f"real frame by {np.abs(share_diff).mean():.3f} on average (worst rings "
            f"{', '.join(map(str, worst.tolist()))}): detection (the threshold, the grazing "
            "footprint) or the surface's extent misses"
        )
    if both.any() and intensity_ok[both].mean() < 0.9:
        verdicts.append(
            f"intensity: the twin's median per ring is {np.median(ratio):.2f}x the real one "
            f"(from {ratio.min():.2f}x to {ratio.max():.2f}x): the Minnaert law or the "
            "sensor's range response misses"
        )
    return {
        "beams_per_ring": n.astype(int).tolist(),
        "share_mean_diff": float(share_diff.mean()) if judged.any() else None,
        "intensity_median_ratio": float(np.median(ratio)) if both.any() else None,
        "verdicts": verdicts,
        "share_a": listed(share_a),
        "share_b": listed(share_b),
        "median_intensity_a": listed(med_a),
        "median_intensity_b": listed(med_b),
        "rings_judged": int(judged.sum()),
        "share_within_0.05": float(share_ok[judged].mean()) if judged.any() else None,
        "intensity_within_15pct": float(intensity_ok[both].mean()) if both.any() else None,
    }


def _inside(surface_of_beam: NDArray[np.int64]) -> NDArray[np.bool_]:
    """(C, W) bool: beams whose four neighbours on the grid (the rings above and below, the
    columns either side, round the turn) meet the same surface: a surface's inside, where
    the twin's extent is not in doubt."""
    s = surface_of_beam
    same = np.ones(s.shape, dtype=bool)
    same[1:] &= s[1:] == s[:-1]
    same[:-1] &= s[:-1] == s[1:]
    same[0] = same[-1] = False
    same &= (s == np.roll(s, 1, axis=1)) & (s == np.roll(s, -1, axis=1))
    return same


def beam_evidence(
    sim: Simulation,
    beams: NDArray[np.bool_],
    returned: NDArray[np.bool_],
    reading: NDArray[np.float64],
) -> BeamEvidence:
    """Every beam of the twin's one revolution on a surface (``beams``, (C, W)), with what
    the per-hit model predicts for it (its received peak over the threshold, range and
    noise-free reading, before the sensor's clip and rounding) and what the real beam did
    (``returned`` from its surface, ``reading``). One ray a pulse (the pulse's centre)."""
    from dataclasses import replace

    from ..steps.hits import evaluate_hits, received_peak, reported_intensity

    chunk = sim.cast_pulses(0, sim.total_pulses)
    res = evaluate_hits(chunk, sim.tables, sim.model, sim.streams)
    channels = sim.pattern.channels
    samples = sim.beam.samples
    centre = res.idx % samples == 0  # (the centre ray of each pulse)
    pulse = (np.uint64(chunk.start) + (res.idx // samples).astype(np.uint64)).astype(np.int64)
    ring, col = pulse % channels, pulse // channels
    on = centre & (col < beams.shape[1])
    on[on] = beams[ring[on], col[on]]
    ring, col = ring[on], col[on]
    r_true = chunk.hits.range_m[res.idx[on]].astype(np.float64)
    b, peak = res.backscatter[on], res.peak_factor[on]
    x = received_peak(b, peak, r_true, sim.model) / sim.model.threshold
    raw = replace(sim.model, intensity_step=0.0, intensity_max=1e300)
    predicted = reported_intensity(b, raw, r_true, pulse[on].astype(np.uint64))
    step = sim.scanner.intensity_step
    return BeamEvidence(x, r_true, predicted, returned[ring, col], reading[ring, col], step)


def twin_of(
    calibrated: CalibrationFiles,
    folder: Path,
    scanner: str | Path,
    ego: EgoParams | None = EgoParams(),  # noqa: B008 (frozen: one shared default is safe)
    receiver: bool = False,
) -> TwinResult:
    """:func:`run_twin` on what ``lidar-sim calibrate`` found and wrote: its scan, with the
    scanner overrides as written beside the library; with ``receiver``, the receiver's laws
    fitted beam by beam join those overrides (the file is rewritten with them)."""
    path = calibrated.written[1]
    text = path.read_text()
    overrides = yaml.safe_load(text) or {}
    cloud = calibrated.calibration.cloud
    if cloud is None:
        raise ValueError("the calibration keeps no scan to compare the twin with")
    result = run_twin(calibrated.calibration, cloud, folder, scanner, overrides, ego, receiver)
    if result.receiver is not None and result.overrides != overrides:
        # The receiver's laws join the calibrated overrides (their comments kept).
        head = [ln for ln in text.splitlines() if ln.startswith("#")]
        head += [f"# {ln.strip()}" for ln in result.receiver.lines()]
        body = yaml.safe_dump(result.overrides, sort_keys=False)
        result.files.insert(0, write_atomic(path, "\n".join(head) + "\n" + body))
    return result


def frame_ego(
    cloud: PointCloud,
    pattern: SpinningPattern,
    origin_m: NDArray[np.float64],
    params: EgoParams,
) -> EgoEstimate:
    """The ego of one scan (:func:`.ego.estimate_ego` on its beam grid); ranges from
    ``origin_m``, the sensor's origin in the scan's frame, (3,) m."""
    grid = organize(cloud, pattern, origin_m)
    range_m = np.linalg.norm(grid.xyz_m - origin_m, axis=-1)
    return estimate_ego(range_m[None], grid.fired[None], pattern.elevation_rad, params)


def run_twin(
    calibration: Calibration,
    cloud: PointCloud,
    folder: Path,
    scanner: str | Path,
    overrides: dict[str, Any],
    ego: EgoParams | None = None,
    receiver: bool = False,
) -> TwinResult:
    """Write the twin (:func:`write_twin`), scan it, and compare it with the real frame
    beam by beam (see the module); writes ``compare.json``, ``twin.json`` and ``index.html``
    into ``folder``, and with ``ego`` the vehicle under the sensor estimated from the scan
    (:func:`frame_ego`) as ``ego.ply``, scanned with the twin. With ``receiver``, the
    receiver's laws are fitted to the beams first
    (:func:`simulator.calibrate.receiver.fit_receiver`) and the twin scans with them."""
    xyz = cloud["xyz"].astype(np.float64)
    meshes = _meshes(calibration, xyz)
    survey = write_twin(calibration, xyz, folder, scanner, overrides, meshes)
    sim = Simulation.from_file(survey)
    if not isinstance(sim.pattern, SpinningPattern):
        raise ConfigError(scanner, "pattern", "the twin compares beams of a spinning scanner")
    pattern = sim.pattern
    origin = np.asarray(calibration.origin_m, dtype=np.float64)
    files: list[Path] = []
    estimate = None if ego is None else frame_ego(cloud, pattern, origin, ego)
    section = None
    if estimate is not None and not estimate.empty:  # in the scanner's frame, as its beams
        files.append(write_ego_mesh(folder / "ego.ply", estimate, *beam_rays(pattern)))
        section = ego_section("ego.ply")
        survey = write_twin(calibration, xyz, folder, scanner, overrides, meshes, section)
        sim = Simulation.from_file(survey)
    channels, columns = pattern.channels, int(sim.scanner.firings_per_revolution or 1)
    sched = pattern.schedule(0, channels * columns)
    surface_of_beam, range_of_beam = _first_surface(
        meshes, sched.origin_m + origin, sched.direction
    )
    surface_of_beam = surface_of_beam.reshape(columns, channels).T  # (C, W)
    range_of_beam = range_of_beam.reshape(columns, channels).T

    ring, column = beam_indices(cloud, pattern, origin)
    first = (
        cloud["return_number"] <= 1 if "return_number" in cloud.names else np.ones(len(xyz), bool)
    )
    member = np.full(len(xyz), -1, dtype=np.int64)
    for k, s in enumerate(_with_material(calibration)):
        member[s.surface.index] = k
    real_any = np.zeros((channels, columns), dtype=bool)
    real_on = np.full((channels, columns), -1, dtype=np.int64)
    real_i = np.zeros((channels, columns))
    ok = first & (ring >= 0)
    real_any[ring[ok], column[ok]] = True
    real_on[ring[ok], column[ok]] = member[ok]
    real_i[ring[ok], column[ok]] = cloud["intensity"][ok]

    fitted = evidence = None
    if receiver:
        on_surface = (surface_of_beam >= 0) & ~(real_any & (real_on != surface_of_beam))
        on_surface &= _inside(surface_of_beam)  # (at an edge the twin's extent is a guess)
        if estimate is not None:  # (the ego's beams meet the vehicle, not a surface)
            on_surface &= ~estimate.blocked
        evidence = beam_evidence(sim, on_surface, real_on == surface_of_beam, real_i)
        fitted = fit_receiver(evidence)
        extra = fitted.overrides(sim.scanner)
        if extra:
            overrides = deep_merge(overrides, extra)
            survey = write_twin(calibration, xyz, folder, scanner, overrides, meshes, section)
            sim = Simulation.from_file(survey)
    twin = sim.run()
    twin_ret = np.zeros((channels, columns), dtype=bool)
    twin_i = np.zeros((channels, columns))
    tf = twin["return_number"] <= 1
    twin_col = pattern.column(twin["pulse_id"][tf])
    twin_ret[twin["ring"][tf], twin_col] = True
    twin_i[twin["ring"][tf], twin_col] = twin["intensity"][tf]

    surfaces: dict[str, dict[str, Any]] = {}
    pooled = np.zeros((channels, columns), dtype=bool)
    for k, (name, _, _) in enumerate(meshes):
        beams = (surface_of_beam == k) & ~(real_any & (real_on != k))
        pooled |= beams
        figures = _ring_figures(beams, real_on == k, twin_ret, real_i, twin_i)
        figures["median_range_per_ring_m"] = [
            None if not beams[c].any() else round(float(np.median(range_of_beam[c][beams[c]])), 3)
            for c in range(channels)
        ]
        surfaces[name] = figures
    pooled_figures = _ring_figures(pooled, real_on >= 0, twin_ret, real_i, twin_i)

    real_cloud = cloud.select(member >= 0)
    result = compare_clouds(real_cloud, twin)
    diff = np.abs(
        np.array(pooled_figures["share_a"], dtype=float)
        - np.array(pooled_figures["share_b"], dtype=float)
    )
    result["rings"] = {
        "share_a": pooled_figures["share_a"],
        "share_b": pooled_figures["share_b"],
        "max_abs_diff": float(np.nanmax(diff)) if np.isfinite(diff).any() else None,
        "beams_per_ring": pooled_figures["beams_per_ring"],
    }
    files += [
        write_atomic(folder / "compare.json", json.dumps(result, indent=2) + "\n"),
        write_atomic(folder / "twin.json", json.dumps(surfaces, indent=2) + "\n"),
    ]
    from ..viz.twin import write_twin_page

    files += write_twin_page(surfaces, calibration, twin, folder)
    mesh = None if estimate is None or estimate.empty else "ego.ply"
    ego_summary = None if estimate is None else estimate.summary(mesh)
    return TwinResult(result, surfaces, files, ego_summary, fitted, overrides, evidence)
