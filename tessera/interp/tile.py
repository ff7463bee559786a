"""The tile simulator: run a compiled ``tile.kernel`` for every tile of a launch.

Schedules
    ``vectorized`` runs every program of the launch together (one NumPy call per tile
    op, see :mod:`.tile_context`); ``sequential`` runs the groups one after another,
    each group's tiles together, with fresh shared memory per group. ``auto`` (the
    default) vectorises, and falls back to the sequential schedule when programs turn
    out to depend on each other through global memory in a way the vectorised order
    would change (a read of another group's write in fast mode — checked mode reports
    it as a race — or reduces into one element from several groups out of order). The
    written tensors are restored before the sequential run. Tiles of a group always
    run in lockstep; barriers are phase boundaries, not thread joins.

Modes
    ``checked`` (default): all sanitizers on, exact numerics. ``fast``: sanitizers off
    (bounds are still checked: NumPy cannot read outside an array), ``mma`` in float32
    BLAS — non-bitwise.

Results follow DECISIONS.md: a returned parameter is that tensor after all tiles
finish; a returned tile is written at the tile's output position (``g_k * t_k`` along
the first grid-many axes, 0 along the rest, at the batch index); a returned scalar is
tile 0's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import ArgumentError
from tessera.interp.tile_context import Ctx, Geometry
from tessera.interp.tile_exec import Frame, Program, compile_kernel, run
from tessera.interp.tile_mem import GlobalMem, Ref
from tessera.interp.tile_numeric import num
from tessera.interp.tile_state import Reschedule, State
from tessera.ir import tile as T
from tessera.ir import tile_memory as M
from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.tile import MemRefType
from tessera.ir.types import TensorType

SCHEDULES = ("auto", "vectorized", "sequential")


@dataclass(frozen=True)
class Analysis:
    """What a kernel does to each memory parameter (by argument index)."""

    read: frozenset[int]
    written: frozenset[int]
    reduced_often: frozenset[int]  # updated in a loop or by several update ops
    written_often: frozenset[int]  # written in a loop or by several ops


def analyse(fn: Function) -> Analysis:
    """Find which parameters are read, written and reduced, following views."""
    owner: dict[int, Instr] = {}
    for instr in walk(fn.body):
        for region in instr.regions:
            for b in region.blocks:
                owner[id(b)] = instr
    params = {a: k for k, a in enumerate(fn.args) if isinstance(a.type, MemRefType)}

    def roots(v: Value, seen: set[int]) -> set[int]:
        if id(v) in seen:
            return set()
        seen.add(id(v))
        if v in params:
            return {params[v]}
        src = v.owner
        if isinstance(src, Instr):
            if isinstance(src.op, M.View):
                return roots(src.operands[0], seen)
            if isinstance(src.op, M.Select):
                return set().union(*(roots(o, seen) for o in src.operands[1:]))
            if isinstance(src.op, M.AllocShared):
                return set()
        if isinstance(src, Block) and id(src) in owner:
            return roots_of_region_arg(owner[id(src)], src, v, seen)
        return set(params.values())  # cannot tell: assume any parameter

    def roots_of_region_arg(instr: Instr, block: Block, v: Value, seen: set[int]) -> set[int]:
        k = block.args.index(v)
        if isinstance(instr.op, T.For):
            k -= 1
            if k < 0:
                return set()
            init = instr.operands[3 + k]
        else:
            init = instr.operands[k]
        out = roots(init, seen)
        term = instr.regions[-1].block.terminator
        if term is not None and k < len(term.operands):
            out |= roots(term.operands[k], seen)
        return out

    read: set[int] = set()
    written: set[int] = set()
    updates: dict[int, int] = {}
    writes: dict[int, int] = {}
    often: set[int] = set()
    w_often: set[int] = set()

    def visit(block: Block, in_loop: bool) -> None:
        for instr in block.instrs:
            op = instr.op
            if isinstance(op, (M.Load, M.LoadVector)):
                read.update(roots(instr.operands[0], set()))
            elif isinstance(op, M.CpAsync):
                read.update(roots(instr.operands[1], set()))
            elif isinstance(op, (M.Store, M.StoreVector, M.Update)):
                targets = roots(instr.operands[0], set())
                written.update(targets)
                for t in targets:
                    writes[t] = writes.get(t, 0) + 1
                    if in_loop:
                        w_often.add(t)
                if isinstance(op, M.Update):
                    for t in targets:
                        updates[t] = updates.get(t, 0) + 1
                        if in_loop:
                            often.add(t)
            for region in instr.regions:
                for b in region.blocks:
                    visit(b, in_loop or isinstance(op, (T.For, T.While)))

    visit(fn.body, False)
    often |= {t for t, n in updates.items() if n > 1}
    w_often |= {t for t, n in writes.items() if n > 1}
    return Analysis(frozenset(read), frozenset(written), frozenset(often), frozenset(w_often))


@dataclass
class Compiled:
    """A kernel specialisation ready to run in one mode."""

    program: Program
    analysis: Analysis
    name: str


def prepare(fn: Function, fast: bool) -> Compiled:
    """Compile a kernel function for the simulator."""
    return Compiled(compile_kernel(fn, fast), analyse(fn), fn.name)


def _params(fn: Function, args: list[Any], an: Analysis) -> list[Any]:
    values: list[Any] = []
    for k, (arg, value) in enumerate(zip(fn.args, args)):
        t = arg.type
        if isinstance(t, MemRefType):
            mem = GlobalMem(arg.hint or f"arg{k}", value, t.element, t.batch > 0)
            mem.written = k in an.written
            mem.track_reads = k in an.written and k in an.read
            # one write op outside loops: each program writes each element at most once,
            # so only two programs in that one op can conflict (an injectivity test)
            mem.track_owner = k in an.written_often or mem.track_reads
            if k in an.reduced_often:
                mem.last_group = np.full(value.shape, -1, np.int32)
            values.append(mem)
        else:
            assert isinstance(t, TensorType)
            values.append(np.asarray(value, dtype=num(t.element).sd))
    return values


def _bind(fn: Function, program: Program, values: list[Any], ctx: Ctx) -> list[Any]:
    regs: list[Any] = [None] * program.nslots
    for slot, v in zip(program.body.args, values):
        if isinstance(v, GlobalMem):
            rank = v.array.ndim - int(v.batched)
            if v.batched:
                regs[slot] = Ref(v, (ctx.coords[0],) + (0,) * rank,
                                 (1, *v.array.shape[1:]), (0,))
            else:
                regs[slot] = Ref(v, (0,) * rank, v.array.shape, ())
        else:
            regs[slot] = v
    return regs


def launch(compiled: Compiled, args: list[Any], geom: Geometry, *, checked: bool = True,
           schedule: str = "auto", output: np.ndarray | None = None,
           output_element: Any = None) -> Any:
    """Run ``compiled`` over ``geom``; ``args`` are storage arrays (with batch dims) and
    scalars in argument order. Arrays are written in place. Returns the kernel's
    result (see the module docstring)."""
    if schedule not in SCHEDULES:
        raise ArgumentError(f"unknown schedule {schedule!r}", hint=f"use one of {SCHEDULES}")
    fn = compiled.program.fn
    values = _params(fn, args, compiled.analysis)
    mems = [v for v in values if isinstance(v, GlobalMem)]
    out_mem = None
    if output is not None:
        batched = bool(fn.attrs.get("result_batched", False))
        out_mem = GlobalMem("result", output, output_element, batched)
        out_mem.written = True
        mems.append(out_mem)
    tracked = any(m.track_reads or m.last_group is not None for m in mems)
    with np.errstate(all="ignore"):
        if schedule != "sequential":
            saved = [(m, m.array.copy()) for m in mems if m.written] \
                if tracked and schedule == "auto" else []
            st = State(compiled.name, geom, checked=checked, fast=compiled.program.fast,
                       vectorized=True)
            st.output = out_mem
            try:
                ctx = Ctx.root(geom)
                run(compiled.program.body.steps,
                    Frame(_bind(fn, compiled.program, values, ctx), ctx, st))
                return _result(st, fn)
            except Reschedule:
                if schedule == "vectorized":
                    raise
                for m, copy in saved:
                    m.array[...] = copy
                for m in mems:
                    for attr in ("owner", "owner_epoch", "reader", "reader_group",
                                 "reader_epoch"):
                        setattr(m, attr, None)
        st = State(compiled.name, geom, checked=checked, fast=compiled.program.fast,
                   vectorized=False)
        st.output = out_mem
        for g in range(geom.n_groups):
            st.shared = []
            ctx = Ctx.group(geom, g)
            run(compiled.program.body.steps,
                Frame(_bind(fn, compiled.program, values, ctx), ctx, st))
        return _result(st, fn)


def _result(st: State, fn: Function) -> Any:
    if not st.result_set:
        return None
    r = st.result
    if isinstance(r, Ref):
        return r.mem
    return r


__all__ = ["SCHEDULES", "Analysis", "Compiled", "Geometry", "analyse", "launch", "prepare"]
