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

from ..config import ScannerConfig, load_scanner
from ..errors import ConfigError
from ..io.atomic import write_atomic
from ..io.read import ReadOptions, read
from ..labels import SEMANTIC_KITTI, label_name
from ..physics import pulse_length_m
from ..pointcloud import PointCloud
from .fits import (
    Fit,
    fit_detection,
    fit_intensity,
    fit_micro_slope,
    fit_range_scatter,
    ring_counts,
)
from .surfaces import (
    Surface,
    beam_origins,
    find_planes,
    label_surfaces,
    name_surfaces,
    surface_geometry,
)

__all__ = ["Calibration", "SurfaceFit", "calibrate", "infer_rings"]


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

    @property
    def verdicts(self) -> list[str]:
        return (self.intensity_fit.verdicts + self.range_fit.verdicts + self.slope_fit.verdicts
                + self.detection_fit.verdicts)  # fmt: skip

    def material(self, label: str, source: str) -> dict[str, object]:
        """The fitted material (the library's keys)."""

        def v(fit: Fit, key: str, default: float) -> float:
            return fit.values[key][0] if key in fit.values else default

        rho = v(self.intensity_fit, "reflectance", 0.3)
        out: dict[str, object] = {
            "reflectance": round(float(rho), 4),
            "minnaert_k": round(max(float(v(self.intensity_fit, "minnaert_k", 1.0)), 0.0), 3),
            "roughness_m": round(float(v(self.range_fit, "roughness_m", 0.0)), 5),
            "micro_slope_deg": round(
                float(min(v(self.slope_fit, "micro_slope_deg", 0.0), 89.0)), 2
            ),
            "micro_slope_cell_m": 0.1,
            "label": label,
            "description": f"fitted by lidar-sim calibrate to {len(self.cos)} points of {source}",
        }  # fmt: skip
        return out


