"""The key-block loops of sm_90a attention over the K/V ring
(:mod:`tessera.lower.sm90a.attention.ring`).

Before the first loop: the ring's barriers, the block count ``T``, the loads of blocks
``0 .. S - 1``, the wait for the query copy and, in the overlapped order, ``S_0``.
Iteration ``m`` (``m`` counts blocks over all the loops), overlapped order (with
``schedule="pingpong"`` the two consumer warpgroups of a warp-specialised CTA take
turns issuing ``S``, :mod:`tessera.lower.sm90a.turns`)::

    wait full_k[m+1]; issue S_{m+1} = Q K_{m+1}ᵀ; commit   (m+1 < T; else a discarded
    wgmma.wait_group 1      -> S_m has retired               Q V_mᵀ keeps the count)
    arrive empty_k[m]; thread 0: wait empty_k, load K_{m+S}
    softmax of S_m (the loop body's own ops)                 S_{m+1} runs meanwhile
    wait full_v[m]; P_m V_m (register A); wait_group 0
    arrive empty_v[m]; thread 0: wait empty_v, load V_{m+S}

Where the plan defers ``P V`` a block (config ``defer_pv``), the first key loop is
that of :mod:`tessera.lower.sm90a.attention.defer`. The sequential order waits ``full_k[m]`` and
computes ``S_m`` in the iteration. No
``bar.sync`` runs inside the loops; the tile program's barriers become the ring's
waits and releases. In a warp-specialised CTA (:mod:`tessera.lower.sm90a.attention.split`)
the ring is set up and filled by the producer warpgroup: the loops only wait and
release.
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.async_ops import WgmmaCommit, WgmmaFence, WgmmaWait
from tessera.ir.dialects.target.ops import Const
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer, Rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.layout import Acc
from tessera.lower.sm90a.attention import defer as kvdefer
from tessera.lower.sm90a.attention.plan import KvLoop, KvPlan
from tessera.lower.sm90a.attention.ring import (
    EMPTY_K,
    EMPTY_V,
    FULL_K,
    FULL_V,
    KvRing,
    make_ring,
)
from tessera.lower.sm90a.gemm import advance_descriptor, make_descriptor, operand_offset
from tessera.lower.sm90a.turns import Turns, turns_of
from tessera.lower.tiles import SharedBox
from tessera.lower.values import Dist, Lowered, Scalar


def issue_scores(e: TargetEmitter, q: SharedBox, k: SharedBox, bn: int) -> list[Value]:
    """``Q Kᵀ`` from zero accumulators as the tile program's ``mma`` lowers it
    (``wgmma.fence``, one ``wgmma`` per k16 step and 64-row block, ``commit_group``),
    without waiting: the packed accumulators of each 64-row block, in flight."""
    from tessera.ir.dialects.target.async_ops import Wgmma

    half = bn // 2
    zero = e.const(0.0, "f32")
    blocks = [e.pack([zero] * half, "f32") for _ in range(q.rows // 64)]
    da, db = make_descriptor(e, q), make_descriptor(e, k, k_major=True)
    e.op(WgmmaFence())
    on = e.const(1, "pred")
    op = Wgmma(bn, q.elem, k.elem, 0, 0)
    for step in range(q.cols // 16):
        db_k = advance_descriptor(e, db, operand_offset(k, 16 * step, 0, k_major=True))
        for i in range(len(blocks)):
            da_k = advance_descriptor(e, da, operand_offset(q, 16 * step, 64 * i,
                                                            k_major=True))
            blocks[i] = e.one(op, blocks[i], da_k, db_k, on)
    e.op(WgmmaCommit())
    return blocks


class KvLowering:
    """The prologue and the loops of one kernel's plan."""

    def __init__(self, plan: KvPlan) -> None:
        self.plan = plan
        self.ring: KvRing | None = None
        self.total: Value | None = None
        self.scores: list[Value] = []  # S of the next block, packed (overlapped order)
        self.last_total: Value | None = None  # blocks of the CTA's last tile (ping-pong)
        self.deferred = kvdefer.DeferredLoops(self)  # the loops where P V waits a block

    def q_box(self, low: Lowerer) -> SharedBox:
        """The query buffer as a wgmma operand box (no instructions)."""
        from tessera.lower.rules.block import shared_box

        q = self.plan.loops[0].qk.operands[0]
        load = q.owner
        assert isinstance(load, Instr)
        return shared_box(low.env[load.operands[0]])  # type: ignore[arg-type]

    def prologue(self, low: Lowerer) -> None:
        """Emitted before the first key loop (see the module doc)."""
        from tessera.lower.rules.block import wait_all

        e = low.em
        if self.plan.consumers:  # set up before the CTA split; the producer loads
            ring = self.ring = low.extra["kv_ring"]
            total = self.total = ring.count(e)
        else:
            ring = self.ring = make_ring(low, self.plan)
            ring.init(e)
            total = self.total = ring.count(e)
            ring.prefetch(e, total)
        if self.plan.pingpong:  # the blocks of the CTA's last tile: as many turns
            self.last_total = self._last_total(low, e)
        wait_all(low, e, 0)  # the query block (the tile program's group ring)
        if not self.plan.overlap:
            return
        zero = e.const(0, "u32")
        if not self.plan.scores_ahead:  # each iteration issues its own S (attention.defer)
            if self.plan.pingpong:  # warpgroup 0 goes first
                e.if_(e.setp("lt", zero, total, "u32"), lambda t: self._start(t))
            return
        q = self.q_box(low)
        types = [RegType("f32", self.plan.bn // 2)] * (self.plan.bm // 64)

        def first(t: TargetEmitter) -> list[Value]:
            slot = ring.slot(t, zero)
            ring.wait(t, FULL_K, slot)
            turns = self._turns(t)
            if turns is not None:  # warpgroup 0 goes first
                t.loc = self.plan.loops[0].qk.loc  # the turn is the kernel's S = Q Kᵀ
                turns.start(t)
                turns.wait(t)
            out = issue_scores(t, q, ring.box(t, False, slot), self.plan.bn)
            if turns is not None:  # a block follows: warpgroup 1 has another turn
                turns.hand_over(t, None)
            t.op(WgmmaWait(0))
            return out

        def none(t: TargetEmitter) -> list[Value]:
            z = t.const(0.0, "f32")
            return [t.pack([z] * (self.plan.bn // 2), "f32") for _ in types]
        have = e.setp("lt", zero, total, "u32")
        self.scores = e.if_(have, first, none, types=types)

    def loop(self, low: Lowerer, kv: KvLoop, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        """One key loop: a ``ptx.for`` over its own bounds carrying its values (and the
        packed next scores), its body lowered op by op around the ring."""
        from tessera.lower.rules.flow import flatten, rebuild_all, settle
        from tessera.lower.rules.masked import settle as settle_index

        e = low.em
        settle(low, e)
        if kv is self.plan.loops[0]:
            self.prologue(low)
        if self.plan.defer_pv and not self.plan.scores_ahead:
            from tessera.lower.sm90a.attention.fa3 import Fa3Loop

            return Fa3Loop(self, low, kv, instr, args).lower()
        if self.plan.defer_pv and kv is self.plan.loops[0]:
            return self.deferred.loop(low, kv, instr, args)
        ring, total, plan = self.ring, self.total, self.plan
        assert ring is not None and total is not None
        k_loop = plan.loops.index(kv)
        lo, hi, step = (a.reg for a in args[:3])  # type: ignore[union-attr]
        init = args[3:]
        flat = [r for lv in init for r in flatten(lv)]
        n_scores = len(self.scores)
        body = instr.regions[0].block

        def step_fn(t: TargetEmitter, k: Value, *carried: Value) -> list[Value]:
            t.loc = instr.loc
            m = ring.block_index(t, k, k_loop)
            low.env[body.args[0]] = Scalar(k, "s32")
            for tv, lv in zip(body.args[1:], rebuild_all(init, carried[:len(flat)])):
                low.env[tv] = lv
            current = list(carried[len(flat):len(flat) + n_scores])
            # each use computes the block's slot afresh: kept live across the softmax,
            # the values would cost ptxas registers (it rematerialises none of them)
            q = self.q_box(low)
            nxt = []
            if plan.overlap:
                t.loc = kv.qk.loc  # the next product is the kernel's S = Q Kᵀ
                nxt, _ = self.next_scores(t, ring, q, m, total)
                t.loc = instr.loc
                low.env[kv.k_copy.operands[0]] = ring.k_mem  # read by no product here
            else:
                slot = ring.slot(t, m)
                ring.wait(t, FULL_K, slot)
                low.env[kv.k_copy.operands[0]] = ring.mem(t, False, slot)
            v_buf = kv.v_copy.operands[0]
            low.stack.append(t)
            try:
                for i in body.instrs:
                    if i.op.terminator:
                        continue
                    if isinstance(i.op, (tile_memory.CpAsync, tile_memory.Barrier)):
                        continue
                    if i is kv.qk and plan.overlap:
                        low.env[i.results[0]] = self.unpacked(low, t, i, current)
                        self.release_k(t, ring, m, total, k_loop)
                        continue
                    if v_buf in i.operands:  # the V block: landed, at its stage
                        slot = ring.slot(t, m)
                        ring.wait(t, FULL_V, slot)
                        low.env[v_buf] = ring.mem(t, True, slot)
                    low.lower_instr(i, t)
                    if i is kv.qk:
                        self.release_k(t, ring, m, total, k_loop)
                outs = [settle_index(low, v, low.env[v]) for v in body.terminator.operands]
            finally:
                low.stack.pop()
            t.loc = instr.loc
            slot = ring.slot(t, m)
            ring.release(t, EMPTY_V, slot)
            ring.refill(t, total, m, slot, True, k_loop)
            return [r for lv in outs for r in flatten(lv)] + nxt

        if plan.unroll == 2:
            results = unrolled_pairs(e, lo, hi, step, flat + self.scores, step_fn)
        else:
            results = e.for_(lo, hi, step, flat + self.scores, step_fn)
        self.scores = results[len(flat):]
        if plan.pingpong and kv is plan.loops[-1]:
            self.after_last(e)
        return rebuild_all(init, results[:len(flat)])

    def after_last(self, e: TargetEmitter) -> None:
        """A ping-pong tile one block short of the CTA's last takes one empty turn, so
        that the other warpgroup's last turn has its hand-over."""
        assert self.total is not None and self.last_total is not None
        e.if_(e.setp("lt", self.total, self.last_total, "u32"), self._empty_turn)

    def next_scores(self, t: TargetEmitter, ring: KvRing, q: SharedBox, m: Value,
                    total: Value, then: Callable[[TargetEmitter], list[Value]] | None = None
                    ) -> tuple[list[Value], list[Value]]:
        """Issue ``S_{m+1}`` (or, past the last block, a discarded ``Q V_mᵀ`` on data that
        is there, so that one group is always in flight) and retire ``S_m``. ``then``
        issues more in the same turn (the deferred order's ``P V``, whose one wait
        comes later): the scores and what ``then`` made."""
        one = t.const(1, "u32")
        nxt = t.add(m, one, "u32")
        more = t.setp("lt", nxt, total, "u32")
        after, slot = ring.slot(t, nxt), ring.slot(t, m)
        if then is not None:  # past the last block: K_m, landed (see attention.defer)
            t.if_(more, lambda u: ring.wait(u, FULL_K, after))
            k_box, other = ring.box(t, False, after), ring.box(t, False, slot)
        else:  # past the last block the discarded product reads V_m, which must have landed
            t.if_(more, lambda u: ring.wait(u, FULL_K, after),
                  lambda u: ring.wait(u, FULL_V, slot))
            k_box, other = ring.box(t, False, after), ring.box(t, True, slot)
        base = t.selp(k_box.base, other.base, more, "u32")
        box = SharedBox(base, k_box.rows, k_box.cols, k_box.elem, k_box.swizzle, k_box.align)
        turns = self._turns(t)
        if turns is not None:
            turns.wait(t)
        out = issue_scores(t, q, box, self.plan.bn)
        extra = then(t) if then is not None else []
        if turns is not None:  # past the last block warpgroup 1 has no turn left
            turns.hand_over(t, more)
        if then is None:
            t.op(WgmmaWait(1))
        return out, extra

    def _last_total(self, low: Lowerer, e: TargetEmitter) -> Value:
        """The block count of the CTA's last tile (the ring's offsets stay this
        tile's)."""
        from tessera.lower.sm90a.attention.split import last_tile

        ring = self.ring
        assert ring is not None
        saved = ring.offsets, ring.bounds
        with last_tile(low, e, self.plan):
            count = ring.count(e)
        ring.offsets, ring.bounds = saved
        return count

    def _start(self, t: TargetEmitter) -> None:
        turns = self._turns(t)
        assert turns is not None
        turns.start(t)

    def _empty_turn(self, t: TargetEmitter) -> None:
        turns = self._turns(t)
        assert turns is not None
        turns.wait(t)
        turns.hand_over(t, None)

    def _turns(self, t: TargetEmitter) -> Turns | None:
        """The consumers' turns at issuing ``S`` (``schedule="pingpong"``): one in the
        prologue and one per block; a tile one block short of the CTA's last takes an
        empty turn after its loops, so that both warpgroups take as many."""
        if not self.plan.pingpong:
            return None
        from tessera.lower.sm90a.attention.split import WarpgroupEmitter

        assert isinstance(t, WarpgroupEmitter)
        return turns_of(t, t.wg.index)

    def unpacked(self, low: Lowerer, t: TargetEmitter, instr: Instr,
                  packed: list[Value]) -> Dist:
        layout = low.layouts[instr.results[0]]
        assert isinstance(layout, Acc)
        half = self.plan.bn // 2
        return Dist(layout, [v for p in packed for v in t.unpack(p, "f32", half)], "f32")

    def release_k(self, t: TargetEmitter, ring: KvRing, m: Value, total: Value,
                   loop: int) -> None:
        """``S_m`` has retired: K block ``m`` is no longer read."""
        slot = ring.slot(t, m)
        ring.release(t, EMPTY_K, slot)
        ring.refill(t, total, m, slot, False, loop)


def unrolled_pairs(e: TargetEmitter, lo: Value, hi: Value, step: Value, init: list[Value],
                   step_fn: Callable[..., list[Value]]) -> list[Value]:
    """``for k in range(lo, hi, step)`` two iterations a trip, then the odd one out.

    The overlapped order carries the next block's scores, which ``wgmma`` writes while
    the softmax reads this block's: the two tiles are live together, so a loop of one
    iteration copies the next scores into the carried registers at its back edge (64
    ``MOV`` a thread at 64x128 blocks). With two iterations a trip the tiles take turns:
    the second iteration's ``wgmma`` may write the registers the first one's softmax
    has finished reading, and ptxas allocates them so (the copies go)."""
    one, zero = e.const(1, "s32"), e.const(0, "s32")
    owner = step.owner  # a constant step stays one (the static estimate's trip counts)
    twice = e.const(2 * owner.op.value, "s32") if isinstance(owner, Instr) and \
        isinstance(owner.op, Const) else e.add(step, step, "s32")
    span = e.bin("max", e.bin("sub", hi, lo, "s32"), zero, "s32")
    trips = e.bin("div", e.add(span, e.bin("sub", step, one, "s32"), "s32"), step, "s32")
    half = e.bin("shr", trips, e.const(1, "u32"), "s32")
    mid = e.add(lo, e.mul(half, twice, "s32"), "s32")

    def pair(t: TargetEmitter, k: Value, *carried: Value) -> list[Value]:
        once = step_fn(t, k, *carried)
        return step_fn(t, t.add(k, step, "s32"), *once)
    return e.for_(mid, hi, step, e.for_(lo, mid, twice, init, pair), step_fn)


def plan_kv(low: Lowerer) -> None:
    """Plan the K/V ring of an attention kernel (:mod:`tessera.lower.sm90a.attention.plan`): its
    key loops and K/V buffers get their own rules, and the kernel records the ring's
    stages (``ring_stages``, which the static estimate reads as copies ahead)."""
    from tessera.lower.sm90a.attention.plan import plan_kv_ring

    plan = plan_kv_ring(low.fn)
    if plan is not None:
        low.extra["kv_plan"] = plan
        # ring_stages: the static estimate's copies ahead; kv_ring: tessera ptx --stats
        low.extra.setdefault("attrs", {}).update(ring_stages=plan.stages, kv_ring=plan.describe())
        low.overrides.update(kv_rules(plan))
        if plan.consumers:  # a producer warpgroup and C consumers (attention.split)
            from tessera.lower.sm90a.attention.split import split_cta

            split_cta(low, plan)


def kv_rules(plan: KvPlan) -> dict[int, Rule]:
    """Lowering rules (by instruction ``id``) of the plan's buffers and loops."""
    from tessera.lower.sm90a.attention.ring import alloc_rules

    lowering = KvLowering(plan)
    rules = alloc_rules(plan)
    for kv in plan.loops:
        def loop(low: Lowerer, instr: Instr, args: list[Lowered], kv: KvLoop = kv
                 ) -> list[Lowered]:
            return lowering.loop(low, kv, instr, args)
        rules[id(kv.loop)] = loop
    return rules


__all__ = ["KvLowering", "issue_scores", "kv_rules", "plan_kv"]
