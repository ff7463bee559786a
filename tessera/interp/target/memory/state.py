"""Simulated shared memory of the Target IR interpreter (global memory:
:mod:`.global_memory`, whose names this module re-exports).

Shared memory: one byte array per CTA, byte ``i`` at shared address ``base + i``: as on
the GPU, from :data:`SHARED_BASE` (1024), above the kilobyte reserved for system use
(:mod:`tessera.arch.limits`; not held, an access there faults), buffers at their
alignment (swizzles on absolute addresses see it), filled with 0xFF poison. Per byte it
tracks whether it was written (a read of a never-written byte is an error), how many
async copies are still in flight to it (reading such a byte is an error), and, between
two ``bar.sync`` of its CTA, which thread wrote it and which threads read it, and when
(:attr:`SharedMemory.clock`: what an mbarrier phase orders, :mod:`.async_order`); a read
of another thread's write, or a write over another thread's access, with no barrier
between, is a race, as compute-sanitizer's racecheck reports; an atomic or a strong
store is recorded as a write that other strong accesses pass, and a strong load leaves
no record. Two threads of one instruction writing one byte are not reported. Blocks of
``DIRTY_BLOCK`` bytes that may hold a writer or a reader are flagged in ``dirty``, so
that an mbarrier's new race epoch (:func:`.async_order.acquire`) looks at those only,
and per CTA the bounds of the thread ids recorded, so that it skips CTAs none of whose
accessors arrived. Rows that are whole aligned 16-byte chunks (``ldmatrix`` rows,
16-byte ``cp.async``) read and write the records a chunk at a time (:func:`take_chunks`,
:func:`put_chunks`). Reads of whole chunks (those rows, ``wgmma`` operands) wait in
:attr:`SharedMemory.log` (:mod:`.reads`) until something looks at their readers: the raw
arrays ``rmin_code``, ``rmax_code`` and ``dirty_blocks`` lack them,
:meth:`SharedMemory.readers` and the property ``dirty`` resolve them first.

The race records hold thread ids *coded* so that 0 means "none" (:mod:`.codes`): a new
launch's records are zero pages, which the kernel touches only where its CTAs access
shared memory, instead of a fill of every byte's records.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.interp.target.memory.chunks import (
    CHUNK,
    DIRTY_BLOCK,
    RecordSummaries,
    add_at,
    chunk_rows,
    put_chunks,
    put_rows,
    small_pages,
    take_chunks,
    take_rows,
    word_rows,
)
from tessera.interp.target.memory.codes import ACCESSES, code_first, code_last, race_text, unordered
from tessera.interp.target.memory.global_memory import (
    GLOBAL_BASE,
    GLOBAL_STRIDE,
    Fail,
    GlobalMemory,
)
from tessera.interp.target.memory.window import SHARED_BASE, SharedWindow

_NONE = np.int32(-1)
_BIG = np.int32(np.iinfo(np.int32).max)

class SharedMemory(SharedWindow, RecordSummaries):
    """Per-CTA shared memory bytes with initialisation, async and race tracking: the
    ``size`` bytes at shared addresses ``base`` .. ``base + size - 1`` of each CTA
    (:class:`~.window.SharedWindow`: addresses to indices)."""

    def __init__(self, ncta: int, nthreads: int, size: int, races: bool,
                 base: int = SHARED_BASE) -> None:
        self.ncta = ncta
        self.nthreads = nthreads
        self.size = size
        self.base = base
        n = ncta * size
        self.data = np.full(n, 0xFF, np.uint8)
        self.init = np.zeros(n, bool)
        self.pending = np.zeros(n, np.int16)  # copies in flight per byte: a few at most
        self.in_flight = 0  # the sum of ``pending``: no byte need be looked at when 0
        self.unfenced = np.zeros(n, bool)  # written by st.shared, no proxy fence since
        self.unfenced_ctas = np.zeros(ncta, bool)  # may a CTA hold such a byte (superset)
        # TMA stores that may still read a byte (memory.bulk_store), and their sum
        self.bulk_read = np.zeros(n, np.int16)
        self.bulk_reads = 0
        # per 8-byte slot (an mbarrier), the thread (global id) that initialised it, not
        # yet ordered before other threads' accesses by a bar.sync (-1: visible to all)
        self.init_by = np.full(ncta * -(-size // 8), _NONE, np.int32)
        self.races = races
        #: counts mbarrier arrivals: accesses and arrivals are stamped with it, so that
        #: a completed phase orders what its threads did before they arrived only
        self.clock = 1
        #: where set, a read of unwritten bytes is passed to it (reading thread ids, the
        #: first such byte) instead of failing: the PTX runner follows the value
        self.defer: Callable[[np.ndarray, str], None] | None = None
        #: a launch with clusters: the records of accesses across its CTAs
        #: (:class:`tessera.interp.target.cluster.races.ClusterRaces`)
        self.clustered: Any = None
        if races:
            with small_pages():  # zero pages: touched only where the kernel accesses
                self.writer_code = np.zeros(n, np.int32)  # code_last of the writer
                # code_first of the lowest and code_last of the highest reader of each
                # byte, and per CTA and DIRTY_BLOCK bytes whether a byte may hold a
                # writer or a reader, without the reads still in ``log`` (readers()
                # and dirty resolve it first)
                self.rmin_code = np.zeros(n, np.int32)
                self.rmax_code = np.zeros(n, np.int32)
                # the clock of each byte's write and of its last read
                self.wstamp = np.zeros(n, np.int32)
                self.rstamp = np.zeros(n, np.int32)
            self.dirty_blocks = np.zeros((ncta, -(-size // DIRTY_BLOCK)), bool)
            # per CTA: may any byte hold a writer or a reader / a writer (supersets)
            self.accessed = np.zeros(ncta, bool)
            self.written = np.zeros(ncta, bool)
            # per CTA: may rmin_code / rmax_code hold a reader (a superset; logged reads
            # count once resolved): stores and epochs skip the others' zero pages
            self.has_readers = np.zeros(ncta, bool)
            # per CTA: bounds of the thread ids (global) recorded as a reader or writer
            # since its bar.sync (a superset: epochs that clear part keep them)
            self.scratch: tuple[np.ndarray, np.ndarray] | None = None
            self.who_lo = np.full(ncta, _BIG, np.int32)
            self.who_hi = np.full(ncta, _NONE, np.int32)
        from tessera.interp.target.memory.reads import ReadLog  # it builds on this module

        #: whole-chunk reads not yet written into the per-byte reader records
        self.log = ReadLog(self)

    def check_read(self, flat: np.ndarray, me: np.ndarray, fail: Fail, race: bool = True,
                   chunks: np.ndarray | None = None, last: np.ndarray | None = None,
                   strong: bool = False) -> None:
        """Fault on poison, in-flight async bytes and races; record the readers.
        ``chunks``: each row's chunk number when each row is one aligned 16-byte chunk,
        bytes in order (else found here); ``last``: threads ``me[i]`` .. ``last[i]``
        read row ``i`` together (a ``wgmma`` operand, in their own CTA's memory);
        ``strong``: a strong read (``ld.volatile``, ``ld.relaxed``), which passes
        atomics' and strong stores' records and leaves none."""
        rows = chunks if chunks is not None else \
            chunk_rows(flat) if self.data.size % CHUNK == 0 else None
        get = (lambda a: a[flat]) if rows is None else (lambda a: take_chunks(a, rows))
        checks = [(get(self.init), "uninitialised shared read")]
        if self.in_flight:
            checks.insert(0, (get(self.pending) == 0, "async copy read before its wait"))
        for ok, what in checks:
            if not ok.all():
                i = int(np.flatnonzero(~ok.all(axis=1))[0])
                j = int(np.flatnonzero(~ok[i])[0])
                if self.defer is not None and what == "uninitialised shared read":
                    self.defer(me[~ok.all(axis=1)], self._where(flat[i, j]))
                    continue
                fail(i, what, self._where(flat[i, j]))
        if not (self.races and race):
            return
        if self.clustered is not None:  # other CTAs' accesses: checked there
            flat, me, fail, rows = self.clustered.own(flat, me, fail, rows,
                                                      "strong load" if strong else "read")
            if not len(me):
                return
        get = (lambda a: a[flat]) if rows is None else (lambda a: take_chunks(a, rows))
        if self.written[me // self.nthreads].any():
            w = get(self.writer_code)
            clash = unordered(w, me, last, atomic=strong)
            if np.any(clash):
                i = int(np.flatnonzero(clash.any(axis=1))[0])
                j = int(np.flatnonzero(clash[i])[0])
                fail(i, "shared memory race", race_text(
                    "strong load" if strong else "read", self._where(flat[i, j]),
                    self.other(abs(int(w[i, j])) - 1, int(me[i])), bool(w[i, j] < 0)))
        if strong:
            return
        last = me if last is None else last
        if rows is not None and self.size % CHUNK == 0:  # kept as rows until looked at
            self.log.add_rows(rows, me, last)
        else:
            self.note_readers(flat, me, last, rows=rows)

    def cta_mask(self, ctas: np.ndarray) -> np.ndarray:
        """The CTAs ``ctas`` (ids) as a mask over all CTAs."""
        mask = np.zeros(self.ncta, bool)
        mask[ctas] = True
        return mask

    def note_readers(self, flat: np.ndarray, first: np.ndarray, last: np.ndarray,
                     mark: bool = True, rows: np.ndarray | None = None,
                     at: int | None = None) -> None:
        """Record that threads ``first[i]`` to ``last[i]`` read the bytes ``flat[i]``
        (``mark`` False: the caller flags the dirty blocks; ``rows``: the chunk numbers
        when :func:`chunk_rows` found them; ``at``: the :attr:`clock` of the read, if
        not now)."""
        idx = flat.ravel()
        stamp = np.int32(self.clock if at is None else at)
        self.accessed[first // self.nthreads] = True
        self.has_readers[first // self.nthreads] = True
        self.note_who(first, last)
        if mark:
            self.mark(flat)
        if rows is not None:  # a row's bytes share their readers: reduce per chunk
            if self.scratch is None:  # per chunk, no reader (0) between calls
                self.scratch = (np.zeros(self.data.size // CHUNK, np.int32),
                                np.zeros(self.data.size // CHUNK, np.int32))
            # taking minima and maxima commutes with the log: the raw arrays do
            for arr, who, pick, per in (
                    (self.rmin_code, code_first(first), np.minimum, self.scratch[0]),
                    (self.rmax_code, code_last(last), np.maximum, self.scratch[1])):
                pick.at(per, rows, who)
                # rows of one chunk store the same values: the order of the writes is moot
                put_chunks(arr, rows, pick(take_chunks(arr, rows), per[rows][:, None]))
                per[rows] = 0
            put_chunks(self.rstamp, rows, np.maximum(take_chunks(self.rstamp, rows), stamp))
            return
        if len(flat) == 1:  # one row's distinct bytes: plain stores (ufunc.at is slow)
            row = flat[0]
            self.rstamp[row] = np.maximum(self.rstamp[row], stamp)
            self.rmin_code[row] = np.minimum(self.rmin_code[row], code_first(first[0]))
            self.rmax_code[row] = np.maximum(self.rmax_code[row], code_last(last[0]))
            return
        # the latest read (logged reads resolve later, out of order): rows of one
        # access share their stamp, so repeated bytes store the same value
        self.rstamp[idx] = np.maximum(self.rstamp[idx], stamp)
        np.minimum.at(self.rmin_code, idx, np.broadcast_to(code_first(first)[:, None],
                                                           flat.shape).ravel())
        np.maximum.at(self.rmax_code, idx, np.broadcast_to(code_last(last)[:, None],
                                                           flat.shape).ravel())

    def read(self, flat: np.ndarray, me: np.ndarray, fail: Fail,
             strong: bool = False) -> np.ndarray:
        """Checked bytes (M, nbytes) at ``flat`` (``strong``: as :meth:`check_read`)."""
        self.check_read(flat, me, fail, strong=strong)
        return self.data[flat]

    def write(self, flat: np.ndarray, data: np.ndarray, me: np.ndarray, fail: Fail,
              generic: bool = True, consecutive: bool = False, strong: bool = False) -> None:
        """Checked store of ``data`` (M, nbytes) by threads ``me`` (global ids);
        ``consecutive``: each row of ``flat`` is consecutive bytes (:meth:`index`'s);
        ``strong``: a strong store, checked and recorded as an atomic is."""
        busy = self.pending[flat] != 0 if self.in_flight else np.zeros(1, bool)
        if np.any(busy):
            i = int(np.flatnonzero(busy.any(axis=1))[0])
            fail(i, "async copy overwritten before its wait", "store over "
                 f"{self._where(flat[i, 0])} while an async copy to it is in flight")
        self.check_bulk_source(flat, fail, "store")
        rows = word_rows(flat, self.size, consecutive)
        if self.races:
            self._write_races(flat, me, fail, rows, "strong store" if strong else "write")
        if rows is None:
            self.data[flat] = data
            self.init[flat] = True
            self.unfenced[flat] = generic
        else:  # aligned words: one element per row
            put_rows(self.data, rows, data)
            put_rows(self.init, rows, np.ones(flat.shape, bool))
            put_rows(self.unfenced, rows, np.full(flat.shape, generic))
        if generic:
            self.unfenced_ctas[me // self.nthreads] = True

    def atomic(self, flat: np.ndarray, me: np.ndarray, fail: Fail) -> None:
        """Check the atomics (``atom``, ``red``) of threads ``me`` on the bytes ``flat``
        and record them. An atomic races with another thread's plain access that no
        barrier orders (bins cleared by ``st.shared`` and counted by ``atom`` with no
        ``bar.sync`` between, or read before one), never with another atomic: each
        update is indivisible (PTX ISA, "Memory Consistency Model": morally strong)."""
        self.check_read(flat, me, fail, race=False)
        if self.races:
            self._write_races(flat, me, fail, None, "atomic")

    def _write_races(self, flat: np.ndarray, me: np.ndarray, fail: Fail,
                     rows: np.ndarray | None, access: str) -> None:
        """Check the ``access`` (``write``, ``strong store`` or ``atomic``: the last two
        pass strong records) of threads ``me`` to ``flat`` against the race records,
        then record it (``rows`` from :func:`word_rows`)."""
        atomic = ACCESSES[access][1]
        if self.clustered is not None:  # other CTAs' accesses: checked there
            flat, me, fail, rows = self.clustered.own(flat, me, fail, rows, access)
            if not len(me):
                return
        if self.accessed[me // self.nthreads].any():
            rmin, rmax = self.readers()
            # records lie only in dirty blocks: read them for the rows that meet one
            # (a read of the others would map their zero pages)
            hot = self.in_dirty(flat, rows)
            sub = None if hot.all() else np.flatnonzero(hot)
            hf, hme = (flat, me) if sub is None else (flat[sub], me[sub])
            hrows = rows if sub is None or rows is None else rows[sub]
            get = (lambda a: a[hf]) if hrows is None else (lambda a: take_rows(a, hrows, hf))
            hctas, zero = hme // self.nthreads, np.broadcast_to(np.int32(0), hf.shape)
            # records of CTAs that hold no writer (reader) are zero: not read
            w = get(self.writer_code) if self.written[hctas].any() else zero
            lo, hi = (get(rmin), get(rmax)) if self.has_readers[hctas].any() else (zero, zero)
            clash = unordered(w, hme, readers=(lo, hi), atomic=atomic)
            if np.any(clash):
                k = int(np.flatnonzero(clash.any(axis=1))[0])
                i = k if sub is None else int(sub[k])
                j = int(np.flatnonzero(clash[k])[0])
                w, lo, hi = w[k:k + 1], lo[k:k + 1], hi[k:k + 1]
                wrote = bool(unordered(w[:, j:j + 1], hme[k:k + 1], atomic=atomic)[0, 0])
                other = abs(int(w[0, j])) - 1 if wrote else int(lo[0, j] + _BIG)
                if other == int(me[i]):
                    other = int(hi[0, j]) - 1
                fail(i, "shared memory race", race_text(
                    access, self._where(flat[i, j]),
                    self.other(other, int(me[i])), bool(wrote and w[0, j] < 0)))
        self.set_writer(flat, me, rows=rows, atomic=atomic)

    def check_bulk_source(self, flat: np.ndarray, fail: Fail, what: str) -> None:
        """Fault when a write of ``flat`` meets the source of an unretired TMA store."""
        if not self.bulk_reads:
            return
        busy = self.bulk_read[flat] != 0
        if busy.any():
            i = int(np.flatnonzero(busy.any(axis=1))[0])
            j = int(np.flatnonzero(busy[i])[0])
            fail(i, "bulk store source overwritten", f"{what} over {self._where(flat[i, j])}, "
                 "which a TMA store (cp.async.bulk.tensor) still reads: no "
                 "cp.async.bulk.wait_group.read has retired its bulk group")

    def set_writer(self, flat: np.ndarray, who: np.ndarray | None,
                   chunks: np.ndarray | None = None, rows: np.ndarray | None = None,
                   atomic: bool = False, first: np.ndarray | None = None) -> None:
        """Record thread ``who[i]`` as the writer of the bytes ``flat[i]`` (None: no
        writer, bytes any thread may access; ``atomic``: by an atomic, its code
        negated, for threads ``first[i]`` to ``who[i]`` of which it is the last);
        ``chunks`` as in :meth:`land`, ``rows`` from :func:`word_rows`."""
        if who is None:
            self.writer_code[flat] = 0
            return
        self.mark(flat)
        ctas = who // self.nthreads
        self.accessed[ctas] = True
        self.note_who(who if first is None else first, who)
        self.written[ctas] = True
        for arr, value in ((self.writer_code, (-1 if atomic else 1) * code_last(who)[:, None]),
                           (self.wstamp, np.int32(self.clock))):
            if chunks is None and rows is None:
                arr[flat] = value  # broadcast by the assignment itself
                continue
            value = np.broadcast_to(value, flat.shape)
            if chunks is not None:
                put_chunks(arr, chunks, value)
            else:
                put_rows(arr, rows, value)

    def add_pending(self, flat: np.ndarray, delta: int) -> None:
        """Count ``delta`` more async copies in flight to each byte of ``flat``."""
        add_at(self.pending, flat, delta)
        self.in_flight += delta * flat.size

    def land(self, flat: np.ndarray, data: np.ndarray, chunks: np.ndarray | None = None) -> None:
        """Unchecked write (async copies completing): data lands, bytes count as written
        and need no proxy fence (cp.async and TMA data are waited for, not fenced).
        ``chunks``: the chunk number of each row when each row of ``flat`` is one
        aligned 16-byte chunk, bytes in order (stored a chunk at a time)."""
        if self.clustered is not None:
            self.clustered.landed(flat)
        if chunks is None:
            self.data[flat] = data
            self.init[flat] = True
            self.unfenced[flat] = False
            return
        put_chunks(self.data, chunks, data)
        put_chunks(self.init, chunks, np.ones(flat.shape, bool))
        put_chunks(self.unfenced, chunks, np.zeros(flat.shape, bool))

    def sync(self, ctas: np.ndarray) -> None:
        """``bar.sync`` of the CTAs flagged in ``ctas``: a new race epoch starts, and
        every mbarrier initialised before it is visible to all the CTA's threads."""
        if self.size:
            self.init_by.reshape(self.ncta, -1)[ctas] = _NONE
        if not self.races or self.size == 0:
            return
        if self.clustered is not None:
            self.clustered.sync(ctas)
        self.log.drop(ctas)
        # records lie only in dirty blocks: clear those (all bytes when blocks are ragged)
        held = np.flatnonzero(self.dirty_blocks & ctas[:, None])
        for view, flags in ((self.writer_code, self.written), (self.rmin_code, self.has_readers),
                            (self.rmax_code, self.has_readers)):
            if not flags[ctas].any():  # zero in every CTA here: not looked at
                continue
            if self.size % DIRTY_BLOCK == 0:
                # only blocks of this record that hold one: a store of zeros over the
                # others would turn their zero pages into memory of their own
                blocks = view.reshape(-1, DIRTY_BLOCK)
                blocks[held[blocks[held].any(axis=1)]] = 0
            else:
                view.reshape(self.ncta, self.size)[ctas] = 0
        self.dirty_blocks[ctas] = False
        self.accessed[ctas] = False
        self.written[ctas] = False
        self.has_readers[ctas] = False
        self.who_lo[ctas] = _BIG
        self.who_hi[ctas] = _NONE

    def fence(self, ctas: np.ndarray) -> None:
        """``fence.proxy.async`` in the CTAs flagged in ``ctas``."""
        if self.size:
            self.unfenced.reshape(self.ncta, self.size)[ctas] = False
            self.unfenced_ctas[ctas] = False


__all__ = ["CHUNK", "DIRTY_BLOCK", "GLOBAL_BASE", "GLOBAL_STRIDE", "SHARED_BASE", "GlobalMemory",
           "SharedMemory", "add_at", "chunk_rows", "code_first", "code_last", "put_chunks",
           "take_chunks"]
