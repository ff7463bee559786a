"""sm_90a matrix building blocks: wgmma descriptors, a TMA + mbarrier ring, wgmma blocks.

Everything here emits Target IR through an :class:`~tessera.lower.emit.Emitter` for one
CTA of 128 threads (one warpgroup, :mod:`tessera.lower.tiles`).

**Operand buffers.** A wgmma shared operand is a :class:`SharedBox` of ``rows x cols``
elements with a 32/64/128-byte swizzle, stored the way TMA writes it: in *panels* of
``span`` bytes along ``cols`` (one panel when ``cols * esize == span``); panel ``p``
holds columns ``[p*w, (p+1)*w)`` (``w = span / esize``) as a ``rows x w`` row-major block
at ``base + p * rows * span``, swizzled on absolute addresses (PTX ISA 8.x sec.
9.7.15.5.1.2 "Shared Memory Matrix Layout"). ``A`` is ``(BM, BK)`` and ``B^T`` is
``(BN, BK)``: K-major, K along ``cols``. ``B`` given as ``(BK, BN)`` is MN-major (N along
``cols``) and needs wgmma's transpose bit (16-bit types only). Buffers must be aligned to
``8 * span`` bytes so that the swizzle pattern starts at the buffer (base offset 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessera.arch.descriptor import encode_descriptor
from tessera.arch.errors import AlignmentError
from tessera.arch.swizzle import Swizzle
from tessera.errors import ArgumentError, ShapeError, UnsupportedError
from tessera.ir.core import Value
from tessera.ir.target import TensorMapType
from tessera.ir.target_async import (
    MMA_K,
    Fence,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.target_ops import SharedAlloc
from tessera.lower.emit import Emitter
from tessera.lower.tiles import ELEM_BYTES, THREADS, SharedBox

#: the start-address field keeps address bits 4..17 (PTX ISA 'Matrix Descriptor Format')
_ADDR_MASK = 0x3FFFF
_LBO_UNUSED = 16  # K-major swizzled operands never use LBO; libraries store 1 (encoded)


@dataclass(frozen=True)
class Geometry:
    """Static facts of a swizzled operand box: element bytes, swizzle span, panels."""

    esize: int
    span: int
    panels: int
    rows: int

    @property
    def panel_bytes(self) -> int:
        """Bytes of one ``rows x span`` panel."""
        return self.rows * self.span

    @property
    def width(self) -> int:
        """Elements per panel row."""
        return self.span // self.esize


def geometry(box: SharedBox) -> Geometry:
    """Check that ``box`` is a wgmma-readable swizzled buffer and describe its panels."""
    if box.elem not in ELEM_BYTES or ELEM_BYTES[box.elem] > 2:
        raise UnsupportedError(f"a wgmma shared operand holds 1- or 2-byte elements, not "
                               f"{box.elem}", hint="stage f32 data as bf16/f16 first")
    if box.swizzle not in (32, 64, 128):
        raise UnsupportedError(f"wgmma operands here need a 32/64/128-byte swizzle, got "
                               f"{box.swizzle}", hint="load the box with a swizzled tensor map")
    esize = ELEM_BYTES[box.elem]
    row_bytes = box.cols * esize
    if row_bytes % box.swizzle or box.rows % 8:
        raise ShapeError(f"a {box.rows}x{box.cols} {box.elem} box does not tile into "
                         f"{box.swizzle}-byte swizzle panels of 8-row groups",
                         hint=f"use cols a multiple of {box.swizzle // esize} and rows a "
                              "multiple of 8")
    atom = Swizzle(box.swizzle).atom_bytes
    if box.align % atom:
        raise AlignmentError(f"a {box.swizzle}-byte swizzled operand must be {atom}-byte "
                             f"aligned, the box is only {box.align}-byte aligned (PTX ISA "
                             "'Matrix Descriptor Format': the pattern starts on that boundary)",
                             hint=f"allocate it with align={atom}")
    return Geometry(esize, box.swizzle, row_bytes // box.swizzle, box.rows)


def operand_offset(box: SharedBox, k: int, mn: int, *, k_major: bool) -> int:
    """Byte offset from ``box.base`` of the operand whose corner is element ``(mn, k)``.

    K-major (K along ``cols``): ``mn`` must be a multiple of 8 and ``k * esize`` of 16.
    MN-major (K along ``rows``): ``k`` a multiple of 8, ``mn`` of the panel width.
    """
    g = geometry(box)
    if k_major:
        kb = k * g.esize
        if mn % 8 or kb % 16 or not (0 <= mn < box.rows and 0 <= k < box.cols):
            raise ShapeError(f"K-major operand corner (mn={mn}, k={k}) is not on a core matrix")
        return (kb // g.span) * g.panel_bytes + kb % g.span + mn * g.span
    if k % 8 or mn % g.width or not (0 <= k < box.rows and 0 <= mn < box.cols):
        raise ShapeError(f"MN-major operand corner (mn={mn}, k={k}) is not on a swizzle atom")
    return k * g.span + (mn // g.width) * g.panel_bytes


def descriptor_fields(box: SharedBox, *, k_major: bool) -> tuple[int, int]:
    """``(leading byte offset, stride byte offset)`` of the canonical layouts (PTX ISA sec.
    9.7.15.5.1.2; CUTLASS ``make_gmma_desc``): SBO is the 8-row (K-major) or 8-k (MN-major)
    group stride ``8 * span``; LBO is the MN panel stride of an MN-major operand."""
    g = geometry(box)
    return (_LBO_UNUSED if k_major else g.panel_bytes), 8 * g.span


def make_descriptor(e: Emitter, box: SharedBox, k: int = 0, mn: int = 0, *,
                    k_major: bool = True) -> Value:
    """The ``u64`` wgmma matrix descriptor of the operand at element ``(mn, k)`` of ``box``:
    ``((addr & 0x3FFFF) >> 4) | LBO>>4 << 16 | SBO>>4 << 32 | layout << 62`` computed from
    the box's ``u32`` address (the static fields are one immediate)."""
    lbo, sbo = descriptor_fields(box, k_major=k_major)
    static = encode_descriptor(0, lbo, sbo, Swizzle(box.swizzle))
    addr = box.base
    off = operand_offset(box, k, mn, k_major=k_major)
    if off:
        addr = e.add(addr, e.const(off, "u32"), "u32")
    field = e.bin("shr", e.bin("and", addr, e.const(_ADDR_MASK, "u32"), "u32"),
                  e.const(4, "u32"), "u32")
    # the start field ends at bit 13, so adding the static fields cannot carry into them
    return e.add(e.cvt(field, "u64", "u32"), e.const(static, "u64"), "u64")


