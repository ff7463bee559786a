"""The tile simulator: run a compiled ``tile.kernel`` for every tile of a launch.

Schedules
    ``vectorized`` runs every program of the launch together (one NumPy call per tile
    op, see :mod:`tessera.interp.tile.context`); ``sequential`` runs the groups one after another,
    each group's tiles together, with fresh shared memory per group. ``auto`` (the
    default) vectorises, and falls back to the sequential schedule when programs turn
    out to depend on each other through global memory in a way the vectorised order
    would change (a read of another group's write in fast mode — checked mode reports
    it as a race — or reduces into one element from several groups out of order). The
    written tensors are restored before the sequential run. Tiles of a group always
    run in lockstep; barriers are phase boundaries, not thread joins.

Reports
    A launch reports the first bug in group order, in every schedule: a vectorised run
    that finds one is undone and the groups run in order to name it. Checked mode
    saves each tensor before its first write and restores it when the launch fails.
    Overlapping array arguments share their sanitizer shadows (:mod:`.memory.alias`).

Modes
    ``checked`` (default): all sanitizers on, exact numerics. ``fast``: sanitizers off
    (bounds are still checked: NumPy cannot read outside an array), ``mma`` in float32
    BLAS — non-bitwise.

Results follow docs/decisions.md ("Tile model"): a returned parameter is that tensor after
all tiles finish; a returned tile is written at the tile's output position (``g_k * t_k``
along the first grid-many axes, 0 along the rest, at the batch index); a returned scalar
is tile 0's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import ArgumentError, UnsupportedError
from tessera.interp.tile.analysis import Analysis, analyse
from tessera.interp.tile.context import Ctx, LaunchGeometry
from tessera.interp.tile.errors import SanitizerError
from tessera.interp.tile.exec import Frame, Program, compile_kernel, run
from tessera.interp.tile.memory.alias import AliasSpace, alias_groups
from tessera.interp.tile.memory.spaces import GlobalMem, Ref
from tessera.interp.tile.numeric import num
from tessera.interp.tile.state import Reschedule, State
from tessera.ir.core import Function
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.types import TensorType

SCHEDULES = ("auto", "vectorized", "sequential")


@dataclass
class PreparedKernel:
    """A kernel specialisation ready to run in one mode."""

    program: Program
    analysis: Analysis
    name: str


def prepare(fn: Function, fast: bool, reference: bool = False) -> PreparedKernel:
    """Compile a kernel function for the simulator (``reference``: the plain
    definition, see :func:`~tessera.interp.tile.exec.compile_kernel`)."""
    return PreparedKernel(compile_kernel(fn, fast, reference), analyse(fn), fn.name)


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
                mem.shadow("last_group", -1)
            if mem.written:
                _check_writable(mem)
            values.append(mem)
        else:
            assert isinstance(t, TensorType)
            values.append(np.asarray(value, dtype=num(t.element).sd))
    _link_aliases(values, an)
    return values


def _check_writable(mem: GlobalMem) -> None:
    """A written array must be writable and must not repeat an element (a zero
    stride): tiles writing different positions would then write one place."""
    a = mem.array
    if not a.flags.writeable:
        raise ArgumentError(f"the kernel writes '{mem.name}', but the array passed for it "
                            "is read-only", hint="pass a writable array (np.array(x) "
                            "copies a read-only one)")
    if 0 in a.strides and any(st == 0 and n > 1 for n, st in zip(a.shape, a.strides)):
        raise ArgumentError(f"the array passed as '{mem.name}' repeats its elements "
                            f"(strides {a.strides} for shape {a.shape}) and the kernel "
                            "writes it", hint="pass a real array (np.ascontiguousarray)")


def _link_aliases(values: list[Any], an: Analysis) -> None:
    """Parameters whose arrays overlap a written one share their sanitizer shadows
    (:mod:`.memory.alias`): all of them are then treated as written and read-tracked."""
    arrays = [v.array if isinstance(v, GlobalMem) else None for v in values]
    written = [isinstance(v, GlobalMem) and v.written for v in values]
    for group in alias_groups(arrays, written):
        mems = [values[k] for k in group]
        read = any(k in an.read for k in group)
        reduced = any(k in an.reduced_often for k in group)
        space = AliasSpace([m.array for m in mems], [m.name for m in mems])
        for m in mems:
            m.written = True  # loads copy: another parameter may change the memory
            m.track_reads = read
            m.track_owner = True
            m.link(space, reduced)


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


def launch(compiled: PreparedKernel, args: list[Any], geom: LaunchGeometry, *, checked: bool = True,
           schedule: str = "auto", output: np.ndarray | None = None,
           output_element: Any = None) -> Any:
    """Run ``compiled`` over ``geom``; ``args`` are storage arrays (with batch dims) and
    scalars in argument order. Arrays are written in place. Returns the kernel's
    result (see the module docstring).

    In checked mode a launch that raises leaves every array as it was: each tensor is
    saved before the launch's first write to it and put back on failure."""
    if schedule not in SCHEDULES:
        raise ArgumentError(f"unknown schedule {schedule!r}", hint=f"use one of {SCHEDULES}")
    fn = compiled.program.fn
    values = _params(fn, args, compiled.analysis)
    mems = [v for v in values if isinstance(v, GlobalMem)]
    tracked = any(m.track_reads or m.last_group is not None for m in mems)
    for m in mems:  # auto may start over, checked mode restores on failure
        m.guard = m.written and (checked or (tracked and schedule == "auto"))
    out_mem = None
    if output is not None:
        batched = bool(fn.attrs.get("result_batched", False))
        out_mem = GlobalMem("result", output, output_element, batched)
        out_mem.written = True
        mems.append(out_mem)
    journal: list[GlobalMem] = []  # the saved tensors, in the order they were saved
    found: SanitizerError | None = None
    refusal: UnsupportedError | None = None
    try:
        with np.errstate(all="ignore"):
            if schedule != "sequential":
                try:
                    return _run(compiled, values, geom, checked, True, out_mem, journal)
                except Reschedule as why:
                    if schedule == "vectorized":  # refused below, unless a bug shows
                        refusal = UnsupportedError(
                            f"the vectorised schedule cannot keep this launch's order: "
                            f"{why.why}", loc=why.loc,
                            hint="use schedule='auto' (it then runs the groups one after "
                                 "another) or schedule='sequential'")
                except SanitizerError as err:
                    # a launch reports the first bug in group order, whatever the
                    # schedule: the groups run again one after another to find it
                    found = err
                _undo(journal)
                for m in mems:
                    m.reset_shadows()
            for m in mems:
                # programs of different groups never meet in one op here: only the
                # owner shadow sees two groups write one element
                m.track_owner = m.written
            result = _run(compiled, values, geom, checked, False, out_mem, journal)
            if found is not None or refusal is not None:
                raise found or refusal  # type: ignore[misc]
            return result
    except BaseException:
        _undo(journal)
        raise
    finally:
        for m in mems:
            m.saved = None


