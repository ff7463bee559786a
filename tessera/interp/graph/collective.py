"""Interpreter rules of the collective Graph IR ops on one device.

A program whose types carry no placement runs on one device: every mesh axis has size
one, so every collective is the identity (a ``ppermute`` keeps the block only when it
sends rank 0 to itself). Placed programs run on a simulated mesh instead
(:mod:`tessera.mesh_sim.spmd`), and ``index_launch`` bodies combine the values of all
indices (:mod:`tessera.dist.launch`).
"""

from __future__ import annotations

import numpy as np

from tessera.interp.apply import Apply, rule
from tessera.ir.dialects import graph as graph_ir


@rule(
    graph_ir.AllGather,
    graph_ir.ReduceScatter,
    graph_ir.AllReduce,
    graph_ir.AllToAll,
    graph_ir.MeshBroadcast,
    graph_ir.Shard,
)
def identity(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """On one device a collective moves nothing and combines one contribution."""
    return [operands[0]]


@rule(graph_ir.Ppermute)
def ppermute(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Rank 0 keeps its block when the permutation sends it to itself, else zeros."""
    ranks = {r for pair in ap.op.perm for r in pair}
    if ranks - {0}:
        raise ap.fail(f"permutes ranks {sorted(ranks)} of axis {ap.op.axis!r}, which has "
                      "one device here", hint="run the program on a mesh (pass DistTensors) "
                                              "or inside ts.index_launch")
    x = operands[0]
    return [x if (0, 0) in ap.op.perm else np.zeros_like(x)]
