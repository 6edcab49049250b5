"""Determinism where it matters: any chunking, any order of chunks, any number of Dask
workers gives the same points and the same file bytes.

Each pulse is computed from its id, the seed and the scene alone (hashes, never a random
state), so cutting the survey into chunks of another size, or computing the chunks in
another order, cannot change a bit. The cases here are those where a chunk edge could
matter: a moving sensor (a pose per pulse), moving objects (their cull's 5 ms time slots
cut by chunk edges), patterns that do not spin (their own schedules), footprints sampled
adaptively (neighbour witnesses across chunk ends), and the bytes of a LAS file written
chunk by chunk. Threads are tested in ``test_fast.py`` (one child process with four numba
threads).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import simulator
from simulator.labels import label_id

from .conftest import REPO, Workspace, lidar_sim

DRIVE = REPO / "scenes" / "farm" / "drive.yaml"


def _same(a: simulator.PointCloud, b: simulator.PointCloud, what: str) -> None:
    assert a.names == b.names, what
    for name in a.names:
        np.testing.assert_array_equal(a[name], b[name], err_msg=f"{what}: {name}")


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ground, a post and two cars driving past the Helios (one turning), one revolution:
    the cull's time slots (5 ms, 2,880 pulses) are cut by chunks of 1,001 pulses."""
    ws = Workspace(tmp_path_factory.mktemp("traffic"))
    cars = [
        {"name": "car_a", "box": {"size_m": [4.0, 2.0, 1.6]}, "material": "car_paint",
         "label": "car", "trajectory": {"start": {"position_m": [-15.0, 6.0, 0.8]},
                                        "velocity_mps": [15.0, 0.0, 0.0]}},
        {"name": "car_b", "box": {"size_m": [4.0, 2.0, 1.6]}, "material": "car_paint",
         "label": "car", "trajectory": {"start": {"position_m": [12.0, -8.0, 0.8]},
                                        "velocity_mps": [0.0, 10.0, 0.0],
                                        "yaw_rate_deg_s": 30.0}},
    ]  # fmt: skip
    objects = [
        {"name": "ground", "plane": {"size_m": [80, 80]}, "material": "asphalt"},
        {"name": "post", "cylinder": {"radius_m": 0.1, "height_m": 3.0},
         "position_m": [3.0, 3.0, 1.5], "material": "pole_metal"},
        *cars,
    ]  # fmt: skip
    return ws.survey(objects, pose={"position_m": [0, 0, 1.8]}, revolutions=1,
                     output={"frame": "world", "diagnostics": True})  # fmt: skip


@pytest.mark.parametrize(
    ("case", "extra"),
    [
        ("moving sensor", ["duration_s=0.03"]),
        ("moving sensor, adaptive footprints",
         ["duration_s=0.02", "scanner_overrides.beam_samples=7",
          "scanner_overrides.beam_sampling=adaptive", "scanner_overrides.return_mode=dual"]),
        ("risley (livox-avia)", ["scanner=livox-avia", "duration_s=0.05"]),
        ("oscillating mirror",
         ["scanner=als-oscillating", "duration_s=0.1", "mount.position_m=[0, 0, 120]"]),
    ],
)  # fmt: skip
def test_any_chunk_size_gives_the_same_cloud(case: str, extra: list[str]) -> None:
    """The drive (a pose per pulse) and two patterns that do not spin, in chunks of the
    default size and of 997 pulses (edges inside firings, revolutions and mirror cycles)."""
    base = ["output.diagnostics=true", *extra]
    ref = simulator.scan(DRIVE, base)
    small = simulator.scan(DRIVE, [*base, "chunk_pulses=997"])
    assert len(ref) > 1000, case
    _same(small, ref, case)


def test_moving_objects_cut_by_chunk_edges_give_the_same_cloud(traffic: Path) -> None:
    ref = simulator.scan(traffic)
    car = label_id("car")
    assert np.sum(ref["label"] == car) > 300  # both cars are hit, all along the turn
    assert len(np.unique(ref["instance"][ref["label"] == car])) == 2
    for chunk in (1001, 2880 * 3 + 17):
        _same(simulator.scan(traffic, [f"chunk_pulses={chunk}"]), ref, f"chunks of {chunk}")


def test_chunks_computed_in_any_order_give_the_same_cloud(traffic: Path) -> None:
    """The chunks of a scan computed last to first (and each on its own), put back in
    pulse order: the scan itself, every field (nothing carries from one chunk to the next)."""
    sim = simulator.Simulation.from_file(traffic, ["chunk_pulses=5000"])
    ref = sim.run()
    spans = list(sim.chunk_spans())
    assert len(spans) >= 10
    backwards = {span: sim.scan_pulses(*span) for span in reversed(spans)}
    _same(simulator.PointCloud.concatenate([backwards[s] for s in spans]), ref, "backwards")


