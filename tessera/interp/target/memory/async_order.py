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
the phase's arriving threads accessed in the current one, and only before they
arrived: each access is stamped with the shared memory's ``clock``, which each
arrival moves on, so that a store after a thread's arrival (or a read after it
released a stage) stays unordered whenever the interpreter runs the wait.

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

from typing import Any

import numpy as np

from tessera.interp.target.memory.bulk import CHUNK, chunks_add
from tessera.interp.target.memory.codes import released
from tessera.interp.target.memory.state import DIRTY_BLOCK, add_at
from tessera.interp.target.state import Machine, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async


def arrivals(m: Machine, foreign: bool = False) -> tuple[dict[int, Any], dict[int, Any]]:
    """Per mbarrier id, the CTA-local threads that arrived on its current phase, and
    those that arrived on its last completed phase; ``foreign``: the (global ids of)
    threads of other CTAs of the cluster that arrived on it (``.shared::cluster``)."""
    name = "mbar_foreign" if foreign else "mbar_arrivers"
    if not hasattr(m, name):
        setattr(m, name, ({}, {}))
    return getattr(m, name)  # type: ignore[no-any-return]


def note_arrivals(m: Machine, ids: np.ndarray, act: np.ndarray) -> None:
    """Threads ``act`` (global ids) arrive on the mbarriers ``ids`` (one each), now:
    at the shared memory's clock, which then moves on."""
    now = m.shared.clock
    m.shared.clock += 1
    away = ids // max(1, -(-m.shared.size // 8)) != m.cta[act]  # another CTA's barrier
    if away.any():
        foreign, _ = arrivals(m, foreign=True)
        for i, t in zip(ids[away].tolist(), act[away].tolist()):
            foreign.setdefault(i, {})[t] = now
        ids, act = ids[~away], act[~away]
        if not len(ids):
            return
    arrivers, _ = arrivals(m)
    # per mbarrier, its threads: one pass over the arrivals (sorted by mbarrier)
    order = np.argsort(ids, kind="stable")
    tids, sorted_ids = m.tid[act[order]], ids[order]
    starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
    for i, lo, hi in zip(sorted_ids[starts].tolist(), starts.tolist(),
                         [*starts[1:].tolist(), len(order)]):
        seen = arrivers.setdefault(i, np.zeros(m.nthreads, np.int32))  # 0: not arrived
        seen[tids[lo:hi]] = now


