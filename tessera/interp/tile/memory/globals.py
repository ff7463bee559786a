"""Global-memory loads, stores and read-modify-writes, with their sanitizer checks.

Writes track an *owner* per element for the launch (checked mode): the tile that
stored it (``pid``), the tile that alone reduced into it (``-(pid + 3)``) or several
reducers (``-2``). Two tiles storing one element, or one storing and another reducing,
is a global write conflict; any number of tiles may reduce (``+=``) into one element.

Tensors the kernel both reads and writes also track readers. Programs of different
groups cannot synchronise, so a read of another group's write (or a write of another
group's read) is a race; inside a group a barrier between the two orders them.

Reduces apply their contributions in a fixed order: groups in ascending order, and
within a group in lockstep execution order (tiles in ascending local id). The
vectorised schedule follows that order unless one element receives contributions from
several groups in several steps out of order; then the launch is re-run group by
group (:class:`~tessera.interp.tile.state.Reschedule`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.context import Ctx, bcast
from tessera.interp.tile.errors import CONFLICT, RACE
from tessera.interp.tile.memory.access import AccessPlan, plain_ints
from tessera.interp.tile.memory.spaces import GlobalMem, Ref
from tessera.interp.tile.numeric import F32, F64, combine, for_copy
from tessera.interp.tile.state import Reschedule, State, element_at, first_true, pid_at


def _per_position(ctx: Ctx, a: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A program-shaped array broadcast over the tile axes of an access of ``shape``
    (remembered by the context for its own coordinate arrays)."""
    own = a is ctx.pid or a is ctx.group_flat
    key = ("position", id(a), shape)
    out = ctx.memo.get(key) if own else None
    if out is None:
        full = bcast(a, ctx.lead)
        out = bcast(full.reshape(ctx.lead + (1,) * (len(shape) - ctx.nlead)), shape)
        if own:
            ctx.memo[key] = out
    return out


def _report(st: State, ctx: Ctx, kind: str, text: str, loc: Loc, ref: Ref, plan: AccessPlan,
            mask: np.ndarray) -> Exception:
    pos = first_true(mask)
    n = len(plan.pshape)
    ppos, tpos = pos[:n], pos[n:]
    return st.report(kind, text, loc, pid=pid_at(ctx, plan.pshape, ppos),
                     index=element_at(ctx, ref.starts, ref.squeeze, plan.pshape, ppos, tpos),
                     position=tpos, shape=plan.tile_shape, memory=ref.mem.name)


def _who(st: State, code: int) -> str:
    """Who last wrote an element, from its owner code."""
    if code >= 0:
        return f"{st.geom.who(code)['text']} stored it"
    if code == -2:
        return "several tiles reduced into it"
    return f"{st.geom.who(-(code + 3))['text']} reduced into it"


def load(st: State, ctx: Ctx, loc: Loc, ref: Ref) -> Any:
    """The tile of ``ref`` in every program (a view when the tensor is read-only)."""
    mem: GlobalMem = ref.mem
    if not (mem.track_reads or mem.written or mem.batched) \
            and len(ref.squeeze) == len(ref.sizes) and plain_ints(ref.starts):
        # one element of a read-only tensor at plain integers (a loop's x[i], bounds
        # already checked by the view): the same value as the plan's 0-d view
        return mem.array[tuple(ref.starts)]
    plan = AccessPlan.of(list(ref.starts), ref.sizes, ref.squeeze, ctx.nlead)
    if mem.track_reads:
        check_read(st, ctx, loc, ref)
    val = plan.view(mem.array)
    return np.array(val) if mem.written and plan.index is None else val


