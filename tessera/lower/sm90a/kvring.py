"""The K/V ring of sm_90a attention (the plan is :mod:`tessera.lower.sm90a.kvplan`; the
loops that read it are :mod:`tessera.lower.sm90a.kvloop`).

Shared memory holds ``S`` stages of K blocks and ``S`` of V blocks, swizzled as TMA
writes them, and four mbarriers a stage (PTX ISA sec. 9.7.13.15)::

    full_k[s], full_v[s]    1 arrival + the block's bytes (mbarrier.arrive.expect_tx)
    empty_k[s], empty_v[s]  one arrival per thread: each thread's reads are done

Key block ``m`` (counted over all the key loops, in order) lives in stage ``m % S``
in round ``m // S``: readers wait for ``full``'s phase of parity ``round & 1``; thread 0
refills the stage with block ``m`` (``m >= S``) after ``empty``'s phase of parity
``(round & 1) ^ 1``, which the release of block ``m - S`` completes. The blocks ``0 ..
S - 1`` are loaded before the first loop; every later one when its stage is released.
The number of blocks ``T`` is the loops' trip counts summed, from their own bounds,
so the loads stop where the loops do.
"""

from __future__ import annotations

from dataclasses import replace

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.async_ops import Fence, MbarrierArrive, MbarrierInit, MbarrierWait
from tessera.ir.dialects.tile import Constant
from tessera.lower.core import Lowerer, Rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.kvplan import KvLoop, KvPlan
from tessera.lower.sm90a.mma import swizzle_span
from tessera.lower.sm90a.tma import TmaCopy, issue_copy, thread0
from tessera.lower.tiles import THREADS, SharedBox
from tessera.lower.values import Lowered, Mem, Scalar
from tessera.numerics import dtype

_ALIGN = 1024  # a 128-byte swizzle atom: every stage starts on one (base offset 0)
FULL_K, FULL_V, EMPTY_K, EMPTY_V = range(4)


