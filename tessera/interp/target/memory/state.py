"""Simulated global and shared memory of the Target IR interpreter.

Global memory: each array argument lives at a fake, 256-byte aligned address
(``GLOBAL_BASE + k * GLOBAL_STRIDE``); an address resolves to (buffer, byte offset) with
one ``np.searchsorted`` for all threads. Accesses must lie inside one buffer and be
aligned to their size (PTX ISA sec. 5.4.3 "Alignment": naturally aligned accesses).

Shared memory: one byte array per CTA, laid out from shared address 0 (buffers at their
alignment, so swizzles on absolute addresses see the declared alignment), filled with
0xFF poison. Per byte it tracks whether it was written (a read of a never-written byte
is an error), how many async copies are still in flight to it (reading such a byte is
an error), and, between two ``bar.sync`` of its CTA, which thread wrote it and which
threads read it (a read of another thread's write, or a write over another thread's
access, with no barrier between, is a race, as compute-sanitizer's racecheck reports).
Two threads of one instruction writing the same byte are not reported. Blocks of
``DIRTY_BLOCK`` bytes that may hold a writer or a reader are flagged in ``dirty``, so
that an mbarrier's new race epoch (:func:`.async_order.acquire`) looks at those only,
and per CTA the bounds of the thread ids recorded, so that it skips CTAs none of whose
accessors arrived. Rows that are whole aligned 16-byte chunks (``ldmatrix`` rows,
16-byte ``cp.async``) read and write the records a chunk at a time
(:func:`take_chunks`, :func:`put_chunks`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

GLOBAL_BASE = 0x10000000
GLOBAL_STRIDE = 0x10000000
Fail = Callable[[int, str, str], None]
_NONE = np.int32(-1)
_BIG = np.int32(np.iinfo(np.int32).max)
#: bytes per flag of :attr:`SharedMemory.dirty`
DIRTY_BLOCK = 64
#: bytes per chunk of the chunked gathers and scatters of the per-byte records
CHUNK = 16


def take_chunks(a: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The 16-byte chunks ``index`` (any shape) of the per-byte record ``a``: shape
    ``index.shape + (CHUNK,)`` (one row copy per chunk, several times faster than an
    index per byte)."""
    return np.take(a.reshape(-1, CHUNK), index, axis=0)


