"""nuScenes v1.0 tables of a generated dataset, so that ``nuscenes-devkit`` opens it.

Every ``keyframe_every``-th frame is a key frame (a ``sample`` with its ``LIDAR_TOP``
``sample_data``, annotated, with lidarseg labels); the frames between are sweeps
(``sweeps/LIDAR_TOP/``, ``is_key_frame`` false, belonging to the next key frame's sample),
as nuScenes has them between its 2 Hz key frames. With the default 1 every frame is a key
frame. One sequence is one ``scene`` and one ``log``. Each sample
writes a record of its own (``.lidar-sim/nuscenes/NN_FFFFFF.json``: the ego pose, the
sensor's calibration and the boxes in the world frame), so workers need not share
anything and a resumed run keeps the samples it already has; :func:`write_tables` then
builds the thirteen tables and ``lidarseg.json`` from all the records.

Frames and conventions:

- ``ego_pose`` is world from the vehicle at the frame's reference time (its last
  firing), ``calibrated_sensor`` vehicle from lidar (the group's ``mount``); rotations are
  quaternions ``[w, x, y, z]``.
- The points (``samples/LIDAR_TOP/*.pcd.bin``: float32 x, y, z, intensity, ring) are in
  the lidar frame at the reference time, motion-compensated, as nuScenes' are.
- ``sample_annotation``: the box centre and rotation in the world, ``size`` as nuScenes
  orders it, ``[width, length, height]``; ``num_lidar_pts`` the frame's points inside
  the box, whatever they belong to, as nuScenes defines it and the devkit's
  ``points_in_box`` counts (:attr:`~simulator.world.boxes.Boxes.num_points_in_box`; the box's
  own points are :attr:`~simulator.world.boxes.Boxes.num_points`); ``visibility_token`` the
  visibility level of the sensor's share of the object's surface samples (``"1"``:
  0-40 %, ... ``"4"``: 80-100 %).
- ``lidarseg/v1.0-trainval/<sample_data token>_lidarseg.bin``: one uint8 a point, the
  nuScenes-lidarseg class index of its SemanticKITTI label by :data:`NUSCENES_OF_LABEL`;
  the ``lidarseg`` record's token is its ``sample_data`` token, as nuScenes-lidarseg has it
  (the devkit's ``get_sample_lidarseg_stats`` and lidarseg renderers rely on it). No
  ``panoptic.json`` is written: the devkit loads without it.

Tokens are the MD5 of what they name (``sample:3:12``), the same in every run and worker.
Timestamps are microseconds from ``TIME_ORIGIN_S`` plus an hour per sequence.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..labels import SEMANTIC_KITTI, label_name
from ..sensor.trajectory import quaternion_from_matrix
from ..world.boxes import Boxes
from .atomic import write_atomic

__all__ = [
    "ATTRIBUTES",
    "LIDARSEG_CLASSES",
    "NUSCENES_OF_LABEL",
    "NUSCENES_VERSION",
    "SamplePose",
    "lidarseg_indices",
    "record_path",
    "sample_record",
    "sample_token",
    "write_tables",
]

#: The version folder the tables are written in.
NUSCENES_VERSION = "v1.0-trainval"
#: Microseconds of the first sequence's start: 2020-09-13T12:26:40Z.
TIME_ORIGIN_S = 1_600_000_000

#: nuScenes-lidarseg classes by index (the devkit's ``category.json`` order).
LIDARSEG_CLASSES: tuple[str, ...] = (
    "noise", "animal", "human.pedestrian.adult", "human.pedestrian.child",
    "human.pedestrian.construction_worker", "human.pedestrian.personal_mobility",
    "human.pedestrian.police_officer", "human.pedestrian.stroller",
    "human.pedestrian.wheelchair", "movable_object.barrier", "movable_object.debris",
    "movable_object.pushable_pullable", "movable_object.trafficcone",
    "static_object.bicycle_rack", "vehicle.bicycle", "vehicle.bus.bendy", "vehicle.bus.rigid",
    "vehicle.car", "vehicle.construction", "vehicle.emergency.ambulance",
    "vehicle.emergency.police", "vehicle.motorcycle", "vehicle.trailer", "vehicle.truck",
    "flat.driveable_surface", "flat.other", "flat.sidewalk", "flat.terrain", "static.manmade",
    "static.other", "static.vegetation", "vehicle.ego",
)  # fmt: skip

#: nuScenes class of each SemanticKITTI class. Riders are part of their cycle (nuScenes
#: boxes a bicycle with its rider, attribute ``cycle.with_rider``); fences, poles and signs
#: are ``static.manmade``; lane paint and parking are driveable surface; a tram is a rigid
#: bus; SemanticKITTI's other vehicles are trailers; unlabelled, outliers and falling snow
#: are noise, accumulated snow ``flat.other``.
NUSCENES_OF_LABEL: dict[str, str] = {
    "unlabeled": "noise", "outlier": "noise", "car": "vehicle.car",
    "bicycle": "vehicle.bicycle", "bus": "vehicle.bus.rigid",
    "motorcycle": "vehicle.motorcycle", "on-rails": "vehicle.bus.rigid",
    "truck": "vehicle.truck", "other-vehicle": "vehicle.trailer",
    "person": "human.pedestrian.adult", "bicyclist": "vehicle.bicycle",
    "motorcyclist": "vehicle.motorcycle", "road": "flat.driveable_surface",
    "parking": "flat.driveable_surface", "sidewalk": "flat.sidewalk",
    "other-ground": "flat.other", "building": "static.manmade", "fence": "static.manmade",
    "other-structure": "static.manmade", "lane-marking": "flat.driveable_surface",
    "vegetation": "static.vegetation", "trunk": "static.vegetation",
    "terrain": "flat.terrain", "pole": "static.manmade", "traffic-sign": "static.manmade",
    "other-object": "static.other", "falling-snow": "noise",
    "accumulated-snow": "flat.other", "moving-car": "vehicle.car",
    "moving-bicyclist": "vehicle.bicycle", "moving-person": "human.pedestrian.adult",
    "moving-motorcyclist": "vehicle.motorcycle", "moving-on-rails": "vehicle.bus.rigid",
    "moving-bus": "vehicle.bus.rigid", "moving-truck": "vehicle.truck",
    "moving-other-vehicle": "vehicle.trailer",
}  # fmt: skip

#: nuScenes' attributes.
ATTRIBUTES: tuple[str, ...] = (
    "cycle.with_rider", "cycle.without_rider", "pedestrian.moving",
    "pedestrian.sitting_lying_down", "pedestrian.standing", "vehicle.moving", "vehicle.parked",
    "vehicle.stopped",
)  # fmt: skip
_VISIBILITY = (("1", "v0-40"), ("2", "v40-60"), ("3", "v60-80"), ("4", "v80-100"))

_INDEX = {name: i for i, name in enumerate(LIDARSEG_CLASSES)}
_LUT = np.zeros(65536, dtype=np.uint8)
for _name, _id in SEMANTIC_KITTI.items():
    _LUT[_id] = _INDEX[NUSCENES_OF_LABEL[_name]]


def _token(*parts: object) -> str:
    return hashlib.md5(":".join(str(p) for p in parts).encode()).hexdigest()


def sample_token(sequence: int, frame: int) -> str:
    """The token of a frame's ``sample``; its ``sample_data`` is ``sample_data_token``."""
    return _token("sample", sequence, frame)


