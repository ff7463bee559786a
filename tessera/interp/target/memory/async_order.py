"""What orders shared memory between the asynchronous agents of the Target IR
interpreter, beyond ``bar.sync``.

**Named barriers.** ``bar.sync id, count`` orders the accesses of the ``count``
threads that arrive (whole warps) and no others: like a completed mbarrier phase, it
starts a new epoch for the bytes only those threads accessed (:func:`release`).

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

from tessera.interp.target.memory.bulk import CHUNK, chunks_add
from tessera.interp.target.memory.state import DIRTY_BLOCK, add_at
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
    only the phases' arriving threads accessed start a new race epoch. Only the span
    of blocks flagged dirty can hold an access; the mbarriers of one CTA are taken in
    turn."""
    sh = m.shared
    if not sh.races or not sh.size:
        return
    _, released = arrivals(m)
    slots = max(1, sh.size // 8)
    todo = [i for i in np.unique(ids).tolist() if released.get(i) is not None
            and released[i].any()]
    while todo:  # one mbarrier per CTA at a time
        by_cta: dict[int, int] = {}
        for i in todo:
            by_cta.setdefault(i // slots, i)
        todo = [i for i in todo if by_cta[i // slots] != i]
        _release(m, by_cta, released)


def _release(m: Machine, by_cta: dict[int, int], released: dict[int, np.ndarray]) -> None:
    """Clear the accesses of the CTAs ``by_cta`` made by the arriving threads of each
    CTA's mbarrier only, a run of consecutive CTAs at a time (views, no copies)."""
    ctas = np.sort(np.fromiter(by_cta, np.int64, len(by_cta)))
    release(m, ctas, np.stack([released[by_cta[int(c)]] for c in ctas]))


def release(m: Machine, ctas: np.ndarray, arrived: np.ndarray) -> None:
    """A new race epoch for the bytes of ``ctas`` (sorted) that only the threads
    ``arrived`` (C, nthreads) of each accessed since their last one: an mbarrier phase
    they arrived on, or a named ``bar.sync id, count`` of those threads."""
    sh = m.shared
    if not sh.races or not sh.size:
        return
    # A CTA none of whose accessors since its bar.sync lies among the arrivals (e.g.
    # consumers waiting for a producer that only issued TMA) has nothing to clear.
    base = ctas * m.nthreads
    first = base + arrived.argmax(axis=1)
    last = base + m.nthreads - 1 - arrived[:, ::-1].argmax(axis=1)
    near = (sh.who_lo[ctas] <= last) & (sh.who_hi[ctas] >= first)
    ctas, arrived = ctas[near], arrived[near]
    if not len(ctas):
        return
    breaks = np.flatnonzero(np.diff(ctas) != 1) + 1
    start = 0
    for run in np.split(ctas, breaks):  # (C, nthreads) rows of consecutive CTAs
        _release_run(m, int(run[0]), arrived[start:start + len(run)])
        start += len(run)


def _release_run(m: Machine, first: int, who: np.ndarray) -> None:
    """:func:`_release` for the CTAs ``first, first + 1, ...`` (one row of ``who``,
    the arrived threads, each)."""
    sh = m.shared
    rows = slice(first, first + len(who))
    cols = np.flatnonzero(sh.dirty[rows].any(axis=0))
    if not len(cols):
        return
    lo, hi = int(cols[0]) * DIRTY_BLOCK, min(sh.size, (int(cols[-1]) + 1) * DIRTY_BLOCK)
    views = [a.reshape(sh.ncta, sh.size)[rows, lo:hi] for a in (sh.rmin, sh.rmax, sh.writer)]
    ctas = np.arange(first, first + len(who))
    clear = _released(m, ctas, who, *views)
    for x, fill in zip(views, (np.iinfo(np.int32).max, -1, -1)):
        np.copyto(x, np.int32(fill), where=clear)
    if (hi - lo) % DIRTY_BLOCK == 0:  # blocks left with no access are clean again
        left = ((views[1] >= 0) | (views[2] >= 0)).reshape(len(who), -1, DIRTY_BLOCK)
        sh.dirty[rows, lo // DIRTY_BLOCK: hi // DIRTY_BLOCK] = left.any(axis=2)


def _released(m: Machine, ctas: np.ndarray, who: np.ndarray, lo: np.ndarray, hi: np.ndarray,
              w: np.ndarray) -> np.ndarray:
    """Which accessed bytes (rows: ``ctas``) only the threads ``who`` (C, nthreads)
    accessed: readers ``lo``..``hi``, writer ``w`` (global thread ids)."""
    base = (ctas * m.nthreads)[:, None]
    first = who.argmax(axis=1)
    last = m.nthreads - 1 - who[:, ::-1].argmax(axis=1)
    count = who.sum(axis=1)
    if (count == last - first + 1).all():  # each CTA's arrivals are one range of threads
        # An unread byte holds lo = int32 max and hi = -1, an unwritten one w = -1, and
        # every id in a CTA's row is at least its base: the last accessor must lie in
        # 0 .. t (-1 is 0xFFFFFFFF unsigned), the first ones need checking only when
        # the range starts above the CTA's thread 0.
        f, t = base + first[:, None], base + last[:, None]
        clear = np.maximum(hi, w).view(np.uint32) <= t.astype(np.uint32)
        if (first > 0).any():
            clear &= (lo >= f) & ((w < 0) | (w >= f))
        return clear
    prefix = np.concatenate([np.zeros((len(ctas), 1), np.int64), np.cumsum(who, axis=1)],
                            axis=1)
    r = np.arange(len(ctas))[:, None]
    a = np.clip(lo - base, 0, m.nthreads - 1)
    b = np.clip(hi - base, 0, m.nthreads - 1)
    read = hi >= 0
    readers_ok = ~read | (prefix[r, b + 1] - prefix[r, a] == b - a + 1)
    writer_ok = (w < 0) | who[r, np.clip(w - base, 0, m.nthreads - 1)]
    return readers_ok & writer_ok & (read | (w >= 0))


class _Chunks:
    """Bytes a ``wgmma`` reads, as flat 16-byte chunk numbers."""

    __slots__ = ("call", "index")

    def __init__(self, index: np.ndarray, call: int) -> None:
        self.index = index
        self.call = call  # the read's number: the chunks of one read are distinct


class WgmmaGroups:
    """Per warpgroup (global index ``thread // 128``): the bytes of its open group and
    of its committed groups, oldest first; ``busy`` counts readers per shared byte."""

    def __init__(self, size: int) -> None:
        self.busy = np.zeros(size, np.int16)  # in-flight wgmma groups reading a byte
        self.reading = 0  # the sum of ``busy``: no byte need be looked at when 0
        self.reads = 0  # chunked reads so far
        self.open: dict[int, list[np.ndarray | _Chunks]] = {}
        self.committed: dict[int, list[list[np.ndarray | _Chunks]]] = {}

    def read(self, warpgroups: np.ndarray, flat: np.ndarray) -> None:
        """``wgmma`` of ``warpgroups[i]`` reads the shared bytes ``flat[i]``."""
        for i, g in enumerate(warpgroups.tolist()):
            self.open.setdefault(g, []).append(flat[i])
        add_at(self.busy, flat, 1)
        self.reading += flat.size

    def read_chunks(self, warpgroups: np.ndarray, index: np.ndarray) -> None:
        """:meth:`read` of whole 16-byte chunks: ``index[i]`` are flat chunk numbers,
        each once (the rows lie in distinct CTAs)."""
        self.reads += 1
        for i, g in enumerate(warpgroups.tolist()):
            self.open.setdefault(g, []).append(_Chunks(index[i], self.reads))
        chunks_add(self.busy, index, 1)  # rows: distinct CTAs
        self.reading += index.size * CHUNK

    def commit(self, warpgroups: np.ndarray) -> None:
        """``wgmma.commit_group``: the open reads become the newest group."""
        for g in warpgroups.tolist():
            self.committed.setdefault(g, []).append(self.open.pop(g, []))

    def wait(self, warpgroups: np.ndarray, n: int) -> None:
        """``wgmma.wait_group n``: all but the ``n`` newest groups have retired."""
        chunks: dict[int, list[np.ndarray]] = {}  # per read: its rows that retire
        flat: list[np.ndarray] = []
        for g in warpgroups.tolist():
            groups = self.committed.get(g, [])
            while len(groups) > n:
                for r in groups.pop(0):
                    if isinstance(r, _Chunks):
                        chunks.setdefault(r.call, []).append(r.index)
                    else:
                        flat.append(r)
        for rows in chunks.values():
            gone = np.stack(rows)
            chunks_add(self.busy, gone, -1)
            self.reading -= gone.size * CHUNK
        if flat:
            gone = np.concatenate(flat)
            add_at(self.busy, gone, -1)
            self.reading -= gone.size


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
           "note_arrivals", "release"]
