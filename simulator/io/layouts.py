"""Dataset layouts: where each sample and each sequence's files go, and how they are
written and read back.

``semantickitti``
    ``sequences/NN/velodyne/FFFFFF.bin`` (float32 x, y, z, reflectance 0-1),
    ``sequences/NN/labels/FFFFFF.label`` (:mod:`simulator.io.labels`), and per sequence
    ``poses.txt`` (world from sensor, 3x4 row-major, in the sensor's own frame, not
    KITTI's camera frame), ``times.txt`` and ``calib.txt`` with identity ``Tr``; and the
    same poses as ``poses/NN.txt`` at the root, where KITTI odometry tools look.
``nuscenes``
    ``samples/LIDAR_TOP/NN_FFFFFF.pcd.bin`` (float32 x, y, z, intensity, ring) of the key
    frames (every ``keyframe_every``-th), ``sweeps/LIDAR_TOP/`` of the frames between,
    ``lidarseg/v1.0-trainval/*_lidarseg.bin`` and the v1.0 tables in ``v1.0-trainval/``
    (:mod:`simulator.io.nuscenes`): ``NuScenes(version="v1.0-trainval", dataroot=...)``
    opens it.
``npz``
    ``sequences/NN/frames/FFFFFF.npz`` (every field, :mod:`simulator.io.npz`), and the
    per-sequence files of ``semantickitti``.
``openpcdet``
    OpenPCDet's custom-dataset format for lidar-only detection: ``points/NN_FFFFFF.npy``
    ((N, 4) float32 x, y, z, intensity), ``labels/NN_FFFFFF.txt`` (one box a line:
    ``x y z dx dy dz heading class``, the box centre and size in m, the heading in rad,
    the class from :data:`OPENPCDET_CLASSES`), ``ImageSets/train.txt`` and ``val.txt``
    (the last sequence is the validation split when there are several; otherwise every
    fifth frame), and the per-sequence files of ``semantickitti``.

``kitti``
    KITTI's 3D object-detection layout (:mod:`simulator.io.kitti_object`):
    ``training/velodyne/SSFFFF.bin``, ``training/label_2/SSFFFF.txt`` (15 fields),
    ``training/calib/SSFFFF.txt`` (a virtual front camera) and ``ImageSets/train.txt``,
    ``val.txt`` (split as ``openpcdet``'s); points as scanned (not compensated), as
    KITTI's are, the boxes at the moment the head faces forward.

``rosbag2``
    One ROS 2 bag a sequence, ``bags/NN/`` (``NN.mcap`` or ``NN.db3`` and
    ``metadata.yaml``), as ``lidar-sim sequence --format rosbag2`` writes its ``bag/``
    (:class:`~.rosbag.RosbagWriter`): every frame's ``PointCloud2`` on ``/points``, stamped
    with its first firing, its points as scanned (not compensated, as a driver publishes
    them), in the point layout the spec's ``rosbag2:`` section names
    (:class:`~.pointcloud2.BagOptions`), and its ground-truth pose on ``/tf``. A bag is
    written by one worker, whole, under a temporary name and renamed when complete: a
    sequence's samples are all there or none is.

In ``semantickitti`` and ``npz``, ``sequences/NN/boxes/FFFFFF.npz`` holds the frame's boxes
(:class:`simulator.world.boxes.Boxes`: every field by name).

With range images, ``sequences/NN/range_images/FFFFFF.npy`` holds the (6, rings, 1024)
float32 stack of :data:`simulator.rangeimage.CHANNELS`. Every file is written to a
temporary name and renamed (:mod:`simulator.io.atomic`), so a sample whose files all
exist is complete.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..config.dataset import DATASET_LAYOUTS
from ..errors import ConfigError, OutputError
from ..labels import label_name
from ..pointcloud import PointCloud
from ..rangeimage import CHANNELS, range_image
from ..world.boxes import Boxes
from . import kitti_object, nuscenes
from .atomic import write_atomic
from .labels import pack_labels, unpack_labels
from .npz import NpzWriter, savez
from .pointcloud2 import BagOptions
from .poses import read_kitti_poses, write_identity_calib, write_kitti_poses, write_times
from .rosbag import RosbagWriter

__all__ = [
    "LAYOUTS",
    "OPENPCDET_CLASSES",
    "RANGE_IMAGE_WIDTH",
    "DatasetLayout",
    "Sample",
    "SampleSink",
    "read_semantickitti_frame",
    "semantickitti_frames",
    "write_manifest",
]

#: The layout names (the dataset spec's ``layout`` choices).
LAYOUTS = DATASET_LAYOUTS
#: OpenPCDet class of each countable SemanticKITTI class (moving ones as their static one).
OPENPCDET_CLASSES: dict[str, str] = {
    "car": "Car", "moving-car": "Car", "truck": "Truck", "moving-truck": "Truck",
    "bus": "Bus", "moving-bus": "Bus", "other-vehicle": "Other_Vehicle",
    "moving-other-vehicle": "Other_Vehicle", "on-rails": "Tram", "moving-on-rails": "Tram",
    "person": "Pedestrian", "moving-person": "Pedestrian", "bicyclist": "Cyclist",
    "moving-bicyclist": "Cyclist", "motorcyclist": "Motorcyclist",
    "moving-motorcyclist": "Motorcyclist", "bicycle": "Bicycle", "motorcycle": "Motorcycle",
}  # fmt: skip
#: Columns of a dataset's range images.
RANGE_IMAGE_WIDTH = 1024


@dataclass(frozen=True)
class Sample:
    """One sample to write.

    Attributes
    ----------
    sequence, frame : int
        Its indices.
    cloud : PointCloud
        Its points (``xyz`` (N, 3) m, ``intensity``, ``ring``, ``label``, ``instance``).
    intensity_max : float
        The scanner's full-scale intensity: SemanticKITTI's reflectance is
        ``intensity / intensity_max``.
    boxes : Boxes, optional
        The frame's boxes (None: an empty set).
    pose : SamplePose, optional
        The sensor's pose and mount at the reference time (the nuScenes, KITTI and
        rosbag2 layouts need it).
    camera_visibility : (B,) float, optional
        ``kitti``: each box's share of surface samples the virtual camera sees.
    """

    sequence: int
    frame: int
    cloud: PointCloud
    intensity_max: float
    boxes: Boxes | None = None
    pose: nuscenes.SamplePose | None = None
    camera_visibility: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class DatasetLayout:
    """The files of one dataset folder in one layout.

    Attributes
    ----------
    name : str
        One of :data:`LAYOUTS`.
    root : Path
        The dataset folder.
    range_images : bool
        Whether each sample has a range image too.
    keyframe_every : int
        ``nuscenes``: every this many frames is a key frame; the others are sweeps.
    bag : BagOptions
        ``rosbag2``: how the bags are written (storage, point layout, frame id).
    """

    name: str
    root: Path
    range_images: bool = False
    keyframe_every: int = 1
    bag: BagOptions = field(default_factory=BagOptions)

    def __post_init__(self) -> None:
        if self.name not in LAYOUTS:
            raise ConfigError("dataset", "layout", f"{self.name!r}; expected one of "
                              + ", ".join(LAYOUTS))  # fmt: skip
        object.__setattr__(self, "root", Path(self.root))

    def sequence_dir(self, sequence: int) -> Path:
        """``sequences/NN`` of sequence ``sequence``."""
        return self.root / "sequences" / f"{sequence:02d}"

    def bag_path(self, sequence: int) -> Path:
        """``bags/NN``, the bag folder of sequence ``sequence`` (``rosbag2``)."""
        return self.root / "bags" / f"{sequence:02d}"

    @property
    def whole_sequences(self) -> bool:
        """Whether a sequence's samples are one file, written whole by one worker (a bag
        cannot be appended to safely): ``rosbag2``."""
        return self.name == "rosbag2"

    @property
    def keeps_boxes(self) -> bool:
        """Whether the layout writes the frames' boxes (a bag holds clouds and poses)."""
        return self.name != "rosbag2"

    def sample_paths(self, sequence: int, frame: int) -> list[Path]:
        """The files of one sample, the range image (if any) last (``rosbag2``: its
        sequence's bag, its storage file in the layout's storage and its metadata)."""
        seq = self.sequence_dir(sequence)
        name = f"{frame:06d}"
        if self.name == "rosbag2":
            bag = self.bag_path(sequence)
            return [bag / f"{bag.name}{self.bag.storage_suffix}", bag / "metadata.yaml"]
        if self.name == "semantickitti":
            paths = [seq / "velodyne" / f"{name}.bin", seq / "labels" / f"{name}.label"]
        elif self.name == "nuscenes" and frame % self.keyframe_every == 0:
            paths = [self.root / "samples" / "LIDAR_TOP" / f"{sequence:02d}_{name}.pcd.bin",
                     nuscenes.lidarseg_path(self.root, sequence, frame),
                     nuscenes.record_path(self.root, sequence, frame)]  # fmt: skip
        elif self.name == "nuscenes":  # a sweep: points only, no labels or annotations
            paths = [self.root / "sweeps" / "LIDAR_TOP" / f"{sequence:02d}_{name}.pcd.bin",
                     nuscenes.record_path(self.root, sequence, frame)]  # fmt: skip
        elif self.name == "kitti":
            top, stem = self.root / "training", kitti_name(sequence, frame)
            paths = [top / "velodyne" / f"{stem}.bin", top / "calib" / f"{stem}.txt",
                     top / "label_2" / f"{stem}.txt"]  # fmt: skip
        elif self.name == "openpcdet":
            stem = f"{sequence:02d}_{name}"
            paths = [self.root / "points" / f"{stem}.npy", self.root / "labels" / f"{stem}.txt"]
        else:
            paths = [seq / "frames" / f"{name}.npz"]
        if self.name in ("semantickitti", "npz"):
            paths.append(seq / "boxes" / f"{name}.npz")
        if self.range_images:
            paths.append(seq / "range_images" / f"{name}.npy")
        return paths

    def has_sample(self, sequence: int, frame: int) -> bool:
        """Whether every file of the sample exists (so it is complete)."""
        return all(p.exists() for p in self.sample_paths(sequence, frame))

    @property
    def compensates(self) -> bool:
        """Whether the layout's convention is motion-compensated points (in the sensor frame
        at the reference time, every moving object's points where it stands then):
        SemanticKITTI's (the KITTI odometry scans, compensated by KITTI with the GPS/IMU:
        its odometry devkit's readme), nuScenes' (sweeps stamped when the spin completes),
        OpenPCDet's here (it takes clouds as they come) and this project's npz. KITTI's
        object scans come from its raw recordings, which are not compensated (the raw
        devkit's readme asks the user to "untwist" them). A ROS 2 bag holds what a driver
        publishes: the points as scanned, each with its time after the stamp, for the
        receiver's own distortion correction (Autoware's ``distortion_corrector``)."""
        return self.name not in ("kitti", "rosbag2")

    def open_samples(self, sequence: int, return_mode: str = "strongest") -> SampleSink:
        """Where the samples of sequence ``sequence`` go, for a scanner of
        ``return_mode``: each to its own files (:meth:`write_sample`), or, in ``rosbag2``,
        all into the sequence's bag, renamed into place by ``close`` (``abort`` drops it)."""
        if self.name == "rosbag2":
            return SequenceBag(self.bag_path(sequence), self.bag, return_mode)
        return SampleFiles(self)

    def remove_partial(self) -> list[Path]:
        """Delete what a killed run left half-written that is not a temporary file
        (:func:`~.atomic.remove_stale_temps` removes those): ``rosbag2``'s unfinished bag
        folders, ``bags/.NN.tmp``, and a replaced bag not yet deleted, ``bags/.NN.old``.
        Returns the folders removed."""
        top = self.root / "bags"
        if self.name != "rosbag2" or not top.is_dir():
            return []
        partial = [p for p in top.glob(".*.*") if p.suffix in (".tmp", ".old") and p.is_dir()]
        for p in partial:
            shutil.rmtree(p)
        return partial

    def write_sample(self, sample: Sample) -> list[Path]:
        """Write one sample; return the files written (:meth:`sample_paths`). (A
        ``rosbag2`` sample goes into its sequence's bag: :meth:`open_samples`.)"""
        if self.whole_sequences:
            raise ValueError(f"a {self.name} sample is written into its sequence's bag "
                             "(open_samples), not on its own")  # fmt: skip
        sequence, frame, cloud = sample.sequence, sample.frame, sample.cloud
        intensity_max, boxes = sample.intensity_max, sample.boxes
        paths = self.sample_paths(sequence, frame)
        xyz = cloud["xyz"]
        if self.name == "kitti":
            if sample.pose is None:
                raise ValueError("a KITTI sample needs its pose (the mount)")
            data = np.zeros((len(cloud), 4), dtype="<f4")
            data[:, :3], data[:, 3] = xyz, cloud["intensity"] / intensity_max
            write_atomic(paths[0], data.tobytes())
            velo_from_imu = np.eye(4)
            velo_from_imu[:3, :3] = np.asarray(sample.pose.mount_rotation).T
            velo_from_imu[:3, 3] = -velo_from_imu[:3, :3] @ sample.pose.mount_position_m
            write_atomic(paths[1], kitti_object.calib_text(velo_from_imu))
            shown = boxes or Boxes()
            seen = sample.camera_visibility
            write_atomic(paths[2], kitti_object.label_text(
                shown, np.zeros(len(shown)) if seen is None else seen))  # fmt: skip
        elif self.name == "semantickitti":
            data = np.zeros((len(cloud), 4), dtype="<f4")
            data[:, :3], data[:, 3] = xyz, cloud["intensity"] / intensity_max
            write_atomic(paths[0], data.tobytes())
            write_atomic(paths[1], pack_labels(cloud["label"], cloud["instance"]).tobytes())
        elif self.name == "nuscenes":
            if sample.pose is None:
                raise ValueError("a nuScenes sample needs its pose")
            data = np.zeros((len(cloud), 5), dtype="<f4")
            data[:, :3], data[:, 3], data[:, 4] = xyz, cloud["intensity"], cloud["ring"]
            write_atomic(paths[0], data.tobytes())
            key = frame % self.keyframe_every == 0
            if key:
                write_atomic(paths[1], nuscenes.lidarseg_indices(cloud["label"]).tobytes())
            shown = (boxes or Boxes()) if key else Boxes()
            record = nuscenes.sample_record(sequence, frame, sample.pose, shown, key=key)
            write_atomic(paths[-2 if self.range_images else -1], json.dumps(record))
        elif self.name == "openpcdet":
            data = np.zeros((len(cloud), 4), dtype="<f4")
            data[:, :3], data[:, 3] = xyz, cloud["intensity"]
            buf = io.BytesIO()
            np.save(buf, data)
            write_atomic(paths[0], buf.getvalue())
            write_atomic(paths[1], openpcdet_labels(boxes or Boxes()))
        else:
            paths[0].parent.mkdir(parents=True, exist_ok=True)
            writer = NpzWriter(paths[0], cloud.spec, {"max_points": len(cloud)})
            try:
                writer.write(cloud)
            except BaseException:
                writer.abort()
                raise
            writer.close()
        if self.name in ("semantickitti", "npz"):
            buf = io.BytesIO()
            savez(buf, **(boxes or Boxes()).arrays())
            write_atomic(paths[-2 if self.range_images else -1], buf.getvalue())
        if self.range_images:
            images = range_image(cloud, width=RANGE_IMAGE_WIDTH)
            buf = io.BytesIO()
            np.save(buf, np.stack([images[c] for c in CHANNELS]))
            write_atomic(paths[-1], buf.getvalue())
        return paths

    def write_sequence_files(
        self,
        sequence: int,
        times_s: ArrayLike,
        rotations: ArrayLike,
        positions_m: ArrayLike,
    ) -> list[Path]:
        """Write a sequence's ``poses.txt``, ``times.txt`` (``{:.9e}``) and ``calib.txt``
        (none in the ``nuscenes``, ``kitti`` and ``rosbag2`` layouts: a bag has its poses
        on ``/tf``).

        Parameters
        ----------
        sequence : int
            Its index.
        times_s : (F,) array of float
            Each frame's reference time, s.
        rotations : (F, 3, 3) array of float
            World-from-sensor rotations then.
        positions_m : (F, 3) array of float
            Sensor positions then, m.
        """
        if self.name in ("nuscenes", "kitti", "rosbag2"):
            return []
        seq = self.sequence_dir(sequence)
        # KITTI odometry tools (pykitti, the devkit's evaluation) read poses/NN.txt.
        odometry = self.root / "poses" / f"{sequence:02d}.txt"
        odometry.parent.mkdir(parents=True, exist_ok=True)
        return [
            write_kitti_poses(seq / "poses.txt", rotations, positions_m),
            write_kitti_poses(odometry, rotations, positions_m),
            write_times(seq / "times.txt", times_s, ".9e"),
            write_identity_calib(seq / "calib.txt"),
        ]

    def write_dataset_files(self, samples: list[tuple[int, int]]) -> list[Path]:
        """Files of the whole dataset, of its ``samples`` ((sequence, frame) pairs):
        OpenPCDet's ``ImageSets`` splits, nuScenes' tables; nothing in the other layouts."""
        if self.name == "nuscenes":
            return nuscenes.write_tables(self.root, samples)
        if self.name not in ("openpcdet", "kitti"):
            return []
        sequences = sorted({s for s, _ in samples})
        if len(sequences) > 1:
            val = {p for p in samples if p[0] == sequences[-1]}
        else:
            val = {p for k, p in enumerate(sorted(samples)) if k % 5 == 4}
        names = {p: (kitti_name(*p) if self.name == "kitti" else f"{p[0]:02d}_{p[1]:06d}")
                 for p in samples}  # fmt: skip
        train = [names[p] for p in sorted(samples) if p not in val]
        return [
            write_atomic(self.root / "ImageSets" / "train.txt", "".join(f"{n}\n" for n in train)),
            write_atomic(self.root / "ImageSets" / "val.txt",
                         "".join(f"{names[p]}\n" for p in sorted(val))),
        ]  # fmt: skip


