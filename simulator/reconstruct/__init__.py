"""``lidar-sim reconstruct``: a real capture as a scene any survey can scan.

The steps, each a function of its own module:

1. **read** the capture's frames (every reader of :mod:`simulator.io.read`; an Ouster pcap
   or OSF carries its unit's calibration, which becomes the scanner when none is given);
2. **organise** each frame on the scanner's beam grid (:mod:`.grid`);
3. **pose** the frames in one world frame: a KITTI poses file, else the capture's own
   per-column poses, else KISS-ICP (:mod:`simulator.odometry`);
4. **ego**: the beams the vehicle under the sensor blocks in every scene frame, as a mesh
   fixed in the sensor frame (:mod:`.ego`);
5. **mesh** each scene frame's grid as triangles and surfels, fuse the frames (:mod:`.mesh`);
6. **reflect**: a reflectance per face from every reading of it (:mod:`.reflectance`);
7. **write** ``scene.yaml`` with its meshes (per-face materials as face attributes),
   ``scanner.yaml``, ``ego.ply`` and a survey per frame, ``frames/NNNN.yaml``, that lands
   on the real frame's beam grid pixel for pixel (with an ``ego:`` section for the ego);
8. **score** (:mod:`.protocol`): held-out frames, and with ``rescan`` every scene frame,
   scanned back and compared with the real frame beam by beam, beside the reprojection
   baseline; ``summary.json`` and ``index.html``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from numpy.typing import NDArray

from ..compare import NVS_TABLE_KEYS
from ..config import ScannerConfig, load_scanner
from ..errors import InputError
from ..io.atomic import write_atomic
from ..io.read import read_frames
from ..labels import label_name
from ..pointcloud import PointCloud
from ..sensor.scanner import SpinningPattern
from ..steps.hits import ReturnModel
from .ego import EgoEstimate, EgoParams, ego_section, estimate_ego, write_ego_mesh
from .grid import BeamGrid, beam_rays, cloud_of_grid, organize, sensor_offset_m
from .mesh import FrameMesh, MeshCaster, MeshParams, fuse, triangulate
from .motion import frame_trajectory, frame_waypoints, pixel_poses
from .reflectance import FaceReflectance, detection_threshold, face_reflectance, read_faces

__all__ = ["ReconstructOptions", "ReconstructResult", "reconstruct"]

#: The Minnaert exponent of a surface whose class has no fit of its own: 0, a reading
#: that does not change with incidence. The seed's calibration found it for asphalt,
#: concrete, gravel and grass, and it keeps the noise of a small triangle's normal out of
#: the reflectance (with k > 0 every reading is divided by its face's cos^k).
DEFAULT_MINNAERT_K = 0.0

#: The nvs figures the summary table prints, in order.
TABLE_KEYS = NVS_TABLE_KEYS

#: The estimated ego's mesh, in the output folder.
EGO_MESH = "ego.ply"


@dataclass(frozen=True)
class ReconstructOptions:
    """What ``reconstruct`` is asked for.

    Attributes
    ----------
    scanner : str or Path or None
        A preset or scanner YAML; None: the capture's own calibration.
    poses : Path or None
        A KITTI poses file, one line per frame of the capture.
    frames : (int, int) or None
        The frames used, ``[A, B)`` in capture order; None: all.
    hold_out : tuple of int
        Frames left out of the scene and scanned from their poses.
    rescan : bool
        Scan every scene frame back from its own pose.
    mesh : MeshParams
    seed : int
        The frame surveys' seed.
    pose_time_share : float
        When in its frame a frame's pose holds, as a share of the period
        (:mod:`.motion`).
    pages : bool
        Write compare's HTML page beside each ``compare.json`` (the slowest part).
    ego : EgoParams or None
        How the vehicle under the sensor is estimated from the scene frames
        (:mod:`.ego`); None: not at all (a capture without one).
    threshold_quantile : float
        The detection threshold written into the scene's scanner: this quantile of the
        scene frames' received peaks (:func:`.reflectance.detection_threshold`).
    """

    scanner: str | Path | None = None
    poses: Path | None = None
    frames: tuple[int, int] | None = None
    hold_out: tuple[int, ...] = ()
    rescan: bool = False
    mesh: MeshParams = field(default_factory=MeshParams)
    seed: int = 0
    threshold_quantile: float = 0.005
    pose_time_share: float = 0.5
    pages: bool = True
    ego: EgoParams | None = field(default_factory=EgoParams)


@dataclass
class ReconstructResult:
    """What ``reconstruct`` made.

    Attributes
    ----------
    summary : dict
        As written to ``summary.json``.
    files : list of Path
    timings_s : dict of str to float
        Seconds per stage.
    """

    summary: dict[str, Any]
    files: list[Path]
    timings_s: dict[str, float]


class _Clock:
    """Seconds per named stage."""

    def __init__(self, report: Callable[[str], None] | None) -> None:
        self.timings_s: dict[str, float] = {}
        self._t = time.perf_counter()
        self._report = report

    def say(self, line: str) -> None:
        """Report one line (when reporting)."""
        if self._report is not None:
            self._report(line)

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.timings_s[stage] = self.timings_s.get(stage, 0.0) + now - self._t
        self._t = now
        if self._report is not None:
            self._report(f"{stage}: {self.timings_s[stage]:.2f} s")


def _read_capture(captures: list[Path]) -> list[PointCloud]:
    frames: list[PointCloud] = []
    for path in captures:
        for k, cloud in enumerate(read_frames(path)):
            cloud.meta.setdefault("source", str(path))
            cloud.meta["capture_frame"] = k
            frames.append(cloud)
    if not frames:
        raise InputError(captures[0], "it holds no frame")
    return frames


def _scanner(captures: list[Path], scanner: str | Path | None) -> tuple[ScannerConfig, str, dict]:
    """The scanner config, a name for it, and its mapping (to write beside the scene)."""
    if scanner is not None:
        config = load_scanner(str(scanner))
        return config, str(scanner), config.model_dump(mode="json", exclude_none=True)
    from ..io.ouster import scanner_of_capture

    for path in captures:
        mapping = scanner_of_capture(path)
        if mapping is not None:
            return ScannerConfig.model_validate(mapping), "the capture's own calibration", mapping
    raise InputError(
        captures[0],
        "it does not carry its unit's calibration: name the scanner with --scanner "
        "(a preset or a scanner YAML)",
    )


def _poses(
    captures: list[Path], frames: list[PointCloud], path: Path | None
) -> tuple[NDArray[np.float64], str]:
    """The frames' world-from-sensor poses, (F, 4, 4), and where they came from."""
    from ..io.ouster import column_poses
    from ..odometry import poses_for

    columns = None
    if path is None and len(captures) == 1:
        columns = column_poses(captures[0])
    source = (
        f"the poses file {path.name}"
        if path is not None
        else "the capture's per-column poses"
        if columns is not None
        else "KISS-ICP"
    )
    return poses_for(frames, poses_file=path, column_poses=columns), source


