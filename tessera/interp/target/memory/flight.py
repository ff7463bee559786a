"""Asynchronous copies in flight (``cp.async``, TMA) in the Target IR interpreter: their
issue, which checks what the copy may overwrite, and their landing, with the records
of :class:`~tessera.interp.target.memory.state.SharedMemory` each updates (row slices
or 16-byte chunks where :mod:`.bulk` allows). The instructions that start and wait for
them are in :mod:`.async_copy`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.interp.target.memory import bulk
from tessera.interp.target.memory.async_order import groups_of
from tessera.interp.target.memory.state import put_chunks
from tessera.interp.target.state import Machine


@dataclass(frozen=True, eq=False)
class Copy:
    """Async copies in flight: issuing threads, group (cp.async) or mbarrier id (TMA),
    flat destination bytes (M, nbytes), or None when ``box`` gives them, and the data
    (M, nbytes)."""

    thread: np.ndarray
    tag: np.ndarray
    rows: np.ndarray | None
    data: np.ndarray
    #: (lo, hi) when every row's bytes are each of its CTA's shared bytes lo .. hi - 1
    #: once, in distinct CTAs (a TMA box): its records are updated as row slices
    span: tuple[int, int] | None = None
    #: (M, nbytes / 16) chunk numbers when every 16 bytes of a row are one aligned
    #: 16-byte chunk, bytes in order
    chunks: np.ndarray | None = None
    #: CTA-local bytes lo .. hi - 1 that hold every destination byte, when known
    bounds: tuple[int, int] | None = None
    #: the CTA-local destination bytes of every row (a TMA box) when ``rows`` is None:
    #: the flat indices are built only where a per-byte path needs them
    box: np.ndarray | None = None
    #: the CTA each row lands in, where not the issuing thread's (a multicast TMA load)
    dest: np.ndarray | None = None

    def ctas(self, m: Machine) -> np.ndarray:
        """The CTA of each row."""
        return self.thread // m.nthreads if self.dest is None else self.dest

    def select(self, sel: np.ndarray, tag: np.ndarray | None = None) -> Copy:
        """The rows ``sel`` (a mask or indices), tagged ``tag`` if given."""
        return Copy(self.thread[sel], self.tag[sel] if tag is None else tag,
                    None if self.rows is None else self.rows[sel], self.data[sel],
                    self.span, None if self.chunks is None else self.chunks[sel],
                    self.bounds, self.box, None if self.dest is None else self.dest[sel])

    def flat(self, m: Machine) -> np.ndarray:
        """The flat destination bytes (M, nbytes)."""
        if self.rows is not None:
            return self.rows
        assert self.box is not None
        return self.ctas(m)[:, None] * m.shared.size + self.box[None, :]


def issue(m: Machine, copy: Copy, fail: Any = None) -> None:
    """Start ``copy``: its bytes are in flight until it lands. Overwriting bytes another
    thread has read since the last ``bar.sync`` is a write-after-read race, reported at
    the issue (the copy may land before that reader is done)."""
    sh = m.shared
    if fail is not None and sh.bulk_reads:  # flat bytes only when a TMA store reads some
        sh.check_bulk_source(copy.flat(m), fail, "async copy")
    if copy.span is not None and fail is not None:  # the checks on row slices first
        groups = groups_of(m)
        if not (groups.reading and groups.overlaps(copy.ctas(m), *copy.span)) and \
                bulk.range_clear(sh, copy.ctas(m), copy.thread, *copy.span, None):
            bulk.range_pending(sh, copy.ctas(m), *copy.span, 1)
            return
    flat = copy.flat(m)
    if fail is not None and sh.races and len(flat) and sh.accessed[copy.ctas(m)].any():
        mine = copy.thread[:, None]
        # the logged reads that may meet the rows (each a run of bytes of one CTA)
        lo, hi = copy.bounds if copy.bounds is not None else (
            int((flat % sh.size).min()), int((flat % sh.size).max()) + 1)
        sh.log.resolve(sh.cta_mask(copy.ctas(m)), lo, hi)
        lo = sh.rmin_code[flat] + np.iinfo(np.int32).max  # the ids (int32 max, -1: none)
        hi = sh.rmax_code[flat] - np.int32(1)
        clash = (hi >= 0) & ((lo != mine) | (hi != mine))
        if np.any(clash):
            i = int(np.flatnonzero(clash.any(axis=1))[0])
            j = int(np.flatnonzero(clash[i])[0])
            other = int(lo[i, j]) if int(lo[i, j]) != int(copy.thread[i]) else int(hi[i, j])
            fail(i, "shared memory race", f"async copy over {sh._where(flat[i, j])}, read by "
                 f"{sh.other(other, int(copy.thread[i]))}")
    if fail is not None and len(flat):
        groups = groups_of(m)
        read = groups.busy[flat] != 0 if groups.reading else np.zeros(1, bool)
        if read.any():
            i = int(np.flatnonzero(read.any(axis=1))[0])
            fail(i, "shared memory overwritten while a wgmma reads it", f"async copy over "
                 f"{sh._where(flat[i, int(np.flatnonzero(read[i])[0])])}, an operand of "
                 "a wgmma group that no wgmma.wait_group has retired")
        busy = sh.pending[flat] != 0 if sh.in_flight else np.zeros(1, bool)
        if busy.any():
            i = int(np.flatnonzero(busy.any(axis=1))[0])
            fail(i, "async copy overwritten before its wait", f"async copy over "
                 f"{sh._where(flat[i, int(np.flatnonzero(busy[i])[0])])}, which "
                 "another async copy is still writing")
    sh.add_pending(flat, 1)


def land(m: Machine, copy: Copy, sel: np.ndarray, owned: bool) -> Copy | None:
    """Complete the rows ``sel`` of ``copy``; return what is still in flight. ``owned``
    bytes count as the issuing thread's writes for race checking (cp.async); TMA bytes
    are ordered by their mbarrier instead."""
    if copy.span is not None and not owned:
        ctas = copy.ctas(m)[sel]
        bulk.range_pending(m.shared, ctas, *copy.span, -1)
        if copy.chunks is None:
            m.shared.data[copy.flat(m)[sel]] = copy.data[sel]
        else:
            put_chunks(m.shared.data, copy.chunks[sel], copy.data[sel])
        bulk.range_land(m.shared, ctas, *copy.span)
    else:
        flat = copy.flat(m)[sel]
        chunks = None if copy.chunks is None else copy.chunks[sel]
        m.shared.add_pending(flat, -1)
        m.shared.land(flat, copy.data[sel], chunks)
        if m.shared.races:
            m.shared.set_writer(flat, copy.thread[sel] if owned else None, chunks)
    keep = ~sel
    return copy.select(keep) if keep.any() else None


def wait_group(pending: list[Any], committed: np.ndarray, mask: np.ndarray, n: int,
               group: Callable[[Any], np.ndarray],
               retire: Callable[[Any, np.ndarray], Any]) -> list[Any]:
    """A ``wait_group n`` by the threads in ``mask``: retire the rows of each record in
    ``pending`` (issuing threads ``.thread``, groups ``group(record)``) whose group lies
    below its thread's ``committed`` count minus ``n`` (``retire(record, rows)`` returns
    what is left, or None); returns the records still pending."""
    limit = np.where(mask, committed - n, -1)
    still = []
    for rec in pending:
        done = group(rec) < limit[rec.thread]
        rest = retire(rec, done) if done.any() else rec
        if rest is not None:
            still.append(rest)
    return still


def bind(m: Machine, act: np.ndarray, ids: np.ndarray) -> None:
    """``cp.async.mbarrier.arrive`` by the threads ``act`` on the mbarriers ``ids``:
    their ``cp.async`` copies in flight leave their groups and land at the next wait on
    that barrier (:func:`land_bound`)."""
    barrier = np.full(m.n, -1, np.int64)
    barrier[act] = ids
    still = []
    for copy in m.copies:
        mine = barrier[copy.thread] >= 0
        if mine.any():
            m.bound.append(copy.select(mine, barrier[copy.thread[mine]]))
        if not mine.all():
            still.append(copy.select(~mine))
    m.copies = still


def land_bound(m: Machine, ids: np.ndarray) -> None:
    """Land the copies bound to the mbarriers ``ids``: a wait on one of them is
    ordered after them, as the barrier's phase is; their bytes have no writer for the
    race check (the barrier orders them), as a TMA load's."""
    if not m.bound:
        return
    still = []
    for copy in m.bound:
        done = np.isin(copy.tag, ids)
        rest = land(m, copy, done, False) if done.any() else copy
        if rest is not None:
            still.append(rest)
    m.bound = still


__all__ = ["Copy", "bind", "issue", "land", "land_bound", "wait_group"]
