"""Fusions: one step for an op and the producer of one of its operands.

The compiler (:meth:`tessera.interp.tile.exec.Compiler.body`) asks :func:`fusions` which
consumers of a block run together with their producer; the producer's own step is then
left out. Each kind is a fast path of its own: ``fused_mma_add``, ``fused_mma_scale``
and ``fused_store``.
"""

from __future__ import annotations

import numpy as np

from tessera.interp.tile.exec import Compiler, Frame, Step
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.memory import globals as global_mem
from tessera.interp.tile.memory.access import broadcast_shape
from tessera.interp.tile.numeric import F32, num
from tessera.interp.tile.rules import BINARY_UFUNCS, IMPLS, mma_rule
from tessera.ir.core import Block, Instr, Value, walk
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType

#: producer op classes whose result a plain global store may compute in place
STORE_PRODUCERS = (tile_compute.Add, tile_compute.Sub, tile_compute.Mul, tile_compute.Div)


@register("fused_mma_add")
def mma_add(c: Compiler, add: Instr, mma: Instr) -> Step:
    """``acc + mma(a, b)`` as one ``mma(a, b, acc)``. Proof: the ``mma`` rule with an
    accumulator adds the exact float64 products' sum to the accumulator widened exactly
    (:mod:`tessera.interp.tile.mma`), which is what ``tile.add`` of the accumulator and
    the wide product computes (an add keeps an ``mma`` result wide, see
    ``rules.WIDE_OK``); in fast mode both are one float32 ``sgemm`` plus one float32
    add in the same order. The product is used only by the add (``fusions``), neither op
    reports, so the bits and reports are the reference's."""
    other = add.operands[1] if add.operands[0] is mma.results[0] else add.operands[0]
    impl = IMPLS[tile_compute.Mma](Instr(mma.op, [*mma.operands, other], add.results, [], mma.loc),
                        c.fast)
    a, b, acc = (c.slot(v) for v in (*mma.operands, other))
    out = c.slot(add.results[0])
    REGISTRY["fused_mma_add"].taken += 1

    def step(fr: Frame) -> None:
        r = fr.regs
        r[out] = impl(r[a], r[b], r[acc])
    return step


def row_reduced(instr: Instr) -> bool:
    """Whether ``instr``'s result is reduced along its rows (``tile.reduce`` over the
    last axis) in its block: a product laid out by columns serves that faster."""
    block = instr.parent
    result = instr.results[0]
    rank = result.type.rank if isinstance(result.type, TensorType) else 0
    return (
        rank >= 2
        and block is not None
        and any(
            isinstance(i.op, tile_compute.Reduce)
            and i.operands[0] is result
            and i.op.axis % rank == rank - 1
            for i in block.instrs
        )
    )


@register("fused_mma_scale")
def mma_scale(c: Compiler, mul: Instr, mma: Instr) -> Step:
    """``mma(a, b) * y``. Proof: the product is computed by the same ``mma`` rule (laid
    out by columns when the result is reduced along rows: the same values in another
    memory order) and, when it and ``y`` are float32 and ``y`` broadcasts to it, the
    multiply writes into the product, a fresh array nothing else holds (the product is
    used only here, ``fusions``): the same float32 multiplications; otherwise the
    ``tile.mul`` rule runs on it. Neither op reports."""
    first = mul.operands[0] is mma.results[0]  # mma(a, b) * y, not y * mma(a, b)
    other = mul.operands[1] if first else mul.operands[0]
    product = mma_rule(mma, c.fast, columns=row_reduced(mul))
    scale = IMPLS[tile_compute.Mul](mul, c.fast)
    a, b, y = (c.slot(v) for v in (*mma.operands, other))
    out = c.slot(mul.results[0])
    REGISTRY["fused_mma_scale"].taken += 1

    def step(fr: Frame) -> None:
        r = fr.regs
        p, v = product(r[a], r[b]), r[y]
        if p.dtype == F32 and getattr(v, "dtype", None) == F32 and \
                broadcast_shape([p.shape, v.shape]) == p.shape:
            r[out] = np.multiply(p, v, out=p)
        else:
            r[out] = scale(p, v) if first else scale(v, p)
    return step


