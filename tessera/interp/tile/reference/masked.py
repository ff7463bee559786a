"""Masked accesses of Tile IR, plainly: ``tile.masked_load`` and ``tile.masked_store``
(``ts.tile.load(ref, mask=, other=)``, ``ts.tile.store(ref, value, mask=)``; docs/
kernels.md, "Masked accesses").

The window may extend past the memory's edge. Each element is decided alone: a
masked-off element is never accessed (not read, not written, never a report, and it
reads ``other``); a masked-on element outside the memory is an out-of-bounds report
naming that element. The in-bounds, masked-on elements are gathered from (scattered
into) the tensor in program order, as ``tile.store`` orders its writes, after the race
and conflict checks of ``memory.globals`` on exactly those elements (a
:class:`MaskedPlan` stands for the access plan there). A shared buffer's masked-on
elements get the checks of shared memory (uninitialised reads, pending copies, races
within a group) in ``memory.shared_masked``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.context import Ctx
from tessera.interp.tile.errors import OOB
from tessera.interp.tile.exec import Compiler, Frame, Step, step_rule
from tessera.interp.tile.memory import globals as global_mem
from tessera.interp.tile.memory import shared_masked
from tessera.interp.tile.memory.access import c_strides
from tessera.interp.tile.memory.spaces import Ref, SharedMem
from tessera.interp.tile.numeric import for_copy
from tessera.interp.tile.state import Reschedule, State
from tessera.ir.core import Instr
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory


class MaskedPlan:
    """The masked-on elements of a masked access, shaped as the
    :class:`~tessera.interp.tile.memory.access.AccessPlan` the global-memory checks read
    (program axes, then tile axes): a masked-off position reads as -1 (every shadow's
    "nobody"), is never written, and has an offset of its own (never a duplicate)."""

    def __init__(self, index: tuple[np.ndarray, ...], on: np.ndarray,
                 lead: tuple[int, ...]) -> None:
        self.on = on
        self.shape = on.shape
        self.pshape = lead
        self.tile_shape = on.shape[len(lead):]
        self.index = index
        self.on_index = tuple(i[on] for i in index)

    def view(self, arr: np.ndarray) -> np.ndarray:
        """The accessed elements of ``arr``, -1 where masked off."""
        out = np.full(self.shape, -1, arr.dtype)
        out[self.on] = arr[self.on_index]
        return out

    def write(self, arr: np.ndarray, value: Any) -> None:
        """Assign ``value`` (broadcast to the plan's shape) where masked on."""
        arr[self.on_index] = np.broadcast_to(value, self.shape)[self.on]

    def write_mask(self, arr: np.ndarray, mask: np.ndarray, value: Any) -> None:
        """Assign the scalar ``value`` where masked on and ``mask``."""
        sel = np.broadcast_to(mask, self.shape) & self.on
        arr[tuple(i[sel] for i in self.index)] = value

    def offsets(self, shape: tuple[int, ...]) -> np.ndarray:
        """Flat element offsets where masked on; distinct negative ones elsewhere."""
        flat: Any = np.int64(0)
        for idx, stride in zip(self.index, c_strides(shape)):
            flat = flat + idx * stride
        own = -1 - np.arange(self.on.size, dtype=np.int64).reshape(self.shape)
        return np.where(self.on, flat, own)

    def injective(self, shape: tuple[int, ...]) -> bool:
        """Whether no element is accessed twice (by the masked-on positions)."""
        offs = self.offsets(shape)[self.on]
        return bool(np.unique(offs).size == offs.size)


def _bc(a: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.asarray(a), shape)


def _elements(st: State, ctx: Ctx, loc: Loc, parent: Ref, rel: list[Any], sizes: tuple[int, ...],
              squeeze: tuple[int, ...], mask: Any) -> tuple[MaskedPlan, Ref]:
    """The masked-on elements of the access in every program (after the bounds check of
    exactly those elements) and the window as a reference (for the reports)."""
    axes = parent.visible_axes()
    psizes = tuple(parent.sizes[m] for m in axes)
    full = ctx.lead + tuple(sizes)  # program axes, then every window axis
    offs = []
    for i, n in enumerate(sizes):
        shape = [1] * len(full)
        shape[ctx.nlead + i] = n
        at = np.arange(n, dtype=np.int64).reshape(shape)
        start = _bc(np.asarray(rel[i], dtype=np.int64), ctx.lead).reshape(
            ctx.lead + (1,) * len(sizes)) if np.ndim(rel[i]) else np.int64(rel[i])
        offs.append(_bc(start + at, full))
    tile = tuple(n for a, n in enumerate(sizes) if a not in squeeze)
    on = _bc(mask, ctx.lead + tile).reshape(full)
    outside = np.zeros(full, bool)
    for i, off in enumerate(offs):
        outside |= (off < 0) | (off >= psizes[i])
    bad = on & outside
    if bad.any():
        pos = np.unravel_index(int(np.flatnonzero(bad)[0]), full)
        prog = int(np.ravel_multi_index(pos[:ctx.nlead], ctx.lead)) if ctx.nlead else 0
        where = tuple(int(off[pos]) for off in offs)
        d = next(i for i, w in enumerate(where) if not 0 <= w < psizes[i])
        base = [int(_bc(parent.starts[m], ctx.lead)[pos[:ctx.nlead]]) for m in axes]
        index = tuple(b + w for b, w in zip(base, where))
        mem = parent.mem
        what = f"{mem.label} of shape {tuple(mem.dims)[int(getattr(mem, 'batched', 0)):]}"
        tpos = tuple(p for a, p in enumerate(pos[ctx.nlead:]) if a not in squeeze)
        raise st.report(OOB, f"masked-on element [{', '.join(map(str, index))}] of {what}: "
                        f"axis {d} is outside [0, {psizes[d]})", loc,
                        pid=int(ctx.pid_flat[prog]), index=index, position=tpos, shape=tile,
                        memory=mem.name)
    index: list[np.ndarray] = []
    starts: list[Any] = []
    hidden: list[int] = []
    visible = dict(zip(axes, range(len(axes))))
    for m in range(len(parent.sizes)):
        start = _bc(parent.starts[m], ctx.lead).reshape(ctx.lead + (1,) * len(sizes))
        if m in visible:
            index.append(np.broadcast_to(start + offs[visible[m]], full))
            starts.append(_add(parent.starts[m], rel[visible[m]]))
            if visible[m] in squeeze:
                hidden.append(m)
        else:
            index.append(np.broadcast_to(start, full))
            starts.append(parent.starts[m])
            hidden.append(m)
    shape = ctx.lead + tile
    plan = MaskedPlan(tuple(i.reshape(shape) for i in index), on.reshape(shape), ctx.lead)
    window = Ref(parent.mem, tuple(starts), tuple(parent.sizes[m] if m not in visible else
                                                  sizes[visible[m]] for m in
                                                  range(len(parent.sizes))), tuple(hidden))
    return plan, window


def _add(a: Any, b: Any) -> Any:
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return int(a) + int(b)
    return np.asarray(a, dtype=np.int64) + np.asarray(b, dtype=np.int64)


def _operands(c: Compiler, instr: Instr) -> tuple[int, list[int], int, int]:
    mt = instr.operands[0].type
    assert isinstance(mt, MemRefType)
    rank = mt.rank
    ops = instr.operands
    return (c.slot(ops[0]), [c.slot(v) for v in ops[1:1 + rank]], c.slot(ops[1 + rank]),
            c.slot(ops[2 + rank]))


@step_rule(tile_memory.MaskedLoad)
def _masked_load(c: Compiler, instr: Instr) -> Step:
    op = instr.op
    assert isinstance(op, tile_memory.MaskedLoad)
    src, starts, mask, other = _operands(c, instr)
    out = c.slot(instr.results[0])
    sizes, squeeze, loc = tuple(op.sizes), tuple(op.squeeze), instr.loc

    def step(fr: Frame) -> None:
        r, ctx = fr.regs, fr.ctx
        ref: Ref = r[src]
        plan, window = _elements(fr.st, ctx, loc, ref, [r[s] for s in starts], sizes,
                                 squeeze, r[mask])
        mem = ref.mem
        if isinstance(mem, SharedMem):
            r[out] = shared_masked.load(fr.st, ctx, loc, mem, plan, r[other])
            return
        if mem.track_reads:
            global_mem.check_read(fr.st, ctx, loc, window, plan)
        value = np.full(plan.shape, r[other], dtype=mem.array.dtype)
        value[plan.on] = mem.array[plan.on_index]
        r[out] = value
    return step


@step_rule(tile_memory.MaskedStore)
def _masked_store(c: Compiler, instr: Instr) -> Step:
    op = instr.op
    assert isinstance(op, tile_memory.MaskedStore)
    dst, starts, val, mask = _operands(c, instr)
    sizes, squeeze, loc = tuple(op.sizes), tuple(op.squeeze), instr.loc
    tile = tuple(n for a, n in enumerate(sizes) if a not in squeeze)

    def step(fr: Frame) -> None:
        r, ctx, st = fr.regs, fr.ctx, fr.st
        ref: Ref = r[dst]
        plan, window = _elements(st, ctx, loc, ref, [r[s] for s in starts], sizes, squeeze,
                                 r[mask])
        mem = ref.mem
        if isinstance(mem, SharedMem):
            shared_masked.write(st, ctx, loc, mem, plan, _bc(r[val], ctx.lead + tile))
            return
        if st.checked or mem.track_reads or mem.last_group is not None:
            if mem.last_group is not None and st.vectorized:
                # the checks order reductions from several groups by element offsets,
                # which masked-off elements do not have: run the groups in order instead
                raise Reschedule(loc, f"a masked store into {mem.label}, which tiles of "
                                 "several groups reduce into")
            global_mem.check_write(st, ctx, loc, window, plan, reduce=False)
        value = for_copy(_bc(r[val], ctx.lead + tile), mem.element)
        mem.before_write(st.journal)
        # in program order, so the last program's write wins, as for tile.store
        plan.write(mem.array, value)
    return step


__all__: list[str] = []