class KvRing:
    """The ring's buffers and barriers, the block count, and the loads into it."""

    def __init__(self, low: Lowerer, plan: KvPlan, k_mem: Mem, v_mem: Mem) -> None:
        self.low, self.plan = low, plan
        self.k_mem, self.v_mem = k_mem, v_mem
        self.bars = low.shared_buffer("kv_bars", 32 * plan.stages, 8, entry=True)
        self.offsets: list[Value] = []  # the first block of each loop, then T
        self.bounds: list[tuple[Value, Value]] = []  # (lo, step) of each loop

    # -- addresses
    def stage(self, e: TargetEmitter, m: Value) -> tuple[Value, Value]:
        """``(stage, parity)`` (``u32``) of block ``m`` (``u32``)."""
        n = e.const(self.plan.stages, "u32")
        parity = e.bin("and", e.bin("div", m, n, "u32"), e.const(1, "u32"), "u32")
        return e.bin("rem", m, n, "u32"), parity

    def barrier(self, e: TargetEmitter, kind: int, stage: Value) -> Value:
        """The address of ``full_k``/``full_v``/``empty_k``/``empty_v`` of ``stage``."""
        base = e.add(self.bars, e.const(8 * kind * self.plan.stages, "u32"), "u32")
        return e.add(base, e.bin("shl", stage, e.const(3, "u32"), "u32"), "u32")

    def mem(self, e: TargetEmitter, v: bool, stage: Value) -> Mem:
        """The K (or V) buffer of ``stage``, as the tile program's buffer view."""
        mem = self.v_mem if v else self.k_mem
        off = e.mul(stage, e.const(self.plan.block_bytes, "u32"), "u32")
        return replace(mem, base=e.add(mem.base, off, "u32"))

    def box(self, e: TargetEmitter, v: bool, stage: Value) -> SharedBox:
        """The K (or V) block of ``stage`` as a wgmma operand box."""
        p = self.plan
        mem = self.mem(e, v, stage)
        return SharedBox(mem.base, p.bn, p.d, p.elem, mem.swizzle, _ALIGN)

    def wait(self, e: TargetEmitter, kind: int, m: Value) -> None:
        """Wait for the phase of ``kind``'s barrier that block ``m`` completes (full) or
        that its stage's previous block completed (empty)."""
        stage, parity = self.stage(e, m)
        if kind in (EMPTY_K, EMPTY_V):
            parity = e.bin("xor", parity, e.const(1, "u32"), "u32")
        e.op(MbarrierWait(), [self.barrier(e, kind, stage), parity])

    def release(self, e: TargetEmitter, kind: int, m: Value) -> None:
        """Every thread arrives on ``kind``'s empty barrier of block ``m``'s stage."""
        stage, _ = self.stage(e, m)
        e.op(MbarrierArrive(), [self.barrier(e, kind, stage)])

    # -- set-up and loads
    def init(self, e: TargetEmitter) -> None:
        """Thread 0 initialises the barriers; the CTA passes one ``bar.sync`` (before
        the loops) so that every thread sees them initialised."""
        s = self.plan.stages

        def init(t: TargetEmitter) -> None:
            for kind in range(4):
                count = 1 if kind in (FULL_K, FULL_V) else THREADS
                for k in range(s):
                    t.op(MbarrierInit(count),
                         [t.add(self.bars, t.const(8 * (kind * s + k), "u32"), "u32")])
        e.if_(thread0(e), init)
        e.op(Fence("mbarrier_init"))
        e.bar()

    def count(self, e: TargetEmitter) -> Value:
        """Evaluate every loop's bounds (the later loops' are known here, see
        :func:`tessera.lower.sm90a.kvplan.match_kv_loops`) and count the blocks: the
        first block of each loop, then ``T``, in :attr:`offsets`."""
        low = self.low
        total = e.const(0, "s32")
        for kv in self.plan.loops:
            lo, hi, step = (self._scalar(e, v) for v in kv.loop.operands[:3])
            span = e.bin("sub", hi, lo, "s32")
            trips = e.bin("div", e.add(span, e.bin("sub", step, e.const(1, "s32"), "s32"),
                                       "s32"), step, "s32")
            trips = e.bin("max", trips, e.const(0, "s32"), "s32")
            self.offsets.append(total)
            self.bounds.append((lo, step))
            total = e.add(total, trips, "s32")
        self.offsets.append(total)
        del low
        return e.cvt(total, "u32", "s32")

    def _scalar(self, e: TargetEmitter, v: Value) -> Value:
        low = self.low
        if v not in low.env:  # a constant between the loops: evaluated here
            owner = v.owner
            assert isinstance(owner, Instr) and isinstance(owner.op, Constant)
            low.stack.append(e)
            try:
                low.lower_instr(owner, e)
            finally:
                low.stack.pop()
        lv = low.env[v]
        if not isinstance(lv, Scalar):
            raise UnsupportedError("key-loop bounds must be scalars", loc=e.loc)
        return lv.reg if lv.type == "s32" else e.cvt(lv.reg, "s32", lv.type)

    def issue(self, t: TargetEmitter, m: Value, v: bool) -> None:
        """Thread 0 loads K (or V) block ``m`` (``u32``) into its stage: the copy's
        index arithmetic from the body of the loop the block belongs to, one TMA load
        per swizzle panel, and the expect-tx arrival of the block's bytes."""
        ms = t.cvt(m, "s32", "u32")
        loops = list(zip(self.plan.loops, self.offsets, self.bounds))

        def pick(u: TargetEmitter, k: int) -> None:
            kv, off, (lo, step) = loops[k]
            if k + 1 < len(loops):
                later = u.setp("ge", ms, self.offsets[k + 1], "s32")
                u.if_(later, lambda w: pick(w, k + 1), lambda w: self._load(w, kv, ms, off,
                                                                             lo, step, m, v))
            else:
                self._load(u, kv, ms, off, lo, step, m, v)
        pick(t, 0)

    def _load(self, t: TargetEmitter, kv: KvLoop, ms: Value, off: Value, lo: Value,
              step: Value, m: Value, v: bool) -> None:
        low = self.low
        index = t.add(lo, t.mul(t.bin("sub", ms, off, "s32"), step, "s32"), "s32")
        body = kv.loop.regions[0].block
        copy = kv.v_copy if v else kv.k_copy
        t.loc = copy.loc  # a fault of the load names its cp_async line
        instrs = _slice(body.instrs, copy.operands[1])
        # the body may be being lowered around this load: its values come back after
        keys = [body.args[0], *(r for i in instrs for r in i.results)]
        saved = {key: low.env[key] for key in keys if key in low.env}
        low.env[body.args[0]] = Scalar(index, "s32")
        low.stack.append(t)
        try:
            for instr in instrs:
                low.lower_instr(instr, t)
            src = low.env[copy.operands[1]]
        finally:
            low.stack.pop()
            for key in keys:
                low.env.pop(key, None)
            low.env.update(saved)
        stage, _ = self.stage(t, m)
        full = self.barrier(t, FULL_V if v else FULL_K, stage)
        issue_copy(t, self._copy(t, src, self.box(t, v, stage)), full)
        # the bytes may land before they are announced: the tx-count goes below zero
        # while the arrival is pending, and the phase cannot complete early
        t.op(MbarrierArrive(self.plan.block_bytes), [full])

    def _copy(self, e: TargetEmitter, src: Lowered, box: SharedBox) -> TmaCopy:
        """The TMA copy of the global view ``src`` (a 2-D box of a parameter)."""
        arg = src.meta.get("arg") if isinstance(src, Mem) else None
        if not isinstance(src, Mem) or arg is None or src.strides[-1] != 1:
            raise UnsupportedError("TMA copies read 2-D row-major boxes of a kernel parameter",
                                   loc=e.loc)
        width = box.swizzle // 2
        tmap = self.low.tensor_map(arg, box.elem, (box.rows, width), box.swizzle)
        stride = e.const(src.strides[-2], "s32")
        off = src.offset if src.offset is not None else e.const(0, "s32")
        row, col = e.bin("div", off, stride, "s32"), e.bin("rem", off, stride, "s32")
        if src.meta.get("batch_rows"):
            batch = e.cvt(e.sreg("ctaid.y"), "s32", "u32")
            row = e.add(row, e.mul(batch, e.const(src.meta["batch_rows"], "s32"), "s32"),
                        "s32")
        return TmaCopy(box, tmap, col, row)

    def prefetch(self, e: TargetEmitter, total: Value) -> None:
        """Thread 0 loads blocks ``0 .. S - 1`` (those that exist) into fresh stages."""
        def fill(t: TargetEmitter) -> None:
            for m in range(self.plan.stages):
                mv = t.const(m, "u32")
                have = t.setp("lt", mv, total, "u32")
                t.if_(have, lambda u, mv=mv: (self.issue(u, mv, False),
                                              self.issue(u, mv, True)) and None)
        e.if_(thread0(e), fill)

    def refill(self, e: TargetEmitter, total: Value, m: Value, v: bool) -> None:
        """After the threads released block ``m``'s K (or V): thread 0 waits for the
        release to complete and loads block ``m + S`` into the stage, if it exists."""
        nxt = e.add(m, e.const(self.plan.stages, "u32"), "u32")

        def load(t: TargetEmitter) -> None:
            self.wait(t, EMPTY_V if v else EMPTY_K, nxt)
            self.issue(t, nxt, v)
        go = e.setp("lt", nxt, total, "u32")
        e.if_(thread0(e), lambda t: t.if_(go, load) and None)


