"""The deferred ``P V`` order of sm_90a attention: ``P_m V_m`` is issued one block later,
beside ``S_{m+2}``, and runs during the softmax of ``S_{m+1}``, as ``S_{m+2}`` does
(FlashAttention-3's intra-warpgroup overlap, Shah et al. 2024, sec. 3.2, with both
products overlapped). The first key loop takes this order; a causal kernel's later
loop, its blocks on the diagonal (one, at 64x64 blocks), keeps that of
:mod:`tessera.lower.sm90a.attention.loop`. Iteration ``m``::

    wait full_k[m+1]; wait full_v[m-1]
    issue S_{m+1} = Q K_{m+1}ᵀ; issue P_{m-1} V_{m-1} into C_{m-1}     (no wait)
    release K_m; softmax of S_m (retired last iteration) -> P_m's register-A fragments
    wgmma.wait_group 0         S_{m+1} and P_{m-1} V_{m-1} retired
    release V_{m-1}; acc = P_{m-1} V_{m-1}; C_m = the rescaled acc (the kernel's ops)
    last iteration of the loop: wait full_v[m]; P_m V_m; wait_group 0; release V_m

One ``wgmma.wait_group 0`` an iteration (two in a loop's last), none with groups left.
The loop carries the next product's operands (``C`` packed as ``wgmma`` holds it,
``P``'s fragments) and the retired next scores, so nothing is in flight across the
back edge, where the loop's register copies would read it (PTX ISA sec. 9.7.15.6: the
registers of an in-flight ``wgmma`` must not be accessed; ptxas serialises such a
pipeline, C7514, and the kernel check, :mod:`tessera.ir.dialects.target.check`,
reports it). ``C`` is the product's own accumulator operand: ``wgmma`` adds into the
carried registers in place. The ops that read the accumulator (the kernel's rescale)
are lowered after the wait. The first iteration has no product pending: it
multiplies zero fragments by ``V_m`` and drops the result for the loop's initial
accumulator (a constant: no register holds it through the loop). The last iteration
retires its own product, so that every V block of the loop is released within it
and the later loop starts with nothing in flight. Past the last
block the discarded ``S`` reads ``K_m``, which has landed (a wait for ``V_m`` there
would come before this iteration's release of ``V_{m-1}``; ``K_m``'s stage is never
refilled: block ``m + S`` is past the last). The products and their operands are the
tile program's, so the bits are the non-deferred order's. The price is registers:
``P``'s fragments live one softmax longer, beside both score tiles and the
accumulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tessera.errors import UnsupportedError
from tessera.ir.core import Function, Instr, Value, uses
from tessera.ir.dialects.target.async_ops import WgmmaWait
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.sm90a.attention.ring import EMPTY_V, FULL_V, KvRing
from tessera.lower.tiles import THREADS, SharedBox
from tessera.lower.values import Dist, Lowered, Scalar

if TYPE_CHECKING:
    from tessera.lower.core import Lowerer
    from tessera.lower.emit import TargetEmitter
    from tessera.lower.sm90a.attention.loop import KvLowering
    from tessera.lower.sm90a.attention.plan import KvLoop

#: registers a thread of the one-warpgroup kernel of the deferred order takes, by head
#: dimension up to 64 / 128: ptxas 13.5 gives 167 to 168 (D=64, three stages) and 176
#: to 227 (D=128) at 64x64 blocks, causal or not, fast or checked, where the overlapped
#: order without it takes 128 to 162 and 165 to 168; no spills. (A consumer
#: warpgroup's ``setmaxnreg`` share holds it: no spills at D=64 or D=128.)
DEFER_THREAD_REGS = (168, 232)
#: f32 values a consumer thread of the deferred order holds at once: the next block's
#: ``S`` in flight, ``S`` of this block, the previous block's ``P`` fragments (half as
#: many registers) and the output accumulator. 64x64 blocks at D=128 are 144; 64x128
#: blocks (224 at D=128, 192 at D=64) spill under ``setmaxnreg`` 240 with ptxas 13.5
#: (20 to 192 bytes causal, checked or ping-pong), so they wait for ``P V`` in its block
DEFER_SPLIT_VALUES = 160


def acc_slot(kv: KvLoop) -> int | None:
    """The position among the loop's carried values of the accumulator that ``P V``
    adds into (its ``C`` operand; the loop yields the product), or None."""
    term = kv.loop.regions[0].block.terminator
    if len(kv.pv.operands) != 3 or term is None:
        return None
    where = [k for k, v in enumerate(term.operands) if v is kv.pv.results[0]]
    return where[0] if len(where) == 1 else None


def rescale_ops(kv: KvLoop, slot: int) -> list[Instr] | None:
    """The body's ops that read the carried accumulator (position ``slot``), in order,
    when they only make ``P V``'s ``C`` operand (None otherwise)."""
    body = kv.loop.regions[0].block
    tainted, out = {body.args[1 + slot]}, []
    for instr in body.instrs:
        if instr is kv.pv or instr.op.terminator:
            continue
        if any(v in tainted for v in instr.operands):
            if instr.regions:
                return None
            out.append(instr)
            tainted.update(instr.results)
    made = {r for i in out for r in i.results}
    for instr in body.instrs:  # what they make feeds C alone
        used = [v for v in instr.operands if v in made]
        if used and instr not in out and not (instr is kv.pv and used == [kv.pv.operands[2]]
                                              and kv.pv.operands[2] in made):
            return None
    if kv.pv.operands[0] in tainted or kv.pv.operands[1] in tainted:
        return None
    return out