def sample_data_token(sequence: int, frame: int) -> str:
    """The token of a frame's ``LIDAR_TOP`` ``sample_data`` (and its lidarseg file)."""
    return _token("sample_data", sequence, frame)


def record_path(root: Path, sequence: int, frame: int) -> Path:
    """Where a sample's own record is kept until :func:`write_tables`."""
    return root / ".lidar-sim" / "nuscenes" / f"{sequence:02d}_{frame:06d}.json"


def lidarseg_path(root: Path, sequence: int, frame: int) -> Path:
    """A frame's lidarseg label file."""
    return root / "lidarseg" / NUSCENES_VERSION / (
        f"{sample_data_token(sequence, frame)}_lidarseg.bin"
    )  # fmt: skip


def lidarseg_indices(label: NDArray[np.uint16]) -> NDArray[np.uint8]:
    """nuScenes-lidarseg class indices (N,) uint8 of SemanticKITTI labels (N,)."""
    return _LUT[np.asarray(label, dtype=np.uint16)]


@dataclass(frozen=True)
class SamplePose:
    """Where the sensor was at a frame's reference time, and how it sits on the vehicle.

    Attributes
    ----------
    time_s : float
        The reference time, s from the survey start.
    rotation, position_m : (3, 3), (3,) float
        World from sensor.
    mount_rotation, mount_position_m : (3, 3), (3,) float
        Vehicle from sensor.
    """

    time_s: float
    rotation: NDArray[np.float64]
    position_m: NDArray[np.float64]
    mount_rotation: NDArray[np.float64]
    mount_position_m: NDArray[np.float64]