def _slice(instrs: list[Instr], root: Value) -> list[Instr]:
    """The instructions of a loop body that ``root`` (a copy's source view) needs, in
    order: its index arithmetic and views."""
    need, out = {root}, []
    for instr in reversed(instrs):
        if any(r in need for r in instr.results):
            out.append(instr)
            need.update(instr.operands)
    return out[::-1]


def alloc_rules(plan: KvPlan) -> dict[int, Rule]:
    """The K and V buffers become the ring's stage 0 (``S`` blocks each, allocated
    here); the ring object is made when both are."""
    def alloc(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        op = instr.op
        span = swizzle_span(tuple(op.shape), dtype(plan.elem))
        base = low.shared_buffer("kv_ring", plan.stages * plan.block_bytes, _ALIGN)
        strides = (op.shape[1], 1)
        sym = base.owner.op.sym  # type: ignore[union-attr]
        mem = Mem("shared", base, None, tuple(op.shape), strides, op.element, buffer=sym,
                  swizzle=span, meta={"wgmma": True}, align=_ALIGN)
        low.extra.setdefault("kv_mems", {})[id(instr)] = mem
        return [mem]

    return {id(plan.k_alloc): alloc, id(plan.v_alloc): alloc}


def make_ring(low: Lowerer, plan: KvPlan) -> KvRing:
    """The ring of ``plan`` (its buffers are allocated by :func:`alloc_rules`)."""
    mems = low.extra["kv_mems"]
    return KvRing(low, plan, mems[id(plan.k_alloc)], mems[id(plan.v_alloc)])


__all__ = ["EMPTY_K", "EMPTY_V", "FULL_K", "FULL_V", "KvRing", "alloc_rules", "make_ring"]