class SampleSink(Protocol):
    """Where the samples of one sequence go (:meth:`DatasetLayout.open_samples`)."""

    def write(self, sample: Sample) -> None:
        """Write one sample (with its pose)."""

    def close(self) -> None:
        """Finish: every sample written is complete on disk."""

    def abort(self) -> None:
        """Stop after a failure, leaving nothing half-written of its own."""


class SampleFiles:
    """Each sample to its own files, complete when written (every layout but
    ``rosbag2``)."""

    def __init__(self, layout: DatasetLayout) -> None:
        self.layout = layout

    def write(self, sample: Sample) -> None:
        """Write the sample's files (:meth:`DatasetLayout.write_sample`)."""
        self.layout.write_sample(sample)

    def close(self) -> None:
        """Nothing to finish."""

    def abort(self) -> None:
        """Nothing to drop: each file is written atomically on its own."""


class SequenceBag:
    """A sequence's samples into one ROS 2 bag (:class:`~.rosbag.RosbagWriter`, as the
    ``sequence`` command's ``rosbag2`` frames go): each sample's cloud stamped with its
    pose's time, its pose on ``/tf``; the bag written under a temporary name and renamed
    by :meth:`close`.

    Parameters
    ----------
    path : Path
        The bag folder, ``bags/NN``; a bag there is replaced when this one is complete
        (a run without ``--resume`` writes every sequence again).
    options : BagOptions
        Storage, point layout, frame id.
    return_mode : str
        The scanner's return mode (Autoware's return types follow it).
    """

    def __init__(self, path: Path, options: BagOptions, return_mode: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.writer: RosbagWriter | None = None
        self.options, self.return_mode = options, return_mode

    def write(self, sample: Sample) -> None:
        """Add the sample's cloud (``time_s`` after its pose's time) and its pose."""
        from ..sensor.trajectory import quaternion_from_matrix

        if sample.pose is None:
            raise ValueError("a bag's sample needs its pose (the stamp and /tf)")
        if self.writer is None:  # (opened with the first frame: a failed build leaves nothing)
            self.writer = RosbagWriter(self.path, self.options, self.return_mode, replace=True)
        pose = sample.pose
        self.writer.write_frame(sample.cloud, pose.time_s, pose.rotation, pose.position_m,
                                quaternion_from_matrix(pose.rotation))  # fmt: skip

    def close(self) -> None:
        """Finish the bag and rename it into place."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def abort(self) -> None:
        """Drop the unfinished bag."""
        if self.writer is not None:
            self.writer.abort()
            self.writer = None


def kitti_name(sequence: int, frame: int) -> str:
    """The six-digit KITTI sample name of a frame: ``SSFFFF`` (sequences 0-99, frames
    0-9999), so that every worker names its samples on its own."""
    if not (0 <= sequence < 100 and 0 <= frame < 10_000):
        raise ValueError(f"the kitti layout names 100 sequences of 10000 frames; got "
                         f"sequence {sequence}, frame {frame}")  # fmt: skip
    return f"{sequence:02d}{frame:04d}"


def openpcdet_labels(boxes: Boxes) -> str:
    """OpenPCDet custom-dataset label lines, ``x y z dx dy dz heading class``, of the
    boxes of countable classes it names (:data:`OPENPCDET_CLASSES`) that hold at least
    one point of the object itself (:attr:`~simulator.world.boxes.Boxes.num_points`: the ground
    under a fully occluded car does not count)."""
    lines = []
    for b in range(len(boxes)):
        name = OPENPCDET_CLASSES.get(label_name(int(boxes.label[b])))
        if name is None or boxes.num_points[b] < 1:
            continue
        values = [*boxes.centre_m[b], *boxes.size_m[b], boxes.yaw_rad[b]]
        lines.append(" ".join(f"{v:.6f}" for v in values) + f" {name}\n")
    return "".join(lines)


def write_manifest(root: str | Path, manifest: dict[str, Any]) -> Path:
    """Write ``manifest.json`` (indented JSON) in the dataset folder ``root``."""
    return write_atomic(Path(root) / "manifest.json", json.dumps(manifest, indent=2))


def semantickitti_frames(
    root: str | Path, sequences: list[str] | None = None
) -> list[tuple[Path, Path, NDArray[np.float64]]]:
    """The frames of a SemanticKITTI-layout folder, in sequence then frame order.

    Parameters
    ----------
    root : str or Path
        The dataset folder (holding ``sequences/``).
    sequences : list of str, optional
        Only these sequence folders (``"00"``, ...).

    Returns
    -------
    list of (Path, Path, (4, 4) ndarray of float64)
        Each frame's ``.bin``, its ``.label`` (which may be missing) and its
        world-from-sensor pose from ``poses.txt`` (by frame number, or by position when
        the file has fewer lines).

    Raises
    ------
    OutputError
        If ``root`` has no ``sequences`` folder, or a ``poses.txt`` is missing or bad.
    """
    top = Path(root) / "sequences"
    if not top.is_dir():
        raise OutputError(f"{top}: not a folder; expected a SemanticKITTI-layout dataset")
    folders = sorted(p for p in top.iterdir() if p.is_dir())
    if sequences is not None:
        folders = [f for f in folders if f.name in sequences]
    items: list[tuple[Path, Path, NDArray[np.float64]]] = []
    for seq in folders:
        poses = read_kitti_poses(seq / "poses.txt")
        for k, scan in enumerate(sorted((seq / "velodyne").glob("*.bin"))):
            pose = np.eye(4)
            pose[:3] = poses[int(scan.stem)] if int(scan.stem) < len(poses) else poses[k]
            items.append((scan, seq / "labels" / f"{scan.stem}.label", pose))
    return items


def read_semantickitti_frame(
    scan: str | Path, label_path: str | Path
) -> tuple[NDArray[np.float32], NDArray[np.uint16], NDArray[np.uint16]]:
    """Read one SemanticKITTI frame.

    Returns
    -------
    points : (N, 4) ndarray of float32
        x, y, z (m) and reflectance.
    label, instance : (N,) ndarray of uint16
        From the ``.label`` file; empty if it does not exist.
    """
    points = np.fromfile(scan, dtype="<f4").reshape(-1, 4)
    label_path = Path(label_path)
    raw = np.fromfile(label_path, dtype="<u4") if label_path.exists() else np.zeros(0, "<u4")
    label, instance = unpack_labels(raw)
    return points, label, instance
