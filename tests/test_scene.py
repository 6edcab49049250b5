"""Scenes: primitives and transforms, mesh files, material matching, labels and instances."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import trimesh
import yaml

from simulator.config import SceneSpec
from simulator.errors import ConfigError, SceneError
from simulator.labels import SEMANTIC_KITTI
from simulator.transforms import compose, rotation_from_rpy_deg
from simulator.world.raycast import RayEngine
from simulator.world.scene import load_scene

from .conftest import PLAIN, REPO, Workspace


def test_rpy_rotation_convention() -> None:
    """Yaw turns x towards y; pitch turns x down (z-up, right-handed); R = Rz Ry Rx."""
    np.testing.assert_allclose(rotation_from_rpy_deg([0, 0, 90]) @ [1, 0, 0], [0, 1, 0], atol=1e-15)
    np.testing.assert_allclose(
        rotation_from_rpy_deg([0, 90, 0]) @ [1, 0, 0], [0, 0, -1], atol=1e-15
    )
    np.testing.assert_allclose(rotation_from_rpy_deg([90, 0, 0]) @ [0, 1, 0], [0, 0, 1], atol=1e-15)
    r = rotation_from_rpy_deg([10, 20, 30])
    np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-15)
    np.testing.assert_allclose(
        r,
        rotation_from_rpy_deg([0, 0, 30])
        @ rotation_from_rpy_deg([0, 20, 0])
        @ rotation_from_rpy_deg([10, 0, 0]),
        atol=1e-15,
    )
    t = compose([1, 2, 3], [0, 0, 90], 2.0)
    np.testing.assert_allclose(t @ [1, 0, 0, 1], [1, 4, 3, 1], atol=1e-15)


def _engine_ranges(ws: Workspace, objects: list[dict], origins, directions):
    ws.write("scene.yaml", {"objects": objects})
    scene = load_scene(ws.root / "scene.yaml")
    hits = RayEngine(scene).cast(np.asarray(origins, float), np.asarray(directions, float))
    return scene, hits


@pytest.mark.parametrize(
    ("geometry", "expected_m"),
    [
        ({"box": {"size_m": [2.0, 4.0, 6.0]}}, 9.0),  # centred at x = 10: front face at 9
        ({"cylinder": {"radius_m": 1.5, "height_m": 3.0, "sections": 256}}, 8.5),
        ({"sphere": {"radius_m": 2.0, "subdivisions": 5}}, 8.0),
    ],
)
def test_primitives_are_hit_where_their_size_and_placement_say(
    ws: Workspace, geometry: dict, expected_m: float
) -> None:
    obj = {"name": "thing", "position_m": [10.0, 0.0, 0.0], "material": PLAIN, **geometry}
    _, hits = _engine_ranges(ws, [obj], [[0, 0, 0]], [[1, 0, 0]])
    assert hits.range_m[0] == pytest.approx(expected_m, abs=2e-3)


def test_plane_rotation_scale_and_normals(ws: Workspace) -> None:
    """A plane pitched 90 deg, scaled by 2, is a wall whose hit normal is along x."""
    obj = {
        "name": "wall",
        "plane": {"size_m": [1.0, 1.0]},
        "position_m": [5.0, 0.0, 0.0],
        "rotation_deg": [0.0, 90.0, 0.0],
        "scale": 2.0,
        "material": PLAIN,
    }
    _, hits = _engine_ranges(ws, [obj], [[0, 0, 0], [0, 0.9, 0], [0, 1.1, 0]], [[1, 0, 0]] * 3)
    np.testing.assert_allclose(hits.range_m[:2], 5.0, atol=1e-5)
    assert not hits.hit[2]  # the scaled plane is 2 m wide: y = 1.1 misses
    np.testing.assert_allclose(np.abs(hits.normal[0]), [1, 0, 0], atol=1e-6)


def test_hits_give_object_material_label_instance(ws: Workspace) -> None:
    objects = [
        {"name": "a", "box": {"size_m": [1, 1, 1]}, "position_m": [5, 0, 0], "material": "asphalt"},
        {
            "name": "car1",
            "box": {"size_m": [1, 1, 1]},
            "position_m": [0, 5, 0],
            "material": "car_paint",
        },
        {
            "name": "car2",
            "box": {"size_m": [1, 1, 1]},
            "position_m": [-5, 0, 0],
            "material": "car_paint",
            "label": "truck",
        },
        {
            "name": "tree",
            "sphere": {"radius_m": 1},
            "position_m": [0, -5, 0],
            "material": "vegetation",
            "instance": 7,
        },
    ]
    scene, hits = _engine_ranges(
        ws, objects, [[0, 0, 0]] * 5, [[1, 0, 0], [0, 1, 0], [-1, 0, 0], [0, -1, 0], [0, 0, 1]]
    )
    np.testing.assert_array_equal(hits.object_index, [0, 1, 2, 3, -1])
    mat, lab, ins = scene.object_tables()
    assert [scene.objects[i].material for i in range(4)] == [
        "asphalt",
        "car_paint",
        "car_paint",
        "vegetation",
    ]
    assert lab.tolist() == [SEMANTIC_KITTI[n] for n in ("road", "car", "truck", "vegetation")]
    # Things get automatic ids above the largest explicit one; stuff gets 0.
    assert ins.tolist() == [0, 8, 9, 7]
    assert mat[1] == mat[2]


def test_inline_material(ws: Workspace) -> None:
    material = {**PLAIN, "reflectance": 0.77}
    objects = [{"name": "x", "box": {"size_m": [1, 1, 1]}, "material": material}]
    ws.write("scene.yaml", {"objects": objects})
    scene = load_scene(ws.root / "scene.yaml")
    assert scene.material_table().reflectance.tolist() == [0.77]


def _two_material_glb(path: Path) -> None:
    parts = {}
    for name, offset in (("car_paint", 0.0), ("glass", 3.0), ("mystery_alloy", 6.0)):
        mesh = trimesh.creation.box(extents=[1, 1, 1])
        mesh.apply_translation([offset, 0, 0])
        mesh.visual = trimesh.visual.TextureVisuals(
            material=trimesh.visual.material.PBRMaterial(name=name)
        )
        parts[name] = mesh
    trimesh.Scene(parts).export(str(path))


def test_single_mesh_file_scene_matches_material_names(tmp_path: Path) -> None:
    """A glTF file as the whole scene: each part's material name picks the library entry."""
    path = tmp_path / "vehicle.glb"
    _two_material_glb(path)
    scene = load_scene(path)
    by_material = sorted(o.material for o in scene.objects)
    assert by_material == ["car_paint", "default", "glass"]
    assert any("mystery_alloy" in w and "default" in w for w in scene.warnings)
    # Parts of one mesh file are one object: one instance id for the car's parts.
    car = [o for o in scene.objects if o.material == "car_paint"]
    assert car[0].instance > 0


