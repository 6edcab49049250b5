"""Numba kernels of the pipeline's steps: each mirrors the numpy specification of the same
name and signature, computed in one pass per pulse over every core, without temporaries.

========================  ===============================================
kernel                    specification
========================  ===============================================
``rays.spinning_rays``    :func:`simulator.rays.pattern_rays` (spinning)
``rays.sub_rays``         :func:`simulator.rays.sub_rays`
``hits.evaluate_hits``    :func:`simulator.hits.evaluate_hits`
``echoes.echo_returns``   :func:`simulator.echoes.echo_returns`
``record.record``         :func:`simulator.record.record` (spinning)
``record.pack_las``       :func:`simulator.record.pack_las`
========================  ===============================================

The tests compare each kernel with its specification value for value. Each pulse is
computed on its own from its inputs and its global pulse id, so results do not depend on
threads or chunks. The submodules need numba; :data:`AVAILABLE` says whether it imports
(:func:`simulator.backend.select_backend` falls back to the specification without it).
"""

from __future__ import annotations

try:
    import numba

    # OpenMP first: numba's TBB layer wants a newer TBB than Open3D's, and warns.
    numba.config.THREADING_LAYER_PRIORITY = ["omp", "workqueue", "tbb"]
    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without numba
    AVAILABLE = False

__all__ = ["AVAILABLE"]
