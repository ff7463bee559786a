"""Shared memory: allocation, loads, writes and async copies, with the checks.

Checked mode keeps, per buffer and element, whether it was ever written (reading one
that was not is an *uninitialised read*), the async-copy group that last filled it (a
read before that group completed is *async copy not waited*) and — when groups have
more than one tile — which tile wrote and which read it since the last barrier (two
tiles touching one element between barriers, one writing, is a *race*).

Async copies move the data at once and record their copy group; barriers, commits and
waits (:mod:`tessera.interp.tile.sync`) mark groups complete.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.context import Ctx, bcast
from tessera.interp.tile.errors import ASYNC, RACE, UNINIT
from tessera.interp.tile.memory.access import AccessPlan
from tessera.interp.tile.memory.globals import rmw_rounds
from tessera.interp.tile.memory.spaces import GroupArray, Ref, SharedMem, fresh, writable
from tessera.interp.tile.numeric import combine, to_storage
from tessera.interp.tile.state import State, element_at, first_true, pid_at
from tessera.interp.tile.sync import check_converged


def _plan(ctx: Ctx, ga_shape: tuple[int, ...], ng: int, ref: Ref,
          expand: bool = False) -> tuple[AccessPlan, list[Any]]:
    """The access of ``ref`` in a storage of shape ``ga_shape`` (group axes first)."""
    starts = [ctx.gcoords[k] if ga_shape[k] > 1 else 0 for k in range(ng)]
    starts += list(ref.starts)
    sizes = (1,) * ng + tuple(ref.sizes)
    squeeze = tuple(range(ng)) + tuple(ng + d for d in ref.squeeze)
    return AccessPlan.of(starts, sizes, squeeze, ctx.nlead, expand=ctx.lead if expand else None), \
        starts


def _report(st: State, ctx: Ctx, kind: str, text: str, loc: Loc, ref: Ref, plan: AccessPlan,
            starts: list[Any], mask: np.ndarray) -> Exception:
    pos = first_true(np.broadcast_to(mask, plan.shape) if mask.shape != plan.shape else mask)
    n = len(plan.pshape)
    ppos, tpos = pos[:n], pos[n:]
    index = element_at(ctx, starts, plan.squeeze, plan.pshape, ppos, tpos)
    ng = len(starts) - len(ref.starts)
    return st.report(kind, text, loc, pid=pid_at(ctx, plan.pshape, ppos), index=index[ng:],
                     position=tpos, shape=plan.tile_shape, memory=ref.mem.name)


def _local(ctx: Ctx, shape: tuple[int, ...]) -> np.ndarray:
    """Each program's local id, broadcast over an access of ``shape`` (remembered)."""
    key = ("local", shape)
    me = ctx.memo.get(key)
    if me is None:
        full = bcast(ctx.coords[-1], ctx.lead)
        me = ctx.memo[key] = bcast(full.reshape(ctx.lead + (1,) * (len(shape) - ctx.nlead)),
                                   shape)
    return me


def _done(st: State, ctx: Ctx, nt: int) -> np.ndarray:
    d = st.done_upto[ctx.pid_flat].reshape(ctx.lead)
    return d.reshape(ctx.lead + (1,) * nt)


def alloc(st: State, ctx: Ctx, loc: Loc, shape: tuple[int, ...], element: Any) -> Ref:
    """A fresh, poisoned buffer for every group running here (a collective op)."""
    if st.checked:
        check_converged(st, ctx, loc, "alloc_shared (a collective op)")
    ng = len(ctx.group_shape)
    mem = SharedMem(shape, element, ng, loc, st.checked)
    if st.checked and st.geom.group_size > 1:
        # shared read-only "nobody" shadows, made private by the first entry (writable)
        mem.writer = mem.reader = fresh("none", ctx.group_shape + shape, np.int32)
    st.shared.append(mem)
    return Ref(mem, (0,) * len(shape), shape, ())