def put_chunks(a: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
    """Store ``values`` (``index.shape + (CHUNK,)``) into the chunks ``index`` of ``a``
    through a view with one void element per chunk (NumPy's row assignment is several
    times slower)."""
    whole = np.dtype((np.void, CHUNK * a.itemsize))
    a.view(whole)[index.ravel()] = np.ascontiguousarray(values, a.dtype).view(whole).ravel()


def chunk_rows(flat: np.ndarray) -> np.ndarray | None:
    """The chunk numbers of ``flat`` when each of its rows is one aligned 16-byte chunk,
    bytes in order (an ``ldmatrix`` row, a 16-byte copy), else None."""
    if flat.ndim != 2 or flat.shape[1] != CHUNK or not flat.size:
        return None
    first = flat[:, 0]
    if (first % CHUNK).any() or not (flat - first[:, None] == np.arange(CHUNK)).all():
        return None
    return first // CHUNK


def add_at(target: np.ndarray, index: np.ndarray, delta: int | np.ndarray) -> None:
    """``target[index] += delta`` with repeated indices counted (``np.add.at``), called
    the way NumPy runs fast: a flat index and a value of the target's type."""
    value = np.asarray(delta, target.dtype)
    np.add.at(target, np.ravel(index), value if value.ndim == 0 else np.ravel(value))


def _check_aligned(a: np.ndarray, step: int, fail: Fail, access: Callable[[int], str]) -> None:
    """Fault the first address of ``a`` that is not a multiple of ``step`` bytes;
    ``access`` describes the access at an address."""
    mis = a % step != 0
    if np.any(mis):
        i = int(np.flatnonzero(mis)[0])
        fail(i, "misaligned address", f"{access(int(a[i]))} is not {step}-byte aligned")


class GlobalMemory:
    """Byte views of the launch's arrays at fake global addresses."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.bytes: list[np.ndarray] = []
        self.names: list[str] = []

    def add(self, array: np.ndarray, name: str) -> int:
        """Place a C-contiguous array in memory; return its address."""
        if array.nbytes >= GLOBAL_STRIDE:
            raise ValueError(f"{name} is too large for the simulated address space")
        base = GLOBAL_BASE + GLOBAL_STRIDE * len(self.bases)
        self.bases.append(base)
        self.bytes.append(array.reshape(-1).view(np.uint8))
        self.names.append(name)
        return base

    def resolve(self, addr: np.ndarray, nbytes: int, fail: Fail, what: str = "access",
                align: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(buffer index, byte offset) of each address; faults outside or misaligned
        (to ``align`` bytes, by default the access size)."""
        a = addr.astype(np.int64)
        if not self.bases:
            fail(0, "out of bounds", f"global {what} at address {int(a[0]):#x}: the launch "
                 "has no global buffers")
        bases = np.asarray(self.bases, np.int64)
        sizes = np.asarray([b.size for b in self.bytes], np.int64)
        k = np.searchsorted(bases, a, side="right") - 1
        safe = np.maximum(k, 0)
        off = a - bases[safe]
        bad = (k < 0) | (off + nbytes > sizes[safe])
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            where = (f"{int(off[i]) + nbytes - int(sizes[safe[i]])} bytes past the end of "
                     f"{self.names[safe[i]]} ({int(sizes[safe[i]])} bytes)"
                     if k[i] >= 0 else "below every buffer")
            fail(i, "out of bounds", f"global {what} of {nbytes} bytes at address "
                 f"{int(a[i]):#x}, {where}")
        _check_aligned(a, align or nbytes, fail,
                       lambda x: f"global {what} of {nbytes} bytes at address {x:#x}")
        return k, off

    def read(self, addr: np.ndarray, nbytes: int, fail: Fail,
             align: int | None = None) -> np.ndarray:
        """The bytes (M, nbytes) at each address."""
        k, off = self.resolve(addr, nbytes, fail, "read", align)
        out = np.empty((addr.size, nbytes), np.uint8)
        span = np.arange(nbytes, dtype=np.int64)
        for b in np.unique(k):
            sel = k == b
            out[sel] = self.bytes[b][off[sel, None] + span]
        return out

    def write(self, addr: np.ndarray, data: np.ndarray, fail: Fail) -> None:
        """Store bytes ``data`` (M, nbytes); a later thread wins on overlap."""
        nbytes = data.shape[1]
        k, off = self.resolve(addr, nbytes, fail, "write")
        span = np.arange(nbytes, dtype=np.int64)
        for b in np.unique(k):
            sel = k == b
            self.bytes[b][off[sel, None] + span] = data[sel]


class SharedMemory:
    """Per-CTA shared memory bytes with initialisation, async and race tracking."""

    def __init__(self, ncta: int, nthreads: int, size: int, races: bool) -> None:
        self.ncta = ncta
        self.nthreads = nthreads
        self.size = size
        n = ncta * size
        self.data = np.full(n, 0xFF, np.uint8)
        self.init = np.zeros(n, bool)
        self.pending = np.zeros(n, np.int16)  # copies in flight per byte: a few at most
        self.in_flight = 0  # the sum of ``pending``: no byte need be looked at when 0
        self.unfenced = np.zeros(n, bool)  # written by st.shared, no proxy fence since
        # TMA stores that may still read a byte (memory.bulk_store), and their sum
        self.bulk_read = np.zeros(n, np.int16)
        self.bulk_reads = 0
        # bytes of an mbarrier initialised by one thread (its global id) and not yet
        # ordered before other threads' accesses by a bar.sync (-1: visible to all)
        self.init_by = np.full(n, _NONE, np.int32)
        self.races = races
        if races:
            self.writer = np.full(n, _NONE, np.int32)
            self.rmin = np.full(n, _BIG, np.int32)
            self.rmax = np.full(n, _NONE, np.int32)
            # per CTA and DIRTY_BLOCK bytes: may a byte hold a writer or a reader
            self.dirty = np.zeros((ncta, -(-size // DIRTY_BLOCK)), bool)
            # per CTA: may any byte hold a writer or a reader / a writer (supersets)
            self.accessed = np.zeros(ncta, bool)
            self.written = np.zeros(ncta, bool)
            # per CTA: bounds of the thread ids (global) recorded as a reader or writer
            # since its bar.sync (a superset: epochs that clear part keep them)
            self.scratch: tuple[np.ndarray, np.ndarray] | None = None
            self.who_lo = np.full(ncta, _BIG, np.int32)
            self.who_hi = np.full(ncta, _NONE, np.int32)

    def index(self, cta: np.ndarray, addr: np.ndarray, nbytes: int, fail: Fail,
              align: int | None = None) -> np.ndarray:
        """Flat byte indices (M, nbytes) of shared accesses; faults outside or misaligned."""
        a = addr.astype(np.int64)
        bad = (a < 0) | (a + nbytes > self.size)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            fail(i, "out of bounds", f"shared access of {nbytes} bytes at shared address "
                 f"{int(a[i])}; the CTA has {self.size} bytes of shared memory")
        _check_aligned(a, align or nbytes, fail,
                       lambda x: f"shared access of {nbytes} bytes at shared address {x}")
        return (cta * self.size + a)[:, None] + np.arange(nbytes, dtype=np.int64)

    def check_read(self, flat: np.ndarray, me: np.ndarray, fail: Fail,
                   race: bool = True, chunks: np.ndarray | None = None) -> None:
        """Fault on poison, in-flight async bytes and races; record the readers.
        ``chunks``: the chunk number of each row when the caller knows that each row
        is one aligned 16-byte chunk, bytes in order (else found here)."""
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
                fail(i, what, self._where(flat[i, j]))
        if self.races and race and self.written[me // self.nthreads].any():
            w = get(self.writer)
            clash = (w >= 0) & (w != me[:, None])
            if np.any(clash):
                i = int(np.flatnonzero(clash.any(axis=1))[0])
                j = int(np.flatnonzero(clash[i])[0])
                fail(i, "shared memory race", f"read of {self._where(flat[i, j])} written "
                     f"by thread {int(w[i, j]) % self.nthreads} without a "
                     "bar.sync between")
        if self.races and race:
            self.note_readers(flat, me, me, rows=rows)

    def note_readers(self, flat: np.ndarray, first: np.ndarray, last: np.ndarray,
                     mark: bool = True, rows: np.ndarray | None = None) -> None:
        """Record that threads ``first[i]`` to ``last[i]`` read the bytes ``flat[i]``
        (``mark`` False: the caller flags the dirty blocks; ``rows``: the chunk numbers
        when :func:`chunk_rows` found them)."""
        idx = flat.ravel()
        self.accessed[first // self.nthreads] = True
        self.note_who(first, last)
        if mark:
            self.mark(flat)
        if rows is not None:  # a row's bytes share their readers: reduce per chunk
            if self.scratch is None:  # per chunk, BIG and -1 between calls
                self.scratch = (np.full(self.data.size // CHUNK, _BIG, np.int32),
                                np.full(self.data.size // CHUNK, _NONE, np.int32))
            for arr, who, pick, per, fill in (
                    (self.rmin, first, np.minimum, self.scratch[0], _BIG),
                    (self.rmax, last, np.maximum, self.scratch[1], _NONE)):
                pick.at(per, rows, np.asarray(who, np.int32))
                # rows of one chunk store the same values: the order of the writes is moot
                put_chunks(arr, rows, pick(take_chunks(arr, rows), per[rows][:, None]))
                per[rows] = fill
            return
        np.minimum.at(self.rmin, idx, np.broadcast_to(first.astype(np.int32)[:, None],
                                                      flat.shape).ravel())
        np.maximum.at(self.rmax, idx, np.broadcast_to(last.astype(np.int32)[:, None],
                                                      flat.shape).ravel())

    def read(self, flat: np.ndarray, me: np.ndarray, fail: Fail) -> np.ndarray:
        """Checked bytes (M, nbytes) at ``flat``."""
        self.check_read(flat, me, fail)
        return self.data[flat]

    def write(self, flat: np.ndarray, data: np.ndarray, me: np.ndarray, fail: Fail,
              generic: bool = True) -> None:
        """Checked store of ``data`` (M, nbytes) by threads ``me`` (global ids)."""
        busy = self.pending[flat] != 0 if self.in_flight else np.zeros(1, bool)
        if np.any(busy):
            i = int(np.flatnonzero(busy.any(axis=1))[0])
            fail(i, "async copy overwritten before its wait", "store over "
                 f"{self._where(flat[i, 0])} while an async copy to it is in flight")
        self.check_bulk_source(flat, fail, "store")
        if self.races and self.accessed[me // self.nthreads].any():
            mine = me[:, None]
            w = self.writer[flat]
            clash = ((w >= 0) & (w != mine)) | \
                ((self.rmax[flat] >= 0) & ((self.rmin[flat] != mine) | (self.rmax[flat] != mine)))
            if np.any(clash):
                i = int(np.flatnonzero(clash.any(axis=1))[0])
                j = int(np.flatnonzero(clash[i])[0])
                other = int(w[i, j]) if w[i, j] >= 0 else int(self.rmin[flat[i, j]])
                if other == int(me[i]):
                    other = int(self.rmax[flat[i, j]])
                fail(i, "shared memory race", f"write of {self._where(flat[i, j])} also "
                     f"accessed by thread {other % self.nthreads} without a "
                     "bar.sync between")
        if self.races:
            self.set_writer(flat, me)
        self.land(flat, data)
        if generic:
            self.unfenced[flat] = True

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

    def mark(self, flat: np.ndarray) -> None:
        """Flag the blocks of the flat byte indices ``flat`` as dirty. Rows of at most
        ``DIRTY_BLOCK`` consecutive bytes (every checked access) lie in at most two
        blocks: their first and last bytes find both."""
        if flat.ndim == 2 and flat.shape[1] <= DIRTY_BLOCK and \
                (flat[:, -1] - flat[:, 0] == flat.shape[1] - 1).all():
            flat = np.concatenate([flat[:, 0], flat[:, -1]])
        idx = flat.ravel()
        if self.size % DIRTY_BLOCK == 0:
            self.dirty.reshape(-1)[idx // DIRTY_BLOCK] = True
        else:
            self.dirty[idx // self.size, idx % self.size // DIRTY_BLOCK] = True

    def note_who(self, first: np.ndarray, last: np.ndarray) -> None:
        """Widen the bounds :attr:`who_lo` / :attr:`who_hi` of the CTAs of threads
        ``first`` (global ids) to take in ``first[i] .. last[i]``."""
        cta = first // self.nthreads
        np.minimum.at(self.who_lo, cta, first.astype(np.int32))
        np.maximum.at(self.who_hi, cta, np.asarray(last).astype(np.int32))

    def set_writer(self, flat: np.ndarray, who: np.ndarray | None,
                   chunks: np.ndarray | None = None) -> None:
        """Record thread ``who[i]`` as the writer of the bytes ``flat[i]`` (None: no
        writer, bytes any thread may access); ``chunks`` as in :meth:`land`."""
        if who is None:
            self.writer[flat] = _NONE
            return
        self.mark(flat)
        self.accessed[who // self.nthreads] = True
        self.note_who(who, who)
        self.written[who // self.nthreads] = True
        value = np.broadcast_to(who.astype(np.int32)[:, None], flat.shape)
        if chunks is None:
            self.writer[flat] = value
        else:
            put_chunks(self.writer, chunks, value)

    def add_pending(self, flat: np.ndarray, delta: int) -> None:
        """Count ``delta`` more async copies in flight to each byte of ``flat``."""
        add_at(self.pending, flat, delta)
        self.in_flight += delta * flat.size

    def land(self, flat: np.ndarray, data: np.ndarray, chunks: np.ndarray | None = None) -> None:
        """Unchecked write (async copies completing): data lands, bytes count as written
        and need no proxy fence (cp.async and TMA data are waited for, not fenced).
        ``chunks``: the chunk number of each row when each row of ``flat`` is one
        aligned 16-byte chunk, bytes in order (stored a chunk at a time)."""
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
            self.init_by.reshape(self.ncta, self.size)[ctas] = _NONE
        if not self.races or self.size == 0:
            return
        for view, fill in ((self.writer, _NONE), (self.rmin, _BIG), (self.rmax, _NONE)):
            view.reshape(self.ncta, self.size)[ctas] = fill
        self.dirty[ctas] = False
        self.accessed[ctas] = False
        self.written[ctas] = False
        self.who_lo[ctas] = _BIG
        self.who_hi[ctas] = _NONE

    def fence(self, ctas: np.ndarray) -> None:
        """``fence.proxy.async`` in the CTAs flagged in ``ctas``."""
        if self.size:
            self.unfenced.reshape(self.ncta, self.size)[ctas] = False

    def _where(self, flat: np.integer | int) -> str:
        return f"shared byte {int(flat) % self.size}"


__all__ = ["CHUNK", "DIRTY_BLOCK", "GLOBAL_BASE", "GLOBAL_STRIDE", "GlobalMemory", "SharedMemory",
           "add_at", "chunk_rows", "put_chunks", "take_chunks"]
