"""``mbarrier`` objects (PTX ISA sec. 9.7.13.15) as the interpreter keeps them: one
:class:`tessera.arch.mbarrier.MbarrierArray` state per 8-byte slot of each CTA's shared
memory, the transaction bytes each phase announced and received, and the rules of
``mbarrier.init``, ``arrive`` and ``inval`` and of ``cp.async.mbarrier.arrive``. The
waits, which land the copies bound to a barrier, are
:mod:`tessera.interp.target.memory.async_copy`'s.

An arrival may return the phase it arrived on (its state token, bit 0 the parity);
``cp.async.mbarrier.arrive`` binds the thread's copies in flight to the barrier, where
they land at the next wait on it (:func:`~tessera.interp.target.memory.flight.bind`),
and with ``.noinc`` arrives at once: the copies complete before any waiter reads, as
the ISA promises, and a read that does not wait still finds them in flight.
"""

from __future__ import annotations

import numpy as np

from tessera.arch.errors import ArchError
from tessera.arch.mbarrier import MbarrierArray
from tessera.interp.target.barriers import note_init, unseen
from tessera.interp.target.memory.async_order import arrivals, note_arrivals
from tessera.interp.target.memory.chunks import small_pages
from tessera.interp.target.memory.flight import bind
from tessera.interp.target.memory.state import add_at
from tessera.interp.target.schedule import current as current_scheduler
from tessera.interp.target.state import Machine, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async


def mbar(m: Machine) -> MbarrierArray:
    """The launch's mbarrier states, made at the first mbarrier instruction."""
    if m.mbar is None:
        slots = max(1, m.shared.size // 8)
        with small_pages():  # one state per 8 shared bytes, of which a few are mbarriers
            m.mbar = MbarrierArray(m.ncta * slots)
            m.mbar_tx = np.zeros((2, m.ncta * slots), np.int64)  # announced, landed (phase)
            # flags the mbarriers a wait lands loads on (cleared after): a lookup per
            # load in flight instead of a set membership test (np.isin sorts)
            m.mbar_waited = np.zeros(m.ncta * slots, bool)  # type: ignore[attr-defined]
    return m.mbar


def barrier_ids(m: Machine, instr: Instr, act: np.ndarray, addr: np.ndarray,
                cluster: bool = False) -> np.ndarray:
    """The state index of the mbarrier at each active thread's shared address
    (``cluster``: a cluster address, which may name another CTA's barrier)."""
    flat = m.shared.index(m.cta[act], addr.astype(np.int64), 8, m.failer(instr, act),
                          cluster=cluster)
    return m.shared.slots(flat[:, 0])  # one per 8 bytes, as mbar's arrays


def check_visible(m: Machine, instr: Instr, act: np.ndarray, addr: np.ndarray,
                  slots: np.ndarray) -> None:
    """Fault when a thread uses an mbarrier another thread initialised with no ``bar.sync``
    (nor named barrier of both, :func:`.barriers.unseen`) since: nothing orders the init
    before the use (PTX ISA, "mbarrier.init"); threads in lockstep, thread 0 first, would
    run as if it were always seen. ``slots``: the barriers' :func:`barrier_ids`."""
    by = m.shared.init_by[slots]
    bad = unseen(m, slots, act, (by >= 0) & (by != act))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise m.fault(instr, "mbarrier", f"the mbarrier at shared address "
                      f"{int(addr[k])} is used by thread {int(m.tid[act[k]])} before its "
                      f"initialisation by thread {int(m.tid[by[k]])} is visible: no bar.sync "
                      "between the mbarrier.init and this use", int(act[k]),
                      hint="fence the init (fence.mbarrier_init) and bar.sync before other "
                           "threads use the barrier")


def tracked(m: Machine, instr: Instr, act: np.ndarray, ids: np.ndarray, call: object,
            *args: object) -> object:
    """Run an mbarrier operation; reset tx bookkeeping of phases it completes; turn
    the state machine's errors into faults of this instruction."""
    mb = mbar(m)
    before = mb.phase[ids].copy()
    try:
        result = call(*args)  # type: ignore[operator]
    except ArchError as err:
        raise m.fault(instr, "mbarrier", err.message, int(act[0])) from None
    moved = ids[mb.phase[ids] != before]
    m.mbar_tx[:, moved] = 0
    arrivers, released = arrivals(m)
    foreign, foreign_released = arrivals(m, foreign=True)
    for i in np.unique(moved).tolist():
        released[i] = arrivers.pop(i, np.zeros(m.nthreads, np.int32))
        foreign_released[i] = foreign.pop(i, {})
    sched = current_scheduler(m)
    if sched is not None and call != mb.try_wait_parity:  # a poll changes nothing
        sched.touch()
    return result


@step_rule(target_async.MbarrierInit, target_async.MbarrierArrive,
           target_async.MbarrierInval, target_async.CpAsyncArrive)
def _mbarrier(c: TargetCompiler, instr: Instr) -> Step:
    a = c.slot(instr.operands[0])
    op = instr.op
    counts = c.slot(instr.operands[1]) if len(instr.operands) > 1 else None
    token = c.slot(instr.results[0]) if instr.results else None

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        addr = fr.regs[a][act]
        ids = barrier_ids(m, instr, act, addr, getattr(op, "remote", False))
        mb = mbar(m)
        if isinstance(op, target_async.MbarrierInit):
            flat = m.shared.index(m.cta[act], addr.astype(np.int64), 8, m.failer(instr, act))
            m.shared.land(flat, np.zeros(flat.shape, np.uint8))
            note_init(m, ids, act)  # seen by others after bar.sync
            count = op.count if counts is None else fr.regs[counts][act].astype(np.int64)
            tracked(m, instr, act, ids, mb.init, ids, count)
            m.mbar_tx[:, ids] = 0
            return
        check_visible(m, instr, act, addr, ids)
        if isinstance(op, target_async.MbarrierInval):
            tracked(m, instr, act, ids, mb.inval, ids)
            return
        if isinstance(op, target_async.CpAsyncArrive):
            bind(m, act, ids)
            if not op.noinc:  # raised and lowered again once the copies land
                return
        by_register = getattr(op, "count_operand", False)
        tx = fr.regs[counts][act].astype(np.int64) if counts is not None and not by_register \
            else getattr(op, "tx", 0)
        if np.any(tx):  # (a cp.async arrival announces no bytes)
            add_at(m.mbar_tx[0], ids, tx)
        if token is not None:  # the phase arrived on, before this arrival completes it
            state = np.zeros(m.n, np.uint64)
            state[act] = mb.phase[ids] & 1
            fr.regs[token] = state
        note_arrivals(m, ids, act)
        count = fr.regs[counts][act].astype(np.int64) if by_register else getattr(op, "count", 1)
        tracked(m, instr, act, ids, mb.arrive, ids, count, tx)
    return step


__all__ = ["barrier_ids", "check_visible", "mbar", "tracked"]
