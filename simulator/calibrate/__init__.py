"""``lidar-sim calibrate``: fit the per-hit model to a user's own scan.

From a real scan (LAS/LAZ, PCD, PLY, KITTI ``.bin`` or npz, with intensity) and the
scanner that took it (its beam geometry, intensity scale and range resolution), find the
surfaces in the scan (:mod:`~simulator.calibrate.surfaces`: RANSAC planes, or one plane a
class with labels, or the hits of a known aligned mesh), and fit per surface the
reflectance and Minnaert exponent, the roughness, the micro-slope, and the sensor's range
noise (:mod:`~simulator.calibrate.fits`). The result is a material library a survey uses
as it is, a scanner-overrides file, and a report of every law against its data.

The sensor origin is the scan's frame origin unless given; rings are the file's, or
inferred from each point's elevation against the scanner's channels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from numpy.typing import NDArray

from ..beam import BeamOptics
from ..config import ScannerConfig, load_scanner
from ..errors import ConfigError
from ..io.atomic import write_atomic
from ..io.read import ReadOptions, read
from ..labels import SEMANTIC_KITTI, label_name
from ..pointcloud import PointCloud
from .fits import (
    Fit,
    fit_detection,
    fit_intensity,
    fit_micro_slope,
    fit_range_scatter,
    ring_counts,
)
from .likelihood import reading_grid
from .response import RHO_BOUNDS, Response, ResponseFitOptions, fit_response
from .surfaces import (
    Surface,
    beam_origins,
    find_planes,
    label_surfaces,
    name_surfaces,
    surface_geometry,
)

__all__ = ["Calibration", "SurfaceFit", "calibrate", "infer_rings", "physical"]

#: The highest reflectance of a diffuse surface; above it a surface is retroreflective.
MAX_DIFFUSE_REFLECTANCE = 1.5
#: The Minnaert exponent's range in the fit. Measured diffuse surfaces lie in 0.5-1.5 (k < 1
#: a rough surface's backscatter, k > 1 one darkening towards grazing); k = 0 is a surface
#: whose reading does not depend on the tilt. A fit that ends at the top, k = 3 (a reading
#: falling as cos^3), is no diffuse law: a specular lobe, or two surfaces in one, whose
#: reflectance extrapolated to normal incidence is meaningless (60.9 on the VLP-16
#: frame's plane_1); its reflectance and k are left out with a note.
K_RANGE = (0.0, 3.0)
#: Roughness at or above this is not a surface's relief (clutter, or two surfaces).
MAX_ROUGHNESS_M = 0.2
#: A surface whose points are all seen more grazing than this is a scan line, not a plane.
MIN_MEDIAN_COS = 0.05


@dataclass
class SurfaceFit:
    """One surface's data and fits."""

    surface: Surface
    cos: NDArray[np.float64]
    intensity: NDArray[np.float64]
    residual_m: NDArray[np.float64]
    intensity_fit: Fit
    range_fit: Fit
    slope_fit: Fit
    detection_fit: Fit = field(default_factory=Fit)

    def described(self) -> str:
        """Every fitted value with its standard error: ``k v +- e, ...``."""
        fits = (self.intensity_fit, self.range_fit, self.slope_fit, self.detection_fit)
        values = {key: value for fit in fits for key, value in fit.values.items()}
        return ", ".join(f"{k} {v:.4g} +- {e:.2g}" for k, (v, e) in values.items())

    @property
    def verdicts(self) -> list[str]:
        return (self.intensity_fit.verdicts + self.range_fit.verdicts + self.slope_fit.verdicts
                + self.detection_fit.verdicts)  # fmt: skip

    @property
    def has_material(self) -> bool:
        """Whether the reflectance was fitted (and kept): a surface without one is left out
        of the library, never written with a default."""
        return "reflectance" in self.intensity_fit.values

    def material(self, label: str, source: str) -> dict[str, object]:
        """The fitted material (the library's keys); the surface needs a fitted
        reflectance (:attr:`has_material`)."""

        def v(fit: Fit, key: str, default: float) -> float:
            return fit.values[key][0] if key in fit.values else default

        if not self.has_material:
            raise ValueError(f"{self.surface.name}: no fitted reflectance, no material")
        rho = self.intensity_fit.value("reflectance")
        retro = rho > MAX_DIFFUSE_REFLECTANCE
        out: dict[str, object] = {
            "reflectance": round(float(rho), 4),
            "minnaert_k": round(max(float(v(self.intensity_fit, "minnaert_k", 1.0)), 0.0), 3),
            "roughness_m": round(float(v(self.range_fit, "roughness_m", 0.0)), 5),
            "micro_slope_deg": round(
                float(min(v(self.slope_fit, "micro_slope_deg", 0.0), 89.0)), 2
            ),
            "micro_slope_cell_m": 0.1,
            "label": label,
            "description": (("retroreflective; " if retro else "")
                            + f"fitted by lidar-sim calibrate to {len(self.cos)} points of "
                            f"{source}"),
        }  # fmt: skip
        return out


