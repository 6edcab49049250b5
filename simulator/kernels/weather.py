"""The returns of pulses through the weather with their echoes formed in a numba kernel
(the specification: :func:`simulator.weather.medium_returns`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from ..echoes import Behind, Returns
from ..hits import HitResults, ReturnModel, Streams
from ..weather import Medium, Particles, medium_entries
from .echoes import surface_returns

__all__ = ["medium_returns"]


def medium_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    medium: Medium,
    particles: list[Particles] | None = None,
    behind: Sequence[Behind] = (),
) -> Returns:
    """:func:`simulator.weather.medium_returns`, value for value: the particles' shadows,
    their entries and the soft targets' echoes as the specification makes them
    (:func:`simulator.weather.medium_entries`), grouped, detected and selected with the
    scene's hits by :func:`simulator.kernels.echoes.surface_returns`."""
    pulse_id = np.asarray(pulse_id, dtype=np.uint64)
    shadow, extra, broad = medium_entries(hits, pulse_id, beam, model, medium, particles, behind)
    return surface_returns(
        results, hits, pulse_id, beam, model, streams,
        behind=behind, shadow=shadow, extra=extra, broad=broad,
    )  # fmt: skip