def load(st: State, ctx: Ctx, loc: Loc, ref: Ref, record: bool = True) -> Any:
    """The tile of ``ref`` in every program; ``record`` False skips the reader entries
    of the race shadow (no later access can consult them, see :mod:`tessera.interp.tile.phase`)."""
    mem: SharedMem = ref.mem
    ng = mem.data.ng
    if st.checked:
        nt = len(ref.shape)
        if mem.init is not None:
            plan, starts = _plan(ctx, mem.init.arr.shape, ng, ref)
            ok = plan.view(mem.init.arr)
            if not ok.all():
                raise _report(st, ctx, UNINIT, f"read of {mem.name} before anything was "
                              "written there", loc, ref, plan, starts, ~ok)
        # a copy another tile issued since the last barrier is a race whether or not
        # that tile waited for it (its wait orders the copy before its own reads only)
        if mem.writer is not None and (record or mem.wrote):
            _race_read(st, ctx, loc, ref, record)
        if mem.tag is not None:
            plan, starts = _plan(ctx, mem.tag.arr.shape, ng, ref)
            tag = plan.view(mem.tag.arr)
            pending = (tag >= 0) & (tag >= _done(st, ctx, nt))
            if pending.any():
                plan_x, starts = _plan(ctx, mem.tag.arr.shape, ng, ref, expand=True)
                raise _report(st, ctx, ASYNC, f"read of {mem.name} while the cp_async into "
                              "it has not completed", loc, ref, plan_x, starts,
                              np.broadcast_to(pending, plan_x.shape))
    plan, _ = _plan(ctx, mem.data.arr.shape, ng, ref)
    val = plan.view(mem.data.arr)
    if plan.index is None:
        mem.data.exported = True
    return val


def _written_by_other(st: State, ctx: Ctx, loc: Loc, ref: Ref, plan: AccessPlan,
                      starts: list[Any], me: np.ndarray, text: Callable[[int], str]) -> None:
    """Report a race when another tile of the group wrote an accessed element since the
    last barrier (``text`` makes the message from that tile's local id)."""
    mem: SharedMem = ref.mem
    if not mem.wrote:  # no entry since the barrier
        return
    assert mem.writer is not None
    w = plan.view(mem.writer)
    bad = (w >= 0) & (w != me)
    if bad.any():
        raise _report(st, ctx, RACE, text(int(w[first_true(bad)])), loc, ref, plan, starts,
                      bad)


def _race_read(st: State, ctx: Ctx, loc: Loc, ref: Ref, record: bool) -> None:
    mem: SharedMem = ref.mem
    assert mem.writer is not None and mem.reader is not None
    plan, starts = _plan(ctx, mem.writer.shape, mem.data.ng, ref, expand=True)
    me = _local(ctx, plan.shape)
    _written_by_other(st, ctx, loc, ref, plan, starts, me,
                      lambda t: f"read of {mem.name} written by local tile {t} of the same "
                      "group with no barrier in between")
    if not record:
        return
    mem.read = True
    mem.reader = writable(mem.reader)
    r = plan.view(mem.reader)
    new = np.where((r == -1) | (r == me), me, -2)
    plan.write(mem.reader, new)
    if not plan.injective(mem.reader.shape):
        dup = plan.view(mem.reader) != new
        if dup.any():
            plan.write_mask(mem.reader, dup, -2)


def write(st: State, ctx: Ctx, loc: Loc, ref: Ref, value: Any, op: str | None = None,
          copy: bool = False, record: bool = True) -> None:
    """Store (``op`` None), read-modify-write (``op``) or async-copy (``copy``) into
    ``ref`` in every program; ``record`` False skips the writer entries of the race
    shadow (no later access can consult them, see :mod:`tessera.interp.tile.phase`)."""
    mem: SharedMem = ref.mem
    ng = mem.data.ng
    gs = st.geom.group_size
    if op is None and not ctx.flat and ref.whole() and not (st.checked and gs > 1):
        return _write_whole(st, ctx, loc, ref, value, copy)
    full = ctx.group_shape + mem.shape
    plan, starts = _plan(ctx, full, ng, ref, expand=True)
    if st.checked:
        _check_write(st, ctx, loc, ref, plan, starts)
    # a store that reaches every element once (each tile its own slot of every group)
    # replaces the storage instead of first copying the old contents out
    whole = op is None and math.prod(plan.shape) == math.prod(full) and plan.injective(full)
    arr = mem.data.fresh(full) if whole else mem.data.expanded(ctx.group_shape)
    if whole:
        mem.init = None  # every element is written now
    if op is None:
        plan.write(arr, to_storage(value, mem.element))
    elif plan.injective(arr.shape):
        plan.write(arr, combine(plan.view(arr), value, op, mem.element))
    else:
        rmw_rounds(arr, plan, value, op, mem.element)
    if mem.init is not None:
        init = mem.init.expanded(ctx.group_shape)
        plan.write(init, True)
    if copy or mem.tag is not None:
        if mem.tag is None:
            mem.tag = GroupArray(np.full((1,) * ng + mem.shape, -1, np.int32), ng)
        tag = mem.tag.expanded(ctx.group_shape)
        ids = st.open_id[ctx.pid_flat].reshape(ctx.lead)
        plan.write(tag, ids.reshape(ctx.lead + (1,) * len(ref.shape)) if copy else -1)
    if mem.writer is not None and record:
        mem.writer = writable(mem.writer)
        plan.write(mem.writer, _local(ctx, plan.shape))
        mem.wrote = True


