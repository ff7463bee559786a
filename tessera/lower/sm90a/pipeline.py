"""The warp-specialised sm_90a GEMM main loop (the plan is :mod:`tessera.lower.sm90a.warpspec`).

The CTA is ``consumers + 1`` warpgroups: warpgroups ``0 .. consumers-1`` multiply,
the last one loads. A ring of ``S`` shared-memory stages (an A tile and a B tile each,
swizzled as TMA writes them) has two mbarriers per stage (PTX ISA sec. 9.7.13.15):

* ``full[s]`` (1 arrival + the stage's TMA bytes): the producer's elected thread
  issues the TMA loads on it and announces their bytes with
  ``mbarrier.arrive.expect_tx``; consumers wait on it before reading the stage;
* ``empty[s]`` (one arrival per consumer thread, so that each thread's own reads are
  ordered before the refill): a consumer arrives when its ``wgmma`` reading the stage
  has retired; the producer waits on it before refilling the stage.

K tile ``i`` uses stage ``i % S`` in round ``i // S``: consumers wait for ``full``'s
phase of parity ``round & 1``; the producer waits for ``empty``'s phase of parity
``(round & 1) ^ 1``, which a fresh barrier (phase 0) reports complete, so the first
``S`` fills do not wait. Each consumer step issues its ``wgmma`` group, then
``wgmma.wait_group 1`` retires the *previous* step's group, whose stage it releases:
two groups overlap and no ``bar.sync`` runs inside the loop. The products are the
one-warpgroup lowering's ``wgmma`` sequence in the same K order, so the bits are too.
With ``schedule="pingpong"`` the two consumer warpgroups take turns issuing their groups
(:mod:`tessera.lower.sm90a.turns`): a turn's ``bar.sync`` follows the ``full`` wait,
its ``bar.arrive`` the commit.

::

    producer warp (elected thread)           consumer warpgroup(s)
    for i:                                   for i:
      wait empty[i%S] parity ^1                wait full[i%S]
      TMA A, B ──(complete_tx)──▶ full   ───▶  wgmma.fence; wgmma x k16; commit
      arrive.expect_tx full[i%S], bytes        wait_group 1
                                         ◀───  arrive empty[(i-1)%S]
                                             wait_group 0; epilogue
"""

from __future__ import annotations

