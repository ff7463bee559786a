"""Lowering of row reductions (``row_sum``, ``row_max``) of register tensors.

**Reduction order.** A float ``row_sum`` is the tile interpreter's pairwise tree in
float64 over adjacent elements (:mod:`tessera.interp.tile.rules`), which a CTA
reproduces exactly: each thread sums its contiguous chunk as a tree, ``shfl.bfly``
with offsets 1, 2, 4... joins the chunks of neighbouring lanes (IEEE addition is
commutative, so every lane gets the same bits), and what remains — chunks in other
registers, or row segments of other warps, exchanged through shared memory — is
summed as a tree in ascending order. ``row_max`` uses ``max.NaN`` (NaN propagates,
as ``np.max``); the row max of f64 tiles (a softmax's) takes ``max.f64`` with NaN
propagated by a select (:func:`tessera.lower.arith.mathlib64.emit_max_nan_f64`).

Of an accumulator-layout tile, whose row a thread holds in 2-column pieces of every
8-column chunk, the checked sum keeps the tree (per chunk a pair and a 2-step
butterfly, then a tree over the chunks); ``row_max`` and fast mode's f32 sum (kind
``fsum``, docs/ptx-backend.md "Fast-math mode") reduce the thread's own values first
and then take one 2-step butterfly per row (FlashAttention-3's order): 2 shuffles per
row instead of 2 per chunk. For ``max`` that is the same bits in every order:
``max.NaN`` gives the canonical NaN if any operand is one and orders -0.0 below +0.0,
so it is associative and commutative (:func:`tessera.interp.target.numeric.fmin_fmax`).
A fast ``fsum`` changes order, and stays within the ``gamma_K`` bound of any order.
"""

from __future__ import annotations

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.lower.arith.mathlib import (
    emit_shfl_max_f32,
    emit_shfl_sum_f64,
    emit_tree_max_f32,
    emit_tree_sum_f64,
)
from tessera.lower.arith.mathlib64 import emit_max_nan_f64, emit_shfl_max_f64
from tessera.lower.core import Lowerer, rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.fastmath import emit_shfl_sum_f32, emit_tree_sum_f32
from tessera.lower.layout import Acc, Blocked
from tessera.lower.rules.scalar import f32_rounded
from tessera.lower.rules.tensor import chunk_index, materialize
from tessera.lower.values import Dist, Lowered


def _combine(e: TargetEmitter, kind: str, a: Value, b: Value) -> Value:
    if kind == "max64":
        return emit_max_nan_f64(e, a, b)
    if kind == "fsum":
        return e.add(a, b, "f32")
    return e.add(a, b, "f64") if kind == "sum" else e.bin("max", a, b, "f32", "NaN")


def _tree(e: TargetEmitter, kind: str, vals: list[Value]) -> Value:
    if kind == "max64":  # max is exact: the tree's shape only picks a NaN or a zero
        while len(vals) > 1:
            vals = [_combine(e, kind, vals[i], vals[i + 1]) if i + 1 < len(vals) else vals[i]
                    for i in range(0, len(vals), 2)]
        return vals[0]
    if kind == "fsum":
        return emit_tree_sum_f32(e, vals)
    return emit_tree_sum_f64(e, vals) if kind == "sum" else emit_tree_max_f32(e, vals)


def _shfl(e: TargetEmitter, kind: str, v: Value, offsets: list[int]) -> Value:
    if not offsets:
        return v
    if kind == "fsum":
        return emit_shfl_sum_f32(e, v, offsets)
    if kind == "max64":
        return emit_shfl_max_f64(e, v, offsets)
    return (emit_shfl_sum_f64 if kind == "sum" else emit_shfl_max_f32)(e, v, offsets)


def _prep(e: TargetEmitter, kind: str, x: Value) -> Value:
    return e.cvt(x, "f64", "f32") if kind == "sum" else x


def _finish(e: TargetEmitter, kind: str, x: Value) -> Value:
    return e.cvt(x, "f32", "f64", "rn") if kind == "sum" else x


