"""A fast path of the tile simulator for the strided-sum loop of block reductions.

``for i in ts.tile.range(start, n, step): s += data[i]`` runs, in the general loop, one
view, one load and one add per trip for all programs at once, which costs Python and
sanitizer work per trip. When the body is exactly that and ``data`` is a read-only,
unbatched 1-D float32 tensor, the trips become one gather (a strided view when
consecutive programs read consecutive elements) and one float32 add per trip: the same
additions in the same order, so the same bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.tile.exec import Compiler, Frame, Step
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.fastpaths.memo import ArrayMemo
from tessera.interp.tile.memory import globals as global_mem
from tessera.interp.tile.memory.access import broadcast_shape, strided_view
from tessera.ir.core import Instr
from tessera.ir.dialects import tile as tile_ir


def _layout(start: np.ndarray, stop: int, step: int) -> tuple[np.ndarray, int, bool, bool]:
    """Each program's trip count, the largest, whether all are equal, and whether
    program ``k`` starts at the first program's start plus ``k``."""
    trips = np.maximum(-((start - stop) // step), 0)
    if not trips.size:
        return trips, 0, True, False
    flat = start.reshape(-1)
    count = int(trips.max())
    return trips, count, int(trips.min()) == count, \
        bool(np.array_equal(flat, flat[0] + np.arange(flat.size)))


#: layouts of the loops over program coordinates (read-only, reused every launch)
_LAYOUTS = ArrayMemo(64)


def sum_runner(c: Compiler, instr: Instr) -> Any:
    """A loop ``s = s + data[i]`` (the body is exactly that view, load and add) reads
    nothing it writes, so its trips can run as one gather and one add per trip over
    all programs: the same float32 additions in the same order (programs whose trip
    count is shorter add -0.0, the exact identity). Returns the runner, or None when the
    loop is not of that form; the runner returns None when the data at run time rules
    it out (a tensor the kernel writes, a batched or multi-dimensional one, an index
    out of bounds: the general loop then runs and reports it)."""
    from tessera.ir.dialects.tile import compute as TC
    from tessera.ir.dialects.tile import memory as TM

    block = instr.regions[0].block
    body = [i for i in block.instrs if not i.op.terminator]
    term = block.terminator
    if len(instr.operands) != 4 or len(body) != 3 or term is None:
        return None
    view, load, add = body
    index, carried = block.args
    if not (isinstance(view.op, TM.View) and view.operands[1:] == [index]
            and tuple(view.op.sizes) == (1,) and tuple(view.op.squeeze) == (0,)
            and isinstance(load.op, TM.Load) and load.operands == view.results
            and isinstance(add.op, TC.Add) and set(add.operands) == {carried, load.results[0]}
            and term.operands == add.results and view.operands[0] not in block.args):
        return None
    src = c.slot(view.operands[0])

    def run_sum(fr: Frame, i: Any, end: Any, by: Any, acc: Any) -> Any:
        ref = fr.regs[src]
        mem = getattr(ref, "mem", None)
        if (not isinstance(mem, global_mem.GlobalMem) or mem.written or mem.track_reads
                or mem.batched or mem.array.ndim != 1 or mem.array.dtype != np.float32
                or getattr(end, "ndim", 0) or getattr(by, "ndim", 0) or int(by) <= 0
                or ref.squeeze or getattr(ref.starts[0], "ndim", 0)
                or getattr(acc, "dtype", None) != np.float32):
            return None
        off = int(ref.starts[0])
        start = i if off == 0 and getattr(i, "dtype", None) == np.int64 else \
            np.asarray(i, dtype=np.int64) + off
        stop, step = int(end) + off, int(by)
        trips, count, uniform, consecutive = _LAYOUTS.get(
            start, (stop, step), lambda: _layout(start, stop, step))
        if count == 0:
            return None
        n = mem.array.shape[0]
        flat = start.reshape(-1)
        shape = broadcast_shape([acc.shape, start.shape]) if acc.ndim else start.shape
        if uniform and consecutive and shape == start.shape:
            # consecutive programs read consecutive elements: trip k is one slice
            first, last = int(flat[0]), int(flat[-1]) + (count - 1) * step
            if first < 0 or last >= n:
                return None
            itemstride = mem.array.strides[0]
            terms = strided_view(mem.array, (first,), (count, flat.size),
                                 (step * itemstride, itemstride))
        else:
            k = np.arange(count, dtype=np.int64).reshape((-1,) + (1,) * start.ndim)
            idx = start + k * step
            live = k < trips
            if (idx[live] < 0).any() or (idx[live] >= n).any():
                return None
            terms = np.where(live, mem.array[np.where(live, idx, 0)], np.float32(-0.0))
            terms = terms.reshape(count, -1)
        s0, s1 = terms.strides
        if acc.ndim == 0 and terms.shape[1] >= 2 and 0 < s1 * terms.shape[1] <= s0:
            # one ufunc call: NumPy iterates the axis of smallest stride innermost and
            # reduces an outer axis by adding whole rows into the running result in
            # order, starting from ``initial`` (pairwise summation applies only along the
            # innermost axis): trip by trip, the loop's float32 adds. A single column,
            # or overlapping rows, could make the trips the inner axis: loop then.
            total = np.add.reduce(terms, axis=0, initial=acc)
        else:
            total = np.broadcast_to(acc, shape).reshape(-1).copy()
            for row in terms:  # trip by trip: float32 adds in the loop's order
                total += row
        return total.reshape(shape)
    return run_sum


@register("strided_sum", tile_ir.For)
def strided_sum(c: Compiler, instr: Instr, reference: Step) -> Step | None:
    """Proof: the body ``s = s + data[i]`` reads ``data``, which the launch never
    writes, and writes nothing, so its trips may run in any grouping that keeps each
    program's additions in trip order: the gather of every trip's elements (one strided
    view when program ``k`` reads element ``start + k``) followed by one float32 add per
    trip (or NumPy's reduction over the trip axis, which adds whole rows in order) are
    the reference's additions in the reference's order; a program with fewer trips
    adds ``-0.0``, the exact identity of float32 addition (``x + -0.0 == x`` bitwise,
    ``-0.0`` included). Bounds are checked up front: an index out of bounds, a written,
    read-tracked, batched, non-1-D or non-float32 tensor, or a non-uniform stop or step
    makes the runner decline and the reference loop run, which reports what it finds.
    A loop that reads nothing written raises no race report, so the reports are the
    reference's."""
    runner = sum_runner(c, instr)
    if runner is None:
        return None
    lo, hi, stp, init = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    me = REGISTRY["strided_sum"]

    def step(fr: Frame) -> None:
        regs = fr.regs
        total = runner(fr, regs[lo], regs[hi], regs[stp], regs[init])
        if total is None:
            return reference(fr)
        me.taken += 1
        regs[out] = total
    return step


__all__ = ["strided_sum", "sum_runner"]
