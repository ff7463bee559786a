"""Control flow of Tile IR, plainly: ``tile.if``, ``tile.for``, ``tile.while``, return
(docs/kernels.md, "Control flow").

Every running program (tile) follows its own path; the simulator runs the programs
together (:mod:`tessera.interp.tile.context`). A condition with the same value in every
program (*uniform*) runs a region in place. A divergent one splits the programs: those
that take a branch, or are still looping, continue in a frame of their own
(:func:`~tessera.interp.tile.exec.fork`), and their values are merged back when the
region ends (:class:`Exits`). This is the whole definition; the fast paths of loops
(:mod:`tessera.interp.tile.fastpaths`) wrap these steps in checked and fast mode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import InterpretError
from tessera.interp.tile.exec import Body, Compiler, Frame, Step, fork, rank_of, run, step_rule
from tessera.interp.tile.memory import globals as global_mem
from tessera.interp.tile.memory.spaces import Ref
from tessera.interp.tile.reference.memory import make_view
from tessera.ir.core import Instr
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.types import TensorType

#: a while loop running longer than this many iterations is reported (it would hang)
MAX_TRIPS = 10_000_000


def uniform(c: Any) -> bool | None:
    """True/False when condition ``c`` holds that value in every program, else None."""
    if np.ndim(c) == 0:
        return bool(c)
    if c.all():
        return True
    if not c.any():
        return False
    return None


def run_body(body: Body, fr: Frame, args: list[Any]) -> list[Any]:
    """Run ``body`` in ``fr`` with its block arguments set to ``args``; its yields."""
    regs = fr.regs
    for slot, v in zip(body.args, args):
        regs[slot] = v
    run(body.steps, fr)
    return [regs[y] for y in body.yields]


class Exits:
    """The programs that have left a loop, with their final carried values: a loop
    keeps running in a frame of the programs still in it, and :meth:`done` merges
    every program's final values into the loop's first frame."""

    def __init__(self, fr: Frame, ranks: list[int]) -> None:
        self.top, self.ranks = fr, ranks
        self.pos = np.arange(fr.ctx.size)  # positions in ``top`` of the running programs
        self.parts: list[list[tuple[np.ndarray, Any]]] = [[] for _ in ranks]

    def leave(self, fr: Frame, stay: Any, carried: list[Any], extra: list[Any],
              liveins: list[tuple[int, int]]) -> tuple[Frame, list[Any], list[Any]]:
        """The programs where ``stay`` is false leave with their ``carried`` values; the
        frame of the others, their carried values and their ``extra`` (per-program
        scalars such as the loop index)."""
        ctx = fr.ctx
        sel, rest = ctx.select(stay), ctx.select(np.logical_not(stay))
        for k, (v, r) in enumerate(zip(carried, self.ranks)):
            self.parts[k].append((self.pos[rest], ctx.take(v, r, rest)))
        self.pos = self.pos[sel]
        return (fork(fr, sel, liveins), [ctx.take(v, r, sel) for v, r in zip(carried, self.ranks)],
                [ctx.take(x, 0, sel) for x in extra])

    def done(self, fr: Frame, carried: list[Any]) -> list[Any]:
        """Every program's final values, once the programs of ``fr`` leave too."""
        if fr is self.top:
            return carried
        for k, v in enumerate(carried):
            self.parts[k].append((self.pos, v))
        return [self.top.ctx.merge(p, r) for p, r in zip(self.parts, self.ranks)]


