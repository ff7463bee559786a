"""The integer values of a kernel's index arithmetic, for the static estimate: loop
trip counts and ``ptx.if`` predicates that read ``ctaid`` and ``tid.x``.

A warp-specialised attention's consumer warpgroup ``w = tid.x >> 7`` (broadcast from
lane 0 with ``shfl.sync.idx``, so that ptxas knows it is warp-uniform) runs query tile
``C * ctaid.x + w``: its causal key loops end at that tile's diagonal, so their trip
counts differ between the CTAs of the grid *and* between the warpgroups of one CTA.
:class:`TripCounts` charges such a loop the mean over both, and remembers each loop's
count for the rest of one estimate.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import For
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.evaluate import IndexValues, broadcast_lane, is_index_op

#: the name :func:`inputs` gives ``%tid.x`` (``ctaid`` axes are ``x``, ``y``, ``z``, and
#: the grid's sizes ``nctaid`` along them ``X``, ``Y``, ``Z``: a persistent CTA's step)
TID = "tid"
_DEPTH = 24  # deeper expressions are not index arithmetic the lowering writes


def constant(value: Value) -> int | None:
    """The integer a ``ptx.const`` defines, or None."""
    owner = value.owner
    if isinstance(owner, Instr) and isinstance(owner.op, target_ops.Const):
        return int(owner.op.value)
    return None


def is_tid(value: Value) -> bool:
    """Whether ``value`` is ``%tid.x``."""
    owner = value.owner
    return isinstance(owner, Instr) and isinstance(owner.op, target_ops.Special) and \
        owner.op.reg == "tid.x"


def inputs(value: Value, depth: int = 0) -> frozenset[str] | None:
    """What an integer expression reads: ``ctaid`` axes (``x``, ``y``, ``z``) and
    :data:`TID`; None if it reads anything but those, constants and integer arithmetic
    (a loaded value, a loop's counter, another special register)."""
    if constant(value) is not None:
        return frozenset()
    owner = value.owner
    if depth > _DEPTH or not isinstance(owner, Instr):
        return None
    op = owner.op
    if isinstance(op, target_ops.Special):
        if op.reg.startswith(("ctaid.", "nctaid.")):
            axis = op.reg[-1]
            return frozenset(axis if op.reg[0] == "c" else axis.upper())
        return frozenset([TID]) if op.reg == "tid.x" else None
    if broadcast_lane(owner) is not None:  # lane j's value: read at that lane's thread
        sub = inputs(owner.operands[0], depth + 1)
        return None if sub is None else sub | {TID}
    if not is_index_op(op):
        return None
    found: frozenset[str] = frozenset()
    for v in owner.operands:
        sub = inputs(v, depth + 1)
        if sub is None:
            return None
        found |= sub
    return found


def values_at(value: Value, points: dict[str, list[int]]) -> np.ndarray | None:
    """An expression :func:`inputs` accepts at each point: ``points`` maps the
    ``ctaid`` axes it reads (``x``, ``y``, ``z``; ``X``, ``Y``, ``Z`` for ``nctaid``) and
    :data:`TID` to one value per point
    (:class:`~tessera.ir.dialects.target.evaluate.IndexValues`)."""
    n = len(next(iter(points.values()))) if points else 1
    sregs = {("tid.x" if k == TID else f"{'n' if k.isupper() else ''}ctaid.{k.lower()}"):
             np.array(v, np.int64) for k, v in points.items()}
    return IndexValues(sregs, n)(value)


def warp_leaders(threads: range) -> list[int]:
    """The first thread of ``threads`` in each warp that holds one."""
    seen: dict[int, int] = {}
    for t in threads:
        seen.setdefault(t // 32, t)
    return list(seen.values())


def trip_count(loop: Instr, grid: Sequence[int] | None = None,
               threads: range | None = None) -> int | None:
    """Iterations of a ``ptx.for`` with constant bounds, or the mean, rounded, over the
    CTAs of ``grid`` and the warps of ``threads`` (the threads that run it) when its
    bounds are integer arithmetic on ``ctaid`` and ``tid.x`` (causal key loops, which
    end at their query tile's diagonal) and its step on ``nctaid`` (a persistent CTA's
    walk over its tiles); None otherwise or without what they read.
    A warp is charged its first thread's count: bounds are uniform per warpgroup."""
    assert isinstance(loop.op, For)
    reads = [inputs(v) for v in loop.operands[:3]]
    if any(r is None for r in reads):
        return None
    used = reads[0] | reads[1] | reads[2]  # type: ignore[operator]
    axes = sorted(a for a in used - {TID} if a.islower())
    sizes = sorted(a for a in used if a.isupper())
    if ((axes or sizes) and not grid) or (TID in used and not threads):
        return None
    dims = dict(zip("xyz", (int(g) for g in [*(grid or ()), 1, 1, 1][:3])))
    tids = warp_leaders(threads) if TID in used and threads else [0]
    every = list(itertools.product(*(range(dims[a]) for a in axes), tids))
    points = {key: [p[k] for p in every] for k, key in enumerate([*axes, TID])}
    points.update({s: [dims[s.lower()]] * len(every) for s in sizes})
    lo, hi, step = (values_at(v, points) for v in loop.operands[:3])
    if lo is None or hi is None or step is None or (step <= 0).any():
        return None
    return round(int(np.maximum(0, -(-(hi - lo) // step)).sum()) / len(every))


class TripCounts:
    """:func:`trip_count` of the loops of one kernel on one grid, each loop and thread
    range counted once however many parts of the estimate ask."""

    def __init__(self, grid: Sequence[int] | None = None) -> None:
        self.grid = grid
        self._known: dict[tuple[int, range | None], tuple[Instr, int | None]] = {}

    def __call__(self, loop: Instr, threads: range | None = None) -> int | None:
        key = (id(loop), threads)
        if key not in self._known:  # the loop is kept, so its id is not reused
            self._known[key] = (loop, trip_count(loop, self.grid, threads))
        return self._known[key][1]


__all__ = ["TID", "TripCounts", "constant", "inputs", "is_tid", "trip_count", "values_at",
           "warp_leaders"]
