"""``bar.sync`` and ``bar.arrive``: the CTA barrier and the named barriers (PTX ISA,
"bar, barrier").

``bar.sync id`` with no thread count needs every thread of the CTA: a CTA of which only
some threads execute it is a divergent barrier (undefined behaviour on hardware, an
error here), except in PTX's own control flow, where whole warps may reach it at
different instructions and wait there as at a named barrier of the whole CTA, exited
threads counting as arrived (:func:`exits`). ``bar.sync id, count`` and
``bar.arrive id, count`` use *named* barrier ``id`` of ``count`` threads (whole warps):
each executing thread arrives; the barrier completes when ``count`` threads have
arrived (``bar.sync`` and ``bar.arrive`` arrivals alike) and starts over. A ``bar.sync``
thread waits for that completion, a ``bar.arrive`` thread goes on at once.

The threads of a region run in lockstep; where warpgroups wait for each other's
arrivals they run as tasks (:mod:`tessera.interp.target.schedule`), so a wait that
the others' later arrivals complete is executed as on hardware. Checked:

* **deadlock**: a ``bar.sync`` whose barrier cannot complete because every other task
  has finished or waits too (e.g. a missing ``bar.arrive``, or two warpgroups each
  waiting for the other first) raises :class:`BarrierDeadlock` naming the instruction;
* **count**: threads arriving with different counts on one barrier, more arrivals
  than the count, or a thread arriving twice before it completes
  (:class:`BarrierCountError`);
* **memory order**: a completed named barrier orders the shared-memory accesses of
  exactly its participating threads (:func:`.memory.async_order.release`), not the
  whole CTA's. A ``bar.arrive`` thread's accesses *before* its arrival are ordered
  before those of the ``bar.sync`` threads after the completion; one that runs on
  before the barrier completes (others still to arrive) is left out of that ordering,
  which can only report more races, never fewer.
"""

from __future__ import annotations

import numpy as np

from tessera.interp.target.flow import check_cta_uniform, check_warps
from tessera.interp.target.memory.async_order import release
from tessera.interp.target.schedule import current
from tessera.interp.target.state import (
    Machine,
    Step,
    TargetCompiler,
    TargetFault,
    TargetFrame,
    op_text,
    step_rule,
)
from tessera.ir.core import Instr
from tessera.ir.dialects.target import ops as target_ops


class BarrierDeadlock(TargetFault):
    """A ``bar.sync`` that can never complete: the threads it waits for have finished
    or wait themselves (a hang on hardware)."""


class BarrierCountError(TargetFault):
    """Arrivals on a named barrier that disagree with its thread count."""


class _Named:
    """The state of one named barrier id in every CTA: the threads arrived on its
    current instance, those of them whose accesses it orders, its count (0: idle) and
    how many times it completed."""

    def __init__(self, ncta: int, nthreads: int) -> None:
        self.pending = np.zeros((ncta, nthreads), bool)
        self.ordered = np.zeros((ncta, nthreads), bool)
        self.count = np.zeros(ncta, np.int64)
        self.done = np.zeros(ncta, np.int64)
        self.wide = np.zeros(ncta, bool)  # a CTA-wide bar.sync: exited threads count


def named_barrier(m: Machine, ident: int) -> _Named:
    """The state of named barrier ``ident`` in every CTA of the launch."""
    table: dict[int, _Named] | None = getattr(m, "named_barriers", None)
    if table is None:
        table = m.named_barriers = {}  # type: ignore[attr-defined]
    if ident not in table:
        table[ident] = _Named(m.ncta, m.nthreads)
    return table[ident]


def _fault(cls: type[TargetFault], m: Machine, instr: Instr, what: str, message: str,
           thread: int, hint: str) -> TargetFault:
    plain = m.fault(instr, what, message, thread)
    return cls(what, message, kernel=m.fn.name, op=op_text(instr), loc=instr.loc,
               thread=plain.thread, cta=plain.cta, hint=hint)


