"""Per-face material values: a mesh's faces carry reflectance (and Minnaert exponent,
roughness) in place of its object's material, in the numpy specification and the numba
kernels alike; absent, every output is what it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simulator
from simulator import labels
from simulator.backend import Backend
from simulator.errors import ConfigError
from simulator.io.mesh import write_material_mesh
from simulator.world.materials import MaterialTable
from simulator.world.scene import load_scene

from .conftest import PLAIN, Workspace, lidar_sim, single_channel_scanner

#: The Minnaert exponent of the plane's material (not 1, so the law's exponent counts).
K = 0.7
#: The two halves' reflectances.
DARK, BRIGHT = 0.2, 0.6
#: The rings' elevations, deg, and the sensor's height above the plane, m.
ELEVATIONS = [-20.0, -35.0, -50.0, -65.0]
HEIGHT_M = 3.0
MATERIAL = {**PLAIN, "reflectance": 0.5, "minnaert_k": K}


def grid_plane(half_m: float = 20.0, cells: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """A square plane in z = 0, ``2 half_m`` wide, as ``cells`` x ``cells`` squares of two
    triangles each (counter-clockwise from above): (V, 3) vertices, (F, 3) faces."""
    ticks = np.linspace(-half_m, half_m, cells + 1)
    x, y = np.meshgrid(ticks, ticks, indexing="ij")
    vertices = np.stack([x.ravel(), y.ravel(), np.zeros(x.size)], axis=1)
    i, j = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
    a = (i * (cells + 1) + j).ravel()  # each square's corner at (i, j)
    b, c, d = a + (cells + 1), a + (cells + 2), a + 1
    faces = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    return vertices, faces


def halves(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """(F,) bool: the faces of the half x > 0."""
    return vertices[faces].mean(axis=1)[:, 0] > 0.0


def survey(
    ws: Workspace,
    objects: list[dict[str, Any]],
    scanner: dict[str, Any] | None = None,
    **keys: Any,
) -> Path:
    """A survey of a four-ring noiseless scanner ``HEIGHT_M`` above the origin (more
    scanner keys in ``scanner``), one revolution, with the diagnostic fields."""
    rings = single_channel_scanner(channels={"elevation_deg": ELEVATIONS}, **(scanner or {}))
    keys.setdefault("pose", {"position_m": [0.0, 0.0, HEIGHT_M]})
    keys.setdefault("revolutions", 1)
    return ws.survey(objects, scanner=rings, **keys)


def scan(path: Path, backend: Backend, overrides: list[str] | None = None) -> simulator.PointCloud:
    sim = simulator.Simulation.from_file(path, overrides)
    sim.backend = backend
    return sim.run()


def by_pulse(cloud: simulator.PointCloud) -> simulator.PointCloud:
    """The cloud in pulse-id order (then return number)."""
    order = np.lexsort((cloud["return_number"], cloud["pulse_id"]))
    return simulator.PointCloud({k: v[order] for k, v in cloud.fields.items()})


def faced_and_split(
    ws: Workspace, trajectory: dict[str, Any] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The plane as one mesh whose faces carry DARK (x < 0) and BRIGHT (x > 0), and the
    same triangles as two meshes of those two materials, without face values."""
    vertices, faces = grid_plane()
    bright = halves(vertices, faces)
    rho = np.where(bright, BRIGHT, DARK)
    write_material_mesh(ws.root / "faced.ply", vertices, faces, {"reflectance": rho})
    write_material_mesh(ws.root / "dark.ply", vertices, faces[~bright], {})
    write_material_mesh(ws.root / "bright.ply", vertices, faces[bright], {})
    moving = {} if trajectory is None else {"trajectory": trajectory}
    faced = [{"name": "plane", "mesh": "faced.ply", "material": MATERIAL, **moving}]
    split = [
        {"name": "dark", "mesh": "dark.ply", "material": {**MATERIAL, "reflectance": DARK},
         **moving},
        {"name": "bright", "mesh": "bright.ply",
         "material": {**MATERIAL, "reflectance": BRIGHT}, **moving},
    ]  # fmt: skip
    return faced, split