@register("fused_store")
def store_computed(c: Compiler, store: Instr, producer: Instr) -> Step:
    """A global ``tile.store`` of ``x <op> y``. Proof: when both operands already have
    the memory's dtype and the result needs no rounding (a native float), the ufunc
    computes the values the ``+ - * /`` rule would and writes them straight into the
    destination (:func:`~tessera.interp.tile.memory.globals.store_computed`) after the
    same write checks and the same save for a failed launch; ufuncs buffer when an
    operand overlaps the destination, so reads see the old values as in the reference.
    Otherwise the two ops run as in the reference."""
    impl = IMPLS[type(producer.op)](producer, c.fast)
    fn = BINARY_UFUNCS[type(producer.op)]
    n = num(producer.results[0].type.element)  # type: ignore[union-attr]
    direct = n.native and n.kind == "float"
    dst, a, b = c.slot(store.operands[0]), *(c.slot(v) for v in producer.operands)
    loc = store.loc
    last = store is c.last  # (set only while ``last_store`` is enabled)
    REGISTRY["fused_store"].taken += 1
    if last:
        REGISTRY["last_store"].taken += 1

    def step(fr: Frame) -> None:
        regs = fr.regs
        ref, x, y = regs[dst], regs[a], regs[b]
        dt = ref.mem.array.dtype
        if direct and getattr(x, "dtype", None) == dt and getattr(y, "dtype", None) == dt:
            global_mem.store_computed(fr.st, fr.ctx, loc, ref, fn, x, y, last=last)
        else:
            global_mem.store(fr.st, fr.ctx, loc, ref, impl(x, y), last=last)
    return step


#: consumer op class -> (fast path name, factory of the step that also runs the producer)
FUSED = {
    tile_compute.Add: ("fused_mma_add", mma_add),
    tile_compute.Mul: ("fused_mma_scale", mma_scale),
    tile_memory.Store: ("fused_store", store_computed),
}


def fusions(block: Block, enabled: frozenset[str] | None = None,
            fast: bool = False) -> dict[Instr, Instr]:
    """Consumers in ``block`` mapped to the producer they run with, each producer used
    only there: ``tile.add`` or ``tile.mul`` of an accumulator-free ``tile.mma`` (an
    exact one in ``fast`` mode only, where it is an ordinary one), and a global
    ``tile.store`` of an elementwise ``+ - * /`` (each kind while its fast path is
    ``enabled``; all of them when ``enabled`` is None)."""
    def on(name: str) -> bool:
        return enabled is None or name in enabled
    counts: dict[Value, int] = {}
    for instr in walk(block):
        for v in instr.operands:
            counts[v] = counts.get(v, 0) + 1
    producers = {i.results[0]: i for i in block.instrs
                 if (isinstance(i.op, tile_compute.Mma) and len(i.operands) == 2
                     and (fast or not i.op.exact))  # (exact: not float64 arithmetic)
                 or isinstance(i.op, STORE_PRODUCERS)}
    found: dict[Instr, Instr] = {}
    taken: set[Instr] = set()
    for instr in block.instrs:
        if isinstance(instr.op, (tile_compute.Add, tile_compute.Mul)) and on(
            FUSED[type(instr.op)][0]
        ):
            candidates = [p for p in map(producers.get, instr.operands)
                          if p is not None and isinstance(p.op, tile_compute.Mma)]
        elif (
            type(instr.op) is tile_memory.Store
            and isinstance(instr.operands[0].type, MemRefType)
            and instr.operands[0].type.space == "global"
            and on("fused_store")
        ):
            p = producers.get(instr.operands[1])
            candidates = [p] if p is not None and not isinstance(p.op, tile_compute.Mma) else []
        else:
            continue
        for p in candidates:
            # (a producer fused with its own producer is not a step that computes its
            # operands: ``m = m + mma(a, b)`` stored at once keeps the add's own step)
            if counts.get(p.results[0]) == 1 and p not in taken and p not in found:
                found[instr] = p
                taken.add(p)
                break
    return found


def fused_step(c: Compiler, consumer: Instr, producer: Instr) -> Step:
    """The one step of ``consumer`` and its ``producer``."""
    return FUSED[type(consumer.op)][1](c, consumer, producer)


__all__ = ["FUSED", "STORE_PRODUCERS", "fused_step", "fusions", "mma_add", "mma_scale",
           "row_reduced", "store_computed"]