@dataclass
class Calibration:
    """The fits of a scan."""

    source: str
    scanner: ScannerConfig
    origin_m: NDArray[np.float64]
    surfaces: list[SurfaceFit] = field(default_factory=list)

    @property
    def range_noise_m(self) -> tuple[float, float] | None:
        """The sensor's range noise, from the surface that constrains it best."""
        best = [s.range_fit.values["range_noise_m"] for s in self.surfaces
                if "range_noise_m" in s.range_fit.values]  # fmt: skip
        if not best:
            return None
        return min(best, key=lambda v: v[1] if math.isfinite(v[1]) else math.inf)

    def library(self) -> dict[str, dict[str, object]]:
        """The material library: one material a surface."""
        out = {}
        for s in self.surfaces:
            label = s.surface.name if s.surface.name in SEMANTIC_KITTI else _label_of(s.surface)
            out[s.surface.name] = s.material(label, self.source)
        return out

    def write(self, path: str | Path) -> list[Path]:
        """Write the library (``path``) and the scanner overrides beside it
        (``<stem>_scanner.yaml``), with the uncertainties as comments."""
        path = Path(path)
        lines = [
            f"# Materials fitted by lidar-sim calibrate to {self.source}",
            f"# with the scanner {self.scanner.name}; one standard error after each value.",
        ]
        for s in self.surfaces:
            vals = {**s.intensity_fit.values, **s.range_fit.values, **s.slope_fit.values,
                    **s.detection_fit.values}  # fmt: skip
            text = ", ".join(f"{k} {v:.4g} +- {e:.2g}" for k, (v, e) in vals.items())
            lines.append(f"#   {s.surface.name} ({len(s.cos)} points): {text}")
            lines += [f"#     note: {verdict}" for verdict in s.verdicts]
        body = yaml.safe_dump(self.library(), sort_keys=False)
        files = [write_atomic(path, "\n".join(lines) + "\n" + body)]
        noise = self.range_noise_m
        overrides: dict[str, object] = {}
        if noise is not None:
            overrides["range_noise_m"] = round(noise[0], 5)
        # the threshold (and beam) of the first surface that fixed one
        fitted = [s.detection_fit.values for s in self.surfaces]
        d = next((v for v in fitted if "reference_range_m" in v), {})
        if d:
            overrides["detection"] = {
                "reference_range_m": round(d["reference_range_m"][0], 2),
                "reference_reflectance": self.scanner.detection.reference_reflectance,
            }
        if "divergence_mrad" in d:
            beta = round(d["divergence_mrad"][0], 3)
            overrides["divergence_mrad"] = {"horizontal": beta, "vertical": beta}
        scanner_path = path.with_name(f"{path.stem}_scanner.yaml")
        files.append(write_atomic(scanner_path,
                                  f"# scanner_overrides fitted to {self.source}\n"
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


def _scene_surfaces(cloud: PointCloud, origin: NDArray, scene_path: Path) -> list[Surface]:
    # origin: (N, 3), each point's beam origin
    """Surfaces from a known, aligned mesh (the scan in the scene's frame): each point's
    beam is cast into the scene; the hit object's material groups the points, and each
    point's incidence and range residual come from its hit triangle."""
    from ..raycast import RayEngine
    from ..scene import load_scene

    scene = load_scene(scene_path)
    engine = RayEngine(scene)
    xyz = cloud["xyz"].astype(np.float64)
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
) -> Calibration:
    """Fit the per-hit model to a scan.

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
    """
    cloud = read(scan, read_options)
    if "intensity" not in cloud.names:
        raise ConfigError(scan, "intensity", "the scan has no intensity to calibrate against")
    config = load_scanner(scanner)
    origin = np.asarray(origin_m, dtype=np.float64)
    xyz = cloud["xyz"].astype(np.float64)
    beams = beam_origins(xyz, origin, config.beam_origin_offset_m)
    if scene is not None:
        surfaces = _scene_surfaces(cloud, beams, Path(scene))
    elif labels:
        if "label" not in cloud.names:
            raise ConfigError(scan, "label", "--labels needs a label field (or classification)")
        class_names = {v: label_name(v) for v in np.unique(cloud["label"]).tolist()}
        surfaces = label_surfaces(xyz, origin, cloud["label"], class_names, min_points=min_points)
    else:
        surfaces = find_planes(xyz, origin, max_planes=max_planes, min_points=min_points)
    if names:
        try:
            surfaces = name_surfaces(surfaces, names)
        except KeyError as exc:
            raise ConfigError(scan, "--surface", str(exc.args[0])) from None
    intensity = cloud["intensity"].astype(np.float64) / intensity_divisor
    top = float(np.percentile(intensity, 99.9)) if len(intensity) else 0.0
    if top > 1.01 * config.intensity_max:
        raise ConfigError(
            scan, "intensity",
            f"readings reach {top:.0f}, above the scanner's intensity_max "
            f"{config.intensity_max:g}; give --intensity-divisor (256 for 8-bit readings "
            "stored as 16-bit LAS) or a scanner whose intensity matches the file",
        )  # fmt: skip
    result = Calibration(str(scan), config, origin)
    rings = None
    if config.channels is not None:
        rings = (cloud["ring"].astype(np.int64) if "ring" in cloud.names
                 else infer_rings(xyz, origin, config).astype(np.int64))  # fmt: skip
    for s in surfaces:
        cos, _, residual = surface_geometry(xyz, beams, s)
        i = intensity[s.index]
        fi = fit_intensity(i, cos, scale=config.intensity_scale, intensity_max=config.intensity_max)
        if "reflectance" in fi.values:
            fs = fit_micro_slope(i, cos, scale=config.intensity_scale,
                                 rho=fi.value("reflectance"), k=fi.value("minnaert_k"),
                                 intensity_max=config.intensity_max,
                                 intensity_step=config.intensity_step)  # fmt: skip
        else:
            fs = Fit(verdicts=["no intensity law: micro-slope not fitted"])
        slope_rad = float(np.radians(fs.values.get("micro_slope_deg", (0.0, 0.0))[0]))
        fr = fit_range_scatter(residual, cos, resolution_m=config.range_resolution_m,
                               slope_rad=slope_rad)  # fmt: skip
        fd = Fit()
        if "reflectance" in fi.values and (s.name == "ground" or abs(s.normal[2]) > 0.9):
            if config.channels is None:
                fd.verdicts.append("the threshold fit needs a spinning scanner's rings")
            else:
                on = np.zeros(len(xyz), dtype=bool)
                on[s.index] = True
                counts = ring_counts(xyz, rings, on, origin, s.normal, s.offset_m,
                                     np.radians(config.channels.elevation_deg))  # fmt: skip
                slope = fs.values.get("micro_slope_deg", (0.0, 0.0))[0]
                fd = fit_detection(
                    counts,
                    rho=fi.value("reflectance"),
                    k=max(fi.value("minnaert_k"), 0.0),
                    slope_rad=float(np.radians(slope)),
                    pulse_length_m=float(pulse_length_m(config.pulse_length_ns)),
                    divergence_rad=config.divergence_mrad.vertical * 1e-3,
                    reference_reflectance=config.detection.reference_reflectance,
                )
        result.surfaces.append(SurfaceFit(s, cos, i, residual, fi, fr, fs, fd))
    return result
