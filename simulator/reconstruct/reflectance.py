"""Per-face reflectance: the scanner's per-hit model inverted on every reading of a face.

The mesh's corners are returns (:mod:`.mesh`: a triangle's three, a surfel's one). A
return's readings are its own, and every other frame's return that lies on a face of
its: those beams are cast from their frames' poses into the reconstructed mesh, and the
face they meet counts when the hit is where the return was measured (within
``tolerance_m``); the reading goes to that face's corner nearest the hit. A reading's
reported intensity ``I`` is taken back through the sensor, step by step in reverse of
:func:`simulator.steps.hits.reported_intensity`: the range response at the measured range, the
channel's gain, the intensity scale, which leaves the backscatter ``b``; then the
Minnaert law at the beam's incidence on the face, ``rho = b / cos^k``. The reported
intensity is an energy measure, so neither the range's ``1/R^2`` nor the footprint's
peak factor is in it: they decide only whether the return was detected (what the scan
back reproduces on its own).

A return seen by several beams gets one value: the median of its readings. Readings at
zero (the reading rounded away) or at the sensor's maximum (saturated) are censored:
each still counts in the median's rank, below or above every real value, but not with
its value, so a return that is mostly dark is not made bright by its few brighter
readings, and a saturated one is not dimmed to the maximum. When the median itself falls
on a censored reading, the return gets the censoring bound (half a step's reflectance
below; the maximum's above). A face's value is the median over its corners of the
reflectance that makes each corner's own beam read as it did under the face's normal
(``rho_j (cos_j / cos_Fj)^k``, ``cos_j`` the return's own incidence, the mean over the
faces meeting at it: a beam through a corner may meet any of them).

The Minnaert exponent ``k``: where the capture has labels, one ``k`` is fitted per class
over its readings (:func:`simulator.calibrate.fits.fit_intensity`, calibrate's own fit,
when the class's incidences span enough to tell ``k`` from ``rho``); elsewhere the scene
material's ``k`` is used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .. import physics
from ..calibrate.fits import fit_intensity
from ..steps.hits import RANGE_FORMS, ReturnModel
from .grid import BeamGrid
from .mesh import FrameMesh, MeshCaster, unit_normals

__all__ = [
    "FaceReflectance",
    "Readings",
    "backscatter_of_reading",
    "detection_threshold",
    "face_reflectance",
    "read_faces",
]

#: The cosine floor of the per-hit model's Minnaert law (physics.minnaert_backscatter).
COS_FLOOR = 1e-4
#: Fewest readings of a class for its own Minnaert exponent.
MIN_CLASS_READINGS = 200
#: The exponent's physical range (calibrate's).
K_RANGE = (0.0, 3.0)


@dataclass(frozen=True)
class Readings:
    """Every reading of a face.

    Attributes
    ----------
    patch : (M,) int64
        The return (a corner of the mesh) each reading is of.
    backscatter : (M,) float64
        ``b`` inverted from the reading (for a censored one: its bound).
    censored : (M,) int8
        -1: the reading was zero; +1: saturated; 0: a value.
    cos : (M,) float64
        Incidence cosine of the beam on the face.
    label : (M,) int64
        The reading's label (-1: none).
    range_m : (M,) float64
    patch_of_face : (F, 3) int64
        Each face's corners' returns.
    corner_cos : (F, 3) float64
        The incidence cosine on each face of its corners' own beams.
    cos_of_return : (R,) float64
        Each return's own incidence: the mean of ``corner_cos`` over the faces that
        meet at it.
    """

    patch: NDArray[np.int64]
    backscatter: NDArray[np.float64]
    censored: NDArray[np.int8]
    cos: NDArray[np.float64]
    label: NDArray[np.int64]
    range_m: NDArray[np.float64]
    patch_of_face: NDArray[np.int64]
    corner_cos: NDArray[np.float64]
    cos_of_return: NDArray[np.float64]


@dataclass(frozen=True)
class FaceReflectance:
    """The result per face.

    Attributes
    ----------
    reflectance : (F,) float64
    minnaert_k : (F,) float64
    readings : (F,) int64
        How many readings its surfel has (0: it got the median of all).
    label : (F,) int64
        The majority label of its readings (-1: none).
    k_of_label : dict of int to float
        The exponents fitted per class.
    """

    reflectance: NDArray[np.float64]
    minnaert_k: NDArray[np.float64]
    readings: NDArray[np.int64]
    label: NDArray[np.int64]
    k_of_label: dict[int, float]


def backscatter_of_reading(
    intensity: NDArray[np.float64],
    range_m: NDArray[np.float64],
    channel: NDArray[np.int64],
    model: ReturnModel,
) -> NDArray[np.float64]:
    """The backscatter ``b`` that the sensor reports as ``intensity`` (the inverse of
    :func:`simulator.steps.hits.reported_intensity`, before its clip and rounding).

    Parameters
    ----------
    intensity : (M,) float64
        Reported readings.
    range_m : (M,) float64
        Measured ranges, m.
    channel : (M,) int64
        Each reading's channel (the slot of its gain).
    model : ReturnModel
    """
    raw = np.asarray(intensity, dtype=np.float64)
    response = model.response
    if response is not None:
        p = response.range_params
        if response.range_form == RANGE_FORMS["power"]:
            raw = raw / (np.maximum(range_m, 1e-6) / p[0]) ** p[1]
        elif response.range_form == RANGE_FORMS["velodyne_focal"]:
            near = 1.0 - range_m / p[2]
            raw = raw - p[1] * np.abs(p[0] - 256.0 * (near * near))
        raw = raw / response.gain_of_slot[channel % len(response.gain_of_slot)]
    return np.maximum(raw, 0.0) / model.intensity_scale


def read_faces(
    mesh: FrameMesh,
    grids: list[tuple[int, BeamGrid, tuple[NDArray[np.float64], NDArray[np.float64]]]],
    beam_origin_m: NDArray[np.float64],
    model: ReturnModel,
    tolerance_m: float = 0.15,
) -> Readings:
    """Every frame's returns that lie on a face of ``mesh``.

    Parameters
    ----------
    mesh : FrameMesh
    grids : list of (frame, BeamGrid, ((C, W, 3, 3), (C, W, 3)))
        The frames whose readings count, with the world-from-sensor rotation and position
        at each beam's firing (:func:`.motion.pixel_poses`).
    beam_origin_m : (C, W, 3) float64
        Each beam's origin in the sensor frame, m.
    model : ReturnModel
        The scanner's (intensity scale, maximum, step, response).
    tolerance_m : float
        Largest distance between the hit and the measured return, m (plus 1 % of the
        range).
    """
    caster = MeshCaster(mesh.vertices_m, mesh.faces)
    v = mesh.vertices_m
    fn = unit_normals(v, mesh.faces)
    origin_s = beam_origin_m
    parts: list[tuple] = []
    step = model.intensity_step if model.intensity_step > 0 else 1.0
    n_grid = grids[0][1].range_m.size if grids else 1
    corner_keys = mesh.frame[:, None] * n_grid + mesh.pixels
    keys, corner_return = np.unique(corner_keys, return_inverse=True)
    corner_return = corner_return.reshape(-1, 3)
    own_direction = np.zeros((len(keys), 3))
    v = mesh.vertices_m
    for frame, grid, (rot_all, pos_all) in grids:
        ch, col = np.nonzero(grid.returned)
        rot, pos = rot_all[ch, col], pos_all[ch, col]
        point = np.einsum("nij,nj->ni", rot, grid.xyz_m[ch, col]) + pos
        origin = np.einsum("nij,nj->ni", rot, origin_s[ch, col]) + pos
        ray = point - origin
        dist = np.linalg.norm(ray, axis=1)
        d = ray / np.maximum(dist, 1e-9)[:, None]
        # its own returns: each a corner of the mesh where fusion kept it
        own_key = frame * n_grid + ch * grid.shape[1] + col
        at = np.minimum(np.searchsorted(keys, own_key), len(keys) - 1)
        own = keys[at] == own_key
        # the others' faces it saw: cast, where the hit is at the return; the reading
        # goes to the face's corner nearest the hit
        t, prim = caster.cast(origin, d)
        hit = np.isfinite(t)
        prim = np.where(hit, prim, 0)
        cross = hit & (mesh.frame[prim] != frame) & (np.abs(t - dist) <= tolerance_m + 0.01 * dist)
        xr = np.flatnonzero(cross)
        spot = origin[xr] + t[xr, None] * d[xr]
        corners = v[mesh.faces[prim[xr]]]
        nearest = np.argmin(np.linalg.norm(corners - spot[:, None, :], axis=2), axis=1)
        rows = np.concatenate([np.flatnonzero(own), xr])
        ret = np.concatenate([at[own], corner_return[prim[xr], nearest]])
        own_direction[at[own]] = d[own]
        c_, w_ = ch[rows], col[rows]
        intensity = grid.intensity[c_, w_]
        rng = grid.range_m[c_, w_]
        # an own reading's incidence is set below, once every frame's direction is known
        cos = np.concatenate(
            [np.full(int(own.sum()), np.nan), np.abs((fn[prim[xr]] * d[xr]).sum(axis=1))]
        )
        censored = np.zeros(len(rows), dtype=np.int8)
        censored[intensity < 0.5 * step] = -1
        censored[intensity >= model.intensity_max] = 1
        value = np.where(censored == -1, 0.5 * step, intensity)
        b = backscatter_of_reading(value, rng, c_, model)
        label = grid.label[c_, w_] if grid.label is not None else np.full(len(rows), -1)
        parts.append((ret, b, censored, cos, label, rng))
    cols = [np.concatenate([p[i] for p in parts]) for i in range(6)]
    # an own reading's incidence: the mean over the faces that meet at its return (the
    # beam through a corner may meet any of them)
    corner_cos = np.abs(np.einsum("fj,fcj->fc", fn, own_direction[corner_return]))
    total = np.bincount(corner_return.reshape(-1), corner_cos.reshape(-1), len(keys))
    count = np.bincount(corner_return.reshape(-1), minlength=len(keys))
    cos_of_return = np.clip(total / np.maximum(count, 1), COS_FLOOR, 1.0)
    own_rows = np.isnan(cols[3])
    cols[3] = np.where(own_rows, cos_of_return[cols[0].astype(np.int64)], cols[3])
    cols[3] = np.clip(cols[3], COS_FLOOR, 1.0)
    return Readings(
        cols[0].astype(np.int64), cols[1], cols[2].astype(np.int8), cols[3],
        cols[4].astype(np.int64), cols[5], corner_return,
        np.clip(corner_cos, COS_FLOOR, 1.0), cos_of_return,
    )  # fmt: skip


def _majority(face: NDArray[np.int64], label: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """(n,) the most frequent label of each face's readings (-1 where none)."""
    out = np.full(n, -1, dtype=np.int64)
    if len(face) == 0:
        return out
    pairs, counts = np.unique(np.stack([face, label], 1), axis=0, return_counts=True)
    order = np.lexsort((-counts, pairs[:, 0]))
    pairs = pairs[order]
    first = np.ones(len(pairs), dtype=bool)
    first[1:] = pairs[1:, 0] != pairs[:-1, 0]
    out[pairs[first, 0]] = pairs[first, 1]
    return out


