"""What orders shared memory between the asynchronous agents of the Target IR
interpreter, beyond ``bar.sync``.

**mbarrier phases.** A thread's accesses before its ``mbarrier.arrive`` happen before
whatever a thread does after its ``mbarrier.try_wait`` on that phase returns (PTX ISA
sec. 9.7.13.15, the release/acquire semantics of mbarrier operations): a consumer
releasing a stage, a producer refilling it. The race check of
:mod:`tessera.interp.target.memory.state` keeps one epoch per byte (reset by
``bar.sync``); a completed wait starts a new epoch for the bytes of its CTA that only
the phase's arriving threads accessed in the current one.

**wgmma groups.** This interpreter computes a ``wgmma`` when it is issued, but on
hardware the instruction reads its shared-memory operands asynchronously until a
``wgmma.wait_group`` retires its group (sec. 9.7.15.6: the operands must not be
modified before then). A pipelined kernel that keeps one group in flight
(``wait_group 1``) may only let a stage be refilled once the group reading it has
retired, so the bytes each warpgroup's groups read are counted from the ``wgmma``
until the ``wait_group`` that retires them, and an async copy landing on such bytes is
reported (``shared memory overwritten while a wgmma reads it``).
"""

from __future__ import annotations

import numpy as np

from tessera.interp.target.state import Machine


def arrivals(m: Machine) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """Per mbarrier id, the CTA-local threads that arrived on its current phase, and
    those that arrived on its last completed phase."""
    if not hasattr(m, "mbar_arrivers"):
        m.mbar_arrivers = ({}, {})  # type: ignore[attr-defined]
    return m.mbar_arrivers  # type: ignore[attr-defined]


def note_arrivals(m: Machine, ids: np.ndarray, act: np.ndarray) -> None:
    """Threads ``act`` (global ids) arrive on the mbarriers ``ids`` (one each)."""
    arrivers, _ = arrivals(m)
    for i in np.unique(ids):
        seen = arrivers.setdefault(int(i), np.zeros(m.nthreads, bool))
        seen[m.tid[act[ids == i]]] = True


def acquire(m: Machine, ids: np.ndarray) -> None:
    """A wait on the completed phases of ``ids`` returned: bytes of their CTAs that
    only the phases' arriving threads accessed start a new race epoch."""
    sh = m.shared
    if not sh.races or not sh.size:
        return
    _, released = arrivals(m)
    slots = max(1, sh.size // 8)
    for i in np.unique(ids):
        who = released.get(int(i))
        if who is None or not who.any():
            continue
        cta = int(i) // slots
        base = cta * m.nthreads
        view = slice(cta * sh.size, (cta + 1) * sh.size)
        lo, hi, w = sh.rmin[view], sh.rmax[view], sh.writer[view]
        prefix = np.concatenate([[0], np.cumsum(who)])
        read = hi >= 0
        a = np.clip(lo - base, 0, m.nthreads - 1)
        b = np.clip(hi - base, 0, m.nthreads - 1)
        readers_ok = ~read | (prefix[b + 1] - prefix[a] == b - a + 1)
        writer_ok = (w < 0) | who[np.clip(w - base, 0, m.nthreads - 1)]
        clear = readers_ok & writer_ok & (read | (w >= 0))
        lo[clear], hi[clear], w[clear] = np.iinfo(np.int32).max, -1, -1


class WgmmaGroups:
    """Per warpgroup (global index ``thread // 128``): the bytes of its open group and
    of its committed groups, oldest first; ``busy`` counts readers per shared byte."""

    def __init__(self, size: int) -> None:
        self.busy = np.zeros(size, np.int32)
        self.open: dict[int, list[np.ndarray]] = {}
        self.committed: dict[int, list[list[np.ndarray]]] = {}

    def read(self, warpgroup: int, flat: np.ndarray) -> None:
        """A ``wgmma`` of ``warpgroup`` reads the shared bytes ``flat``."""
        self.open.setdefault(warpgroup, []).append(flat)
        np.add.at(self.busy, flat, 1)

    def commit(self, warpgroups: np.ndarray) -> None:
        """``wgmma.commit_group``: the open reads become the newest group."""
        for g in warpgroups.tolist():
            self.committed.setdefault(g, []).append(self.open.pop(g, []))

    def wait(self, warpgroups: np.ndarray, n: int) -> None:
        """``wgmma.wait_group n``: all but the ``n`` newest groups have retired."""
        for g in warpgroups.tolist():
            groups = self.committed.get(g, [])
            while len(groups) > n:
                for flat in groups.pop(0):
                    np.subtract.at(self.busy, flat, 1)


def groups_of(m: Machine) -> WgmmaGroups:
    """The machine's record (created on first use)."""
    rec: WgmmaGroups | None = getattr(m, "wgmma_groups", None)
    if rec is None:
        rec = WgmmaGroups(m.ncta * m.shared.size)
        m.wgmma_groups = rec  # type: ignore[attr-defined]
    return rec


def active_warpgroups(m: Machine, mask: np.ndarray) -> np.ndarray:
    """Global indices of the warpgroups with an active thread."""
    return np.unique(m.lin[mask] // 128)


__all__ = ["WgmmaGroups", "acquire", "active_warpgroups", "arrivals", "groups_of",
           "note_arrivals"]
