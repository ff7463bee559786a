"""Interpreter rules of Schedule IR: a scheduled function runs with the graph
interpreter (``interp.graph.run_function``), each ``schedule.kernel`` by running its
region, the fused Graph IR ops it holds.

A kernel's region holds the graph program's own ops, so a scheduled function gives the
graph function's bits in exact mode; the one exception is stochastic rounding, whose
counter (the number of elements produced before an op) also counts kernel results. A
per-device schedule's ``schedule.collective`` moves blocks between devices and is
refused here (it runs on the mesh, :mod:`tessera.mesh_sim.compiled`).
"""

from __future__ import annotations

import numpy as np

from tessera.interp.apply import Apply, rule
from tessera.ir.dialects import schedule as schedule_ops


@rule(schedule_ops.Return, schedule_ops.Yield)
def terminator(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """The operands are the results of the function or kernel."""
    return list(operands)


@rule(schedule_ops.ScheduledKernel)
def kernel(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Run the kernel's region with its arguments bound to the operands."""
    if ap.run_block is None:
        raise ap.fail("needs a function runner", hint="run it through run_function")
    return ap.run_block(ap.regions[0].block, operands)


@rule(schedule_ops.ScheduledCollective)
def collective(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """A collective between the kernels of a per-device schedule moves blocks between
    devices: one device's interpreter cannot run it."""
    raise ap.fail("runs between the devices of a mesh",
                  hint="run the per-device program on its mesh (backend='tile' of the "
                       "placed function, or tessera.mesh_sim.compiled.run_mesh_program)")
