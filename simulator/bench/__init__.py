"""``lidar-sim bench``: the pipeline against the bare cast (:mod:`.run`), on the
benchmark's million-triangle scene (:mod:`.scene`), beside a plain cast-and-save script
(:mod:`.bare`); or instead a large mesh's load (:mod:`.load`), a sequence's frame rate or a
dataset's scaling (:mod:`.scaling`), or a table of every preset on one scene
(:mod:`.presets`)."""

from .load import format_load, run_load_bench, run_load_bench_apart, write_load_mesh
from .presets import format_preset_table, ground_presets, run_preset_table
from .run import BenchOptions, BenchResult, bench_text, format_result, run_bench
from .scaling import (
    format_dataset_scaling,
    format_sequence,
    run_dataset_scaling,
    run_sequence_bench,
)

__all__ = [
    "BenchOptions",
    "BenchResult",
    "bench_text",
    "format_dataset_scaling",
    "format_load",
    "format_preset_table",
    "format_result",
    "format_sequence",
    "ground_presets",
    "run_bench",
    "run_dataset_scaling",
    "run_load_bench",
    "run_load_bench_apart",
    "run_preset_table",
    "run_sequence_bench",
    "write_load_mesh",
]