def _write_scene(
    folder: Path, mesh: FrameMesh, faces: FaceReflectance, default_k: float
) -> tuple[list[Path], dict[str, Any]]:
    """``scene.yaml`` and one mesh a class (faces grouped by their readings' label)."""
    from ..io.mesh import write_material_mesh

    (folder / "meshes").mkdir(parents=True, exist_ok=True)
    files, objects = [], []
    labels = np.unique(faces.label)
    for lab in labels:
        sel = faces.label == lab
        f = mesh.faces[sel]
        used, inverse = np.unique(f, return_inverse=True)
        name = "surface" if lab < 0 else label_name(int(lab))
        path = folder / "meshes" / f"{name}.ply"
        values = {"reflectance": faces.reflectance[sel], "minnaert_k": faces.minnaert_k[sel]}
        files.append(
            write_material_mesh(path, mesh.vertices_m[used], inverse.reshape(-1, 3), values)
        )
        objects.append(
            {
                "name": name,
                "mesh": f"meshes/{name}.ply",
                "material": {
                    "reflectance": round(float(np.median(faces.reflectance[sel])), 6),
                    "minnaert_k": float(default_k),
                    "roughness_m": 0.0,
                    "micro_slope_deg": 0.0,
                    "label": "unlabeled" if lab < 0 else label_name(int(lab)),
                },
            }
        )
    scene = {"objects": objects}
    text = "# A scene reconstructed from a real capture by `lidar-sim reconstruct`.\n"
    files.append(write_atomic(folder / "scene.yaml", text + yaml.safe_dump(scene, sort_keys=False)))
    return files, scene


