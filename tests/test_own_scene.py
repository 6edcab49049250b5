"""Bring your own scene: a glTF file whose parts get labels, materials and instances from
rules on their node names (a mapping file)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import trimesh
import yaml

import simulator
from simulator.labels import label_id
from simulator.pipeline.simulation import Simulation
from simulator.world.scene import load_scene


def _town(path: Path) -> None:
    """Two cars (a body and a window each, as separate nodes) on a road, as a .glb."""
    scene = trimesh.Scene()
    for i in range(2):
        body = trimesh.creation.box([4.0, 1.8, 1.2])
        body.apply_translation([10.0, -3.0 + 6.0 * i, 0.6])
        window = trimesh.creation.box([1.0, 1.6, 0.5])
        window.apply_translation([10.0, -3.0 + 6.0 * i, 1.45])
        scene.add_geometry(body, node_name=f"car_{i}/body", geom_name=f"car_{i}_body")
        scene.add_geometry(window, node_name=f"car_{i}/window", geom_name=f"car_{i}_window")
    road = trimesh.creation.box([60.0, 20.0, 0.1])
    road.apply_translation([0.0, 0.0, -0.05])
    scene.add_geometry(road, node_name="road", geom_name="road")
    scene.export(str(path))


MAPPING = {
    "parts": [
        {"match": "car_*/window", "material": "glass", "label": "car", "group": r"^(car_\d+)/"},
        {"match": "car_*", "material": "car_paint", "group": r"^(car_\d+)/"},
        {"match": "road", "material": "asphalt", "label": "road"},
    ]
}


@pytest.fixture
def town(tmp_path: Path) -> Path:
    _town(tmp_path / "town.glb")
    (tmp_path / "town_parts.yaml").write_text(yaml.safe_dump(MAPPING))
    scene = {"objects": [{"name": "town", "mesh": "town.glb", "parts": "town_parts.yaml"}]}
    (tmp_path / "scene.yaml").write_text(yaml.safe_dump(scene))
    return tmp_path / "scene.yaml"


def test_rules_give_each_part_its_label_material_and_instance(town: Path) -> None:
    scene = load_scene(town)
    by_name = {o.name: o for o in scene.objects}
    assert set(by_name) == {"town/road", "town/car_0/body", "town/car_0/window",
                            "town/car_1/body", "town/car_1/window"}  # fmt: skip
    car, road = label_id("car"), label_id("road")
    assert by_name["town/road"].label == road and by_name["town/road"].instance == 0
    assert by_name["town/road"].material == "asphalt"
    for i in range(2):
        body, window = by_name[f"town/car_{i}/body"], by_name[f"town/car_{i}/window"]
        assert body.label == window.label == car
        assert (body.material, window.material) == ("car_paint", "glass")
        assert body.instance == window.instance > 0  # one car, one id
    assert by_name["town/car_0/body"].instance != by_name["town/car_1/body"].instance


def test_a_scan_of_the_scene_carries_the_labels_and_sees_through_the_windows(
    town: Path, tmp_path: Path
) -> None:
    survey = {
        "scanner": "rs-helios-5515", "scene": "scene.yaml",
        "pose": {"position_m": [0.0, 0.0, 1.8], "rotation_deg": [0.0, 0.0, 0.0]},
        "revolutions": 1, "scanner_overrides": {"return_mode": "dual"},
        "output": {"path": "out.npz", "frame": "world", "diagnostics": True},
    }  # fmt: skip
    path = tmp_path / "survey.yaml"
    path.write_text(yaml.safe_dump(survey))
    sim = Simulation.from_file(path)
    cloud = sim.run()
    labels = set(np.unique(cloud["label"]).tolist())
    assert labels == {label_id("car"), label_id("road")}
    cars = cloud["label"] == label_id("car")
    assert len(np.unique(cloud["instance"][cars])) == 2
    assert not cloud["instance"][~cars].any()
    # The windows (glass, transmittance 0.85) give pulses a second surface behind them.
    glass = [k for k, o in enumerate(sim.scene.objects) if o.material == "glass"]
    through = np.isin(cloud["object_id"], glass)
    two = np.unique(cloud["pulse_id"][cloud["num_returns"] == 2])
    assert np.isin(cloud["pulse_id"][through], two).any()


def test_a_bad_mapping_names_its_file_and_key(town: Path) -> None:
    mapping = town.parent / "town_parts.yaml"
    mapping.write_text(yaml.safe_dump({"parts": [{"match": "road", "label": "roadway"}]}))
    with pytest.raises(simulator.errors.ConfigError, match=r"town_parts.yaml.*parts\[0\]\.label"):
        load_scene(town)
    mapping.write_text(yaml.safe_dump({"parts": [{"label": "road"}]}))
    with pytest.raises(simulator.errors.ConfigError, match="match"):
        load_scene(town)
    (town.parent / "town_parts.yaml").unlink()
    with pytest.raises(simulator.errors.ConfigError, match="mapping file not found"):
        load_scene(town)


def test_the_bundled_town_example() -> None:
    """scenes/town: every pulse through the shop window also returns from the room's back
    wall, the porous crown lets pulses on, and the two cars are two instances."""
    from .conftest import REPO

    sim = Simulation.from_file(REPO / "scenes" / "town" / "survey.yaml",
                               ["output.diagnostics=true"])  # fmt: skip
    cloud = sim.run()
    names = [o.name for o in sim.scene.objects]
    for part, behind in (("town/shop/window", "town/shop/back_wall"),
                         ("town/tree/crown", "town/shop/front_left")):  # fmt: skip
        pulses = np.unique(cloud["pulse_id"][cloud["object_id"] == names.index(part)])
        others = np.isin(cloud["pulse_id"], pulses) & (cloud["object_id"] == names.index(behind))
        assert len(pulses) > 100 and np.count_nonzero(others) > 50
    window = np.unique(cloud["pulse_id"][cloud["object_id"] == names.index("town/shop/window")])
    wall = cloud["pulse_id"][cloud["object_id"] == names.index("town/shop/back_wall")]
    assert np.isin(window, wall).all()
    assert len(np.unique(cloud["instance"][cloud["label"] == label_id("car")])) == 2


def _yard(path: Path) -> None:
    """Two hedges (mesh materials Leaves_A, Leaves_B), two bins (Plastic) and a post
    (Metal), each its own node of a .glb."""
    from trimesh.visual import TextureVisuals
    from trimesh.visual.material import PBRMaterial

    scene = trimesh.Scene()
    for name, material, x in (("hedge_0", "Leaves_A", 8.0), ("hedge_1", "Leaves_B", -8.0),
                              ("bin_0", "Plastic", 5.0), ("bin_1", "Plastic", -5.0),
                              ("post", "Metal", 0.0)):  # fmt: skip
        box = trimesh.creation.box([1.0, 1.0, 1.0])
        box.apply_translation([x, 4.0, 0.5])
        box.visual = TextureVisuals(material=PBRMaterial(name=material))
        scene.add_geometry(box, node_name=name, geom_name=name)
    scene.export(str(path))


def test_rules_match_the_mesh_material_and_set_the_instance_kind(tmp_path: Path) -> None:
    """``match_material`` globs the mesh's own material name (and with ``match``, both must
    hold); ``instance: part`` gives each part its id, ``object`` one id for the object's
    parts the rule meets, a number that number."""
    _yard(tmp_path / "yard.glb")
    rules = [
        {"match_material": "Leaves*", "material": "vegetation", "label": "vegetation",
         "instance": "part"},
        {"match": "post", "match_material": "Wood", "material": "wood", "label": "fence"},
        {"match": "post", "match_material": "Met*", "material": "pole_metal", "label": "pole",
         "instance": 42},
        {"match_material": "Plastic", "material": "plastic", "instance": "object"},
    ]  # fmt: skip
    scene_yaml = tmp_path / "scene.yaml"
    scene_yaml.write_text(yaml.safe_dump(
        {"objects": [{"name": "yard", "mesh": "yard.glb", "parts": rules}]}
    ))  # fmt: skip
    by = {o.name: o for o in load_scene(scene_yaml).objects}
    hedges = [by[f"yard/hedge_{i}"] for i in range(2)]
    assert [h.label for h in hedges] == [label_id("vegetation")] * 2
    assert all(h.material == "vegetation" for h in hedges)
    assert hedges[0].instance > 0 and hedges[1].instance > 0
    assert hedges[0].instance != hedges[1].instance  # one id a part
    bins = [by[f"yard/bin_{i}"] for i in range(2)]
    assert bins[0].instance == bins[1].instance > 0  # one id for the object
    assert bins[0].instance not in (hedges[0].instance, hedges[1].instance)
    assert all(b.material == "plastic" for b in bins)
    post = by["yard/post"]  # the Wood rule names the post but not its material: passed over
    assert post.material == "pole_metal" and post.label == label_id("pole")
    assert post.instance == 42
