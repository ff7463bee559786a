"""Race records of distributed shared memory: which accesses of a cluster's CTAs to
each other's shared memory are ordered.

In one CTA, ``bar.sync`` orders its threads' accesses of its shared memory: the records
of :class:`~tessera.interp.target.memory.state.SharedMemory` hold one epoch per byte,
which the CTA's barrier ends. Across the CTAs of a cluster that barrier orders nothing:
only the cluster barrier (``barrier.cluster.arrive``, release by default, then
``barrier.cluster.wait``) does, or an mbarrier phase that threads of another CTA arrived
on, for the threads that wait for it (PTX ISA, "Memory Consistency Model": a barrier
synchronises the threads that take part in it). So a launch with clusters keeps two
more kinds of records, here, and its CTAs' own records keep the accesses of their own
threads of their own memory only:

* ``cross``: per byte of every CTA's memory, the last writer and the lowest and
  highest reader since the last cluster barrier, of any CTA of the cluster. An access
  races with such a record of another CTA's thread. The CTAs of a launch with clusters
  are numbered cluster by cluster, so each CTA's threads are one range of thread ids:
  a reader range whose two ends lie in the accessing CTA holds no other CTA's reader.
* ``far``: the accesses of another CTA's memory by a CTA's threads since that CTA's
  own last ``bar.sync``, checked against the same CTA's later accesses of that memory
  (two threads of one CTA, ordered by their own barrier). One set per distance between
  the two CTAs' ranks, so that each set's bytes of one CTA hold one other CTA's threads.

A completed mbarrier phase ends the epoch of the bytes that only its arriving threads
accessed before they arrived, as it does in a CTA
(:func:`tessera.interp.target.memory.async_order.acquire`): the ``far`` records of all
its arrivals, and the ``cross`` records of arrivals from other CTAs
(``mbarrier.arrive.shared::cluster`` on a barrier of the waiting CTA). That ends them
for every CTA, not only the waiting one: a race of the arriving threads with a third
CTA is then missed, never falsely reported. ``wgmma`` operand reads are checked and
recorded here as reads by the warpgroup's first thread (the check is by CTA). Atomics
are recorded as writes whose codes are negated, as in a CTA's own records
(:meth:`.SharedMemory.atomic`): the atomics of several CTAs on one CTA's memory (a
histogram split over a cluster) race with no other atomic, but with a plain access
of another CTA that no cluster barrier orders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tessera.interp.target.memory.chunks import small_pages
from tessera.interp.target.memory.codes import (
    ACCESSES,
    code_first,
    code_last,
    race_text,
    released,
)
from tessera.interp.target.memory.global_memory import Fail

_BIG = np.int32(np.iinfo(np.int32).max)


class _Records:
    """Per byte of every CTA's memory: the last writer and the lowest and highest
    reader (coded thread ids, :mod:`~tessera.interp.target.memory.codes`; 0: none), and
    per CTA whether its bytes may hold one."""

    def __init__(self, ncta: int, size: int) -> None:
        with small_pages():  # zero pages: only the bytes accessed become memory
            self.arrays = tuple(np.zeros(ncta * size, np.int32) for _ in range(3))
            # when the writer and the last reader accessed each byte (the memory's clock)
            self.stamps = tuple(np.zeros(ncta * size, np.int32) for _ in range(2))
        self.held = np.zeros(ncta, bool)
        self.size = size

    def rows(self, ctas: np.ndarray) -> tuple[np.ndarray, ...]:
        """The records (writer, lowest, highest reader) of the CTAs ``ctas``, (C, size)
        views."""
        return tuple(a.reshape(-1, self.size)[ctas] for a in self.arrays)

    def clear(self, ctas: np.ndarray) -> None:
        """Forget every record of the CTAs (ids) ``ctas``."""
        ctas = ctas[self.held[ctas]]
        for a in self.arrays:
            a.reshape(-1, self.size)[ctas] = 0
        self.held[ctas] = False

    def check(self, flat: np.ndarray, me: np.ndarray, write: bool,
              other: Callable[[Any, Any], Any], atomic: bool = False
              ) -> tuple[int, int, int, bool] | None:
        """The first clash of threads ``me`` accessing ``flat`` (M, nbytes) with a
        record of a thread ``other`` calls foreign (``other(ids, me)``, (M, nbytes)
        bool): (row, byte, the other thread, whether its record is an atomic's), or
        None. An ``atomic`` access (an atomic's write, a strong read or write) passes
        other atomics' records."""
        w, lo, hi = (a[flat] for a in self.arrays)
        wid, low, high = np.abs(w) - np.int32(1), lo + _BIG, hi - np.int32(1)
        mine = me[:, None]
        wrote = ((w > 0) if atomic else (w != 0)) & other(wid, mine)
        clash = wrote | ((hi > 0) & (other(low, mine) | other(high, mine))) if write else wrote
        if not clash.any():
            return None
        i = int(np.flatnonzero(clash.any(axis=1))[0])
        j = int(np.flatnonzero(clash[i])[0])
        if wrote[i, j]:
            return i, j, int(wid[i, j]), bool(w[i, j] < 0)
        return i, j, int(low[i, j] if other(low[i, j], me[i]) else high[i, j]), False

    def note(self, flat: np.ndarray, me: np.ndarray, write: bool, now: int,
             atomic: bool = False) -> None:
        """Record threads ``me`` writing (reading; ``atomic``: updating, a write whose
        code is negated, or a strong read, which leaves no record) the bytes ``flat``
        at time ``now``."""
        if atomic and not write:
            return
        self.held[flat[:, 0] // self.size] = True
        w, lo, hi = self.arrays
        self.stamps[0 if write else 1][flat] = now
        if write:
            code = code_last(me)[:, None]
            w[flat] = np.broadcast_to(-code if atomic else code, flat.shape)
            return
        np.minimum.at(lo, flat.ravel(), np.repeat(code_first(me), flat.shape[1]))
        np.maximum.at(hi, flat.ravel(), np.repeat(code_last(me), flat.shape[1]))

    def release(self, ctas: np.ndarray, base: np.ndarray, who: np.ndarray,
                times: np.ndarray | None) -> None:
        """A new epoch for the bytes of the CTAs ``ctas`` that only the threads flagged
        in ``who`` (per CTA, threads from ``base[i]`` on) accessed, with ``times``
        (when each arrived) only before their arrival
        (:func:`~tessera.interp.target.memory.codes.released`)."""
        held = self.held[ctas]
        if not held.any():
            return
        ctas, base, who = ctas[held], base[held], who[held]
        w, lo, hi = self.rows(ctas)
        stamps = None if times is None else \
            [x.reshape(-1, self.size)[ctas] for x in self.stamps]
        writer, readers = released(base, who, lo, hi, w, stamps,
                                   None if times is None else times[held])
        w[writer] = 0  # the writer and the readers each where they are ordered
        lo[readers] = 0
        hi[readers] = 0
        for x, view in zip(self.arrays, (w, lo, hi)):
            x.reshape(-1, self.size)[ctas] = view


class ClusterRaces:
    """The ``cross`` and ``far`` records (module docstring) of shared memory ``sh`` in
    a launch with clusters of ``sh.cluster_size`` CTAs, each of ``nthreads`` threads."""

    def __init__(self, sh: Any) -> None:
        self.sh = sh
        self.k: int = sh.cluster_size
        self.cross = _Records(sh.ncta, sh.size)
        self.far: dict[int, _Records] = {}  # by rank distance (accessor - owner) mod k
        # per thread, when (the memory's clock) it last arrived on the cluster barrier
        self.arrival = np.zeros(sh.ncta * sh.nthreads, np.int32)

    def _cta(self, ids: np.ndarray) -> np.ndarray:
        return ids // self.sh.nthreads

    def _foreign(self, ids: np.ndarray, me: np.ndarray) -> np.ndarray:
        return self._cta(ids) != self._cta(me)

    def check(self, flat: np.ndarray, me: np.ndarray, fail: Fail, access: str) -> np.ndarray:
        """Check and record the ``access`` (a key of :data:`ACCESSES`) of threads
        ``me`` (global ids) to the bytes ``flat`` (M, nbytes) against the records here;
        the rows that access their own CTA's memory (bool), which the CTA's own records
        check."""
        sh = self.sh
        owner = flat[:, 0] // sh.size
        own = owner == self._cta(me)
        far = self._far_sets(owner, me, own)
        write, atomic = ACCESSES[access]
        for rec, rows, foreign in [(self.cross, np.arange(len(me)), self._foreign), *far]:
            clash = rec.check(flat[rows], me[rows], write, foreign, atomic)
            if clash is not None:
                i, j, other, by_atomic = clash
                k = int(rows[i])
                fail(k, "shared memory race", race_text(
                    access, sh._where(flat[k, j]), sh.other(other, int(me[k])), by_atomic))
        self.cross.note(flat, me, write, sh.clock, atomic)
        for rec, rows, _ in far:
            rec.note(flat[rows], me[rows], write, sh.clock, atomic)
        return own

    def arrive(self, who: np.ndarray) -> None:
        """Threads ``who`` (global ids) arrive on the cluster barrier now."""
        self.arrival[who] = self.sh.clock
        self.sh.clock += 1

    def own(self, flat: np.ndarray, me: np.ndarray, fail: Fail, rows: np.ndarray | None,
            access: str) -> tuple[np.ndarray, np.ndarray, Fail, np.ndarray | None]:
        """:meth:`check`, then the rows that access their own CTA's memory: their
        ``flat``, ``me``, ``fail`` and ``rows`` (the caller's per-row index, or None)."""
        own = self.check(flat, me, fail, access)
        if own.all():
            return flat, me, fail, rows
        keep = np.flatnonzero(own)

        def fail_kept(i: int, what: str, detail: str) -> None:
            fail(int(keep[i]), what, detail)
        return flat[keep], me[keep], fail_kept, None if rows is None else rows[keep]

    def _far_sets(self, owner: np.ndarray, me: np.ndarray, own: np.ndarray
                  ) -> list[tuple[_Records, np.ndarray, Any]]:
        """The ``far`` record sets of the rows that access another CTA's memory, with
        those rows and the test of the same CTA's other threads."""
        if own.all():
            return []
        away = np.flatnonzero(~own)
        dist = (self._cta(me[away]) - owner[away]) % self.k
        sets = []
        for d in np.unique(dist).tolist():
            if d not in self.far:
                self.far[d] = _Records(self.sh.ncta, self.sh.size)
            sets.append((self.far[d], away[dist == d], np.not_equal))
        return sets

    def _owners(self, ctas: np.ndarray, d: int) -> np.ndarray:
        """The CTAs whose memory the threads of ``ctas`` reach at rank distance ``d``."""
        return ctas - ctas % self.k + (ctas % self.k - d) % self.k

    def sync(self, ctas: np.ndarray) -> None:
        """``bar.sync`` of the CTAs flagged in ``ctas``: their threads' accesses of
        other CTAs' memory are ordered for their own later accesses."""
        ids = np.flatnonzero(ctas)
        for d, rec in self.far.items():
            rec.clear(self._owners(ids, d))

    def _release(self, records: Iterable[_Records], clusters: np.ndarray, who: np.ndarray,
                 times: np.ndarray | None) -> None:
        """A new epoch, in ``records``, for the bytes of the CTAs of ``clusters`` that
        only the threads flagged in ``who`` (per cluster, its threads) accessed, with
        ``times`` (when each arrived) only before their arrival."""
        k, n = self.k, self.sh.nthreads
        rows = np.repeat(np.arange(len(clusters)), k)  # each cluster's CTAs
        ctas = (clusters[:, None] * k + np.arange(k)).ravel()
        base = (clusters * k * n)[rows][:, None]
        for rec in records:
            rec.release(ctas, base, who[rows], None if times is None else times[rows])

    def cluster_sync(self, ctas: np.ndarray, exited: np.ndarray | None) -> None:
        """A completed cluster barrier phase (release) of the CTAs flagged in ``ctas``
        (whole clusters): every access before its thread's arrival is ordered (an
        access between a thread's arrival and its wait is not), and every access of
        a thread that exited (``exited``, per thread; it counts as arrived)."""
        per = self.k * self.sh.nthreads
        clusters = np.flatnonzero(ctas)[::self.k] // self.k
        times = self.arrival if exited is None else \
            np.where(exited, np.iinfo(np.int32).max, self.arrival)
        self._release((self.cross, *self.far.values()), clusters,
                      np.ones((len(clusters), per), bool), times.reshape(-1, per)[clusters])

    def release(self, ctas: np.ndarray, arrived: np.ndarray, times: np.ndarray | None,
                cross: bool = False) -> None:
        """Threads ``arrived`` (C, nthreads) of the CTAs ``ctas`` completed a named
        barrier or an mbarrier phase they arrived on at ``times`` (C, nthreads), which
        orders what they did before: a new epoch for the bytes only they accessed, in
        the ``far`` records (``cross``: in the ``cross`` ones, for an arrival from
        another CTA)."""
        k, n = self.k, self.sh.nthreads
        clusters, at = np.unique(ctas // k, return_inverse=True)
        who = np.zeros((len(clusters), k, n), bool)
        who[at, ctas % k] = arrived
        when = None
        if times is not None:
            when = np.zeros((len(clusters), k, n), np.int32)
            when[at, ctas % k] = times
            when = when.reshape(len(clusters), -1)
        self._release((self.cross,) if cross else self.far.values(), clusters,
                      who.reshape(len(clusters), -1), when)

    def warp_sync(self, warps: np.ndarray) -> None:
        """``bar.warp.sync`` of the warps flagged in ``warps`` (by global warp index):
        their lanes' accesses of other CTAs' memory are ordered among them."""
        per = self.k * self.sh.nthreads
        flags = np.repeat(warps, 32)[: self.sh.ncta * self.sh.nthreads].reshape(-1, per)
        clusters = np.flatnonzero(flags.any(axis=1))
        self._release(self.far.values(), clusters, flags[clusters], None)

    def landed(self, flat: np.ndarray) -> None:
        """Async copies landed on the bytes ``flat`` (M, nbytes): ordered by their
        mbarrier, the bytes hold no writer."""
        for rec in (self.cross, *self.far.values()):
            if rec.held[flat[:, 0] // self.sh.size].any():
                rec.arrays[0][flat] = 0

    def landed_range(self, ctas: np.ndarray, lo: int, hi: int) -> None:
        """TMA data landed on the bytes ``lo`` .. ``hi - 1`` of the CTAs ``ctas``."""
        for rec in (self.cross, *self.far.values()):
            rec.arrays[0].reshape(-1, self.sh.size)[ctas[rec.held[ctas]], lo:hi] = 0


__all__ = ["ClusterRaces"]
