"""Warp-specialised sm_90a attention: the CTA of FlashAttention-3 (Shah et al., 2024,
sec. 3.1), from the same tile program (the plan is :mod:`tessera.lower.sm90a.attention.plan`).

The CTA is ``C + 1`` warpgroups. Consumer warpgroup ``w < C`` runs the kernel's tile
program, unchanged, for query tile ``C * ctaid.x + w`` (its 64 query rows; ``C = 2``
makes the CTA's 128-row query tile); the last warpgroup is the producer: one elected
thread loads every key block into the K/V ring (:mod:`tessera.lower.sm90a.attention.ring`),
so the consumers only wait, compute and release. ``setmaxnreg`` gives the producer's
registers to the consumers (:attr:`~tessera.lower.sm90a.attention.plan.KvPlan.regs`: two
consumers take FlashAttention-3's 240, one the GEMM pipeline's 232)::

    all threads:  thread 0 inits full_k/v[s] (1), empty_k/v[s] (128 C); bar.sync
    producer (elected thread)                consumer warpgroup w (tile C*ctaid.x + w)
                                             Q copy; its own key loops (attention.loop):
      for block n of the last tile's order:      wait full_k[n]; S_n; release empty_k
        wait empty_k[n % S] (released n - S)     softmax; wait full_v[n]; P_n V_n
        TMA K_n; arrive.expect_tx full_k         release empty_v
        (the same for V)                       store the tile's rows

The empty barriers count every thread of the consumers that have a tile (the launch's
last CTA may have one tile fewer: it initialises them for fewer threads). The tiles of
a CTA read the same blocks in the same order, the first tile's at most one block fewer
than the last's (:mod:`tessera.lower.sm90a.attention.order`): that block's stage is never
refilled (``S >= 2``), so nobody needs its release. Inside a
consumer ``%tid.x`` reads as the thread's index in its warpgroup and ``bar.sync`` is
the warpgroup's named barrier, so the tile program's lowering runs as if it had the
CTA to itself; its shared buffers other than the ring are one per consumer.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tessera.ir.core import Block, Instr, IRRegion, Value
from tessera.ir.dialects.target import If, Yield
from tessera.ir.dialects.target.ops import Bar
from tessera.ir.dialects.target.ptx_ops import Elect
from tessera.ir.dialects.target.warp_ops import SetMaxNReg
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.attention.plan import SPLIT_REGISTER_A, KvPlan
from tessera.lower.sm90a.attention.ring import (
    EMPTY_K,
    EMPTY_V,
    KvRing,
    alloc_rules,
    index_slice,
    make_ring,
)
from tessera.lower.sm90a.mma import RING
from tessera.lower.sm90a.tma import init_barriers
from tessera.lower.tiles import THREADS
from tessera.lower.values import Lowered

#: named barriers of the consumer warpgroups (0 is the CTA's ``bar.sync``)
FIRST_BARRIER = 1


@dataclass(frozen=True)
class Warpgroup:
    """A consumer warpgroup's view of the CTA: its index and its threads' indices in
    it (``u32``), among ``count`` consumers."""

    index: Value
    tid: Value
    count: int


class WarpgroupEmitter(TargetEmitter):
    """An emitter for a consumer warpgroup's code: ``%tid.x`` is the thread's index in
    the warpgroup, ``bar.sync`` the warpgroup's named barrier (nested blocks too)."""

    def __init__(self, block: Block, wg: Warpgroup, base: TargetEmitter) -> None:
        super().__init__(block, base.loc, dict(base.consts))
        self.wg = wg

    def nested(self, block: Block) -> TargetEmitter:
        return WarpgroupEmitter(block, self.wg, self)

    def sreg(self, name: str) -> Value:
        return self.wg.tid if name == "tid.x" else super().sreg(name)

    def bar(self) -> None:
        wg = self.wg
        if wg.count == 1:
            self.op(Bar(FIRST_BARRIER, THREADS))
            return
        # the id is an immediate: one branch per warpgroup (uniform within each)
        first = self.setp("eq", wg.index, self.const(0, "u32"), "u32")
        self.if_(first, lambda t: t.op(Bar(FIRST_BARRIER, THREADS)) and None,
                 lambda t: t.op(Bar(FIRST_BARRIER + 1, THREADS)) and None)


