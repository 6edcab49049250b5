"""ROS 2 bags of a sequence (rosbags library; no ROS install needed).

Each frame becomes a ``sensor_msgs/msg/PointCloud2`` on ``/points`` in one of the drivers'
point layouts (:mod:`.pointcloud2`: ``lidar-sim``, ``velodyne``, ``autoware``, ``ouster``),
``frame_id`` ``lidar`` by default. The ground-truth pose of each frame (world from sensor
at the frame's reference time) is a ``tf2_msgs/msg/TFMessage`` on ``/tf`` from ``map`` to
the cloud's frame. Stamps count from the survey start (t = 0 is 0 ns). The bag is MCAP
(ROS 2's default storage since Iron) or sqlite3 (:class:`~.pointcloud2.BagOptions`); each
topic's offered QoS is recorded (reliable, volatile, keep last 10), which ``ros2 bag play``
offers again, and which both reliable and best-effort subscribers accept.

:func:`read_bag_frames` reads the ``PointCloud2`` messages of a topic of any bag (any
driver's point layout: the fields are mapped by :mod:`simulator.io.drivers`).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..config.rosbag import WORLD_FRAME_ID
from ..errors import InputError, OutputError
from ..pointcloud import PointCloud
from .drivers import cloud_from_fields
from .pointcloud2 import BagOptions, encode, layout_dtype

__all__ = ["POINT_DTYPE", "RosbagWriter", "read_bag_frames"]

#: One point of the ROS 2 velodyne driver's layout (packed, 22 bytes; :mod:`.pointcloud2`).
POINT_DTYPE = layout_dtype("velodyne")

#: sensor_msgs/PointField datatype codes -> numpy type (little-endian form).
_POINTFIELD = {1: "i1", 2: "u1", 3: "i2", 4: "u2", 5: "i4", 6: "u4", 7: "f4", 8: "f8"}
#: numpy type (without byte order) -> sensor_msgs/PointField datatype.
_DATATYPE = {name: code for code, name in _POINTFIELD.items()}
_CLOUD_TYPE = "sensor_msgs/msg/PointCloud2"


def _message_fields(msg: Any, source: Path) -> tuple[dict[str, NDArray[Any]], int, int]:
    """A PointCloud2's fields by name, and its height and width; a message whose layout
    cannot be (fields that overlap or leave the point, a ``row_step`` shorter than a row,
    ``data`` shorter than ``height x row_step``) is refused before anything is read."""
    order = ">" if msg.is_bigendian else "<"
    height, width = int(msg.height), int(msg.width)
    step, row_step = int(msg.point_step), int(msg.row_step)
    names, formats, offsets, spans = [], [], [], []
    for f in msg.fields:
        code = _POINTFIELD.get(int(f.datatype))
        if code is None:
            raise InputError(
                source, f"field {f.name!r} has PointField datatype {f.datatype}; expected 1-8"
            )
        count, offset = int(f.count), int(f.offset)
        if not f.name or f.name in names or count < 1:
            raise InputError(
                source,
                f"PointField {f.name!r} (count {count}); expected a name used once and a "
                "count of 1 or more",
            )
        end = offset + np.dtype(code).itemsize * count
        if end > step:
            raise InputError(
                source,
                f"field {f.name!r} runs to byte {end:,} of a {step}-byte point (point_step); "
                "expected every field inside the point",
            )
        names.append(f.name)
        formats.append((order + code, (count,)) if count > 1 else order + code)
        offsets.append(offset)
        spans.append((offset, end, f.name))
    if not names:
        raise InputError(source, "a PointCloud2 without fields; expected x y z")
    spans.sort()
    for (_, end, a), (start, _, b) in itertools.pairwise(spans):
        if start < end:
            raise InputError(source, f"fields {a!r} and {b!r} overlap; expected apart")
    raw = np.asarray(msg.data, dtype=np.uint8)
    if height * width and (row_step < width * step or len(raw) < height * row_step):
        raise InputError(
            source,
            f"a PointCloud2 of {height:,} x {width:,} points of {step} bytes, rows of "
            f"{row_step:,} bytes, holds {len(raw):,} bytes of data; expected row_step >= "
            "width x point_step and height x row_step bytes (a message that lies about its size)",
        )
    dtype = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": step})
    if height * width == 0:
        points = np.zeros(0, dtype=dtype)
    else:
        rows = raw[: height * row_step].reshape(height, row_step)
        packed = np.ascontiguousarray(rows[:, : width * step]).reshape(-1)
        points = packed.view(dtype)
    fields = {n: points[n].astype(points[n].dtype.newbyteorder("=")) for n in names}
    return fields, height, width


def _messages(reader: Any, connections: list[Any], store: Any, bag: Path) -> Iterator[Any]:
    """The messages of ``connections``, deserialised; the storage's or the CDR's damage is
    one line (rosbags and sqlite raise their own errors)."""
    messages = reader.messages(connections=connections)
    index = 0
    while True:
        try:
            connection, _t, raw = next(messages)
        except StopIteration:
            return
        except Exception as exc:  # sqlite3/mcap errors of a damaged storage file
            raise InputError(
                bag, f"cannot read message {index} of its storage: {exc or type(exc).__name__}"
            ) from None
        try:
            msg = store.deserialize_cdr(raw, connection.msgtype)
        except Exception as exc:  # rosbags' CDR decoder on damaged bytes
            raise InputError(
                bag,
                f"message {index} is not a readable {connection.msgtype} "
                f"({exc or type(exc).__name__})",
            ) from None
        yield msg
        index += 1


def read_bag_frames(bag: Path, topic: str | None = None) -> Iterator[PointCloud]:
    """The ``sensor_msgs/msg/PointCloud2`` messages of one topic of a ROS 2 bag, in order.

    Parameters
    ----------
    bag : Path
        The bag folder (with its ``metadata.yaml``).
    topic : str, optional
        The topic; needed only when the bag has more than one PointCloud2 topic.

    Yields
    ------
    PointCloud
        One frame a message; ``meta["stamp_ns"]`` is the message header's stamp. An
        organised message (``height > 1``) records its beam grid.
    """
    try:
        from rosbags.rosbag2 import Reader
        from rosbags.typesys import Stores, get_typestore
    except ImportError:
        raise InputError(
            bag, "reading a bag needs the rosbags library: pip install 'lidar-sim[ros]'"
        ) from None
    store = get_typestore(Stores.ROS2_HUMBLE)
    try:
        reader = Reader(bag)
        reader.open()
    except Exception as exc:  # rosbags' own errors: not a bag, a broken metadata.yaml
        raise InputError(bag, f"not a readable ROS 2 bag ({exc})") from None
    try:
        clouds = sorted(c.topic for c in reader.connections if c.msgtype == _CLOUD_TYPE)
        if topic is None:
            if len(clouds) != 1:
                raise InputError(
                    bag,
                    f"has {len(clouds)} PointCloud2 topics "
                    f"({', '.join(clouds) or 'none'}); pick one with --topic",
                )
            topic = clouds[0]
        chosen = [c for c in reader.connections if c.topic == topic]
        if not chosen:
            topics = ", ".join(sorted({c.topic for c in reader.connections}))
            raise InputError(bag, f"no topic {topic!r}; the bag has {topics}")
        if chosen[0].msgtype != _CLOUD_TYPE:
            raise InputError(
                bag, f"topic {topic} carries {chosen[0].msgtype}; expected {_CLOUD_TYPE}"
            )
        for index, msg in enumerate(_messages(reader, chosen, store, bag)):
            stamp = int(msg.header.stamp.sec) * 10**9 + int(msg.header.stamp.nanosec)
            meta = {"stamp_ns": stamp, "topic": topic, "frame_id": msg.header.frame_id}
            try:
                fields, height, width = _message_fields(msg, bag)
                grid = (height, width) if height > 1 else None
                cloud = cloud_from_fields(fields, bag, grid, meta)
            except InputError as exc:  # said of the message
                raise InputError(bag, f"{topic} message {index}: {exc.problem}") from None
            yield cloud
    finally:
        reader.close()


def _offered_qos() -> list[Any]:
    """The QoS profile recorded for every topic: reliable, volatile, keep last 10, no
    deadline, lifespan or lease (what ``ros2 bag record`` writes for such a publisher);
    empty with a rosbags too old to write one."""
    try:
        from rosbags.interfaces import (
            Qos,
            QosDurability,
            QosHistory,
            QosLiveliness,
            QosReliability,
            QosTime,
        )
    except ImportError:
        return []
    never = QosTime(sec=2147483647, nsec=4294967295)
    return [Qos(QosHistory.KEEP_LAST, 10, QosReliability.RELIABLE, QosDurability.VOLATILE,
                never, never, QosLiveliness.AUTOMATIC, never, False)]  # fmt: skip


def _open_writer(writer: Any, path: Path, storage: str) -> Any:
    """rosbags' ``Writer`` of a bag at ``path`` in ``storage``; rosbags before 0.10
    (ouster-sdk's pin) writes sqlite3 only."""
    from rosbags.rosbag2 import StoragePlugin

    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    try:
        return writer(path, version=8, storage_plugin=plugin)
    except TypeError:
        if storage != "sqlite3":
            raise OutputError(
                f"{path.name}: MCAP bags need rosbags 0.10 or later; give --storage sqlite3, "
                "or pip install -U rosbags"
            ) from None
        return writer(path)


class RosbagWriter:
    """Writes frames and poses to a ROS 2 bag folder.

    The bag is written to a temporary folder beside ``path`` and renamed when closed.
    The bytes depend only on what is written (no wall-clock time, host or random id goes
    into the storage file or ``metadata.yaml``), so a bag written twice is the same.

    Parameters
    ----------
    path : Path
        The bag folder; must not exist, unless ``replace``.
    options : BagOptions, optional
        Storage, point layout and frame id (default: MCAP, ``lidar-sim``, ``lidar``).
    return_mode : str
        The scanner's return mode (Autoware's return types follow it).
    world_id : str
        The parent frame of the poses on ``/tf``.
    replace : bool
        Replace a bag already at ``path`` when this one is complete (:meth:`close`).
    """

    def __init__(
        self,
        path: Path,
        options: BagOptions | None = None,
        return_mode: str = "strongest",
        world_id: str = WORLD_FRAME_ID,
        *,
        replace: bool = False,
    ) -> None:
        self.options = options = options or BagOptions()
        self.return_mode = return_mode
        try:
            from rosbags.rosbag2 import Writer
            from rosbags.typesys import Stores, get_typestore
        except ImportError:
            raise OutputError(
                "rosbag2 output needs the rosbags library: pip install 'lidar-sim[ros]'"
            ) from None
        self.path = Path(path)
        if self.path.exists() and not replace:
            raise OutputError(f"{self.path}: exists; a bag is written to a new folder")
        # rosbags names the database after its folder: write <parent>/.<name>.tmp/<name>.
        self.tmp_parent = self.path.with_name(f".{self.path.name}.tmp")
        shutil.rmtree(self.tmp_parent, ignore_errors=True)
        self.tmp_parent.mkdir(parents=True)
        self.tmp = self.tmp_parent / self.path.name
        self.frame_id, self.world_id = options.frame_id, world_id
        self.ts = get_typestore(Stores.ROS2_HUMBLE)
        self.writer = _open_writer(Writer, self.tmp, options.storage)
        self.writer.open()
        qos = _offered_qos()
        extra: dict[str, Any] = {"offered_qos_profiles": qos} if qos else {}
        self.points = self.writer.add_connection(
            "/points", "sensor_msgs/msg/PointCloud2", typestore=self.ts, **extra
        )
        self.tf = self.writer.add_connection(
            "/tf", "tf2_msgs/msg/TFMessage", typestore=self.ts, **extra
        )

    def _header(self, stamp_ns: int, frame_id: str):  # type: ignore[no-untyped-def]
        t = self.ts.types
        stamp = t["builtin_interfaces/msg/Time"](sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9)
        return t["std_msgs/msg/Header"](stamp=stamp, frame_id=frame_id)

    def write_frame(
        self,
        cloud: PointCloud,
        stamp_s: float,
        rotation: NDArray[np.float64],
        position_m: NDArray[np.float64],
        quaternion: NDArray[np.float64],
    ) -> None:
        """Write one frame (``cloud["time_s"]`` relative to ``stamp_s``) and its pose."""
        t = self.ts.types
        del rotation
        stamp_ns = round(stamp_s * 1e9)
        dtype = layout_dtype(self.options.point_layout)
        data = encode(cloud, self.options.point_layout, self.return_mode)
        fields = [
            t["sensor_msgs/msg/PointField"](
                name=name,
                offset=dtype.fields[name][1],
                datatype=_DATATYPE[dtype.fields[name][0].str.lstrip("<|")],
                count=1,
            )
            for name in dtype.names
        ]
        msg = t["sensor_msgs/msg/PointCloud2"](
            header=self._header(stamp_ns, self.frame_id),
            height=1,
            width=len(cloud),
            fields=fields,
            is_bigendian=False,
            point_step=dtype.itemsize,
            row_step=dtype.itemsize * len(cloud),
            data=np.frombuffer(data.tobytes(), dtype=np.uint8),
            is_dense=True,
        )
        self.writer.write(
            self.points, stamp_ns, self.ts.serialize_cdr(msg, "sensor_msgs/msg/PointCloud2")
        )
        x, y, z = (float(v) for v in position_m)
        qx, qy, qz, qw = (float(v) for v in quaternion)
        tf = t["geometry_msgs/msg/TransformStamped"](
            header=self._header(stamp_ns, self.world_id),
            child_frame_id=self.frame_id,
            transform=t["geometry_msgs/msg/Transform"](
                translation=t["geometry_msgs/msg/Vector3"](x=x, y=y, z=z),
                rotation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw),
            ),
        )
        tf_msg = t["tf2_msgs/msg/TFMessage"](transforms=[tf])
        self.writer.write(
            self.tf, stamp_ns, self.ts.serialize_cdr(tf_msg, "tf2_msgs/msg/TFMessage")
        )

    def close(self) -> Path:
        """Finish the bag and rename it into place (a bag there before is moved aside
        first, then deleted: the name holds a complete bag, or for a moment none)."""
        self.writer.close()
        old = self.tmp_parent.with_name(f".{self.path.name}.old")
        if self.path.exists():
            shutil.rmtree(old, ignore_errors=True)
            self.path.rename(old)
        self.tmp.rename(self.path)
        self.tmp_parent.rmdir()
        shutil.rmtree(old, ignore_errors=True)
        return self.path

    def abort(self) -> None:
        """Drop the bag."""
        try:
            self.writer.close()
        finally:
            shutil.rmtree(self.tmp_parent, ignore_errors=True)
