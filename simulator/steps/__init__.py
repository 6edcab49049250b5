"""The numpy specification of each step a chunk of pulses goes through, one small module a
step, mirrored by a kernel module of the same name in :mod:`simulator.kernels`; the
steps are listed once, in :data:`simulator.backend.STEPS`."""
