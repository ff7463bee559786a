"""The integer ``mma`` (int8 operands, an int32 accumulator) without tensor cores: each
thread sums the products of the output elements it holds, in 64-bit registers.

The tile level defines ``tile.mma`` of integers as the int64 sum ``c + a @ b`` of the
K products, saturated once to the accumulator (:mod:`tessera.interp.tile.mma`; the
graph's int8 matmul saturates its exact sum, and the generated K loops stay below
2^17 products, so no partial sum saturates where the graph's would not,
:mod:`tessera.ir.transforms.to_tile.matmul`). In PTX the output tile is held in the
blocked layout (:mod:`tessera.lower.layout`): every thread loops over K for its own
elements, multiplies the sign-extended bytes in ``s32`` (a product of two bytes is
exact there), sums the products in ``s32`` (exact for K below :data:`SHORT_K`, every
tile the generator makes; in ``s64`` beyond: no contraction of fewer than 2^32
products of at most 2^16 reaches 2^63), adds the widened accumulator in ``s64`` and
clamps the sum to the ``s32`` range once, at the end of the ``mma`` — the tile level's
int64 sum and saturation, for every K.

``mma.sync`` m16n8k32 ``.s8`` (and ``wgmma`` ``.s32``) sum exactly too while no
partial sum overflows, and take the kernels where that is proved and the operands
are in their layouts (:mod:`tessera.lower.sm80.intmma`, which says why a kernel does
not qualify); this form takes the others: it needs no operand fragments or K-major
copies of a row-major B (``wgmma`` transposes 16-bit operands only), and an output
tile of :data:`~tessera.ir.transforms.to_tile.exact_tiles.EXACT_MMA_TILE` keeps four
accumulators in each thread.
"""

from __future__ import annotations

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.lower.core import THREADS, Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.layout import Blocked
from tessera.lower.rules.memory import address
from tessera.lower.rules.tensor import chunk_index, materialize, widen
from tessera.lower.values import Dist, Lowered, Mem, mem_type, reg_type

#: the shortest K whose sum of byte products (each below 2^16 in magnitude) may leave s32
SHORT_K = 2**15


def _operand(e: TargetEmitter, mem: Mem, i: Value, k: Value) -> Value:
    """Element ``[i, k]`` of a 2-D integer operand view, sign- or zero-extended to s32."""
    off = e.add(e.mul(i, e.const(mem.strides[0], "s32"), "s32"),
                e.mul(k, e.const(mem.strides[1], "s32"), "s32"), "s32")
    mt = mem_type(mem.element)
    raw = e.ld(mem.space, address(e, mem, off), mt)
    x = widen(e, raw, mt, mem.element) if mt == "s8" else raw
    return e.cvt(x, "s32", reg_type(mem.element)) if reg_type(mem.element) != "s32" else x


def integer_mma(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """``c + a @ b`` of integer tiles in the blocked layout, saturated to int32."""
    a, b = args[0], args[1]
    if not (isinstance(a, Mem) and isinstance(b, Mem) and len(a.shape) == 2 and
            len(b.shape) == 2):
        raise UnsupportedError("integer mma operands must be 2-D memory tiles (loads of "
                               "shared or global views)", loc=instr.loc,
                               hint="load both operands from views")
    layout = low.layouts[instr.results[0]]
    assert isinstance(layout, Blocked)
    e = low.em
    s32, s64 = "s32", "s64"
    n_cols, kdim = layout.shape[1], a.shape[1]
    last = layout.chunks * layout.vec - 1
    count = layout.per_thread * layout.vec
    # per register: its row and column (a register past the end of the tile reads the
    # last element: its sum is never used)
    where = []
    for r in range(count):
        j, c = divmod(r, layout.vec)
        flat = chunk_index(e, layout, j)
        flat = e.add(flat, e.const(c, s32), s32) if c else flat
        if (j + 1) * THREADS > layout.chunks:
            flat = e.bin("min", flat, e.const(last, s32), s32)
        where.append((e.bin("div", flat, e.const(n_cols, s32), s32),
                      e.bin("rem", flat, e.const(n_cols, s32), s32)))
    # the K products of one mma sum exactly in s32 while K * 2^16 < 2^31 (every tile
    # the generator makes); the accumulator operand joins in s64
    wide = kdim >= SHORT_K
    kind = s64 if wide else s32

    def body(le: TargetEmitter, kk: Value, *sums: Value) -> list[Value]:
        rows: dict[int, Value] = {}  # a chunk's elements share a row: one load of a
        out = []
        for r, ((row, col), total) in enumerate(zip(where, sums)):
            x = rows.get(r // layout.vec)
            if x is None:
                x = rows[r // layout.vec] = _operand(le, a, row, kk)
            p = le.mul(x, _operand(le, b, kk, col), s32)
            out.append(le.add(total, le.cvt(p, s64, s32) if wide else p, kind))
        return out

    sums = e.for_(e.const(0, s32), e.const(kdim, s32), e.const(1, s32),
                  [e.const(0, kind)] * count, body)
    if not wide:
        sums = [e.cvt(v, s64, s32) for v in sums]
    if len(args) == 3:
        acc = materialize(low, args[2], layout)  # a view of the accumulator: loaded
        assert isinstance(acc, Dist)
        sums = [e.add(v, e.cvt(reg, s64, s32), s64) for v, reg in zip(sums, acc.regs)]
    lo, hi = e.const(-2**31, s64), e.const(2**31 - 1, s64)
    regs = [e.cvt(e.bin("min", e.bin("max", v, lo, s64), hi, s64), s32, s64) for v in sums]
    return [Dist(layout, regs, s32)]


__all__ = ["SHORT_K", "integer_mma"]