def _quat_wxyz(rotation: NDArray[np.float64]) -> list[float]:
    x, y, z, w = quaternion_from_matrix(np.asarray(rotation, dtype=np.float64)[None])[0]
    return [float(w), float(x), float(y), float(z)]


def _attribute(label: str, speed_mps: float) -> str:
    if label.endswith("bicyclist") or label.endswith("motorcyclist"):
        return "cycle.with_rider"
    if label in ("bicycle", "motorcycle"):
        return "cycle.without_rider"
    if label.endswith("person"):
        return "pedestrian.moving" if speed_mps > 0.2 else "pedestrian.standing"
    return "vehicle.moving" if speed_mps > 0.2 else "vehicle.parked"


def sample_record(
    sequence: int, frame: int, pose: SamplePose, boxes: Boxes, *, key: bool = True
) -> dict[str, Any]:
    """A frame's own record (JSON-able): its time, poses, whether it is a key frame, and
    its boxes in the world (none for a sweep)."""
    rot_s, pos_s = np.asarray(pose.rotation), np.asarray(pose.position_m)
    ego_rot = rot_s @ np.asarray(pose.mount_rotation).T
    ego_pos = pos_s - ego_rot @ np.asarray(pose.mount_position_m)
    annotations = []
    for b in range(len(boxes)):
        name = label_name(int(boxes.label[b]))
        speed = float(np.linalg.norm(boxes.velocity_mps[b][:2]))
        level = int(np.searchsorted([0.4, 0.6, 0.8], boxes.visibility[b], side="right"))
        annotations.append({
            "instance": int(boxes.instance[b]),
            "category": NUSCENES_OF_LABEL[name],
            "attribute": _attribute(name, speed),
            "visibility": _VISIBILITY[level][0],
            "translation": (rot_s @ boxes.centre_m[b] + pos_s).tolist(),
            "size": [float(boxes.size_m[b][1]), float(boxes.size_m[b][0]),
                     float(boxes.size_m[b][2])],
            "rotation": _quat_wxyz(rot_s @ boxes.rotation[b]),
            # nuScenes' definition: every lidar point in the box (the devkit's points_in_box)
            "num_lidar_pts": int(boxes.num_points_in_box[b]),
        })  # fmt: skip
    return {
        "sequence": sequence,
        "frame": frame,
        "key": key,
        "timestamp": round((TIME_ORIGIN_S + 3600 * sequence + pose.time_s) * 1e6),
        "ego": {"translation": ego_pos.tolist(), "rotation": _quat_wxyz(ego_rot)},
        "sensor": {"translation": np.asarray(pose.mount_position_m, float).tolist(),
                   "rotation": _quat_wxyz(pose.mount_rotation)},
        "annotations": annotations,
    }  # fmt: skip


def _link(records: list[dict[str, Any]]) -> None:
    for a, b in itertools.pairwise(records):
        a["next"], b["prev"] = b["token"], a["token"]