def arrive(fr: TargetFrame, instr: Instr, ident: int, count: int, wait: bool,
           exited: np.ndarray | None = None) -> None:
    """The active threads arrive on named barrier ``ident`` of ``count`` threads; with
    ``wait`` (``bar.sync``) they go on only once it has completed. ``exited`` flags
    threads that count as arrived on every instance (a CTA-wide barrier's exited ones)."""
    m = fr.m
    per = fr.mask.reshape(m.ncta, m.nthreads)
    ctas = np.flatnonzero(per.any(axis=1))
    if not len(ctas):
        return
    check_warps(fr, instr)
    b = named_barrier(m, ident)
    if exited is not None:
        b.wide[ctas] = True
        b.pending[ctas] |= exited.reshape(m.ncta, m.nthreads)[ctas]
        per = per & ~exited.reshape(m.ncta, m.nthreads)
    mine = per[ctas]
    what = f"{'bar.sync' if wait else 'bar.arrive'} {ident}, {count}"

    def first(k: int, rows: np.ndarray) -> int:
        return int(ctas[k]) * m.nthreads + int(np.flatnonzero(rows[k])[0])
    other = (b.count[ctas] != 0) & (b.count[ctas] != count)
    if other.any():
        k = int(np.flatnonzero(other)[0])
        raise _fault(BarrierCountError, m, instr, "barrier count", f"{what}: threads of this "
                     f"CTA already wait on barrier {ident} with count {int(b.count[ctas[k]])}",
                     first(k, mine), "every arrival on a named barrier gives the same count")
    twice = b.pending[ctas] & mine
    if twice.any():
        k = int(np.flatnonzero(twice.any(axis=1))[0])
        raise _fault(BarrierCountError, m, instr, "barrier count", f"{what}: a thread "
                     f"arrives again on barrier {ident} before it completed", first(k, twice),
                     f"the barrier waits for {count} distinct threads per instance")
    b.count[ctas] = count
    b.pending[ctas] |= mine
    b.ordered[ctas] |= mine
    arrived = b.pending[ctas].sum(axis=1)
    over = arrived > count
    if over.any():
        k = int(np.flatnonzero(over)[0])
        raise _fault(BarrierCountError, m, instr, "barrier count", f"{what}: "
                     f"{int(arrived[k])} threads of the CTA arrive on a barrier of {count}",
                     first(k, mine), "make the count the number of arriving threads")
    full = arrived == count
    if full.any():
        _complete(m, b, ctas[full])
    sched = current(m)
    if sched is not None:
        sched.touch()
    open_ = ctas[~full]
    if not len(open_):
        return
    before = b.done[open_].copy()
    parked = getattr(m, "parked", None)  # a PTX control flow's (ptx.parked.Parked)
    if not wait and parked is not None:  # a control-flow graph: let the waiters run first
        parked.park(m, instr, ident, count, fr.mask & np.isin(m.cta, open_), soft=True)
        return
    if not wait:
        if sched is not None:
            sched.yield_()  # the waiters may complete it before this task runs on
        ahead = open_[b.done[open_] == before]
        b.ordered[ahead] &= ~per[ahead]
        return
    if parked is not None:  # a control-flow graph: the threads wait where they are
        parked.park(m, instr, ident, count, fr.mask & np.isin(m.cta, open_))
        return
    while (b.done[open_] == before).any():
        if sched is None or not sched.block():
            k = int(np.flatnonzero(b.done[open_] == before)[0])
            c = int(open_[k])
            raise deadlock(m, instr, ident, count, c * m.nthreads + int(np.flatnonzero(per[c])[0]))


def exits(m: Machine, gone: np.ndarray) -> None:
    """Threads ``gone`` (a mask) exited: the CTA-wide barriers their CTAs' other threads
    wait at count them as arrived, as those that exited before (hardware counts the
    threads that have not exited), whichever ran first."""
    table: dict[int, _Named] = getattr(m, "named_barriers", None) or {}
    for b in table.values():
        ctas = np.flatnonzero(b.wide)
        rows = gone.reshape(m.ncta, m.nthreads)[ctas]
        if not rows.any():
            continue
        b.pending[ctas] |= rows
        full = b.pending[ctas].sum(axis=1) == b.count[ctas]
        if full.any():
            _complete(m, b, ctas[full])


def deadlock(m: Machine, instr: Instr, ident: int, count: int, thread: int) -> TargetFault:
    """The fault of a ``bar.sync`` of named barrier ``ident`` that never completes;
    ``thread`` (global id) waits there."""
    c = int(m.cta[thread])
    arrived = int(named_barrier(m, ident).pending[c].sum())
    return _fault(BarrierDeadlock, m, instr, "deadlock", f"bar.sync {ident}, {count} never "
                  f"completes: {arrived} of {count} threads arrived, and every other "
                  "thread has finished or waits itself", thread,
                  "every thread a bar.sync waits for must reach a bar.arrive or bar.sync "
                  "of the same barrier first")


def _complete(m: Machine, b: _Named, ctas: np.ndarray) -> None:
    """The barrier of ``ctas`` completed: order the accesses of its ordered threads,
    make the mbarriers they initialised visible to all its threads, start a new
    instance."""
    keep = b.ordered[ctas].any(axis=1)
    if keep.any():
        release(m, ctas[keep], b.ordered[ctas[keep]])
    _show_inits(m, ctas, b.ordered[ctas], b.pending[ctas])
    b.done[ctas] += 1
    b.count[ctas] = 0
    b.wide[ctas] = False
    b.pending[ctas] = False
    b.ordered[ctas] = False