def advance_descriptor(e: Emitter, desc: Value, nbytes: int) -> Value:
    """``desc`` with its start address moved by ``nbytes`` (a multiple of 16): the k-step
    rule, e.g. +32 bytes (+2 encoded) per k16 step inside a 128B atom."""
    if nbytes % 16:
        raise ArgumentError(f"a descriptor moves in 16-byte units, not {nbytes} bytes")
    return desc if nbytes == 0 else e.add(desc, e.const(nbytes >> 4, "u64"), "u64")


# ------------------------------------------------------------------------ TMA, mbarrier
def _thread0(e: Emitter) -> Value:
    return e.setp("eq", e.sreg("tid.x"), e.const(0, "u32"), "u32")


def tma_setup(e: Emitter, n_barriers: int, sym: str = "mbar") -> list[Value]:
    """``n_barriers`` shared mbarriers (8 bytes each, 8-byte aligned), initialised by
    thread 0 for one arrival, the init fenced and the CTA synchronised (PTX ISA sec.
    9.7.13.15.9; ``fence.mbarrier_init`` then ``bar.sync`` before any use)."""
    if n_barriers < 1:
        raise ArgumentError(f"tma_setup needs at least one barrier, not {n_barriers}")
    base = e.one(SharedAlloc(sym, 8 * n_barriers, 8))
    bars = [base] + [e.add(base, e.const(8 * i, "u32"), "u32") for i in range(1, n_barriers)]

    def init(t: Emitter) -> None:
        for bar in bars:
            t.op(MbarrierInit(1), [bar])

    e.if_(_thread0(e), init)
    e.op(Fence("mbarrier_init"))
    e.bar()
    return bars


