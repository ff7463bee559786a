"""Lowering of register tensors: loads and stores of blocked tiles, broadcasts, row
reductions and the causal mask.

**Reduction order.** A float ``row_sum`` is the tile interpreter's pairwise tree in
float64 over adjacent elements (:mod:`tessera.interp.tile_rules`), which a CTA
reproduces exactly: each thread sums its contiguous chunk as a tree, ``shfl.bfly``
with offsets 1, 2, 4... joins the chunks of neighbouring lanes (IEEE addition is
commutative, so every lane gets the same bits), and what remains — chunks in other
registers, or row segments of other warps, exchanged through shared memory — is
summed as a tree in ascending order. ``row_max`` uses ``max.NaN`` (NaN propagates,
as ``np.max``) in the same shape.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.errors import UnsupportedError
from tessera.ir import tile_compute as C
from tessera.ir.core import Instr, Value
from tessera.lower.core import Lowerer, rule
from tessera.lower.emit import Emitter
from tessera.lower.layout import Acc, Blocked, BRow, Row
from tessera.lower.mathlib import (
    emit_shfl_max_f32,
    emit_shfl_sum_f64,
    emit_tree_max_f32,
    emit_tree_sum_f64,
)
from tessera.lower.rules_memory import address
from tessera.lower.tiles import acc_coords
from tessera.lower.values import Dist, Lowered, Mem, Scalar, mem_type, reg_type


def _tid(e: Emitter) -> Value:
    return e.cvt(e.sreg("tid.x"), "s32", "u32")


def chunk_index(e: Emitter, layout: Blocked, j: int) -> Value:
    """The flat index of the first element of this thread's chunk ``j``."""
    c = e.add(_tid(e), e.const(j * 128, "s32"), "s32") if j else _tid(e)
    return e.mul(c, e.const(layout.vec, "s32"), "s32") if layout.vec > 1 else c


def _element(e: Emitter, mem: Mem, layout: Blocked, k0: Value, c: int) -> Value:
    """The element offset (in ``mem``'s buffer) of flat tile index ``k0 + c``."""
    k = e.add(k0, e.const(c, "s32"), "s32") if c else k0
    if len(layout.shape) == 1:
        return k if mem.strides[0] == 1 else e.mul(k, e.const(mem.strides[0], "s32"), "s32")
    cols = layout.shape[-1]
    row = e.bin("div", k, e.const(cols, "s32"), "s32")
    col = e.bin("rem", k, e.const(cols, "s32"), "s32")
    return e.add(e.mul(row, e.const(mem.strides[0], "s32"), "s32"),
                 col if mem.strides[1] == 1 else e.mul(col, e.const(mem.strides[1], "s32"),
                                                       "s32"), "s32")


def _clamped(e: Emitter, layout: Blocked, j: int) -> Value:
    k0 = chunk_index(e, layout, j)
    if (j + 1) * 128 <= layout.chunks:
        return k0
    last = e.const((layout.chunks - 1) * layout.vec, "s32")
    return e.bin("min", k0, last, "s32")  # past the end: read a valid chunk, ignore it


def materialize(low: Lowerer, lv: Lowered, layout: object) -> Lowered:
    """A deferred load (a memory view) read into ``layout``; other values pass."""
    if not isinstance(lv, Mem):
        return lv
    if not isinstance(layout, Blocked):
        raise UnsupportedError(f"a memory tile cannot be read into layout {layout} yet")
    e = low.em
    mt, rt = mem_type(lv.element), reg_type(lv.element)
    regs = []
    for j in range(layout.per_thread):
        k0 = _clamped(e, layout, j)
        for c in range(layout.vec):
            off = _element(e, lv, layout, k0, c)
            raw = e.ld(lv.space, address(e, lv, off), mt)
            regs.append(raw if mt == rt else widen(e, raw, mt, lv.element))
    return Dist(layout, regs, rt)


def widen(e: Emitter, raw: Value, mt: str, element: object) -> Value:
    """A loaded bf16/f16 element as the f32 register of the same value (exact)."""
    from tessera.lower.values import storage_name

    name = storage_name(element)  # type: ignore[arg-type]
    if mt == "b16" and name == "bfloat16":
        # bf16 is the high half of the f32 with the same value
        return e.pack([e.const(0, "b16"), raw], "f32")
    if mt == "b16" and name == "float16":
        return e.cvt(e.pack([raw], "f16"), "f32", "f16")
    raise UnsupportedError(f"loading {mt} tiles into registers is not lowered yet", loc=e.loc)


