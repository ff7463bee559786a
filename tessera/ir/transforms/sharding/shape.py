"""Placement rules of the Graph IR ops that move data or work along one axis.

A sharded dim stays sharded wherever the op keeps it whole and in place, so that each
device can apply the op to its own block; otherwise the op needs that dim gathered:

* ``transpose`` permutes the placement with the dims;
* ``reshape`` keeps a sharded dim that survives as an output dim of the same size with
  the same number of elements before it (row-major: its blocks stay contiguous);
* ``broadcast`` keeps the dims it does not stretch; stretched and new dims replicate;
* ``slice`` and ``embed`` keep the dims they leave whole;
* ``softmax``, ``fft`` and ``ifft`` need their axis whole.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.sharding.rules import Mesh, Plan, placement, rule, settled
from tessera.ir.types import Sharding, TensorType


def _keep(s: Sharding, keep: Sequence[bool]) -> Sharding:
    """``s`` with the dims where ``keep`` is false gathered."""
    return s.with_dims(tuple(axes if k else () for axes, k in zip(s.dims, keep)))


@rule(graph_ir.Transpose)
def _transpose(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
               mesh: Mesh) -> Plan:
    s = settled(placement(operands[0], mesh))
    return Plan((s,), (s.with_dims(tuple(s.dims[p] for p in op.perm)),))


def reshape_map(old: Sequence[int], new: Sequence[int]) -> dict[int, int]:
    """For each dim of ``old`` that survives whole in ``new``: its new position."""
    out: dict[int, int] = {}
    for d, n in enumerate(old):
        before = math.prod(old[:d])
        for e, m in enumerate(new):
            if m == n and math.prod(new[:e]) == before:
                out[d] = e
                break
    return out


@rule(graph_ir.Reshape)
def _reshape(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
             mesh: Mesh) -> Plan:
    t = operands[0]
    s = settled(placement(t, mesh))
    moved = reshape_map(t.shape, op.shape)  # type: ignore[arg-type]
    need = _keep(s, [d in moved for d in range(t.rank)])
    dims: list[tuple[str, ...]] = [() for _ in op.shape]
    for d, axes in enumerate(need.dims):
        if axes:
            dims[moved[d]] = axes
    return Plan((need,), (Sharding(mesh, tuple(dims)),))


@rule(graph_ir.Broadcast)
def _broadcast(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
               mesh: Mesh) -> Plan:
    t = operands[0]
    s = settled(placement(t, mesh))
    lead = len(op.shape) - t.rank
    need = _keep(s, [n == op.shape[lead + i] for i, n in enumerate(t.shape)])
    return Plan((need,), (Sharding(mesh, ((),) * lead + need.dims),))


@rule(graph_ir.Slice)
def _slice(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
           mesh: Mesh) -> Plan:
    t = operands[0]
    s = settled(placement(t, mesh))
    whole = [(lo, hi, st) == (0, n, 1) for lo, hi, st, n in
             zip(op.starts, op.stops, op.steps, t.shape)]
    need = _keep(s, whole)
    return Plan((need,), (need,))


@rule(graph_ir.Embed)
def _embed(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
           mesh: Mesh) -> Plan:
    t = operands[0]
    s = settled(placement(t, mesh))
    whole = [(lo, st, n) == (0, 1, m) for lo, st, n, m in
             zip(op.starts, op.steps, t.shape, op.shape)]
    need = _keep(s, whole)
    return Plan((need,), (need,))


@rule(graph_ir.Softmax, graph_ir.Fft, graph_ir.Ifft)
def _along_axis(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                mesh: Mesh) -> Plan:
    t = operands[0]
    s = settled(placement(t, mesh))
    axis = op.axis % max(t.rank, 1)
    need = _keep(s, [d != axis for d in range(t.rank)])
    return Plan((need,), (need,))


__all__ = ["reshape_map"]
