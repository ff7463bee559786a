"""The collective ops of placed Graph IR, run on DistTensors.

Each rule takes the op, its operand (a DistTensor, or an exact partial sum still
pending) and the placed result type, and returns the result. The communicating cases
are the core's collectives (:mod:`tessera.mesh_sim.collectives`, rank order, one
rounding); the cases the type rules add are local:

* ``all_reduce`` or ``all_gather`` of a value replicated over the axis: the value
  itself (one contribution, nothing to combine);
* ``reduce_scatter`` of a replicated value and ``shard``: each device keeps its piece
  (:func:`.layout.shard_local`), summing nothing;
* any collective of a pending exact sum only changes its placement
  (:meth:`.pending.Pending.placed`).

Every result is checked against the placement its type says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.dist.core.tensor import PARTIAL, DistTensor
from tessera.errors import InterpretError
from tessera.ir.core import Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.mesh_sim import collectives as core
from tessera.mesh_sim import p2p
from tessera.mesh_sim.spmd.args import sharding_of
from tessera.mesh_sim.spmd.layout import shard_local
from tessera.mesh_sim.spmd.pending import Pending

CollectiveRule = Callable[[Any, DistTensor], DistTensor]


def _partial_over(t: DistTensor, axes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(a for a in axes if t.placement(a) == PARTIAL)


def _all_gather(op: graph_ir.AllGather, t: DistTensor) -> DistTensor:
    return core.all_gather(t, graph_ir.axis_names(op.axis))


def _all_reduce(op: graph_ir.AllReduce, t: DistTensor) -> DistTensor:
    axes = _partial_over(t, graph_ir.axis_names(op.axis))
    return core.all_reduce(t, axes, op=op.op) if axes else t


def _reduce_scatter(op: graph_ir.ReduceScatter, t: DistTensor) -> DistTensor:
    axes = graph_ir.axis_names(op.axis)
    if _partial_over(t, axes):
        return core.reduce_scatter(t, axes, op=op.op, dim=op.dim % t.ndim)
    return shard_local(t, axes, op.dim % t.ndim)


def _all_to_all(op: graph_ir.AllToAll, t: DistTensor) -> DistTensor:
    return core.all_to_all(t, op.axis, op.split_dim % t.ndim, op.concat_dim % t.ndim)


def _broadcast(op: graph_ir.MeshBroadcast, t: DistTensor) -> DistTensor:
    return p2p.broadcast(t, op.axis, op.root)


def _ppermute(op: graph_ir.Ppermute, t: DistTensor) -> DistTensor:
    return p2p.ppermute(t, op.axis, [tuple(p) for p in op.perm])


def _shard(op: graph_ir.Shard, t: DistTensor) -> DistTensor:
    return shard_local(t, graph_ir.axis_names(op.axis), op.dim % t.ndim)


#: collective op class -> its rule on a DistTensor
COLLECTIVES: dict[type, CollectiveRule] = {
    graph_ir.AllGather: _all_gather,
    graph_ir.AllReduce: _all_reduce,
    graph_ir.ReduceScatter: _reduce_scatter,
    graph_ir.AllToAll: _all_to_all,
    graph_ir.MeshBroadcast: _broadcast,
    graph_ir.Ppermute: _ppermute,
    graph_ir.Shard: _shard,
}


def run_collective(op: Op, value: Any, result: TensorType) -> Any:
    """Apply a collective to a DistTensor or a pending exact sum."""
    if isinstance(value, Pending):
        return value.placed(result)
    out = COLLECTIVES[type(op)](op, value)
    got = sharding_of(out)
    if result.sharding is not None and (got.dims, got.partial_axes) != (
            result.sharding.dims, result.sharding.partial_axes):
        raise InterpretError(f"{op.name} gave a value placed {got}, its type says "
                             f"{result.sharding}", hint="this is a simulator bug")
    return out


__all__ = ["COLLECTIVES", "run_collective"]
