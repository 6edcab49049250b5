"""The field names and units of real drivers' point clouds, turned into the point record.

PCD files, ROS 2 ``PointCloud2`` messages and LAS extra dimensions written by LiDAR drivers
name the same quantities differently. :func:`cloud_from_fields` maps them onto the record
(:mod:`simulator.pointcloud`) and keeps everything else under the file's own name:

=================  ===========================================================  ==========
record field       file field (first found wins)                                unit rule
=================  ===========================================================  ==========
``xyz``            ``x y z``                                                    m
``intensity``      ``reflectivity`` (Ouster: calibrated), ``intensity``,        as stored
                   ``remission``, ``i``; with both, ``intensity`` is kept as
                   ``signal``
``ring``           ``ring``, ``channel``, ``laser_id``, ``laser_number``        index
``time_s``         ``time_s``, ``time``, ``t``, ``timestamp``, ``time_stamp``,  integer: ns;
                   ``time_offset``                                              float: s
``range_m``        ``range``, ``distance``                                      integer: mm;
                                                                                float: m
``return_number``  ``return_number``; else nebula's ``return_type`` codes       from 1
=================  ===========================================================  ==========

Sources of the names: the ROS 2 drivers' point types (velodyne ``PointXYZIRT``: ``intensity``
f32, ``ring`` u16, ``time`` f32 s from the stamp; ouster-ros ``PointOS``: ``t`` u32 ns,
``reflectivity`` u16, ``ring`` u16, ``range`` u32 mm; Hesai's ``timestamp`` f64 s;
tier4/nebula's ``PointXYZIRCAEDT``: ``channel`` u16, ``return_type`` u8, ``azimuth``,
``elevation``, ``distance`` f32 m, ``time_stamp`` u32 ns from the scan's stamp).

An *organised* cloud (``height > 1``: one row a beam, one column a firing, as ouster-ros
writes it) records its whole beam grid: its points with no return (``x = y = z = 0`` or NaN)
are dropped, the others keep their ``column``, and ``meta["beam_grid"]`` says the grid's
``rows`` and ``columns``: every beam that fired is known, and so are its drop-outs. In any
cloud a point whose ``x``, ``y`` and ``z`` are all NaN is PCL's mark of no return and is
dropped; any other non-finite coordinate is kept, for the reader's check to refuse
(:func:`simulator.io.read.check_values`). A field of the record with an integer type
(``label``, ``instance``, ...) must hold whole numbers its type holds: a uint32 ``label`` of
70000 is refused, not wrapped to 4464.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..errors import InputError
from ..pointcloud import DIAGNOSTIC_FIELDS, FIELDS, PointCloud

__all__ = ["NEBULA_SECOND_RETURNS", "cloud_from_fields", "grid_meta"]

INTENSITY_NAMES = ("reflectivity", "intensity", "remission", "i")
RING_NAMES = ("ring", "channel", "laser_id", "laser_number")
TIME_NAMES = ("time_s", "time", "t", "timestamp", "time_stamp", "time_offset")
RANGE_NAMES = ("range_m", "range", "distance")

#: tier4/nebula ``ReturnType`` codes (``nebula_common.hpp``: 0 UNKNOWN, 1 LAST, 2 FIRST,
#: 3 STRONGEST, 4 FIRST_WEAK, 5 LAST_WEAK, 6 IDENTICAL, 7 SECOND, 8 SECONDSTRONGEST,
#: 9 FIRST_STRONGEST, 10 LAST_STRONGEST) that are a pulse's second return in a dual mode.
NEBULA_SECOND_RETURNS = (1, 5, 7, 8, 10)
_NEBULA_FIRST_RETURNS = (2, 4, 6, 9)


def _first(fields: dict[str, NDArray[Any]], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in fields), None)


def _whole(
    source: Path, name: str, values: NDArray[Any], top: int, bottom: int = 0
) -> NDArray[Any]:
    """``values`` as whole numbers in ``[bottom, top]``, or a clear error."""
    v = np.asarray(values)
    if v.dtype.kind not in "uif":
        raise InputError(source, f"field {name!r} is {v.dtype}; expected numbers")
    if v.dtype.kind == "f":
        finite = v[np.isfinite(v)]
        if len(finite) != len(v) or np.any(finite != np.round(finite)):
            raise InputError(source, f"field {name!r} holds non-whole values; expected indices")
    if len(v) and (v.min() < bottom or v.max() > top):
        raise InputError(
            source, f"field {name!r} runs {v.min()}..{v.max()}; expected {bottom}..{top}"
        )
    return v


def grid_meta(rows: int, columns: int, fired_columns: int | None = None) -> dict[str, Any]:
    """``meta`` entries of a cloud that records its whole beam grid.

    Parameters
    ----------
    rows, columns : int
        The grid: one row a beam (ring), one column a firing.
    fired_columns : int, optional
        Columns that were fired and received (fewer where packets were lost); ``columns``
        if not given.
    """
    fired = columns if fired_columns is None else fired_columns
    return {"beam_grid": {"rows": int(rows), "columns": int(columns)}, "firings_per_ring": fired}


def cloud_from_fields(
    fields: dict[str, NDArray[Any]],
    source: Path,
    grid: tuple[int, int] | None = None,
    meta: dict[str, Any] | None = None,
) -> PointCloud:
    """The point record of a driver's named fields (see the module's table).

    Parameters
    ----------
    fields : dict of str to (N,) ndarray
        The file's fields by their own names; ``x``, ``y``, ``z`` required.
    source : Path
        The file, for messages.
    grid : (rows, columns), optional
        The cloud is organised: point ``i`` is beam ``i // columns``, firing ``i % columns``
        (N = rows x columns); beams with no return are dropped and the grid recorded.
    meta : dict, optional
        Facts to carry (``meta`` of the cloud), e.g. the sensor's name.

    Returns
    -------
    PointCloud
        ``xyz`` and whichever of ``intensity``, ``ring``, ``time_s``, ``range_m``,
        ``return_number`` the file has, with every other field under its own name.
    """
    missing = [a for a in "xyz" if a not in fields]
    if missing:
        raise InputError(
            source,
            f"no {'/'.join(missing)} field; expected x y z coordinates "
            f"(the file has {', '.join(fields) or 'none'})",
        )
    for a in "xyz":
        if np.asarray(fields[a]).dtype.kind != "f":
            raise InputError(source, f"field {a!r} is {fields[a].dtype}; expected a float")
    xyz = np.stack([np.asarray(fields[a], dtype=np.float64) for a in "xyz"], axis=1)
    rest: dict[str, NDArray[Any]] = {}
    for name, values in fields.items():
        if name in ("x", "y", "z"):
            continue
        v = np.asarray(values)
        if v.size != len(xyz):
            raise InputError(
                source,
                f"field {name!r} holds {v.size:,} values for {len(xyz):,} points; expected "
                "one a point",
            )
        rest[name] = v.reshape(len(xyz))
    out: dict[str, NDArray[Any]] = {}
    meta = dict(meta or {})
    keep = np.ones(len(xyz), dtype=bool)
    if grid is not None:
        rows, columns = grid
        if rows * columns != len(xyz):
            raise InputError(source, f"{len(xyz)} points do not fill a {rows} x {columns} grid")
        keep = ~np.isnan(xyz).all(axis=1) & np.any(xyz != 0.0, axis=1)
        index = np.arange(len(xyz))
        out["column"] = (index % columns).astype(np.uint16)
        if _first(rest, RING_NAMES) is None:
            rest["ring"] = index // columns
        meta.update(grid_meta(rows, columns))
    else:
        keep = ~np.isnan(xyz).all(axis=1)  # PCL's point with no return
    out["xyz"] = xyz.astype(np.float32)

    name = _first(rest, INTENSITY_NAMES)
    if name is not None:
        if rest[name].dtype.kind not in "uif":
            raise InputError(source, f"field {name!r} is {rest[name].dtype}; expected numbers")
        out["intensity"] = rest.pop(name).astype(np.float32)
        meta.setdefault("intensity_field", name)
        if "intensity" in rest:  # reflectivity won; the other is the raw signal
            out["signal"] = rest.pop("intensity").astype(np.float32)
    name = _first(rest, RING_NAMES)
    if name is not None:
        out["ring"] = _whole(source, name, rest.pop(name), 65535).astype(np.uint16)
    name = _first(rest, TIME_NAMES)
    if name is not None:
        t = rest.pop(name)
        if t.dtype.kind not in "uif":
            raise InputError(source, f"field {name!r} is {t.dtype}; expected a time")
        out["time_s"] = t.astype(np.float64) * (1e-9 if t.dtype.kind in "ui" else 1.0)
        meta.setdefault("time_field", name)
    name = _first(rest, RANGE_NAMES)
    if name is not None:
        r = rest.pop(name)
        if r.dtype.kind not in "uif":
            raise InputError(source, f"field {name!r} is {r.dtype}; expected a range")
        out["range_m"] = (r.astype(np.float64) * (1e-3 if r.dtype.kind in "ui" else 1.0)).astype(
            np.float32
        )
    if "return_number" in rest:
        out["return_number"] = _whole(source, "return_number", rest.pop("return_number"), 255)
    elif "return_type" in rest:
        code = _whole(source, "return_type", rest["return_type"], 255).astype(np.int64)
        dual = bool(np.isin(code, _NEBULA_FIRST_RETURNS).any())
        second = np.isin(code, NEBULA_SECOND_RETURNS) & dual
        out["return_number"] = np.where(second, 2, 1)
    known = {**FIELDS, **DIAGNOSTIC_FIELDS}
    for name, values in rest.items():
        out[name] = values
    for name, values in list(out.items()):
        if name in known:
            dtype, shape = known[name]
            if np.dtype(dtype).kind in "ui" and np.asarray(values).dtype != dtype:
                info = np.iinfo(dtype)
                _whole(source, name, values, int(info.max), int(info.min))
            out[name] = np.asarray(values).astype(dtype).reshape(len(values), *shape)
        if grid is not None or not keep.all():
            out[name] = out[name][keep]
    return PointCloud(out, meta)
