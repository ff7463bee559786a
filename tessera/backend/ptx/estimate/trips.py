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
from collections.abc import Callable, Sequence

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import For
from tessera.ir.dialects.target import ops as target_ops

#: the integer instructions the evaluation models (PTX ``div`` and ``rem`` truncate)
INT_OPS: dict[str, Callable[[int, int], int | None]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "min": min, "max": max, "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b,
    "div": lambda a, b: int(a / b) if b else None,
    "rem": lambda a, b: a - b * int(a / b) if b else None}
CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
       "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}
#: the name :func:`inputs` gives ``%tid.x`` (``ctaid`` axes are ``x``, ``y``, ``z``)
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


def _integer(op: object) -> bool:
    if isinstance(op, target_ops.Cvt):
        return "f" not in (op.to[0], op.frm[0])
    if isinstance(op, target_ops.Binary):  # mul.hi's high half is not modelled
        return op.op in INT_OPS and op.type[0] != "f" and op.mode != "hi"
    if isinstance(op, target_ops.Setp):
        return op.cmp in CMP and op.type[0] != "f"
    return isinstance(op, target_ops.Selp) and op.type[0] != "f"


def _broadcast(owner: Instr) -> int | None:
    """The source lane of ``shfl.sync.idx`` from a constant lane of a whole warp (a
    warp-uniform broadcast, as the lowering reads a warpgroup's index), or None."""
    op = owner.op
    if not (isinstance(op, target_ops.Shfl) and op.mode == "idx" and op.clamp == 31 and
            op.mask == 0xFFFFFFFF):
        return None
    lane = constant(owner.operands[1])
    return lane if lane is not None and 0 <= lane < 32 else None


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
        if op.reg.startswith("ctaid."):
            return frozenset(op.reg[-1])
        return frozenset([TID]) if op.reg == "tid.x" else None
    if _broadcast(owner) is not None:  # lane j's value: read at that lane's thread
        sub = inputs(owner.operands[0], depth + 1)
        return None if sub is None else sub | {TID}
    if not _integer(op):
        return None
    found: frozenset[str] = frozenset()
    for v in owner.operands:
        sub = inputs(v, depth + 1)
        if sub is None:
            return None
        found |= sub
    return found


def evaluate(value: Value, at: dict[str, int]) -> int | None:
    """An expression :func:`inputs` accepts, at the ``ctaid`` axes and thread id of
    ``at`` (wrapping to the register width is ignored: indices stay small)."""
    c = constant(value)
    if c is not None:
        return c
    owner = value.owner
    assert isinstance(owner, Instr)
    op = owner.op
    if isinstance(op, target_ops.Special):
        return at[TID if op.reg == "tid.x" else op.reg[-1]]
    lane = _broadcast(owner)
    if lane is not None:  # the source lane of this thread's warp
        return evaluate(owner.operands[0], {**at, TID: at[TID] // 32 * 32 + lane})
    args = [evaluate(v, at) for v in owner.operands]
    if any(a is None for a in args):
        return None
    if isinstance(op, target_ops.Cvt):
        return args[0]
    if isinstance(op, target_ops.Setp):
        return int(CMP[op.cmp](args[0], args[1]))
    if isinstance(op, target_ops.Selp):
        return args[0] if args[2] else args[1]
    assert isinstance(op, target_ops.Binary)
    return INT_OPS[op.op](args[0], args[1])  # type: ignore[arg-type]


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
    end at their query tile's diagonal); None otherwise or without what they read.
    A warp is charged its first thread's count: bounds are uniform per warpgroup."""
    assert isinstance(loop.op, For)
    step = constant(loop.operands[2])
    reads = [inputs(v) for v in loop.operands[:2]]
    if step is None or step <= 0 or reads[0] is None or reads[1] is None:
        return None
    used = reads[0] | reads[1]
    axes = sorted(used - {TID})
    if (axes and not grid) or (TID in used and not threads):
        return None
    dims = dict(zip("xyz", (int(g) for g in [*(grid or ()), 1, 1, 1][:3])))
    tids = warp_leaders(threads) if TID in used and threads else [0]
    total = runs = 0
    for ids in itertools.product(*(range(dims[a]) for a in axes)):
        for tid in tids:
            at = {**dict(zip(axes, ids)), TID: tid}
            lo, hi = (evaluate(v, at) for v in loop.operands[:2])
            if lo is None or hi is None:
                return None
            total += max(0, -(-(hi - lo) // step))
            runs += 1
    return round(total / runs)


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


__all__ = ["CMP", "INT_OPS", "TID", "TripCounts", "constant", "evaluate", "inputs", "is_tid",
           "trip_count", "warp_leaders"]
