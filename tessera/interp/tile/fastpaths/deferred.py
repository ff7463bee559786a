"""Deferred K loops: a GEMM's K loop carries its accumulator as a
:class:`~tessera.interp.tile.fastpaths.pending.PendingMma` and makes its products with
one call at the loop's end."""

from __future__ import annotations

import numpy as np

from tessera.interp.tile.exec import Compiler, Frame, Step
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.fastpaths.first import first_trip
from tessera.interp.tile.fastpaths.pending import PendingMma, deferrable, forced
from tessera.interp.tile.fastpaths.staged import staged_loop
from tessera.interp.tile.reference.flow import run_body
from tessera.ir.core import Instr
from tessera.ir.dialects import tile as tile_ir


@register("deferred_mma", tile_ir.For)
def deferred_mma(c: Compiler, instr: Instr, reference: Step) -> Step | None:
    """Proof: a carried accumulator that feeds nothing but the next trip's ``mma``
    (:func:`deferrable`) is observed by nothing during the loop, so it may be held as a
    :class:`PendingMma`: the loop's end makes ``base + sum_j a_j @ b_j`` with one call of
    :func:`tessera.interp.tile.mma.mma` over the concatenated K, which that module shows
    gives the bits of the per-trip ``mma`` calls (exact products summed in float64 and
    rounded once per trip's accumulator type; the trips' operands are the same arrays,
    tile values are never modified in place); an exact accumulator gets the exact
    products of the whole K, the exact sum of the trips' ones. The ``mma`` ops raise
    no sanitizer report,
    and every other step of the body runs as in the reference, so the reports are the
    reference's. Only uniform integer loops (scalar bounds, nonzero step) defer; others
    run the reference step."""
    defer = deferrable(instr, c.fused[instr.regions[0].block], c.fast)
    if not defer:
        return None
    lo, hi, stp = (c.slot(v) for v in instr.operands[:3])
    inits = [c.slot(v) for v in instr.operands[3:]]
    body = c.body(instr.regions[0].block)
    outs = [c.slot(r) for r in instr.results]
    fast = c.fast
    me = REGISTRY["deferred_mma"]
    staged = staged_loop(c, instr, defer)  # the later trips of a cp_async + mma loop

    def step(fr: Frame) -> None:
        regs = fr.regs
        i, end, by = regs[lo], regs[hi], regs[stp]
        if np.ndim(i) or np.ndim(end) or np.ndim(by) or not all(
                np.asarray(x).dtype.kind in "iu" for x in (i, end, by)) or int(by) == 0:
            return reference(fr)
        me.taken += 1
        trips = range(int(i), int(end), int(by))
        carried = [regs[s] for s in inits]
        for k, (n, exact) in defer.items():
            carried[k] = PendingMma(carried[k], n, fast, len(trips), exact)
        if staged is not None and first_trip(staged, fr, trips, carried):
            trips = range(0)  # every trip, the first from the launch before (fastpaths.first)
        for iv in trips:
            carried = run_body(body, fr, [np.int64(iv), *carried])
            if iv == trips[0] and staged is not None and staged(fr, trips, carried):
                break  # the other trips, derived from this one (fastpaths.staged)
        for o, v in zip(outs, carried):
            regs[o] = forced(v)
    return step


__all__ = ["deferred_mma"]
