"""The multi-stage ``cp.async`` GEMM main loop for sm_80 (the Ampere form of the
pipeline of :mod:`tessera.lower.sm90a.pipeline`).

The same GEMM-shaped K loop (:func:`tessera.lower.sm90a.warpspec.match_gemm_loop`) keeps
one CTA of 128 threads, all of which copy and multiply. A ring of ``S`` shared stages,
swizzled as the kernel's buffers are, is filled ``S - 1`` K tiles ahead, one
``cp.async`` group per K tile (empty groups keep the count uniform near the end):

::

    prologue: copy tiles 0 .. S-2 into stages 0 .. S-2, one commit each
    for i in K tiles:
        cp.async.wait_group S-2        this thread's copies of tile i have landed
        bar.sync                       everyone's have; everyone finished tile i-1
        copy tile i+S-1 into stage (i-1) % S (if it exists); commit
        ldmatrix + mma.sync on stage i % S
    cp.async.wait_group 0

After the prologue and ``i`` trips, ``S - 1 + i`` groups are committed and tile ``i``
is group ``i``, so at most ``S - 2`` may stay pending (PTX ISA sec. 9.7.9.25). The
products are those of the one-stage lowering in the same K order.

Knob: ``num_stages`` (default 3, fewer where they do not fit :data:`SHARED_SM80`, none
below 2; 1 keeps the copy-wait-multiply lowering of the tile program).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Instr, Value
from tessera.ir.dialects.target.async_ops import CpAsyncCommit, CpAsyncWait
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer, Rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.rules.block import global_box
from tessera.lower.sm80.copy import copy_async, copy_chunk
from tessera.lower.sm80.gemm import mma_block
from tessera.lower.sm90a.warpspec import GemmLoop, config_of, match_gemm_loop
from tessera.lower.tiles import SharedBox
from tessera.lower.values import Dist, Lowered, Mem, Scalar, ptx_elem

#: shared memory the ring may use: the kernel declares static ``.shared`` buffers, of
#: which ptxas accepts at most 48 KiB on sm_80 (more needs dynamic shared memory)
SHARED_SM80 = 48 * 1024
DEFAULT_STAGES = 3
_SWIZZLE = {"none": 0, "xor": 128, "32B": 32, "64B": 64, "128B": 128}
_ALIGN = {"none": 16, "xor": 128, "32B": 256, "64B": 512, "128B": 1024}


@dataclass(frozen=True)
class Sm80Plan:
    """The matched loop and its stage count."""

    gemm: GemmLoop
    stages: int


def plan_multistage(fn: Function) -> Sm80Plan | None:
    """The sm_80 pipeline of ``fn``, or None for the one-stage lowering. A
    ``num_stages`` that does not fit is an ``UnsupportedError`` at the kernel's line."""
    config = config_of(fn)
    gemm = match_gemm_loop(fn)
    if gemm is None:
        return None
    asked = config.get("num_stages")
    stages = int(asked) if asked is not None else DEFAULT_STAGES
    while asked is None and stages > 2 and stages * gemm.stage_bytes > SHARED_SM80:
        stages -= 1
    if stages < 2:
        return None
    if stages * gemm.stage_bytes > SHARED_SM80:
        if asked is None:
            return None
        raise UnsupportedError(f"{stages} stages of {gemm.stage_bytes} bytes exceed the "
                               f"{SHARED_SM80} bytes of shared memory of an sm_80 CTA",
                               hint="lower num_stages or the tile shape", loc=fn.loc)
    return Sm80Plan(gemm, stages)