@dataclass(frozen=True)
class TmaCopy:
    """One TMA box copy: the tensor-map box at ``(col, row)`` (``s32`` element
    coordinates of the global tensor) into ``dst``. A ``dst`` wider than the map's box
    is filled panel by panel (``dst.cols / box cols`` copies at ``col + p * box cols``)."""

    dst: SharedBox
    tmap: Value
    col: Value
    row: Value


def _panels(copy: TmaCopy) -> tuple[int, int, int]:
    """``(panels, panel columns, box bytes)`` of one copy, after checking the map."""
    t = copy.tmap.type
    if not isinstance(t, TensorMapType):
        raise ArgumentError(f"a TMA copy reads a tensor map, got a value of type {t}")
    d = copy.dst
    rows, cols = t.box
    if t.elem not in ELEM_BYTES:
        raise UnsupportedError(f"TMA copies of {t.elem} elements are not supported here",
                               hint=f"use one of {', '.join(ELEM_BYTES)}")
    if (t.elem, t.swizzle, rows) != (d.elem, d.swizzle, d.rows) or d.cols % cols:
        raise ShapeError(f"tensor map {t} cannot fill a {d.rows}x{d.cols} {d.elem} box with "
                         f"swizzle {d.swizzle}", hint="match element type, swizzle and rows; "
                         "make the box columns a multiple of the map's")
    return d.cols // cols, cols, rows * cols * ELEM_BYTES[t.elem]


def tma_load_many(e: Emitter, copies: Sequence[TmaCopy | tuple[SharedBox, Value, Value, Value]],
                  bar: Value) -> None:
    """Thread 0 announces the bytes of all ``copies`` with one ``mbarrier.arrive.expect_tx``
    on ``bar`` and issues them (``cp.async.bulk.tensor``): the barrier's phase completes
    when every byte has landed (PTX ISA sec. 9.7.13.15.12, 9.7.9.27). Loads sharing a
    phase must go through one call: the barrier expects one arrival per phase. A copy is a
    :class:`TmaCopy` or a ``(dst, tmap, col, row)`` tuple."""
    plan = [(c, *_panels(c)) for c in (x if isinstance(x, TmaCopy) else TmaCopy(*x)
                                       for x in copies)]
    tx = sum(n * nbytes for _, n, _, nbytes in plan)

    def issue(t: Emitter) -> None:
        t.op(MbarrierArrive(tx), [bar])
        for c, n, cols, nbytes in plan:
            for p in range(n):
                dst = c.dst.base if p == 0 else t.add(c.dst.base, t.const(p * nbytes, "u32"),
                                                      "u32")
                col = c.col if p == 0 else t.add(c.col, t.const(p * cols, "s32"), "s32")
                t.op(TmaLoad(), [dst, c.tmap, col, c.row, bar])

    e.if_(_thread0(e), issue)


def tma_load(e: Emitter, dst: SharedBox, tmap: Value, col: Value, row: Value,
             bar: Value) -> None:
    """One box copy on its own barrier phase (see :func:`tma_load_many`)."""
    tma_load_many(e, [TmaCopy(dst, tmap, col, row)], bar)