@dataclass
class Calibration:
    """The fits of a scan."""

    source: str
    scanner: ScannerConfig
    origin_m: NDArray[np.float64]
    surfaces: list[SurfaceFit] = field(default_factory=list)
    #: The fitted intensity response (per-ring gains, range response); None if not fitted.
    response: Response | None = None
    #: Points removed as the ego vehicle's (within the minimum range or the ego box).
    ego_points: int = 0
    #: Notes on the scan as a whole (the ego points, the gains, dropped surfaces).
    notes: list[str] = field(default_factory=list)
    #: The scan as read (every point, the ego's too), for what follows (``--twin``).
    cloud: PointCloud | None = field(default=None, repr=False)

    @property
    def range_noise_m(self) -> tuple[float, float] | None:
        """The sensor's range noise, from the surface that constrains it best."""
        best = [s.range_fit.values["range_noise_m"] for s in self.surfaces
                if "range_noise_m" in s.range_fit.values]  # fmt: skip
        if not best:
            return None
        return min(best, key=lambda v: v[1] if math.isfinite(v[1]) else math.inf)

    def library(self) -> dict[str, dict[str, object]]:
        """The material library: one material a surface whose reflectance was fitted (the
        others are named in :attr:`left_out`)."""
        out = {}
        for s in self.surfaces:
            if not s.has_material:
                continue
            label = s.surface.name if s.surface.name in SEMANTIC_KITTI else _label_of(s.surface)
            out[s.surface.name] = s.material(label, self.source)
        return out

    @property
    def left_out(self) -> list[str]:
        """Notes naming the surfaces left out of the library (no fitted reflectance)."""
        return [f"{s.surface.name} ({len(s.cos)} points) left out of the library: its "
                "reflectance was not fitted (see its notes)"
                for s in self.surfaces if not s.has_material]  # fmt: skip

    @property
    def all_notes(self) -> list[str]:
        """The notes on the scan and, derived from the surfaces as they stand, those naming
        the surfaces left out of the library (:attr:`left_out`): what is written and
        printed."""
        return self.notes + [note for note in self.left_out if note not in self.notes]

    def write(self, path: str | Path) -> list[Path]:
        """Write the library (``path``) and the scanner overrides beside it
        (``<stem>_scanner.yaml``), with the uncertainties as comments."""
        path = Path(path)
        lines = [
            f"# Materials fitted by lidar-sim calibrate to {self.source}",
            f"# with the scanner {self.scanner.name}; one standard error after each value.",
        ]
        lines += [f"# note: {note}" for note in self.all_notes]
        for s in self.surfaces:
            lines.append(f"#   {s.surface.name} ({len(s.cos)} points): {s.described()}")
            lines += [f"#     note: {verdict}" for verdict in s.verdicts]
        body = yaml.safe_dump(self.library(), sort_keys=False)
        files = [write_atomic(path, "\n".join(lines) + "\n" + body)]
        noise = self.range_noise_m
        overrides: dict[str, object] = {}
        if noise is not None:
            overrides["range_noise_m"] = round(noise[0], 5)
        # the threshold (and beam) of the first surface in the library that fixed one
        fitted = [s.detection_fit.values for s in self.surfaces if s.has_material]
        d = next((v for v in fitted if "reference_range_m" in v), {})
        if d:
            overrides["detection"] = {
                "reference_range_m": round(d["reference_range_m"][0], 2),
                "reference_reflectance": self.scanner.detection.reference_reflectance,
            }
        if "divergence_mrad" in d:
            beta = round(d["divergence_mrad"][0], 3)
            overrides["divergence_mrad"] = {"horizontal": beta, "vertical": beta}
        if self.response is not None:
            overrides["intensity_response"] = self.response.overrides()
        scanner_path = path.with_name(f"{path.stem}_scanner.yaml")
        notes = "".join(f"# note: {note}\n" for note in self.all_notes)
        files.append(write_atomic(scanner_path,
                                  f"# scanner_overrides fitted to {self.source}\n" + notes
                                  + yaml.safe_dump(overrides, sort_keys=False)))  # fmt: skip
        return files