def write_tables(root: Path, samples: list[tuple[int, int]]) -> list[Path]:
    """Build the v1.0 tables and ``lidarseg.json`` of the samples' records and write them
    into ``root / NUSCENES_VERSION``."""
    records = [json.loads(record_path(root, s, f).read_text()) for s, f in sorted(samples)]
    sensor = {"token": _token("sensor", "LIDAR_TOP"), "channel": "LIDAR_TOP", "modality": "lidar"}
    tables: dict[str, list[dict[str, Any]]] = {
        "category": [{"token": _token("category", n), "name": n, "description": n, "index": i}
                     for i, n in enumerate(LIDARSEG_CLASSES)],
        "attribute": [{"token": _token("attribute", n), "name": n, "description": n}
                      for n in ATTRIBUTES],
        "visibility": [{"token": t, "level": lv, "description": f"visibility of the object {lv}"}
                       for t, lv in _VISIBILITY],
        "sensor": [sensor], "map": [],
    }  # fmt: skip
    for name in ("instance", "calibrated_sensor", "ego_pose", "log", "scene", "sample",
                 "sample_data", "sample_annotation", "lidarseg"):  # fmt: skip
        tables[name] = []
    by_sequence: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        by_sequence.setdefault(r["sequence"], []).append(r)
    for seq, recs in sorted(by_sequence.items()):
        log = {"token": _token("log", seq), "logfile": f"lidar-sim-{seq:02d}",
               "vehicle": "lidar-sim", "date_captured": "2020-09-13",
               "location": "generated"}  # fmt: skip
        calib = {"token": _token("calibrated_sensor", seq), "sensor_token": sensor["token"],
                 **recs[0]["sensor"], "camera_intrinsic": []}  # fmt: skip
        samples_, datas = [], []
        instances: dict[int, list[dict[str, Any]]] = {}
        keys = [r["frame"] for r in recs if r.get("key", True)]
        for r in recs:
            key = r.get("key", True)
            # a sweep belongs to the next key frame's sample (the devkit interpolates the
            # boxes between that sample and the one before); after the last, to the last
            owner = next((k for k in keys if k >= r["frame"]), keys[-1] if keys else r["frame"])
            st, sdt = sample_token(seq, owner), sample_data_token(seq, r["frame"])
            ego = {"token": _token("ego_pose", seq, r["frame"]), "timestamp": r["timestamp"],
                   **r["ego"]}  # fmt: skip
            tables["ego_pose"].append(ego)
            if key:
                samples_.append({"token": st, "timestamp": r["timestamp"], "prev": "",
                                 "next": "", "scene_token": _token("scene", seq)})  # fmt: skip
            folder = "samples" if key else "sweeps"
            datas.append({
                "token": sdt, "sample_token": st, "ego_pose_token": ego["token"],
                "calibrated_sensor_token": calib["token"], "timestamp": r["timestamp"],
                "fileformat": "pcd", "is_key_frame": key, "height": 0, "width": 0,
                "filename": f"{folder}/LIDAR_TOP/{seq:02d}_{r['frame']:06d}.pcd.bin",
                "prev": "", "next": "",
            })  # fmt: skip
            if not key:
                continue
            tables["lidarseg"].append({
                # nuScenes-lidarseg: a lidarseg record's token is its sample_data's (the
                # devkit looks it up as ``get("lidarseg", sample_data_token)``)
                "token": sdt, "sample_data_token": sdt,
                "filename": f"lidarseg/{NUSCENES_VERSION}/{sdt}_lidarseg.bin",
            })  # fmt: skip
            for a in r["annotations"]:
                ann = {
                    "token": _token("sample_annotation", seq, r["frame"], a["instance"]),
                    "sample_token": st,
                    "instance_token": _token("instance", seq, a["instance"]),
                    "visibility_token": a["visibility"],
                    "attribute_tokens": [_token("attribute", a["attribute"])],
                    "translation": a["translation"], "size": a["size"],
                    "rotation": a["rotation"], "prev": "", "next": "",
                    "num_lidar_pts": a["num_lidar_pts"], "num_radar_pts": 0,
                    "category": a["category"],
                }  # fmt: skip
                instances.setdefault(a["instance"], []).append(ann)
        _link(samples_)
        _link(datas)
        for inst, anns in sorted(instances.items()):
            _link(anns)
            tables["instance"].append({
                "token": _token("instance", seq, inst),
                "category_token": _token("category", anns[0]["category"]),
                "nbr_annotations": len(anns), "first_annotation_token": anns[0]["token"],
                "last_annotation_token": anns[-1]["token"],
            })  # fmt: skip
            for ann in anns:
                del ann["category"]
                tables["sample_annotation"].append(ann)
        tables["log"].append(log)
        tables["calibrated_sensor"].append(calib)
        tables["scene"].append({
            "token": _token("scene", seq), "log_token": log["token"],
            "nbr_samples": len(samples_), "first_sample_token": samples_[0]["token"],
            "last_sample_token": samples_[-1]["token"], "name": f"sim-{seq:04d}",
            "description": f"lidar-sim sequence {seq}",
        })  # fmt: skip
        tables["sample"] += samples_
        tables["sample_data"] += datas
    # The devkit needs a map for every log: one blank semantic-prior mask serves them all
    # (the generated scenes have no map layers).
    mask = Path("maps") / "blank_semantic_prior.png"
    logs = [g["token"] for g in tables["log"]]
    tables["map"] = [{"token": _token("map", "blank"), "category": "semantic_prior",
                      "filename": str(mask), "log_tokens": logs}]  # fmt: skip
    folder = root / NUSCENES_VERSION
    return [write_atomic(root / mask, _blank_png())] + [
        write_atomic(folder / f"{name}.json", json.dumps(rows, indent=1))
        for name, rows in tables.items()
    ]


def _blank_png(size: int = 8) -> bytes:
    """A black ``size`` x ``size`` greyscale PNG."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (size, size)).save(buf, format="PNG")
    return buf.getvalue()