from tessera.errors import UnsupportedError
from tessera.ir.core import Block, Instr, IRRegion, Value
from tessera.ir.dialects.target import If, Yield
from tessera.ir.dialects.target.async_ops import (
    MMA_K,
    Fence,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.ptx_ops import Elect
from tessera.ir.dialects.target.warp_ops import SetMaxNReg
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer, Rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.epilogue import epilogue_rule, reserve
from tessera.lower.sm90a.gemm import advance_descriptor, make_descriptor, operand_offset
from tessera.lower.sm90a.mma import swizzle_span
from tessera.lower.sm90a.persistent import lowered_after, walk_tiles
from tessera.lower.sm90a.tma import TmaCopy, issue_copy, thread0
from tessera.lower.sm90a.turns import turns_of
from tessera.lower.sm90a.warpspec import (
    CONSUMER_REGS,
    PRODUCER_REGS,
    PipelinePlan,
    elem_bytes_of,
)
from tessera.lower.tiles import SharedBox
from tessera.lower.values import Dist, Lowered, Mem, Scalar, ptx_elem
from tessera.numerics import dtype

_ALIGN = 1024  # a 128-byte swizzle atom: stages start on it (base offset 0)


class _Ring:
    """The stages and barriers of one pipeline, and the index arithmetic on them."""

    def __init__(self, low: Lowerer, plan: PipelinePlan) -> None:
        g = plan.gemm
        es = elem_bytes_of(g.elem)
        self.plan, self.gemm = plan, g
        self.a_span = swizzle_span((g.bm, g.bk), dtype(g.elem))
        self.b_span = swizzle_span((g.bk, g.bn), dtype(g.elem))
        self.a_bytes, self.b_bytes = g.bm * g.bk * es, g.bk * g.bn * es
        s = plan.stages
        # one buffer, the A stages then the B stages: the epilogue's staging tile may
        # take all of it once the loop has drained (tessera.lower.sm90a.epilogue)
        self.a = low.shared_buffer("pipe_ring", s * (self.a_bytes + self.b_bytes), _ALIGN)
        self.b = low.em.add(self.a, low.em.const(s * self.a_bytes, "u32"), "u32")
        self.bars = low.shared_buffer("pipe_bars", 16 * s, 8)
        low.extra["pipe_ring"] = self.a

    def slot(self, e: TargetEmitter, k: Value, done: Value | None = None
             ) -> tuple[Value, Value]:
        """``(stage, round)`` (``u32``) of the K tile whose loop index is ``k``, after
        ``done`` whole tiles of K steps (a persistent CTA's earlier tiles)."""
        g = self.gemm
        it = e.bin("sub", k, e.const(g.lo, "s32"), "s32") if g.lo else k
        it = e.cvt(e.bin("div", it, e.const(g.step, "s32"), "s32"), "u32", "s32")
        if done is not None:
            it = e.add(it, e.mul(done, e.const(g.k_tiles, "u32"), "u32"), "u32")
        n = e.const(self.plan.stages, "u32")
        return e.bin("rem", it, n, "u32"), e.bin("div", it, n, "u32")

    def barrier(self, e: TargetEmitter, stage: Value, empty: bool) -> Value:
        """The address of ``full[stage]`` or ``empty[stage]``."""
        base = self.bars
        if empty:
            base = e.add(base, e.const(8 * self.plan.stages, "u32"), "u32")
        return e.add(base, e.bin("shl", stage, e.const(3, "u32"), "u32"), "u32")

    def boxes(self, e: TargetEmitter, stage: Value) -> tuple[SharedBox, SharedBox]:
        """The A and B tiles of ``stage``."""
        g = self.gemm
        a = e.add(self.a, e.mul(stage, e.const(self.a_bytes, "u32"), "u32"), "u32")
        b = e.add(self.b, e.mul(stage, e.const(self.b_bytes, "u32"), "u32"), "u32")
        return (SharedBox(a, g.bm, g.bk, g.elem, self.a_span, _ALIGN),
                SharedBox(b, g.bk, g.bn, g.elem, self.b_span, _ALIGN))


def _parity(e: TargetEmitter, rnd: Value, flip: bool) -> Value:
    p = e.bin("and", rnd, e.const(1, "u32"), "u32")
    return e.bin("xor", p, e.const(1, "u32"), "u32") if flip else p


def lower_pipelined_loop(low: Lowerer, instr: Instr, args: list[Lowered],
                         plan: PipelinePlan) -> list[Lowered]:
    """Lower the matched ``tile.for`` as the warp-specialised pipeline; the rest of the
    kernel (the epilogue) is lowered into the consumer branch."""
    e = low.em
    init = args[3]
    if not isinstance(init, Dist):
        raise UnsupportedError("the pipelined K loop carries an accumulator tile",
                               loc=instr.loc)
    ring = _Ring(low, plan)
    reserve(low, plan)  # the epilogue's staging tile, where the ring cannot hold it
    s, nc = plan.stages, plan.consumers

    def init_bars(t: TargetEmitter) -> None:
        for k in range(s):
            t.op(MbarrierInit(1), [t.add(ring.bars, t.const(8 * k, "u32"), "u32")])
            t.op(MbarrierInit(128 * nc),
                 [t.add(ring.bars, t.const(8 * (s + k), "u32"), "u32")])
    e.if_(thread0(e), init_bars)
    e.op(Fence("mbarrier_init"))
    e.bar()
    tid = e.sreg("tid.x")
    producer = e.setp("ge", tid, e.const(128 * nc, "u32"), "u32")
    pblock, cblock = Block(), Block()
    pe, ce = e.nested(pblock), e.nested(cblock)
    _producer(low, pe, ring, instr)
    pe.op(Yield())
    ce.op(SetMaxNReg(CONSUMER_REGS, inc=True))
    regs = list(init.regs)
    wg = ce.warpgroup() if nc > 1 else None  # once, for every tile a CTA walks
    if plan.persistent:  # each tile's K loop and epilogue, tile after tile
        def tile(t: TargetEmitter, done: Value) -> None:
            out = _consumer(t, ring, regs, wg, done)
            low.env[instr.results[0]] = Dist(init.layout, out, init.type)
            lowered_after(low, instr, t)
        walk_tiles(low, ce, instr, tile)
    else:
        regs = _consumer(ce, ring, regs, wg)
    e.op(If(), [producer], regions=[IRRegion([pblock]), IRRegion([cblock])], result_types=[])
    # the rest of the kernel runs in the consumer branch (the producer has finished)
    low.stack[-1] = ce
    low.extra["continuation"] = ce
    return [Dist(init.layout, regs, init.type)]


def _producer(low: Lowerer, pe: TargetEmitter, ring: _Ring, loop: Instr) -> None:
    """The producer warpgroup: fewer registers; one elected thread of its first warp
    fills the stages in K order."""
    g, nc = ring.gemm, ring.plan.consumers
    pe.op(SetMaxNReg(PRODUCER_REGS, inc=False))
    warp0 = pe.setp("lt", pe.sreg("tid.x"), pe.const(128 * nc + 32, "u32"), "u32")
    body = loop.regions[0].block

    done: Value | None = None  # a persistent CTA's tiles before this one

    def fill(t: TargetEmitter, k: Value) -> None:
        t.loc = loop.loc
        stage, rnd = ring.slot(t, k, done)
        t.op(MbarrierWait(), [ring.barrier(t, stage, True), _parity(t, rnd, True)])
        full = ring.barrier(t, stage, False)
        low.env[body.args[0]] = Scalar(k, "s32")
        a_box, b_box = ring.boxes(t, stage)
        low.stack.append(t)
        try:
            for i in body.instrs:  # the index arithmetic and views of the copies
                if i is g.a_copy or i is g.b_copy:
                    box = a_box if i is g.a_copy else b_box
                    t.loc = i.loc  # a fault of the copy names its cp_async line
                    issue_copy(t, _tma(low, t, low.env[i.operands[1]], box), full)
                elif not i.op.terminator and not isinstance(
                        i.op, (tile_memory.Barrier, tile_memory.Load)) and i is not g.mma:
                    low.lower_instr(i, t)
        finally:
            low.stack.pop()
        # the loads may complete before the bytes are announced: the tx-count goes below
        # zero while the arrival is pending, and the phase cannot complete early
        t.loc = loop.loc
        t.op(MbarrierArrive(g.stage_bytes), [full])

    def k_loop(t: TargetEmitter, tiles_done: Value | None = None) -> None:
        nonlocal done
        done = tiles_done
        lo, hi, step = (t.const(v, "s32") for v in (g.lo, g.hi, g.step))
        t.for_(lo, hi, step, [], fill)

    def elected(t: TargetEmitter) -> None:
        if ring.plan.persistent:
            t.if_(t.op(Elect())[1], lambda u: walk_tiles(low, u, loop, k_loop))
        else:
            t.if_(t.op(Elect())[1], k_loop)
    pe.if_(warp0, elected)


def _tma(low: Lowerer, e: TargetEmitter, src: Lowered, box: SharedBox) -> TmaCopy:
    """The TMA copy of the global view ``src`` into ``box`` (one load per panel)."""
    arg = src.meta.get("arg") if isinstance(src, Mem) else None
    if not isinstance(src, Mem) or arg is None or len(src.shape) != 2 or src.strides[-1] != 1:
        raise UnsupportedError("TMA copies read 2-D row-major boxes of a kernel parameter",
                               loc=e.loc)
    width = box.swizzle // elem_bytes_of(box.elem)
    tmap = low.tensor_map(arg, box.elem, (box.rows, width), box.swizzle)
    stride = e.const(src.strides[0], "s32")
    off = src.offset if src.offset is not None else e.const(0, "s32")
    row, col = e.bin("div", off, stride, "s32"), e.bin("rem", off, stride, "s32")
    if src.meta.get("batch_rows"):
        batch = e.cvt(e.sreg("ctaid.y"), "s32", "u32")
        row = e.add(row, e.mul(batch, e.const(src.meta["batch_rows"], "s32"), "s32"), "s32")
    return TmaCopy(box, tmap, col, row)


def _consumer(ce: TargetEmitter, ring: _Ring, init: list[Value], wg: Value | None,
              done: Value | None = None) -> list[Value]:
    """The consumer warpgroups' K loop: per K tile wait for the stage, issue its wgmma
    group, retire the previous group and release its stage. ``wg``: the warpgroup's
    index (two consumers; one broadcast serves its A rows and its turns); ``done``: the
    tiles a persistent CTA finished before this one, which also releases its last
    stage."""
    g, plan = ring.gemm, ring.plan
    blocks = g.bm // 64
    mine = blocks // plan.consumers  # 64-row blocks of each consumer warpgroup
    half = g.bn // 2
    wg_rows = None
    if wg is not None:  # warpgroup w multiplies A rows [64 * mine * w, ...)
        wg_rows = ce.mul(wg, ce.const(64 * mine * ring.a_span, "u32"), "u32")
    accs = [ce.pack(init[i * half:(i + 1) * half], "f32") for i in range(mine)]
    ks = MMA_K[g.elem]
    turns = None
    if plan.pingpong:  # warpgroup 0 issues first (tessera.lower.sm90a.turns)
        assert wg is not None  # the turns alternate two consumers
        turns = turns_of(ce, wg)
        turns.start(ce)
    last = g.lo + (g.k_tiles - 1) * g.step

    def step(t: TargetEmitter, k: Value, *carried: Value) -> list[Value]:
        t.loc = g.mma.loc  # the consumer's work is the kernel's mma
        stage, rnd = ring.slot(t, k, done)
        t.op(MbarrierWait(), [ring.barrier(t, stage, False), _parity(t, rnd, False)])
        a_box, b_box = ring.boxes(t, stage)
        if wg_rows is not None:
            a_box = SharedBox(t.add(a_box.base, wg_rows, "u32"), 64 * mine, g.bk, g.elem,
                              a_box.swizzle, a_box.align)
        da = make_descriptor(t, a_box)
        db = make_descriptor(t, b_box, k_major=False)
        if turns is not None:
            turns.wait(t)
        t.op(WgmmaFence())
        on = t.const(1, "pred")
        op = Wgmma(g.bn, g.elem, g.elem, 0, 1)
        out = list(carried)
        for kk in range(0, g.bk, ks):
            db_k = advance_descriptor(t, db, operand_offset(b_box, kk, 0, k_major=False))
            for i in range(mine):
                da_k = advance_descriptor(t, da, operand_offset(a_box, kk, 64 * i,
                                                                k_major=True))
                out[i] = t.one(op, out[i], da_k, db_k, on)
        t.op(WgmmaCommit())
        if turns is not None:
            turns.hand_over(t, t.setp("ne", k, t.const(last, "s32"), "s32"))
        t.op(WgmmaWait(1))  # the previous step's group has retired: release its stage
        it_ne0 = t.setp("ne", k, t.const(g.lo, "s32"), "s32")
        prev = t.bin("rem", t.add(stage, t.const(plan.stages - 1, "u32"), "u32"),
                     t.const(plan.stages, "u32"), "u32")
        t.if_(it_ne0, lambda u: u.op(MbarrierArrive(), [ring.barrier(u, prev, True)]))
        return out

    lo, hi, st = (ce.const(v, "s32") for v in (g.lo, g.hi, g.step))
    final = ce.for_(lo, hi, st, accs, step)
    ce.op(WgmmaWait(0))
    if done is not None:  # the next tile's K steps refill the last stage too
        ce.op(MbarrierArrive(), [ring.barrier(ce, ring.slot(ce, ce.const(last, "s32"),
                                                             done)[0], True)])
    return [v for blk in final for v in ce.unpack(blk, "f32", half)]


def pipelined_rules(plan: PipelinePlan) -> dict[int, Rule]:
    """Lowering rules (by instruction ``id``) of the planned loop and its buffers: the
    buffers become the ring (allocated by the loop's rule), the loop the pipeline."""
    g = plan.gemm

    def ring_buffer(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        return [None]  # type: ignore[list-item]  (only the replaced loop reads them)

    def loop(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        return lower_pipelined_loop(low, instr, args, plan)

    def store(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        split_store(low, plan, args[0], args[1])
        return []

    rules = {id(g.a_alloc): ring_buffer, id(g.b_alloc): ring_buffer, id(g.loop): loop}
    if plan.epilogue is not None:  # the TMA-store epilogue, or its st.global fallback
        rules[id(plan.epilogue)] = epilogue_rule(plan)
    elif plan.store is not None:
        rules[id(plan.store)] = store
    return rules


def split_store(low: Lowerer, plan: PipelinePlan, view: Lowered, acc: Lowered) -> None:
    """Each consumer warpgroup stores its 64-row blocks of the accumulator (register
    pairs of the wgmma accumulator layout, PTX ISA sec. 9.7.15.5.1) into the global
    view with ``st.global``: f32 pairs, or pairs rounded to bf16/f16 (one element at a
    time where odd rows leave a pair unaligned)."""
    e, g = low.em, plan.gemm
    if not (isinstance(view, Mem) and isinstance(acc, Dist) and view.space == "global"
            and view.strides[-1] == 1 and len(view.shape) == 2):
        raise UnsupportedError("the split accumulator is stored into a 2-D global view",
                               loc=e.loc)
    elem = ptx_elem(view.element)
    es = 4 if elem == "f32" else 2
    stride = view.strides[0]
    mine = g.bm // 64 // plan.consumers
    tid = e.sreg("tid.x")
    lane_row = e.add(e.bin("shl", e.bin("and", e.bin("shr", tid, e.const(5, "u32"), "u32"),
                                        e.const(3, "u32"), "u32"), e.const(4, "u32"), "u32"),
                     e.bin("and", e.bin("shr", tid, e.const(2, "u32"), "u32"),
                           e.const(7, "u32"), "u32"), "u32")
    wg = e.bin("shr", tid, e.const(7, "u32"), "u32")
    row = e.add(lane_row, e.mul(wg, e.const(64 * mine, "u32"), "u32"), "u32")
    col = e.bin("shl", e.bin("and", tid, e.const(3, "u32"), "u32"), e.const(1, "u32"), "u32")
    elems = e.add(e.mul(row, e.const(stride, "u32"), "u32"), col, "u32")
    base = view.base
    if view.offset is not None:
        off = e.cvt(e.bin("mul", view.offset, e.const(es, "s32"), "s32", "wide"), "u64", "s64")
        base = e.add(base, off, "u64")
    addr = e.add(base, e.bin("mul", elems, e.const(es, "u32"), "u32", "wide"), "u64")
    half = g.bn // 2
    regs = list(acc.regs)
    for r in range(0, len(regs), 2):
        blk, i = divmod(r, half)
        h, j = (i >> 1) & 1, i >> 2
        static = ((64 * blk + 8 * h) * stride + 8 * j) * es
        lo, hi = regs[r:r + 2]
        if elem == "f32":
            e.st("global", addr, e.pack([lo, hi], "f32"), "f32", vec=2, offset=static)
        elif stride % 2 == 0 and view.align % 4 == 0:
            word = e.pack([e.cvt([hi, lo], f"{elem}x2", "f32", "rn")], "b32")
            e.st("global", addr, word, "b32", offset=static)
        else:
            for k, v in enumerate((lo, hi)):
                e.st("global", addr, e.cvt(v, elem, "f32", "rn"), elem, offset=static + 2 * k)


__all__ = ["lower_pipelined_loop", "pipelined_rules", "split_store"]