def test_each_face_returns_its_own_reflectance(ws: Workspace, backend: Backend) -> None:
    """Half the faces 0.2, half 0.6: every point's intensity is exactly what the same
    triangles give as two objects of those two materials, and each is the Minnaert law
    of its face's reflectance, ``scale rho cos^k`` with the ring's incidence (the sensor
    level above the plane: ``cos = |sin(elevation)|``), so the halves read 3 to 1."""
    faced, split = faced_and_split(ws)
    ref = by_pulse(scan(survey(ws, split), backend))
    got = by_pulse(scan(survey(ws, faced), backend))
    assert len(got) == len(ref) > 4 * 3000
    np.testing.assert_array_equal(got["pulse_id"], ref["pulse_id"])
    for name in ("intensity", "range_m", "xyz", "cos_incidence", "label", "instance"):
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)

    dark = ref["object_id"] == 0  # (the two-object scan says which half each point is on)
    assert 0.4 < dark.mean() < 0.6
    rho = np.where(dark, DARK, BRIGHT)
    cos = np.abs(np.sin(np.radians(np.asarray(ELEVATIONS))))[got["ring"]]
    law = 100.0 * rho * cos**K  # intensity_scale 100, Minnaert's rho |cos|^k
    np.testing.assert_allclose(got["intensity"], law, rtol=2e-6)
    for ring in range(len(ELEVATIONS)):
        on = got["ring"] == ring
        ratio = np.median(got["intensity"][on & ~dark]) / np.median(got["intensity"][on & dark])
        assert ratio == pytest.approx(3.0, rel=2e-6)


def test_faces_of_a_moving_mesh_keep_their_values(ws: Workspace, backend: Backend) -> None:
    """A moving mesh with per-face values reads as the same triangles moving as two
    objects (the moving groups' hits get their faces' rows too)."""
    motion = {"start": {"position_m": [0.0, 0.0, 0.0]}, "velocity_mps": [4.0, 0.0, 0.0]}
    faced, split = faced_and_split(ws, motion)
    far = {
        "name": "far",
        "plane": {"size_m": [1.0, 1.0]},
        "position_m": [0, 0, -50.0],
        "material": PLAIN,
    }  # (a static object: the engine needs one)
    ref = by_pulse(scan(survey(ws, [far, *split], revolutions=0.5), backend))
    got = by_pulse(scan(survey(ws, [far, *faced], revolutions=0.5), backend))
    assert len(got) == len(ref) > 4 * 1500
    for name in ("pulse_id", "intensity", "range_m", "xyz"):
        np.testing.assert_array_equal(got[name], ref[name], err_msg=name)
    assert len(np.unique(np.round(got["intensity"], 3))) >= 2 * len(ELEVATIONS)


#: Footprints (full and adaptive), rain, and the surfaces behind a see-through one: what
#: groups hits by object (echoes, the footprint test, the weather's media) and what
#: passes through.
MODES = {
    "single": [],
    "footprints": ["scanner_overrides.beam_samples=7", "scanner_overrides.return_mode=dual"],
    "adaptive": ["scanner_overrides.beam_samples=7", "scanner_overrides.beam_sampling=adaptive"],
    "weather": ["weather.rain.rate_mm_h=50", "weather.fog.visibility_m=15"],
}


