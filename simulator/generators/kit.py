"""The building blocks of the procedural scenes: cars, people, cyclists, trees, façades,
street furniture, each made of several primitive parts with labels and instance ids.

A :class:`Kit` collects object mappings (the scene YAML's structure) as the parts are
placed, draws every random choice from one ``numpy.random.Generator`` (the same seed, the
same scene), and numbers the countable objects. Each builder takes a placement in the
ground plane: ``x_m, y_m`` the object's foot and ``yaw_deg`` its heading; its parts are
laid out in the object's own frame (x forward, y left, z up) and moved there, so every
part's placement (``rotation_deg``) turns its x axis to the object's heading: that is how
a static object's front is read back (:func:`simulator.world.boxes.headings_from_spec`, a parked
car's box facing the way it was parked).

Moving objects (cars in traffic, cyclists, walkers) get one trajectory shared by all
their rigid parts; a walker's legs and arms swing about the hip and the shoulder
(:class:`~simulator.config.Swing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..config import Material

__all__ = ["MATERIAL_JITTER", "Kit", "jitter_material"]

#: Relative ranges of material randomisation: reflectance x [0.8, 1.2], Minnaert k +- 0.1
#: (kept >= 0), roughness x [0.5, 1.5].
MATERIAL_JITTER = {"reflectance": 0.2, "minnaert_k": 0.1, "roughness_m": 0.5}

Vec = tuple[float, float, float]


def jitter_material(material: Material, rng: np.random.Generator) -> dict[str, Any]:
    """A material's mapping with reflectance, Minnaert k and roughness randomised within
    :data:`MATERIAL_JITTER`."""
    m = material.model_dump()
    m["reflectance"] = float(m["reflectance"] * rng.uniform(0.8, 1.2))
    m["minnaert_k"] = float(max(0.0, m["minnaert_k"] + rng.uniform(-0.1, 0.1)))
    m["roughness_m"] = float(m["roughness_m"] * rng.uniform(0.5, 1.5))
    return m


def _rz(yaw_deg: float) -> np.ndarray:
    c, s = np.cos(np.radians(yaw_deg)), np.sin(np.radians(yaw_deg))
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _floats(v: Any) -> list[float]:
    return [float(x) for x in v]


Frame = tuple[float, float, float, float]


def _driving(
    x_m: float, y_m: float, yaw_deg: float, speed_mps: float, instance: int
) -> tuple[Frame, dict[str, Any]]:
    """The parts' frame and extra keys of a vehicle: placed (parked), or in its own frame
    with a trajectory driving straight along its heading."""
    extra: dict[str, Any] = {"instance": instance}
    if not speed_mps:
        return (x_m, y_m, 0.0, yaw_deg), extra
    extra["trajectory"] = {
        "start": {"position_m": [float(x_m), float(y_m), 0.0],
                  "rotation_deg": [0.0, 0.0, float(yaw_deg)]},
        "velocity_mps": _floats(_rz(yaw_deg) @ [speed_mps, 0.0, 0.0]),
    }  # fmt: skip
    return (0.0, 0.0, 0.0, 0.0), extra


@dataclass
class Kit:
    """Collects the objects of a procedural scene.

    Attributes
    ----------
    rng : numpy.random.Generator
        Every random choice.
    objects : list of dict
        The object mappings placed so far.
    next_instance : int
        The next instance id for a countable object.
    """

    rng: np.random.Generator
    objects: list[dict[str, Any]] = field(default_factory=list)
    next_instance: int = 1

    # ----------------------------------------------------------------- primitives

    def part(
        self,
        name: str,
        geometry: dict[str, Any],
        local_m: Vec,
        material: str,
        label: str,
        frame: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
        rotation_deg: Vec = (0.0, 0.0, 0.0),
        **extra: Any,
    ) -> dict[str, Any]:
        """Place one primitive: ``local_m`` in a frame at ``frame = (x, y, z, yaw_deg)``.

        ``geometry`` is one primitive mapping (``{"box": {"size_m": [...]}}``);
        ``rotation_deg`` is the part's roll, pitch, yaw within the frame.
        """
        x, y, z, yaw = frame
        pos = np.array([x, y, z]) + _rz(yaw) @ np.asarray(local_m, dtype=np.float64)
        obj = {
            "name": name,
            **geometry,
            "position_m": _floats(pos),
            "rotation_deg": [float(rotation_deg[0]), float(rotation_deg[1]),
                             float(rotation_deg[2] + yaw)],
            "material": material,
            "label": label,
            **extra,
        }  # fmt: skip
        self.objects.append(obj)
        return obj

    def box(self, name: str, size_m: Vec, local_m: Vec, material: str, label: str,
            frame: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0),
            **extra: Any) -> dict[str, Any]:  # fmt: skip
        """An axis-aligned box (in the frame) of ``size_m`` centred at ``local_m``."""
        return self.part(name, {"box": {"size_m": _floats(size_m)}}, local_m, material, label,
                         frame, **extra)  # fmt: skip

    def pane(self, name: str, size_m: tuple[float, float], local_m: Vec, material: str,
             label: str, frame: tuple[float, float, float, float]) -> dict[str, Any]:  # fmt: skip
        """A vertical sheet, one surface (a window pane, a mesh panel): ``size_m`` (width
        along x, height) in the frame's x-z plane, centred at ``local_m``."""
        plane = {"plane": {"size_m": [float(size_m[0]), float(size_m[1])]}}
        return self.part(name, plane, local_m, material, label, frame,
                         rotation_deg=(90.0, 0.0, 0.0))  # fmt: skip

    def instance(self) -> int:
        """A new instance id."""
        self.next_instance += 1
        return self.next_instance - 1

    # ----------------------------------------------------------------- vehicles

    def car(
        self, name: str, x_m: float, y_m: float, yaw_deg: float, *, kind: str | None = None,
        speed_mps: float = 0.0,
    ) -> None:  # fmt: skip
        """A car of parts (body, glass cabin with a roof and seats behind it, four
        wheels), parked or driving straight at ``speed_mps`` along its heading.

        ``kind``: sedan, hatchback, suv, van or truck (drawn when None). Cars are labelled
        ``car`` (``moving-car`` when driving), trucks ``truck`` (``moving-truck``).
        """
        rng = self.rng
        kind = kind or str(rng.choice(["sedan", "hatchback", "suv", "van", "truck"],
                                      p=[0.4, 0.25, 0.2, 0.1, 0.05]))  # fmt: skip
        length, width, height, cabin = {
            "sedan": (rng.uniform(4.3, 4.9), rng.uniform(1.75, 1.85), rng.uniform(1.4, 1.5), 0.5),
            "hatchback": (rng.uniform(3.7, 4.2), rng.uniform(1.65, 1.8), rng.uniform(1.45, 1.55),
                          0.6),
            "suv": (rng.uniform(4.4, 4.9), rng.uniform(1.85, 2.0), rng.uniform(1.65, 1.8), 0.65),
            "van": (rng.uniform(4.8, 5.4), rng.uniform(1.9, 2.0), rng.uniform(1.9, 2.3), 0.8),
            "truck": (rng.uniform(6.5, 9.0), rng.uniform(2.3, 2.5), rng.uniform(2.8, 3.4), 0.25),
        }[kind]  # fmt: skip
        label = "truck" if kind == "truck" else "car"
        inst = self.instance()
        if speed_mps:
            label = f"moving-{label}"
        frame, extra = _driving(x_m, y_m, yaw_deg, speed_mps, inst)
        paint = "car_paint"
        clearance, wheel_r = 0.18, float(np.clip(0.2 * height, 0.3, 0.5))
        belt = clearance + 0.55 * (height - clearance) if kind != "truck" else 0.5 * height
        self.box(f"{name}/body", (length, width, belt - clearance),
                 (0.0, 0.0, (belt + clearance) / 2), paint, label, frame, **extra)  # fmt: skip
        c_len, c_h = cabin * length, height - belt
        c_x = -0.05 * length if kind != "truck" else 0.5 * length - c_len / 2
        if kind == "truck":  # a cab in front of a tall box
            self.box(f"{name}/cargo", (length - c_len - 0.2, width, height - belt + 0.6),
                     (-(c_len + 0.2) / 2, 0.0, belt + (height - belt + 0.6) / 2), "painted_metal",
                     label, frame, **extra)  # fmt: skip
        roof = 0.06
        self.box(f"{name}/glass", (c_len, width - 0.1, c_h - roof),
                 (c_x, 0.0, belt + (c_h - roof) / 2), "glass", label, frame, **extra)  # fmt: skip
        self.box(f"{name}/roof", (c_len - 0.1, width - 0.12, roof),
                 (c_x, 0.0, height - roof / 2), paint, label, frame, **extra)  # fmt: skip
        self.box(f"{name}/seats", (max(c_len - 0.5, 0.4), width - 0.5, 0.55 * c_h),
                 (c_x, 0.0, belt + 0.275 * c_h), "fabric", label, frame, **extra)  # fmt: skip
        axle = 0.5 * length - max(0.8, 0.2 * length)
        for k, (ax, side) in enumerate([(axle, 1), (axle, -1), (-axle, 1), (-axle, -1)]):
            self.part(f"{name}/wheel{k}", {"cylinder": {"radius_m": wheel_r, "height_m": 0.22,
                      "sections": 16}}, (ax, side * (width / 2 - 0.1), wheel_r), "rubber",
                      label, frame, rotation_deg=(90.0, 0.0, 0.0), **extra)  # fmt: skip

    def bicycle(self, name: str, x_m: float, y_m: float, yaw_deg: float, *,
                speed_mps: float = 0.0) -> None:  # fmt: skip
        """A bicycle, parked (``bicycle``) or ridden at ``speed_mps`` by a rider who is
        labelled with it (``moving-bicyclist``, one instance, as SemanticKITTI does)."""
        inst = self.instance()
        label = "moving-bicyclist" if speed_mps else "bicycle"
        frame, extra = _driving(x_m, y_m, yaw_deg, speed_mps, inst)
        r = 0.34
        for k, ax in enumerate((0.52, -0.52)):
            self.part(f"{name}/wheel{k}", {"cylinder": {"radius_m": r, "height_m": 0.04,
                      "sections": 20}}, (ax, 0.0, r), "rubber", label, frame,
                      rotation_deg=(90.0, 0.0, 0.0), **extra)  # fmt: skip
        self.box(f"{name}/frame", (1.0, 0.05, 0.06), (0.0, 0.0, 0.62), "painted_metal", label,
                 frame, rotation_deg=(0.0, -10.0, 0.0), **extra)  # fmt: skip
        self.box(f"{name}/bar", (0.06, 0.55, 0.05), (0.48, 0.0, 1.0), "painted_metal", label,
                 frame, **extra)  # fmt: skip
        if speed_mps:  # the rider, leaning forward
            self.box(f"{name}/rider_legs", (0.3, 0.32, 0.7), (-0.15, 0.0, 0.55), "fabric",
                     label, frame, **extra)  # fmt: skip
            self.box(f"{name}/rider_torso", (0.28, 0.4, 0.62), (-0.05, 0.0, 1.15), "fabric",
                     label, frame, rotation_deg=(0.0, 30.0, 0.0), **extra)  # fmt: skip
            self.part(f"{name}/rider_head", {"sphere": {"radius_m": 0.11, "subdivisions": 2}},
                      (0.15, 0.0, 1.55), "fabric", label, frame, **extra)  # fmt: skip

    # ----------------------------------------------------------------- people

    def person(self, name: str, x_m: float, y_m: float, yaw_deg: float, *,
               speed_mps: float = 0.0) -> None:  # fmt: skip
        """A person of parts (torso, head, two legs, two arms), standing (``person``) or
        walking at ``speed_mps`` along the heading (``moving-person``), the legs and arms
        swinging in opposite phase at a stride of about 0.75 m."""
        rng = self.rng
        s = float(rng.uniform(0.85, 1.1))  # body scale
        hip = 0.9 * s
        inst = self.instance()
        label = "moving-person" if speed_mps else "person"
        material = "fabric"
        heading = _rz(yaw_deg)
        velocity = _floats(heading @ [speed_mps, 0.0, 0.0])
        period = 2 * 0.75 * s / speed_mps if speed_mps else 1.0  # two steps per stride

        def motion(offset: Vec, swing: tuple[float, float] | None) -> dict[str, Any]:
            start = np.array([x_m, y_m, 0.0]) + heading @ np.asarray(offset)
            spec: dict[str, Any] = {
                "start": {"position_m": _floats(start), "rotation_deg": [0.0, 0.0, yaw_deg]},
                "velocity_mps": velocity,
            }
            if swing is not None:
                spec["swing"] = {"axis": "pitch", "amplitude_deg": swing[0],
                                 "period_s": period, "phase_deg": swing[1]}  # fmt: skip
            return spec

        if not speed_mps:
            frame = (x_m, y_m, 0.0, yaw_deg)
            extra: dict[str, Any] = {"instance": inst}
            self.box(f"{name}/torso", (0.22 * s, 0.4 * s, 0.62 * s), (0, 0, hip + 0.31 * s),
                     material, label, frame, **extra)  # fmt: skip
            self.part(f"{name}/head", {"sphere": {"radius_m": 0.11 * s, "subdivisions": 2}},
                      (0, 0, hip + 0.75 * s), material, label, frame, **extra)  # fmt: skip
            for k, side in enumerate((1, -1)):
                self.box(f"{name}/leg{k}", (0.14 * s, 0.14 * s, hip), (0, side * 0.1 * s,
                         hip / 2), material, label, frame, **extra)  # fmt: skip
                self.box(f"{name}/arm{k}", (0.09 * s, 0.09 * s, 0.6 * s), (0, side * 0.25 * s,
                         hip + 0.27 * s), material, label, frame, **extra)  # fmt: skip
            return
        body = {"instance": inst, "trajectory": motion((0.0, 0.0, hip), None)}
        self.box(f"{name}/torso", (0.22 * s, 0.4 * s, 0.62 * s), (0, 0, 0.31 * s), material,
                 label, **body)  # fmt: skip
        self.part(f"{name}/head", {"sphere": {"radius_m": 0.11 * s, "subdivisions": 2}},
                  (0, 0, 0.75 * s), material, label, **body)  # fmt: skip
        for k, side in enumerate((1, -1)):
            phase = 0.0 if side > 0 else 180.0
            leg = {"instance": inst,
                   "trajectory": motion((0.0, side * 0.1 * s, hip), (25.0, phase))}  # fmt: skip
            self.box(f"{name}/leg{k}", (0.14 * s, 0.14 * s, hip), (0, 0, -hip / 2), material,
                     label, **leg)  # fmt: skip
            arm = {"instance": inst, "trajectory": motion((0.0, side * 0.25 * s, hip + 0.57 * s),
                                                          (20.0, phase + 180.0))}  # fmt: skip
            self.box(f"{name}/arm{k}", (0.09 * s, 0.09 * s, 0.6 * s), (0, 0, -0.3 * s),
                     material, label, **arm)  # fmt: skip

    # ----------------------------------------------------------------- vegetation

    def tree(self, name: str, x_m: float, y_m: float, *, height_m: float | None = None,
             clearance_m: float = 2.0) -> None:  # fmt: skip
        """A tree: a trunk (``trunk``) and a crown of three to six overlapping porous
        spheres (``foliage``, ``vegetation``) that the beam partly passes, none lower than
        ``clearance_m`` (a street tree is pruned clear of the traffic under it)."""
        rng = self.rng
        h = float(height_m or rng.uniform(5, 12))
        crown_r = float(rng.uniform(0.3, 0.45) * h)
        trunk_h = max(2.0, h - 2.0 * crown_r)  # the crown's base
        top = trunk_h + 0.5 * crown_r  # the trunk ends inside the crown
        self.part(f"{name}/trunk", {"cylinder": {"radius_m": float(rng.uniform(0.06, 0.15)),
                  "height_m": top, "sections": 12}},
                  (x_m, y_m, top / 2), "bark", "trunk")  # fmt: skip
        for k in range(int(rng.integers(3, 7))):
            offset = rng.normal(0.0, 0.3 * crown_r, 3) * [1.0, 1.0, 0.6]
            r = crown_r * float(rng.uniform(0.55, 0.8))
            z = max(trunk_h + crown_r + offset[2], clearance_m + r)
            self.part(f"{name}/crown{k}", {"sphere": {"radius_m": r, "subdivisions": 2}},
                      (x_m + offset[0], y_m + offset[1], z), "foliage", "vegetation")  # fmt: skip

    def bush(self, name: str, x_m: float, y_m: float) -> None:
        """A bush: a flattened sphere of dense vegetation."""
        rng = self.rng
        r = float(rng.uniform(0.6, 1.6))
        obj = self.part(name, {"sphere": {"radius_m": r, "subdivisions": 2}},
                        (x_m, y_m, 0.35 * r), "vegetation", "vegetation")  # fmt: skip
        obj["scale"] = [1.0, float(rng.uniform(0.7, 1.3)), 0.7]

    # ----------------------------------------------------------------- street furniture

    def street_light(self, name: str, x_m: float, y_m: float, yaw_deg: float) -> None:
        """A lamp post (``pole``): a pole, an arm over the road and a lamp head."""
        h = float(self.rng.uniform(6.0, 8.5))
        frame = (x_m, y_m, 0.0, yaw_deg)
        self.part(f"{name}/pole", {"cylinder": {"radius_m": 0.09, "height_m": h,
                  "sections": 12}}, (0, 0, h / 2), "pole_metal", "pole", frame)  # fmt: skip
        self.box(f"{name}/arm", (1.6, 0.08, 0.08), (0.8, 0, h - 0.1), "pole_metal", "pole",
                 frame)  # fmt: skip
        self.box(f"{name}/lamp", (0.6, 0.3, 0.15), (1.5, 0, h - 0.2), "painted_metal", "pole",
                 frame)  # fmt: skip

    def sign(self, name: str, x_m: float, y_m: float, yaw_deg: float) -> None:
        """A traffic sign: a post (``pole``) and a retroreflective plate (``traffic-sign``)
        facing along ``yaw_deg``."""
        frame = (x_m, y_m, 0.0, yaw_deg)
        self.part(f"{name}/post", {"cylinder": {"radius_m": 0.04, "height_m": 2.6,
                  "sections": 10}}, (0, 0, 1.3), "pole_metal", "pole", frame)  # fmt: skip
        if self.rng.uniform() < 0.5:
            self.box(f"{name}/plate", (0.03, 0.65, 0.65), (0.05, 0, 2.3),
                     "retroreflective_sign", "traffic-sign", frame)  # fmt: skip
        else:
            self.part(f"{name}/plate", {"cylinder": {"radius_m": 0.33, "height_m": 0.03,
                      "sections": 20}}, (0.05, 0, 2.3), "retroreflective_sign",
                      "traffic-sign", frame, rotation_deg=(0.0, 90.0, 0.0))  # fmt: skip

    def traffic_light(self, name: str, x_m: float, y_m: float, yaw_deg: float) -> None:
        """A traffic light: a pole and a signal head (``traffic-sign``)."""
        frame = (x_m, y_m, 0.0, yaw_deg)
        self.part(f"{name}/pole", {"cylinder": {"radius_m": 0.07, "height_m": 3.2,
                  "sections": 12}}, (0, 0, 1.6), "pole_metal", "pole", frame)  # fmt: skip
        self.box(f"{name}/head", (0.25, 0.35, 0.9), (0.15, 0, 2.9), "painted_metal",
                 "traffic-sign", frame)  # fmt: skip

    def bin(self, name: str, x_m: float, y_m: float, yaw_deg: float) -> None:
        """A wheelie bin or a litter bin (``other-object``)."""
        size = (0.6, 0.6, 1.05) if self.rng.uniform() < 0.5 else (0.45, 0.45, 0.8)
        self.box(name, size, (0, 0, size[2] / 2), "plastic", "other-object",
                 (x_m, y_m, 0.0, yaw_deg))  # fmt: skip

    def bench(self, name: str, x_m: float, y_m: float, yaw_deg: float) -> None:
        """A bench (``other-object``): a seat and a back on two supports."""
        frame = (x_m, y_m, 0.0, yaw_deg)
        self.box(f"{name}/seat", (1.8, 0.45, 0.06), (0, 0, 0.45), "wood", "other-object", frame)
        self.box(f"{name}/back", (1.8, 0.05, 0.4), (0, 0.22, 0.75), "wood", "other-object",
                 frame)  # fmt: skip
        for k, x in enumerate((-0.75, 0.75)):
            self.box(f"{name}/leg{k}", (0.06, 0.4, 0.45), (x, 0, 0.225), "painted_metal",
                     "other-object", frame)  # fmt: skip

    def fence(self, name: str, x0_m: float, x1_m: float, y_m: float, *, kind: str) -> None:
        """A fence along x from ``x0_m`` to ``x1_m`` (``fence``): ``mesh`` (posts and a
        see-through wire-mesh sheet, one surface), ``wood`` (posts and a board panel),
        ``wall`` (a low solid wall) or ``hedge`` (a clipped hedge, ``vegetation``)."""
        length = x1_m - x0_m
        if length <= 0.3:
            return
        mid = (x0_m + x1_m) / 2
        if kind == "hedge":
            h = float(self.rng.uniform(1.0, 2.2))
            self.box(name, (length, float(self.rng.uniform(0.6, 1.0)), h), (mid, y_m, h / 2),
                     "vegetation", "vegetation")  # fmt: skip
            return
        if kind == "wall":
            h = float(self.rng.uniform(0.5, 1.2))
            self.box(name, (length, 0.25, h), (mid, y_m, h / 2), "concrete", "fence")
            return
        h = 1.2 if kind == "wood" else 1.8
        n_posts = max(2, int(length / 2.5) + 1)
        for k, x in enumerate(np.linspace(x0_m, x1_m, n_posts)):
            self.box(f"{name}/post{k}", (0.08, 0.08, h), (x, y_m, h / 2),
                     "wood" if kind == "wood" else "pole_metal", "fence")  # fmt: skip
        if kind == "wood":
            self.box(f"{name}/boards", (length, 0.03, h - 0.15), (mid, y_m + 0.06, h / 2 + 0.05),
                     "wood", "fence")  # fmt: skip
        else:
            self.pane(f"{name}/panel", (length, h - 0.1), (mid, y_m, h / 2), "wire_mesh",
                      "fence", (0.0, 0.0, 0.0, 0.0))  # fmt: skip

    # ----------------------------------------------------------------- buildings

    def building(self, name: str, x_m: float, y_m: float, yaw_deg: float, *,
                 length_m: float, depth_m: float, floors: int,
                 shop_front: bool = False) -> None:  # fmt: skip
        """A building whose façade faces along ``-y`` of its frame (the frame's origin is
        the middle of the façade's foot; its yaw turns the façade to face the street).

        The façade is a wall with windows in bays (glass panes, one surface each, set back
        into the wall, so the reveals show), a door or a shop front on the ground floor,
        and balconies on some; behind the glass are rooms (floor slabs, side walls and the
        back wall of the building's solid core) that the beam reaches through the windows.
        Everything is ``building``.
        """
        rng = self.rng
        frame = (x_m, y_m, 0.0, yaw_deg)
        wall = "building_wall"
        floor_h = float(rng.uniform(2.8, 3.5))
        height = floors * floor_h + float(rng.uniform(0.3, 1.0))
        bay = float(rng.uniform(2.6, 4.0))
        bays = max(1, int(length_m // bay))
        bay = length_m / bays
        win_w = bay * float(rng.uniform(0.4, 0.6))
        win_h = floor_h * float(rng.uniform(0.4, 0.55))
        sill = float(rng.uniform(0.8, 1.0))
        thick, recess = 0.3, float(rng.uniform(0.08, 0.25))
        room = float(rng.uniform(3.5, 5.5))
        core = max(depth_m - thick - room, 2.0)

        def b(part: str, size: Vec, centre: Vec, material: str = wall) -> None:
            self.box(f"{name}/{part}", size, centre, material, "building", frame)

        # Piers between the bays, full height.
        pier = bay - win_w
        for k in range(bays + 1):
            w = pier / 2 if k in (0, bays) else pier
            x = -length_m / 2 + k * bay + (w / 2 if k == 0 else -w / 2 if k == bays else 0.0)
            b(f"pier{k}", (w, thick, height), (x, thick / 2, height / 2))
        door_bay = int(rng.integers(bays)) if not shop_front else -1
        for j in range(bays):
            x = -length_m / 2 + (j + 0.5) * bay
            bottom = 0.0  # top of the wall below the next opening
            for f in range(floors):
                if f == 0 and (shop_front or j == door_bay):
                    lo, hi = (0.0, 2.2) if j == door_bay else (0.45, floor_h - 0.5)
                else:
                    lo, hi = f * floor_h + sill, f * floor_h + sill + win_h
                if lo > bottom:
                    b(
                        f"wall{j}_{f}",
                        (win_w, thick, lo - bottom),
                        (x, thick / 2, (lo + bottom) / 2),
                    )
                if f == 0 and j == door_bay:
                    b(f"door{j}", (win_w, 0.05, hi - lo), (x, thick - 0.05, (lo + hi) / 2), "wood")
                else:  # a pane is one surface: glass's transmittance is a whole pane's
                    self.pane(f"{name}/window{j}_{f}", (win_w, hi - lo),
                              (x, recess, (lo + hi) / 2), "glass", "building", frame)  # fmt: skip
                bottom = hi
                if f > 0 and (f + j) % 3 == 0 and rng.uniform() < 0.35:  # a balcony
                    z = f * floor_h
                    b(f"balcony{j}_{f}", (win_w + 0.8, 1.2, 0.15), (x, -0.6, z + 0.075))
                    b(f"railing{j}_{f}", (win_w + 0.8, 0.05, 0.9), (x, -1.18, z + 0.6),
                      "painted_metal")  # fmt: skip
            b(
                f"wall{j}_top",
                (win_w, thick, height - bottom),
                (x, thick / 2, (height + bottom) / 2),
            )
        # The rooms behind the façade and the solid core behind them.
        for f in range(1, floors):
            b(f"floor{f}", (length_m, room, 0.2), (0.0, thick + room / 2, f * floor_h))
        b("roof", (length_m, room + thick, 0.3), (0.0, (room + thick) / 2, height - 0.15))
        for k, side in enumerate((-1, 1)):
            b(f"side{k}", (0.2, room, height), (side * (length_m / 2 - 0.1), thick + room / 2,
              height / 2))  # fmt: skip
        b("core", (length_m, core, height), (0.0, thick + room + core / 2, height / 2))