def mbar_wait(e: Emitter, bar: Value, phase: Value) -> None:
    """Every thread waits until ``bar``'s phase of parity ``phase`` (``u32`` 0/1) has
    completed (``mbarrier.try_wait.parity`` loop, PTX ISA sec. 9.7.13.15.16)."""
    e.op(MbarrierWait(), [bar, phase])


@dataclass(frozen=True)
class Pipeline:
    """An ``S``-stage ring of A/B shared tiles fed by TMA, one mbarrier per stage.

    Stage ``s`` holds K-tile ``kt`` when ``kt % S == s``; its barrier completes one phase
    per fill, so the wait for K-tile ``kt`` uses parity ``(kt // S) & 1`` (the parity
    flips each time the stage is reused). A is ``(bm, bk)``, B is ``(bn, bk)`` when
    ``b_trans`` else ``(bk, bn)``; buffers are ``8 * swizzle``-byte aligned."""

    stages: int
    a: SharedBox  # stage 0; stage s is at base + s * a_bytes
    b: SharedBox
    bars: tuple[Value, ...]
    a_tmap: Value
    b_tmap: Value
    b_trans: bool

    @classmethod
    def create(cls, e: Emitter, stages: int, a_tmap: Value, b_tmap: Value, bm: int, bn: int,
               bk: int, *, b_trans: bool, sym: str = "ring") -> Pipeline:
        """Allocate the ring (``{sym}_a``, ``{sym}_b``, ``{sym}_bar``) and its barriers."""
        ta, tb = a_tmap.type, b_tmap.type
        if not (isinstance(ta, TensorMapType) and isinstance(tb, TensorMapType)):
            raise ArgumentError("Pipeline.create takes two tensor-map values")
        if stages < 1:
            raise ArgumentError(f"a pipeline needs at least one stage, not {stages}")
        boxes = []
        for name, t, rows, cols in (("a", ta, bm, bk), ("b", tb, *((bn, bk) if b_trans
                                                                  else (bk, bn)))):
            align = max(128, Swizzle(t.swizzle).atom_bytes)
            size = rows * cols * ELEM_BYTES[t.elem]
            base = e.one(SharedAlloc(f"{sym}_{name}", stages * size, align))
            boxes.append(SharedBox(base, rows, cols, t.elem, t.swizzle, align))
        bars = tma_setup(e, stages, f"{sym}_bar")
        return cls(stages, boxes[0], boxes[1], tuple(bars), a_tmap, b_tmap, b_trans)

    def _at(self, e: Emitter, box: SharedBox, stage: int | Value) -> SharedBox:
        size = box.rows * box.cols * ELEM_BYTES[box.elem]
        if isinstance(stage, int):
            base = box.base if stage == 0 else e.add(box.base, e.const(stage * size, "u32"),
                                                     "u32")
        else:
            base = e.add(box.base, e.mul(stage, e.const(size, "u32"), "u32"), "u32")
        return SharedBox(base, box.rows, box.cols, box.elem, box.swizzle, box.align)

    def a_box(self, e: Emitter, stage: int | Value) -> SharedBox:
        """The A tile of ``stage`` (an int or a ``u32`` value)."""
        return self._at(e, self.a, stage)

    def b_box(self, e: Emitter, stage: int | Value) -> SharedBox:
        """The B (or B^T) tile of ``stage``."""
        return self._at(e, self.b, stage)

    def barrier(self, e: Emitter, stage: int | Value) -> Value:
        """The mbarrier of ``stage``."""
        if isinstance(stage, int):
            return self.bars[stage]
        return e.add(self.bars[0], e.mul(stage, e.const(8, "u32"), "u32"), "u32")

    def slot(self, e: Emitter, kt: Value) -> tuple[Value, Value]:
        """``(stage, parity)`` (``u32``) of K-tile ``kt`` (``s32``)."""
        k = e.cvt(kt, "u32", "s32")
        s = e.const(self.stages, "u32")
        return e.bin("rem", k, s, "u32"), e.bin("and", e.bin("div", k, s, "u32"),
                                                 e.const(1, "u32"), "u32")

    def issue(self, e: Emitter, stage: int | Value, k: Value, m: Value, n: Value) -> None:
        """Thread 0 loads A rows ``m..`` and B columns ``n..`` of the K-tile starting at
        element ``k`` (``s32`` values) into ``stage``, both on the stage's barrier."""
        a, b = self.a_box(e, stage), self.b_box(e, stage)
        bcopy = TmaCopy(b, self.b_tmap, k, n) if self.b_trans else TmaCopy(b, self.b_tmap, n, k)
        tma_load_many(e, [TmaCopy(a, self.a_tmap, k, m), bcopy], self.barrier(e, stage))

    def wait(self, e: Emitter, stage: int | Value, phase: Value) -> None:
        """All threads wait for ``stage``'s fill of parity ``phase``."""
        mbar_wait(e, self.barrier(e, stage), phase)

    def mainloop(self, e: Emitter, acc: Sequence[Value], m: Value, n: Value, k_tiles: int,
                 *, scale_d_first: bool = False) -> list[Value]:
        """The pipelined K loop: fill ``min(S, k_tiles)`` stages, then per K-tile wait,
        ``wgmma_block``, ``bar.sync`` (every warp is done reading the stage) and refill the
        stage with K-tile ``kt + S``. Returns the accumulators. ``scale_d_first`` passes
        scale-d = ``kt != 0`` so ``acc`` need not be zero."""
        bk = self.a.cols
        atype = self.a.elem
        for kt in range(min(self.stages, k_tiles)):
            self.issue(e, kt, e.const(kt * bk, "s32"), m, n)

        def body(t: Emitter, kt: Value, *carried: Value) -> list[Value]:
            stage, parity = self.slot(t, kt)
            self.wait(t, stage, parity)
            first = t.setp("ne", kt, t.const(0, "s32"), "s32") if scale_d_first else None
            out = wgmma_block(t, carried, self.a_box(t, stage), self.b_box(t, stage),
                              b_trans=self.b_trans, atype=atype, scale_d=first)
            t.bar()
            nxt = t.add(kt, t.const(self.stages, "s32"), "s32")
            refill = t.setp("lt", nxt, t.const(k_tiles, "s32"), "s32")
            t.if_(refill, lambda u: self.issue(u, stage, u.mul(nxt, u.const(bk, "s32"),
                                                               "s32"), m, n))
            return out

        return e.for_(e.const(0, "s32"), e.const(k_tiles, "s32"), e.const(1, "s32"),
                      list(acc), body)


