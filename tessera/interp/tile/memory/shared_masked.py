"""Masked accesses of shared memory, with the checks of :mod:`.shared` on exactly the
masked-on elements: a masked-off element is never read, written or checked (it is not
an uninitialised read, a race or a pending copy); a masked-on element is checked as
any load or store of it is (the out-of-bounds check of the window is
:func:`tessera.interp.tile.reference.masked._elements`'s, before these).

The accesses go through a :class:`~tessera.interp.tile.reference.masked.MaskedPlan`
over the buffer's storage, whose leading group axes hold each group's copy: the plan's
index is the program's group coordinates, then the element's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.context import Ctx, bcast
from tessera.interp.tile.errors import ASYNC, RACE, UNINIT
from tessera.interp.tile.memory.shared import _done, _local
from tessera.interp.tile.memory.spaces import GroupArray, SharedMem, writable
from tessera.interp.tile.numeric import to_storage
from tessera.interp.tile.state import State, first_true


def storage_plan(ctx: Ctx, mem: SharedMem, plan: Any, shape: tuple[int, ...]) -> Any:
    """``plan`` (over the buffer's own axes) over a storage array of ``shape`` (group
    axes first, each full or compressed to 1)."""
    from tessera.interp.tile.reference.masked import MaskedPlan

    ng = mem.data.ng
    nt = len(plan.shape) - ctx.nlead
    lead: list[np.ndarray] = []
    for k in range(ng):
        if shape[k] > 1:
            g = bcast(np.asarray(ctx.gcoords[k], dtype=np.int64), ctx.lead)
            lead.append(np.broadcast_to(g.reshape(ctx.lead + (1,) * nt), plan.shape))
        else:
            lead.append(np.zeros(plan.shape, np.int64))
    return MaskedPlan((*lead, *plan.index), plan.on, plan.pshape)


def _report(st: State, ctx: Ctx, kind: str, text: str, loc: Loc, mem: SharedMem, plan: Any,
            bad: np.ndarray) -> Exception:
    pos = first_true(bad)
    n = ctx.nlead
    prog = int(np.ravel_multi_index(pos[:n], ctx.lead)) if n else 0
    ng = mem.data.ng
    index = tuple(int(i[pos]) for i in plan.index[ng:])
    return st.report(kind, text, loc, pid=int(ctx.pid_flat[prog]), index=index,
                     position=tuple(pos[n:]), shape=plan.tile_shape, memory=mem.name)


def load(st: State, ctx: Ctx, loc: Loc, mem: SharedMem, plan: Any, other: Any) -> np.ndarray:
    """The masked-on elements of ``plan`` in every program, ``other`` elsewhere."""
    if st.checked:
        if mem.init is not None:
            init = storage_plan(ctx, mem, plan, mem.init.arr.shape)
            unset = ~init.view(mem.init.arr)  # masked off: -1, true, never unset
            if unset.any():
                raise _report(st, ctx, UNINIT, f"read of {mem.name} before anything was "
                              "written there", loc, mem, init, unset)
        _pending(st, ctx, loc, mem, plan, "read of {} while the cp_async into it has not "
                 "completed")
        if mem.writer is not None and mem.reader is not None:
            full = storage_plan(ctx, mem, plan, mem.writer.shape)
            me = _local(ctx, plan.shape)
            _written_by_other(st, ctx, loc, mem, full, me, "read of {} written by local "
                              "tile {} of the same group with no barrier in between")
            mem.read = True
            mem.reader = writable(mem.reader)
            r = full.view(mem.reader)
            new = np.where((r == -1) | (r == me), me, -2)
            full.write(mem.reader, new)
            if not full.injective(mem.reader.shape):
                full.write_mask(mem.reader, full.view(mem.reader) != new, -2)
    data = storage_plan(ctx, mem, plan, mem.data.arr.shape)
    value = np.full(plan.shape, other, dtype=mem.data.arr.dtype)
    value[plan.on] = mem.data.arr[data.on_index]
    return value


def write(st: State, ctx: Ctx, loc: Loc, mem: SharedMem, plan: Any, value: Any) -> None:
    """Store ``value`` at the masked-on elements of ``plan`` in every program."""
    full = storage_plan(ctx, mem, plan, ctx.group_shape + mem.shape)
    if st.checked:
        _pending(st, ctx, loc, mem, plan, "write to {} while an earlier cp_async into it "
                 "has not completed")
        if mem.writer is not None and mem.reader is not None:
            me = _local(ctx, plan.shape)
            _written_by_other(st, ctx, loc, mem, full, me, "write/write race on {}: local "
                              "tile {} of the same group wrote it with no barrier in between")
            if mem.read:
                r = full.view(mem.reader)
                bad = (r == -2) | ((r >= 0) & (r != me))
                if bad.any():
                    who = int(r[first_true(bad)])
                    who_text = "several tiles" if who == -2 else f"local tile {who}"
                    raise _report(st, ctx, RACE, f"read/write race on {mem.name}: {who_text} "
                                  "of the same group read it with no barrier in between",
                                  loc, mem, full, bad)
        if mem.writer is not None and not full.injective(mem.writer.shape):
            offs = full.offsets(mem.writer.shape).reshape(-1)
            order = np.argsort(offs, kind="stable")
            same = np.zeros(offs.size, bool)
            same[order[1:][offs[order[1:]] == offs[order[:-1]]]] = True
            raise _report(st, ctx, RACE, f"write/write race on {mem.name}: two tiles of "
                          "the same group write it in the same op", loc, mem, full,
                          same.reshape(plan.shape))
    arr = mem.data.expanded(ctx.group_shape)
    full.write(arr, to_storage(np.broadcast_to(value, plan.shape), mem.element))
    if mem.init is not None:
        full.write(mem.init.expanded(ctx.group_shape), True)
    if mem.tag is not None:
        full.write(mem.tag.expanded(ctx.group_shape), -1)
    if mem.writer is not None:
        mem.writer = writable(mem.writer)
        full.write(mem.writer, _local(ctx, plan.shape))
        mem.wrote = True


def _pending(st: State, ctx: Ctx, loc: Loc, mem: SharedMem, plan: Any, text: str) -> None:
    """A masked-on element an async copy has not yet filled (its group not complete)."""
    tag: GroupArray | None = mem.tag
    if tag is None:
        return
    tplan = storage_plan(ctx, mem, plan, tag.arr.shape)
    t = tplan.view(tag.arr)  # masked off: -1, no copy
    pending = (t >= 0) & (t >= _done(st, ctx, len(plan.shape) - ctx.nlead))
    if pending.any():
        raise _report(st, ctx, ASYNC, text.format(mem.name), loc, mem, tplan, pending)


def _written_by_other(st: State, ctx: Ctx, loc: Loc, mem: SharedMem, plan: Any,
                      me: np.ndarray, text: str) -> None:
    if not mem.wrote:
        return
    assert mem.writer is not None
    w = plan.view(mem.writer)  # masked off: -1, nobody
    bad = (w >= 0) & (w != me)
    if bad.any():
        raise _report(st, ctx, RACE, text.format(mem.name, int(w[first_true(bad)])), loc,
                      mem, plan, bad)


__all__ = ["load", "storage_plan", "write"]
