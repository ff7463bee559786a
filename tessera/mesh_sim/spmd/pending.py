"""Exact partial sums: a contraction kept unevaluated until a collective completes it.

In exact mode a value that is partial over an axis (a matmul whose contraction dim is
sharded, a sum or mean over a sharded dim, an mse of sharded operands) is not rounded
per device. It stays a :class:`Pending`: the op, its operands and the value's current
placement. A collective only changes that placement. Once no summed axis is left, the
op is evaluated once, exactly and rounded once, on operands laid out for the final
placement: the value every device would hold if the partial sums were exchanged and
added without rounding. Its bits are therefore those of the same op on one device (the
exact rules do not depend on how a sum is split), whatever the rank order.

Fast mode never makes a Pending: each device rounds its summand and the collective adds
the summands in rank order in the accumulation format (``reduce_in_order``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.sharding import DimAxes
from tessera.dist.core.tensor import DistTensor
from tessera.errors import Loc
from tessera.ir.core import Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.mesh_sim.spmd.layout import relayout_dims

Needs = Callable[[Any, Sequence[TensorType], DimAxes], list[DimAxes]]


def _matmul(op: graph_ir.MatMul, types: Sequence[TensorType], out: DimAxes) -> list[DimAxes]:
    *batch, m, n = out
    return [(*batch, m, ()), (*batch, (), n)]


def _reduction(op: graph_ir.Reduce, types: Sequence[TensorType], out: DimAxes) -> list[DimAxes]:
    rank = types[0].rank
    reduced = set(op.reduced_axes(rank)) if rank else set()
    kept = iter(out)
    dims = []
    for d in range(rank):
        if op.keepdims:
            axes = next(kept)
            dims.append(() if d in reduced else axes)
        else:
            dims.append(() if d in reduced else next(kept))
    return [tuple(dims)]


def evaluable(op: Op, types: Sequence[TensorType], out: DimAxes) -> DimAxes:
    """``out`` with the dims that a reduction with keepdims reduced made whole: the
    result layouts an op can be evaluated in blockwise."""
    if not isinstance(op, graph_ir.Reduce) or not op.keepdims or not types[0].rank:
        return out
    reduced = set(op.reduced_axes(types[0].rank))
    return tuple(() if d in reduced else axes for d, axes in enumerate(out))


def _mse(op: graph_ir.Mse, types: Sequence[TensorType], out: DimAxes) -> list[DimAxes]:
    return [((),) * types[0].rank] * 2


#: op class -> the operand layouts that give a result laid out ``out`` with nothing
#: partial (every contracted or reduced dim whole)
OPERAND_LAYOUTS: dict[type, Needs] = {graph_ir.MatMul: _matmul, graph_ir.Sum: _reduction,
                                      graph_ir.Mean: _reduction, graph_ir.Mse: _mse}


@dataclass
class Pending:
    """An exact partial sum: ``op`` on ``operands``, placed as ``type`` says."""

    op: Op
    operands: list[DistTensor]
    in_types: list[TensorType]
    type: TensorType
    mesh: Mesh
    loc: Loc | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.type.shape)

    def placed(self, t: TensorType) -> Any:
        """The value placed as ``t``: still pending while summed axes remain, else
        evaluated (a DistTensor)."""
        assert t.sharding is not None
        if any(kind == "sum" for _, kind in t.sharding.partial):
            return Pending(self.op, self.operands, self.in_types, t, self.mesh, self.loc)
        from tessera.mesh_sim.spmd.local import run_local

        dims = t.sharding.dims
        whole = evaluable(self.op, self.in_types, dims)
        if whole != dims:
            # A dim reduced with keepdims has size 1 and may be split (into one piece
            # and empty ones) by a later reduce_scatter; no operand layout gives such
            # blocks. Evaluate it whole, then each device keeps its piece.
            value = self.placed(t.placed(t.sharding.with_dims(whole)))
            return relayout_dims(value, dims)
        needs = OPERAND_LAYOUTS[type(self.op)](self.op, self.in_types, dims)
        operands = [relayout_dims(o, d) for o, d in zip(self.operands, needs)]
        return run_local(self.op, operands, self.in_types, t, self.mesh, "exact",
                         loc=self.loc)


__all__ = ["OPERAND_LAYOUTS", "Pending", "evaluable"]