def multistage_rules(plan: Sm80Plan) -> dict[int, Rule]:
    """Lowering rules (by instruction ``id``): the buffers become the ring, the loop
    the pipeline."""
    g = plan.gemm

    def ring_buffer(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        return [None]  # type: ignore[list-item]  (only the replaced loop reads them)

    def loop(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        return _lower(low, instr, args, plan)

    return {id(g.a_alloc): ring_buffer, id(g.b_alloc): ring_buffer, id(g.loop): loop}


def _ring(low: Lowerer, alloc: Instr, stages: int) -> tuple[SharedBox, int]:
    """Stage 0 of a ring of ``alloc``'s buffer, and the bytes between stages."""
    op = alloc.op
    rows, cols = op.shape
    align = max(op.alignment, _ALIGN[op.swizzle])
    size = -(-rows * cols * 2 // align) * align
    base = low.shared_buffer("ring", stages * size, align)
    return SharedBox(base, rows, cols, ptx_elem(op.element), _SWIZZLE[op.swizzle], align), size


def _at(e: TargetEmitter, box: SharedBox, size: int, stage: Value) -> SharedBox:
    base = e.add(box.base, e.mul(stage, e.const(size, "u32"), "u32"), "u32")
    return SharedBox(base, box.rows, box.cols, box.elem, box.swizzle, box.align)


def _lower(low: Lowerer, instr: Instr, args: list[Lowered], plan: Sm80Plan) -> list[Lowered]:
    e, g, s = low.em, plan.gemm, plan.stages
    init = args[3]
    if not isinstance(init, Dist):
        raise UnsupportedError("the pipelined K loop carries an accumulator tile",
                               loc=instr.loc)
    (a0, a_size), (b0, b_size) = _ring(low, g.a_alloc, s), _ring(low, g.b_alloc, s)
    body = g.loop.regions[0].block

    def fill(t: TargetEmitter, k: Value, stage: Value) -> None:
        """The copies of the K tile at loop index ``k`` into ``stage``."""
        low.env[body.args[0]] = Scalar(k, "s32")
        boxes = {id(g.a_copy): _at(t, a0, a_size, stage), id(g.b_copy): _at(t, b0, b_size, stage)}
        low.stack.append(t)
        try:
            for i in body.instrs:
                if id(i) in boxes:
                    t.loc = i.loc
                    src = low.env[i.operands[1]]
                    assert isinstance(src, Mem)
                    gb = global_box(t, src)
                    copy_async(t, boxes[id(i)], gb, chunk=copy_chunk(src.align, gb, i.loc),
                               commit=False)
                elif not i.op.terminator and i is not g.mma and not isinstance(
                        i.op, (tile_memory.Barrier, tile_memory.Load)):
                    low.lower_instr(i, t)
        finally:
            low.stack.pop()

    for k in range(min(s - 1, g.k_tiles)):
        fill(e, e.const(g.lo + k * g.step, "s32"), e.const(k, "u32"))
    for _ in range(s - 1):
        e.op(CpAsyncCommit())
    ahead = (s - 1) * g.step

    def step(t: TargetEmitter, k: Value, *acc: Value) -> list[Value]:
        t.loc = g.mma.loc
        it = t.bin("sub", k, t.const(g.lo, "s32"), "s32") if g.lo else k
        it = t.cvt(t.bin("div", it, t.const(g.step, "s32"), "s32"), "u32", "s32")
        n = t.const(s, "u32")
        stage = t.bin("rem", it, n, "u32")
        t.op(CpAsyncWait(s - 2))
        t.bar()
        nxt = t.add(k, t.const(ahead, "s32"), "s32")
        refill = t.bin("rem", t.add(it, t.const(s - 1, "u32"), "u32"), n, "u32")
        t.if_(t.setp("lt", nxt, t.const(g.hi, "s32"), "s32"), lambda u: fill(u, nxt, refill))
        t.op(CpAsyncCommit())
        t.loc = g.mma.loc
        return mma_block(t, list(acc), _at(t, a0, a_size, stage), _at(t, b0, b_size, stage),
                         a_trans=False, b_trans=False, atype=a0.elem)

    lo, hi, st = (e.const(v, "s32") for v in (g.lo, g.hi, g.step))
    regs = e.for_(lo, hi, st, list(init.regs), step)
    e.op(CpAsyncWait(0))
    return [Dist(init.layout, regs, init.type)]


__all__ = ["DEFAULT_STAGES", "SHARED_SM80", "Sm80Plan", "multistage_rules", "plan_multistage"]