def _censored_median(
    face: NDArray[np.int64], value: NDArray[np.float64], censored: NDArray[np.int8], n: int
) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """Each face's median of ``value``, censored readings ranked below (-1) or above (+1)
    every value and standing for their bound; NaN for a face with none."""
    rank_value = np.where(censored < 0, -np.inf, np.where(censored > 0, np.inf, value))
    order = np.lexsort((rank_value, face))
    f = face[order]
    counts = np.bincount(f, minlength=n)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    lo = start + (counts - 1) // 2
    hi = start + counts // 2
    vals = value[order]
    med = np.full(n, np.nan)
    med[has] = 0.5 * (vals[lo[has]] + vals[hi[has]])
    return med, counts


def face_reflectance(
    readings: Readings,
    default_k: float,
    scale: float,
    intensity_max: float,
) -> FaceReflectance:
    """One reflectance (and exponent) per face from its readings (see the module).

    Parameters
    ----------
    readings : Readings
    default_k : float
        The exponent where no class fit gives one.
    scale, intensity_max : float
        The scanner's intensity scale and maximum (for calibrate's fit).
    """
    n_patches = int(readings.patch_of_face.max()) + 1 if readings.patch_of_face.size else 0
    patch_label = _majority(readings.patch, readings.label, n_patches)
    k_of_label: dict[int, float] = {}
    labels = np.unique(readings.label)
    for lab in labels[labels >= 0]:
        sel = (readings.label == lab) & (readings.censored == 0)
        if sel.sum() < MIN_CLASS_READINGS:
            continue
        fit = fit_intensity(
            scale * readings.backscatter[sel], readings.cos[sel],
            scale=scale, intensity_max=intensity_max * 2.0,
        )  # fmt: skip
        if "minnaert_k" in fit.values and np.isfinite(fit.values["minnaert_k"][1]):
            k_of_label[int(lab)] = float(np.clip(fit.values["minnaert_k"][0], *K_RANGE))
    k_patch = np.full(n_patches, float(default_k))
    for lab, k in k_of_label.items():
        k_patch[patch_label == lab] = k
    k = k_patch[readings.patch]
    rho = readings.backscatter / np.maximum(readings.cos, COS_FLOOR) ** k
    med, counts = _censored_median(readings.patch, rho, readings.censored, n_patches)
    seen = counts > 0
    fill = float(np.median(med[seen])) if seen.any() else 0.1
    med[~seen] = fill
    of = readings.patch_of_face
    # the reflectance face F needs so that its corner j's own beam reads as it did:
    # rho_j (cos_j / cos_Fj)^k, cos_j the return's own incidence, cos_Fj the beam's on F
    k_corner = k_patch[of]
    rescale = (readings.cos_of_return[of] / readings.corner_cos) ** k_corner
    value = np.median(np.maximum(med, 0.0)[of] * rescale, axis=1)
    return FaceReflectance(
        value, np.median(k_patch[of], axis=1), counts[of].sum(axis=1),
        patch_label[of[:, 0]], k_of_label,
    )  # fmt: skip


def detection_threshold(readings: Readings, model: ReturnModel, quantile: float) -> float:
    """The received peak the unit detects, from the echoes it reported.

    Every reading was detected, so the sensor's threshold lies below the received peak of
    each, ``b * peak / R^2`` (the per-hit model's, :func:`simulator.steps.hits.received_peak`,
    with the peak factor of the footprint at the reading's incidence and the larger of the
    beam's two divergences). Its ``quantile`` (e.g. 0.005: all but the weakest half per
    cent) is the threshold: a datasheet's figure is a 50 % point in sunlight, while a unit
    in its own scene reports weaker echoes than that.

    Parameters
    ----------
    readings : Readings
    model : ReturnModel
    quantile : float
        In (0, 1).

    Returns
    -------
    float
        The threshold, in the units of ``ReturnModel.threshold`` (reflectance / m^2).
    """
    beta = max(model.beta_h_rad, model.beta_v_rad)
    spread = physics.footprint_range_spread_m(readings.range_m, readings.cos, beta)
    peak = physics.pulse_peak_factor(model.pulse_length_m, spread)
    r = np.maximum(readings.range_m, 1e-6)
    received = readings.backscatter * peak / (r * r)
    return float(np.quantile(received, quantile))