def if_step(c: Compiler, instr: Instr, decide: Any = uniform, choose: Any = None) -> Step:
    """``tile.if``: a uniform condition runs one region in place; a divergent one runs
    each region for the programs that take it and merges the yielded values.
    (``decide``/``choose`` compute the uniform value and the taking programs' positions;
    the reference computes them afresh, the branch fast path remembers them.)"""
    cond = c.slot(instr.operands[0])
    then, other = c.body(instr.regions[0].block), c.body(instr.regions[1].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(r) for r in instr.results]

    def step(fr: Frame) -> None:
        cv = fr.regs[cond]
        taken = decide(cv)
        if taken is not None:
            body = then if taken else other
            for o, v in zip(outs, run_body(body, fr, [])):
                fr.regs[o] = v
            return
        parts: list[list[tuple[np.ndarray, Any]]] = [[] for _ in outs]
        for taking, body in ((True, then), (False, other)):
            if not body.steps and not body.yields:
                continue  # an absent else (or then): nothing to run, nothing to merge
            sel = choose(fr.ctx, cv, taking) if choose else \
                fr.ctx.select(cv if taking else np.logical_not(cv))
            for k, v in enumerate(run_body(body, fork(fr, sel, body.liveins), [])):
                parts[k].append((sel, v))
        for o, rank, p in zip(outs, ranks, parts):
            fr.regs[o] = fr.ctx.merge(p, rank)
    return step


@step_rule(tile_ir.If)
def _if(c: Compiler, instr: Instr) -> Step:
    return if_step(c, instr)


@step_rule(tile_ir.For)
def _for(c: Compiler, instr: Instr) -> Step:
    """``for i in range(lo, hi, step)`` with carried values: each program runs its own
    trips (while ``i < hi``, or ``i > hi`` for a negative step) and leaves after its
    last one."""
    lo, hi, stp = (c.slot(v) for v in instr.operands[:3])
    inits = [c.slot(v) for v in instr.operands[3:]]
    body = c.body(instr.regions[0].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(v) for v in instr.operands[3:]]
    loc = instr.loc

    def step(fr: Frame) -> None:
        i, end, by = fr.regs[lo], fr.regs[hi], fr.regs[stp]
        if np.any(np.asarray(by) == 0):
            raise InterpretError("range() step is zero", loc=loc)
        if np.ndim(i) == 0:
            i = np.int64(i)  # the index of a uniform loop: an int64 scalar
        carried = [fr.regs[s] for s in inits]
        exits, cur = Exits(fr, ranks), fr
        while True:
            stay = np.where(np.asarray(by) > 0, i < end, i > end)
            go = uniform(stay)
            if go is False:
                break
            if go is None:  # some programs are done: go on with the rest
                cur, carried, (i, end, by) = exits.leave(cur, stay, carried, [i, end, by],
                                                         body.liveins)
            carried = run_body(body, cur, [i, *carried])
            i = i + by
        for o, v in zip(outs, exits.done(cur, carried)):
            fr.regs[o] = v
    return step


@step_rule(tile_ir.While)
def _while(c: Compiler, instr: Instr) -> Step:
    """``while cond(carried): carried = body(carried)``, each program on its own; a
    loop running more than :data:`MAX_TRIPS` iterations is reported."""
    inits = [c.slot(v) for v in instr.operands]
    cond = c.body(instr.regions[0].block)
    body = c.body(instr.regions[1].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(v) for v in instr.operands]
    liveins = sorted(set(cond.liveins) | set(body.liveins))
    loc = instr.loc

    def step(fr: Frame) -> None:
        carried = [fr.regs[s] for s in inits]
        exits, cur = Exits(fr, ranks), fr
        for _ in range(MAX_TRIPS):
            (stay,) = run_body(cond, cur, carried)
            go = uniform(stay)
            if go is False:
                for o, v in zip(outs, exits.done(cur, carried)):
                    fr.regs[o] = v
                return
            if go is None:  # some programs leave: keep their values, go on with the rest
                cur, carried, _ = exits.leave(cur, stay, carried, [], liveins)
            carried = run_body(body, cur, carried)
        raise InterpretError(f"a while loop ran more than {MAX_TRIPS} iterations", loc=loc,
                             hint="check that the loop condition eventually becomes false")
    return step


@step_rule(tile_ir.Return)
def _return(c: Compiler, instr: Instr) -> Step:
    """``return``: a parameter is the launch's result as it is after every tile; a
    scalar is tile 0's value; a tile is stored at the tile's output position."""
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
        global_mem.store(st, ctx, loc, ref, fr.regs[src])
    return ret_tile


__all__ = ["MAX_TRIPS", "Exits", "if_step", "run_body", "uniform"]