def check_read(st: State, ctx: Ctx, loc: Loc, ref: Ref, plan: Any = None) -> None:
    """The race checks of a read of ``ref`` in every program, recording the read
    (``plan``: the elements, when they are not the whole of ``ref``, as in a masked
    load)."""
    mem: GlobalMem = ref.mem
    if plan is None:
        plan = AccessPlan.of(list(ref.starts), ref.sizes, ref.squeeze, ctx.nlead,
                             expand=ctx.lead)
    shape = plan.shape
    gs = st.geom.group_size
    me = _per_position(ctx, ctx.pid, shape)
    grp = _per_position(ctx, ctx.group_flat, shape)
    cur = _per_position(ctx, st.epoch[bcast(ctx.group_flat, ctx.lead)], shape)
    if mem.owner is not None:
        o = plan.view(mem.owner)
        writer = np.where(o >= 0, o, np.where(o <= -3, -(o + 3), -1))
        other = (o == -2) | ((writer >= 0) & (writer != me))
        if other.any():
            oe = plan.view(mem.shadow("owner_epoch", 0))
            same = (writer // gs == grp) & (o != -2)
            bad = other & ~(same & (oe < cur))
            if bad.any():
                cross = bad & ~same
                if not st.checked:
                    if cross.any() and st.vectorized:
                        raise Reschedule(loc, f"a tile reads {mem.label} where a tile of "
                                         "another group wrote")
                else:
                    code = int(o[first_true(bad)])
                    where = "a tile of another group" if cross[first_true(bad)] else \
                        "another tile of the group with no barrier in between"
                    raise _report(st, ctx, RACE, f"read of {mem.label} after a write by "
                                  f"{where} ({_who(st, code)})", loc, ref, plan, bad)
    reader = mem.shadow("reader", -1)
    rgroup = mem.shadow("reader_group", -1)
    r = plan.view(reader)
    rg = plan.view(rgroup)
    new_r = np.where((r == -1) | (r == me), me, -2)
    new_g = np.where((rg == -1) | (rg == grp), grp, -2)
    plan.write(reader, new_r)
    plan.write(rgroup, new_g)
    plan.write(mem.shadow("reader_epoch", 0), cur)
    if not plan.injective(mem.dims):  # several programs read one element in this op
        for arr, new in ((reader, new_r), (rgroup, new_g)):
            dup = plan.view(arr) != new
            if dup.any():
                plan.write_mask(arr, dup, -2)


def check_write(st: State, ctx: Ctx, loc: Loc, ref: Ref, plan: AccessPlan, reduce: bool) -> None:
    """The conflict and race checks of a write (``reduce``: a read-modify-write) of the
    elements of ``plan`` in every program, recording the write."""
    mem: GlobalMem = ref.mem
    shape = plan.shape
    me = _per_position(ctx, ctx.pid, shape)
    injective = plan.injective(mem.dims)
    if st.checked:
        if not reduce and not injective:
            offs = plan.offsets(mem.dims)
            flat = offs.reshape(-1)
            order = np.argsort(flat, kind="stable")
            dup = np.zeros(flat.size, bool)
            same = flat[order[1:]] == flat[order[:-1]]
            dup[order[1:][same]] = True
            mask = dup.reshape(shape)
            other = int(me.reshape(-1)[order[:-1][same][0]])
            raise _report(st, ctx, CONFLICT, f"two tiles store to one element of {mem.label} "
                          f"in the same op (the other is {st.geom.who(other)['text']})",
                          loc, ref, plan, mask)
        if mem.track_owner:
            _check_owner(st, ctx, loc, ref, plan, reduce, injective, me)
    if mem.track_reads and mem.reader is not None:
        _check_war(st, ctx, loc, ref, plan, me)
    if mem.last_group is not None and st.vectorized:
        grp = _per_position(ctx, ctx.group_flat, shape)
        lg = plan.view(mem.last_group)
        if (lg > grp).any():
            raise Reschedule(loc, f"reductions into {mem.label} from several groups "
                             "arrive out of group order")
        offs = plan.offsets(mem.dims).reshape(-1)
        groups = np.ascontiguousarray(grp).reshape(-1).astype(np.int32)
        if mem.last_group.flags.c_contiguous:
            np.maximum.at(mem.last_group.reshape(-1), offs, groups)
        else:  # a view into the shadows of overlapping parameters (tile_alias)
            np.maximum.at(mem.last_group, np.unravel_index(offs, mem.dims), groups)


def _check_owner(st: State, ctx: Ctx, loc: Loc, ref: Ref, plan: AccessPlan, reduce: bool,
                 injective: bool, me: np.ndarray) -> None:
    """Conflicts with earlier writes (other ops, or earlier trips of a loop)."""
    mem: GlobalMem = ref.mem
    shape = plan.shape
    owner = mem.shadow("owner", -1)
    o = plan.view(owner)
    if not reduce and not (o != -1).any():  # the common case: nobody wrote here yet
        plan.write(owner, me)
    else:
        mine = -(me + 3)
        bad = ((o >= 0) & (o != me)) if reduce else ((o != -1) & (o != me) & (o != mine))
        if bad.any():
            code = int(o[first_true(bad)])
            raise _report(st, ctx, CONFLICT, f"{'reduce into' if reduce else 'store to'} "
                          f"{mem.label} where {_who(st, code)}", loc, ref, plan, bad)
        new = np.where((o == -1) | (o == mine), mine, np.where(o >= 0, o, -2)) if reduce \
            else me
        plan.write(owner, new)
        if reduce and not injective:
            dup = plan.view(owner) != new
            if dup.any():
                plan.write_mask(owner, dup, -2)
    if mem.track_reads:
        cur = _per_position(ctx, st.epoch[bcast(ctx.group_flat, ctx.lead)], shape)
        plan.write(mem.shadow("owner_epoch", 0), cur)


def _check_war(st: State, ctx: Ctx, loc: Loc, ref: Ref, plan: AccessPlan, me: np.ndarray) -> None:
    mem: GlobalMem = ref.mem
    shape = plan.shape
    assert mem.reader is not None and mem.reader_group is not None
    r = plan.view(mem.reader)
    other = (r == -2) | ((r >= 0) & (r != me))
    if not other.any():
        return
    grp = _per_position(ctx, ctx.group_flat, shape)
    cur = _per_position(ctx, st.epoch[bcast(ctx.group_flat, ctx.lead)], shape)
    rg = plan.view(mem.reader_group)
    re = plan.view(mem.shadow("reader_epoch", 0))
    same = rg == grp
    bad = other & ~(same & (re < cur))
    if not bad.any():
        return
    if not st.checked:
        if (bad & ~same).any() and st.vectorized:
            raise Reschedule(loc, f"a tile writes {mem.label} where a tile of another "
                             "group read")
        return
    cross = bool((bad & ~same)[first_true(bad)])
    where = "a tile of another group" if cross else \
        "another tile of the group with no barrier in between"
    raise _report(st, ctx, RACE, f"write to {mem.label} after a read by {where}", loc, ref,
                  plan, bad)


def _planned_write(st: State, ctx: Ctx, loc: Loc, ref: Ref, reduce: bool,
                   last: bool) -> AccessPlan:
    """The plan of a write to ``ref`` in every program, after the write's checks and
    after saving the tensor for a failed launch — unless this is the vectorised run's
    ``last`` write, after which nothing can fail (its checks have passed)."""
    plan = AccessPlan.of(list(ref.starts), ref.sizes, ref.squeeze, ctx.nlead, expand=ctx.lead)
    mem: GlobalMem = ref.mem
    if st.checked or mem.track_reads or mem.last_group is not None:
        check_write(st, ctx, loc, ref, plan, reduce=reduce)
    if not (last and st.vectorized):
        mem.before_write(st.journal)
    return plan


def store_computed(st: State, ctx: Ctx, loc: Loc, ref: Ref, fn: Any, x: np.ndarray,
                   y: np.ndarray, last: bool = False) -> None:
    """``ref[...] = fn(x, y)`` for a ufunc ``fn`` whose operands have the memory's dtype:
    computed straight into the destination when it is a strided view that no two
    programs share (the same values, one temporary and one copy fewer)."""
    mem: GlobalMem = ref.mem
    plan = _planned_write(st, ctx, loc, ref, reduce=False, last=last)
    # in checked mode the write's checks have already refused shared elements
    if plan.index is None and (st.checked or plan.injective(mem.dims)):
        fn(x, y, out=plan.view(mem.array))  # ufuncs buffer when x or y overlaps out
    else:
        plan.write(mem.array, fn(x, y))


def store(st: State, ctx: Ctx, loc: Loc, ref: Ref, value: Any, op: str | None = None,
          last: bool = False) -> None:
    """``ref[...] = value`` (``op`` None) or ``ref[...] <op>= value`` in every program
    (``last``: see ``_planned_write``)."""
    mem: GlobalMem = ref.mem
    plan = _planned_write(st, ctx, loc, ref, reduce=op is not None, last=last)
    if op is None:
        plan.write(mem.array, for_copy(value, mem.element))
        return
    if plan.injective(mem.dims):
        plan.write(mem.array, combine(plan.view(mem.array), value, op, mem.element))
        return
    rmw_rounds(mem.array, plan, value, op, mem.element)


def rmw_rounds(arr: np.ndarray, plan: AccessPlan, value: Any, op: str, element: Any) -> None:
    """A read-modify-write whose positions hit some elements several times: apply the
    contributions in rounds (each element at most once per round) in position order —
    program order, since program axes lead."""
    vals = bcast(value, plan.shape).reshape(-1)
    one = plan.index is None and not any(plan.coefs) and all(n == 1 for n in plan.sizes)
    if op == "add" and vals.dtype == arr.dtype and arr.dtype in (F32, F64) and one:
        # one element (every tile adding into a total): accumulate is the sequential
        # sum old + v0 + v1 + ... in the array's own dtype, each add rounded (formats
        # that compute in float32 and saturate take the rounds below)
        idx = tuple(plan.bases)
        arr[idx] = np.add.accumulate(np.concatenate([arr[idx].reshape(1), vals]))[-1]
        return
    offs = plan.offsets(arr.shape).reshape(-1)
    order = np.argsort(offs, kind="stable")
    sorted_offs = offs[order]
    first = np.r_[True, sorted_offs[1:] != sorted_offs[:-1]]
    run = np.cumsum(first) - 1
    rank = np.arange(offs.size) - np.flatnonzero(first)[run]
    for r in range(int(rank.max()) + 1):
        pick = order[rank == r]
        idx = np.unravel_index(offs[pick], arr.shape)
        arr[idx] = combine(arr[idx], vals[pick], op, element)


__all__ = ["check_read", "check_write", "load", "rmw_rounds", "store", "store_computed"]
