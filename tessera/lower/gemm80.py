"""sm_80 matrix building blocks: ``cp.async`` tile copies, ``ldmatrix`` + ``mma.sync``
products, the FlashAttention-2 register reuse and accumulator stores.

Every function appends the Target IR of one CTA of :data:`~tessera.lower.tiles.THREADS`
threads (four warps) through an :class:`~tessera.lower.emit.Emitter`; shapes, strides
and loop trip counts are static, only base addresses and ``%tid.x`` are registers.
Accumulators are lists of ``f32`` values in the register order of
:func:`tessera.lower.tiles.acc_coords`: register ``4 j + c`` of 64-row block ``b`` is
register ``c`` of the ``m16n8`` C fragment (PTX ISA sec. 9.7.14.5.8) of warp ``w``'s
rows ``64 b + 16 w .. +15`` and columns ``8 j .. 8 j + 7``.

**The sm_80 swizzle.** A :class:`~tessera.lower.tiles.SharedBox` with ``swizzle`` ``S``
(32, 64 or 128) stores the byte at row-major *offset* ``o`` of the buffer at
:func:`swizzle_offset` ``(o, S)`` ``= o ^ (((o >> 7) & (S / 16 - 1)) << 4)``: the
16-byte chunk index inside each 128-byte segment (bits 4..6) is XORed with the segment
index (bits 7..9). For 128-byte rows (64 bf16 columns) and ``S = 128`` that is chunk
``XOR (row % 8)``, so the eight row addresses of an ``ldmatrix`` fall in eight different
bank groups. The function is taken on offsets inside the buffer, so writers and readers
here agree whatever the buffer's alignment; on a buffer aligned to 1024 bytes it equals
the absolute-address swizzle of TMA and ``wgmma`` (:mod:`tessera.arch.swizzle`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tessera.errors import ShapeError, UnsupportedError
from tessera.ir.core import Value
from tessera.ir.target import RegType
from tessera.ir.target_async import CpAsync, CpAsyncCommit, CpAsyncWait, Ldmatrix, MmaSync
from tessera.lower.emit import Emitter
from tessera.lower.tiles import ELEM_BYTES, THREADS, GlobalBox, SharedBox

#: operand element types of ``mma.sync.m16n8k16`` these blocks lower
MMA_TYPES = ("bf16", "f16")
_F32 = RegType("f32")
_SWIZZLES = (0, 32, 64, 128)

ALoader = Callable[[int, int], Value]


def swizzle_offset(offset: int, swizzle: int) -> int:
    """Where byte ``offset`` of a row-major shared buffer lives under ``swizzle``
    (0, 32, 64 or 128): ``offset ^ (((offset >> 7) & (swizzle / 16 - 1)) << 4)``."""
    if swizzle not in _SWIZZLES:
        raise UnsupportedError(f"unknown shared-memory swizzle {swizzle}",
                               hint="use 0, 32, 64 or 128")
    return offset ^ (((offset >> 7) & (swizzle // 16 - 1)) << 4) if swizzle else offset


class _Shared:
    """Addresses into one shared box: ``base + swizzle(dynamic + static)``, reusing
    the swizzled dynamic part when the static part only moves bits above 9 (whole
    1024-byte swizzle atoms, which the XOR leaves alone)."""

    def __init__(self, e: Emitter, box: SharedBox) -> None:
        if box.swizzle not in _SWIZZLES:
            raise UnsupportedError(f"unknown shared-memory swizzle {box.swizzle}",
                                   hint="use 0, 32, 64 or 128")
        self.e, self.box = e, box
        self._cache: dict[tuple[Value, int], Value] = {}

    def addr(self, dynamic: Value, static: int) -> Value:
        e, u32 = self.e, "u32"
        atoms, low = divmod(static, 1024) if self.box.swizzle else (0, static)
        key = (dynamic, low)
        if key not in self._cache:
            off = e.add(dynamic, e.const(low, u32), u32) if low else dynamic
            if self.box.swizzle:
                seg = e.bin("and", e.bin("shr", off, e.const(7, u32), u32),
                            e.const(self.box.swizzle // 16 - 1, u32), u32)
                off = e.bin("xor", off, e.bin("shl", seg, e.const(4, u32), u32), u32)
            self._cache[key] = e.add(self.box.base, off, u32)
        addr = self._cache[key]
        return e.add(addr, e.const(1024 * atoms, u32), u32) if atoms else addr


def _u32(e: Emitter, a: Value, op: str, k: int) -> Value:
    return e.bin(op, a, e.const(k, "u32"), "u32")


def _lin(e: Emitter, terms: Sequence[tuple[Value, int]]) -> Value:
    """``sum(value * scale)`` in ``u32`` (scales are powers of two or small constants)."""
    out: Value | None = None
    for v, scale in terms:
        if scale == 0:
            continue
        t = v if scale == 1 else (_u32(e, v, "shl", scale.bit_length() - 1)
                                  if scale & (scale - 1) == 0 else _u32(e, v, "mul", scale))
        out = t if out is None else e.add(out, t, "u32")
    return out if out is not None else e.const(0, "u32")


# ------------------------------------------------------------------------- copies
def copy_async(e: Emitter, dst: SharedBox, src: GlobalBox, *, aligned16: bool = True,
               commit: bool = True) -> None:
    """Copy global box ``src`` into shared box ``dst`` with ``cp.async`` and commit
    the group (PTX ISA sec. 9.7.9.25; ``commit=False`` leaves the group open so that
    the next copy joins it). The box is cut into chunks of 16 bytes (``cp.async.cg``)
    or, with ``aligned16=False`` (the caller cannot promise 16-byte aligned rows and
    start), 4 bytes (``cp.async.ca``); chunk ``c`` of the row-major box lands at shared
    offset :func:`swizzle_offset` ``(c * chunk)`` (dense rows of ``cols`` elements) and
    thread ``t`` copies chunks ``t, t + 128, ...``. Read the data only after
    :func:`wait_async`."""
    if (dst.rows, dst.cols, dst.elem) != (src.rows, src.cols, src.elem):
        raise ShapeError(f"cp.async copies a {src.rows}x{src.cols} {src.elem} box into a "
                         f"{dst.rows}x{dst.cols} {dst.elem} buffer",
                         hint="give both boxes one shape and element type")
    esize = ELEM_BYTES[src.elem]
    chunk = 16 if aligned16 else 4
    row_bytes, stride_bytes = src.cols * esize, src.stride * esize
    if row_bytes % chunk or stride_bytes % chunk:
        raise UnsupportedError(f"cp.async of {chunk}-byte chunks needs rows and a row stride "
                               f"in multiples of {chunk} bytes, got {row_bytes} and "
                               f"{stride_bytes}", hint="pad the tensor's rows")
    per_row, total = row_bytes // chunk, src.rows * row_bytes // chunk
    op = CpAsync(16, "cg") if aligned16 else CpAsync(4, "ca")
    tid = e.sreg("tid.x")
    shared = _Shared(e, dst)
    s_off = _u32(e, tid, "shl", chunk.bit_length() - 1)
    static_rows = THREADS % per_row == 0 or per_row % THREADS == 0
    if static_rows:  # row and column of chunk tid + 128 k are (tid-part) + (static part)
        row0, col0 = ((_u32(e, tid, "shr", per_row.bit_length() - 1),
                       _u32(e, tid, "and", per_row - 1)) if THREADS % per_row == 0
                      else (e.const(0, "u32"), tid))
        g_thread = _global(e, src.base, row0, col0, stride_bytes, chunk)
    for k in range(-(-total // THREADS)):
        first = k * THREADS
        if static_rows:
            row, col = divmod(first, per_row)
            rel = row * stride_bytes + col * chunk
            g_addr = e.add(g_thread, e.const(rel, "u64"), "u64") if rel else g_thread
        else:  # rows of an odd number of chunks: divide per chunk
            c = _u32(e, tid, "add", first)
            g_addr = _global(e, src.base, _u32(e, c, "div", per_row),
                             _u32(e, c, "rem", per_row), stride_bytes, chunk)
        s_addr = shared.addr(s_off, first * chunk)
        if first + THREADS <= total:
            e.op(op, [s_addr, g_addr])
        else:  # the last round: only the threads that still own a chunk copy
            live = e.setp("lt", tid, e.const(total - first, "u32"), "u32")
            e.if_(live, _issue(op, s_addr, g_addr))
    if commit:
        e.op(CpAsyncCommit())


def _issue(op: CpAsync, s_addr: Value, g_addr: Value) -> Callable[[Emitter], None]:
    def body(inner: Emitter) -> None:
        inner.op(op, [s_addr, g_addr])
    return body


def _global(e: Emitter, base: Value, row: Value, col: Value, stride_bytes: int,
            chunk: int) -> Value:
    """``base + row * stride_bytes + col * chunk`` as a ``u64`` address."""
    off = e.bin("mul", row, e.const(stride_bytes, "u32"), "u32", "wide")
    col_bytes = e.cvt(_lin(e, [(col, chunk)]), "u64", "u32")
    return e.add(base, e.add(off, col_bytes, "u64"), "u64")


def wait_async(e: Emitter, n: int = 0) -> None:
    """``cp.async.wait_group n`` then ``bar.sync 0``: a thread's wait covers only its own
    copies (sec. 9.7.9.25), so the barrier makes every thread's chunks visible to all."""
    e.op(CpAsyncWait(n))
    e.bar()