def reduce_acc(e: TargetEmitter, kind: str, x: Dist) -> list[Value]:
    """Row statistics of an accumulator-layout tile, in the Row layout's order."""
    layout = x.layout
    assert isinstance(layout, Acc)
    half = layout.cols // 2
    out = []
    for b in range(layout.rows // 64):
        for h in range(2):
            regs = [x.regs[b * half + 4 * j + 2 * h + i]
                    for j in range(layout.cols // 8) for i in range(2)]
            if kind != "sum":  # any order: the thread's own values, then one butterfly
                out.append(_shfl(e, kind, _tree(e, kind, regs), [1, 2]))
                continue
            parts = []  # the tile tree: 8-column chunks (pair, butterfly), then a tree
            for j in range(0, len(regs), 2):
                pair = _combine(e, kind, _prep(e, kind, regs[j]), _prep(e, kind, regs[j + 1]))
                parts.append(_shfl(e, kind, pair, [1, 2]))
            out.append(_finish(e, kind, _tree(e, kind, parts)))
    return out


def reduce_blocked(low: Lowerer, kind: str, x: Dist) -> list[Value]:
    """Row statistics of a blocked tile, one per chunk register (BRow order)."""
    layout = x.layout
    assert isinstance(layout, Blocked) and len(layout.shape) == 2
    e = low.em
    rows, cols = layout.shape
    per_row = cols // layout.vec
    if per_row & (per_row - 1) or 128 % min(per_row, 128):
        raise UnsupportedError(f"row reductions of {cols} columns are not lowered",
                               hint="use a power-of-two row length", loc=e.loc)
    chunk = []
    for j in range(layout.per_thread):
        vals = [_prep(e, kind, x.regs[j * layout.vec + c]) for c in range(layout.vec)]
        chunk.append(_shfl(e, kind, _tree(e, kind, vals), _offsets(min(per_row, 32))))
    if per_row <= 32:
        return [_finish(e, kind, v) for v in chunk]
    segs = per_row // 32
    size = 8 if kind in ("sum", "max64") else 4
    base = low.shared_buffer("red", rows * segs * size, 8)
    t = "f64" if kind in ("sum", "max64") else "f32"
    lane0 = e.setp("eq", e.bin("and", e.sreg("tid.x"), e.const(31, "u32"), "u32"),
                   e.const(0, "u32"), "u32")
    for j, v in enumerate(chunk):
        seg = e.bin("div", chunk_index(e, layout, j), e.const(32 * layout.vec, "s32"), "s32")
        slot = e.add(base, e.cvt(e.mul(seg, e.const(size, "s32"), "s32"), "u32", "s32"), "u32")
        ok = lane0 if (j + 1) * 128 <= layout.chunks else e.bin("and", lane0, e.setp(
            "lt", seg, e.const(rows * segs, "s32"), "s32"), "pred")
        e.if_(ok, lambda inner, slot=slot, v=v: inner.st("shared", slot, v, t))
    e.bar()
    out = []
    for j in range(layout.per_thread):
        row = e.bin("div", chunk_index(e, layout, j), e.const(cols, "s32"), "s32")
        row = e.bin("min", row, e.const(rows - 1, "s32"), "s32")
        first = e.add(base, e.cvt(e.mul(row, e.const(segs * size, "s32"), "s32"), "u32", "s32"),
                      "u32")
        out.append(_finish(e, kind, _tree(e, kind, [e.ld("shared", first, t, offset=s * size)
                                                   for s in range(segs)])))
    e.bar()  # the scratch may be rewritten by the next reduction
    return out


def _rounded(e: TargetEmitter, x: Dist) -> Dist:
    """``x`` with each register that may hold a wide ``mma`` accumulator rounded to f32:
    the tile interpreter's ``row_sum`` sums the f32 values, where the Target IR
    interpreter's ``cvt.f64.f32`` and ``add`` of a wide register would sum the exact
    ones. (``row_max`` needs no rounding: the max of the rounded values is the rounded
    max.)"""
    return Dist(x.layout, [f32_rounded(e, r) for r in x.regs], x.type)


def _offsets(n: int) -> list[int]:
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out


@rule(tile_compute.Reduce)
def _reduce(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_compute.Reduce)
    src = instr.operands[0]
    x = materialize(low, args[0], low.layouts.get(src))
    last = op.axis % src.type.rank == src.type.rank - 1  # type: ignore[attr-defined]
    if isinstance(x, Dist) and x.type == "f64" and op.kind == "max" and last and \
            isinstance(x.layout, Blocked):  # exact: the row max of f64 tiles (softmax)
        per_row = x.layout.shape[-1] // x.layout.vec
        if len(x.layout.shape) != 2 or per_row & (per_row - 1) or 128 % min(per_row, 128):
            from tessera.lower.exact.rowmax import row_max_f64  # any row length

            return row_max_f64(low, instr, x)
        return [Dist(low.layouts[instr.results[0]], reduce_blocked(low, "max64", x), "f64")]
    out = low.layouts.get(instr.results[0])
    if out is None:  # a reduction to one value of a whole tile has no register layout
        raise UnsupportedError(f"tile.reduce {op.kind} of a whole {src.type} tile to one "
                               "value is not lowered", loc=instr.loc,
                               hint="reduce over the last axis (row_sum, row_max) and "
                               "combine the rows, or reduce in shared memory")
    if isinstance(x, Dist) and op.kind == "max" and src.type.shape[op.axis] == 1 and \
            x.layout == out:  # a max over one element: each register already holds it
        return [Dist(out, x.regs, x.type)]
    if not isinstance(x, Dist) or x.type != "f32" or op.kind not in ("sum", "max") or \
            not last:
        raise UnsupportedError(f"tile.reduce {op.kind} over axis {op.axis} is not lowered",
                               hint="row_sum and row_max of f32 tiles are", loc=instr.loc)
    kind = "fsum" if op.kind == "sum" and low.mode == "fast" else op.kind  # f32 tree
    if op.kind == "sum":  # a wide accumulator is rounded to f32 before it is summed
        x = _rounded(low.em, x)
    if isinstance(x.layout, Acc):
        return [Dist(out, reduce_acc(low.em, kind, x), "f32")]
    return [Dist(out, reduce_blocked(low, kind, x), "f32")]


__all__ = ["reduce_acc", "reduce_blocked"]
