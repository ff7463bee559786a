"""Counted ``tile.for`` loops: trip counts computed once instead of a test per trip.

The reference loop (:mod:`tessera.interp.tile.reference.flow`) tests ``i < end`` (or
``i > end``) in every program before every trip. With integer bounds the outcome is
known up front, so this fast path counts the trips once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.tile.exec import Compiler, Frame, Step, rank_of
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.reference.flow import Exits, run_body, uniform
from tessera.ir.core import Instr
from tessera.ir.dialects import tile as tile_ir


@register("counted_loops", tile_ir.For)
def counted_loops(c: Compiler, instr: Instr, reference: Step) -> Step:
    """Proof: with integer bounds and a nonzero step the test ``i < end`` (``i > end``
    for a negative step) of trip ``k`` at ``i = lo + k * step`` holds exactly when
    ``k < ceil((end - lo) / step)``, the trip count (the step is loop-invariant, and
    integer arithmetic is exact). So a uniform loop (scalar bounds) runs the same trips
    with the same ``np.int64`` index values as a Python ``range``; a divergent one
    splits off, at the same trips, the same programs (``trips > k`` is the reference's
    ``stay`` mask) through the same :class:`Exits`. The bodies run the same steps on the
    same values, so the bits and the reports are the reference's. Non-integer bounds,
    and a zero step (whose error the reference raises), run the reference step."""
    lo, hi, stp = (c.slot(v) for v in instr.operands[:3])
    inits = [c.slot(v) for v in instr.operands[3:]]
    body = c.body(instr.regions[0].block)
    outs = [c.slot(r) for r in instr.results]
    ranks = [rank_of(v) for v in instr.operands[3:]]
    me = REGISTRY["counted_loops"]

    def step(fr: Frame) -> None:
        regs = fr.regs
        i, end, by = regs[lo], regs[hi], regs[stp]
        if not all(np.asarray(x).dtype.kind in "iu" for x in (i, end, by)) \
                or np.any(np.asarray(by) == 0):
            return reference(fr)
        me.taken += 1
        carried = [regs[s] for s in inits]
        if np.ndim(i) == 0 and np.ndim(end) == 0 and np.ndim(by) == 0:
            for iv in range(int(i), int(end), int(by)):
                carried = run_body(body, fr, [np.int64(iv), *carried])
        else:
            carried = divergent(fr, np.int64(i) if np.ndim(i) == 0 else i, end, by, carried)
        for o, v in zip(outs, carried):
            regs[o] = v

    def divergent(fr: Frame, i: Any, end: Any, by: Any, carried: list[Any]) -> list[Any]:
        trips = np.maximum(-((np.asarray(i, dtype=np.int64) - end) // by), 0)
        low, high = int(trips.min()), int(trips.max())
        exits, cur, k = Exits(fr, ranks), fr, 0
        while k < high:
            if k >= low:  # the trip counts differ from here on: test this trip
                stay = trips > k
                if uniform(stay) is None:
                    cur, carried, (i, by, trips) = exits.leave(cur, stay, carried,
                                                               [i, by, trips], body.liveins)
                    low, high = int(trips.min()), int(trips.max())
            carried = run_body(body, cur, [i, *carried])
            i = i + by
            k += 1
        return exits.done(cur, carried)
    return step


__all__ = ["counted_loops"]
