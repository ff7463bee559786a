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
work (feeding those reductions, or results stored block by block) and each reduction
reduces every reduced loop its operand runs along. Work along the rows that reads a
reduction's result (a norm's ``x - mean``) runs in a later pass over the blocks, which
costs another read of the rows: such kernels walk blocks only when their rows do not
fit one program or exceed :data:`WHOLE_ROW_TERMS`. Matmuls, softmaxes and maxima keep
their own strategies.
"""

from __future__ import annotations

import dataclasses
import math

from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.schedule.space import IterationSpace
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: the most terms one program's block of a carried reduction holds (32 per thread of a
#: 128-thread program)
BLOCK_TERMS = 4096
#: the most terms a row of a kernel of several passes (a norm) holds whole in one
#: program, where the target's capacity allows (128 per thread): beyond, its passes
#: read the rows again block by block rather than hold them in registers
WHOLE_ROW_TERMS = 16384
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


@dataclasses.dataclass
class Passes:
    """How a kernel walks its reduced rows in blocks (empty ``loops``: it does not)."""

    loops: set[int]                 #: the loops walked in blocks
    of: dict[Instr, int]            #: each instruction's pass over the blocks
    count: int                      #: passes over the blocks
    keyed: list[Instr]              #: the instructions computed per block, in order
    reductions: list[Instr]         #: the carried reductions among them
    args: set[Value]                #: the kernel's operands read per block


_NONE = Passes(set(), {}, 0, [], [], set())


def block_passes(instr: Instr, space: IterationSpace, walked: set[int] | None = None
                 ) -> Passes:
    """How the kernel ``instr`` may walk in blocks carrying exact sums its sequential
    loops that no matmul contracts (``walked``: only those, the loops actually cut):
    the pass over the blocks of each instruction of its region; no loops where it does
    not qualify.

    Pass 0 computes what needs no reduction; a reduction computed in pass ``p`` is read
    from pass ``p + 1`` on, so a norm (its mean, then its variance, then the values)
    takes three passes, recomputing its elementwise work from the loaded blocks."""
    block = instr.regions[0].block
    loops = {k for k, kind in enumerate(space.kinds) if kind == "seq"} - space.contracted
    if walked is not None:
        loops &= walked
    if not loops or any(isinstance(i.op, (graph_ops.MatMul, graph_ops.Softmax))
                        for i in block.instrs):
        return _NONE

    def along(v: Value) -> bool:
        t = v.type
        return isinstance(t, TensorType) and any(space.loop_of.get((v, k)) in loops
                                                 for k in range(t.rank))

    ready: dict[Value, int] = {}  # the first pass in which a value can be read
    out = Passes(loops, {}, 1, [], [], {a for a in block.args if along(a)})
    for inner in block.instrs:
        if inner.op.terminator:
            continue
        p = max((ready.get(v, 0) for v in inner.operands), default=0)
        keyed_in = any(along(v) for v in inner.operands)
        keyed_out = [along(r) for r in inner.results]
        out.of[inner] = p
        if keyed_in or any(keyed_out):
            out.keyed.append(inner)
            out.count = max(out.count, p + 1)
        if keyed_in and not any(keyed_out):  # a reduction over the rows
            x = inner.operands[0]
            spans = {a for a in range(x.type.rank)  # type: ignore[attr-defined]
                     if space.loop_of.get((x, a)) in loops}
            if not _carried(inner) or not spans <= _reduced_axes(inner):
                return _NONE
            ready.update((r, p + 1) for r in inner.results)
            out.reductions.append(inner)
            continue
        if keyed_in and not all(keyed_out):
            return _NONE  # (a reshape or index map that leaves the loops)
        ready.update((r, p) for r in inner.results)
    return out if out.reductions else _NONE


def walk_in_blocks(instr: Instr, space: IterationSpace, tile: list[int]) -> set[int]:
    """The loops of :func:`block_passes` when the kernel should walk them in blocks:
    always when its reductions read nothing reduced (blocks then cost one pass over the
    rows, as holding them whole does); for a kernel of several passes, when the target
    already cut its rows or a row holds more than :data:`WHOLE_ROW_TERMS` terms."""
    passes = block_passes(instr, space)
    loops = passes.loops
    if passes.count <= 1:
        return loops
    cut = any(tile[k] < space.extents[k] for k in loops)
    return loops if cut or math.prod(tile[k] for k in loops) > WHOLE_ROW_TERMS else set()


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


__all__ = ["BLOCK_TERMS", "MSE_TERMS", "WHOLE_ROW_TERMS", "Passes", "block_passes",
           "block_weight", "cap_blocks", "walk_in_blocks"]