def _label_of(surface: Surface) -> str:
    """A label for a surface whose name is not a class: ground-like or wall-like by its
    normal (its first plane's)."""
    nz = abs(float(surface.normal[2]))
    if nz > np.cos(np.radians(25)):
        return "terrain"
    if nz < np.sin(np.radians(25)):
        return "building"
    return "unlabeled"


def infer_rings(xyz_m: NDArray, origin_m: NDArray, scanner: ScannerConfig) -> NDArray[np.uint16]:
    """Each point's ring: the channel whose elevation is nearest the point's."""
    channels = scanner.channels
    if channels is None:
        raise ConfigError("--scanner", "channels", "ring inference needs a spinning scanner")
    d = np.asarray(xyz_m, dtype=np.float64) - origin_m
    elevation = np.degrees(np.arctan2(d[:, 2], np.hypot(d[:, 0], d[:, 1])))
    table = np.asarray(channels.elevation_deg, dtype=np.float64)
    return np.abs(elevation[:, None] - table[None]).argmin(axis=1).astype(np.uint16)


def _as_channels(file_ring: NDArray, inferred: NDArray, n_channels: int) -> NDArray[np.int64]:
    """The file's rings (N,) renumbered as the scanner's channels: each ring becomes the
    channel most of its points' elevations are nearest (drivers number rings by elevation,
    a preset's channels are in firing order); a ring number outside the table is kept."""
    f = np.asarray(file_ring, dtype=np.int64)
    if not len(f) or f.min() < 0:
        return np.asarray(inferred, dtype=np.int64)
    n_file = int(f.max()) + 1
    votes = np.zeros((n_file, n_channels))
    np.add.at(votes, (f, np.asarray(inferred, dtype=np.int64)), 1.0)
    table = np.where(votes.sum(axis=1) > 0, votes.argmax(axis=1), np.arange(n_file))
    return table[f]