def acquire(m: Machine, ids: np.ndarray) -> None:
    """A wait on the completed phases of ``ids`` returned: bytes of their CTAs that
    only the phases' arriving threads accessed start a new race epoch. Only the span
    of blocks flagged dirty can hold an access; the mbarriers of one CTA are taken in
    turn."""
    sh = m.shared
    if not sh.races or not sh.size:
        return
    _, released = arrivals(m)
    _, foreign = arrivals(m, foreign=True)
    unique = np.unique(ids).tolist()
    for i in unique if foreign else ():  # threads of other CTAs: their own CTA's accesses
        by_cta: dict[int, np.ndarray] = {}
        for t, at in sorted(foreign.pop(i, {}).items()):
            by_cta.setdefault(t // m.nthreads, np.zeros((1, m.nthreads), np.int32))[
                0, t % m.nthreads] = at
        for cta, times in by_cta.items():
            release(m, np.array([cta]), times > 0, times, cross=True)
    slots = max(1, sh.size // 8)
    todo = [i for i in unique if released.get(i) is not None and released[i].any()]
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
    times = np.stack([released[by_cta[int(c)]] for c in ctas])
    release(m, ctas, times > 0, times)


def release(m: Machine, ctas: np.ndarray, arrived: np.ndarray,
            times: np.ndarray | None = None, cross: bool = False) -> None:
    """A new race epoch for the bytes of ``ctas`` (sorted) that only the threads
    ``arrived`` (C, nthreads) of each accessed since their last one: a named ``bar.sync
    id, count`` of those threads, or an mbarrier phase they arrived on at ``times``
    (C, nthreads; the shared memory's clock), which orders only what they did before.
    ``cross``: the threads synchronised with threads of other CTAs (a remote arrival,
    a release another CTA acquired), so their accesses seen by other CTAs are ordered
    too."""
    sh = m.shared
    if not sh.races or not sh.size:
        return
    if sh.clustered is not None:
        sh.clustered.release(ctas, arrived, times)
        if cross:
            sh.clustered.release(ctas, arrived, times, cross=True)
    # A CTA none of whose accessors since its bar.sync lies among the arrivals (e.g.
    # consumers waiting for a producer that only issued TMA) has nothing to clear.
    base = ctas * m.nthreads
    first = base + arrived.argmax(axis=1)
    last = base + m.nthreads - 1 - arrived[:, ::-1].argmax(axis=1)
    near = (sh.who_lo[ctas] <= last) & (sh.who_hi[ctas] >= first)
    ctas, first, last, arrived = ctas[near], first[near], last[near], arrived[near]
    if times is not None:
        times = times[near]
    if not len(ctas):
        return
    # logged reads: dropped where the epoch clears them whole, else resolved
    one_range = arrived.sum(axis=1) == last - first + 1
    sh.log.release(ctas, np.where(one_range, first, last + 1), last, times)
    breaks = np.flatnonzero(np.diff(ctas) != 1) + 1
    start = 0
    for run in np.split(ctas, breaks):  # (C, nthreads) rows of consecutive CTAs
        part = slice(start, start + len(run))
        _release_run(m, int(run[0]), arrived[part], None if times is None else times[part])
        start += len(run)


def _release_run(m: Machine, first: int, who: np.ndarray, times: np.ndarray | None) -> None:
    """:func:`_release` for the CTAs ``first, first + 1, ...`` (one row of ``who``,
    the arrived threads, and of ``times``, when they arrived, each)."""
    sh = m.shared
    rows = slice(first, first + len(who))
    cols = np.flatnonzero(sh.dirty_blocks[rows].any(axis=0))  # the log's rows: resolved
    if not len(cols):
        return
    lo, hi = int(cols[0]) * DIRTY_BLOCK, min(sh.size, (int(cols[-1]) + 1) * DIRTY_BLOCK)
    # the records of CTAs that hold no reader (writer) are zero: stand-ins of no memory
    # instead of reads of zero pages (and stores of zeros that would make them real)
    zero = np.broadcast_to(np.int32(0), (len(who), hi - lo))
    held = (bool(sh.has_readers[rows].any()), bool(sh.has_readers[rows].any()),
            bool(sh.written[rows].any()))
    views = [a.reshape(sh.ncta, sh.size)[rows, lo:hi] if h else zero
             for a, h in zip((sh.rmin_code, sh.rmax_code, sh.writer_code), held)]
    if any(held):  # else no byte holds an access: nothing to clear
        stamps = None if times is None else \
            [a.reshape(sh.ncta, sh.size)[rows, lo:hi] for a in (sh.wstamp, sh.rstamp)]
        base = (np.arange(first, first + len(who)) * m.nthreads)[:, None]
        clear = released(base, who, *views, stamps, times)
        for x, h, c in zip(views, held, (clear[1], clear[1], clear[0])):
            if h:
                np.copyto(x, np.int32(0), where=c)
    read = views[1] > 0 if held[1] else None
    if read is not None:  # the CTAs left with no reader
        sh.has_readers[rows] = read.any(axis=1)
    if (hi - lo) % DIRTY_BLOCK == 0:  # blocks left with no access are clean again
        left = views[2] > 0 if read is None else read | (views[2] > 0)
        sh.dirty_blocks[rows, lo // DIRTY_BLOCK: hi // DIRTY_BLOCK] = \
            left.reshape(len(who), -1, DIRTY_BLOCK).any(axis=2)


class _Read:
    """One ``wgmma`` operand read of several warpgroups: per row the warpgroup, the
    number of its group the read belongs to, and the flat byte indices, or the flat
    16-byte chunk numbers (``chunked``); its CTAs and the CTA-local bytes
    ``lo .. hi - 1`` bound what it reads, ``live`` flags the rows not yet retired."""

    __slots__ = ("chunked", "ctas", "group", "hi", "index", "live", "lo", "warpgroups")

    def __init__(self, warpgroups: np.ndarray, group: np.ndarray, index: np.ndarray,
                 chunked: bool, ctas: np.ndarray, lo: int, hi: int) -> None:
        self.warpgroups, self.group, self.index = warpgroups, group, index
        self.chunked, self.ctas, self.lo, self.hi = chunked, ctas, lo, hi
        self.live = np.ones(len(warpgroups), bool)

    def row_bytes(self) -> int:
        """Bytes per row."""
        return self.index.shape[1] * (CHUNK if self.chunked else 1)


class WgmmaGroups:
    """Per warpgroup (global index ``thread // 128``) its groups, numbered from 0: the
    open one is number ``committed[g]``, ``wgmma.wait_group n`` retires those below
    ``committed[g] - n``. :attr:`busy`, the count of readers per shared byte, is
    built from the reads in flight when asked for; :meth:`overlaps` answers whether a
    range may be read without it."""

    def __init__(self, ncta: int, size: int, nwarpgroups: int) -> None:
        self.ncta, self.size = ncta, size
        self.reading = 0  # bytes read by groups in flight: no byte need be looked at when 0
        self.committed = np.zeros(nwarpgroups, np.int64)
        self.reads: list[_Read] = []  # those with a row in flight
        self._busy: np.ndarray | None = None  # built from the rows in flight

    def _add(self, read: _Read) -> None:
        self.reads.append(read)
        self.reading += read.index.shape[0] * read.row_bytes()
        self._busy = None

    def read(self, warpgroups: np.ndarray, flat: np.ndarray) -> None:
        """``wgmma`` of ``warpgroups[i]`` reads the shared bytes ``flat[i]``."""
        local = flat % self.size
        self._add(_Read(warpgroups, self.committed[warpgroups], flat, False,
                        np.unique(flat // self.size), int(local.min()), int(local.max()) + 1))

    def read_chunks(self, warpgroups: np.ndarray, ctas: np.ndarray, chunks: np.ndarray
                    ) -> None:
        """:meth:`read` of the whole CTA-local 16-byte ``chunks`` (sorted, distinct) in
        each of the distinct CTAs ``ctas``."""
        index = ctas[:, None] * (self.size // CHUNK) + chunks[None, :]
        self._add(_Read(warpgroups, self.committed[warpgroups], index, True, ctas,
                        int(chunks[0]) * CHUNK, (int(chunks[-1]) + 1) * CHUNK))

    def overlaps(self, ctas: np.ndarray, lo: int, hi: int) -> bool:
        """Whether a group in flight may read a byte ``lo .. hi - 1`` of ``ctas`` (a
        superset: False proves that :attr:`busy` is 0 there)."""
        return any(r.lo < hi and r.hi > lo and np.isin(r.ctas, ctas).any() for r in self.reads)

    @property
    def busy(self) -> np.ndarray:
        """In-flight ``wgmma`` groups reading each shared byte (flat)."""
        if self._busy is None:
            busy = np.zeros(self.ncta * self.size, np.int16)
            for r in self.reads:
                if r.chunked:  # one read's rows lie in distinct CTAs
                    chunks_add(busy, r.index[r.live], 1)
                else:
                    add_at(busy, r.index[r.live], 1)
            self._busy = busy
        return self._busy

    def commit(self, warpgroups: np.ndarray) -> None:
        """``wgmma.commit_group``: the open group of each warpgroup is committed."""
        self.committed[warpgroups] += 1

    def wait(self, warpgroups: np.ndarray, n: int) -> None:
        """``wgmma.wait_group n``: all but the ``n`` newest groups have retired."""
        limit = np.full(len(self.committed), -1, np.int64)
        limit[warpgroups] = self.committed[warpgroups] - n
        still = []
        for r in self.reads:
            gone = r.live & (r.group < limit[r.warpgroups])
            if gone.any():
                r.live &= ~gone
                self.reading -= int(gone.sum()) * r.row_bytes()
                self._busy = None
            if r.live.any():
                still.append(r)
        self.reads = still


def groups_of(m: Machine) -> WgmmaGroups:
    """The machine's record (created on first use)."""
    rec: WgmmaGroups | None = getattr(m, "wgmma_groups", None)
    if rec is None:
        rec = WgmmaGroups(m.ncta, m.shared.size, -(-m.n // 128))
        m.wgmma_groups = rec  # type: ignore[attr-defined]
    return rec


def active_warpgroups(m: Machine, mask: np.ndarray) -> np.ndarray:
    """Global indices of the warpgroups with an active thread."""
    return np.unique(m.lin[mask] // 128)


@step_rule(target_async.WgmmaFence, target_async.WgmmaCommit, target_async.WgmmaWait)
def _wgmma_order(c: TargetCompiler, instr: Instr) -> Step:
    # wgmma computes when issued (the register ordering rules are the verifier's); its
    # shared operands stay in use until wait_group retires the group (WgmmaGroups)
    op = instr.op

    def step(fr: TargetFrame) -> None:
        if isinstance(op, target_async.WgmmaFence) or not fr.mask.any():
            return
        groups = active_warpgroups(fr.m, fr.mask)
        if isinstance(op, target_async.WgmmaCommit):
            groups_of(fr.m).commit(groups)
        else:
            groups_of(fr.m).wait(groups, op.n)
    return step


__all__ = ["WgmmaGroups", "acquire", "active_warpgroups", "arrivals", "groups_of",
           "note_arrivals", "release"]
