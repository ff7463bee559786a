"""Memory and ids of Tile IR, plainly: program ids, views, buffer lists, loads and
stores (global and shared), ``tile.update`` (``+=`` and the other read-modify-writes),
vector accesses, shared-memory allocation, async copies and barriers (docs/kernels.md,
"Memory" and "Sanitizers").

Bounds are checked when a view is made, in every mode (a strided NumPy view outside
its array would read foreign memory); vector accesses check their alignment in
checked mode. The memory rules themselves live in :mod:`tessera.interp.tile.memory.globals` and
:mod:`tessera.interp.tile.memory.shared`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc, UnsupportedError
from tessera.interp.tile import sync
from tessera.interp.tile.context import Ctx
from tessera.interp.tile.errors import MISALIGNED, OOB
from tessera.interp.tile.exec import Compiler, Frame, Step, step_rule
from tessera.interp.tile.memory import globals as global_mem
from tessera.interp.tile.memory import shared as shared_mem
from tessera.interp.tile.memory.access import bounds_violation, c_strides
from tessera.interp.tile.memory.spaces import Ref
from tessera.interp.tile.state import State
from tessera.ir.core import Instr, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory


@step_rule(tile_ir.LinearId, tile_ir.GroupId, tile_ir.LocalId, tile_ir.GridCoord)
def _ids(c: Compiler, instr: Instr) -> Step:
    out = c.slot(instr.results[0])
    op = instr.op
    if isinstance(op, tile_ir.LinearId):
        def linear(fr: Frame) -> None:
            fr.regs[out] = fr.ctx.linear
        return linear
    if isinstance(op, tile_ir.GroupId):
        def group(fr: Frame) -> None:
            fr.regs[out] = np.asarray(fr.ctx.group_lin, dtype=np.int64)
        return group
    k = -1 if isinstance(op, tile_ir.LocalId) else 1 + op.axis  # type: ignore[attr-defined]

    def coord(fr: Frame) -> None:
        fr.regs[out] = fr.ctx.coords[k]
    return coord


def _is_global(v: Value) -> bool:
    return isinstance(v.type, MemRefType) and v.type.space == "global"


def _add(a: Any, b: Any) -> Any:
    if getattr(a, "ndim", 0) == 0 and getattr(b, "ndim", 0) == 0:
        return int(a) + int(b)
    # a view at offset 0 keeps the index array itself (a read-only program coordinate
    # stays recognisable to the access plans)
    if getattr(a, "ndim", 0) == 0 and int(a) == 0 and getattr(b, "dtype", None) == np.int64:
        return b
    return np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64)


def make_view(st: State, ctx: Ctx, loc: Loc, parent: Ref, rel: list[Any],
              sizes: tuple[int, ...], squeeze: tuple[int, ...]) -> Ref:
    """The sub-view ``parent[rel : rel + sizes]`` (bounds-checked in every mode)."""
    full = not parent.squeeze  # every axis visible (a parameter, a buffer): the common case
    axes = range(len(parent.sizes)) if full else parent.visible_axes()
    psizes = tuple(parent.sizes) if full else tuple(parent.sizes[m] for m in axes)
    bad = bounds_violation(rel, sizes, psizes, ctx.lead)
    if bad is not None:
        pos, d = bad
        here = [int(np.broadcast_to(s, ctx.lead).reshape(-1)[pos]) if np.ndim(s) else int(s)
                for s in rel]
        s = here[d]
        tpos = [0] * len(axes)
        # the first element outside: the window's start when it starts outside (a bad
        # gather index), else the axis end it runs past
        tpos[d] = 0 if s < 0 or s >= psizes[d] else psizes[d] - s
        index = [here[i] + (tpos[i] if i == d else 0) for i in range(len(axes))]
        base = [int(np.broadcast_to(parent.starts[m], ctx.lead).reshape(-1)[pos])
                if np.ndim(parent.starts[m]) else int(parent.starts[m]) for m in axes]
        index = [b + i for b, i in zip(base, index)]
        mem = parent.mem
        what = f"{mem.label} of shape {tuple(mem.dims)[int(getattr(mem, 'batched', 0)):]}"
        vis = [f"{h}:{h + n}" if i not in squeeze else str(h)
               for i, (h, n) in enumerate(zip(here, sizes))]
        raise st.report(OOB, f"access [{', '.join(vis)}] of {what}: axis {d} is outside "
                        f"[0, {psizes[d]})", loc, pid=int(ctx.pid_flat[pos]), index=index,
                        position=tpos, shape=sizes, memory=mem.name)
    if full:
        return Ref(parent.mem, tuple([_add(p, r) for p, r in zip(parent.starts, rel)]),
                   sizes, tuple(sorted(squeeze)))
    starts = list(parent.starts)
    new_sizes = list(parent.sizes)
    for i, m in enumerate(axes):
        starts[m] = _add(parent.starts[m], rel[i])
        new_sizes[m] = sizes[i]
    hidden = tuple(sorted(parent.squeeze + tuple(axes[i] for i in squeeze)))
    return Ref(parent.mem, tuple(starts), tuple(new_sizes), hidden)


@step_rule(tile_memory.View)
def _view(c: Compiler, instr: Instr) -> Step:
    op = instr.op
    assert isinstance(op, tile_memory.View)
    src = c.slot(instr.operands[0])
    starts = [c.slot(v) for v in instr.operands[1:]]
    out = c.slot(instr.results[0])
    sizes, squeeze, loc = tuple(op.sizes), tuple(op.squeeze), instr.loc

    def step(fr: Frame) -> None:
        r = fr.regs
        r[out] = make_view(fr.st, fr.ctx, loc, r[src], [r[s] for s in starts], sizes, squeeze)
    return step


@step_rule(tile_memory.Select)
def _select(c: Compiler, instr: Instr) -> Step:
    idx = c.slot(instr.operands[0])
    bufs = [c.slot(v) for v in instr.operands[1:]]
    out = c.slot(instr.results[0])
    loc = instr.loc

    def step(fr: Frame) -> None:
        i = fr.regs[idx]
        if np.ndim(i):
            flat = np.asarray(i).reshape(-1)
            if (flat != flat[0]).any():
                raise UnsupportedError("tiles index a list of memories with different values "
                                       "in one op", loc=loc, hint="use the same index in "
                                       "every tile (e.g. a loop-carried pipeline stage)")
            i = flat[0]
        k = int(i)
        if not -len(bufs) <= k < len(bufs):
            raise fr.st.report(OOB, f"index {k} of a list of {len(bufs)} memories", loc,
                               pid=int(fr.ctx.pid_flat[0]), index=(k,))
        fr.regs[out] = fr.regs[bufs[k]]
    return step


def load_step(c: Compiler, instr: Instr, record: bool = True) -> Step:
    """``tile.load`` (and ``load_vector``): the value of a view of global or shared
    memory in every program, with the sanitizer checks of a read. (``record=False``
    skips recording the read in the race shadows, see ``fastpaths.access``.)"""
    src = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])
    is_global = _is_global(instr.operands[0])
    loc = instr.loc
    width = instr.op.width if isinstance(instr.op, tile_memory.LoadVector) else 0

    def step(fr: Frame) -> None:
        ref = fr.regs[src]
        if width and fr.st.checked:
            _aligned(fr, loc, ref, width)
        fr.regs[out] = global_mem.load(fr.st, fr.ctx, loc, ref) if is_global else \
            shared_mem.load(fr.st, fr.ctx, loc, ref, record)
    return step


@step_rule(tile_memory.Load, tile_memory.LoadVector)
def _load(c: Compiler, instr: Instr) -> Step:
    return load_step(c, instr)


def _aligned(fr: Frame, loc: Loc, ref: Ref, width: int) -> None:
    """A vector access needs its flat start (the element offset from the tensor's or
    buffer's first element, row pitch included) to be a multiple of its width: the
    address alignment of a ``ld.v4``, as on the GPU."""
    flat: Any = 0
    for s, stride in zip(ref.starts, c_strides(tuple(ref.mem.dims))):
        flat = flat + np.asarray(s, dtype=np.int64) * stride
    bad = (flat % width) != 0
    if not np.any(bad):
        return
    lead = fr.ctx.lead
    pos = int(np.flatnonzero(np.broadcast_to(bad, lead))[0]) if np.ndim(bad) else 0
    index = tuple(int(np.broadcast_to(s, lead).reshape(-1)[pos]) if np.ndim(s) else int(s)
                  for s in ref.starts)
    off = int(np.broadcast_to(flat, lead).reshape(-1)[pos]) if np.ndim(flat) else int(flat)
    if getattr(ref.mem, "batched", False):
        index = index[1:]
    raise fr.st.report(MISALIGNED, f"vector access of width {width} starts at element "
                       f"[{', '.join(map(str, index))}] of {ref.mem.label}, flat offset "
                       f"{off}, not a multiple of {width}", loc,
                       pid=int(fr.ctx.pid_flat[pos]), index=index, position=(0,),
                       shape=(width,), memory=ref.mem.name)


def store_step(c: Compiler, instr: Instr, record: bool = True, last: bool = False) -> Step:
    """``tile.store``, ``tile.update`` (``ref[...] <op>= value``: ``+=``, ``max=``, ...)
    and ``store_vector`` into global or shared memory in every program, with the
    sanitizer checks of a write. (``record=False`` and ``last=True`` are the fast paths
    of ``fastpaths.access``.)"""
    dst, val = c.slot(instr.operands[0]), c.slot(instr.operands[1])
    op = instr.op.op if isinstance(instr.op, tile_memory.Update) else None
    is_global = _is_global(instr.operands[0])
    vector = isinstance(instr.op, tile_memory.StoreVector)
    loc = instr.loc

    def step(fr: Frame) -> None:
        ref = fr.regs[dst]
        if vector and fr.st.checked:
            _aligned(fr, loc, ref, ref.shape[-1])
        if is_global:
            global_mem.store(fr.st, fr.ctx, loc, ref, fr.regs[val], op, last=last)
        else:
            shared_mem.write(fr.st, fr.ctx, loc, ref, fr.regs[val], op, record=record)
    return step


@step_rule(tile_memory.Store, tile_memory.Update, tile_memory.StoreVector)
def _store(c: Compiler, instr: Instr) -> Step:
    return store_step(c, instr)


@step_rule(tile_memory.CpAsync)
def _cp_async(c: Compiler, instr: Instr) -> Step:
    dst, src = c.slot(instr.operands[0]), c.slot(instr.operands[1])
    loc = instr.loc

    def step(fr: Frame) -> None:
        st, ctx = fr.st, fr.ctx
        value = global_mem.load(st, ctx, loc, fr.regs[src])
        shared_mem.write(st, ctx, loc, fr.regs[dst], value, copy=True)
        st.open_used[ctx.flat_index()] = True
    return step


@step_rule(
    tile_memory.CpCommitGroup, tile_memory.CpWaitGroup, tile_memory.Barrier, tile_memory.AllocShared
)
def _sync(c: Compiler, instr: Instr) -> Step:
    op, loc = instr.op, instr.loc
    if isinstance(op, tile_memory.CpCommitGroup):
        return lambda fr: sync.commit(fr.st, fr.ctx)
    if isinstance(op, tile_memory.CpWaitGroup):
        n = op.n
        return lambda fr: sync.wait(fr.st, fr.ctx, n)
    if isinstance(op, tile_memory.Barrier):
        return lambda fr: sync.barrier(fr.st, fr.ctx, loc)
    assert isinstance(op, tile_memory.AllocShared)
    out = c.slot(instr.results[0])
    shape, element = tuple(op.shape), op.element

    def step(fr: Frame) -> None:
        fr.regs[out] = shared_mem.alloc(fr.st, fr.ctx, loc, shape, element)
    return step


__all__ = ["load_step", "make_view", "store_step"]