def test_obj_usemtl_names_are_matched(tmp_path: Path) -> None:
    (tmp_path / "two.mtl").write_text("newmtl bark\nKd 0.5 0.3 0.2\nnewmtl vegetation\nKd 0 1 0\n")
    (tmp_path / "two.obj").write_text(
        "mtllib two.mtl\n"
        "v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\nv 0 0 1\nv 1 0 1\nv 1 1 1\n"
        "usemtl bark\nf 1 2 3\nf 1 3 4\nusemtl vegetation\nf 5 6 7\n"
    )
    scene = load_scene(tmp_path / "two.obj")
    assert sorted(o.material for o in scene.objects) == ["bark", "vegetation"]
    assert sorted(len(o.faces) for o in scene.objects) == [1, 2]


def test_farm_scene_loads_with_every_part_labelled() -> None:
    scene = load_scene(REPO / "scenes" / "farm" / "scene.yaml")
    assert scene.warnings == []
    labels = {o.label for o in scene.objects}
    for name in (
        "terrain",
        "other-ground",
        "building",
        "car",
        "vegetation",
        "trunk",
        "fence",
        "traffic-sign",
        "pole",
    ):
        assert SEMANTIC_KITTI[name] in labels, name
    size = sum(p.stat().st_size for p in (REPO / "scenes" / "farm").rglob("*") if p.is_file())
    assert size < 5 * 2**20


