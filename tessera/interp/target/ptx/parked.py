"""Threads of a PTX control-flow graph that wait (:mod:`tessera.interp.target.ptx.run`):
at a ``bar.sync`` whose barrier has not completed, after a ``bar.arrive`` on one still
open, and at an ``mbarrier`` wait whose phase has not completed. The runner asks which
threads may run; the barrier and mbarrier step rules park threads here."""

from __future__ import annotations

import numpy as np

from tessera.interp.target.barriers import deadlock, named_barrier
from tessera.interp.target.state import Machine, TargetFault
from tessera.ir.core import Instr


class Parked:
    """Threads of a PTX control-flow graph (:mod:`tessera.interp.target.ptx.run`)
    waiting at a ``bar.sync`` whose barrier has not completed: each one's barrier id
    (-1: none) and how many times the barrier had completed when it arrived; ``fresh``
    flags the threads parked by the instruction that just ran. A ``bar.arrive`` on a
    barrier still open parks its threads *softly*: they run on only when no other
    thread can, so the waiters complete the barrier first where they can (see the
    module doc on memory order); one resumed before is left out of its ordering.
    Threads at a failed ``mbarrier`` wait (``retry``) poll it again when nothing else
    can run; a round in which every poll fails again is the wait's fault."""

    def __init__(self, n: int) -> None:
        self.ident = np.full(n, -1, np.int64)
        self.done = np.zeros(n, np.int64)
        self.soft = np.zeros(n, bool)
        self.fresh = np.zeros(n, bool)
        self.where: dict[int, tuple[Instr, int]] = {}  # barrier id -> its bar.sync, count
        # threads at an mbarrier wait whose phase has not completed: they run it again
        # once no other thread can run; "stalled" ones did so and nothing changed since
        self.retry = np.zeros(n, bool)
        self.fresh_retry = np.zeros(n, bool)
        self.stalled = np.zeros(n, bool)
        self.short = np.zeros(n, bool)  # their phase has every arrival, not every byte
        self.final = False  # the waits run for the last time: one that fails is a hang

    def wait_later(self, who: np.ndarray, short: np.ndarray) -> bool:
        """Threads ``who`` (global ids) poll an incomplete mbarrier phase (``short``:
        one missing only transaction bytes): park them at the wait, to run it again
        later; False when this was their last chance."""
        if self.final:
            return False
        self.retry[who] = True
        self.fresh_retry[who] = True
        self.short[who] = short
        return True

    def resume_waits(self, live: np.ndarray) -> np.ndarray:
        """The parked mbarrier waiters of ``live`` that may poll again (none can run
        else): those not stalled, or else, for a last time, those whose phase misses
        only bytes (the likeliest cause of a hang: the loads' size) or all."""
        who = live & self.retry & ~self.stalled
        if not who.any():
            who = live & self.retry
            if (who & self.short).any():
                who &= self.short
            self.final = bool(who.any())
        self.retry[who] = False
        return who

    def park(self, m: Machine, instr: Instr, ident: int, count: int, who: np.ndarray,
             soft: bool = False) -> None:
        """Threads ``who`` (a mask) wait at ``instr``."""
        self.ident[who] = ident
        self.done[who] = named_barrier(m, ident).done[m.cta[who]]
        self.soft[who] = soft
        self.fresh |= who
        if not soft:
            self.where[ident] = (instr, count)

    def resume_soft(self, m: Machine, live: np.ndarray) -> np.ndarray:
        """Let the softly parked threads of ``live`` run on before their barrier
        completes (no other thread can run); returns them."""
        who = live & self.soft & (self.ident >= 0)
        for ident in np.unique(self.ident[who]).tolist():
            mine = np.flatnonzero(who & (self.ident == ident))
            named_barrier(m, ident).ordered[m.cta[mine], m.tid[mine]] = False
        self.ident[who] = -1
        self.soft[who] = False
        return who

    def waiting(self, m: Machine) -> np.ndarray:
        """The threads still waiting (their barrier has not completed since)."""
        out = self.ident >= 0
        for ident in np.unique(self.ident[out]).tolist():
            mine = self.ident == ident
            still = named_barrier(m, ident).done[m.cta[mine]] == self.done[mine]
            out[np.flatnonzero(mine)[~still]] = False
            self.ident[np.flatnonzero(mine)[~still]] = -1
        self.soft &= self.ident >= 0
        return out

    def hang(self, m: Machine, live: np.ndarray) -> tuple[Instr, TargetFault]:
        """The fault of the first waiting thread when no live thread can run."""
        t = int(np.flatnonzero(live & (self.ident >= 0) & ~self.soft)[0])
        instr, count = self.where[int(self.ident[t])]
        return instr, deadlock(m, instr, int(self.ident[t]), count, t)


__all__ = ["Parked"]