# ------------------------------------------------------------------------ products
class _Lanes:
    """Thread-index pieces of one warp-level instruction sequence, made on first use."""

    def __init__(self, e: Emitter) -> None:
        self.e = e
        self.tid = e.sreg("tid.x")
        self._bits: dict[tuple[int, int], Value] = {}

    def bits(self, shift: int, mask: int) -> Value:
        """``(tid >> shift) & mask``."""
        if (shift, mask) not in self._bits:
            v = _u32(self.e, self.tid, "shr", shift) if shift else self.tid
            self._bits[shift, mask] = _u32(self.e, v, "and", mask) if mask else v
        return self._bits[shift, mask]

    @property
    def warp(self) -> Value:
        return self.bits(5, 0)  # 128 threads: tid >> 5 is 0..3


def _operand(box: SharedBox, atype: str, what: str) -> int:
    """Check a shared operand; returns its row size in bytes."""
    if box.elem != atype:
        raise ShapeError(f"{what} holds {box.elem}, but the product multiplies {atype}",
                         hint="convert the operand before staging it")
    row_bytes = box.cols * ELEM_BYTES[box.elem]
    if row_bytes % 16 or box.cols % 8:
        raise UnsupportedError(f"ldmatrix reads 16-byte rows: {what} needs a multiple of 8 "
                               f"columns, has {box.cols}")
    return row_bytes


