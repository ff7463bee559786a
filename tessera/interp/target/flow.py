"""Structured control flow with per-thread masks, and ``shfl.sync``.

``ptx.if`` runs its then-region on the active threads whose predicate is true and its
else-region on the rest, then merges the yielded registers per thread (a region no
thread takes is skipped). When a region waits on ``mbarrier`` phases (a producer and
its consumers) the two run as coroutines (:mod:`tessera.interp.target.schedule`).
``ptx.for`` and ``ptx.while`` iterate while any active thread
continues; a thread that finished is masked off and keeps its carried values, so threads
may run different trip counts, as divergent branches do on hardware.

An ``if`` whose arms may wait for each other (``mbarrier.try_wait``, ``bar.arrive``, or
a named ``bar.sync`` of more threads than an arm has) runs its arms as tasks
(:mod:`tessera.interp.target.schedule`); an arm with ``bar.arrive`` taken by several
warpgroups runs one task per warpgroup of each CTA, each with its own copy of the
registers, as its warpgroups may take turns at named barriers (ping-pong). So does every
such arm of a launch whose CTAs run independently (``Machine.independent``, see
:func:`~tessera.interp.target.runner.run_target`'s ``ctas``): there a CTA whose loop ends
early goes on past it while another CTA's loop still runs, as on a GPU, where lockstep
would hold it in the loop until the longest one ends. Barriers are
:mod:`tessera.interp.target.barriers`. Warp-level instructions act on groups of 32
consecutive threads of a CTA; ``shfl.sync`` follows the pseudocode of the ISA's
"shfl.sync" with the ``c`` operand given by the op's ``clamp`` attribute (bits 0-4 the
clamp, bits 8-12 the segment mask; ``shfl.up`` conventionally uses 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.interp.target.schedule import run_concurrently
from tessera.interp.target.state import (
    Machine,
    RegisterFile,
    Step,
    TargetBody,
    TargetCompiler,
    TargetFrame,
    merge,
    narrow,
    raw,
    run,
    step_rule,
)
from tessera.ir.core import Block, Instr, walk
from tessera.ir.dialects import target as target_ir
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.async_ops import MbarrierWait

#: iterations after which a loop is reported as not terminating
LOOP_LIMIT = 1 << 22


def _enter(fr: TargetFrame, body: TargetBody, values: list[Any], mask: np.ndarray) -> list[Any]:
    """Run ``body`` on the threads of ``mask`` with ``values`` as its arguments."""
    for slot, v in zip(body.args, values):
        fr.regs[slot] = v
    run(body.steps, TargetFrame(fr.regs, mask, fr.m))
    return [raw(fr.regs, y) for y in body.yields]  # lazy values stay lazy


def _waits(block: Block) -> tuple[bool, bool, int]:
    """Whether ``block`` waits on mbarriers, arrives on named barriers, and the largest
    thread count of its named ``bar.sync`` (0: none)."""
    instrs = list(walk(block))
    counts = [i.op.count for i in instrs if isinstance(i.op, target_ops.Bar)]
    return (any(isinstance(i.op, MbarrierWait) for i in instrs),
            any(isinstance(i.op, target_ops.BarArrive) for i in instrs), max(counts, default=0))


def _split(fr: TargetFrame, body: TargetBody, mask: np.ndarray
           ) -> list[tuple[np.ndarray, Callable[[], list[Any]]]]:
    """One task per warpgroup of ``mask`` (of each CTA: CTAs whose warpgroups take
    different turns must not wait for each other), each on a copy of the register
    file: its threads' values are merged back. The tasks start in the order the
    launch's ``cta_order`` lands atomics (all reversed under ``"descending"``), so that
    atomics of warpgroups that do not wait in between land in the order they do in
    lockstep (:func:`.memory.steps.arrival`)."""
    m = fr.m
    per_cta = -(-m.nthreads // 128)
    where = m.cta * per_cta + m.tid // 128  # a CTA's warpgroups
    groups = np.unique(where[mask])
    if m.cta_order == "descending":
        groups = groups[::-1]
    out = []
    for w in groups.tolist():
        part = mask & (where == w)
        regs = RegisterFile(fr.regs) if len(groups) > 1 else fr.regs
        sub = TargetFrame(regs, fr.mask, m)
        out.append((part, lambda sub=sub, part=part: _enter(sub, body, [], part)))
    return out


@step_rule(target_ir.If)
def _if(c: TargetCompiler, instr: Instr) -> Step:
    p = c.slot(instr.operands[0])
    then, other = (c.body(r.block) for r in instr.regions)
    outs = [c.slot(r) for r in instr.results]
    waits = [_waits(r.block) for r in instr.regions]
    mbar = any(w[0] or w[1] for w in waits)
    most = [w[2] for w in waits]

    def concurrent(m: Machine, t: np.ndarray, e: np.ndarray) -> bool:
        if mbar:
            return True
        # a named bar.sync of more threads than its arm has per CTA waits for the other
        arm_threads = [x.reshape(m.ncta, m.nthreads).sum(axis=1).max() for x in (t, e)]
        return any(n > have for n, have in zip(most, arm_threads) if n)

    def step(fr: TargetFrame) -> None:
        pred = fr.regs[p]
        t = fr.mask & pred
        e = fr.mask & ~pred
        run_t, run_e = bool(t.any()), bool(e.any())
        if (run_t or run_e) and (mbar or any(most)) and concurrent(fr.m, t, e):
            tasks = [task for body, arm, go, w in ((then, t, run_t, waits[0]),
                                                   (other, e, run_e, waits[1])) if go
                     for task in (_split(fr, body, arm) if w[1] or fr.m.independent else
                                  [(arm, lambda body=body, arm=arm: _enter(fr, body, [], arm))])]
            if len(tasks) == 1:
                vals = tasks[0][1]()
            else:
                results = run_concurrently(fr.m, [task for _, task in tasks])
                vals = results[0]
                for (part, _), got in zip(tasks[1:], results[1:]):
                    vals = [merge(part, a, b) for a, b in zip(got, vals)]
        elif run_t and run_e:
            vt = _enter(fr, then, [], t)
            ve = _enter(fr, other, [], e)
            vals = [merge(pred, a, b) for a, b in zip(vt, ve)]
        else:
            vals = _enter(fr, then, [], t) if run_t else _enter(fr, other, [], e)
        for o, v in zip(outs, vals):
            fr.regs[o] = v
    return step


@step_rule(target_ir.For)
def _for(c: TargetCompiler, instr: Instr) -> Step:
    lo, hi, st = (c.slot(v) for v in instr.operands[:3])
    inits = [c.slot(v) for v in instr.operands[3:]]
    body = c.body(instr.regions[0].block)
    outs = [c.slot(r) for r in instr.results]

    def step(fr: TargetFrame) -> None:
        r = fr.regs
        i, end, inc = r[lo], r[hi], r[st]
        bad = fr.mask & (inc <= 0)
        if bad.any():
            raise fr.m.fault(instr, "bad loop step", f"ptx.for step is {int(inc[bad][0])}; "
                             "it must be positive", int(np.flatnonzero(bad)[0]))
        carried = [raw(r, s) for s in inits]
        active = fr.mask & (i < end)
        trips = 0
        while active.any():
            new = _enter(fr, body, [i, *carried], active)
            if np.array_equal(active, fr.mask):
                carried, i = new, i + inc
            else:
                carried = [merge(active, n, old) for n, old in zip(new, carried)]
                i = np.where(active, i + inc, i)
            active = active & (i < end)
            trips += 1
            if trips > LOOP_LIMIT:
                raise fr.m.fault(instr, "loop limit", f"more than {LOOP_LIMIT} iterations")
        for o, v in zip(outs, carried):
            r[o] = v
    return step


@step_rule(target_ir.While)
def _while(c: TargetCompiler, instr: Instr) -> Step:
    inits = [c.slot(v) for v in instr.operands]
    cond, body = (c.body(r.block) for r in instr.regions)
    outs = [c.slot(r) for r in instr.results]

    def step(fr: TargetFrame) -> None:
        carried = [raw(fr.regs, s) for s in inits]
        active = fr.mask
        trips = 0
        while True:
            (go,) = _enter(fr, cond, carried, active)
            active = active & go
            if not active.any():
                break
            new = _enter(fr, body, carried, active)
            carried = [merge(active, n, old) for n, old in zip(new, carried)]
            trips += 1
            if trips > LOOP_LIMIT:
                raise fr.m.fault(instr, "loop limit", f"more than {LOOP_LIMIT} iterations")
        for o, v in zip(outs, carried):
            fr.regs[o] = v
    return step


def check_cta_uniform(fr: TargetFrame, instr: Instr, what: str) -> np.ndarray:
    """Fault unless every CTA runs ``instr`` with all or none of its threads; return
    the flags of the CTAs that run it."""
    m = fr.m
    per = fr.mask.reshape(m.ncta, m.nthreads)
    some = per.any(axis=1)
    partial = some & ~per.all(axis=1)
    if partial.any():
        cta = int(np.flatnonzero(partial)[0])
        missing = np.flatnonzero(~per[cta])
        arrived = int(np.flatnonzero(per[cta])[0])
        raise m.fault(instr, "divergent barrier", f"{what} reached by {int(per[cta].sum())} "
                      f"of {m.nthreads} threads of the CTA; thread {int(missing[0])} (and "
                      f"{len(missing) - 1} more) took another path",
                      cta * m.nthreads + arrived)
    return some


def check_warps(fr: TargetFrame, instr: Instr, size: int = 32,
                lanes: np.ndarray | None = None) -> np.ndarray:
    """Fault unless every group of ``size`` threads runs ``instr`` with all its
    ``lanes`` (a bool mask over the group, default all) or none; return the active
    groups' flags, shape (N // size,)."""
    m = fr.m
    if m.nthreads % size:
        raise m.fault(instr, "warp divergence", f"the CTA of {m.nthreads} threads is not a "
                      f"whole number of {size}-thread groups")
    per = fr.mask.reshape(-1, size)
    some = per.any(axis=1)
    want = np.ones(size, bool) if lanes is None else lanes
    wrong = some[:, None] & (per != want[None, :])
    if wrong.any():
        g, lane = np.argwhere(wrong)[0]
        state = "did not execute it" if want[lane] else "is outside the member mask"
        raise m.fault(instr, "warp divergence", f"lane {int(lane)} of the "
                      f"{size}-thread group {state}; .sync.aligned instructions need the "
                      "whole group converged", int(g * size + np.flatnonzero(per[g])[0]))
    return some


@step_rule(target_ops.Shfl)
def _shfl(c: TargetCompiler, instr: Instr) -> Step:
    src, lane_slot = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    mode = instr.op.mode
    elem = instr.operands[0].type.elem
    cval, seg = instr.op.clamp & 31, (instr.op.clamp >> 8) & 31
    members = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)

    def step(fr: TargetFrame) -> None:
        check_warps(fr, instr, 32, members)
        m = fr.m
        lane = m.tid % 32
        b = fr.regs[lane_slot].astype(np.int64) & 31
        max_lane = (lane & seg) | (cval & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - b
            ok = j >= max_lane
        elif mode == "down":
            j, ok = lane + b, None
        elif mode == "bfly":
            j, ok = lane ^ b, None
        else:
            j, ok = min_lane | (b & ~seg), None
        if ok is None:
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        srcs = m.lin - lane + j
        outside = fr.mask & ~members[j]
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            raise m.fault(instr, "warp divergence", f"reads lane {int(j[k])}, which is not "
                          "in the member mask (the result would be undefined)", k)
        fr.regs[out] = narrow(fr.regs[src], elem)[srcs]
    return step


__all__ = ["LOOP_LIMIT", "check_cta_uniform", "check_warps"]