def entry_regs(plan: KvPlan) -> int:
    """``.maxnreg`` at launch: the producer's release covers the consumers' growth."""
    producer, consumer = plan.regs
    need = (plan.consumers * consumer + producer) / (plan.consumers + 1)
    return -(-int(need) // 8) * 8


def split_cta(low: Lowerer, plan: KvPlan) -> None:
    """Emit the ring's set-up, the producer warpgroup and the consumers' entry; the
    kernel's body is then lowered into the consumer branch (``low.e``)."""
    e = low.e
    c = plan.consumers
    geom = low.geom
    assert geom is not None
    groups = geom.n_groups
    geom.ctas, geom.block = -(-groups // c), plan.threads
    low.extra["maxnreg"] = entry_regs(plan)
    low.stack.append(e)
    try:
        rules = alloc_rules(plan)
        for alloc in (plan.k_alloc, plan.v_alloc):
            rules[id(alloc)](low, alloc, [])
        ring = make_ring(low, plan)
        if groups % c:  # the last CTA's later consumers have no tile and never release
            last = e.setp("eq", e.sreg("ctaid.x"), e.const(geom.ctas - 1, "u32"), "u32")
            ring.fewer = (last, groups % c)
        # the consumers' group rings of the tile program's own copies
        # (tessera.lower.sm90a.mma.ring_setup): initialised here, before bar.sync 0
        low.extra["tma_bars"] = low.shared_buffer("tma_bars", 8 * RING * c, 8, entry=True)
        init_barriers(e, low.extra["tma_bars"], RING * c)
        ring.init(e)  # the whole CTA: thread 0 inits, everyone passes bar.sync 0
    finally:
        low.stack.pop()
    low.extra["kv_ring"] = ring
    tid = e.sreg("tid.x")
    producer = e.setp("ge", tid, e.const(THREADS * c, "u32"), "u32")
    pblock, cblock = Block(), Block()
    pe = e.nested(pblock)
    pe.op(SetMaxNReg(plan.regs[0], inc=False))
    warp0 = pe.setp("lt", tid, pe.const(THREADS * c + 32, "u32"), "u32")
    pe.if_(warp0, lambda t: t.if_(t.op(Elect())[1],
                                  lambda u: _fill(low, u, ring, plan)) and None)
    pe.op(Yield())

    ce = e.nested(cblock)
    ce.op(SetMaxNReg(plan.regs[1], inc=True))
    index = ce.warpgroup()
    wg = Warpgroup(index, ce.bin("and", tid, ce.const(THREADS - 1, "u32"), "u32"), c)
    cta = ce.cvt(ce.sreg("ctaid.x"), "s32", "u32")
    group = ce.add(ce.mul(cta, ce.const(c, "s32"), "s32"), ce.cvt(index, "s32", "u32"), "s32")
    e.op(If(), [producer], regions=[IRRegion([pblock]), IRRegion([cblock])], result_types=[])
    body: TargetEmitter
    if groups % c:  # the last CTA's later consumers have no tile (see ring.fewer)
        inner, none = Block(), Block()
        TargetEmitter(none).op(Yield())
        valid = ce.setp("lt", group, ce.const(groups, "s32"), "s32")
        ce.op(If(), [valid], regions=[IRRegion([inner]), IRRegion([none])], result_types=[])
        ce.op(Yield())
        body = WarpgroupEmitter(inner, wg, ce)
    else:
        body = WarpgroupEmitter(cblock, wg, ce)
    low.ids["group"] = group
    low.extra["consumer_wg"] = wg
    low.extra["register_a_values"] = SPLIT_REGISTER_A  # P of a 64x128 block stays in registers
    low.e = body
    low.extra["continuation"] = body  # the kernel ends in the consumer branch
    for instr in low.fn.body.instrs:  # the tile program's other buffers: one a consumer
        if isinstance(instr.op, tile_memory.AllocShared) and instr not in (plan.k_alloc,
                                                                          plan.v_alloc):
            low.overrides[id(instr)] = _replicated_alloc


def _replicated_alloc(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """The tile program's shared buffer laid out as the checked rule lays it out
    (:func:`tessera.lower.rules.memory.alloc_shared`), one copy per consumer
    warpgroup."""
    from tessera.lower.rules.memory import alloc_shared

    wg: Warpgroup = low.extra["consumer_wg"]
    return alloc_shared(low, instr, wg.count, wg.index)


def _scalar_slice(low: Lowerer, plan: KvPlan) -> list[Instr]:
    """The top-level instructions before the first key loop that the loops' bounds and
    the K/V copies' index arithmetic read (scalar index arithmetic: the plan evaluated
    them, :mod:`tessera.lower.sm90a.attention.order`)."""
    body = low.fn.body.instrs
    first = body.index(plan.loops[0].loop)
    need: set[Value] = set()
    for kv in plan.loops:
        need.update(kv.loop.operands[:3])
        inner = kv.loop.regions[0].block
        for copy in (kv.k_copy, kv.v_copy):
            for i in index_slice(inner.instrs, copy.operands[1]):
                need.update(i.operands)
    out = []
    for instr in reversed(body[:first]):
        if any(r in need for r in instr.results):
            assert all(isinstance(r.type, TensorType) and r.type.rank == 0
                       for r in instr.results)
            out.append(instr)
            need.update(instr.operands)
    return out[::-1]


@contextmanager
def last_tile(low: Lowerer, e: TargetEmitter, plan: KvPlan) -> Iterator[None]:
    """The index arithmetic of the CTA's last query tile, whose key blocks the producer
    loads, lowered into ``e`` (with the tile's group id); afterwards the lowering's
    values are put back: those of the producer are out of the consumers' scope."""
    c = plan.consumers
    groups = low.geom.n_groups  # type: ignore[union-attr]
    cta = e.cvt(e.sreg("ctaid.x"), "s32", "u32")
    last = e.add(e.mul(cta, e.const(c, "s32"), "s32"), e.const(c - 1, "s32"), "s32")
    if groups % c:  # min(last, groups - 1), as a select the static estimate evaluates
        final = e.const(groups - 1, "s32")
        last = e.selp(last, final, e.setp("lt", last, final, "s32"), "s32")
    saved, group = dict(low.env), low.ids.get("group")
    low.ids["group"] = last
    low.stack.append(e)
    try:
        for instr in _scalar_slice(low, plan):
            low.lower_instr(instr, e)
        yield
    finally:
        low.stack.pop()
        low.env.clear()
        low.env.update(saved)  # also drops the constants the ring's count lowered
        if group is None:
            del low.ids["group"]
        else:  # a consumer's own tile
            low.ids["group"] = group


def _fill(low: Lowerer, e: TargetEmitter, ring: KvRing, plan: KvPlan) -> None:
    """The producer's elected thread: every block of the last tile's order, each after
    its stage's release by every consumer thread (a fresh barrier's phase before the
    first counts as released)."""
    def step(t: TargetEmitter, k: Value) -> list[Value]:
        n = t.cvt(k, "u32", "s32")
        slot = ring.slot(t, n)
        # the release of block n - S completes the phase before this round's
        before = t.bin("xor", slot.parity, t.const(1, "u32"), "u32")
        for kind, v in ((EMPTY_K, False), (EMPTY_V, True)):
            ring.wait(t, kind, slot, parity=before)
            ring.issue(t, n, slot, v)
        return []

    with last_tile(low, e, plan):
        total = e.cvt(ring.count(e), "s32", "u32")
        e.loc = plan.loops[0].loop.loc
        e.for_(e.const(0, "s32"), total, e.const(1, "s32"), [], step)


__all__ = ["FIRST_BARRIER", "Warpgroup", "WarpgroupEmitter", "entry_regs", "last_tile",
           "split_cta"]
