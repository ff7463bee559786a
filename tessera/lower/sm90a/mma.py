"""sm_90a lowering of shared-memory tiles, async copies and ``mma``: TMA + mbarrier +
``wgmma`` (the building blocks are in :mod:`tessera.lower.sm90a.gemm` and
:mod:`tessera.lower.sm90a.tma`).

* A 2-D shared buffer that an ``mma`` reads (``wgmma`` operand) is laid out the way
  TMA writes it: panels of a 32/64/128-byte swizzle span along its columns, aligned
  to the swizzle atom (:func:`operand_buffers` decides which buffers, before lowering).
* TMA copies complete through a **group ring** (:func:`ring_setup`, in the entry
  block): :data:`RING` mbarriers, and per thread two counters in shared memory, the
  copy groups it has committed and the groups it has waited for. Commit group ``g``
  (counting from 0) is phase ``g // RING`` of barrier ``g % RING``.
* ``tile.cp_async`` of a global box into such a buffer is one TMA load per panel,
  issued by thread 0 on the barrier of the group being formed; the group's bytes add
  up. Closing the group (``cp_commit_group``, or a wait or barrier with copies still
  open: :func:`tma_commit`) is thread 0's ``mbarrier.arrive.expect_tx`` of those bytes,
  and every thread counts it; at most ``RING - 1`` groups stay in flight. The counters
  are written through the generic proxy, so a commit or wait ends with a
  ``fence.proxy.async`` (which the kernel check wants before any later ``wgmma``). A
  ``cp_wait_group n`` or ``tile.barrier`` (:func:`tma_wait`) makes every thread wait
  for the phases of its groups until at most ``n`` are pending, then
  ``fence.proxy.async`` and ``bar.sync`` (``rules.block``). ``cp.async`` groups are
  committed and waited in step, so ``n`` means the same for both kinds of copy.
* ``mma`` of two such buffers is a ``wgmma`` sequence; a register operand (the ``P``
  of ``P @ V``) in the accumulator layout is ``wgmma``'s register A (``wgmma_rs``), any
  other is first staged into a swizzled scratch buffer (``bar.sync``, then
  ``st.shared`` + ``fence.proxy.async`` + ``bar.sync``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Value, walk
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.async_ops import (
    Fence,
    MbarrierArrive,
    MbarrierWait,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.gemm import (
    advance_descriptor,
    make_descriptor,
    operand_offset,
    stage_regs_to_shared,
    wgmma_block,
)
from tessera.lower.sm90a.tma import TmaCopy, copy_bytes, init_barriers, issue_copy, thread0
from tessera.lower.tiles import THREADS, SharedBox
from tessera.lower.values import Dist, Mem, elem_bytes
from tessera.numerics import dtype


def operand_buffers(fn: Function) -> set[Value]:
    """The ``tile.alloc_shared`` results that an ``mma`` reads (through loads,
    transposes and selections), which must be laid out for ``wgmma``."""
    source: dict[Value, set[Value]] = {}
    for instr in walk(fn.body):
        op = instr.op
        if isinstance(op, tile_memory.AllocShared):
            source[instr.results[0]] = {instr.results[0]}
        elif isinstance(op, (tile_memory.Load, tile_compute.Transpose, tile_memory.Select)):
            mems = instr.operands[1:] if isinstance(op, tile_memory.Select) else instr.operands[:1]
            found = set().union(*(source.get(v, set()) for v in mems))
            if found:
                source[instr.results[0]] = found
    out: set[Value] = set()
    for instr in walk(fn.body):
        if isinstance(instr.op, tile_compute.Mma):
            for v in instr.operands[:2]:
                out |= source.get(v, set())
    return out


def swizzle_span(shape: tuple[int, ...], element: Any) -> int:
    """The swizzle span of a wgmma operand buffer: its row bytes, at most 128."""
    row = shape[-1] * elem_bytes(element)
    for span in (128, 64, 32):
        if row % span == 0:
            return span
    raise UnsupportedError(f"a shared tile with {row}-byte rows cannot be a wgmma operand",
                           hint="use rows of a multiple of 32 bytes (16 bf16 elements)")


RING = 8  # mbarriers of the group ring: at most RING - 1 committed groups in flight


def ring_setup(low: Lowerer) -> None:
    """The group ring, in the entry block: ``RING`` mbarriers initialised by thread 0
    and, per thread, its two counters (groups committed, groups waited for) in shared
    memory, which only that thread reads and writes."""
    e = low.e
    # warp-specialised attention (attention.split): one ring a consumer warpgroup, whose
    # barriers the whole CTA initialised before it split
    wg = low.extra.get("consumer_wg")
    copies = wg.count if wg is not None else 1
    bars = (low.extra["tma_bars"] if wg is not None
            else low.shared_buffer("tma_bars", 8 * RING, 8, entry=True))
    ctrs = low.shared_buffer("tma_counters", 8 * 128 * copies, 8, entry=True)
    if copies > 1:
        bars = e.add(bars, e.mul(wg.index, e.const(8 * RING, "u32"), "u32"), "u32")
        ctrs = e.add(ctrs, e.mul(wg.index, e.const(8 * 128, "u32"), "u32"), "u32")
    mine = e.add(ctrs, e.bin("shl", e.sreg("tid.x"), e.const(3, "u32"), "u32"), "u32")
    zero = e.const(0, "u32")
    e.st("shared", mine, zero, "u32")
    e.st("shared", mine, zero, "u32", offset=4)
    if wg is None:
        init_barriers(e, bars, RING)
    e.op(Fence("proxy_async"))  # the counters are generic-proxy stores
    e.bar()
    low.extra["tma"] = (bars, mine)


def _ring_barrier(e: TargetEmitter, bars: Value, count: Value) -> Value:
    slot = e.bin("and", count, e.const(RING - 1, "u32"), "u32")
    return e.add(bars, e.bin("shl", slot, e.const(3, "u32"), "u32"), "u32")


def tma_copy(low: Lowerer, dst: Mem, src: Mem, box: SharedBox,
             at: list[Value] | None = None) -> None:
    """``tile.cp_async`` of a global box into a wgmma buffer: thread 0 issues one TMA
    load per swizzle panel on the barrier of the group being formed. ``at``: the box's
    (row, column) in the tensor, when it may lie partly outside it (TMA fills what is
    outside with zeros); else they are found from the view's offset."""
    e = low.em
    arg = src.meta.get("arg")
    if arg is None or len(src.shape) != 2 or src.strides[-1] != 1:
        raise UnsupportedError("TMA copies read 2-D row-major boxes of a kernel parameter",
                               loc=e.loc)
    esize = elem_bytes(src.element)
    width = box.swizzle // esize
    tmap = low.tensor_map(arg, box.elem, (box.rows, width), box.swizzle)
    stride = src.strides[0]
    if at is not None:
        row, col = at
    else:
        off = src.offset if src.offset is not None else e.const(0, "s32")
        row = e.bin("div", off, e.const(stride, "s32"), "s32")
        col = e.bin("rem", off, e.const(stride, "s32"), "s32")
    if src.meta.get("batch_rows"):
        batch = e.cvt(e.sreg("ctaid.y"), "s32", "u32")
        row = e.add(row, e.mul(batch, e.const(src.meta["batch_rows"], "s32"), "s32"), "s32")
    bars, mine = low.extra["tma"]
    copy = TmaCopy(box, tmap, col, row)
    nbytes = copy_bytes(copy)

    def issue(t: TargetEmitter) -> None:
        issue_copy(t, copy, _ring_barrier(t, bars, t.ld("shared", mine, "u32")))
    e.if_(thread0(e), issue)
    low.extra["tma_bytes"] = low.extra.get("tma_bytes", 0) + nbytes


