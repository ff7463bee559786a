"""sm_80 matrix building blocks: ``ldmatrix`` + ``mma.sync`` products, the
FlashAttention-2 register reuse and accumulator stores (the copies and the shared-memory
swizzle are in :mod:`tessera.lower.sm80.copy`).

Every function appends the Target IR of one CTA of :data:`~tessera.lower.tiles.THREADS`
threads (four warps) through an :class:`~tessera.lower.emit.TargetEmitter`; shapes, strides
and loop trip counts are static, only base addresses and ``%tid.x`` are registers.
Accumulators are lists of ``f32`` values in the register order of
:func:`tessera.lower.tiles.acc_coords`: register ``4 j + c`` of 64-row block ``b`` is
register ``c`` of the ``m16n8`` C fragment (PTX ISA sec. 9.7.14.5.8) of warp ``w``'s
rows ``64 b + 16 w .. +15`` and columns ``8 j .. 8 j + 7``. Every ``ldmatrix`` address
honours the box's swizzle.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.errors import ShapeError, UnsupportedError
from tessera.ir.core import Value
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.async_ops import Ldmatrix, MmaSync
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm80.copy import Lanes, SharedAddresses, lin
from tessera.lower.tiles import THREADS, SharedBox, elem_size

#: operand element types of ``mma.sync.m16n8k16`` these blocks lower
MMA_TYPES = ("bf16", "f16")
#: fp8 operand types of ``mma.sync.m16n8k32`` (sm_89 and later, PTX ISA 8.4)
FP8_TYPES = ("e4m3", "e5m2")
#: byte integer operand types of ``mma.sync.m16n8k32`` (``s32`` accumulators, sm_80)
INT_TYPES = ("s8", "u8")
#: tf32 operands of ``mma.sync.m16n8k8``: 4-byte elements, 8 of K per 32-byte step
TF32_TYPES = ("tf32",)
#: bytes of K one mma.sync step reads per row: 16 bf16/f16 (k16) or 32 fp8 (k32), so the
#: fragment layouts, and the ldmatrix addresses that gather them, are the same in bytes
#: (PTX ISA sec. 9.7.14.5.8: A register i of lane l holds row l/4 (+8), bytes
#: 4 (l % 4) .. +3 (+16) of the step, for both shapes)
_STEP_BYTES = 32


def _k_step(atype: str) -> int:
    """The K of one ``mma.sync`` of ``atype`` operands (16; 32 for 8-bit, 8 for tf32)."""
    return _STEP_BYTES // elem_size(atype)
ALoader = Callable[[int, int], Value]


# ------------------------------------------------------------------------ products
def _operand(box: SharedBox, atype: str, what: str) -> int:
    """Check a shared operand; returns its row size in bytes."""
    if box.elem != atype:
        raise ShapeError(f"{what} holds {box.elem}, but the product multiplies {atype}",
                         hint="convert the operand before staging it")
    row_bytes = box.cols * elem_size(box.elem)
    if row_bytes % 16 or box.cols % 8:
        raise UnsupportedError(f"ldmatrix reads 16-byte rows: {what} needs a multiple of 8 "
                               f"columns, has {box.cols}")
    return row_bytes


def _smem_a(e: TargetEmitter, lanes: Lanes, a: SharedBox, a_trans: bool) -> ALoader:
    """The A fragment of (64-row block ``b``, k-step ``kk``) by one ``ldmatrix.x4``
    (sec. 9.7.14.5.15): matrix ``j`` of lane group ``j = lane / 8`` is rows ``+8 (j & 1)``
    and k ``+8 (j >> 1)`` of the warp's m16k16 block, i.e. A registers a0..a3 in the
    order of sec. 9.7.14.5.8. A^T (``a_trans``) is read with ``.trans``."""
    rb, es, shared = _operand(a, a.elem, "A"), elem_size(a.elem), SharedAddresses(e, a)
    if not a_trans:  # row 16 w + (lane & 15), byte column 16 (lane >> 4)
        dyn = lin(e, [(lanes.warp, 16 * rb), (lanes.bits(0, 15), rb),
                       (lanes.bits(4, 1), 16)])
        return lambda b, kk: e.one(Ldmatrix(4, False),
                                   shared.addr(dyn, 64 * b * rb + _STEP_BYTES * kk))
    if es != 2:  # ldmatrix.trans moves 16-bit elements
        raise UnsupportedError(f"a transposed {a.elem} A operand is not lowered for "
                               "mma.sync", hint="stage A row-major (K contiguous)")
    # A^T row (a k) 8 (lane >> 4) + (lane & 7), column (an m) 16 w + 8 ((lane >> 3) & 1)
    dyn = lin(e, [(lanes.bits(4, 1), 8 * rb), (lanes.bits(0, 7), rb), (lanes.warp, 16 * es),
                   (lanes.bits(3, 1), 8 * es)])
    return lambda b, kk: e.one(Ldmatrix(4, True), shared.addr(dyn, 16 * kk * rb + 64 * b * es))


def _smem_b(e: TargetEmitter, lanes: Lanes, b: SharedBox, b_trans: bool, bn: int,
            ) -> Callable[[int], list[Value]]:
    """A loader of the ``reg<2xb32>`` B fragments of one k-step for every n8 block: one
    ``ldmatrix.x4`` per pair of n-blocks (matrices: (j, k+0), (j, k+8), (j+1, k+0),
    (j+1, k+8)), an ``.x2`` for an odd last one. Fragment register ``b0`` of lane ``l``
    is B[k 2(l%4)..+1, n l/4] (sec. 9.7.14.5.8), a row of B^T: hence ``.trans`` when
    the buffer holds B row-major (k-major rows) and no transpose for B^T."""
    rb, es, shared = _operand(b, b.elem, "B"), elem_size(b.elem), SharedAddresses(e, b)
    odd = (bn // 8) % 2 == 1
    if not b_trans and es != 2:  # ldmatrix.trans moves 16-bit elements
        raise UnsupportedError(f"a row-major {b.elem} B operand is not lowered for "
                               "mma.sync: its fragments need K contiguous",
                               hint="stage B transposed (N x K) and multiply by its .T")
    if not b_trans:  # row (a k) lane & 15, column (an n) 8 (lane >> 4); .x2: lanes 0..15
        dyn4 = lin(e, [(lanes.bits(0, 15), rb), (lanes.bits(4, 1), 8 * es)])
        dyn2 = lin(e, [(lanes.bits(0, 15), rb)]) if odd else dyn4

        def static(kk: int, j: int) -> int:
            return 16 * kk * rb + 8 * j * es
    else:  # row (an n) 8 (lane >> 4) + (lane & 7), byte column 16 ((lane >> 3) & 1)
        dyn4 = lin(e, [(lanes.bits(4, 1), 8 * rb), (lanes.bits(0, 7), rb),
                        (lanes.bits(3, 1), 16)])
        dyn2 = lin(e, [(lanes.bits(0, 7), rb), (lanes.bits(3, 1), 16)]) if odd else dyn4

        def static(kk: int, j: int) -> int:
            return 8 * j * rb + _STEP_BYTES * kk

    def load(kk: int) -> list[Value]:
        frags: list[Value] = []
        for j in range(0, bn // 8, 2):
            num = 4 if j + 1 < bn // 8 else 2
            addr = shared.addr(dyn4 if num == 4 else dyn2, static(kk, j))
            regs = e.unpack(e.one(Ldmatrix(num, not b_trans), addr), "b32", num)
            frags += [e.pack(regs[i:i + 2], "b32") for i in range(0, num, 2)]
        return frags
    return load


def _products(e: TargetEmitter, lanes: Lanes, acc: list[Value], load_a: ALoader, b: SharedBox,
              b_trans: bool, atype: str, bm: int, bn: int, bk: int) -> list[Value]:
    """C += A @ B over k16 (fp8: k32) steps in ascending order: per step the B
    fragments, then per 64-row block its A fragment and one ``mma.sync.m16n8k16`` (fp8:
    ``m16n8k32``) per n8 block."""
    if atype not in MMA_TYPES + FP8_TYPES + INT_TYPES + TF32_TYPES:
        raise UnsupportedError(f"mma.sync lowering takes bf16, f16, fp8, tf32, s8 or u8, "
                               f"not {atype}")
    ks = _k_step(atype)
    if bm % 64 or bn % 8 or bk % ks or bm <= 0 or bn <= 0 or bk <= 0:
        raise UnsupportedError(f"a {bm}x{bn}x{bk} product needs BM % 64, BN % 8 and "
                               f"BK % {ks} to be 0", hint="pad the tile sizes")
    ctype = "s32" if atype in INT_TYPES else "f32"
    if len(acc) != bm * bn // THREADS or any(v.type != RegType(ctype) for v in acc):
        raise ShapeError(f"a {bm}x{bn} accumulator is {bm * bn // THREADS} {ctype} registers "
                         f"per thread, got {len(acc)}")
    half = bn // 2
    c = [[e.pack(acc[b * half + 4 * j: b * half + 4 * j + 4], ctype) for j in range(bn // 8)]
         for b in range(bm // 64)]
    mma = MmaSync(f"m16n8k{ks}", atype, atype, ctype)
    load_b = _smem_b(e, lanes, b, b_trans, bn)
    for kk in range(bk // ks):
        frags = load_b(kk)
        for blk in range(bm // 64):
            a = load_a(blk, kk)
            for j, frag in enumerate(frags):
                c[blk][j] = e.one(mma, a, frag, c[blk][j])
    return [r for row in c for v in row for r in e.unpack(v, ctype, 4)]


def mma_block(e: TargetEmitter, acc: list[Value], a: SharedBox, b: SharedBox, *, a_trans: bool,
              b_trans: bool, atype: str = "bf16") -> list[Value]:
    """``C[BM, BN] += A[BM, BK] @ B[BK, BN]`` from shared memory; returns the new
    accumulator registers. ``a`` holds A (``BM x BK``) or, with ``a_trans``, A^T
    (``BK x BM``); ``b`` holds B (``BK x BN``) or, with ``b_trans``, B^T (``BN x BK``)."""
    bm, bk = (a.cols, a.rows) if a_trans else (a.rows, a.cols)
    bn, bk_b = (b.rows, b.cols) if b_trans else (b.cols, b.rows)
    if bk != bk_b:
        raise ShapeError(f"A has K = {bk} but B has K = {bk_b}")
    _operand(b, atype, "B")
    _operand(a, atype, "A")
    lanes = Lanes(e)
    return _products(e, lanes, acc, _smem_a(e, lanes, a, a_trans), b, b_trans, atype,
                     bm, bn, bk)


# ------------------------------------------------------------ register reuse (FA-2)
def acc_to_a(e: TargetEmitter, acc: list[Value], bm: int, bn: int, atype: str = "bf16",
             ) -> list[list[Value]]:
    """The ``(BM, BN)`` f32 accumulator rounded to ``atype`` as the A operand of a next
    product ``P[BM, BN] @ V[BN, D]``, without a shared-memory round trip: ``[b][kk]`` is
    the ``reg<4xb32>`` m16k16 fragment of 64-row block ``b`` and k-step ``kk``. The C
    fragment of n-block ``j`` holds (row g, cols 2t, 2t+1) and (row g+8, same), which
    is exactly the A fragment's (row g / g+8, k 2t, 2t+1) for ``j = 2 kk`` and its
    k ``+8`` half for ``j = 2 kk + 1`` (sec. 9.7.14.5.8). Each pair packs with
    ``cvt.rn.bf16x2.f32 d, hi, lo`` (sec. 9.7.9.21: the *first* source goes to the
    upper half), so the higher column is passed first and the lower k lands in the
    low half, as the fragment layout requires."""
    if atype not in MMA_TYPES:
        raise UnsupportedError(f"acc_to_a converts to bf16 or f16, not {atype}")
    if bm % 64 or bn % 16 or len(acc) != bm * bn // THREADS:
        raise ShapeError(f"acc_to_a needs BM % 64 == 0, BN % 16 == 0 and {bm * bn // THREADS}"
                         f" registers, got {bm}x{bn} and {len(acc)}")
    half, pair = bn // 2, f"{atype}x2"

    def word(r: int) -> Value:  # registers r (low column) and r + 1 as one b32
        return e.pack([e.cvt([acc[r + 1], acc[r]], pair, "f32", "rn")], "b32")

    frags = []
    for b in range(bm // 64):
        row = []
        for kk in range(bn // 16):
            lo, hi = b * half + 8 * kk, b * half + 8 * kk + 4  # n-blocks 2 kk, 2 kk + 1
            row.append(e.pack([word(lo), word(lo + 2), word(hi), word(hi + 2)], "b32"))
        frags.append(row)
    return frags


def mma_block_regs(e: TargetEmitter, acc: list[Value], a_frags: list[list[Value]], b: SharedBox,
                   *, b_trans: bool, atype: str = "bf16") -> list[Value]:
    """``C[BM, D] += P @ V`` with P given as register fragments (:func:`acc_to_a`,
    ``BM = 64 len(a_frags)``, ``K = 16 len(a_frags[0])``) and V in shared memory
    (``K x D``, or ``D x K`` with ``b_trans``)."""
    bm, bk = 64 * len(a_frags), 16 * len(a_frags[0]) if a_frags else 0
    bn, bk_b = (b.rows, b.cols) if b_trans else (b.cols, b.rows)
    if bk != bk_b or any(len(r) != len(a_frags[0]) for r in a_frags):
        raise ShapeError(f"P fragments cover K = {bk} but V has K = {bk_b}")
    _operand(b, atype, "B")
    return _products(e, Lanes(e), acc, lambda blk, kk: a_frags[blk][kk], b, b_trans,
                     atype, bm, bn, bk)


# --------------------------------------------------------------------------- stores
def quad_origin(e: TargetEmitter, lanes: Lanes) -> tuple[Value, Value]:
    """``(row, column)`` as ``u32`` of this thread's first accumulator register:
    ``16 w + lane / 4``, ``2 (lane % 4)``."""
    row = lin(e, [(lanes.warp, 16), (lanes.bits(2, 7), 1)])
    return row, lin(e, [(lanes.bits(0, 3), 2)])


def store_acc(e: TargetEmitter, acc: list[Value], dst_base: Value, row_stride: int, bm: int,
              bn: int, elem: str = "f32", *, pairs: bool = True) -> None:
    """Store a ``(BM, BN)`` accumulator to the row-major global box at ``dst_base``
    (``u64``, row stride ``row_stride`` elements), as ``f32`` or rounded (``cvt.rn``)
    to ``bf16``/``f16``. Adjacent column pairs go out as one ``st.global.v2.f32`` or
    one packed ``b32`` when ``row_stride`` is even and ``pairs`` says ``dst_base`` is
    aligned to the pair (8 bytes for f32, 4 for 16-bit types); otherwise one element
    at a time. ``s8``: int8 values held in ``s32`` registers (an integer accumulator
    cast to int8), one ``st.global.s8`` each (it keeps the low byte)."""
    if elem not in ("f32", "bf16", "f16", "s32", "s8"):
        raise UnsupportedError(f"store_acc writes f32, bf16 or f16 (s32: integer sums, "
                               f"s8: their casts), not {elem}")
    if bm % 64 or bn % 8 or len(acc) != bm * bn // THREADS:
        raise ShapeError(f"a {bm}x{bn} accumulator is {bm * bn // THREADS} registers, "
                         f"got {len(acc)}")
    es, lanes = elem_size(elem), Lanes(e)
    row, col = quad_origin(e, lanes)
    start = e.bin("mul", lin(e, [(row, row_stride), (col, 1)]), e.const(es, "u32"), "u32",
                  "wide")
    base = e.add(dst_base, start, "u64")
    for r in range(0, len(acc), 2):
        b, i = divmod(r, bn // 2)
        off = ((64 * b + 8 * ((i >> 1) & 1)) * row_stride + 8 * (i >> 2)) * es
        addr, off = (base, off) if off < 2**31 else (e.add(base, e.const(off, "u64"), "u64"), 0)
        lo, hi = acc[r], acc[r + 1]
        if row_stride % 2 or not pairs or elem == "s8":  # one element at a time
            for k, v in enumerate((lo, hi)):
                v = v if elem in ("f32", "s32", "s8") else e.cvt(v, elem, "f32", "rn")
                e.st("global", addr, v, elem, offset=off + k * es)
        elif elem in ("f32", "s32"):  # s32: an integer mma's accumulator, stored as is
            e.st("global", addr, e.pack([lo, hi], elem), elem, vec=2, offset=off)
        else:
            word = e.pack([e.cvt([hi, lo], f"{elem}x2", "f32", "rn")], "b32")
            e.st("global", addr, word, "b32", offset=off)


def acc_origin(e: TargetEmitter) -> tuple[Value, Value]:
    """``(row, column)`` as ``s32`` of this thread's first accumulator register
    (register ``r`` is that plus the static offsets of :func:`tessera.lower.tiles.acc_coords`
    for thread 0)."""
    row, col = quad_origin(e, Lanes(e))
    return e.cvt(row, "s32", "u32"), e.cvt(col, "s32", "u32")


def acc_rowcol(e: TargetEmitter, bm: int, bn: int) -> list[tuple[Value, Value]]:
    """Per accumulator register, its ``(row, column)`` in the ``(BM, BN)`` tile as
    ``s32`` values (for masks); register order of :func:`tessera.lower.tiles.acc_coords`."""
    row0, col0 = acc_origin(e)

    def plus(v: Value, k: int) -> Value:
        return e.add(v, e.const(k, "s32"), "s32") if k else v

    rows = {(b, h): plus(row0, 64 * b + 8 * h) for b in range(bm // 64) for h in (0, 1)}
    cols = {(j, c): plus(col0, 8 * j + c) for j in range(bn // 8) for c in (0, 1)}
    out = []
    for r in range(bm * bn // THREADS):
        b, i = divmod(r, bn // 2)
        out.append((rows[b, (i >> 1) & 1], cols[i >> 2, i & 1]))
    return out


__all__ = ["FP8_TYPES", "INT_TYPES", "MMA_TYPES", "TF32_TYPES", "acc_origin", "acc_rowcol",
           "acc_to_a", "mma_block", "mma_block_regs", "quad_origin", "store_acc"]