def _write_twice(ext: str, folder: Path) -> tuple[Path, Path]:
    """The drive written chunk by chunk, in chunks of the default size and of 1,234."""
    overrides = ["duration_s=0.02", "output.diagnostics=true"]
    paths = folder / f"a.{ext}", folder / f"b.{ext}"
    simulator.Simulation.from_file(DRIVE, overrides).write([paths[0]])
    summary = simulator.Simulation.from_file(DRIVE, [*overrides, "chunk_pulses=1234"]).write(
        [paths[1]]
    )
    assert summary.points > 1000
    return paths


@pytest.mark.parametrize("ext", ["las", "laz", "npz", "pcd", "ply", "bin"])
def test_files_hold_the_same_points_for_any_chunk_size(ext: str, tmp_path: Path) -> None:
    from simulator.io.read import read

    paths = _write_twice(ext, tmp_path)
    a, b = (read(p) for p in paths)
    _same(b, a, ext)
    if ext in ("pcd", "ply", "bin"):  # and the same bytes (npz: see the Dask test; LAS: below)
        assert paths[0].read_bytes() == paths[1].read_bytes()


@pytest.mark.parametrize("ext", ["las", "laz"])
def test_las_bytes_do_not_depend_on_the_chunk_size(ext: str, tmp_path: Path) -> None:
    """The file written chunk by chunk (header, point records, compression) is the same
    bytes for chunks of 1,234 pulses as for the default."""
    a, b = _write_twice(ext, tmp_path)
    assert a.read_bytes() == b.read_bytes()
    # The extra dimensions' descriptors state the range of all the points (laspy's own
    # running statistics of them do not).
    import laspy

    las = laspy.read(a)
    for struct in las.header.vlrs.get("ExtraBytesVlr")[0].extra_bytes_structs:
        name = struct.name.rstrip(b"\0").decode()
        values = np.asarray(las[name])
        assert (struct.min[0], struct.max[0]) == (values.min(), values.max()), name


def test_dask_with_more_sequences_than_workers_writes_the_same_files(
    tmp_path: Path, dask_cluster: str
) -> None:
    """Three sequences on a Dask cluster of two workers (one worker runs two; the run's
    cluster, :func:`conftest.dask_cluster`): the files,
    byte for byte, of the same dataset run in this process; the range images
    (``range_images: true``) are the frames' own."""
    from simulator.io.npz import read_npz
    from simulator.rangeimage import CHANNELS, range_image

    spec = {
        "seed": 4, "layout": "npz", "range_images": True,
        "groups": [{"name": "street", "generator": "street", "scanner": "vlp-16",
                    "sequences": 3, "frames": 1,
                    "trajectory": {"start": {"position_m": [-20, -1.5, 0]},
                                   "velocity_mps": [8, 0, 0]},
                    "mount": {"position_m": [0, 0, 1.9]}}],
    }  # fmt: skip
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    one = lidar_sim("dataset", path, "-o", tmp_path / "one", "--workers", "1", "-q")
    assert one.returncode == 0, one.stderr
    dask = lidar_sim("dataset", path, "-o", tmp_path / "dask", "--scheduler", dask_cluster, "-q")
    assert dask.returncode == 0, dask.stderr

    def files(root: Path) -> dict[str, Path]:
        return {str(p.relative_to(root)): p for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != "manifest.json"}  # fmt: skip

    a, b = files(tmp_path / "one"), files(tmp_path / "dask")
    frames = sorted(k for k in a if "/frames/" in k)
    assert len(frames) == 3 and a.keys() == b.keys()
    for name in a:
        if name.endswith(".npz"):  # a zip's members carry the time they were written
            with np.load(a[name]) as x, np.load(b[name]) as y:
                assert x.files == y.files, name
                for key in x.files:
                    np.testing.assert_array_equal(x[key], y[key], err_msg=f"{name} {key}")
        else:
            assert a[name].read_bytes() == b[name].read_bytes(), name
    for name in frames:  # the range image is the frame's, channel by channel
        cloud = read_npz(tmp_path / "one" / name)
        image = np.load(tmp_path / "one" / name.replace("/frames/", "/range_images/")
                        .replace(".npz", ".npy"))  # fmt: skip
        want = range_image(cloud, width=image.shape[2])
        assert image.shape == (len(CHANNELS), 16, 1024) and image.dtype == np.float32
        for k, channel in enumerate(CHANNELS):
            np.testing.assert_array_equal(image[k], want[channel], err_msg=channel)
        assert np.sum(image[0] > 0) > 0.5 * len(cloud)  # most points have their pixel
