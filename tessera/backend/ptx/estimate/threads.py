"""Which threads of a CTA run a region: the thread-id ranges of ``ptx.if`` regions.

A warp-specialised kernel splits its CTA by ``tid.x`` (a producer warpgroup and its
consumers, thread 0 issuing TMA copies, one thread of each consumer warpgroup,
``tid.x & 127 == 0``, copying its query tile) and by ``elect.sync``; the census
charges each region to the warps that run it.
"""

from __future__ import annotations

from tessera.backend.ptx.estimate.trips import TID, constant, inputs, is_tid, values_at
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import ops as target_ops

_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def warps_of(threads: range) -> int:
    """How many warps hold at least one thread of ``threads``."""
    return len(range(threads.start // 32, (threads[-1]) // 32 + 1)) if threads else 0


def split_threads(pred: Value, threads: range) -> tuple[range, range]:
    """Which of a region's ``threads`` (thread ids) run the then and the else region of a
    ``ptx.if`` on ``pred``: exact for ``setp.<cmp> tid.x, c`` (one thread, one warp, a
    producer warpgroup; the else region of ``eq`` is charged to all), for
    ``elect.sync`` (one thread of each warp) and for any other predicate on ``tid.x``
    and constants alone whose threads are evenly spaced (``tid.x & 127 == 0``: one
    thread a warpgroup); otherwise every thread is charged both regions (a divergent
    warp runs both)."""
    owner = pred.owner
    if isinstance(owner, Instr) and owner.op.name == "ptx.elect":
        return range(threads.start, threads.stop, max(32, threads.step)), threads
    if not (isinstance(owner, Instr) and isinstance(owner.op, target_ops.Setp)
            and owner.op.cmp in _FLIP):
        return _by_thread(pred, threads)
    a, b = owner.operands
    cmp = owner.op.cmp
    if is_tid(b):
        a, b, cmp = b, a, _FLIP[cmp]
    c = constant(b)
    if not is_tid(a) or c is None:
        return _by_thread(pred, threads)
    first, stop, step = threads.start, threads.stop, threads.step
    bound = c + (cmp in ("le", "gt"))  # then = ids below ``bound`` (lt, le) or from it
    below = range(first, max(first, min(stop, bound)), step)
    above = range(min(stop, first + max(0, -(-(bound - first) // step)) * step), stop, step)
    if cmp in ("lt", "le"):
        return below, above
    if cmp in ("gt", "ge"):
        return above, below
    hit = range(c, c + 1) if c in threads else range(0)
    return (hit, threads) if cmp == "eq" else (threads, hit)


def _by_thread(pred: Value, threads: range) -> tuple[range, range]:
    """The split of a predicate on ``tid.x`` and constants, thread by thread: each side
    as a range when its threads are evenly spaced, else all of ``threads``."""
    if inputs(pred) != frozenset([TID]):
        return threads, threads
    on = values_at(pred, {TID: list(threads)})
    if on is None:
        return threads, threads
    taken = [t for t, x in zip(threads, on) if x]
    hit = set(taken)
    return _as_range(taken, threads), _as_range([t for t in threads if t not in hit], threads)


def _as_range(ids: list[int], threads: range) -> range:
    if len(ids) < 2:
        return range(ids[0], ids[0] + 1) if ids else range(0)
    step = ids[1] - ids[0]
    found = range(ids[0], ids[-1] + 1, step)
    return found if len(found) == len(ids) and list(found) == ids else threads


__all__ = ["constant", "split_threads", "warps_of"]
