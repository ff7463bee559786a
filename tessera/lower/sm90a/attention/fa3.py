"""FlashAttention-3's order of sm_90a attention's key loops (config ``defer_pv="fa3"``;
Shah et al. 2024, sec. 3.2, Algorithm 2): iteration ``m`` issues ``S_m = Q K_mᵀ`` and
``P_{m-1} V_{m-1}`` together, ``wgmma.wait_group 1`` retires ``S_m`` alone, and the
softmax of ``S_m`` runs while ``P_{m-1} V_{m-1}`` is in flight. Each key loop (the
diagonal one of a causal kernel too) is lowered as::

    first block m0 (peeled):  wait full_k[m0]; [turn] S_m0; [hand over]; wait_group 0
                              arrive empty_k[m0]; softmax -> P_m0; C = rescale(initial acc)
    m = m0+1 .. last:         wait full_v[m-1], full_k[m]
                              [turn] S_m; P_{m-1} V_{m-1} into C; [hand over]
                              wait_group 1           S_m retired, the product in flight
                              arrive empty_k[m]; softmax of S_m -> P_m
                              wait_group 0; arrive empty_v[m-1]; C = rescale(product)
    after the loop:           wait full_v[last]; P_last V_last into C; wait_group 0
                              arrive empty_v[last]            -> the loop's accumulator

The loop carries the kernel's values, ``C`` packed as ``wgmma`` holds it and ``P``'s
register-A fragments: no score tile crosses the back edge (the overlapped order of
:mod:`tessera.lower.sm90a.attention.loop` carries the next one, 64 register copies a thread
at 64x128 blocks), and with the first and last blocks peeled no select between the
product and the loop's initial accumulator sits in the loop (each would be another
64). A loop without blocks (a causal kernel's first query tile) keeps its values; one
of a block runs the peeled first and last blocks alone. A causal kernel's tiles read
different numbers of blocks, and each releases its loop's last V block after the loop:
a CTA whose tile ends early goes on past its loop while another tile's loop still
waits for that release, which the Target IR interpreter runs with independent CTAs
(:func:`~tessera.interp.target.runner.run_target`), as a GPU does.
The products, their operands and their order are the tile program's, so the bits are
those of the other orders. ``[turn]``: with ``schedule="pingpong"`` the two consumers
take turns issuing (:mod:`tessera.lower.sm90a.turns`), one turn a block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.async_ops import Fence, WgmmaWait
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm90a.attention.defer import (
    acc_slot,
    fragments,
    issue_packed,
    lower_softmax,
    pack,
    rescale_ops,
)
from tessera.lower.sm90a.attention.plan import KvLoop
from tessera.lower.sm90a.attention.ring import EMPTY_V, FULL_K, FULL_V, RingSlot
from tessera.lower.values import Dist, Lowered, Scalar

if TYPE_CHECKING:
    from tessera.lower.sm90a.attention.loop import KvLowering


class Fa3Loop:
    """One key loop in FlashAttention-3's order (see the module doc)."""

    def __init__(self, lowering: KvLowering, low: Lowerer, kv: KvLoop, instr: Instr,
                 args: list[Lowered]) -> None:
        from tessera.lower.rules.flow import flatten

        self.lowering, self.low, self.kv, self.instr = lowering, low, kv, instr
        self.plan = lowering.plan
        self.k_loop = self.plan.loops.index(kv)
        self.bounds = [a.reg for a in args[:3]]  # type: ignore[union-attr]
        init = args[3:]
        slot = acc_slot(kv)
        assert slot is not None
        self.slot, self.rescale = slot, rescale_ops(kv, slot) or []
        acc0 = init[slot]
        assert isinstance(acc0, Dist)
        self.acc0 = acc0
        self.others = [lv for j, lv in enumerate(init) if j != slot]
        self.flat = [r for lv in self.others for r in flatten(lv)]

    def lower(self) -> list[Lowered]:
        """The loop's values after it (the accumulator in its slot)."""
        from tessera.lower.rules.flow import rebuild_all

        e, lo, hi = self.low.em, self.bounds[0], self.bounds[1]
        types = [r.type for r in self.flat + list(self.acc0.regs)]
        done = e.if_(e.setp("lt", lo, hi, "s32"), self._blocks,
                     lambda t: self.flat + list(self.acc0.regs), types=types)
        vals = rebuild_all(self.others, done[:len(self.flat)])
        vals.insert(self.slot, Dist(self.acc0.layout, done[len(self.flat):], self.acc0.type))
        if self.kv is self.plan.loops[-1] and self.plan.pingpong:
            self.lowering.after_last(e)
        return vals

    # -- the blocks of a loop that has some
    def _blocks(self, t: TargetEmitter) -> list[Value]:
        lo, hi, step = self.bounds
        ring, plan = self.lowering.ring, self.plan
        assert ring is not None
        for tv, lv in zip(self._mine(), self.others):
            self.low.env[tv] = lv
        m0 = ring.block_index(t, lo, self.k_loop)
        here = ring.slot(t, m0)
        ring.wait(t, FULL_K, here)
        scores, _ = self._turn(t, m0, here, None, None)
        t.op(WgmmaWait(0))
        outs, frags, c = self._body(t, lo, m0, scores, self.acc0)
        carried = outs + pack(t, c, plan.d) + frags + [m0]
        n_out, n_c = len(outs), plan.bm // 64
        results = t.for_(t.add(lo, step, "s32"), hi, step, carried, self._iteration)
        last, c_in = results[-1], results[n_out:n_out + n_c]
        frags = results[n_out + n_c:-1]
        t.loc = self.instr.loc
        at = ring.slot(t, last)
        ring.wait(t, FULL_V, at)
        product = issue_packed(t, c_in, frags, ring.box(t, True, at), plan.bm // 64)
        t.op(WgmmaWait(0))
        self._release_v(t, last, at)
        return results[:n_out] + [v for p in product for v in t.unpack(p, "f32", plan.d // 2)]

    def _iteration(self, t: TargetEmitter, k: Value, *carried: Value) -> list[Value]:
        from tessera.lower.rules.flow import rebuild_all

        ring, plan = self.lowering.ring, self.plan
        assert ring is not None
        n_flat, n_c = len(self.flat), plan.bm // 64
        t.loc = self.instr.loc
        m = ring.block_index(t, k, self.k_loop)
        prev = t.bin("sub", m, t.const(1, "u32"), "u32")
        at, here = ring.slot(t, prev), ring.slot(t, m)
        ring.wait(t, FULL_V, at)
        ring.wait(t, FULL_K, here)
        c_in, p_in = list(carried[n_flat:n_flat + n_c]), list(carried[n_flat + n_c:-1])
        for tv, lv in zip(self._mine(), rebuild_all(self.others, carried[:n_flat])):
            self.low.env[tv] = lv
        scores, product = self._turn(t, m, here, (c_in, p_in), at)
        assert product is not None
        t.op(WgmmaWait(1))  # S_m has retired; P_{m-1} V_{m-1} runs during the softmax
        retired = _Retired(product, self.acc0, plan.d)
        outs, frags, c = self._body(t, k, m, scores, retired)
        return outs + pack(t, c, plan.d) + frags + [m]

    # -- pieces
    def _mine(self) -> list[Value]:
        """The loop body's block arguments of the kernel's values (not the accumulator)."""
        body = self.instr.regions[0].block
        return [a for j, a in enumerate(body.args[1:]) if j != self.slot]

    def _turn(self, t: TargetEmitter, m: Value, here: RingSlot,
              pv: tuple[list[Value], list[Value]] | None, v_at: RingSlot | None
              ) -> tuple[list[Value], list[Value] | None]:
        """Issue ``S_m`` (and ``P_{m-1} V_{m-1}`` from ``pv``'s packed ``C`` and
        fragments, V at ``v_at``) in the warpgroup's turn: the scores (and the product),
        in flight."""
        from tessera.lower.sm90a.attention.loop import issue_scores

        lowering, ring = self.lowering, self.lowering.ring
        assert ring is not None
        t.loc = self.kv.qk.loc  # the turn is the kernel's S = Q Kᵀ
        turns = lowering._turns(t)
        if turns is not None:
            turns.wait(t)
        scores = issue_scores(t, lowering.q_box(self.low), ring.box(t, False, here),
                              self.plan.bn)
        product = None
        if pv is not None and v_at is not None:
            product = issue_packed(t, pv[0], pv[1], ring.box(t, True, v_at),
                                   self.plan.bm // 64)
        if turns is not None:  # past the last block warpgroup 1 has no turn left
            more = t.setp("lt", t.add(m, t.const(1, "u32"), "u32"), lowering.total, "u32")
            turns.hand_over(t, more)
        t.loc = self.instr.loc
        return scores, product

    def _body(self, t: TargetEmitter, k: Value, m: Value, scores: list[Value],
              acc: Dist | _Retired) -> tuple[list[Value], list[Value], list[Value]]:
        """The kernel's ops on block ``m`` whose scores have retired: the softmax makes
        ``P``; after the product before has retired (``acc`` a :class:`_Retired`: wait,
        release its V block) ``P``'s fragments are made and the rescale makes ``C``.
        The loop's next values (flat), the fragments and ``C``'s registers."""
        from tessera.lower.rules.flow import flatten
        from tessera.lower.rules.masked import settle as settle_index

        low, kv, lowering = self.low, self.kv, self.lowering
        ring = lowering.ring
        assert ring is not None
        body = self.instr.regions[0].block
        low.env[body.args[0]] = Scalar(k, "s32")
        low.stack.append(t)
        try:
            skip = {id(i) for i in self.rescale}
            p = lower_softmax(lowering, low, t, kv, skip, scores, m)
            t.loc = self.instr.loc
            if isinstance(acc, _Retired):
                # ptxas 13.5 otherwise moves this wait up to just after wait_group 1, and
                # the softmax then runs after P_{m-1} V_{m-1} instead of beside it; it
                # moves no wgmma.wait_group across a fence (one MEMBAR.ALL.CTA, with no
                # memory operation of the warp in flight to wait for)
                t.op(Fence("acq_rel_cta"))
                t.op(WgmmaWait(0))  # P_{m-1} V_{m-1} retired
                prev = t.bin("sub", m, t.const(1, "u32"), "u32")
                self._release_v(t, prev, ring.slot(t, prev))
                acc = acc.dist(t)
            # P's fragments after the wait, as FlashAttention-3 converts them: made before
            # it, they would be written while P_{m-1} V_{m-1} still reads its own
            frags = fragments(t, p, self.plan.elem)
            low.env[body.args[1 + self.slot]] = acc
            for i in self.rescale:
                low.lower_instr(i, t)
            c = low.env[kv.pv.operands[2]]
            assert isinstance(c, Dist)
            outs = [r for j, v in enumerate(body.terminator.operands) if j != self.slot
                    for r in flatten(settle_index(low, v, low.env[v]))]
        finally:
            low.stack.pop()
        return outs, frags, list(c.regs)

    def _release_v(self, t: TargetEmitter, m: Value, at: RingSlot) -> None:
        """V block ``m``'s product has retired: release it, refill its stage."""
        ring, total = self.lowering.ring, self.lowering.total
        assert ring is not None and total is not None
        ring.release(t, EMPTY_V, at)
        ring.refill(t, total, m, at, True, self.k_loop)


class _Retired:
    """The packed product ``P_{m-1} V_{m-1}``, in flight until the body's wait."""

    def __init__(self, product: list[Value], acc0: Dist, d: int) -> None:
        self.product, self.acc0, self.d = product, acc0, d

    def dist(self, t: TargetEmitter) -> Dist:
        regs = [v for p in self.product for v in t.unpack(p, "f32", self.d // 2)]
        return Dist(self.acc0.layout, regs, self.acc0.type)


__all__ = ["Fa3Loop"]
