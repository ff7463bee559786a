"""Control flow of the tile simulator: ``tile.if``, ``tile.for``, ``tile.while``, return.

A condition the same in every running program (a *uniform* one: a scalar, or an array
that is all true or all false) runs the region in place, so uniform loops cost one
Python iteration per trip. A divergent condition compacts: the programs that take a
branch, or are still looping, continue in a frame of their own
(:func:`~tessera.interp.tile.exec.fork`) and their results are merged back when the
region ends. Barriers inside such frames check that whole groups are present.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import InterpretError
from tessera.interp.tile.context import frozen
from tessera.interp.tile.exec import (
    Body,
    Compiler,
    Frame,
    Step,
    fork,
    rank_of,
    run,
    step_rule,
)
from tessera.interp.tile.fastpaths.memo import ArrayMemo
from tessera.interp.tile.fastpaths.pending import PendingMma, deferrable, forced
from tessera.interp.tile.fastpaths.staged import staged_loop
from tessera.interp.tile.fastpaths.sum import strided_sum
from tessera.interp.tile.fastpaths.tree import tree_sum
from tessera.interp.tile.memory import globals as G
from tessera.interp.tile.memory.spaces import Ref
from tessera.interp.tile.memory.steps import make_view
from tessera.ir.core import Instr
from tessera.ir.dialects import tile as T
from tessera.ir.types import TensorType

#: a while loop running longer than this many iterations is reported (it would hang)
MAX_TRIPS = 10_000_000


def _uniform(c: Any) -> bool | None:
    """True/False when ``c`` holds that value in every program, else None."""
    if np.ndim(c) == 0:
        return bool(c)
    if c.all():
        return True
    if not c.any():
        return False
    return None


#: branch decisions and selections of read-only conditions (masks of program
#: coordinates, see ``fastpaths.memo.coordinate_memo``)
_BRANCHES = ArrayMemo(64)


@step_rule(T.If)
def _if(c: Compiler, instr: Instr) -> Step:
    cond = c.slot(instr.operands[0])
    then, other = c.body(instr.regions[0].block), c.body(instr.regions[1].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(r) for r in instr.results]

    def step(fr: Frame) -> None:
        regs = fr.regs
        cv = regs[cond]
        taken = _BRANCHES.get(cv, None, lambda: _uniform(cv)) if np.ndim(cv) else bool(cv)
        if taken is not None:
            body = then if taken else other
            run(body.steps, fr)
            for o, y in zip(outs, body.yields):
                regs[o] = regs[y]
            return
        ctx = fr.ctx
        parts: list[list[tuple[np.ndarray, Any]]] = [[] for _ in outs]
        for taking, body in ((True, then), (False, other)):
            if not body.steps and not body.yields:
                continue  # an absent else (or then): nothing to run, nothing to merge
            sel = _BRANCHES.get(cv, (ctx.lead, taking), lambda t=taking: frozen(ctx.select(
                cv if t else np.logical_not(cv))))
            sub = fork(fr, sel, body.liveins)
            run(body.steps, sub)
            for k, y in enumerate(body.yields):
                parts[k].append((sel, sub.regs[y]))
        for o, rank, p in zip(outs, ranks, parts):
            regs[o] = ctx.merge(p, rank)
    return step


def _set_args(regs: list[Any], slots: list[int], values: list[Any]) -> None:
    for s, v in zip(slots, values):
        regs[s] = v


@step_rule(T.For)
def _for(c: Compiler, instr: Instr) -> Step:
    lo, hi, stp = (c.slot(v) for v in instr.operands[:3])
    fast_sum = None if c.reference else strided_sum(c, instr)
    inits = [c.slot(v) for v in instr.operands[3:]]
    body = c.body(instr.regions[0].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(v) for v in instr.operands[3:]]
    loc = instr.loc
    defer = {} if c.reference else deferrable(instr, c.fused[instr.regions[0].block])
    staged = staged_loop(c, instr, defer) if defer else None
    fast = c.fast

    def loop(fr: Frame, i: Any, end: Any, by: Any, carried: list[Any]) -> list[Any]:
        regs = fr.regs
        if np.ndim(i) == 0 and np.ndim(end) == 0 and np.ndim(by) == 0:
            if int(by) == 0:
                raise InterpretError("range() step is zero", loc=loc)
            # a uniform loop: accumulators that only feed mma wait for one product
            trips = range(int(i), int(end), int(by))
            for k, n in defer.items():
                carried[k] = PendingMma(carried[k], n, fast, len(trips))
            for iv in trips:
                regs[body.args[0]] = np.int64(iv)
                _set_args(regs, body.args[1:], carried)
                run(body.steps, fr)
                carried = [regs[y] for y in body.yields]
                if iv == trips[0] and staged is not None and staged(fr, trips, carried):
                    break  # the other trips, derived from this one (fastpaths.staged)
            return [forced(v) for v in carried] if defer else carried
        # Divergent trip counts: iterate, compacting to the programs still looping
        # each time some leave; the leavers' values are kept and merged at the end.
        if np.any(np.asarray(by) == 0):
            raise InterpretError("range() step is zero", loc=loc)
        parent = fr.ctx
        pos = np.arange(parent.size)
        parts: list[list[tuple[np.ndarray, Any]]] = [[] for _ in carried]
        cur = fr
        # Trip counts, once: trip k runs where k < ceil((end - i) / by) (the step is
        # loop-invariant and nonzero), so a trip is tested with two integer compares
        # until the programs' counts differ. Non-integer bounds test every trip.
        trips = None
        if all(np.asarray(x).dtype.kind in "iu" for x in (i, end, by)):
            trips = np.maximum(-((np.asarray(i, dtype=np.int64) - end) // by), 0)
            lo_trips, hi_trips = int(trips.min()), int(trips.max())
        trip = 0
        while True:
            if trips is None:
                active = np.where(np.asarray(by) > 0, i < end, i > end)
                go = _uniform(active)
            elif trip < lo_trips:
                go = True
            elif trip >= hi_trips:
                go = False
            else:
                active = trips > trip
                go = _uniform(active)
            if go is None:
                ctx = cur.ctx
                sel, rest = ctx.select(active), ctx.select(np.logical_not(active))
                for k, (v, r) in enumerate(zip(carried, ranks)):
                    parts[k].append((pos[rest], ctx.take(v, r, rest)))
                cur = fork(cur, sel, body.liveins)
                pos = pos[sel]
                i, end, by = (ctx.take(x, 0, sel) for x in (i, end, by))
                carried = [ctx.take(v, r, sel) for v, r in zip(carried, ranks)]
                if trips is not None:
                    trips = ctx.take(trips, 0, sel)
                    lo_trips, hi_trips = int(trips.min()), int(trips.max())
            elif go is False:
                for k, v in enumerate(carried):
                    parts[k].append((pos, v))
                break
            regs = cur.regs
            regs[body.args[0]] = i
            _set_args(regs, body.args[1:], carried)
            run(body.steps, cur)
            carried = [regs[y] for y in body.yields]
            i = i + by
            trip += 1
        if cur is fr:
            return carried
        return [parent.merge(p, r) for p, r in zip(parts, ranks)]

    def step(fr: Frame) -> None:
        regs = fr.regs
        if fast_sum is not None:
            total = fast_sum(fr, regs[lo], regs[hi], regs[stp], regs[inits[0]])
            if total is not None:
                regs[outs[0]] = total
                return
        final = loop(fr, regs[lo], regs[hi], regs[stp], [regs[s] for s in inits])
        for o, v in zip(outs, final):
            regs[o] = v
    return step


@step_rule(T.While)
def _while(c: Compiler, instr: Instr) -> Step:
    inits = [c.slot(v) for v in instr.operands]
    cond = c.body(instr.regions[0].block)
    body = c.body(instr.regions[1].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(v) for v in instr.operands]
    liveins = sorted(set(cond.liveins) | set(body.liveins))
    loc = instr.loc
    fast_tree = None if c.reference else tree_sum(c, instr)

    def loop(fr: Frame, carried: list[Any]) -> list[Any]:
        parent = fr.ctx
        pos = np.arange(parent.size)
        parts: list[list[tuple[np.ndarray, Any]]] = [[] for _ in carried]
        cur = fr
        for _ in range(MAX_TRIPS):
            regs = cur.regs
            _set_args(regs, cond.args, carried)
            run(cond.steps, cur)
            cv = regs[cond.yields[0]]
            go = _uniform(cv)
            if go is False:
                if cur is fr:
                    return carried
                for k, v in enumerate(carried):
                    parts[k].append((pos, v))
                return [parent.merge(p, r) for p, r in zip(parts, ranks)]
            if go is None:  # some programs leave: keep their values, go on with the rest
                ctx = cur.ctx
                sel, rest = ctx.select(cv), ctx.select(np.logical_not(cv))
                for k, (v, r) in enumerate(zip(carried, ranks)):
                    parts[k].append((pos[rest], ctx.take(v, r, rest)))
                cur = fork(cur, sel, liveins)
                pos = pos[sel]
                carried = [ctx.take(v, r, sel) for v, r in zip(carried, ranks)]
                regs = cur.regs
            _set_args(regs, body.args, carried)
            run(body.steps, cur)
            carried = [regs[y] for y in body.yields]
        raise InterpretError(f"a while loop ran more than {MAX_TRIPS} iterations", loc=loc,
                             hint="check that the loop condition eventually becomes false")

    def step(fr: Frame) -> None:
        if fast_tree is not None:
            done = fast_tree(fr, fr.regs[inits[0]])
            if done is not None:
                fr.regs[outs[0]] = done
                return
        final = loop(fr, [fr.regs[s] for s in inits])
        for o, v in zip(outs, final):
            fr.regs[o] = v
    return step


@step_rule(T.Return)
def _return(c: Compiler, instr: Instr) -> Step:
    if not instr.operands:
        return lambda fr: None
    v = instr.operands[0]
    src = c.slot(v)
    loc = instr.loc
    if not isinstance(v.type, TensorType):
        def ret_param(fr: Frame) -> None:
            fr.st.result = fr.regs[src]
            fr.st.result_set = True
        return ret_param
    if v.type.rank == 0:
        def ret_scalar(fr: Frame) -> None:
            ctx = fr.ctx
            if int(ctx.pid_flat[0]) == 0:  # tile 0's value
                x = np.asarray(fr.regs[src])
                fr.st.result = x.reshape(-1)[0] if x.ndim else x[()]
                fr.st.result_set = True
        return ret_scalar
    tile = v.type.shape

    def ret_tile(fr: Frame) -> None:
        st, ctx = fr.st, fr.ctx
        out = st.output
        b = int(out.batched)
        whole = Ref(out, ((ctx.coords[0],) if b else ()) + (0,) * len(tile),
                    ((1,) if b else ()) + out.dims[b:], (0,) if b else ())
        rel = [ctx.coords[1 + j] * n if j < len(st.geom.grid) else 0
               for j, n in enumerate(tile)]
        ref = make_view(st, ctx, loc, whole, rel, tuple(tile), ())
        G.store(st, ctx, loc, ref, fr.regs[src])
    return ret_tile


__all__ = ["MAX_TRIPS", "Body"]
