"""Which kernels walk their reduced rows in blocks carrying exact accumulators.

A kernel whose reductions are float sums, means or mean squared errors can visit the
rows it reduces block by block inside one program: each block's terms are added to an
exact accumulator (``tile.reduce`` with an accumulator operand), rounded once after the
last block. The sum is exact, so neither the blocks' size nor their order can change a
bit (the DECISIONS ruling: a schedule transform is legal only when it cannot change
results). A long row then costs one block of registers instead of the whole row: a
program holds at most :data:`BLOCK_TERMS` terms (a mean squared error makes
:data:`MSE_TERMS` of each element).

The kernel qualifies when everything computed along the reduced loops is elementwise
work feeding those reductions (or results stored block by block), each reduction
reduces every reduced loop its operand runs along, and nothing along them reads a
reduction's result. Matmuls, softmaxes and maxima keep their own strategies.
"""

from __future__ import annotations

import math

from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.schedule.space import IterationSpace
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: the most terms one program's block of a carried reduction holds (32 per thread of a
#: 128-thread program)
BLOCK_TERMS = 4096
#: terms per element of a mean squared error (tessera.ir.transforms.to_tile.loss)
MSE_TERMS = 16


def _float32(v: Value) -> bool:
    t = v.type
    if not isinstance(t, TensorType):
        return False
    fmt = storage_of(t.element)
    return fmt.kind == "float" and fmt.bits <= 32


def _carried(inner: Instr) -> bool:
    """Whether ``inner`` is a reduction that can carry an exact accumulator."""
    op = inner.op
    if isinstance(op, graph_ops.Mse):
        return all(_float32(v) for v in inner.operands)
    if isinstance(op, (graph_ops.Sum, graph_ops.Mean)):
        (x,) = inner.operands
        return _float32(x) and storage_of(x.type.element) == \
            storage_of(inner.results[0].type.element)  # type: ignore[attr-defined]
    return False


def _reduced_axes(inner: Instr) -> set[int]:
    x = inner.operands[0]
    rank = x.type.rank  # type: ignore[attr-defined]
    if isinstance(inner.op, graph_ops.Mse):
        return set(range(rank))
    return set(inner.op.reduced_axes(rank))  # type: ignore[attr-defined]


def blocked_loops(instr: Instr, space: IterationSpace) -> set[int]:
    """The loops the kernel ``instr`` may walk in blocks carrying exact sums (its
    sequential loops that no matmul contracts), or none where it does not qualify."""
    block = instr.regions[0].block
    loops = {k for k, kind in enumerate(space.kinds) if kind == "seq"} - space.contracted
    if not loops or any(isinstance(i.op, (graph_ops.MatMul, graph_ops.Softmax))
                        for i in block.instrs):
        return set()

    def along(v: Value) -> bool:
        t = v.type
        return isinstance(t, TensorType) and any(space.loop_of.get((v, k)) in loops
                                                 for k in range(t.rank))

    reduced: set[Value] = set()  # results of reductions, and what they reach
    found = False
    for inner in block.instrs:
        if inner.op.terminator:
            continue
        keyed = [v for v in inner.operands if along(v)]
        if any(v in reduced for v in inner.operands):
            if keyed or any(along(r) for r in inner.results):
                return set()  # a value along the loops reads a reduction's result
            reduced.update(inner.results)
            continue
        if not keyed:
            continue
        if isinstance(inner.op, graph_ops.Reduce) or isinstance(inner.op, graph_ops.Mse):
            axes = _reduced_axes(inner)
            x = inner.operands[0]
            spans = {a for a in range(x.type.rank)  # type: ignore[attr-defined]
                     if space.loop_of.get((x, a)) in loops}
            if not _carried(inner) or not spans <= axes:
                return set()
            reduced.update(inner.results)
            found = True
        elif not all(along(r) for r in inner.results):
            return set()  # (a reshape or index map that leaves the loops)
    return loops if found else set()


def block_weight(instr: Instr) -> int:
    """Terms per element of the kernel's carried reductions (16 with an mse)."""
    block = instr.regions[0].block
    return MSE_TERMS if any(isinstance(i.op, graph_ops.Mse) for i in block.instrs) else 1


def cap_blocks(tile: list[int], loops: set[int], weight: int) -> None:
    """Halve the tiles of ``loops``, outermost first (a block of whole inner rows reads
    memory in long runs, and fewer loops nest), until a block holds at most
    :data:`BLOCK_TERMS` terms."""
    while weight * math.prod(tile[k] for k in loops) > BLOCK_TERMS:
        k = min((j for j in loops if tile[j] > 1), default=None)
        if k is None:
            return
        tile[k] //= 2


__all__ = ["BLOCK_TERMS", "MSE_TERMS", "block_weight", "blocked_loops", "cap_blocks"]
