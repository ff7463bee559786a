"""Masked accesses of Tile IR, plainly: ``tile.masked_load`` and ``tile.masked_store``
(``ts.tile.load(ref, mask=, other=)``, ``ts.tile.store(ref, value, mask=)``; docs/
kernels.md, "Masked accesses").

The window may extend past the memory's edge. Each element is decided alone: a
masked-off element is never accessed (not read, not written, never a report, and it
reads ``other``); a masked-on element outside the memory is an out-of-bounds report
naming that element. The in-bounds, masked-on elements are gathered from (scattered
into) the tensor in program order, as ``tile.store`` orders its writes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc, UnsupportedError
from tessera.interp.tile.context import Ctx
from tessera.interp.tile.errors import OOB
from tessera.interp.tile.exec import Compiler, Frame, Step, step_rule
from tessera.interp.tile.memory.spaces import Ref
from tessera.interp.tile.numeric import for_copy
from tessera.interp.tile.state import State
from tessera.ir.core import Instr
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory


def _bc(a: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.asarray(a), shape)


def _elements(st: State, ctx: Ctx, loc: Loc, parent: Ref, rel: list[Any], sizes: tuple[int, ...],
              squeeze: tuple[int, ...], mask: Any) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """The memory index of every masked-on element (one array per memory axis, in
    program-then-element order) and the masked-on positions, after the bounds check of
    exactly those elements."""
    axes = parent.visible_axes()
    psizes = tuple(parent.sizes[m] for m in axes)
    full = ctx.lead + tuple(sizes)  # program axes, then every window axis
    offs = []
    for i, n in enumerate(sizes):
        shape = [1] * len(full)
        shape[ctx.nlead + i] = n
        at = np.arange(n, dtype=np.int64).reshape(shape)
        start = np.asarray(rel[i], dtype=np.int64).reshape(ctx.lead + (1,) * len(sizes)) \
            if np.ndim(rel[i]) else np.int64(rel[i])
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
    visible = dict(zip(axes, range(len(axes))))
    for m in range(len(parent.sizes)):
        start = _bc(parent.starts[m], ctx.lead).reshape(ctx.lead + (1,) * len(sizes))
        at = start + offs[visible[m]] if m in visible else _bc(start, full)
        index.append(np.broadcast_to(at, full)[on])
    return tuple(index), on


def _operands(c: Compiler, instr: Instr) -> tuple[int, list[int], int, int]:
    mt = instr.operands[0].type
    assert isinstance(mt, MemRefType)
    if mt.space != "global":
        raise UnsupportedError(f"{instr.op.name} of shared memory is not simulated yet",
                               loc=instr.loc, hint="mask the global access that fills "
                                                   "the buffer instead")
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
    tile = tuple(n for a, n in enumerate(sizes) if a not in squeeze)

    def step(fr: Frame) -> None:
        r, ctx = fr.regs, fr.ctx
        ref: Ref = r[src]
        index, on = _elements(fr.st, ctx, loc, ref, [r[s] for s in starts], sizes, squeeze,
                              r[mask])
        arr = ref.mem.array
        value = np.full(on.shape, r[other], dtype=arr.dtype)
        value[on] = arr[index]
        r[out] = value.reshape(ctx.lead + tile)
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
        index, on = _elements(st, ctx, loc, ref, [r[s] for s in starts], sizes, squeeze,
                              r[mask])
        mem = ref.mem
        value = for_copy(_bc(r[val], ctx.lead + tile).reshape(on.shape), mem.element)
        mem.before_write(st.journal)
        # in program order, so the last program's write wins, as for tile.store
        mem.array[index] = np.asarray(value)[on]
    return step


__all__: list[str] = []