def for_each_element(low: Lowerer, layout: Blocked, mem: Mem,
                     fn: Callable[[Emitter, Value, int], None]) -> None:
    """Call ``fn(emitter, address, register)`` for every element this thread holds of a
    blocked tensor written to ``mem``; chunks past the end are skipped (a guard)."""
    e = low.em

    def chunk(inner: Emitter, j: int) -> None:
        k0 = chunk_index(inner, layout, j)
        for c in range(layout.vec):
            off = _element(inner, mem, layout, k0, c)
            fn(inner, address(inner, mem, off), j * layout.vec + c)

    for j in range(layout.per_thread):
        if (j + 1) * 128 <= layout.chunks:
            chunk(e, j)
        else:
            ok = e.setp("lt", chunk_index(e, layout, j),
                        e.const(layout.chunks * layout.vec, "s32"), "s32")
            e.if_(ok, lambda inner, j=j: chunk(inner, j))


def store_blocked(low: Lowerer, mem: Mem, value: Dist) -> None:
    """Store a blocked tensor; chunks past the end are skipped."""
    from tessera.lower.rules_memory import to_mem

    assert isinstance(value.layout, Blocked)
    mt = mem_type(mem.element)

    def store(e: Emitter, addr: Value, r: int) -> None:
        e.st(mem.space, addr, to_mem(e, value.regs[r], value.type, mt, mem.element), mt)
    for_each_element(low, value.layout, mem, store)


def reduce_into(low: Lowerer, mem: Mem, value: Lowered, layout: object) -> None:
    """``mem += value`` for a tensor: one ``red.global.add.f32`` per element (tiles of
    other CTAs may add into the same elements, as a split-K GEMM does)."""
    from tessera.ir.target_ops import Reduce

    e = low.em
    value = materialize(low, value, layout)
    if not isinstance(value, Dist) or value.type != "f32" or mem_type(mem.element) != "f32":
        raise UnsupportedError("'+=' of a tensor is lowered for f32 values into f32 memory",
                               loc=e.loc)
    red = Reduce("global", "add", "f32")
    if isinstance(value.layout, Acc):
        from tessera.lower.gemm80 import acc_rowcol

        if mem.strides[-1] != 1:  # the offsets below are row * stride + col
            raise UnsupportedError("accumulators are added into row-major views",
                                   hint="add into the tensor in its own layout", loc=e.loc)
        stride = mem.strides[0]
        for reg, (row, col) in zip(value.regs, acc_rowcol(e, value.layout.rows,
                                                          value.layout.cols)):
            off = e.add(e.mul(row, e.const(stride, "s32"), "s32"), col, "s32")
            e.op(red, [address(e, mem, off), reg])
        return
    if not isinstance(value.layout, Blocked):
        raise UnsupportedError("'+=' of a row-reduced tile is not lowered", loc=e.loc,
                               hint="store the rows with '=' instead")

    def add(inner: Emitter, addr: Value, r: int) -> None:
        inner.op(red, [addr, value.regs[r]])
    for_each_element(low, value.layout, mem, add)


