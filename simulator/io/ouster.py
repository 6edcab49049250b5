"""Ouster captures: a pcap of lidar packets with the unit's metadata JSON, read through
Ouster's own SDK (``pip install 'lidar-sim[ouster]'``).

A frame (``LidarScan``) is the whole beam grid: one row a beam (``pixels_per_column``), one
column a firing (``columns_per_frame``; ``measurement_id`` = column). RANGE 0 is a beam that
fired and saw nothing, so a frame records its drop-outs exactly: the cloud keeps the pixels
with a return, their ``ring`` (row) and ``column``, and ``meta["beam_grid"]`` the grid's
size. Columns whose packets did not arrive (``status`` without its valid bit) were never
seen, so they are not drop-outs: they are left out of ``firings_per_ring``.

Fields: ``xyz`` from the SDK's ``XYZLut`` (the sensor frame, m); ``intensity`` =
REFLECTIVITY (Ouster's calibrated reflectivity, 0-255); ``range_m`` = RANGE / 1000, measured
as Ouster measures it, from the lidar origin on the spin axis (the beam's exit point is
``lidar_origin_to_beam_origin_mm`` nearer); ``time_s`` from the column timestamps (s from
the frame's first valid column); ``near_ir`` and ``signal`` where the profile has them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..pointcloud import PointCloud
from .drivers import grid_meta

__all__ = ["find_metadata", "read_pcap_frames"]


def find_metadata(pcap: Path, meta: Path | None = None) -> Path:
    """The metadata JSON of ``pcap``: ``meta`` if given, else ``STEM.json`` beside it, else
    the JSON beside it whose stem is the longest start of the pcap's stem (the way
    ouster-sdk pairs a recording with its metadata, e.g. ``OS-1-128_1024x10.json`` for
    ``OS-1-128_1024x10_lb_n3.pcap``)."""
    if meta is not None:
        if not Path(meta).is_file():
            raise InputError(meta, "metadata file not found (--meta)")
        return Path(meta)
    same = pcap.with_suffix(".json")
    if same.is_file():
        return same
    starts = [p for p in pcap.parent.glob("*.json") if pcap.stem.startswith(p.stem)]
    if starts:
        return max(starts, key=lambda p: len(p.stem))
    raise InputError(
        pcap,
        f"no sensor metadata beside it (expected {same.name}, or a JSON whose name starts "
        "the pcap's); pass --meta FILE",
    )


def _sdk() -> Any:
    try:
        import ouster.sdk as sdk
        from ouster.sdk import core
    except ImportError:
        raise InputError(
            "ouster-sdk", "reading an Ouster pcap needs it: pip install 'lidar-sim[ouster]'"
        ) from None
    return sdk, core


def read_pcap_frames(pcap: Path, meta: Path | None = None) -> Iterator[PointCloud]:
    """The frames of an Ouster pcap, in order, as point records (see the module).

    Parameters
    ----------
    pcap : Path
        The recording.
    meta : Path, optional
        Its metadata JSON (found beside it when not given: :func:`find_metadata`).
    """
    sdk, core = _sdk()
    meta_path = find_metadata(pcap, meta)
    try:
        source = sdk.open_source(str(pcap), meta=[str(meta_path)])
    except Exception as exc:  # the SDK raises RuntimeError/ValueError of its own
        raise InputError(pcap, f"ouster-sdk cannot open it with {meta_path.name}: {exc}") from None
    info = source.sensor_info[0]
    xyz_lut = core.XYZLut(info)
    rows, columns = info.format.pixels_per_column, info.format.columns_per_frame
    name = f"{info.prod_line} {info.sn}".strip()
    for frame in source:
        scan = frame[0]
        if scan is None:
            continue
        range_mm = scan.field("RANGE")
        valid_column = (np.asarray(scan.status) & 1).astype(bool)
        hit = (range_mm > 0) & valid_column[None, :]
        xyz = xyz_lut(scan)[hit]
        row, column = np.nonzero(hit)
        stamps = np.asarray(scan.timestamp, dtype=np.int64)
        t0 = stamps[valid_column].min() if valid_column.any() else 0
        fields: dict[str, np.ndarray] = {
            "xyz": xyz.astype(np.float32),
            "intensity": scan.field("REFLECTIVITY")[hit].astype(np.float32),
            "range_m": (range_mm[hit].astype(np.float64) * 1e-3).astype(np.float32),
            "ring": row.astype(np.uint16),
            "time_s": (stamps[column] - t0).astype(np.float64) * 1e-9,
            "return_number": np.ones(len(row), dtype=np.uint8),
            "column": column.astype(np.uint16),
        }
        for field, key in (("NEAR_IR", "near_ir"), ("SIGNAL", "signal")):
            if field in scan.fields:
                fields[key] = scan.field(field)[hit].astype(np.float32)
        yield PointCloud(
            fields,
            {
                "scanner": name,
                "intensity_max": 255.0,
                "frame": "sensor",
                "frame_id": int(scan.frame_id),
                "time_origin_ns": int(t0),
                "range_reference": "lidar_origin",
                "metadata": str(meta_path),
                **grid_meta(rows, columns, int(valid_column.sum())),
            },
        )
    source.close()