def _show_inits(m: Machine, ctas: np.ndarray, ordered: np.ndarray, threads: np.ndarray
                ) -> None:
    """An ``mbarrier.init`` of an ordered thread of the barrier is visible to its other
    threads from now on (PTX ISA, "mbarrier.init": made visible by a barrier); kept per
    mbarrier slot as the CTA-local threads that see it (``shared.init_seen``)."""
    sh = m.shared
    inits: set[int] | None = getattr(sh, "init_slots", None)  # every slot ever initialised
    if not inits:
        return
    slots = np.fromiter(inits, np.int64, len(inits))
    width = sh.init_by.size // m.ncta
    row = np.searchsorted(ctas, slots // width)
    ok = (row < len(ctas)) & (ctas[np.minimum(row, len(ctas) - 1)] == slots // width)
    slots, row = slots[ok], row[ok]
    by = sh.init_by[slots]
    live = by >= 0  # not yet visible to all (a bar.sync 0 since makes it so)
    slots, row, by = slots[live], row[live], by[live]
    mine = ordered[row, by - ctas[row] * m.nthreads]
    if not mine.any():
        return
    seen: dict[int, np.ndarray] | None = getattr(sh, "init_seen", None)
    if seen is None:
        seen = sh.init_seen = {}  # type: ignore[attr-defined]
    for slot, r in zip(slots[mine].tolist(), row[mine].tolist()):
        seen[slot] = seen.get(slot, np.zeros(m.nthreads, bool)) | threads[r]

def note_init(m: Machine, slots: np.ndarray, by: np.ndarray) -> None:
    """``mbarrier.init`` of the 8-byte ``slots`` by threads ``by`` (global ids): no other
    thread sees them until a ``bar.sync``, or a named barrier of both (nobody has yet);
    :func:`_show_inits` looks only at slots ever initialised."""
    sh = m.shared
    sh.init_by[slots] = by
    seen: dict[int, np.ndarray] | None = getattr(sh, "init_seen", None)
    for k in slots.tolist() if seen else ():
        seen.pop(k, None)
    inits: set[int] | None = getattr(sh, "init_slots", None)
    if inits is None:
        inits = sh.init_slots = set()  # type: ignore[attr-defined]
    inits.update(slots.tolist())


def unseen(m: Machine, slots: np.ndarray, act: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """``bad`` (threads ``act`` use the mbarriers of ``slots``, initialised by other
    threads with no ``bar.sync`` since) less the uses a named barrier of the user and
    the initialiser has ordered."""
    seen: dict[int, np.ndarray] | None = getattr(m.shared, "init_seen", None)
    if not seen or not bad.any():
        return bad
    out = bad.copy()
    for k in np.flatnonzero(bad).tolist():
        mask = seen.get(int(slots[k]))
        out[k] = mask is None or not mask[m.tid[act[k]]]
    return out


@step_rule(target_ops.Bar)
def _bar(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op

    def step(fr: TargetFrame) -> None:
        if op.count:
            arrive(fr, instr, op.id, op.count, True)
            return
        m = fr.m
        exited: np.ndarray | None = getattr(m, "exited", None)
        per = fr.mask.reshape(m.ncta, m.nthreads)
        warps = fr.mask.reshape(-1, 32) if m.nthreads % 32 == 0 else None
        if exited is not None and warps is not None and \
                (per.any(axis=1) & ~per.all(axis=1)).any() and \
                (warps.all(axis=1) | ~warps.any(axis=1)).all():
            # PTX's own control flow: the CTA's other warps may reach a bar.sync of this
            # id at another instruction (warp-specialised code does), as on sm_70 and
            # later; until they do, these threads wait as at a named barrier of them all
            arrive(fr, instr, op.id, m.nthreads, True, exited)
            return
        ctas = check_cta_uniform(fr, instr, f"bar.sync {op.id}")
        m.shared.sync(ctas)
    return step


@step_rule(target_ops.BarRed)
def _bar_red(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    vote, out = c.slot(instr.operands[0]), c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        m = fr.m
        ctas = check_cta_uniform(fr, instr, f"bar.red {op.id}")
        m.shared.sync(ctas)
        count = (fr.regs[vote].astype(bool) & fr.mask).reshape(m.ncta, m.nthreads).sum(axis=1)
        per_cta = {"popc": count.astype(np.uint32), "and": count == m.nthreads,
                   "or": count > 0}[op.op]
        fr.regs[out] = np.repeat(per_cta, m.nthreads)
    return step


@step_rule(target_ops.BarArrive)
def _bar_arrive(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op

    def step(fr: TargetFrame) -> None:
        arrive(fr, instr, op.id, op.count, False)
    return step


__all__ = ["BarrierCountError", "BarrierDeadlock", "arrive", "deadlock", "exits",
           "named_barrier", "note_init", "unseen"]
