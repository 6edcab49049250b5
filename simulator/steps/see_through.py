"""The returns of a chunk cast one ray a pulse through see-through surfaces: the echoes of
every surface of a pulse whose ray passed one, the single ray's return of the others (the
numba kernel: :func:`simulator.kernels.see_through.see_through_returns`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from ..beam import BeamPattern
from ..chunk import Hits
from .echoes import echo_returns
from .hits import HitResults, ReturnModel, Streams
from .merge import merge_returns
from .returns import Returns, single_returns
from .transmittance import Behind

__all__ = ["see_through_returns"]


def see_through_returns(
    results: HitResults,
    hits: Hits,
    pulse_id: NDArray[np.uint64],
    beam: BeamPattern,
    model: ReturnModel,
    streams: Streams,
    behind: Sequence[Behind] = (),
    *,
    diagnostics: bool = False,
) -> Returns:
    """The returns of a chunk cast one ray a pulse, with the surfaces behind see-through
    ones (the specification): a pulse whose ray passed a see-through surface and met
    another reports the echoes of all its surfaces (:func:`echo_returns`), any other
    pulse its one hit, if detected (:func:`single_returns`).

    Parameters
    ----------
    results, hits
        The per-hit model (every field) and the hits of the chunk's rays (ray ``p`` is
        pulse ``p``).
    pulse_id, beam, model, streams
        As :func:`echo_returns` (``beam`` of one ray a pulse).
    behind : sequence of Behind
        The surfaces behind see-through ones, a layer each (:func:`layers_behind`).
    diagnostics : bool
        Also report the diagnostic fields.

    Returns
    -------
    Returns
    """
    if beam.samples != 1:
        raise ValueError(f"see_through_returns is for one ray a pulse, not {beam.samples}")
    single = single_returns(results, hits, diagnostics=diagnostics)
    if not behind:
        return single
    pulses = behind[0].rays  # one ray a pulse: the pulses that passed one
    touched = np.zeros(len(hits.range_m), dtype=bool)
    touched[pulses] = True
    echoes = echo_returns(results, hits, pulse_id, beam, model, streams, behind, pulses)
    return merge_returns(single, ~touched[single.pulse], echoes, pulses, diagnostics=diagnostics)
