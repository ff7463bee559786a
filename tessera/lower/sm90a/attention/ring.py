"""The K/V ring of sm_90a attention (the plan is :mod:`tessera.lower.sm90a.attention.plan`; the
loops that read it are :mod:`tessera.lower.sm90a.attention.loop`).

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
so the loads stop where the loops do. In a warp-specialised CTA
(:mod:`tessera.lower.sm90a.attention.split`) a producer warpgroup issues every load instead,
and the empty barriers count the threads of all the consumer warpgroups.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.async_ops import Fence, MbarrierArrive, MbarrierInit, MbarrierWait
from tessera.ir.dialects.tile import Constant
from tessera.lower.core import Lowerer, Rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.attention.plan import KvLoop, KvPlan
from tessera.lower.sm90a.mma import swizzle_span
from tessera.lower.sm90a.tma import TmaCopy, issue_copy, thread0
from tessera.lower.tiles import THREADS, SharedBox
from tessera.lower.values import Lowered, Mem, Scalar
from tessera.numerics import dtype

_ALIGN = 1024  # a 128-byte swizzle atom: every stage starts on one (base offset 0)
FULL_K, FULL_V, EMPTY_K, EMPTY_V = range(4)


@dataclass(frozen=True)
class RingSlot:
    """Where block ``m`` lives: ``stage = m % S``, ``parity = (m // S) & 1`` and the
    stage's offset among the barriers of a kind (``8 * stage``), all ``u32``."""

    stage: Value
    parity: Value
    offset: Value


class KvRing:
    """The ring's buffers and barriers, the block count, and the loads into it."""

    def __init__(self, low: Lowerer, plan: KvPlan, k_mem: Mem, v_mem: Mem) -> None:
        self.low, self.plan = low, plan
        self.k_mem, self.v_mem = k_mem, v_mem
        self.bars = low.shared_buffer("kv_bars", 32 * plan.stages, 8, entry=True)
        self.offsets: list[Value] = []  # the first block of each loop, then T
        self.bounds: list[tuple[Value, Value]] = []  # (lo, step) of each loop
        #: (predicate, consumers): a warp-specialised CTA where the predicate holds has
        #: only that many consumer warpgroups with a tile (the launch's last CTA)
        self.fewer: tuple[Value, int] | None = None

    # -- addresses
    def block_index(self, e: TargetEmitter, k: Value, loop: int) -> Value:
        """Block ``m`` (``u32``, counted over all the key loops) that index ``k`` of key
        loop ``loop`` reads."""
        lo, step = self.bounds[loop]
        rel = e.bin("div", e.bin("sub", k, lo, "s32"), step, "s32")
        return e.cvt(e.add(self.offsets[loop], rel, "s32"), "u32", "s32")

    def slot(self, e: TargetEmitter, m: Value) -> RingSlot:
        """The stage of block ``m`` (``u32``) and the parity of its round; computed once
        per block and iteration (``and``/``shr`` when ``S`` is a power of two)."""
        s = self.plan.stages
        if s & (s - 1) == 0:
            stage = e.bin("and", m, e.const(s - 1, "u32"), "u32")
            rnd = e.bin("shr", m, e.const(s.bit_length() - 1, "u32"), "u32")
        else:
            stage = e.bin("rem", m, e.const(s, "u32"), "u32")
            rnd = e.bin("div", m, e.const(s, "u32"), "u32")
        parity = e.bin("and", rnd, e.const(1, "u32"), "u32")
        return RingSlot(stage, parity, e.bin("shl", stage, e.const(3, "u32"), "u32"))

    def barrier(self, e: TargetEmitter, kind: int, slot: RingSlot) -> Value:
        """The address of ``full_k``/``full_v``/``empty_k``/``empty_v`` of ``slot``."""
        # from the one base each time: ptxas folds the constant into the address,
        # where a base per kind would be three more registers live across the loops
        base = e.add(self.bars, e.const(8 * kind * self.plan.stages, "u32"), "u32")
        return e.add(base, slot.offset, "u32")

    def mem(self, e: TargetEmitter, v: bool, slot: RingSlot) -> Mem:
        """The K (or V) buffer of ``slot``, as the tile program's buffer view."""
        mem = self.v_mem if v else self.k_mem
        off = e.mul(slot.stage, e.const(self.plan.block_bytes, "u32"), "u32")
        return replace(mem, base=e.add(mem.base, off, "u32"))

    def box(self, e: TargetEmitter, v: bool, slot: RingSlot) -> SharedBox:
        """The K (or V) block of ``slot`` as a wgmma operand box."""
        p = self.plan
        mem = self.mem(e, v, slot)
        return SharedBox(mem.base, p.bn, p.d, p.elem, mem.swizzle, _ALIGN)

    def wait(self, e: TargetEmitter, kind: int, slot: RingSlot,
             parity: Value | None = None) -> None:
        """Wait until the block in ``slot`` has landed (``full_*``) or has been released
        by every thread (``empty_*``): both complete the phase of the block's round
        (``parity`` instead: another round's)."""
        e.op(MbarrierWait(), [self.barrier(e, kind, slot),
                              slot.parity if parity is None else parity])

    def release(self, e: TargetEmitter, kind: int, slot: RingSlot) -> None:
        """Every thread arrives on ``kind``'s empty barrier of ``slot``."""
        e.op(MbarrierArrive(), [self.barrier(e, kind, slot)])

    # -- set-up and loads
    def init(self, e: TargetEmitter) -> None:
        """Thread 0 initialises the barriers; the CTA passes one ``bar.sync`` (before
        the loops) so that every thread sees them initialised."""
        s = self.plan.stages

        def inits(t: TargetEmitter, kinds: tuple[int, ...], count: int) -> None:
            for kind in kinds:
                for k in range(s):
                    t.op(MbarrierInit(count),
                         [t.add(self.bars, t.const(8 * (kind * s + k), "u32"), "u32")])

        def init(t: TargetEmitter) -> None:
            inits(t, (FULL_K, FULL_V), 1)
            # every thread of every consumer warpgroup with a tile releases
            consumers = max(1, self.plan.consumers)
            if self.fewer is None:
                inits(t, (EMPTY_K, EMPTY_V), THREADS * consumers)
                return
            pred, some = self.fewer
            t.if_(pred, lambda u: inits(u, (EMPTY_K, EMPTY_V), THREADS * some),
                  lambda u: inits(u, (EMPTY_K, EMPTY_V), THREADS * consumers))
        e.if_(thread0(e), init)
        e.op(Fence("mbarrier_init"))
        e.bar()

    def count(self, e: TargetEmitter) -> Value:
        """Evaluate every loop's bounds (the later loops' are known here, see
        :func:`tessera.lower.sm90a.attention.plan.match_kv_loops`) and count the blocks: the
        first block of each loop, then ``T``, in :attr:`offsets`."""
        self.offsets, self.bounds = [], []
        total = e.const(0, "s32")
        for kv in self.plan.loops:
            lo, hi, step = (self._scalar(e, v) for v in kv.loop.operands[:3])
            span = e.bin("sub", hi, lo, "s32")
            trips = e.bin("div", e.add(span, e.bin("sub", step, e.const(1, "s32"), "s32"),
                                       "s32"), step, "s32")
            # max(trips, 0) as a select: the static estimate evaluates setp/selp bounds
            zero = e.const(0, "s32")
            trips = e.selp(trips, zero, e.setp("gt", trips, zero, "s32"), "s32")
            self.offsets.append(total)
            self.bounds.append((lo, step))
            total = e.add(total, trips, "s32")
        self.offsets.append(total)
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

    def issue(self, t: TargetEmitter, m: Value, slot: RingSlot, v: bool, first: int = 0) -> None:
        """Thread 0 loads K (or V) block ``m`` (``u32``) into ``slot``: the copy's
        index arithmetic from the body of the loop the block belongs to (loop ``first``
        or a later one), one TMA load per swizzle panel, and the expect-tx arrival of
        the block's bytes."""
        ms = t.cvt(m, "s32", "u32")
        loops = list(zip(self.plan.loops, self.offsets, self.bounds))[first:]
        offsets = self.offsets[first:]

        def pick(u: TargetEmitter, k: int) -> None:
            kv, off, (lo, step) = loops[k]
            if k + 1 < len(loops):
                later = u.setp("ge", ms, offsets[k + 1], "s32")
                u.if_(later, lambda w: pick(w, k + 1), lambda w: self._load(w, kv, ms, off,
                                                                             lo, step, slot, v))
            else:
                self._load(u, kv, ms, off, lo, step, slot, v)
        pick(t, 0)

    def _load(self, t: TargetEmitter, kv: KvLoop, ms: Value, off: Value, lo: Value,
              step: Value, slot: RingSlot, v: bool) -> None:
        low = self.low
        index = t.add(lo, t.mul(t.bin("sub", ms, off, "s32"), step, "s32"), "s32")
        body = kv.loop.regions[0].block
        copy = kv.v_copy if v else kv.k_copy
        t.loc = copy.loc  # a fault of the load names its cp_async line
        instrs = index_slice(body.instrs, copy.operands[1])
        # the body may be being lowered around this load: its values come back after
        keys = [body.args[0], *(r for i in instrs for r in i.results)]
        saved = {key: low.env[key] for key in keys if key in low.env}
        low.env[body.args[0]] = Scalar(index, "s32")
        low.stack.append(t)
        try:
            for instr in instrs:
                for operand in instr.operands:  # a later loop's constants, not yet lowered
                    if operand not in low.env:
                        self._scalar(t, operand)
                low.lower_instr(instr, t)
            src = low.env[copy.operands[1]]
        finally:
            low.stack.pop()
            for key in keys:
                low.env.pop(key, None)
            low.env.update(saved)
        full = self.barrier(t, FULL_V if v else FULL_K, slot)
        issue_copy(t, self._copy(t, src, self.box(t, v, slot)), full)
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

                def both(u: TargetEmitter, mv: Value = mv) -> None:
                    slot = self.slot(u, mv)
                    self.issue(u, mv, slot, False)
                    self.issue(u, mv, slot, True)
                t.if_(t.setp("lt", mv, total, "u32"), both)
        e.if_(thread0(e), fill)

    def refill(self, e: TargetEmitter, total: Value, m: Value, slot: RingSlot, v: bool,
               loop: int) -> None:
        """After the threads released block ``m``'s K (or V), if block ``m + S`` exists:
        every thread waits for the release to complete (the warpgroup's warps are in
        step there anyway: they have just retired the same ``wgmma``), then thread 0
        loads the block into the same stage (a block of loop ``loop``, where ``m``
        is, or of a later one). A wait in thread 0's branch alone would
        cost about 30 registers a thread: ptxas keeps the softmax's values live across
        the divergent spin loop. A warp-specialised CTA's producer refills instead."""
        if self.plan.consumers:
            return
        nxt = e.add(m, e.const(self.plan.stages, "u32"), "u32")
        go = e.setp("lt", nxt, total, "u32")
        e.if_(go, lambda t: self.wait(t, EMPTY_V if v else EMPTY_K, slot))
        e.if_(thread0(e),
              lambda t: t.if_(go, lambda u: self.issue(u, nxt, slot, v, loop)) and None)


def index_slice(instrs: list[Instr], root: Value) -> list[Instr]:
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
        made = low.extra.get("kv_mems", {}).get(id(instr))
        if made is not None:  # a warp-specialised CTA allocates the ring up front
            return [made]
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


__all__ = ["EMPTY_K", "EMPTY_V", "FULL_K", "FULL_V", "KvRing", "RingSlot", "alloc_rules",
           "index_slice", "make_ring"]
