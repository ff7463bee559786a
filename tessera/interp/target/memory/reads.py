"""Reader records kept as rectangles: whole 16-byte chunks read by a range of threads.

A ``wgmma`` operand is the same set of aligned 16-byte chunks in each CTA, read by a
whole warpgroup. Writing its readers into the per-byte records of
:class:`~tessera.interp.target.memory.state.SharedMemory` (the lowest and highest
reading thread of every byte) costs a gather and a scatter of every byte read, and in
a pipelined kernel those records are mostly cleared again unread: the consumers
arrive on the stage's ``empty`` mbarrier, and the producer's wait starts a new race
epoch for exactly the bytes they read (:func:`.async_order.acquire`).

A :class:`ReadLog` therefore keeps such a read as one *entry*: its CTAs (distinct),
its CTA-local chunks, the dirty blocks they lie in, and per CTA the first and last
reading thread. The per-byte records stay the definition: an entry is *resolved*
(written into them, exactly as :meth:`SharedMemory.note_readers` would have at the
read) before anything looks at the readers of its bytes. Taking the minimum and the
maximum commutes, so resolving later gives the same records; what does not commute,
clearing records, resolves or drops the rows it affects first:

* ``bar.sync`` clears every record of its CTAs: their rows are dropped;
* an mbarrier wait (:func:`.async_order.acquire`) clears the bytes of a CTA that only
  the arriving threads accessed before they arrived. A row whose readers all arrived
  after its read (its ``at``), in a CTA whose arrivals are one range of threads,
  whose blocks hold no per-byte record, would be cleared with its bytes: it is
  dropped unresolved. A row read after every arrival (the next stage's operand, read
  after releasing this one) keeps its readers whichever records hold them: it stays
  logged. Every other row is resolved first and the per-byte rule decides;
* every other access of the records resolves the rows it may overlap (or all).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, TypeVar

import numpy as np

from tessera.interp.target.memory.state import (
    CHUNK,
    DIRTY_BLOCK,
    code_first,
    code_last,
    put_chunks,
    take_chunks,
)

_E = TypeVar("_E", bound="_Rows")


class _Rows:
    """Row selection of an entry: ``ROWS`` names its per-row arrays."""

    ROWS: ClassVar[tuple[str, ...]]

    def rows(self: _E, keep: np.ndarray) -> _E | None:
        """The entry of the rows flagged in ``keep`` (None when none is)."""
        if keep.all():
            return self
        if not keep.any():
            return None
        return replace(self, **{f: getattr(self, f)[keep] for f in self.ROWS})


@dataclass
class Entry(_Rows):
    """One logged read: rows ``ctas`` (distinct CTAs) read the CTA-local 16-byte
    ``chunks`` (in the CTA-local dirty ``blocks``), threads ``first[i]`` to
    ``last[i]`` (global ids) in row ``i``; ``lo``/``hi`` bound the chunks' bytes."""

    ctas: np.ndarray
    chunks: np.ndarray
    blocks: np.ndarray
    first: np.ndarray
    last: np.ndarray
    lo: int
    hi: int
    at: int  # the shared memory's clock at the read

    ROWS: ClassVar[tuple[str, ...]] = ("ctas", "first", "last")

    def clean(self, sh: Any) -> np.ndarray:
        """Per row: whether no block it reads is dirty (holds no per-byte record)."""
        return ~sh.dirty_blocks[self.ctas[:, None], self.blocks[None, :]].any(axis=1)

    def write(self, sh: Any) -> None:
        """Resolve the entry: :meth:`SharedMemory.note_readers` of its rows."""
        index = self.ctas[:, None] * (sh.size // CHUNK) + self.chunks[None, :]
        sh.dirty_blocks[self.ctas[:, None], self.blocks[None, :]] = True
        sh.has_readers[self.ctas] = True
        for arr, who, pick in ((sh.rmin_code, code_first(self.first), np.minimum),
                               (sh.rmax_code, code_last(self.last), np.maximum)):
            put_chunks(arr, index, pick(take_chunks(arr, index), who[:, None, None]))
        put_chunks(sh.rstamp, index, np.maximum(take_chunks(sh.rstamp, index), np.int32(self.at)))


@dataclass
class RowEntry(_Rows):
    """Logged reads of one 16-byte chunk per row (``ldmatrix`` rows, 16-byte loads):
    row ``i`` is flat chunk ``index[i]`` of CTA ``ctas[i]`` (several rows may share
    a CTA or a chunk), read by threads ``first[i]`` to ``last[i]``; ``lo``/``hi``
    bound the CTA-local bytes of every row."""

    ctas: np.ndarray
    index: np.ndarray
    first: np.ndarray
    last: np.ndarray
    lo: int
    hi: int
    at: int  # the shared memory's clock at the read

    ROWS: ClassVar[tuple[str, ...]] = ("ctas", "index", "first", "last")

    def clean(self, sh: Any) -> np.ndarray:
        """Per row: whether the block of its chunk is clean."""
        return ~sh.dirty_blocks[self.ctas, self.index % (sh.size // CHUNK) * CHUNK
                                // DIRTY_BLOCK]

    def write(self, sh: Any) -> None:
        """Resolve the entry: :meth:`SharedMemory.note_readers` of its rows."""
        flat = self.index[:, None] * CHUNK + np.arange(CHUNK)
        sh.note_readers(flat, self.first, self.last, rows=self.index, at=self.at)


class ReadLog:
    """The unresolved chunk reads of one :class:`SharedMemory` (``sh``); it writes the
    raw arrays ``sh.rmin_code``, ``sh.rmax_code`` and ``sh.dirty_blocks``."""

    def __init__(self, sh: Any) -> None:
        self.sh = sh
        self.entries: list[Entry | RowEntry] = []

    def __bool__(self) -> bool:
        return bool(self.entries)

    def add(self, ctas: np.ndarray, chunks: np.ndarray, blocks: np.ndarray,
            first: np.ndarray, last: np.ndarray) -> None:
        """Log that threads ``first[i]`` to ``last[i]`` read the CTA-local ``chunks``
        (sorted, distinct) of CTA ``ctas[i]`` (distinct); the summaries of the CTAs
        (accessed, thread bounds) are updated now."""
        self.sh.accessed[ctas] = True
        self.sh.note_who(first, last)
        self.entries.append(Entry(ctas, chunks, blocks, first.astype(np.int32),
                                  last.astype(np.int32), int(chunks[0]) * CHUNK,
                                  (int(chunks[-1]) + 1) * CHUNK, self.sh.clock))

    def add_rows(self, index: np.ndarray, first: np.ndarray, last: np.ndarray) -> None:
        """Log that threads ``first[i]`` to ``last[i]`` read flat 16-byte chunk
        ``index[i]`` (the CTAs' shared memories are whole chunks)."""
        per = self.sh.size // CHUNK
        ctas = first // self.sh.nthreads
        self.sh.accessed[ctas] = True
        self.sh.note_who(first, last)
        local = index - ctas * per
        self.entries.append(RowEntry(ctas, index, first.astype(np.int32), last.astype(np.int32),
                                     int(local.min()) * CHUNK, (int(local.max()) + 1) * CHUNK,
                                     self.sh.clock))

    def resolve(self, ctas: np.ndarray | None = None, lo: int = 0, hi: int | None = None) -> None:
        """Resolve every row in the CTAs flagged in ``ctas`` (a mask over the CTAs;
        None: all) whose chunks may meet CTA-local bytes ``lo .. hi - 1``."""
        if not self.entries:
            return
        keep: list[Entry | RowEntry] = []
        for e in self.entries:
            if e.hi <= lo or (hi is not None and e.lo >= hi):
                keep.append(e)
                continue
            hit = np.ones(len(e.ctas), bool) if ctas is None else ctas[e.ctas]
            done = e.rows(hit)
            if done is not None:
                done.write(self.sh)
            rest = e.rows(~hit)
            if rest is not None:
                keep.append(rest)
        self.entries = keep

    def drop(self, ctas: np.ndarray) -> None:
        """Forget the rows of the CTAs flagged in ``ctas`` (a ``bar.sync`` clears them)."""
        self.entries = [r for e in self.entries
                        if (r := e.rows(~ctas[e.ctas])) is not None]

    def release(self, ctas: np.ndarray, first: np.ndarray, last: np.ndarray,
                times: np.ndarray | None = None) -> None:
        """Before the new race epoch of CTAs ``ctas`` whose arrived threads are
        ``first[i] .. last[i]`` (global ids; a CTA whose arrivals are not one range
        has ``first > last``): drop the rows that epoch would clear with their bytes,
        resolve the other rows of those CTAs but those read after every arrival (kept
        logged: no record of theirs is cleared). ``times`` (C, nthreads): when each
        thread arrived (an mbarrier phase), which a read must precede to be cleared."""
        if not self.entries:
            return
        sh = self.sh
        where = np.full(sh.ncta, -1, np.int64)
        where[ctas] = np.arange(len(ctas))
        inside: list[tuple[Entry | RowEntry, np.ndarray]] = []
        keep: list[Entry | RowEntry] = []
        latest = None if times is None else times.max(axis=1)  # each CTA's last arrival
        for e in self.entries:
            k = where[e.ctas]
            mine = k >= 0
            if not mine.any():
                keep.append(e)
                continue
            ok = mine & (e.first >= first[k]) & (e.last <= last[k])
            late = np.zeros_like(mine)
            if times is not None and latest is not None:  # the per-byte rule of .async_order
                late = mine & (e.at > latest[k])  # after every arrival
                if (ok & ~late).any():
                    local = np.clip(np.stack([e.first, e.last]) - e.ctas * sh.nthreads, 0,
                                    sh.nthreads - 1)
                    ok &= e.at <= times[k, local].max(axis=0)
                ok &= ~late
            out = e.rows(mine & ~ok & ~late)
            if out is not None:
                out.write(sh)
            rest = e.rows(~mine | late)  # others' rows, and reads no arrival precedes
            if rest is not None:
                keep.append(rest)
            if ok.any():
                inside.append((e, ok))
        # rows inside the arrivals: dropped where no per-byte record shares their blocks
        # (looked at before any of them is written: together they stay inside)
        clean = [e.clean(sh) for e, _ in inside]
        for (e, ok), c in zip(inside, clean):
            dirty = e.rows(ok & ~c)
            if dirty is not None:
                dirty.write(sh)
        self.entries = keep


__all__ = ["Entry", "ReadLog", "RowEntry"]
