"""3D boxes from the scene: every countable object in every frame, the points inside each
counted, moving boxes at the frame time, the OpenPCDet layout, the loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from simulator.constants import sequence_seed
from simulator.datasets import SemanticKittiDataset
from simulator.datasets.generate import run_dataset
from simulator.datasets.read import read_boxes
from simulator.generators import street
from simulator.io.layouts import read_semantickitti_frame
from simulator.labels import THING_LABELS, label_id

GROUP = {
    "name": "street", "generator": "street", "scanner": "vlp-32c", "sequences": 1, "frames": 3,
    "trajectory": {"start": {"position_m": [-20, -1.6, 0]}, "velocity_mps": [8, 0, 0]},
    "mount": {"position_m": [0, 0, 1.9]},
}  # fmt: skip


def _dataset(tmp: Path, layout: str, **group: object) -> Path:
    spec = tmp / f"{layout}.yaml"
    spec.write_text(yaml.safe_dump({"seed": 14, "layout": layout, "groups": [{**GROUP, **group}]}))
    out = tmp / layout
    manifest = run_dataset(spec, out, workers=1)
    assert manifest["errors"] == []
    return out


def _inside(xyz: np.ndarray, centre: np.ndarray, size: np.ndarray, yaw: float,
            pad_m: float = 0.0) -> np.ndarray:  # fmt: skip
    """Points in an upright box given as the layouts give it (centre, size, yaw)."""
    c, s = np.cos(yaw), np.sin(yaw)
    d = xyz.astype(np.float64) - centre
    local = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2]], axis=1)
    return np.all(np.abs(local) <= size / 2 + pad_m, axis=1)


@pytest.fixture(scope="module")
def compensated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _dataset(tmp_path_factory.mktemp("boxes"), "semantickitti", motion_compensated=True)


def test_every_countable_object_has_a_box_in_every_frame(compensated: Path) -> None:
    items = SemanticKittiDataset(compensated)
    assert len(items) == 3
    scene = street(sequence_seed(14, 0) % 2**63)  # the generator's scene of sequence 0
    expected = {o["instance"] for o in scene["objects"] if label_id(o["label"]) in THING_LABELS}
    for item in items:
        boxes = item["boxes"]
        assert set(boxes.instance.tolist()) == expected
        assert set(boxes.label.tolist()) <= THING_LABELS
        assert len(set(boxes.instance.tolist())) == len(boxes)  # one box per instance
        # every instance among the points has its box
        seen = set(item["instance"][np.isin(item["label"], list(THING_LABELS))].tolist())
        assert seen <= set(boxes.instance.tolist())


def test_num_points_counts_the_objects_own_points(compensated: Path) -> None:
    """``num_points``: the frame's points of the box's own instance (counted in the
    cloud), those the range noise put just outside the tight box among them, and not the
    road under its tyres (the box's bottom is the object's lowest vertex, so road points
    within the noise are inside); ``num_points_in_box`` every point inside."""
    ground_in_box, noise_outside = 0, 0
    for item in SemanticKittiDataset(compensated):
        boxes, xyz = item["boxes"], item["points"][:, :3]
        for b in range(len(boxes)):
            own = item["instance"] == boxes.instance[b]
            assert own.sum() == boxes.num_points[b]
            if abs(boxes.rotation[b, 2, 2] - 1.0) > 1e-9:  # upright boxes only here
                continue
            inside = _inside(xyz, boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b])
            assert inside.sum() == boxes.num_points_in_box[b]
            ground_in_box += int((inside & ~own).sum())
            near = _inside(xyz, boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b], 0.1)
            noise_outside += int((own & near & ~inside).sum())
    assert ground_in_box > 0  # other points are inside some boxes, and not counted
    assert noise_outside > 100  # own points just outside the tight boxes, counted


def test_static_objects_points_lie_in_their_boxes(compensated: Path) -> None:
    """Motion-compensated frames: a parked car's points are inside its box (within the
    range noise); a moving one's within its travel over the revolution. Mixed echoes (an
    edge of the object and what lies behind it closer than the pulse can separate) land
    between the two, so 5 % of the points may lie up to a pulse length out."""
    moving = {label_id(n) for n in ("moving-car", "moving-truck", "moving-person",
                                    "moving-bicyclist")}  # fmt: skip
    checked = {"static": 0, "moving": 0}
    for item in SemanticKittiDataset(compensated):
        boxes, xyz = item["boxes"], item["points"][:, :3]
        for b in range(len(boxes)):
            own = item["instance"] == boxes.instance[b]
            if own.sum() < 20:
                continue
            travel = np.linalg.norm(boxes.velocity_mps[b]) * 0.1  # one revolution at 10 Hz
            pad = 0.1 + (travel if int(boxes.label[b]) in moving else 0.0)
            inside = _inside(xyz[own], boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b], pad)
            assert inside.mean() >= 0.95, (int(boxes.label[b]), int((~inside).sum()))
            near = _inside(xyz[own], boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b],
                           pad + 1.0)  # fmt: skip
            assert near.all()
            checked["moving" if int(boxes.label[b]) in moving else "static"] += 1
            if int(boxes.label[b]) in moving:
                assert np.linalg.norm(boxes.velocity_mps[b]) > 0.5
            else:
                assert np.all(boxes.velocity_mps[b] == 0)
    assert checked["static"] >= 3 and checked["moving"] >= 2


def test_a_moving_cars_box_is_at_its_scan_time(compensated: Path) -> None:
    """Frame to frame, a moving box advances by its velocity times the time between its
    two scans (in the world: the sensor's own motion taken out with the poses); each scan
    time falls in its frame's turn."""
    items = list(SemanticKittiDataset(compensated))
    a, b = items[0], items[1]
    moved = 0
    for k in np.flatnonzero(a["boxes"].label == label_id("moving-car")):
        inst = a["boxes"].instance[k]
        j = int(np.flatnonzero(b["boxes"].instance == inst)[0])
        world_a = a["pose"][:3, :3] @ a["boxes"].centre_m[k] + a["pose"][:3, 3]
        world_b = b["pose"][:3, :3] @ b["boxes"].centre_m[j] + b["pose"][:3, 3]
        velocity = a["pose"][:3, :3] @ a["boxes"].velocity_mps[k]
        ta, tb = a["boxes"].time_s[k], b["boxes"].time_s[j]
        assert 0.0 <= ta < 0.1 <= tb < 0.2  # (frames of 0.1 s from the survey start)
        np.testing.assert_allclose(world_b - world_a, velocity * (tb - ta), atol=1e-6)
        moved += 1
    assert moved >= 2  # the street drives cars past: the test is not empty


def test_openpcdet_layout(compensated: Path, tmp_path: Path) -> None:
    """Sequence 0 of the same seed as the SemanticKITTI fixture (both motion-compensated,
    both at the camera's time, when the head faces forward): each ``points/*.npy`` is that
    frame's scan (x, y, z as written there, the raw intensity), and the labels are its boxes
    of OpenPCDet's classes that hold an own point, one line each, ``x y z dx dy dz heading
    class`` to 1e-6."""
    from simulator.io.layouts import OPENPCDET_CLASSES
    from simulator.labels import label_name

    out = _dataset(tmp_path, "openpcdet", sequences=2, frames=2)
    assert (out / "ImageSets" / "train.txt").read_text().split() == ["00_000000", "00_000001"]
    assert (out / "ImageSets" / "val.txt").read_text().split() == ["01_000000", "01_000001"]
    assert sorted(p.stem for p in (out / "labels").glob("*.txt")) == [
        f"{s:02d}_{k:06d}" for s in (0, 1) for k in (0, 1)
    ]
    classes, lines = set(), 0
    for frame in (0, 1):
        stem = f"00_{frame:06d}"
        points = np.load(out / "points" / f"{stem}.npy")
        scan = compensated / "sequences" / "00" / "velodyne" / f"{frame:06d}.bin"
        bin_ = np.fromfile(scan, "<f4").reshape(-1, 4)
        assert points.dtype == np.float32 and points.shape == bin_.shape
        np.testing.assert_array_equal(points[:, :3], bin_[:, :3])
        np.testing.assert_allclose(points[:, 3] / 255.0, bin_[:, 3], rtol=1e-6)
        boxes = read_boxes(compensated / "sequences" / "00" / "boxes" / f"{frame:06d}.npz")
        keep = [b for b in range(len(boxes)) if boxes.num_points[b] >= 1
                and label_name(int(boxes.label[b])) in OPENPCDET_CLASSES]  # fmt: skip
        text = (out / "labels" / f"{stem}.txt").read_text()
        rows = [line.split() for line in text.splitlines()]
        assert len(rows) == len(keep) >= 5
        for row, b in zip(rows, keep, strict=True):
            want = [*boxes.centre_m[b], *boxes.size_m[b], boxes.yaw_rad[b]]
            np.testing.assert_allclose(np.array(row[:7], float), want, atol=5e-7)
            assert row[7] == OPENPCDET_CLASSES[label_name(int(boxes.label[b]))]
            classes.add(row[7])
        lines += len(rows)
    assert {"Car", "Pedestrian"} <= classes and lines >= 10


def test_an_npz_boxes_file_round_trips(compensated: Path) -> None:
    """A ``boxes/*.npz`` file read back is every field as written, by name; ``num_points``
    is the cloud's count of the box's instance, ``num_points_in_box`` every point inside
    (in the box's own frame, rotation and all); a box with many own points was seen."""
    path = compensated / "sequences" / "00" / "boxes" / "000000.npz"
    boxes = read_boxes(path)
    with np.load(path) as raw:
        assert set(raw.files) == set(boxes.arrays())
        for name, value in boxes.arrays().items():
            np.testing.assert_array_equal(value, raw[name])
    scan = compensated / "sequences" / "00" / "velodyne" / "000000.bin"
    labels = scan.parent.parent / "labels" / "000000.label"
    points, _, instance = read_semantickitti_frame(scan, labels)
    xyz = points[:, :3].astype(np.float64)
    assert len(boxes) >= 10
    for b in range(len(boxes)):
        local = (xyz - boxes.centre_m[b]) @ boxes.rotation[b]
        inside = np.all(np.abs(local) <= boxes.size_m[b] / 2, axis=1)
        assert boxes.num_points[b] == (instance == boxes.instance[b]).sum()
        assert boxes.num_points_in_box[b] == inside.sum()
    # every point of a countable object is counted once, in its own box
    assert boxes.num_points.sum() == (instance > 0).sum() > 1000
    assert boxes.num_points.max() > 50
    assert (boxes.visibility[boxes.num_points > 50] > 0.05).all()


def test_parked_cars_face_the_way_they_were_parked() -> None:
    """A static countable object's heading is its placement: cars parked facing 180 deg
    have yaw pi, and the box's front (+x) is the car's front, read from its mesh: the kit
    sets a car's glass cabin back from the centre (a longer bonnet than boot) and puts a
    truck's cab in front of its cargo box."""
    from simulator.config import SceneSpec, load_materials
    from simulator.world.boxes import headings_from_spec, object_boxes
    from simulator.world.scene import build_scene

    spec = SceneSpec.model_validate(street(sequence_seed(3, 0) % 2**63))
    scene = build_scene(spec, Path("."), load_materials(), source="street")
    boxes = object_boxes(scene, 0.0, (np.eye(3), np.zeros(3)),
                         headings_rad=headings_from_spec(spec))  # fmt: skip
    placed = {o.instance: o.rotation_deg[2] for o in spec.objects
              if o.name.startswith("parked") and o.name.endswith("/body")}  # fmt: skip
    by_name = {}
    for o in scene.objects:
        by_name.setdefault(o.instance, {})[o.name.rsplit("/", 1)[-1]] = o.vertices_m
    faced = {0: 0, 180: 0}
    for b in np.flatnonzero(np.isin(boxes.instance, list(placed))):
        inst = int(boxes.instance[b])
        want = np.radians(placed[inst])
        assert abs(np.angle(np.exp(1j * (boxes.yaw_rad[b] - want)))) < 1e-9
        # the front from the geometry: where the cabin (or the truck's cargo box) sits
        local = (by_name[inst]["glass"] - boxes.centre_m[b]) @ boxes.rotation[b]
        if "cargo" in by_name[inst]:
            assert local[:, 0].mean() > 0.5  # a truck's cab is at its front
        else:
            half = boxes.size_m[b][0] / 2  # the cabin is set back: the bonnet is at +x
            bonnet, boot = half - local[:, 0].max(), local[:, 0].min() + half
            assert bonnet > boot + 0.05 * boxes.size_m[b][0]
        faced[180 if abs(want) > np.pi / 2 else 0] += 1
        if abs(want) > np.pi / 2:
            assert abs(abs(boxes.yaw_rad[b]) - np.pi) < np.radians(3.01)
    assert faced[0] >= 5 and faced[180] >= 5


def _mesh_cars(path: Path) -> None:
    """A glTF of two parked cars as another tool would export them, front at the node's
    +x: a 4.2 x 1.8 x 1 m body and a cabin set 0.4 m back; car_1's node turned 180 deg."""
    import trimesh

    scene = trimesh.Scene()
    for k, (x, yaw) in enumerate(((0.0, 0.0), (8.0, np.pi))):
        node = trimesh.transformations.rotation_matrix(yaw, [0, 0, 1])
        node[:3, 3] = [x, 0.0, 0.0]
        body = trimesh.creation.box((4.2, 1.8, 1.0))
        body.apply_translation((0.0, 0.0, 0.7))
        cabin = trimesh.creation.box((2.0, 1.6, 0.5))
        cabin.apply_translation((-0.4, 0.0, 1.45))
        for part, mesh in (("body", body), ("cabin", cabin)):
            scene.add_geometry(mesh, node_name=f"car_{k}/{part}", geom_name=f"car_{k}_{part}",
                               transform=node)  # fmt: skip
    scene.export(str(path))


@pytest.mark.parametrize("stated", [True, False])
def test_a_mesh_files_part_rule_states_the_front(tmp_path: Path, stated: bool) -> None:
    """A part rule's ``heading_deg`` (the front in the part's own frame) gives a parked car
    from a mesh file its front: the node's turn and the object's placement (60 deg) give
    yaw 60 deg to car_0 and -120 deg to car_1, whose cabins sit behind their centres along
    the box's -x. Without it the long-side rule cannot tell front from back, so the two
    cars, facing opposite ways, get the same yaw."""
    from simulator.world.boxes import object_boxes
    from simulator.world.scene import load_scene

    _mesh_cars(tmp_path / "cars.glb")
    rule = {"match": "car_*", "material": "car_paint", "label": "car",
            "group": r"^(car_\d+)/"}  # fmt: skip
    if stated:
        rule["heading_deg"] = 0.0
    cars = {"name": "cars", "mesh": "cars.glb", "rotation_deg": [0, 0, 60], "parts": [rule]}
    (tmp_path / "scene.yaml").write_text(yaml.safe_dump({"objects": [cars]}))
    scene = load_scene(tmp_path / "scene.yaml")
    boxes = object_boxes(scene, 0.0, (np.eye(3), np.zeros(3)))
    assert len(boxes) == 2
    yaw = {}
    for b in range(2):
        cabin = next(o for o in scene.objects
                     if o.instance == boxes.instance[b] and o.name.endswith("cabin"))  # fmt: skip
        name = "car_0" if np.linalg.norm(boxes.centre_m[b][:2]) < 1 else "car_1"
        yaw[name] = boxes.yaw_rad[b]
        local = (cabin.vertices_m - boxes.centre_m[b]) @ boxes.rotation[b]
        np.testing.assert_allclose(boxes.size_m[b], [4.2, 1.8, 1.5], atol=1e-6)  # float32
        if stated:  # the cabin 0.4 m behind the centre: the box's +x is the front
            assert local[:, 0].mean() == pytest.approx(-0.4, abs=1e-6)
    if stated:
        assert yaw["car_0"] == pytest.approx(np.radians(60), abs=1e-6)
        assert yaw["car_1"] == pytest.approx(np.radians(-120), abs=1e-6)
    else:
        assert abs(np.angle(np.exp(1j * (yaw["car_0"] - yaw["car_1"])))) < 1e-6


@pytest.fixture(scope="module")
def passing_cars() -> tuple[object, object]:
    """A static VLP-16 (head starting at 180 deg) between two cars driving at 15 m/s
    along x: one 12 m ahead (scanned mid-turn, when the head faces +x), one 12 m behind
    (scanned at the turn's start and end)."""
    from simulator.config import SceneSpec, Survey, load_materials, load_scanner
    from simulator.config.pose import Pose, TrajectorySpec
    from simulator.generators.kit import Kit
    from simulator.pipeline.simulation import Simulation
    from simulator.world.scene import build_scene

    kit = Kit(np.random.default_rng(0))
    kit.part("road", {"plane": {"size_m": [80.0, 40.0]}}, (0, 0, 0), "asphalt", "road")
    kit.car("ahead", 12.0, 0.0, 0.0, kind="sedan", speed_mps=15.0)
    kit.car("behind", -12.0, 0.0, 0.0, kind="sedan", speed_mps=15.0)
    spec = SceneSpec.model_validate({"objects": kit.objects})
    scene = build_scene(spec, Path("."), load_materials(), source="test")
    scanner = load_scanner("vlp-16", {"start_azimuth_deg": 180.0})
    survey = Survey(scanner=scanner.name, scene="(test)", revolutions=1, seed=1,
                    trajectory=TrajectorySpec(start=Pose(), velocity_mps=[0.0, 0.0, 0.0]),
                    mount=Pose(position_m=[0.0, 0.0, 1.8]))  # fmt: skip
    return Simulation(survey=survey, scanner=scanner, scene=scene, base_dir=Path(".")), scene


@pytest.mark.parametrize(("layout", "car", "offset_s"), [("kitti", "ahead", 0.05),
                                                          ("nuscenes", "behind", 0.1)])  # fmt: skip
def test_the_reference_time_is_the_layouts_own(
    passing_cars: tuple[object, object], layout: str, car: str, offset_s: float
) -> None:
    """KITTI's reference is the moment the head faces forward (+x), nuScenes' the end of
    the sweep (its LIDAR_TOP timestamp): a car's points fired within 3 ms of it lie in its
    box then; at the first firing (the old reference) the box is 15 m/s x offset off."""
    from simulator.datasets.tasks import reference_frame
    from simulator.world.boxes import object_boxes

    sim, scene = passing_cars
    first = sim.frames()[0]
    ref = reference_frame(sim, first, layout)
    assert ref.time_s - first.time_s == pytest.approx(offset_s, abs=1e-3)
    cloud = sim.frame_cloud(ref, "sensor_compensated")  # time_s counts from the reference
    inst = next(o.instance for o in scene.objects if o.name.startswith(f"{car}/"))
    near = (cloud["instance"] == inst) & (np.abs(cloud["time_s"]) < 3e-3)
    assert near.sum() >= 20
    xyz = cloud["xyz"][near]
    for frame, gap_m in ((ref, 0.0), (first, 15.0 * offset_s)):
        boxes = object_boxes(scene, frame.time_s, (ref.rotation, ref.position_m))
        b = int(np.flatnonzero(boxes.instance == inst)[0])
        if frame is ref:  # the box then holds them
            inside = _inside(xyz, boxes.centre_m[b], boxes.size_m[b], boxes.yaw_rad[b], 0.05)
            assert inside.mean() >= 0.98
        # the face towards the sensor: the points' nearest end against the box's
        local_x = (xyz - boxes.centre_m[b]) @ boxes.rotation[b][:, 0]
        half = boxes.size_m[b][0] / 2
        gap = local_x.min() + half if car == "ahead" else half - local_x.max()
        assert abs(gap) == pytest.approx(gap_m, abs=0.1)


def test_visibility_is_the_share_of_the_surface_by_area() -> None:
    """One car (instance 7) of a 1 x 4 x 2 m body 10 m ahead and a finely meshed sphere
    (r 0.5 m, over a thousand triangles) hidden behind a wall: of the surface that faces the
    sensor, the body's front (8 m^2) is seen and the sphere's cap that faces it (2 pi r^2
    (1 - r / d) = 1.50 m^2, d its centre's distance) is not, so the visibility is 8 / 9.50
    = 0.84 by area, whatever the triangle counts (by triangle in file order it would be
    near 0). Outside the sensor's vertical field of view nothing counts."""
    from simulator.config import SceneSpec, load_materials
    from simulator.world.boxes import object_boxes
    from simulator.world.raycast import RayEngine
    from simulator.world.scene import build_scene

    car = {"reflectance": 0.5, "minnaert_k": 1.0, "label": "car"}
    spec = SceneSpec.model_validate({"objects": [
        {"name": "body", "box": {"size_m": [1, 4, 2]}, "position_m": [10, 0, 0],
         "material": car, "instance": 7},
        {"name": "ball", "sphere": {"radius_m": 0.5}, "position_m": [10, 6, 0],
         "material": car, "instance": 7},
        {"name": "wall", "box": {"size_m": [0.1, 2, 4]}, "position_m": [5, 3, 0],
         "material": {**car, "label": "building"}},
    ]})  # fmt: skip
    scene = build_scene(spec, Path("."), load_materials(), source="vis")
    ball = next(o for o in scene.objects if o.name == "ball")
    assert len(ball.faces) > 1000
    engine = RayEngine(scene)
    pose = (np.eye(3), np.zeros(3))
    boxes = object_boxes(scene, 0.0, pose, engine=engine)
    car_box = int(np.flatnonzero(boxes.instance == 7)[0])
    cap = 2 * np.pi * 0.5**2 * (1 - 0.5 / np.hypot(10, 6))
    print("visibility", boxes.visibility[car_box], "expected", 8 / (8 + cap))
    assert boxes.visibility[car_box] == pytest.approx(8 / (8 + cap), abs=1 / 64)
    above = object_boxes(scene, 0.0, pose, engine=engine,
                         elevation_window_rad=(np.radians(10), np.radians(20)))  # fmt: skip
    assert above.visibility[car_box] == 0.0