@rule(C.Broadcast)
def _broadcast(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    (x,) = args
    out = low.layouts[instr.results[0]]
    if isinstance(x, Scalar):
        return [Dist(out, [x.reg] * register_count(out), x.type)]
    assert isinstance(x, Dist)
    if isinstance(out, Acc) and isinstance(x.layout, Row):
        half = out.cols // 2
        regs = [x.regs[2 * (r // half) + (((r % half) >> 1) & 1)]
                for r in range(register_count(out))]
        return [Dist(out, regs, x.type)]
    if isinstance(out, Blocked) and isinstance(x.layout, BRow):
        return [Dist(out, [x.regs[r // out.vec] for r in range(register_count(out))], x.type)]
    raise UnsupportedError(f"broadcast from {x.layout} to {out} is not lowered", loc=instr.loc)


def register_count(layout: object) -> int:
    """Registers per thread of a tensor in ``layout``."""
    if isinstance(layout, Acc):
        return layout.rows * layout.cols // 128
    if isinstance(layout, Row):
        return layout.rows // 32
    if isinstance(layout, Blocked):
        return layout.per_thread * layout.vec
    if isinstance(layout, BRow):
        return layout.parent.per_thread
    raise UnsupportedError(f"unknown layout {layout}")


def _combine(e: Emitter, kind: str, a: Value, b: Value) -> Value:
    return e.add(a, b, "f64") if kind == "sum" else e.bin("max", a, b, "f32", "NaN")


def _tree(e: Emitter, kind: str, vals: list[Value]) -> Value:
    return emit_tree_sum_f64(e, vals) if kind == "sum" else emit_tree_max_f32(e, vals)


def _shfl(e: Emitter, kind: str, v: Value, offsets: list[int]) -> Value:
    if not offsets:
        return v
    return (emit_shfl_sum_f64 if kind == "sum" else emit_shfl_max_f32)(e, v, offsets)


def _prep(e: Emitter, kind: str, x: Value) -> Value:
    return e.cvt(x, "f64", "f32") if kind == "sum" else x


def _finish(e: Emitter, kind: str, x: Value) -> Value:
    return e.cvt(x, "f32", "f64", "rn") if kind == "sum" else x


def reduce_acc(e: Emitter, kind: str, x: Dist) -> list[Value]:
    """Row statistics of an accumulator-layout tile, in the Row layout's order."""
    layout = x.layout
    assert isinstance(layout, Acc)
    half = layout.cols // 2
    out = []
    for b in range(layout.rows // 64):
        for h in range(2):
            parts = []
            for j in range(layout.cols // 8):
                r0 = b * half + 4 * j + 2 * h
                pair = _combine(e, kind, _prep(e, kind, x.regs[r0]),
                                _prep(e, kind, x.regs[r0 + 1]))
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
    size = 8 if kind == "sum" else 4
    base = low.shared_buffer("red", rows * segs * size, 8)
    t = "f64" if kind == "sum" else "f32"
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


def _offsets(n: int) -> list[int]:
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out


@rule(C.Reduce)
def _reduce(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, C.Reduce)
    src = instr.operands[0]
    x = materialize(low, args[0], low.layouts.get(src))
    if not isinstance(x, Dist) or x.type != "f32" or op.kind not in ("sum", "max") or \
            op.axis % src.type.rank != src.type.rank - 1:  # type: ignore[attr-defined]
        raise UnsupportedError(f"tile.reduce {op.kind} over axis {op.axis} is not lowered",
                               hint="row_sum and row_max of f32 tiles are", loc=instr.loc)
    out = low.layouts[instr.results[0]]
    if isinstance(x.layout, Acc):
        return [Dist(out, reduce_acc(low.em, op.kind, x), "f32")]
    return [Dist(out, reduce_blocked(low, op.kind, x), "f32")]


@rule(C.Reshape)
def _reshape(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    (x,) = args
    out = low.layouts.get(instr.results[0])
    if isinstance(x, Dist) and out == x.layout:  # adding or removing unit dims
        return [x]
    raise UnsupportedError("reshapes that move elements between threads are not lowered",
                           loc=instr.loc)


@rule(C.CausalMask)
def _causal(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    s, q0, k0 = args
    assert isinstance(s, Dist) and isinstance(q0, Scalar) and isinstance(k0, Scalar)
    if not isinstance(s.layout, Acc):
        raise UnsupportedError("causal_mask of a non-mma tile is not lowered", loc=instr.loc)
    e = low.em
    rows, cols = acc_coords(s.layout.rows, s.layout.cols)
    from tessera.lower.gemm80 import acc_origin

    # register r holds (row0 + R(r), col0 + K(r)), R and K static (thread 0's coordinates),
    # so keep (q0 + row >= k0 + col)  <=>  (q0 - k0) + row0 - col0 >= K(r) - R(r)
    row0, col0 = acc_origin(e)
    base = e.add(e.bin("sub", q0.reg, k0.reg, "s32"), e.bin("sub", row0, col0, "s32"), "s32")
    ninf = e.const(float("-inf"), "f32")
    regs = []
    for r, x in enumerate(s.regs):
        keep = e.setp("ge", base, e.const(int(cols[0, r]) - int(rows[0, r]), "s32"), "s32")
        regs.append(e.selp(x, ninf, keep, "f32"))
    return [Dist(s.layout, regs, "f32")]


__all__ = ["materialize", "reduce_acc", "reduce_blocked", "reduce_into", "register_count",
           "store_blocked"]
