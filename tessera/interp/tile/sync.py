"""Synchronisation of a group's tiles: barriers and async-copy groups, with the
divergence check.

A barrier is a phase boundary for the shared-memory race shadows (:mod:`.memory.shared`)
and completes every copy group committed so far. ``commit`` closes each tile's open
copy group (possibly empty); ``wait(n)`` commits implicitly, then completes all but the
``n`` most recent. A barrier or collective reached by only some tiles of a group is a
*divergent barrier*.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.context import Ctx, bcast
from tessera.interp.tile.errors import DIVERGENT
from tessera.interp.tile.state import State


def check_converged(st: State, ctx: Ctx, loc: Loc, what: str) -> None:
    """Every tile of every group present here must be present (barriers, collectives)."""
    gs = st.geom.group_size
    if not ctx.flat or gs == 1:
        return
    groups = bcast(ctx.group_flat, ctx.lead).reshape(-1)
    counts = np.bincount(groups, minlength=st.geom.n_groups)
    partial = np.flatnonzero((counts > 0) & (counts < gs))
    if partial.size:
        g = int(partial[0])
        present = ctx.pid_flat[groups == g]
        missing = sorted(set(range(g * gs, (g + 1) * gs)) - set(present.tolist()))
        raise st.report(DIVERGENT, f"{what} reached by {len(present)} of the {gs} tiles of "
                        f"the group; {st.geom.who(missing[0])['text']} did not arrive", loc,
                        pid=int(present[0]))


def barrier(st: State, ctx: Ctx, loc: Loc, times: int = 1) -> None:
    """Group-wide barrier: phase boundary for the race shadows, copies complete.
    ``times`` counts barriers in a row with no memory access between them (the
    levels of a shared-memory tree, :mod:`.fastpaths.tree`): the later ones find nothing
    to complete or clear, so they only advance the epochs."""
    if st.checked:
        check_converged(st, ctx, loc, "barrier")
    if ctx.whole:
        st.epoch += times
    else:
        present = np.zeros(st.epoch.size, bool)
        present[ctx.group_flat] = True
        st.epoch[present] += times
    if st.copies:  # otherwise every copy-group counter is still zero
        idx = ctx.flat_index()
        st.open_id[idx] += st.open_used[idx]
        st.open_used[idx] = False
        st.done_upto[idx] = st.open_id[idx]
    for mem in st.shared:
        if mem.tag is None and not mem.wrote and not mem.read:
            continue  # nothing to complete or clear
        if not ctx.flat:
            mem.tag = None
            if mem.writer is not None and mem.reader is not None:
                if mem.wrote:
                    mem.writer.fill(-1)
                if mem.read:
                    mem.reader.fill(-1)
                mem.wrote = mem.read = False
            continue
        gidx = tuple(np.asarray(c) if np.ndim(c) else np.zeros(ctx.size, np.int64)
                     for c in ctx.gcoords)
        if mem.tag is not None:
            mem.tag.expanded(ctx.group_shape)[gidx] = -1
        if mem.writer is not None and mem.wrote:  # (a shadow with no entry is shared)
            mem.writer[gidx] = -1
        if mem.reader is not None and mem.read:
            mem.reader[gidx] = -1


def commit(st: State, ctx: Ctx) -> None:
    """Close each tile's open copy group."""
    idx = ctx.flat_index()
    st.open_id[idx] += 1
    st.open_used[idx] = False


def wait(st: State, ctx: Ctx, n: int) -> None:
    """Complete all but the ``n`` most recent committed copy groups of each tile."""
    idx = ctx.flat_index()
    st.open_id[idx] += st.open_used[idx]
    st.open_used[idx] = False
    st.done_upto[idx] = np.maximum(st.done_upto[idx], st.open_id[idx] - n)


__all__ = ["barrier", "check_converged", "commit", "wait"]