def _scene_surfaces(xyz_m: NDArray, origin: NDArray, scene_path: Path) -> list[Surface]:
    # xyz_m, origin: (N, 3), the points and each point's beam origin, m
    """Surfaces from a known, aligned mesh (the scan in the scene's frame): each point's
    beam is cast into the scene; the hit object's material groups the points, and each
    point's incidence and range residual come from its hit triangle."""
    from ..world.raycast import RayEngine
    from ..world.scene import load_scene

    scene = load_scene(scene_path)
    engine = RayEngine(scene)
    xyz = np.asarray(xyz_m, dtype=np.float64)
    d = xyz - origin
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    hits = engine.cast(origin, d, np.zeros(len(d)))
    out: list[Surface] = []
    material = np.array([scene.objects[i].material if i >= 0 else "" for i in hits.object_index])
    for name in sorted(set(material.tolist()) - {""}):
        members = np.flatnonzero(material == name)
        n = hits.normal[members].astype(np.float64)
        n *= -np.sign(np.einsum("ij,ij->i", n, d[members]))[:, None]  # facing the sensor
        normal = n.mean(axis=0)
        normal /= np.linalg.norm(normal)
        offset = float(-np.median(xyz[members] @ normal))
        hit_m = origin[members] + hits.range_m[members].astype(np.float64)[:, None] * d[members]
        out.append(Surface(name, members, normal, offset, point_normals=n,
                           point_offsets_m=-np.einsum("ij,ij->i", n, hit_m)))  # fmt: skip
    return out


def physical(fit: SurfaceFit) -> None:
    """Keep only physical values: reflectance at least ``RHO_BOUNDS[0]`` (0.005, the
    physical argument in :data:`~simulator.calibrate.response.RHO_BOUNDS`; above 1.5 flagged
    retroreflective), k in [0, 3) (at its top bound, or a log-space line's beyond it, the
    reflectance goes too: no diffuse law), roughness in [0, 0.2) m, finite values with
    finite or unknown errors; a value left out gets a verdict with the reason."""

    def drop(f: Fit, key: str, reason: str) -> None:
        if key in f.values:
            v, e = f.values.pop(key)
            f.verdicts.append(f"{key} {v:.4g} +- {e:.2g} left out: {reason}")

    for f in (fit.intensity_fit, fit.range_fit, fit.slope_fit, fit.detection_fit):
        for key, (v, e) in list(f.values.items()):
            if not math.isfinite(v):
                drop(f, key, "not finite")
            elif math.isfinite(e) and e > 10 * abs(v) and e > 1e-3:
                drop(f, key, "the data do not constrain it (its error is over 10 times it)")
    fi = fit.intensity_fit
    top = K_RANGE[1] - 1e-3  # the fit's k stops at its bound
    if "minnaert_k" in fi.values and not K_RANGE[0] <= fi.value("minnaert_k") < top:
        # at the top bound, or beyond the range (a log-space line's): no diffuse law, and
        # nothing taken from the law's spread either
        drop(fi, "reflectance", f"its law's k {fi.value('minnaert_k'):.3g} is outside "
             f"[{K_RANGE[0]:g}, {K_RANGE[1]:g}): no diffuse law (a specular lobe, or two "
             "surfaces), see calibrate.K_RANGE")  # fmt: skip
        drop(fi, "minnaert_k", f"not in [{K_RANGE[0]:g}, {K_RANGE[1]:g})")
        drop(fi, "intensity_noise", "the spread about a law left out")
        drop(fit.slope_fit, "micro_slope_deg", "the spread about a law left out")
    if "reflectance" in fi.values:
        rho = fi.value("reflectance")
        if rho < RHO_BOUNDS[0]:
            drop(fi, "reflectance", f"below {RHO_BOUNDS[0]:g}, darker than any surface "
                 "(see response.RHO_BOUNDS)")  # fmt: skip
            fi.values.pop("minnaert_k", None)
        elif rho > MAX_DIFFUSE_REFLECTANCE:
            fi.verdicts.append(f"reflectance {rho:.2f} > {MAX_DIFFUSE_REFLECTANCE}: "
                               "a retroreflective surface")  # fmt: skip
    fr = fit.range_fit
    if "roughness_m" in fr.values and fr.value("roughness_m") < 0:
        drop(fr, "roughness_m", "negative")
    if "roughness_m" in fr.values and fr.value("roughness_m") >= MAX_ROUGHNESS_M:
        drop(fr, "roughness_m", f"not below {MAX_ROUGHNESS_M} m: clutter or several surfaces")
    if "micro_slope_deg" in fit.slope_fit.values and fit.slope_fit.value("micro_slope_deg") > 45:
        drop(fit.slope_fit, "micro_slope_deg", "above 45 deg")


