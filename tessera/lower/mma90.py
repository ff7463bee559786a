"""sm_90a lowering of shared-memory tiles, async copies and ``mma``: TMA + mbarrier +
``wgmma`` (the building blocks are in :mod:`tessera.lower.gemm90`).

* A 2-D shared buffer that an ``mma`` reads (``wgmma`` operand) is laid out the way
  TMA writes it: panels of a 32/64/128-byte swizzle span along its columns, aligned
  to the swizzle atom (:func:`operand_buffers` decides which buffers, before lowering).
* ``tile.cp_async`` of a global box into such a buffer is one TMA load per panel:
  thread 0 initialises the buffer's mbarrier for this use, fences the init for the
  async proxy, arrives with the copy's byte count (``expect_tx``) and issues the
  loads. The copy completes at the next ``tile.barrier`` or ``cp_wait_group``: thread
  0 waits for the phase (parity 0: every use starts a fresh phase), invalidates the
  barrier for its next use, and ``bar.sync`` releases the CTA.
* ``mma`` of two such buffers is a ``wgmma`` sequence; a register operand (the ``P``
  of ``P @ V``) is first staged into a swizzled scratch buffer (``st.shared`` +
  ``fence.proxy.async`` + ``bar.sync``).
"""

from __future__ import annotations

from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir import tile_compute as C
from tessera.ir import tile_memory as M
from tessera.ir.core import Function, Value, walk
from tessera.ir.target_async import Fence, MbarrierInit, MbarrierInval, MbarrierWait
from tessera.ir.target_ops import SharedAlloc
from tessera.lower.core import Lowerer
from tessera.lower.emit import Emitter
from tessera.lower.gemm90 import stage_regs_to_shared, wgmma_block
from tessera.lower.tiles import SharedBox
from tessera.lower.tma90 import TmaCopy, thread0, tma_load_many
from tessera.lower.values import Dist, Mem, elem_bytes
from tessera.numerics import dtype


def operand_buffers(fn: Function) -> set[Value]:
    """The ``tile.alloc_shared`` results that an ``mma`` reads (through loads,
    transposes and selections), which must be laid out for ``wgmma``."""
    source: dict[Value, set[Value]] = {}
    for instr in walk(fn.body):
        op = instr.op
        if isinstance(op, M.AllocShared):
            source[instr.results[0]] = {instr.results[0]}
        elif isinstance(op, (M.Load, C.Transpose, M.Select)):
            mems = instr.operands[1:] if isinstance(op, M.Select) else instr.operands[:1]
            found = set().union(*(source.get(v, set()) for v in mems))
            if found:
                source[instr.results[0]] = found
    out: set[Value] = set()
    for instr in walk(fn.body):
        if isinstance(instr.op, C.Mma):
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


def tma_copy(low: Lowerer, dst: Mem, src: Mem, box: SharedBox) -> None:
    """``tile.cp_async`` of a global box into a wgmma buffer, as TMA loads."""
    e = low.em
    arg = src.meta.get("arg")
    if arg is None or len(src.shape) != 2 or src.strides[-1] != 1:
        raise UnsupportedError("TMA copies read 2-D row-major boxes of a kernel parameter",
                               loc=e.loc)
    width = box.swizzle // elem_bytes(src.element)
    tmap = low.tensor_map(arg, box.elem, (box.rows, width), box.swizzle)
    stride = src.strides[0]
    off = src.offset if src.offset is not None else e.const(0, "s32")
    row = e.bin("div", off, e.const(stride, "s32"), "s32")
    col = e.bin("rem", off, e.const(stride, "s32"), "s32")
    if src.meta.get("batch_rows"):
        batch = e.cvt(e.sreg("ctaid.y"), "s32", "u32")
        row = e.add(row, e.mul(batch, e.const(src.meta["batch_rows"], "s32"), "s32"), "s32")
    bar = _barrier(low, dst)

    def init(t: Emitter) -> None:
        t.op(MbarrierInit(1), [bar])
        t.op(Fence("mbarrier_init"))

    e.if_(thread0(e), init)
    tma_load_many(e, [TmaCopy(box, tmap, col, row)], bar)
    low.extra.setdefault("tma_pending", []).append(bar)


def _barrier(low: Lowerer, dst: Mem) -> Value:
    bars = low.extra.setdefault("mbarriers", {})
    key = dst.buffer
    if key not in bars:
        sym = f"mbar{len(bars)}"
        low.shared.append((sym, 8, 8))
        bars[key] = low.e.one(SharedAlloc(sym, 8, 8))  # in the entry block: dominates all
    return bars[key]


def finish_tma(low: Lowerer, e: Emitter) -> None:
    """Thread 0 waits for every pending TMA copy and retires its barrier; the caller's
    ``bar.sync`` then makes the data visible to the CTA."""
    pending = low.extra.get("tma_pending") or []
    if not pending:
        return

    def wait(t: Emitter) -> None:
        zero = t.const(0, "u32")
        for bar in pending:
            t.op(MbarrierWait(), [bar, zero])
            t.op(MbarrierInval(), [bar])

    e.if_(thread0(e), wait)
    low.extra["tma_pending"] = []


def wgmma_smem(low: Lowerer, a: SharedBox, b: SharedBox, a_trans: bool, b_trans: bool,
               regs: list[Value]) -> list[Value]:
    """``acc += A @ B`` with both operands in wgmma buffers."""
    if a_trans:
        raise UnsupportedError("a transposed A operand is not lowered for sm_90a",
                               hint="store A as (M, K)", loc=low.em.loc)
    return wgmma_block(low.em, regs, a, b, b_trans=b_trans, atype=a.elem)


def wgmma_regs(low: Lowerer, a: Dist, b: SharedBox, b_trans: bool,
               regs: list[Value]) -> list[Value]:
    """``acc += P @ B`` with ``P`` in registers: staged through a swizzled scratch."""
    e = low.em
    rows, cols = a.layout.rows, a.layout.cols
    span = swizzle_span((rows, cols), dtype("bf16"))
    sym = f"stage{len(low.shared)}"
    size = rows * cols * 2
    low.shared.append((sym, size, 1024))
    base = low.e.one(SharedAlloc(sym, size, 1024))
    box = SharedBox(base, rows, cols, b.elem, span, 1024)
    e.bar()  # the previous product has finished reading the scratch in every warp
    stage_regs_to_shared(e, a.regs, rows, cols, box)
    return wgmma_block(e, regs, box, b, b_trans=b_trans, atype=b.elem)


__all__ = ["finish_tma", "operand_buffers", "swizzle_span", "tma_copy", "wgmma_regs",
           "wgmma_smem"]