# ----------------------------------------------------------------------------- wgmma
def _tid_parts(e: Emitter) -> tuple[Value, Value, Value]:
    """``(w, g, q)`` of this thread: warp, lane // 4, lane % 4 (all ``u32``)."""
    tid = e.sreg("tid.x")
    lane = e.bin("and", tid, e.const(31, "u32"), "u32")
    return (e.bin("shr", tid, e.const(5, "u32"), "u32"),
            e.bin("shr", lane, e.const(2, "u32"), "u32"),
            e.bin("and", lane, e.const(3, "u32"), "u32"))


def _check_acc(acc: Sequence[Value], bm: int, bn: int) -> None:
    if bm % 64 or bn % 8 or not 8 <= bn <= 256:
        raise ShapeError(f"a {bm}x{bn} accumulator is not m64nN blocks",
                         hint="BM a multiple of 64, BN a multiple of 8 up to 256")
    if len(acc) != bm * bn // THREADS:
        raise ShapeError(f"a {bm}x{bn} accumulator holds {bm * bn // THREADS} values per "
                         f"thread, got {len(acc)}")


def wgmma_block(e: Emitter, acc: Sequence[Value], a: SharedBox, b: SharedBox, *,
                b_trans: bool, atype: str = "bf16", scale_d: Value | None = None,
                ) -> list[Value]:
    """``acc += A @ B`` over the whole K of ``a`` with ``wgmma.mma_async``; returns the
    new accumulators in :func:`~tessera.lower.tiles.acc_coords` order.

    ``a`` is ``(BM, BK)`` K-major; ``b`` is ``B^T`` ``(BN, BK)`` K-major when ``b_trans``,
    else ``B`` ``(BK, BN)`` MN-major. ``scale_d`` (a predicate) is wgmma's scale-d for
    the first k-step: false makes it overwrite the accumulator, so it need not be zeroed.
    Emits ``wgmma.fence``, one ``wgmma`` per k-step and 64-row block, ``commit_group`` and
    ``wait_group 0`` (PTX ISA sec. 9.7.15.6)."""
    bm, bk = a.rows, a.cols
    bn = b.rows if b_trans else b.cols
    if (b.cols if b_trans else b.rows) != bk:
        raise ShapeError(f"A is {bm}x{bk} but B{'^T' if b_trans else ''} is "
                         f"{b.rows}x{b.cols}: the K extents differ")
    if a.elem != atype or atype not in MMA_K:
        raise UnsupportedError(f"wgmma A type {atype!r} with a {a.elem} box")
    if not b_trans and ELEM_BYTES[b.elem] != 2:
        raise UnsupportedError("an MN-major (row-major K x N) B needs 16-bit elements "
                               "(PTX ISA sec. 9.7.15.5: imm-trans-b is for .f16/.bf16)",
                               hint="store 8-bit B as N x K and pass b_trans=True")
    _check_acc(acc, bm, bn)
    ks = MMA_K[atype]
    if bk % ks:
        raise ShapeError(f"BK={bk} is not a multiple of the wgmma k{ks}")
    half = bn // 2
    da = make_descriptor(e, a)
    db = make_descriptor(e, b, k_major=b_trans)
    blocks = [e.pack(list(acc[i * half:(i + 1) * half]), "f32") for i in range(bm // 64)]
    # the packs above touch the accumulators: the fence orders them before the wgmma
    e.op(WgmmaFence())
    on = e.const(1, "pred")
    op = Wgmma(bn, atype, b.elem, 0, 0 if b_trans else 1)
    for step in range(bk // ks):
        k = step * ks
        db_k = advance_descriptor(e, db, operand_offset(b, k, 0, k_major=b_trans))
        p = scale_d if step == 0 and scale_d is not None else on
        for i in range(bm // 64):
            da_k = advance_descriptor(e, da, operand_offset(a, k, 64 * i, k_major=True))
            blocks[i] = e.one(op, blocks[i], da_k, db_k, p)
    e.op(WgmmaCommit())
    e.op(WgmmaWait(0))
    return [v for blk in blocks for v in e.unpack(blk, "f32", half)]


def stage_regs_to_shared(e: Emitter, values: Sequence[Value], bm: int, bn: int,
                         dst: SharedBox) -> None:
    """Write a ``(bm, bn)`` f32 tile held in the accumulator layout into ``dst`` as
    ``dst.elem`` (bf16/f16, rounded to nearest even), in the panel + swizzle layout a
    following wgmma reads as a K-major A operand; then ``fence.proxy.async`` and
    ``bar.sync`` so the async proxy sees the generic-proxy stores (PTX ISA sec. 9.7.13.4)."""
    _check_acc(values, bm, bn)
    if (dst.rows, dst.cols) != (bm, bn) or dst.elem not in ("bf16", "f16"):
        raise ShapeError(f"staging a {bm}x{bn} tile needs a {bm}x{bn} bf16/f16 box, got "
                         f"{dst.rows}x{dst.cols} {dst.elem}")
    g = geometry(dst)
    w, gq, q = _tid_parts(e)
    row = e.add(e.mul(w, e.const(16, "u32"), "u32"), gq, "u32")
    # row & 7 == g: the 128-byte-row index bits the swizzle XORs into the chunk index
    shift = {128: 0, 64: 1, 32: 2}[g.span]
    mask = (g.span // 16) - 1
    x = e.bin("shl", e.bin("and", e.bin("shr", gq, e.const(shift, "u32"), "u32"),
                           e.const(mask, "u32"), "u32"), e.const(4, "u32"), "u32")
    t_off = e.add(e.mul(row, e.const(g.span, "u32"), "u32"),
                  e.mul(q, e.const(2 * g.esize, "u32"), "u32"), "u32")
    t_addr = e.add(dst.base, t_off, "u32")
    chunk_addr = [e.add(t_addr, e.bin("xor", e.const(16 * c, "u32"), x, "u32"), "u32")
                  for c in range(g.span // 16)]
    half = bn // 2
    for r in range(0, len(values), 2):
        blk, i = divmod(r, half)
        h, j = (i >> 1) & 1, i >> 2  # register pair (i, i+1): row +8h, columns 8j + 2q
        col_bytes = 8 * j * g.esize
        static = (col_bytes // g.span) * g.panel_bytes + (64 * blk + 8 * h) * g.span
        lo, hi = (e.cvt(v, dst.elem, "f32", "rn") for v in values[r:r + 2])
        e.st("shared", chunk_addr[(col_bytes % g.span) // 16], e.pack([lo, hi], "b32"),
             "b32", offset=static)
    e.op(Fence("proxy_async"))
    e.bar()


def store_acc90(e: Emitter, acc: Sequence[Value], dst_base: Value, row_stride: int,
                bm: int, bn: int, elem: str = "f32") -> None:
    """``st.global`` a ``(bm, bn)`` accumulator tile to the row-major tensor whose element
    (0, 0) of the tile is at ``u64`` ``dst_base`` (``row_stride`` elements per row), as
    ``elem`` (f32, or bf16/f16 rounded to nearest even)."""
    _check_acc(acc, bm, bn)
    if elem not in ("f32", "bf16", "f16"):
        raise UnsupportedError(f"store_acc90 stores f32, bf16 or f16, not {elem}")
    esize = ELEM_BYTES[elem]
    if elem != "f32" and row_stride % 2:
        raise ShapeError(f"16-bit stores go in 4-byte pairs: row stride {row_stride} must "
                         "be even")
    w, gq, q = _tid_parts(e)
    row = e.add(e.mul(w, e.const(16, "u32"), "u32"), gq, "u32")
    off = e.add(e.mul(row, e.const(row_stride * esize, "u32"), "u32"),
                e.mul(q, e.const(2 * esize, "u32"), "u32"), "u32")
    addr = e.add(dst_base, e.cvt(off, "u64", "u32"), "u64")
    half = bn // 2
    for r in range(0, len(acc), 2):
        blk, i = divmod(r, half)
        h, j = (i >> 1) & 1, i >> 2
        static = ((64 * blk + 8 * h) * row_stride + 8 * j) * esize
        if elem != "f32":
            lo, hi = (e.cvt(v, elem, "f32", "rn") for v in acc[r:r + 2])
            e.st("global", addr, e.pack([lo, hi], "b32"), "b32", offset=static)
        elif row_stride % 2 == 0:  # 8-byte aligned pairs: one vector store
            e.st("global", addr, e.pack(list(acc[r:r + 2]), "f32"), "f32", vec=2,
                 offset=static)
        else:
            for d in (0, 1):
                e.st("global", addr, acc[r + d], "f32", offset=static + 4 * d)


__all__ = ["Geometry", "Pipeline", "TmaCopy", "advance_descriptor", "descriptor_fields", "geometry",
           "make_descriptor", "mbar_wait", "operand_offset", "stage_regs_to_shared",
           "store_acc90", "tma_load", "tma_load_many", "tma_setup", "wgmma_block"]