def _smem_a(e: Emitter, lanes: _Lanes, a: SharedBox, a_trans: bool) -> ALoader:
    """The A fragment of (64-row block ``b``, k-step ``kk``) by one ``ldmatrix.x4``
    (sec. 9.7.14.5.15): matrix ``j`` of lane group ``j = lane / 8`` is rows ``+8 (j & 1)``
    and k ``+8 (j >> 1)`` of the warp's m16k16 block, i.e. A registers a0..a3 in the
    order of sec. 9.7.14.5.8. A^T (``a_trans``) is read with ``.trans``."""
    rb, es, shared = _operand(a, a.elem, "A"), ELEM_BYTES[a.elem], _Shared(e, a)
    if not a_trans:  # row 16 w + (lane & 15), column 8 (lane >> 4)
        dyn = _lin(e, [(lanes.warp, 16 * rb), (lanes.bits(0, 15), rb),
                       (lanes.bits(4, 1), 8 * es)])
        return lambda b, kk: e.one(Ldmatrix(4, False),
                                   shared.addr(dyn, 64 * b * rb + 16 * kk * es))
    # A^T row (a k) 8 (lane >> 4) + (lane & 7), column (an m) 16 w + 8 ((lane >> 3) & 1)
    dyn = _lin(e, [(lanes.bits(4, 1), 8 * rb), (lanes.bits(0, 7), rb), (lanes.warp, 16 * es),
                   (lanes.bits(3, 1), 8 * es)])
    return lambda b, kk: e.one(Ldmatrix(4, True), shared.addr(dyn, 16 * kk * rb + 64 * b * es))