def tma_commit(low: Lowerer, e: TargetEmitter, *, fence: bool = True) -> None:
    """Close the group being formed: thread 0 arrives on its barrier announcing the
    group's bytes (the loads may land before or after), and every thread counts it.
    Keeps at most ``RING - 1`` groups in flight by waiting for the oldest. ``fence``:
    end with ``fence.proxy.async`` (False when the caller's wait fences next)."""
    nbytes = low.extra.pop("tma_bytes", 0)
    bars, mine = low.extra["tma"]

    def arrive(t: TargetEmitter) -> None:
        t.op(MbarrierArrive(nbytes), [_ring_barrier(t, bars, t.ld("shared", mine, "u32"))])
    e.if_(thread0(e), arrive)
    e.st("shared", mine, e.add(e.ld("shared", mine, "u32"), e.const(1, "u32"), "u32"), "u32")
    tma_wait(low, e, RING - 1)
    if fence:  # an mma may follow the commit with no wait in between
        e.op(Fence("proxy_async"))


def tma_wait(low: Lowerer, e: TargetEmitter, n: int) -> None:
    """Every thread waits for the groups it committed until at most ``n`` are pending:
    group ``g`` is the phase ``g // RING`` (parity ``(g // RING) & 1``) of barrier
    ``g % RING``."""
    if "tma" not in low.extra:
        return
    bars, mine = low.extra["tma"]
    issued = e.ld("shared", mine, "u32")
    done = e.ld("shared", mine, "u32", offset=4)
    limit = e.bin("sub", issued, e.const(n, "u32"), "u32") if n else issued
    shift = (RING - 1).bit_length()

    def pending(c: TargetEmitter, k: Value) -> Value:
        if not n:
            return c.setp("lt", k, limit, "u32")
        # issued - n may wrap below zero: compare as signed distances
        gap = c.cvt(c.bin("sub", limit, k, "u32"), "s32", "u32")
        return c.setp("gt", gap, c.const(0, "s32"), "s32")

    def step(b: TargetEmitter, k: Value) -> list[Value]:
        parity = b.bin("and", b.bin("shr", k, b.const(shift, "u32"), "u32"),
                       b.const(1, "u32"), "u32")
        b.op(MbarrierWait(), [_ring_barrier(b, bars, k), parity])
        return [b.add(k, b.const(1, "u32"), "u32")]
    (final,) = e.while_([done], pending, step)
    # the counters are written through the generic proxy; wgmma never reads them, but the
    # kernel check does not tell them from operands: every caller fences after this
    # store (tma_commit, rules.block.wait_all), as ring_setup does after the zeros
    e.st("shared", mine, final, "u32", offset=4)