def test_nan_vertices_are_rejected(tmp_path: Path) -> None:
    (tmp_path / "bad.obj").write_text("v 0 0 0\nv 1 0 nan\nv 0 1 0\nf 1 2 3\n")
    with pytest.raises(SceneError, match="NaN or infinite"):
        load_scene(tmp_path / "bad.obj")


def test_object_needs_exactly_one_geometry(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        SceneSpec.model_validate(
            {
                "objects": [
                    {
                        "name": "x",
                        "box": {"size_m": [1, 1, 1]},
                        "sphere": {"radius_m": 1},
                        "material": "asphalt",
                    }
                ]
            }
        )


def test_unknown_label_is_a_config_error(ws: Workspace) -> None:
    ws.write(
        "scene.yaml",
        {
            "objects": [
                {
                    "name": "x",
                    "box": {"size_m": [1, 1, 1]},
                    "material": "asphalt",
                    "label": "spaceship",
                }
            ]
        },
    )
    with pytest.raises(ConfigError, match=r"objects\[0\]\.label"):
        load_scene(ws.root / "scene.yaml")


def test_far_coordinates_keep_centimetre_accuracy(ws: Workspace) -> None:
    """A scene at UTM-like coordinates casts as accurately as at the origin (local shift)."""
    east, north = 5.0e5, 5.0e6
    obj = {
        "name": "wall",
        "box": {"size_m": [1, 50, 50]},
        "position_m": [east + 30.5, north, 0],
        "material": PLAIN,
    }
    _, hits = _engine_ranges(ws, [obj], [[east, north, 0.0]], [[1, 0, 0]])
    assert hits.range_m[0] == pytest.approx(30.0, abs=1e-4)


def test_a_moving_objects_pose_file_error_names_its_key(tmp_path: Path) -> None:
    """A bad pose file of the second object is reported at objects[1].trajectory.file."""
    import yaml

    (tmp_path / "bad.txt").write_text("0 1 2\n", encoding="utf-8")
    scene = {
        "objects": [
            {"name": "ground", "plane": {"size_m": [10, 10]}, "material": "asphalt"},
            {"name": "car", "box": {"size_m": [4, 2, 1.5]}, "material": "car_paint",
             "trajectory": {"file": "bad.txt"}},
        ]
    }  # fmt: skip
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(scene), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_scene(path)
    assert info.value.key == "objects[1].trajectory.file"
    assert "3 columns" in info.value.problem and str(path) == info.value.source


def _objects_of(scene) -> list[tuple]:
    return [
        (o.name, o.material, o.label, o.instance, o.vertices_m.tobytes(), o.faces.tobytes())
        for o in scene.objects
    ]


def test_a_scene_from_the_mesh_cache_is_the_scene_trimesh_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The farm (primitives, an OBJ with its MTL, a PLY and a GLB) loaded again from the
    cache is bit for bit the scene built by trimesh with the cache off, and a process that
    loads it from the cache never imports trimesh."""
    farm = REPO / "scenes" / "farm" / "scene.yaml"
    monkeypatch.setenv("LIDAR_SIM_CACHE", "off")
    built = _objects_of(load_scene(farm))
    monkeypatch.setenv("LIDAR_SIM_CACHE", str(tmp_path / "cache"))
    assert _objects_of(load_scene(farm)) == built  # a miss: built and kept
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 1
    assert _objects_of(load_scene(farm)) == built  # a hit
    code = (
        "import sys; from simulator.world.scene import load_scene; "
        f"s = load_scene({str(farm)!r}); print(len(s.objects), s.triangle_count, "
        "'trimesh' in sys.modules, 'scipy.spatial' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = res.stdout.split()
    assert out == [str(len(built)), str(sum(len(o[5]) // 24 for o in built)), "False", "False"]


def test_the_mesh_cache_follows_every_input_and_survives_a_bad_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit of the OBJ, of its MTL or of a primitive's size is a new entry, not a stale
    one; an entry that cannot be read is rebuilt; a generated scene is not kept."""
    monkeypatch.setenv("LIDAR_SIM_CACHE", str(tmp_path / "cache"))
    mtl, obj = tmp_path / "two.mtl", tmp_path / "two.obj"
    mtl.write_text("newmtl bark\nKd 0.5 0.3 0.2\n")
    obj.write_text("mtllib two.mtl\nv 0 0 0\nv 1 0 0\nv 1 1 0\nusemtl bark\nf 1 2 3\n")
    box = {"name": "b", "box": {"size_m": [1.0, 2.0, 3.0]}, "material": PLAIN}
    scene = {"objects": [{"name": "m", "mesh": "two.obj"}, box]}
    (tmp_path / "scene.yaml").write_text(yaml.safe_dump(scene))

    def entries() -> int:
        return len(list((tmp_path / "cache").glob("*.npz")))

    first = load_scene(tmp_path / "scene.yaml")
    assert first.objects[0].material == "bark" and entries() == 1
    obj.write_text("mtllib two.mtl\nv 0 0 0\nv 2 0 0\nv 2 2 0\nusemtl bark\nf 1 2 3\n")
    assert load_scene(tmp_path / "scene.yaml").objects[0].vertices_m.max() == 2.0
    assert entries() == 2
    mtl.write_text("newmtl bark\nKd 0.1 0.3 0.2\n")
    load_scene(tmp_path / "scene.yaml")
    assert entries() == 3
    scene["objects"][1]["box"]["size_m"] = [1.0, 2.0, 4.0]
    (tmp_path / "scene.yaml").write_text(yaml.safe_dump(scene))
    assert np.ptp(load_scene(tmp_path / "scene.yaml").objects[1].vertices_m[:, 2]) == 4.0
    assert entries() == 4
    for entry in (tmp_path / "cache").glob("*.npz"):
        entry.write_bytes(b"not an npz")
    again = load_scene(tmp_path / "scene.yaml")
    assert np.ptp(again.objects[1].vertices_m[:, 2]) == 4.0
    assert again.objects[0].vertices_m.max() == 2.0
    (tmp_path / "street.yaml").write_text("generator: {name: street, seed: 1}\n")
    before = entries()
    load_scene(tmp_path / "street.yaml")
    assert entries() == before


def test_boxes_and_icospheres_are_trimeshs_own_bit_for_bit() -> None:
    """The scene's boxes and icospheres, made from trimesh's templates without a mesh
    object each, are ``trimesh.creation.box`` and ``icosphere`` bit for bit, vertices and
    faces: 500 boxes from 1 mm to 5 km, and icospheres of every subdivision level 0-5 at
    radii from 1 mm to 300 m (a generated street has hundreds of each)."""
    from simulator.world.primitives import box_arrays, icosphere_arrays

    rng = np.random.default_rng(11)
    for _ in range(500):
        size = rng.uniform(0.01, 50.0, 3) * 10.0 ** rng.integers(-3, 3)
        want = trimesh.creation.box(extents=size)
        vertices, faces = box_arrays(size)
        np.testing.assert_array_equal(vertices.view(np.uint64), want.vertices.view(np.uint64))
        np.testing.assert_array_equal(faces, want.faces)
    for subdivisions in range(6):
        for radius in rng.uniform(0.01, 30.0, 4) * 10.0 ** rng.integers(-2, 2, 4):
            want = trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)
            vertices, faces = icosphere_arrays(subdivisions, float(radius))
            assert vertices.shape == (len(want.vertices), 3) and len(faces) == len(want.faces)
            np.testing.assert_array_equal(vertices.view(np.uint64),
                                          want.vertices.view(np.uint64))  # fmt: skip
            np.testing.assert_array_equal(faces, want.faces)