def _smem_b(e: Emitter, lanes: _Lanes, b: SharedBox, b_trans: bool, bn: int,
            ) -> Callable[[int], list[Value]]:
    """A loader of the ``reg<2xb32>`` B fragments of one k-step for every n8 block: one
    ``ldmatrix.x4`` per pair of n-blocks (matrices: (j, k+0), (j, k+8), (j+1, k+0),
    (j+1, k+8)), an ``.x2`` for an odd last one. Fragment register ``b0`` of lane ``l``
    is B[k 2(l%4)..+1, n l/4] (sec. 9.7.14.5.8), a row of B^T: hence ``.trans`` when
    the buffer holds B row-major (k-major rows) and no transpose for B^T."""
    rb, es, shared = _operand(b, b.elem, "B"), ELEM_BYTES[b.elem], _Shared(e, b)
    odd = (bn // 8) % 2 == 1
    if not b_trans:  # row (a k) lane & 15, column (an n) 8 (lane >> 4); .x2: lanes 0..15
        dyn4 = _lin(e, [(lanes.bits(0, 15), rb), (lanes.bits(4, 1), 8 * es)])
        dyn2 = _lin(e, [(lanes.bits(0, 15), rb)]) if odd else dyn4

        def static(kk: int, j: int) -> int:
            return 16 * kk * rb + 8 * j * es
    else:  # row (an n) 8 (lane >> 4) + (lane & 7), column (a k) 8 ((lane >> 3) & 1)
        dyn4 = _lin(e, [(lanes.bits(4, 1), 8 * rb), (lanes.bits(0, 7), rb),
                        (lanes.bits(3, 1), 8 * es)])
        dyn2 = _lin(e, [(lanes.bits(0, 7), rb), (lanes.bits(3, 1), 8 * es)]) if odd else dyn4

        def static(kk: int, j: int) -> int:
            return 8 * j * rb + 16 * kk * es

    def load(kk: int) -> list[Value]:
        frags: list[Value] = []
        for j in range(0, bn // 8, 2):
            num = 4 if j + 1 < bn // 8 else 2
            addr = shared.addr(dyn4 if num == 4 else dyn2, static(kk, j))
            regs = e.unpack(e.one(Ldmatrix(num, not b_trans), addr), "b32", num)
            frags += [e.pack(regs[i:i + 2], "b32") for i in range(0, num, 2)]
        return frags
    return load


def _products(e: Emitter, lanes: _Lanes, acc: list[Value], load_a: ALoader, b: SharedBox,
              b_trans: bool, atype: str, bm: int, bn: int, bk: int) -> list[Value]:
    """C += A @ B over k16 steps in ascending order: per step the B fragments, then per
    64-row block its A fragment and one ``mma.sync.m16n8k16`` per n8 block."""
    if atype not in MMA_TYPES:
        raise UnsupportedError(f"mma.sync m16n8k16 lowering takes bf16 or f16, not {atype}")
    if bm % 64 or bn % 8 or bk % 16 or bm <= 0 or bn <= 0 or bk <= 0:
        raise UnsupportedError(f"a {bm}x{bn}x{bk} product needs BM % 64, BN % 8 and BK % 16 "
                               "to be 0", hint="pad the tile sizes")
    if len(acc) != bm * bn // THREADS or any(v.type != _F32 for v in acc):
        raise ShapeError(f"a {bm}x{bn} accumulator is {bm * bn // THREADS} f32 registers "
                         f"per thread, got {len(acc)}")
    half = bn // 2
    c = [[e.pack(acc[b * half + 4 * j: b * half + 4 * j + 4], "f32") for j in range(bn // 8)]
         for b in range(bm // 64)]
    mma, load_b = MmaSync("m16n8k16", atype, atype), _smem_b(e, lanes, b, b_trans, bn)
    for kk in range(bk // 16):
        frags = load_b(kk)
        for blk in range(bm // 64):
            a = load_a(blk, kk)
            for j, frag in enumerate(frags):
                c[blk][j] = e.one(mma, a, frag, c[blk][j])
    return [r for row in c for v in row for r in e.unpack(v, "f32", 4)]


def mma_block(e: Emitter, acc: list[Value], a: SharedBox, b: SharedBox, *, a_trans: bool,
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
    lanes = _Lanes(e)
    return _products(e, lanes, acc, _smem_a(e, lanes, a, a_trans), b, b_trans, atype,
                     bm, bn, bk)


# ------------------------------------------------------------ register reuse (FA-2)
def acc_to_a(e: Emitter, acc: list[Value], bm: int, bn: int, atype: str = "bf16",
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


def mma_block_regs(e: Emitter, acc: list[Value], a_frags: list[list[Value]], b: SharedBox,
                   *, b_trans: bool, atype: str = "bf16") -> list[Value]:
    """``C[BM, D] += P @ V`` with P given as register fragments (:func:`acc_to_a`,
    ``BM = 64 len(a_frags)``, ``K = 16 len(a_frags[0])``) and V in shared memory
    (``K x D``, or ``D x K`` with ``b_trans``)."""
    bm, bk = 64 * len(a_frags), 16 * len(a_frags[0]) if a_frags else 0
    bn, bk_b = (b.rows, b.cols) if b_trans else (b.cols, b.rows)
    if bk != bk_b or any(len(r) != len(a_frags[0]) for r in a_frags):
        raise ShapeError(f"P fragments cover K = {bk} but V has K = {bk_b}")
    _operand(b, atype, "B")
    return _products(e, _Lanes(e), acc, lambda blk, kk: a_frags[blk][kk], b, b_trans,
                     atype, bm, bn, bk)


# --------------------------------------------------------------------------- stores
def _quad(e: Emitter, lanes: _Lanes) -> tuple[Value, Value]:
    """(row, column) of a thread's first register: ``16 w + lane / 4``, ``2 (lane % 4)``."""
    row = _lin(e, [(lanes.warp, 16), (lanes.bits(2, 7), 1)])
    return row, _lin(e, [(lanes.bits(0, 3), 2)])


def store_acc(e: Emitter, acc: list[Value], dst_base: Value, row_stride: int, bm: int,
              bn: int, elem: str = "f32") -> None:
    """Store a ``(BM, BN)`` accumulator to the row-major global box at ``dst_base``
    (``u64``, row stride ``row_stride`` elements), as ``f32`` or rounded (``cvt.rn``)
    to ``bf16``/``f16``. Adjacent column pairs go out as one ``st.global.v2.f32`` or
    one packed ``b32`` when ``row_stride`` is even; ``dst_base`` must then be aligned
    to the pair (8 bytes for f32, 4 for 16-bit types)."""
    if elem not in ("f32", "bf16", "f16"):
        raise UnsupportedError(f"store_acc writes f32, bf16 or f16, not {elem}")
    if bm % 64 or bn % 8 or len(acc) != bm * bn // THREADS:
        raise ShapeError(f"a {bm}x{bn} accumulator is {bm * bn // THREADS} registers, "
                         f"got {len(acc)}")
    es, lanes = ELEM_BYTES[elem], _Lanes(e)
    row, col = _quad(e, lanes)
    start = e.bin("mul", _lin(e, [(row, row_stride), (col, 1)]), e.const(es, "u32"), "u32",
                  "wide")
    base = e.add(dst_base, start, "u64")
    for r in range(0, len(acc), 2):
        b, i = divmod(r, bn // 2)
        off = ((64 * b + 8 * ((i >> 1) & 1)) * row_stride + 8 * (i >> 2)) * es
        addr, off = (base, off) if off < 2**31 else (e.add(base, e.const(off, "u64"), "u64"), 0)
        lo, hi = acc[r], acc[r + 1]
        if row_stride % 2:  # pairs are not aligned: one element at a time
            for k, v in enumerate((lo, hi)):
                v = v if elem == "f32" else e.cvt(v, elem, "f32", "rn")
                e.st("global", addr, v, elem, offset=off + k * es)
        elif elem == "f32":
            e.st("global", addr, e.pack([lo, hi], "f32"), "f32", vec=2, offset=off)
        else:
            word = e.pack([e.cvt([hi, lo], f"{elem}x2", "f32", "rn")], "b32")
            e.st("global", addr, word, "b32", offset=off)


def acc_rowcol(e: Emitter, bm: int, bn: int) -> list[tuple[Value, Value]]:
    """Per accumulator register, its ``(row, column)`` in the ``(BM, BN)`` tile as
    ``s32`` values (for masks); register order of :func:`tessera.lower.tiles.acc_coords`."""
    lanes = _Lanes(e)
    row0, col0 = (e.cvt(v, "s32", "u32") for v in _quad(e, lanes))

    def plus(v: Value, k: int) -> Value:
        return e.add(v, e.const(k, "s32"), "s32") if k else v

    rows = {(b, h): plus(row0, 64 * b + 8 * h) for b in range(bm // 64) for h in (0, 1)}
    cols = {(j, c): plus(col0, 8 * j + c) for j in range(bn // 8) for c in (0, 1)}
    out = []
    for r in range(bm * bn // THREADS):
        b, i = divmod(r, bn // 2)
        out.append((rows[b, (i >> 1) & 1], cols[i >> 2, i & 1]))
    return out


__all__ = ["MMA_TYPES", "acc_rowcol", "acc_to_a", "copy_async", "mma_block", "mma_block_regs",
           "store_acc", "swizzle_offset", "wait_async"]