def _write_whole(st: State, ctx: Ctx, loc: Loc, ref: Ref, value: Any, copy: bool) -> None:
    """Every group overwrites its whole buffer: replace the storage, keeping the
    value's compression along the group axes."""
    mem: SharedMem = ref.mem
    ng = mem.data.ng
    nt = len(mem.shape)
    if st.checked and mem.tag is not None:  # one tile per group here (checked)
        done = st.done_upto[ctx.pid_flat].reshape(ctx.lead)[..., 0]
        tag = mem.tag.arr
        if np.any((tag >= 0) & (tag >= done.reshape(done.shape + (1,) * nt))):
            _check_write(st, ctx, loc, ref, *_plan(ctx, ctx.group_shape + mem.shape, ng, ref,
                                                   expand=True))  # names tile and element
    v = np.asarray(to_storage(value, mem.element))
    r = len(ref.shape)  # the view may hide size-1 axes of the buffer (buf[0] of a (1,))
    v = v.reshape(v.shape[:v.ndim - r] + mem.shape)
    if v.ndim > nt:  # program axes: drop the local axis (size 1 with one tile per group)
        v = v[(slice(None),) * (ctx.nlead - 1) + (-1,)]
    else:
        v = v.reshape((1,) * ng + v.shape)
    mem.data.replace(v)
    if mem.init is not None:
        mem.init = None
    if copy:
        ids = st.open_id[ctx.pid_flat].reshape(ctx.lead)[(slice(None),) * (ctx.nlead - 1)
                                                         + (-1,)]
        if (ids == ids.flat[0]).all():
            ids = ids.reshape(-1)[:1].reshape((1,) * ng)
        mem.tag = GroupArray(_broadcast(ids.reshape(ids.shape + (1,) * nt),
                                        ids.shape + mem.shape), ng)
    else:
        mem.tag = None


def _broadcast(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``np.broadcast_to(a, shape)`` (a read-only view; ``a`` has ``shape``'s rank),
    made by the array constructor when ``a`` is contiguous: a tenth of the cost."""
    if not a.flags.c_contiguous or any(n != 1 and n != m for n, m in zip(a.shape, shape)):
        return np.broadcast_to(a, shape)
    strides = tuple(0 if n == 1 and m != 1 else st
                    for n, m, st in zip(a.shape, shape, a.strides))
    out = np.ndarray(shape, a.dtype, a, 0, strides)
    out.flags.writeable = False
    return out


def _check_write(st: State, ctx: Ctx, loc: Loc, ref: Ref, plan: AccessPlan,
                 starts: list[Any]) -> None:
    """The checks of a write to ``ref``; ``plan`` is its access in the storage shape
    (group axes full), which every shadow array of the buffer has when expanded."""
    mem: SharedMem = ref.mem
    if mem.tag is not None:
        tag = plan.view(mem.tag.expanded(ctx.group_shape))
        pending = (tag >= 0) & (tag >= _done(st, ctx, len(ref.shape)))
        if pending.any():
            raise _report(st, ctx, ASYNC, f"write to {mem.name} while an earlier cp_async "
                          "into it has not completed", loc, ref, plan, starts, pending)
    if mem.writer is None or mem.reader is None:
        return
    me = _local(ctx, plan.shape)
    _written_by_other(st, ctx, loc, ref, plan, starts, me,
                      lambda t: f"write/write race on {mem.name}: local tile {t} of the same "
                      "group wrote it with no barrier in between")
    if mem.read:
        r = plan.view(mem.reader)
        bad = (r == -2) | ((r >= 0) & (r != me))
        if bad.any():
            other = int(r[first_true(bad)])
            who = "several tiles" if other == -2 else f"local tile {other}"
            raise _report(st, ctx, RACE, f"read/write race on {mem.name}: {who} of the same "
                          "group read it with no barrier in between", loc, ref, plan, starts,
                          bad)
    if not plan.injective(mem.writer.shape):
        offs = plan.offsets(mem.writer.shape).reshape(-1)
        order = np.argsort(offs, kind="stable")
        same = offs[order[1:]] == offs[order[:-1]]
        mask = np.zeros(offs.size, bool)
        mask[order[1:][same]] = True
        other = int(me.reshape(-1)[order[:-1][same][0]])
        raise _report(st, ctx, RACE, f"write/write race on {mem.name}: local tile {other} "
                      "of the same group writes it in the same op", loc, ref, plan, starts,
                      mask.reshape(plan.shape))


__all__ = ["alloc", "load", "write"]
