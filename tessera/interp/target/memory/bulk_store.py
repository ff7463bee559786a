"""TMA stores (shared -> global ``cp.async.bulk.tensor``) and their bulk groups in the
Target IR interpreter.

A store (PTX ISA 8.x sec. 9.7.9.27) joins its thread's open *bulk async-group*;
``cp.async.bulk.commit_group`` closes the group and ``cp.async.bulk.wait_group.read n``
waits until at most ``n`` of the thread's committed groups may still read their source
(sec. 9.7.9.27.2). The interpreter writes the box to global memory when the store is
issued, but on hardware the copy reads the shared source at any moment until that wait,
so until then the source bytes are counted in ``SharedMemory.bulk_read`` and

* any write to them (``st.shared``, ``stmatrix``, an async copy) is reported at the
  writing instruction (``bulk store source overwritten``, naming the store),
* a CTA that exits with such a store unretired is reported at the store
  (``bulk store not waited``): its shared memory may be reused by another CTA while
  the copy still reads it.

The source is read through the async proxy: bytes written by the generic proxy with
no ``fence.proxy.async`` since are reported (``missing proxy fence``, sec. 9.7.13.4),
and the read is checked like any shared read (poison, copies in flight, and races:
another thread's writes must be ordered before it by a ``bar.sync``, e.g. the named
barrier of the threads that wrote the staging tile).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.arch.errors import ArchError
from tessera.arch.tma import TensorMap, tma_box_store
from tessera.interp.target.memory import bulk
from tessera.interp.target.memory.async_copy import box_rows, box_where
from tessera.interp.target.memory.codes import unordered
from tessera.interp.target.memory.flight import wait_group
from tessera.interp.target.memory.state import (
    CHUNK,
    DIRTY_BLOCK,
    Fail,
    SharedMemory,
    add_at,
)
from tessera.interp.target.state import (
    Machine,
    Step,
    TargetCompiler,
    TargetFault,
    TargetFrame,
    step_rule,
)
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async


@dataclass(frozen=True, eq=False)
class BulkRead:
    """Stores whose reads of shared memory are not yet retired: issuing threads (global
    ids), the bulk group of each (the thread's commit count at issue), the flat source
    bytes (M, nbytes) and the store instruction."""

    thread: np.ndarray
    group: np.ndarray
    flat: np.ndarray | None  # None for a box read (``span`` gives its bytes)
    instr: Instr
    #: (lo, hi) when every row's bytes are each of its CTA's bytes lo .. hi - 1 once, in
    #: distinct CTAs (a box): the counts change a row slice at a time
    span: tuple[int, int] | None = None


class BulkGroups:
    """Per launch: committed bulk groups per thread and the stores still reading."""

    def __init__(self, n: int) -> None:
        self.committed = np.zeros(n, np.int64)
        self.reading: list[BulkRead] = []


def groups(m: Machine) -> BulkGroups:
    """The machine's record (created on first use)."""
    rec: BulkGroups | None = getattr(m, "bulk_groups", None)
    if rec is None:
        rec = BulkGroups(m.n)
        m.bulk_groups = rec  # type: ignore[attr-defined]
    return rec


def _retire(m: Machine, rec: BulkRead, sel: np.ndarray) -> BulkRead | None:
    """The rows ``sel`` of ``rec`` no longer read; returns what still reads."""
    sh = m.shared
    gone = None if rec.flat is None else rec.flat[sel]
    _count(sh, gone, rec.thread[sel] // m.nthreads, -1, rec.span)
    if gone is not None:
        sh.bulk_reads -= gone.size
    elif rec.span is not None:
        sh.bulk_reads -= int(sel.sum()) * (rec.span[1] - rec.span[0])
    keep = ~sel
    if not keep.any():
        return None
    return BulkRead(rec.thread[keep], rec.group[keep],
                    None if rec.flat is None else rec.flat[keep], rec.instr, rec.span)


def _count(sh: SharedMemory, flat: np.ndarray | None, ctas: np.ndarray, delta: int,
           span: tuple[int, int] | None) -> None:
    """``delta`` more readers at each byte of ``flat`` (rows: ``ctas``), a row slice of
    ``span`` per CTA when it is given (then ``flat`` may be None)."""
    if span is None:
        assert flat is not None
        add_at(sh.bulk_read, flat, delta)
        return
    lo, hi = span
    sh.bulk_read.reshape(sh.ncta, sh.size)[bulk.rows(ctas), lo:hi] += np.int16(delta)


@step_rule(target_async.TmaStore)
def _tma_store(c: TargetCompiler, instr: Instr) -> Step:
    src, tm, c0, c1 = (c.slot(v) for v in instr.operands)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        value = fr.regs[tm]
        t = value.tmap
        sh = m.shared
        addr = fr.regs[src][act].astype(np.int64)
        coords = np.stack([fr.regs[c0][act], fr.regs[c1][act]], axis=1).astype(np.int64)
        fail = m.failer(instr, act)
        rec = groups(m)
        for a in np.unique(addr):
            rows = np.flatnonzero(addr == a)
            where = box_where(t, int(a), sh, "TMA store source",
                              lambda w, msg, rows=rows: fail(int(rows[0]), w, msg))
            me = act[rows]
            ctas = m.cta[me]
            box = bulk.covered_range(where) if bulk.distinct(ctas) else None
            flat = None
            if box is None or not box_read(sh, ctas, me, box):
                flat = ctas[:, None] * sh.size + where[None, :]
                if sh.unfenced_ctas[ctas].any() and sh.unfenced[flat].any():
                    # the async proxy may not see a generic write
                    fail(int(rows[0]), "missing proxy fence", "the TMA store reads shared "
                         "memory written by st.shared or stmatrix with no fence.proxy.async "
                         "since")
                _check_read(sh, flat, where, me,
                            lambda i, w, msg, rows=rows: fail(int(rows[i]), w, msg))
            try:  # the box's bytes in box order: byte i is read from where[i]
                _store(t, value.buffer, coords[rows],
                       sh.data[flat] if flat is not None else _box_bytes(sh, ctas, where))
            except ArchError as err:
                raise m.fault(instr, "tma", err.message, int(me[0])) from None
            _count(sh, flat, ctas, 1, box)
            sh.bulk_reads += len(me) * where.size
            rec.reading.append(BulkRead(me, rec.committed[me].copy(), flat, instr, box))
    return step


def box_read(sh: SharedMemory, ctas: np.ndarray, me: np.ndarray, box: tuple[int, int]) -> bool:
    """The checks and records of a TMA store's source read by threads ``me`` of the
    distinct ``ctas``, each over every byte of its CTA's ``box`` ``(lo, hi)``, on row
    slices: True when nothing is wrong (the reads logged as one rectangle of chunks);
    False, with nothing recorded, when a check might fail: the per-byte path then
    reports the same first fault. No flat index of every byte is made."""
    lo, hi = box
    if sh.size % CHUNK or lo % CHUNK or hi % CHUNK:
        return False
    r = bulk.rows(ctas)

    def part(a: np.ndarray) -> np.ndarray:
        return a.reshape(sh.ncta, sh.size)[r, lo:hi]
    if sh.unfenced_ctas[ctas].any() and part(sh.unfenced).any():
        return False
    if (sh.in_flight and part(sh.pending).any()) or not part(sh.init).all():
        return False
    if sh.races and sh.written[ctas].any():
        w = part(sh.writer_code)
        if unordered(w, me).any():
            return False
    if sh.races:  # every chunk of the range, in each CTA: one rectangle of the log
        sh.log.add(ctas, np.arange(lo // CHUNK, hi // CHUNK),
                   np.arange(lo // DIRTY_BLOCK, -(-hi // DIRTY_BLOCK)), me, me)
    return True


def _box_bytes(sh: SharedMemory, ctas: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``sh.data`` at the CTA-local bytes ``where`` of each of the distinct ``ctas``,
    (G, len(where)), without a flat index of every byte."""
    grid = sh.data.reshape(sh.ncta, sh.size)
    r = bulk.rows(ctas)
    if isinstance(r, slice):
        return np.take(grid[r], where, axis=1)
    return grid[ctas[:, None], where[None, :]]


def _check_read(sh: SharedMemory, flat: np.ndarray, where: np.ndarray, me: np.ndarray,
                fail: Fail) -> None:
    """:meth:`SharedMemory.check_read` of the box rows ``flat`` (CTA-local bytes
    ``where``) by threads ``me``, as rows of one 16-byte chunk each where every 16 box
    bytes are one aligned chunk in order (swizzles move whole chunks): the same checks
    and first fault, the readers kept as chunk rows."""
    per = flat.shape[1] // CHUNK
    local = bulk.chunks_in_order(where) if sh.size % CHUNK == 0 else None
    rows = None if local is None else \
        ((flat[:, 0] - where[0]) // CHUNK)[:, None] + local[None, :]
    if rows is None:
        sh.check_read(flat, me, fail)
        return
    sh.check_read(flat.reshape(-1, CHUNK), np.repeat(me, per),
                  lambda i, w, msg: fail(i // per, w, msg), chunks=rows.reshape(-1))


def _store(t: TensorMap, buffer: np.ndarray, coords: np.ndarray, data: np.ndarray) -> None:
    """:func:`tma_box_store` of the box bytes ``data`` (G, box_bytes) at ``coords``: for
    a C-contiguous buffer where :func:`.async_copy.box_rows` finds the boxes' rows, one
    row store per box row (the bytes :func:`tma_box_store` writes); the other boxes take
    it."""
    t.validate()
    rows = box_rows(t, buffer.nbytes, coords) if buffer.flags.c_contiguous else None
    if rows is not None:
        row = t.smem_box[0] * t.dtype.size
        buffer.reshape(-1).view(np.uint8).reshape(-1, row)[rows.ravel()] = \
            data.reshape(-1, row)
        return
    tma_box_store(t, buffer, coords, data)


@step_rule(target_async.BulkCommit)
def _bulk_commit(c: TargetCompiler, instr: Instr) -> Step:
    def step(fr: TargetFrame) -> None:
        groups(fr.m).committed[fr.mask] += 1
    return step


@step_rule(target_async.BulkWait)
def _bulk_wait(c: TargetCompiler, instr: Instr) -> Step:
    n = instr.op.n

    def step(fr: TargetFrame) -> None:
        m = fr.m
        rec = groups(m)
        if not rec.reading:
            return
        # an uncommitted store is in no group: never below the limit
        rec.reading = wait_group(rec.reading, rec.committed, fr.mask, n, lambda r: r.group,
                                 lambda r, done: _retire(m, r, done))
    return step


def unretired(m: Machine) -> BulkRead | None:
    """The first store whose reads no ``cp.async.bulk.wait_group.read`` retired."""
    rec: BulkGroups | None = getattr(m, "bulk_groups", None)
    return rec.reading[0] if rec is not None and rec.reading else None


def not_waited(m: Machine, first: BulkRead) -> TargetFault:
    """The fault of a CTA that exits while the store ``first`` may still read."""
    who = int(first.thread[0])
    never = first.group[0] >= groups(m).committed[who]
    return m.fault(first.instr, "bulk store not waited", "the CTA exits while this TMA "
                   "store may still read its shared-memory source: no "
                   "cp.async.bulk.wait_group.read retired its bulk group"
                   + (" (the group was never committed)" if never else ""), who,
                   hint="cp.async.bulk.commit_group; cp.async.bulk.wait_group.read 0 before "
                        "the kernel exits or the buffer is reused")


def check_drained(m: Machine) -> None:
    """At the end of a launch: fault at the first store whose reads of shared memory
    no ``cp.async.bulk.wait_group.read`` retired before its CTA exited."""
    first = unretired(m)
    if first is not None:
        raise not_waited(m, first)


__all__ = ["BulkGroups", "BulkRead", "box_read", "check_drained", "groups", "not_waited",
           "unretired"]
