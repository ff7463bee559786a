"""The coroutine scheduler of warp-specialised branches (interp/target/schedule.py)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tessera.interp.target import schedule


def test_an_arm_that_ends_before_the_launcher_waits_passes_the_baton(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Arm 0 may run to its end (and hand the baton to arm 1) before the launching
    thread takes the lock; the launcher must not take the baton back, or arm 1 waits
    forever. Delays make that order certain: arm 0 ends while thread 1 is being
    started, and arm 1 looks at the baton only after the launcher has taken the lock."""
    start, wait = threading.Thread.start, schedule.Scheduler._await
    started: list[threading.Thread] = []

    def slow_start(self: threading.Thread) -> None:
        start(self)
        if not started:
            time.sleep(0.05)  # arm 0 runs to its end meanwhile
        started.append(self)

    def late_wait(self: schedule.Scheduler, me: int) -> None:
        if me == 1:
            time.sleep(0.05)  # the launcher reaches its wait first
        wait(self, me)

    monkeypatch.setattr(threading.Thread, "start", slow_start)
    monkeypatch.setattr(schedule.Scheduler, "_await", late_wait)
    machine: Any = SimpleNamespace()
    out: list[Any] = []
    runner = threading.Thread(target=lambda: out.append(schedule.run_concurrently(
        machine, [lambda: [0], lambda: [1]])), daemon=True)
    start(runner)
    runner.join(timeout=5)
    assert not runner.is_alive(), "run_concurrently hung"
    assert out == [[[0], [1]]]