@pytest.mark.parametrize("mode", list(MODES))
def test_face_values_equal_to_the_material_change_nothing(
    ws: Workspace, backend: Backend, mode: str
) -> None:
    """The plane tilted, under a see-through pane, as three files: a PLY without face
    values (the plain path: no material rows at all), one whose every face carries the
    material's own reflectance, exponent and roughness, and trimesh's own PLY of the
    same triangles. All three scans are bit for bit the same in every field, diagnostics
    included (echoes and the footprint test go by object, not by face)."""
    import trimesh

    vertices, faces = grid_plane(cells=8)
    rough = {**MATERIAL, "roughness_m": 0.02, "micro_slope_deg": 2.0}
    n = len(faces)
    own = {"reflectance": np.full(n, 0.5), "minnaert_k": np.full(n, K),
           "roughness_m": np.full(n, 0.02)}  # fmt: skip
    write_material_mesh(ws.root / "plain.ply", vertices, faces, {})
    write_material_mesh(ws.root / "own.ply", vertices, faces, own)
    trimesh.Trimesh(vertices, faces, process=False).export(ws.root / "trimesh.ply")
    pane = {**PLAIN, "reflectance": 0.05, "transmittance": 0.6}
    clouds = []
    for name in ("plain.ply", "own.ply", "trimesh.ply"):
        objects = [
            {"name": "pane", "plane": {"size_m": [30.0, 30.0]}, "position_m": [0, 0, 1.0],
             "material": pane},
            {"name": "ground", "mesh": name, "material": rough, "rotation_deg": [0, 4, 0]},
        ]  # fmt: skip
        path = survey(ws, objects, revolutions=0.2,
                      scanner={"divergence_mrad": {"horizontal": 3.0, "vertical": 3.0},
                               "range_noise_m": 0.01})  # fmt: skip
        clouds.append(scan(path, backend, MODES[mode]))
        if name == "plain.ply":
            sim = simulator.Simulation.from_file(path, MODES[mode])
            assert sim.tables.material_of_row is None  # the common path: no rows at all
            assert sim.cast_pulses(0, 100).hits.material_row is None
    assert len(clouds[0]) > 1000
    assert {0, 1} <= set(clouds[0]["object_id"].tolist())  # pane and ground both return
    if mode == "weather":  # (and the weather's media, past the scene's objects)
        assert clouds[0]["object_id"].max() >= 2
    for other in clouds[1:]:
        assert set(other.fields) == set(clouds[0].fields)
        for field, values in clouds[0].fields.items():
            np.testing.assert_array_equal(other[field], values, err_msg=field)


def test_object_id_is_the_object_not_a_face_row(ws: Workspace, backend: Backend) -> None:
    """The diagnostic ``object_id`` of a hit on a mesh with per-face values is the
    object's index (its face rows lie past the objects'), and its label and instance the
    object's."""
    faced, _ = faced_and_split(ws)
    wall = {
        "name": "wall",
        "plane": {"size_m": [4.0, 4.0]},
        "position_m": [5.0, 0, 3.0],
        "rotation_deg": [0.0, -90.0, 0.0],
        "material": {**PLAIN, "label": "building"},
    }
    plane = {**faced[0], "label": "car", "instance": 7}
    cloud = scan(survey(ws, [wall, plane]), backend)
    on_plane = cloud["xyz"][:, 2] < 0.01  # (world frame)
    assert on_plane.sum() > 4 * 3000 and (~on_plane).sum() > 0
    np.testing.assert_array_equal(cloud["object_id"][on_plane], 1)
    np.testing.assert_array_equal(cloud["object_id"][~on_plane], 0)
    assert set(cloud["label"][on_plane].tolist()) == {labels.label_id("car")}
    assert set(cloud["instance"][on_plane].tolist()) == {7}


def test_a_porous_face_row_is_its_material_row_bit_for_bit() -> None:
    """A face of a porous layer carrying its material's own values is the material's row
    (``(1 - T) rho`` included); another value of reflectance is that value's row."""
    from simulator.config import Material

    foliage = Material.model_validate({**PLAIN, "reflectance": 0.37, "transmittance": 0.3,
                                       "porous": True, "micro_slope_deg": 3.0})  # fmt: skip
    other = foliage.model_copy(update={"reflectance": 0.81})
    named = MaterialTable.from_materials({"a": foliage, "b": other})
    faces = MaterialTable.of_faces(foliage, {"reflectance": np.array([0.37, 0.81])})
    for field in ("reflectance", "minnaert_k", "roughness_m", "micro_slope_rad",
                  "micro_slope_cell_m", "transmittance", "porous"):  # fmt: skip
        np.testing.assert_array_equal(getattr(faces, field), getattr(named, field), field)