def _firing_times(pattern: SpinningPattern) -> NDArray[np.float64]:
    """(C, W) each beam's firing time in its revolution, s."""
    c, w = pattern.channels, int(pattern.scanner.firings_per_revolution or 1)
    return pattern.schedule(0, c * w).time_s.reshape(w, c).T


@dataclass
class _Place:
    """A capture's frames on the scanner's grid, posed: what every later step reads.

    Attributes
    ----------
    frames : list of PointCloud
        Every frame of the captures.
    chosen, scene_frames : list of int
        The frames used, and those the scene is built from.
    config : ScannerConfig
    scanner_name : str
    mapping : dict
        The scanner as written to ``scanner.yaml``.
    pattern : SpinningPattern
    offset_m : (3,) float64
        The scanner model's origin in the capture's sensor frame.
    grids : dict of int to BeamGrid
    poses : (F, 4, 4) float64
        World from sensor, one a frame of the capture.
    pose_source : str
    waypoints : dict of int to list
        Each used frame's survey waypoints.
    motion : dict of int to ((C, W, 3, 3), (C, W, 3))
        Each used frame's world-from-sensor pose at each beam's firing.
    origin_m, directions : (C, W, 3) float64
        The beams in the sensor frame.
    """

    frames: list[PointCloud]
    chosen: list[int]
    scene_frames: list[int]
    config: ScannerConfig
    scanner_name: str
    mapping: dict[str, Any]
    pattern: SpinningPattern
    offset_m: NDArray[np.float64]
    grids: dict[int, BeamGrid]
    poses: NDArray[np.float64]
    pose_source: str
    waypoints: dict[int, list[dict[str, Any]]]
    motion: dict[int, tuple[NDArray[np.float64], NDArray[np.float64]]]
    origin_m: NDArray[np.float64]
    directions: NDArray[np.float64]

    def world_beams(self, k: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Frame ``k``'s beams in the world: (C, W, 3) origins (m) and directions."""
        rot, pos = self.motion[k]
        origin = np.einsum("cwij,cwj->cwi", rot, self.origin_m) + pos
        return origin, np.einsum("cwij,cwj->cwi", rot, self.directions)


def _frames_used(captures: list[Path], n_all: int, options: ReconstructOptions) -> list[int]:
    """The frames ``--frames`` picks, checked against ``--hold-out``."""
    a, b = options.frames if options.frames is not None else (0, n_all)
    if not (0 <= a < b <= n_all):
        raise InputError(captures[0], f"--frames {a}:{b} is outside its {n_all} frames (0:{n_all})")
    chosen = list(range(a, b))
    for n in options.hold_out:
        if n not in chosen:
            raise InputError(
                captures[0], f"--hold-out {n}: no such frame among those used ({a} to {b - 1})"
            )
    if all(k in options.hold_out for k in chosen):
        raise InputError(
            captures[0],
            f"--hold-out leaves no frame for the scene ({len(chosen)} frame(s) used): "
            "hold out fewer, or give more frames",
        )
    return chosen


def _place(captures: list[Path], options: ReconstructOptions, clock: _Clock) -> _Place:
    """Steps 1 to 3: read, organise, pose."""
    frames = _read_capture(captures)
    chosen = _frames_used(captures, len(frames), options)
    clock.lap("read")
    config, scanner_name, mapping = _scanner(captures, options.scanner)
    if config.pattern != "spinning":
        raise InputError(str(options.scanner), "reconstruct takes a spinning scanner's frames")
    pattern = SpinningPattern(config)
    offset_m = sensor_offset_m(frames[chosen[0]], pattern)
    grids = {k: organize(frames[k], pattern, offset_m) for k in chosen}
    clock.lap("organise")
    poses, pose_source = _poses(captures, frames, options.poses)
    if pose_source == "KISS-ICP":
        clock.say(
            "poses: estimated by KISS-ICP (it can drift on a sensor of few beams: "
            "give --poses FILE where the poses are known)"
        )
    period_s = 1.0 / float(config.rotation_hz)
    waypoints = {k: frame_waypoints(poses, k, period_s, options.pose_time_share) for k in chosen}
    fire_s = _firing_times(pattern)
    motion = {k: pixel_poses(frame_trajectory(waypoints[k]), fire_s) for k in chosen}
    origin_m, directions = beam_rays(pattern)
    clock.lap("poses")
    return _Place(
        frames, chosen, [k for k in chosen if k not in options.hold_out], config,
        scanner_name, mapping, pattern, offset_m, grids, poses, pose_source, waypoints,
        motion, origin_m + offset_m, directions,
    )  # fmt: skip


def _reflect(
    place: _Place, fused: FrameMesh, options: ReconstructOptions
) -> tuple[FaceReflectance, dict[str, float]]:
    """Step 6: a reflectance per face, and the detection threshold (as the scanner's
    ``detection`` section)."""
    model = ReturnModel.from_scanner(place.config, pattern=place.pattern)
    scene = [(k, place.grids[k], place.motion[k]) for k in place.scene_frames]
    readings = read_faces(fused, scene, place.origin_m, model)
    faces = face_reflectance(readings, DEFAULT_MINNAERT_K,
                             model.intensity_scale, model.intensity_max)  # fmt: skip
    threshold = detection_threshold(readings, model, options.threshold_quantile)
    ref_m = float(place.config.detection.reference_range_m)
    return faces, {"reference_range_m": ref_m, "reference_reflectance": threshold * ref_m**2}


def _ego(place: _Place, params: EgoParams | None) -> EgoEstimate | None:
    """Step 4: the ego, from the scene frames (None when not asked for)."""
    if params is None:
        return None
    frames = place.scene_frames
    range_m = np.stack([place.grids[k].range_m for k in frames])
    fired = np.stack([place.grids[k].fired for k in frames])
    return estimate_ego(range_m, fired, place.pattern.elevation_rad, params)


def _write(
    folder: Path,
    place: _Place,
    fused: FrameMesh,
    faces: FaceReflectance,
    ego: EgoEstimate | None,
    options: ReconstructOptions,
) -> tuple[list[Path], dict[int, Path]]:
    """Step 7: the scanner, the scene, the ego and a survey per frame; the files and the
    surveys."""
    from ..config.vendor import write_scanner_yaml

    folder.mkdir(parents=True, exist_ok=True)
    files = [
        write_scanner_yaml(
            place.mapping,
            f"# The scanner of the capture: {place.scanner_name}.\n# detection: the received "
            f"peak of the weakest {options.threshold_quantile:.1%} of the scene frames' "
            "echoes\n# (reconstruct's detection_threshold); the rest as the scanner has it.\n",
            folder / "scanner.yaml",
        )
    ]
    files += _write_scene(folder, fused, faces, DEFAULT_MINNAERT_K)[0]
    section = None
    if ego is not None and not ego.empty:  # in the scanner model's frame, as its beams
        files.append(write_ego_mesh(folder / EGO_MESH, ego, *beam_rays(place.pattern)))
        section = ego_section(f"../{EGO_MESH}")
    (folder / "frames").mkdir(exist_ok=True)
    surveys = {k: _frame_survey(folder, k, place, section, options) for k in place.chosen}
    return [*files, *surveys.values()], surveys


def _score_frames(
    folder: Path,
    place: _Place,
    fused: FrameMesh,
    surveys: dict[int, Path],
    options: ReconstructOptions,
    clock: _Clock,
) -> list[dict[str, Any]]:
    """Step 8: the held-out frames (with the baseline) and the rescans, scored."""
    from .findings import findings
    from .protocol import baseline_cloud, scan_frame, score

    first = place.frames[place.chosen[0]]
    meta = {"intensity_max": float(first.meta.get("intensity_max", place.config.intensity_max))}
    lidar_origin = place.pattern.scanner.range_reference == "lidar_origin"
    r0 = place.pattern.scanner.beam_origin_offset_m if lidar_origin else 0.0
    jobs = [("heldout", k) for k in options.hold_out]
    jobs += [("rescan", k) for k in place.scene_frames] if options.rescan else []
    rows: list[dict[str, Any]] = []
    # the fused mesh in Embree once, for every frame (its triangles' tables built once)
    fused_mesh = MeshCaster(fused.vertices_m, fused.faces)
    for kind, k in jobs:
        real = cloud_of_grid(place.grids[k], meta)
        sim, _ = scan_frame(surveys[k])
        clock.lap("scan")
        names = (f"real {k}", f"simulated {k}")
        result = score(real, sim, folder / kind / f"{k:04d}", names, options.pages)
        surface = fused_mesh.ranges(*place.world_beams(k), r0)
        rows.append({"frame": k, "protocol": kind, "method": "simulated",
                     "nvs": result.get("nvs"), "same_beams": result.get("same_beams"),
                     "findings": findings(place.grids[k], sim, surface)})  # fmt: skip
        if kind == "heldout":
            sources = [(place.grids[j], place.poses[j]) for j in place.scene_frames]
            base = baseline_cloud(sources, place.poses[k], place.pattern, meta, place.offset_m)
            names = (f"real {k}", "moved points")
            bres = score(real, base, folder / "baseline" / f"{k:04d}", names, options.pages)
            rows.append({"frame": k, "protocol": kind, "method": "baseline",
                         "nvs": bres.get("nvs"), "same_beams": bres.get("same_beams")})  # fmt: skip
        clock.lap("compare")
    return rows


def _summary(
    captures: list[Path],
    place: _Place,
    fused: FrameMesh,
    faces: FaceReflectance,
    ego: EgoEstimate | None,
    rows: list[dict[str, Any]],
    timings_s: dict[str, float],
) -> dict[str, Any]:
    """``summary.json``'s content."""
    return {
        "captures": [str(p) for p in captures],
        "scanner": place.scanner_name,
        "frames": place.chosen,
        "scene_frames": place.scene_frames,
        "held_out": [k for k in place.chosen if k not in place.scene_frames],
        "poses_from": place.pose_source,
        "detection": place.mapping["detection"],
        "poses": [p[:3, :].round(9).tolist() for p in place.poses[place.chosen]],
        "mesh": {
            "faces": len(fused.faces),
            "vertices": len(fused.vertices_m),
            "faces_by_frame": {int(k): int((fused.frame == k).sum()) for k in place.scene_frames},
            "reflectance_median": float(np.median(faces.reflectance)),
            "faces_with_readings": int((faces.readings > 0).sum()),
            "readings_per_face_median": float(np.median(faces.readings)),
            "minnaert_k_of_label": {label_name(k): v for k, v in faces.k_of_label.items()},
        },
        "ego": None if ego is None else ego.summary(None if ego.empty else EGO_MESH),
        "results": rows,
        "timings_s": {k: round(v, 3) for k, v in timings_s.items()},
    }


def _frame_survey(
    folder: Path, k: int, place: _Place, ego: dict[str, Any] | None, options: ReconstructOptions
) -> Path:
    """``frames/NNNN.yaml``: one revolution moving as the sensor moved, on its beam grid,
    with the ``ego`` section when the ego blocks beams."""
    survey: dict[str, Any] = {
        "scanner": "../scanner.yaml",
        "scene": "../scene.yaml",
        "trajectory": {"waypoints": place.waypoints[k]},
        # the scanner model's origin in the capture's sensor frame (grid.sensor_offset_m)
        "mount": {"position_m": [round(float(x), 9) for x in place.offset_m]},
        "revolutions": 1,
        "seed": options.seed,
        "output": {"path": f"../out/{k:04d}.npz", "frame": "sensor"},
    }
    if ego is not None:  # the vehicle under the sensor (ego.py), in the scanner's frame
        survey["ego"] = ego
    held = " (held out of the scene)" if k in options.hold_out else ""
    text = (
        f"# Frame {k} of the capture{held}: one revolution, moving as the sensor moved.\n"
        f"# The first firing: column 0, at azimuth {place.config.start_azimuth_deg:g} deg (the "
        "scanner's start_azimuth_deg) and time 0 s, as the capture's\n# first column (its "
        "measurement id 0, or the column its azimuth gives).\n"
    )
    return write_atomic(
        folder / "frames" / f"{k:04d}.yaml", text + yaml.safe_dump(survey, sort_keys=False)
    )


def reconstruct(
    captures: list[Path],
    folder: Path,
    options: ReconstructOptions,
    report: Callable[[str], None] | None = None,
) -> ReconstructResult:
    """Turn captures into a scene, write a survey per frame, and score the protocols.

    Parameters
    ----------
    captures : list of Path
        One capture or several (their frames in order).
    folder : Path
        The output folder (made if missing).
    options : ReconstructOptions
    report : callable, optional
        Called with one line per finished stage.

    Returns
    -------
    ReconstructResult

    Raises
    ------
    InputError
        For a capture, poses file or frame choice that cannot be used (one line, naming
        the file and what was expected).
    """
    clock = _Clock(report)
    place = _place(captures, options, clock)
    ego = _ego(place, options.ego)
    if ego is not None:
        clock.say(ego.line())
    clock.lap("ego")
    meshes = [triangulate(place.grids[k], place.origin_m, place.motion[k], k, options.mesh)
              for k in place.scene_frames]  # fmt: skip
    fused = fuse(meshes, place.poses[:, :3, 3], options.mesh)
    clock.lap("mesh")
    faces, detection = _reflect(place, fused, options)
    place.mapping.setdefault("detection", {}).update(detection)
    clock.lap("reflectance")
    files, surveys = _write(folder, place, fused, faces, ego, options)
    clock.lap("write")
    rows = _score_frames(folder, place, fused, surveys, options, clock)
    summary = _summary(captures, place, fused, faces, ego, rows, clock.timings_s)
    files.append(write_atomic(folder / "summary.json", json.dumps(summary, indent=2) + "\n"))
    if options.pages:  # after summary.json, which it links to
        from ..viz.reconstruct import write_reconstruct_page

        files += write_reconstruct_page(folder, summary, fused.vertices_m, fused.faces,
                                        faces.reflectance, place.poses[place.chosen])  # fmt: skip
        clock.lap("page")
    return ReconstructResult(summary, files, clock.timings_s)


def format_summary(summary: dict[str, Any]) -> str:
    """The results as a table: a row per frame, protocol and method."""
    head = f"{'frame':>5} {'protocol':<8} {'method':<9} " + " ".join(f"{k:>17}" for k in TABLE_KEYS)
    lines = [head]
    for row in summary["results"]:
        nvs = row.get("nvs") or {}
        cells = []
        for k in TABLE_KEYS:
            v = nvs.get(k)
            cells.append(f"{'-':>17}" if v is None else f"{v:>17.4f}")
        lines.append(
            f"{row['frame']:>5} {row['protocol']:<8} {row['method']:<9} " + " ".join(cells)
        )
    return "\n".join(lines)
