"""Build the bring-your-own-scene example: ``town.glb``, labelled by ``town_parts.yaml``.

Run from anywhere (``python scenes/town/build_town.py``); ``town.glb`` is written next to
this file. It is deterministic (no randomness).

The glTF file stands for a scene from another tool: its parts are nodes named as such a
tool would name them, and carry no label. ``town_parts.yaml`` (next to it) gives them
SemanticKITTI labels, library materials and instance ids by node name; ``scene.yaml``
uses it, and ``survey.yaml`` scans it with the RS-Helios from 1.8 m.

=====================  ===============================  =================================
Nodes                  Where (world, m)                 Mapped to
=====================  ===============================  =================================
``road``               60 x 14, centred on the origin   road, asphalt
``sidewalk_N/S``       2.5 m strips beside the road     sidewalk, concrete
``shop/front_*``       façade at y = 9.5 with an        building, building_wall
                       opening 4 x 2 m
``shop/window``        the pane in the opening          building, glass (transmits 0.85)
``shop/back_wall``     the room's back wall, y = 14     building, building_wall
``car_K/body``,        two parked cars at x = 6, 14     car, car_paint / glass,
``car_K/window``                                        one instance per car
``tree/trunk``,        a tree at (-8, 8)                trunk, bark / vegetation
``tree/crown``                                          (crown porous, transmittance 0.5)
=====================  ===============================  =================================
"""

from __future__ import annotations

from pathlib import Path

import trimesh

HERE = Path(__file__).resolve().parent


def _box(size: tuple[float, float, float], centre: tuple[float, float, float]) -> trimesh.Trimesh:
    mesh = trimesh.creation.box(size)
    mesh.apply_translation(centre)
    return mesh


def build() -> trimesh.Scene:
    """The town as a trimesh scene of named nodes."""
    scene = trimesh.Scene()

    def add(name: str, mesh: trimesh.Trimesh) -> None:
        scene.add_geometry(mesh, node_name=name, geom_name=name.replace("/", "_"))

    add("road", _box((60.0, 14.0, 0.1), (0.0, 0.0, -0.05)))
    add("sidewalk_N", _box((60.0, 2.5, 0.15), (0.0, 8.25, 0.075)))
    add("sidewalk_S", _box((60.0, 2.5, 0.15), (0.0, -8.25, 0.075)))
    # A shop front at y = 9.5 with an opening from x = -2 to 2, z = 0.8 to 2.8, a pane in
    # it and a room behind (its back wall at y = 14).
    add("shop/front_left", _box((13.0, 0.3, 4.0), (-8.5, 9.65, 2.0)))
    add("shop/front_right", _box((13.0, 0.3, 4.0), (8.5, 9.65, 2.0)))
    add("shop/front_below", _box((4.0, 0.3, 0.8), (0.0, 9.65, 0.4)))
    add("shop/front_above", _box((4.0, 0.3, 1.2), (0.0, 9.65, 3.4)))
    add("shop/window", _box((4.0, 0.02, 2.0), (0.0, 9.6, 1.8)))
    add("shop/back_wall", _box((30.0, 0.3, 4.0), (0.0, 14.15, 2.0)))
    for k, x in enumerate((6.0, 14.0)):
        add(f"car_{k}/body", _box((4.2, 1.8, 1.0), (x, -4.5, 0.7)))
        add(f"car_{k}/window", _box((2.0, 1.6, 0.5), (x - 0.3, -4.5, 1.45)))
    trunk = trimesh.creation.cylinder(radius=0.2, height=3.0)
    trunk.apply_translation((-8.0, 8.0, 1.5))
    add("tree/trunk", trunk)
    crown = trimesh.creation.icosphere(subdivisions=2, radius=1.8)
    crown.apply_translation((-8.0, 8.0, 4.2))
    add("tree/crown", crown)
    return scene


if __name__ == "__main__":
    build().export(str(HERE / "town.glb"))
    print(f"wrote {HERE / 'town.glb'}")