def ego_mask(
    xyz_m: NDArray, origin_m: NDArray, min_range_m: float,
    ego_box_m: tuple[float, float, float, float, float, float] | None = None,
) -> NDArray[np.bool_]:  # fmt: skip
    """The points of the ego vehicle (and the file's empty returns): within ``min_range_m``
    of ``origin_m``, inside the box ``(xmin, ymin, zmin, xmax, ymax, zmax)`` (m, the scan's
    frame), or not finite. (N,) bool."""
    p = np.asarray(xyz_m, dtype=np.float64)
    bad = ~np.isfinite(p).all(axis=1)
    bad |= np.linalg.norm(np.where(bad[:, None], 0.0, p - origin_m), axis=1) < min_range_m
    if ego_box_m is not None:
        lo, hi = np.asarray(ego_box_m[:3]), np.asarray(ego_box_m[3:])
        bad |= ((p >= lo) & (p <= hi)).all(axis=1)
    return bad


def _guarded(name: str, fn, *args, **kwargs) -> Fit:  # type: ignore[no-untyped-def]
    """A fit whose numerical failure is a verdict, not a traceback."""
    try:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)
    except (np.linalg.LinAlgError, ValueError, FloatingPointError, ZeroDivisionError) as exc:
        return Fit(verdicts=[f"the {name} fit failed ({exc}): not fitted"])


def _detection(
    xyz: NDArray, rings: NDArray, on: NDArray[np.bool_], origin: NDArray, s: Surface,
    config: ScannerConfig, *, rho: float, k: float, slope_deg: float,
) -> Fit:  # fmt: skip
    """The threshold and divergence fit of one ground-like surface."""
    assert config.channels is not None
    optics = BeamOptics.of(config)
    counts = ring_counts(xyz, rings, on, origin, s.normal, s.offset_m,
                         np.radians(config.channels.elevation_deg))  # fmt: skip
    return fit_detection(
        counts, rho=rho, k=min(max(k, 0.0), 3.0), slope_rad=float(np.radians(slope_deg)),
        pulse_length_m=optics.pulse_length_m,
        divergence_rad=optics.divergence_v_rad,
        reference_reflectance=config.detection.reference_reflectance,
    )  # fmt: skip


