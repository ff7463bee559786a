"""Concurrent branches of a warp-specialised kernel: the two arms of a ``ptx.if`` that
may wait on each other's ``mbarrier`` phases.

The interpreter runs the threads of a region in lockstep, and the two arms of a
divergent ``ptx.if`` one after the other. That cannot run a producer/consumer kernel,
where the producer warp waits for the consumers to release a stage and the consumers
wait for the producer to fill it. An ``if`` with an ``mbarrier`` wait in either arm
therefore runs its arms as coroutines (:func:`run_concurrently`): one
arm runs until an ``mbarrier.try_wait`` loop finds its phase incomplete
(:meth:`Scheduler.block`), then the other arm runs, and so on. The switch points are
exactly the waits, so a run is deterministic. When every arm is blocked and no
``mbarrier`` changed since each of them blocked, no arm can ever continue: the waiting
instruction reports the phase that never completes, as a hang on hardware would be.

Each arm runs on a Python thread, but only the one holding the baton runs at a time
(the others sleep on a condition variable), so the machine state needs no locking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.interp.target.state import Machine


class _Aborted(BaseException):
    """Unwinds an arm whose sibling failed (never escapes :func:`run_concurrently`)."""


class Scheduler:
    """The baton passed between the arms of one concurrent ``ptx.if``."""

    def __init__(self, n: int) -> None:
        self.cond = threading.Condition()
        self.turn = 0
        self.done = [False] * n
        self.blocked: list[int | None] = [None] * n  # the version an arm blocked at
        self.version = 0  # bumped by every mbarrier state change (see `touch`)
        self.abort = False
        self.local = threading.local()

    def touch(self) -> None:
        """Record that some ``mbarrier`` may have changed (an arrival, a TMA load)."""
        self.version += 1

    def block(self) -> bool:
        """Called by a waiting arm whose phase is incomplete: run the other arms until
        this one may continue. Returns False when no arm can make progress (the caller
        reports the hang)."""
        me: int = self.local.index
        self.blocked[me] = self.version
        live = [k for k in range(len(self.done)) if not self.done[k] and k != me]
        if all(self.blocked[k] == self.version for k in live):
            self.blocked[me] = None
            return False
        self._pass(me)
        self._await(me)
        self.blocked[me] = None
        return True

    def _pass(self, me: int) -> None:
        """Give the baton to the next arm that has not finished."""
        n = len(self.done)
        with self.cond:
            for step in range(1, n + 1):
                k = (me + step) % n
                if not self.done[k]:
                    self.turn = k
                    break
            self.cond.notify_all()

    def _await(self, me: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == me or self.abort)
        if self.abort:
            raise _Aborted


def current(m: Machine) -> Scheduler | None:
    """The scheduler of the concurrent ``if`` the calling arm runs in, if any."""
    sched: Scheduler | None = getattr(m, "scheduler", None)
    if sched is None or getattr(sched.local, "index", None) is None:
        return None
    return sched


def run_concurrently(m: Machine, arms: Sequence[Callable[[], list[Any]]]) -> list[list[Any]]:
    """Run ``arms`` (each runs one region and returns its yielded values) as coroutines
    that switch at blocked ``mbarrier`` waits; the first error of any arm is raised.
    A concurrent ``if`` nested in an arm runs its arms one after the other."""
    if getattr(m, "scheduler", None) is not None:
        return [arm() for arm in arms]
    sched = Scheduler(len(arms))
    results: list[list[Any]] = [[] for _ in arms]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        sched.local.index = k
        try:
            sched._await(k)
            with np.errstate(all="ignore"):  # as run_target's, which is thread-local
                results[k] = arms[k]()
        except _Aborted:
            return
        except BaseException as err:
            errors.append(err)
            with sched.cond:
                sched.abort = True
                sched.cond.notify_all()
        finally:
            sched.done[k] = True
            if not sched.abort:
                sched._pass(k)
            with sched.cond:
                sched.cond.notify_all()

    m.scheduler = sched  # type: ignore[attr-defined]
    threads = [threading.Thread(target=work, args=(k,), daemon=True)
               for k in range(len(arms))]
    try:
        for t in threads:
            t.start()
        # The baton starts with arm 0 (Scheduler.turn). It is not handed out again here:
        # arm 0 may already have run to its end and passed it on before this thread gets
        # the lock, and taking it back would leave the next arm waiting forever.
        with sched.cond:
            sched.cond.wait_for(lambda: all(sched.done) or sched.abort)
            sched.abort = sched.abort or not all(sched.done)
            sched.cond.notify_all()
        for t in threads:
            t.join()
    finally:
        m.scheduler = None  # type: ignore[attr-defined]
    if errors:
        raise errors[0]
    return results


__all__ = ["Scheduler", "current", "run_concurrently"]