def _run(compiled: PreparedKernel, values: list[Any], geom: LaunchGeometry, checked: bool,
         vectorized: bool, out_mem: GlobalMem | None, journal: list[GlobalMem]) -> Any:
    """One run of the launch: every program at once, or group after group."""
    fn = compiled.program.fn
    st = State(compiled.name, geom, checked=checked, fast=compiled.program.fast,
               vectorized=vectorized)
    st.output = out_mem
    st.journal = journal
    body = compiled.program.body
    if vectorized:
        ctx = Ctx.root(geom)
        run(body.steps, Frame(_bind(fn, compiled.program, values, ctx), ctx, st))
    else:
        for g in range(geom.n_groups):
            st.shared = []
            ctx = Ctx.group(geom, g)
            run(body.steps, Frame(_bind(fn, compiled.program, values, ctx), ctx, st))
    return _result(st, fn)


def _undo(journal: list[GlobalMem]) -> None:
    """Restore the saved tensors, latest first (overlapping parameters saved later hold
    what earlier ones wrote)."""
    while journal:
        journal.pop().restore()


def _result(st: State, fn: Function) -> Any:
    if not st.result_set:
        return None
    r = st.result
    if isinstance(r, Ref):
        return r.mem
    return r


__all__ = ["SCHEDULES", "Analysis", "LaunchGeometry", "PreparedKernel", "analyse", "launch",
           "prepare"]
