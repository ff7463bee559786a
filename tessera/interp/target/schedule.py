"""Concurrent branches of a warp-specialised kernel: the arms of a ``ptx.if`` that may
wait on each other (``mbarrier`` phases, named barriers), and the warpgroups of an arm
that take turns at named barriers (ping-pong).

The interpreter runs the threads of a region in lockstep, and the two arms of a
divergent ``ptx.if`` one after the other. That cannot run a producer/consumer kernel,
where the producer warp waits for the consumers to release a stage and the consumers
wait for the producer to fill it, nor two consumer warpgroups of which one waits at a
named barrier for the other's ``bar.arrive``. Such regions therefore run as *tasks*
(:func:`run_concurrently`): one task runs until it waits for something incomplete
(:meth:`Scheduler.block`), then another runs, and so on. The switch points are
exactly the waits (and the yields of :meth:`Scheduler.yield_`), so a run is
deterministic. A task that starts tasks of its own (a concurrent region nested in a
concurrent arm) waits until they all finish; until then it is not run.

When every task that has not finished waits, and nothing they wait on changed since
each of them blocked, no task can ever continue: the waiting instruction reports what
never completes, as a hang on hardware would be. The launch learns of it
(``Machine.tasks_hung``): where a task held several CTAs in lockstep the hang may be the
lockstep's, and :func:`~tessera.interp.target.runner.run_target` runs the launch again
with independent CTAs.

Each task runs on a Python thread, but only the one holding the baton runs at a time
(the others sleep on a condition variable), so the machine state needs no locking.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.interp.target.state import Machine


class _Aborted(BaseException):
    """Unwinds a task whose sibling failed (never escapes :func:`run_concurrently`)."""


@dataclass
class _Task:
    """One task: whether it finished, how many tasks it started are still running, and
    the state version it blocked at (None while it runs)."""

    done: bool = False
    children: int = 0
    blocked: int | None = None


class Scheduler:
    """The baton passed between the tasks of one launch's concurrent regions."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.tasks: list[_Task] = []
        self.turn = 0
        self.version = 0  # bumped by every change a waiter may wait for (see `touch`)
        self.abort = False
        self.errors: list[BaseException] = []
        self.local = threading.local()
        self.hung = False  # some task found that no task could continue

    def touch(self) -> None:
        """Record that some barrier may have changed (an arrival, a TMA load)."""
        self.version += 1

    def _runnable(self, k: int) -> bool:
        t = self.tasks[k]
        return not t.done and not t.children

    def _may_progress(self, k: int) -> bool:
        return self._runnable(k) and self.tasks[k].blocked != self.version

    def block(self) -> bool:
        """Called by a waiting task whose condition is incomplete: run the other tasks
        until this one may look again. Returns False when no task can make progress
        (the caller reports the hang)."""
        me: int = self.local.index
        if not any(self._may_progress(k) for k in range(len(self.tasks)) if k != me):
            self.hung = True
            return False
        self.tasks[me].blocked = self.version
        self._pass(me)
        self._await(me)
        self.tasks[me].blocked = None
        return True

    def yield_(self) -> bool:
        """Let the other runnable tasks run first (a ``bar.arrive`` whose barrier
        waits for them); False when none can."""
        me: int = self.local.index
        if not any(self._may_progress(k) for k in range(len(self.tasks)) if k != me):
            return False
        self._pass(me)
        self._await(me)
        return True

    def _pass(self, me: int) -> None:
        """Give the baton to the next runnable task after ``me`` (in creation order)."""
        n = len(self.tasks)
        with self.cond:
            for step in range(1, n + 1):
                k = (me + step) % n
                if self._runnable(k):
                    self.turn = k
                    break
            self.cond.notify_all()

    def _await(self, me: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.turn == me or self.abort)
        if self.abort:
            raise _Aborted

    def _fail(self, err: BaseException) -> None:
        self.errors.append(err)
        with self.cond:
            self.abort = True
            self.cond.notify_all()


def current(m: Machine) -> Scheduler | None:
    """The scheduler of the task the calling thread runs, if any."""
    sched: Scheduler | None = getattr(m, "scheduler", None)
    if sched is None or getattr(sched.local, "index", None) is None:
        return None
    return sched


def run_concurrently(m: Machine, arms: Sequence[Callable[[], list[Any]]]) -> list[list[Any]]:
    """Run ``arms`` (each runs one region and returns its yielded values) as tasks that
    switch where they wait; the first error of any task is raised. Called from a task,
    that task waits (without the baton) until its new tasks have finished."""
    sched = current(m)
    root = sched is None
    if sched is None:
        sched = Scheduler()
        sched.tasks.append(_Task())  # the launching thread: it only waits
        sched.local.index = 0
        m.scheduler = sched  # type: ignore[attr-defined]
    me: int = sched.local.index
    first = len(sched.tasks)
    sched.tasks.extend(_Task() for _ in arms)
    sched.tasks[me].children = len(arms)
    results: list[list[Any]] = [[] for _ in arms]

    def work(k: int) -> None:
        assert sched is not None
        sched.local.index = first + k
        try:
            sched._await(first + k)
            with np.errstate(all="ignore"):  # as run_target's, which is thread-local
                results[k] = arms[k]()
        except _Aborted:
            return
        except BaseException as err:
            sched._fail(err)
        finally:
            sched.tasks[first + k].done = True
            sched.tasks[me].children -= 1
            if not sched.abort:
                sched._pass(first + k)
            with sched.cond:
                sched.cond.notify_all()

    threads = [threading.Thread(target=work, args=(k,), daemon=True)
               for k in range(len(arms))]
    try:
        with sched.cond:
            sched.turn = first  # the baton goes to the first new task
        for t in threads:
            t.start()
        # The baton is not taken back here: the new tasks may all have finished and
        # passed it on before this thread gets the lock. It comes back to this task
        # only once its tasks have finished (a waiting task is not runnable).
        with sched.cond:
            sched.cond.wait_for(lambda: (sched.turn == me and not sched.tasks[me].children)
                                or sched.abort)
        for t in threads:
            t.join()
    finally:
        if root:
            m.scheduler = None  # type: ignore[attr-defined]
            sched.local.index = None
            if sched.hung:
                m.tasks_hung = True
    if sched.abort:
        if root:
            raise sched.errors[0]
        raise _Aborted
    return results


__all__ = ["Scheduler", "current", "run_concurrently"]