def calibrate(
    scan: str | Path,
    scanner: str | Path = "rs-helios-5515",
    *,
    origin_m: tuple[float, float, float] = (0.0, 0.0, 0.0),
    labels: bool = False,
    scene: str | Path | None = None,
    max_planes: int = 8,
    min_points: int = 300,
    intensity_divisor: float = 1.0,
    names: dict[str, list[str]] | None = None,
    read_options: ReadOptions | None = None,
    ego_box_m: tuple[float, float, float, float, float, float] | None = None,
    replicas: int = 24,
) -> Calibration:
    """Fit the per-hit model and the sensor's intensity response to a scan.

    Parameters
    ----------
    scan : path
        The scan file; it needs ``intensity``.
    scanner : str or path
        A preset name or a scanner YAML.
    origin_m : (3,) float
        The sensor origin in the scan's frame.
    labels : bool
        Group points by the file's ``label`` field (SemanticKITTI ids, or a LAS
        classification) instead of finding planes.
    scene : path, optional
        A scene YAML aligned with the scan: its surfaces group the points.
    max_planes, min_points : int
        How many planes to look for, and the fewest points a plane needs.
    intensity_divisor : float
        The file's intensities are divided by this first (256 for LAS files that store an
        8-bit reading scaled to 16 bits).
    names : dict, optional
        Surfaces grouped and named, ``{"facade": ["wall_1", "wall_2"]}`` (see
        :func:`~simulator.calibrate.surfaces.name_surfaces`); each becomes one material.
    read_options : ReadOptions, optional
        Which frame of a pcap or bag, the bag's topic, the pcap's metadata.
    ego_box_m : (6,) float, optional
        ``xmin, ymin, zmin, xmax, ymax, zmax`` (m, the scan's frame): the ego vehicle's
        body, whose points are removed with those within the scanner's minimum range.
    replicas : int
        Bootstrap replicas of the intensity fit (its standard errors).
    """
    cloud = read(scan, read_options)
    if "intensity" not in cloud.names:
        raise ConfigError(scan, "intensity", "the scan has no intensity to calibrate against")
    config = load_scanner(scanner)
    origin = np.asarray(origin_m, dtype=np.float64)
    xyz_all = cloud["xyz"].astype(np.float64)
    ego = ego_mask(xyz_all, origin, config.range_min_m, ego_box_m)
    keep = np.flatnonzero(~ego)
    xyz = xyz_all[keep]
    result = Calibration(str(scan), config, origin, ego_points=int(ego.sum()), cloud=cloud)
    box = "" if ego_box_m is None else " or inside the ego box"
    result.notes.append(f"{int(ego.sum())} ego points removed (within the minimum range "
                        f"{config.range_min_m:g} m{box}, or not finite)")  # fmt: skip
    every = cloud["intensity"].astype(np.float64) / intensity_divisor  # ego points too
    intensity = every[keep]
    top = float(np.percentile(every, 99.9)) if len(every) else 0.0
    if top > 1.01 * config.intensity_max:
        raise ConfigError(
            scan, "intensity",
            f"readings reach {top:.0f}, above the scanner's intensity_max "
            f"{config.intensity_max:g}; give --intensity-divisor (256 for 8-bit readings "
            "stored as 16-bit LAS) or a scanner whose intensity matches the file",
        )  # fmt: skip
    step = reading_grid(every, config.intensity_step)
    if step != config.intensity_step:
        result.notes.append(
            f"the readings lie on a grid of {step:.4g} (the scanner's step is "
            f"{config.intensity_step:g}): each is taken as an interval that wide, a zero as "
            f"below {step / 2:.4g} (a KITTI .bin's reflectance in hundredths, read as 0-255, "
            "is 2.55 apart)"
        )
    beams = beam_origins(xyz, origin, config.beam_origin_offset_m)
    if scene is not None:
        surfaces = _scene_surfaces(xyz, beams, Path(scene))
    elif labels:
        if "label" not in cloud.names:
            raise ConfigError(scan, "label", "--labels needs a label field (or classification)")
        lab = cloud["label"][keep]
        class_names = {v: label_name(v) for v in np.unique(lab).tolist()}
        surfaces = label_surfaces(xyz, origin, lab, class_names, min_points=min_points)
    else:
        surfaces = find_planes(xyz, origin, max_planes=max_planes, min_points=min_points)
    if names:
        try:
            surfaces = name_surfaces(surfaces, names)
        except KeyError as exc:
            raise ConfigError(scan, "--surface", str(exc.args[0])) from None
    rings = None
    n_rings = 0
    if config.channels is not None:
        n_rings = len(config.channels.elevation_deg)
        rings = infer_rings(xyz, origin, config).astype(np.int64)
        if "ring" in cloud.names:  # the file's rings, renumbered as the scanner's channels
            rings = _as_channels(cloud["ring"].astype(np.int64)[keep], rings, n_rings)
    elif "ring" in cloud.names:  # no elevation table (Livox's table and risley patterns):
        # the file's channels, as the pattern numbers them (its channel_gain's entries)
        from ..sensor.scanner import pattern_for

        n_rings = int(pattern_for(config).channels)
        rings = cloud["ring"].astype(np.int64)[keep]
        outside = int(((rings < 0) | (rings >= n_rings)).sum())
        if outside:
            result.notes.append(f"{outside} points with a ring outside the scanner's "
                                f"{n_rings} channels: no gain fitted from them")  # fmt: skip
    geometry = []
    for s in surfaces:
        cos, range_m, residual = surface_geometry(xyz, beams, s)
        if not len(cos) or float(np.median(cos)) < MIN_MEDIAN_COS:
            result.notes.append(
                f"{s.name} ({len(cos)} points) dropped: seen edge-on (median incidence cosine "
                f"{float(np.median(cos)) if len(cos) else float('nan'):.3f}), a scan line "
                "through the sensor rather than a surface"
            )
            continue
        geometry.append((s, cos, range_m, residual))
    response = None
    if geometry:
        d_all = xyz - origin
        response = fit_response(
            np.concatenate([intensity[s.index] for s, *_ in geometry]),
            np.concatenate([g[1] for g in geometry]),
            np.concatenate([g[2] for g in geometry]),
            np.concatenate([np.full(len(s.index), j) for j, (s, *_) in enumerate(geometry)]),
            None if rings is None else np.concatenate([rings[s.index] for s, *_ in geometry]),
            np.concatenate([np.arctan2(d_all[s.index, 1], d_all[s.index, 0])
                            for s, *_ in geometry]),
            ResponseFitOptions(n_surfaces=len(geometry), n_rings=n_rings,
                               scale=config.intensity_scale,
                               intensity_max=config.intensity_max,
                               intensity_step=step, replicas=replicas),
        )  # fmt: skip
        result.notes += response.verdicts
        if response.gain_fitted.any() or response.range_exponent is not None:
            result.response = response
    for j, (s, cos, _, residual) in enumerate(geometry):
        i = intensity[s.index]
        fi = Fit() if response is None else response.surfaces[j]
        fs = Fit()
        if "micro_slope_deg" in fi.values:
            fs.values["micro_slope_deg"] = fi.values.pop("micro_slope_deg")
        if "reflectance" not in fi.values and not fi.settled:
            fi = _guarded("intensity", fit_intensity, i, cos, scale=config.intensity_scale,
                          intensity_max=config.intensity_max)  # fmt: skip
            fi.verdicts.insert(0, "the likelihood fit gave nothing: a log-space line instead")
            if "reflectance" in fi.values:
                fs = _guarded("micro-slope", fit_micro_slope, i, cos,
                              scale=config.intensity_scale, rho=fi.value("reflectance"),
                              k=fi.value("minnaert_k"), intensity_max=config.intensity_max,
                              intensity_step=step)  # fmt: skip
            else:
                fs = Fit(verdicts=["no intensity law: micro-slope not fitted"])
        elif "reflectance" not in fi.values:
            fs = Fit(verdicts=["no intensity law: micro-slope not fitted"])
        slope_rad = float(np.radians(fs.values.get("micro_slope_deg", (0.0, 0.0))[0]))
        fr = _guarded("range scatter", fit_range_scatter, residual, cos,
                      resolution_m=config.range_resolution_m, slope_rad=slope_rad)  # fmt: skip
        fd = Fit()
        if "reflectance" in fi.values and (s.name == "ground" or abs(s.normal[2]) > 0.9):
            if config.channels is None or rings is None:
                fd.verdicts.append("the threshold fit needs a spinning scanner's rings")
            else:
                on = np.zeros(len(xyz), dtype=bool)
                on[s.index] = True
                slope = fs.values.get("micro_slope_deg", (0.0, 0.0))[0]
                fd = _guarded("detection", _detection, xyz, rings, on, origin, s, config,
                              rho=fi.value("reflectance"), k=fi.value("minnaert_k"),
                              slope_deg=slope)  # fmt: skip
        fit = SurfaceFit(s, cos, i, residual, fi, fr, fs, fd)
        physical(fit)
        result.surfaces.append(fit)
    return result