def _raw_ply(path: Path, rho: float) -> None:
    """A two-triangle PLY whose faces' reflectance is ``rho`` (any value: no check)."""
    header = (
        "ply\nformat binary_little_endian 1.0\nelement vertex 4\nproperty double x\n"
        "property double y\nproperty double z\nelement face 2\n"
        "property list uchar int vertex_indices\nproperty float reflectance\nend_header\n"
    )
    vertices = np.array([[-5, -5, 0], [5, -5, 0], [5, 5, 0], [-5, 5, 0]], "<f8")
    rows = np.zeros(2, dtype=[("n", "u1"), ("v", "<i4", (3,)), ("reflectance", "<f4")])
    rows["n"], rows["v"], rows["reflectance"] = 3, [[0, 1, 2], [0, 2, 3]], [0.5, rho]
    path.write_bytes(header.encode() + vertices.tobytes() + rows.tobytes())


@pytest.mark.parametrize("rho", [float("nan"), -0.5, float("inf")])
def test_a_bad_face_value_is_one_line_naming_file_and_attribute(ws: Workspace, rho: float) -> None:
    """A reflectance a material could not have (NaN, negative, infinite; above 1 is a
    retroreflector, which a material may be) is refused: exit code 2, one line naming the
    mesh file and the attribute, no traceback; the writer refuses it too."""
    _raw_ply(ws.root / "bad.ply", rho)
    path = survey(ws, [{"name": "m", "mesh": "bad.ply", "material": MATERIAL}])
    res = lidar_sim("scan", path, "-o", ws.root / "out.npz")
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "bad.ply" in lines[0] and "reflectance" in lines[0] and "face 1" in lines[0]
    assert ">= 0" in lines[0]
    assert not (ws.root / "out.npz").exists()
    with pytest.raises(ConfigError, match="reflectance"):
        write_material_mesh(ws.root / "w.ply", np.zeros((3, 3)), [[0, 1, 2]],
                            {"reflectance": [rho]})  # fmt: skip


def test_face_values_a_material_would_refuse_beside_them(ws: Workspace) -> None:
    """Checks that depend on the object's material: a fresnel pane's faces reflect at
    most the pane's Fresnel reflectance; an unknown key is not written."""
    _raw_ply(ws.root / "pane.ply", 0.5)
    pane = {**PLAIN, "reflectance": 0.05, "transmittance": 0.8, "transmittance_law": "fresnel"}
    path = survey(ws, [{"name": "m", "mesh": "pane.ply", "material": pane}])
    res = lidar_sim("scan", path)
    assert res.returncode == 2 and "pane.ply" in res.stderr and "fresnel" in res.stderr
    with pytest.raises(ConfigError, match="albedo"):
        write_material_mesh(ws.root / "w.ply", np.zeros((3, 3)), [[0, 1, 2]], {"albedo": [1]})