def defer_problem(fn: Function, loops: tuple[KvLoop, ...], bm: int, bn: int, d: int,
                  consumers: int, stages: int, fa3: bool = False) -> str | None:
    """Why ``P_m V_m`` cannot wait one block in the first key loop (None when it can;
    the later loops, a causal kernel's blocks on the diagonal, keep their order): in it
    ``P V`` adds into a carried accumulator that only the ops making its ``C`` operand
    read, its product is only yielded, and, in a one-warpgroup CTA, the order's
    registers (:data:`DEFER_THREAD_REGS`) leave as many CTAs per SM as the ring's shared
    memory does. ``fa3`` (FlashAttention-3's order: every loop defers ``P V`` and waits
    for ``S`` in its own iteration): every loop must qualify, and no next score tile is
    held."""
    users = uses(fn.body)
    for kv in loops if fa3 else loops[:1]:
        j = acc_slot(kv)
        if j is None or rescale_ops(kv, j) is None:
            return "P V does not add into a carried accumulator (mma's C operand)"
        if len(users.get(kv.pv.results[0], [])) != 1:
            return "the P V product is read inside its loop"
    from tessera.lower.sm90a.mma import REGISTER_A_VALUES

    # a consumer's P is register A whenever its CTA was split (attention.plan.split_problem)
    if not consumers and (bm * bn // THREADS > REGISTER_A_VALUES or bm * d // THREADS > 64):
        return f"P of a {bm}x{bn} block is not wgmma's register A"
    if consumers:
        tiles = 1 if fa3 else 2
        values = tiles * bm * bn // THREADS + bm * bn // THREADS // 2 + bm * d // THREADS
        if values > DEFER_SPLIT_VALUES:
            what = f"this {bm}x{bn} score tile" if fa3 else \
                f"the next and this {bm}x{bn} score tiles"
            return (f"registers: {what}, the previous P and a {bm}x{d} accumulator are "
                    f"{values} values a thread, over {DEFER_SPLIT_VALUES}")
        return None
    from tessera.lower.sm90a.attention.plan import occupancy_problem

    return occupancy_problem(DEFER_THREAD_REGS[0 if d <= 64 else 1], bm, bn, d, stages)


def defer_decision(fn: Function, loops: tuple[KvLoop, ...], bm: int, bn: int, d: int,
                   consumers: int, stages: int, config: dict, sequential: str | None
                   ) -> str | None:
    """Why ``P_m V_m`` is waited in iteration ``m`` (None: it is deferred).
    ``sequential``: why the order is not overlapped (None when it is). Config
    ``defer_pv=True`` asks for the order (an ``UnsupportedError`` where the kernel cannot
    have it); by default P V is waited in its block: on an H200 the deferred order ran
    8-16 % slower at every shape timed (its carried fragments and extra integer work
    cost more than the overlap gains), see benchmarks/README.md."""
    want = config.get("defer_pv")
    if want is False:
        return "config defer_pv=False"
    if want not in (None, True, "fa3"):
        raise UnsupportedError(f"defer_pv={want!r}: True, False or 'fa3'", loc=fn.loc,
                               hint="defer_pv='fa3' takes FlashAttention-3's order")
    why = (f"the order is sequential ({sequential})" if sequential is not None
           else defer_problem(fn, loops, bm, bn, d, consumers, stages, want == "fa3"))
    if why is not None and want:
        raise UnsupportedError(f"defer_pv={want!r}: {why}", loc=fn.loc,
                               hint="drop defer_pv (P V is then waited in its block)")
    return why if why is not None or want else "defer_pv not set"


class DeferredLoops:
    """The key loops of one kernel in the deferred order, around a :class:`KvLowering`
    (its ring, prologue and score products)."""

    def __init__(self, kv: KvLowering) -> None:
        self.kv = kv

    def loop(self, low: Lowerer, kv: KvLoop, instr: Instr, args: list[Lowered]
             ) -> list[Lowered]:
        """One key loop (see the module doc): it carries the next product's ``C``
        (packed) and ``P`` fragments besides the kernel's values; its last iteration
        leaves the accumulator itself in ``C``'s place."""
        from tessera.lower.rules.flow import flatten, rebuild_all

        lowering, plan, e = self.kv, self.kv.plan, low.em
        lo, hi, step = (a.reg for a in args[:3])  # type: ignore[union-attr]
        init, slot = args[3:], acc_slot(kv)
        assert slot is not None
        acc0 = init[slot]
        assert isinstance(acc0, Dist)
        zero = e.pack([e.const(0, "b32")] * 4, "b32")
        # the first iteration's product is dropped: any C, zero fragments
        pending = pack(e, acc0.regs, plan.d) + [zero] * (plan.bm // 64 * plan.bn // 16)
        others = [lv for k, lv in enumerate(init) if k != slot]
        flat = [r for lv in others for r in flatten(lv)]
        rescale = rescale_ops(kv, slot) or []
        state = _Iteration(self, low, kv, instr, (acc0, slot, rescale), others, len(flat),
                           len(pending))
        results = e.for_(lo, hi, step, flat + pending + lowering.scores, state.step)
        lowering.scores = results[len(flat) + len(pending):]
        vals, at = rebuild_all(others, results[:len(flat)]), len(flat)
        e.loc = instr.loc
        acc = [v for p in results[at:at + plan.bm // 64] for v in e.unpack(p, "f32",
                                                                             plan.d // 2)]
        vals.insert(slot, Dist(acc0.layout, acc, acc0.type))
        if kv is plan.loops[-1] and plan.pingpong:
            lowering.after_last(e)
        return vals


class _Iteration:
    """The body of one deferred key loop (:meth:`DeferredLoops.loop`)."""

    def __init__(self, loops: DeferredLoops, low: Lowerer, kv: KvLoop, instr: Instr,
                 acc: tuple[Dist, int, list[Instr]], others: list[Lowered], n_flat: int,
                 n_pending: int) -> None:
        self.lowering, self.low, self.kv, self.instr = loops.kv, low, kv, instr
        # the initial accumulator, its slot among the loop's values, the ops rescaling it
        self.acc0, self.slot, self.rescale = acc
        self.others, self.n_flat, self.n_pending = others, n_flat, n_pending

    def step(self, t: TargetEmitter, k: Value, *carried: Value) -> list[Value]:
        """Iteration ``m`` (see the module doc)."""
        from tessera.lower.rules.flow import flatten, rebuild_all
        from tessera.lower.rules.masked import settle as settle_index

        lowering, low, kv, instr = self.lowering, self.low, self.kv, self.instr
        plan, ring, total = lowering.plan, lowering.ring, lowering.total
        assert ring is not None and total is not None
        k_loop = plan.loops.index(kv)
        first, end = ring.offsets[k_loop:k_loop + 2]
        body = instr.regions[0].block
        slot, rescale = self.slot, self.rescale
        skip = {id(i) for i in rescale}
        t.loc = instr.loc
        m = ring.block_index(t, k, k_loop)
        low.env[body.args[0]] = Scalar(k, "s32")
        mine = [a for j, a in enumerate(body.args[1:]) if j != slot]
        for tv, lv in zip(mine, rebuild_all(self.others, carried[:self.n_flat])):
            low.env[tv] = lv
        at = self.n_flat
        n_c = plan.bm // 64
        c_in = list(carried[at:at + n_c])
        p_in = list(carried[at + n_c:self.n_flat + self.n_pending])
        current = list(carried[self.n_flat + self.n_pending:])
        # m > the loop's first block: a product of the block before is pending
        later = t.setp("gt", m, t.cvt(first, "u32", "s32"), "u32")
        t.loc = kv.qk.loc
        nxt, product = self._issue(t, ring, m, later, total, c_in, p_in)
        t.loc = instr.loc
        low.stack.append(t)
        try:
            p = lower_softmax(lowering, low, t, kv, skip, current, m)
            frags = fragments(t, p, plan.elem)
            t.loc = instr.loc
            t.op(WgmmaWait(0))  # S_{m+1} and P_{m-1} V_{m-1} retired
            release_previous_v(t, ring, m, later, total, k_loop)
            low.env[body.args[1 + slot]] = self._retired(t, later, product)
            for i in rescale:
                low.lower_instr(i, t)
            c_out = low.env[kv.pv.operands[2]]
            assert isinstance(c_out, Dist)
            outs = [flatten(settle_index(low, v, low.env[v]))
                    for j, v in enumerate(body.terminator.operands) if j != slot]
        finally:
            low.stack.pop()
        t.loc = instr.loc
        acc = self._drain(t, ring, m, end, total, c_out.regs, frags, k_loop)
        return [r for lv in outs for r in lv] + pack(t, acc, plan.d) + frags + nxt

    def _issue(self, t: TargetEmitter, ring: KvRing, m: Value, later: Value, total: Value,
               c_in: list[Value], p_in: list[Value]) -> tuple[list[Value], list[Value]]:
        """Wait for ``K_{m+1}`` and ``V_{m-1}`` (``V_m`` in the loop's first iteration,
        whose product is dropped), then, in the warpgroup's turn, issue ``S_{m+1}`` and
        ``P_{m-1} V_{m-1}``."""
        lowering = self.lowering
        prev = t.selp(t.bin("sub", m, t.const(1, "u32"), "u32"), m, later, "u32")
        at = ring.slot(t, prev)
        ring.wait(t, FULL_V, at)
        v_box = ring.box(t, True, at)
        blocks = lowering.plan.bm // 64

        def product(u: TargetEmitter) -> list[Value]:
            return issue_packed(u, c_in, p_in, v_box, blocks)
        return lowering.next_scores(t, ring, lowering.q_box(self.low), m, total, then=product)

    def _retired(self, t: TargetEmitter, later: Value, product: list[Value]) -> Dist:
        """The accumulator after ``P_{m-1} V_{m-1}`` (retired): the product, or in the
        loop's first iteration the loop's initial accumulator."""
        init, half = self.acc0, self.lowering.plan.d // 2
        regs = t.if_(later, lambda u: [v for p in product for v in u.unpack(p, "f32", half)],
                     lambda u: list(init.regs), types=[r.type for r in init.regs])
        return Dist(init.layout, regs, init.type)

    def _drain(self, t: TargetEmitter, ring: KvRing, m: Value, end: Value, total: Value,
               c: list[Value], frags: list[Value], loop: int) -> list[Value]:
        """In the loop's last iteration, ``P_m V_m`` is issued and retired, and ``V_m``
        released, within the loop (so that no release waits for a later loop): the
        accumulator; in the others ``C_m``, for the next iteration's product."""
        plan = self.lowering.plan
        last = t.setp("eq", t.add(m, t.const(1, "u32"), "u32"), t.cvt(end, "u32", "s32"),
                      "u32")

        def drain(u: TargetEmitter) -> list[Value]:
            at = ring.slot(u, m)
            ring.wait(u, FULL_V, at)
            out = issue_packed(u, pack(u, c, plan.d), frags, ring.box(u, True, at),
                               plan.bm // 64)
            u.op(WgmmaWait(0))
            ring.release(u, EMPTY_V, at)
            ring.refill(u, total, m, at, True, loop)
            return [v for p in out for v in u.unpack(p, "f32", plan.d // 2)]
        # rare: once a loop (the static estimate counts it out of the iterations)
        return t.if_(last, drain, lambda u: list(c), types=[r.type for r in c], rare=True)


def lower_softmax(lowering: KvLowering, low: Lowerer, t: TargetEmitter, kv: KvLoop,
                  skip: set[int], scores: list[Value], m: Value) -> Lowered:
    """The key loop body's ops on block ``m`` whose scores (``scores``, packed) have
    retired, but those in ``skip`` (the rescale), the copies, the barriers and ``P V``
    itself: K block ``m`` is released where its product is read, the V buffer is block
    ``m``'s stage. ``P`` (``P V``'s first operand), lowered."""
    ring, total = lowering.ring, lowering.total
    assert ring is not None and total is not None
    k_loop = lowering.plan.loops.index(kv)
    low.env[kv.k_copy.operands[0]] = ring.k_mem  # read by no product here
    v_buf = kv.v_copy.operands[0]
    for i in kv.loop.regions[0].block.instrs:
        if i.op.terminator or id(i) in skip or isinstance(
                i.op, (tile_memory.CpAsync, tile_memory.Barrier)):
            continue
        if i is kv.qk:
            low.env[i.results[0]] = lowering.unpacked(low, t, i, scores)
            lowering.release_k(t, ring, m, total, k_loop)  # S_m has retired
            continue
        if v_buf in i.operands:  # read by a later product
            low.env[v_buf] = ring.mem(t, True, ring.slot(t, m))
        if i is kv.pv:
            return low.env[i.operands[0]]
        low.lower_instr(i, t)
    raise AssertionError("the key loop has no P V product")


def fragments(t: TargetEmitter, p: Lowered, elem: str) -> list[Value]:
    """``P``'s register-A fragments, 64-row block by block, k16 step by step."""
    from tessera.lower.sm90a.mma import a_fragments

    assert isinstance(p, Dist)
    blocks = a_fragments(t, p.regs, p.layout.rows, p.layout.cols, elem)  # type: ignore[attr-defined]
    return [f for blk in blocks for f in blk]


def pack(e: TargetEmitter, regs: Sequence[Value], d: int) -> list[Value]:
    """An accumulator's registers packed per 64-row block, as ``wgmma`` holds them."""
    half = d // 2
    return [e.pack(list(regs[i:i + half]), "f32") for i in range(0, len(regs), half)]


def issue_packed(e: TargetEmitter, c: list[Value], frags: list[Value], v: SharedBox,
                 blocks: int) -> list[Value]:
    """``C + P V`` (:func:`tessera.lower.sm90a.mma.issue_rs_block`) from the packed
    ``C`` of each 64-row block and ``P``'s fragments (block by block, k16 step by
    step), without a wait."""
    from tessera.lower.sm90a.mma import issue_packed_rs

    steps = len(frags) // blocks
    a = [frags[i * steps:(i + 1) * steps] for i in range(blocks)]
    return issue_packed_rs(e, c, a, v)


def release_previous_v(t: TargetEmitter, ring: KvRing, m: Value, later: Value, total: Value,
                       loop: int) -> None:
    """After the wait that retired ``P_{m-1} V_{m-1}`` (``later``: ``m`` is not the
    loop's first block): V block ``m - 1`` is released, and its stage refilled."""
    def release(u: TargetEmitter) -> None:
        prev = u.bin("sub", m, u.const(1, "u32"), "u32")
        at = ring.slot(u, prev)
        ring.release(u, EMPTY_V, at)
        ring.refill(u, total, prev, at, True, loop)
    t.if_(later, release)


__all__ = ["DEFER_SPLIT_VALUES", "DEFER_THREAD_REGS", "DeferredLoops", "acc_slot", "defer_decision",
           "defer_problem", "fragments", "issue_packed", "lower_softmax", "pack",
           "release_previous_v", "rescale_ops"]