def wgmma_smem(low: Lowerer, a: SharedBox, b: SharedBox, a_trans: bool, b_trans: bool,
               regs: list[Value]) -> list[Value]:
    """``acc += A @ B`` with both operands in wgmma buffers."""
    if a_trans:
        raise UnsupportedError("a transposed A operand is not lowered for sm_90a",
                               hint="store A as (M, K)", loc=low.em.loc)
    return wgmma_block(low.em, regs, a, b, b_trans=b_trans, atype=a.elem)


def a_fragments(e: TargetEmitter, values: Sequence[Value], rows: int, cols: int,
                elem: str) -> list[list[Value]]:
    """The register A operands of ``wgmma_rs`` for a ``(rows, cols)`` f32 tile in the
    accumulator layout: per 64-row block, per k16 step ``s``, the four ``b32`` registers
    packing accumulator registers ``8s .. 8s + 7`` in pairs, rounded to ``elem``
    (:mod:`tessera.ir.dialects.target.wgmma_rs` says why that is the A layout). A pair
    of values a cast just rounded to bf16 converts their sources with one
    ``cvt.rn.bf16x2.f32 d, hi, lo`` (the first source goes to the upper half)."""
    from tessera.lower.rules.scalar import rounded_from

    half = cols // 2
    out = []
    for blk in range(rows // 64):
        mine = values[blk * half:(blk + 1) * half]
        steps = []
        for s in range(cols // 16):
            pairs = []
            for r in range(8 * s, 8 * s + 8, 2):
                lo_src, hi_src = (rounded_from(v, elem) for v in mine[r:r + 2])
                if lo_src is not None and hi_src is not None:
                    word = e.cvt([hi_src, lo_src], f"{elem}x2", "f32", "rn")
                    pairs.append(e.pack([word], "b32"))
                    continue
                lo, hi = (v if v.type == RegType(elem) else e.cvt(v, elem, "f32", "rn")
                          for v in mine[r:r + 2])
                pairs.append(e.pack([lo, hi], "b32"))
            steps.append(e.pack(pairs, "b32"))
        out.append(steps)
    return out


def wgmma_rs_block(e: TargetEmitter, acc: Sequence[Value], a: list[list[Value]],
                   b: SharedBox, *, b_trans: bool, elem: str) -> list[Value]:
    """``acc += A @ B`` with A from :func:`a_fragments` (one 64-row block per entry)
    and B a wgmma buffer: :func:`issue_rs_block`, then ``wait_group 0``."""
    bn = b.rows if b_trans else b.cols
    blocks = issue_rs_block(e, acc, a, b, b_trans=b_trans, elem=elem)
    e.op(WgmmaWait(0))
    return [v for blk in blocks for v in e.unpack(blk, "f32", bn // 2)]


def issue_rs_block(e: TargetEmitter, acc: Sequence[Value], a: list[list[Value]],
                   b: SharedBox, *, b_trans: bool, elem: str) -> list[Value]:
    """Issue ``acc += A @ B`` (:func:`wgmma_rs_block`) without waiting; the packed
    accumulators of each 64-row block, in flight."""
    half = (b.rows if b_trans else b.cols) // 2
    blocks = [e.pack(list(acc[i * half:(i + 1) * half]), "f32") for i in range(len(a))]
    return issue_packed_rs(e, blocks, a, b, b_trans=b_trans, elem=elem)


def issue_packed_rs(e: TargetEmitter, blocks: Sequence[Value], a: list[list[Value]],
                    b: SharedBox, *, b_trans: bool = False, elem: str | None = None
                    ) -> list[Value]:
    """``wgmma.fence``, one ``wgmma_rs`` per k16 step and 64-row block into the packed
    accumulators ``blocks`` (each chain adds into its block's registers in place),
    ``commit_group``; the products, in flight."""
    bn = b.rows if b_trans else b.cols
    db = make_descriptor(e, b, k_major=b_trans)
    out = list(blocks)
    e.op(WgmmaFence())  # orders the A packs and accumulator moves before the wgmma
    on = e.const(1, "pred")
    op = WgmmaRegA(bn, elem or b.elem, b.elem, 0, 0 if b_trans else 1)
    for step in range(len(a[0])):
        db_k = advance_descriptor(e, db, operand_offset(b, 16 * step, 0, k_major=b_trans))
        for i, frags in enumerate(a):
            out[i] = e.one(op, out[i], frags[step], db_k, on)
    e.op(WgmmaCommit())
    return out


#: ``P`` values a thread holds as wgmma's register A when nothing says otherwise (a
#: 64x64 block: the one-warpgroup attention kernel's registers allow no more)
REGISTER_A_VALUES = 32


def wgmma_regs(low: Lowerer, a: Dist, b: SharedBox, b_trans: bool,
               regs: list[Value]) -> list[Value]:
    """``acc += P @ B`` with ``P`` in registers: ``P`` in the accumulator layout of a
    previous product is wgmma's register A operand (FlashAttention-3's ``P @ V``) where
    its fragments fit beside the accumulators (config ``register_a=False``: never);
    otherwise it is staged through a swizzled scratch buffer."""
    e = low.em
    rows, cols = a.layout.rows, a.layout.cols
    register_a = dict(low.fn.attrs.get("config", ())).get("register_a", True)
    width = b.rows if b_trans else b.cols
    # A's fragments stay live until the wgmma group retires, beside the product's
    # accumulators and the caller's: past REGISTER_A_VALUES P values and 64 accumulators
    # a thread (a 64x64 P, a head dimension of 128) ptxas spills or halves occupancy; a
    # consumer warpgroup with more registers says how many it holds
    limit = low.extra.get("register_a_values", REGISTER_A_VALUES)
    fits = rows * cols // THREADS <= limit and rows * width // THREADS <= 64
    if register_a and fits and b.elem in ("bf16", "f16") and rows % 64 == 0 and \
            cols % 16 == 0:
        frags = a_fragments(e, a.regs, rows, cols, b.elem)
        return wgmma_rs_block(e, regs, frags, b, b_trans=b_trans, elem=b.elem)
    span = swizzle_span((rows, cols), dtype("bf16"))
    base = low.shared_buffer("stage", rows * cols * 2, 1024, entry=True)
    box = SharedBox(base, rows, cols, b.elem, span, 1024)
    e.bar()  # the previous product has finished reading the scratch in every warp
    stage_regs_to_shared(e, a.regs, rows, cols, box)
    return wgmma_block(e, regs, box, b, b_trans=b_trans, atype=b.elem)


__all__ = ["REGISTER_A_VALUES", "RING", "a_fragments", "issue_packed_rs", "issue_rs_block",
           "operand_buffers", "ring_setup", "swizzle_span", "tma_commit", "tma_copy", "tma_wait",
           "wgmma_regs", "wgmma_rs_block", "wgmma_smem"]