def test_the_values_are_read_through_the_mesh_cache(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scene loaded twice reads its face values from the cache the second time, and a
    file rewritten with other values is a new entry (never the old values)."""
    monkeypatch.setenv("LIDAR_SIM_CACHE", str(ws.root / "cache"))
    vertices, faces = grid_plane(cells=2)
    scene_path = ws.write("scene.yaml", {"objects": [{"name": "p", "mesh": "p.ply",
                                                      "material": MATERIAL}]})  # fmt: skip
    seen = []
    for rho in (0.1, 0.1, 0.9):
        values = {"reflectance": np.full(len(faces), rho), "minnaert_k": np.arange(len(faces)) / 4}
        write_material_mesh(ws.root / "p.ply", vertices, faces, values)
        obj = load_scene(scene_path).objects[0]
        assert obj.face_materials is not None
        np.testing.assert_array_equal(obj.face_materials["minnaert_k"], np.arange(len(faces)) / 4)
        seen.append(obj.face_materials["reflectance"])
        assert set(obj.face_materials) == {"reflectance", "minnaert_k"}
    assert len(list((ws.root / "cache").glob("*.npz"))) == 2
    np.testing.assert_array_equal(seen[1], seen[0])
    np.testing.assert_array_equal(seen[2], 0.9)


def test_the_writer_keeps_float64_vertices(tmp_path: Path) -> None:
    """Vertices far from the origin (map coordinates) come back bit for bit, and the faces
    in their order."""
    vertices, faces = grid_plane(cells=3)
    vertices = vertices + np.array([512_345.678_901_234, 5_401_234.567_890_12, 312.345_678_9])
    path = write_material_mesh(tmp_path / "m.ply", vertices, faces,
                               {"roughness_m": np.linspace(0, 0.1, len(faces))})  # fmt: skip
    obj = load_scene(path).objects[0]
    np.testing.assert_array_equal(obj.vertices_m, vertices)
    np.testing.assert_array_equal(obj.faces, faces)
    assert obj.face_materials is not None
    np.testing.assert_array_equal(obj.face_materials["roughness_m"], np.linspace(0, 0.1, 18))
    assert not list(tmp_path.glob(".*tmp*"))


def test_a_hit_gets_its_own_face_row(ws: Workspace) -> None:
    """Rays cast straight down at every face's centroid of two meshes with per-face values
    (beside an object without) get the row of their own object's face (Open3D's primitive
    ids count within each geometry), and that row's reflectance is the face's value."""
    from simulator.steps.hits import SceneTables
    from simulator.world.raycast import RayEngine

    vertices, faces = grid_plane(half_m=5.0, cells=4)
    rho = [np.linspace(0.1, 0.2, len(faces)), np.linspace(0.5, 0.9, len(faces))]
    write_material_mesh(ws.root / "a.ply", vertices, faces, {"reflectance": rho[0]})
    write_material_mesh(ws.root / "b.ply", vertices, faces, {"reflectance": rho[1]})
    scene_path = ws.write("scene.yaml", {"objects": [
        {"name": "a", "mesh": "a.ply", "material": MATERIAL, "position_m": [-20, 0, 0]},
        {"name": "plain", "plane": {"size_m": [2, 2]}, "material": MATERIAL},
        {"name": "b", "mesh": "b.ply", "material": MATERIAL, "position_m": [20, 0, 0]},
    ]})  # fmt: skip
    scene = load_scene(scene_path)
    starts = scene.face_row_starts()
    assert starts is not None and starts.tolist() == [3, -1, 3 + len(faces)]
    tables = SceneTables.from_scene(scene)
    engine = RayEngine(scene)
    for o, values in zip((0, 2), rho, strict=True):
        centroids = scene.objects[o].vertices_m[faces].mean(axis=1)
        hits = engine.cast(
            centroids + np.array([0, 0, 10.0]), np.tile([0.0, 0, -1], (len(faces), 1))
        )
        np.testing.assert_array_equal(hits.object_index, o)
        assert hits.material_row is not None
        np.testing.assert_array_equal(hits.material_row, starts[o] + np.arange(len(faces)))
        assert tables.material_of_row is not None
        mat = tables.material_of_row[hits.material_row]
        np.testing.assert_array_equal(tables.materials.reflectance[mat], values)
    middle = engine.cast(np.array([[0.0, 0, 10]]), np.array([[0.0, 0, -1]]))
    assert middle.object_index.tolist() == [1] and middle.rows.tolist() == [1]
