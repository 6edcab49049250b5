"""``lidar-sim bench``: the pipeline against the bare ray cast, or instead a sequence's frame
rate, a large mesh's load, or a dataset's scaling (:func:`simulator.bench.run.bench_text`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import ConfigError
from .common import choose, command

__all__ = ["bench"]

# The options, declared here so that the command reads as what it does.
RevolutionsOption = Annotated[float, typer.Option(help="Survey length in revolutions.")]
DurationOption = Annotated[
    float | None, typer.Option("--duration", help="Survey length in seconds (overrides).")
]
FormatOption = Annotated[
    str, typer.Option("--format", help="Output written during the run: {bench_format}.")
]
ChunkOption = Annotated[int, typer.Option(help="Pulses per chunk.")]
ScaleOption = Annotated[
    float, typer.Option(help="Scene size: 1 is ~1.15 M triangles, 10 is ~10 M.")
]
TrimeshOption = Annotated[
    bool, typer.Option(help="Also cast with trimesh + embreex (pip install embreex).")
]
NumpyOption = Annotated[bool, typer.Option(help="Use the numpy specification, not numba.")]
SamplesOption = Annotated[int, typer.Option(help="Sub-rays per pulse: 1, 7, 19, ...")]
SamplingOption = Annotated[
    str, typer.Option(help="Footprint sampling: {beam_sampling} (full: every sub-ray).")
]
MovingOption = Annotated[bool, typer.Option(help="Drive the sensor at 5 m/s.")]
BareScriptOption = Annotated[
    bool, typer.Option(help="Also time simulator/bench/bare.py on the same rays.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")]
LoadOption = Annotated[
    int, typer.Option(help="Instead: load a mesh file of this many triangles (e.g. 10000000).")
]
SequenceOption = Annotated[
    bool, typer.Option("--sequence", help="Instead: frames/s of a moving sequence (bin).")
]
DatasetOption = Annotated[
    Path | None,
    typer.Option(
        help="Instead: run this dataset spec with 1 and 2 workers and on a two-worker "
        "Dask cluster (scaling)."
    ),
]
WeatherOption = Annotated[
    list[str] | None,
    typer.Option(
        metavar="KIND=VALUE",
        help="Weather: fog=MOR_M, dust=MOR_M, rain=MM_H or snow=MM_H (repeatable).",
    ),
]
SceneOption = Annotated[
    str, typer.Option(help="Scene: {bench_scene} (bench: ~1 M triangles; else generated).")
]
SeedOption = Annotated[int, typer.Option(help="Scene seed.")]
PresetsOption = Annotated[
    str | None,
    typer.Option(
        help="Instead: a table of these presets (all: every spinning and solid-state one, "
        "or NAME,NAME,...) each scanning --scene, e.g. --presets all --scene street "
        "--revolutions 10."
    ),
]
LongDriveOption = Annotated[
    str,
    typer.Option(
        metavar="N,N,...",
        help="Instead: a VLP-16 sequence (bin) driven up and down a street to the largest "
        "count, with the peak memory at each (e.g. 100,1000,10000).",
    ),
]


def _weather(items: list[str]) -> dict[str, dict[str, float]]:
    """``["fog=50", "rain=25"]`` as a ``weather:`` section."""
    keys = {"fog": "visibility_m", "dust": "visibility_m", "rain": "rate_mm_h",
            "snow": "rate_mm_h"}  # fmt: skip
    out: dict[str, dict[str, float]] = {}
    for item in items:
        kind, _, value = item.partition("=")
        kind = kind.strip()
        if kind not in keys:
            raise ConfigError("--weather", kind, f"expected one of {', '.join(keys)}")
        try:
            out[kind] = {keys[kind]: float(value)}
        except ValueError:
            raise ConfigError("--weather", item, "expected KIND=NUMBER, e.g. fog=50") from None
    return out


@command("lidar-sim bench --revolutions 10 --format none", "performance.md")
def bench(
    revolutions: RevolutionsOption = 50.0,
    duration: DurationOption = None,
    output_format: FormatOption = "npz",
    chunk_pulses: ChunkOption = 2**18,
    scene_scale: ScaleOption = 1.0,
    compare_trimesh: TrimeshOption = False,
    numpy: NumpyOption = False,
    beam_samples: SamplesOption = 1,
    beam_sampling: SamplingOption = "full",
    moving: MovingOption = False,
    bare_script: BareScriptOption = True,
    as_json: JsonOption = False,
    load: LoadOption = 0,
    sequence: SequenceOption = False,
    dataset_workers: DatasetOption = None,
    weather: WeatherOption = None,
    scene: SceneOption = "bench",
    seed: SeedOption = 0,
    presets: PresetsOption = None,
    long_drive: LongDriveOption = "",
) -> None:
    """Benchmark the pipeline against the bare ray cast.

    On a ~1 M-triangle scene by default; --sequence, --load, --dataset-workers, --presets
    and --long-drive time or measure something else instead."""
    import subprocess

    from ..bench.run import BenchOptions, bench_text

    if long_drive:
        from ..bench.long_drive import long_drive_text

        say = None if as_json else lambda line: typer.echo(line, err=True)
        typer.echo(long_drive_text(long_drive, as_json=as_json, say=say))
        return

    output_format = choose("--format", output_format.lstrip("."), "bench_format")
    choose("--beam-sampling", beam_sampling, "beam_sampling")
    choose("--scene", scene, "bench_scene")
    options = BenchOptions(
        revolutions=revolutions,
        duration_s=duration,
        output_format=output_format,
        chunk_pulses=chunk_pulses,
        scene_scale=scene_scale,
        compare_trimesh=compare_trimesh,
        use_fast=not numpy,
        beam_samples=beam_samples,
        beam_sampling=beam_sampling,
        moving=moving,
        bare_script=bare_script,
        weather=_weather(weather or []),
        scene_name=scene,
        seed=seed,
    )
    try:
        text = bench_text(options, sequence=sequence, load_triangles=load,
                          dataset_spec=dataset_workers, presets=presets,
                          as_json=as_json)  # fmt: skip
    except subprocess.CalledProcessError as exc:  # --load's process failed
        typer.echo(exc.stderr, err=True)
        raise typer.Exit(exc.returncode) from None
    typer.echo(text)
