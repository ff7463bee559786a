"""Asynchronous copies and their synchronisation: ``cp.async``, TMA, ``mbarrier`` waits.

``cp.async`` (PTX ISA sec. 9.7.9.25): the source is read when the copy is issued (any
moment up to the wait is allowed) and the bytes *land* in shared memory at the issuing
thread's ``cp.async.wait_group`` that covers the copy's group, not before: until then
the destination bytes are marked in flight and reading them is an error.

TMA (``cp.async.bulk.tensor``, sec. 9.7.9.27) with :mod:`tessera.arch.tma`: the box is
read at issue and lands, with its ``complete_tx`` on the mbarrier, when some thread
waits on that mbarrier (all loads issued to it complete then), as do the ``cp.async``
copies bound to it. ``mbarrier`` objects, their init and arrivals, are
:mod:`tessera.interp.target.memory.mbarriers`'; a wait whose phase cannot complete once
every issued load has landed is an error instead of a hang (inside a concurrent
``ptx.if``, the other arm runs first:
:mod:`tessera.interp.target.schedule`; in PTX's own control flow, the other threads
run first: :class:`tessera.interp.target.ptx.parked.Parked`).

An mbarrier phase also orders shared memory for the race check
(:mod:`tessera.interp.target.memory.async_order`), and a ``wgmma`` group's operands stay in
use until it retires (:mod:`tessera.interp.target.memory.async_order`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.arch import tma as arch_tma
from tessera.arch.errors import ArchError
from tessera.arch.swizzle import swizzle_address
from tessera.arch.tma import TensorMap
from tessera.interp.target.memory import bulk
from tessera.interp.target.memory.async_order import acquire
from tessera.interp.target.memory.flight import Copy, issue, land, land_bound, wait_group
from tessera.interp.target.memory.mbarriers import barrier_ids, check_visible, mbar, tracked
from tessera.interp.target.memory.state import CHUNK, SharedMemory, add_at
from tessera.interp.target.schedule import current as current_scheduler
from tessera.interp.target.state import Machine, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async


@step_rule(target_async.CpAsync)
def _cp_async(c: TargetCompiler, instr: Instr) -> Step:
    size = instr.op.size
    slots = [c.slot(v) for v in instr.operands]

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        fail = m.failer(instr, act)
        dst = fr.regs[slots[0]][act].astype(np.int64)
        src = fr.regs[slots[1]][act].astype(np.int64)
        n_src = (fr.regs[slots[2]][act].astype(np.int64) if len(slots) == 3
                 else np.full(len(act), size))
        flat = m.shared.index(m.cta[act], dst, size, fail)
        data = np.zeros((len(act), size), np.uint8)
        n_src = np.minimum(n_src, size)
        sizes = np.unique(n_src[n_src > 0]) if len(slots) == 3 else [size]
        for n in sizes:  # only src_size bytes are read; the rest
            idx = np.flatnonzero(n_src == n)  # of the copy is zero-filled
            raw = m.glob.read(src[idx], int(n), lambda k, w, t, idx=idx: fail(int(idx[k]),
                                                                              w, t), size)
            data[idx, :n] = raw
        whole = size == CHUNK and m.shared.size % CHUNK == 0  # index(): rows in order
        copy = Copy(act, m.committed[act].copy(), flat, data,
                    chunks=flat[:, :1] // CHUNK if whole else None,
                    bounds=(int(dst.min()) - m.shared.base, int(dst.max()) + size - m.shared.base))
        issue(m, copy, fail)
        m.copies.append(copy)
    return step


@step_rule(target_async.CpAsyncCommit)
def _cp_commit(c: TargetCompiler, instr: Instr) -> Step:
    def step(fr: TargetFrame) -> None:
        fr.m.committed[fr.mask] += 1
    return step


@step_rule(target_async.CpAsyncWait)
def _cp_wait(c: TargetCompiler, instr: Instr) -> Step:
    n = instr.op.n

    def step(fr: TargetFrame) -> None:
        m = fr.m
        m.copies = wait_group(m.copies, m.committed, fr.mask, n, lambda copy: copy.tag,
                              lambda copy, done: land(m, copy, done, True))
    return step


@dataclass(frozen=True, eq=False)
class TmaValue:
    """A tensor-map kernel parameter: the arch record and its global byte buffer."""

    tmap: TensorMap
    buffer: np.ndarray


def _barriers(m: Machine, instr: Instr, act: np.ndarray, addr: np.ndarray) -> np.ndarray:
    """The mbarriers at the active threads' shared addresses, each checked to be
    initialised where this thread can see it."""
    ids = barrier_ids(m, instr, act, addr)
    check_visible(m, instr, act, addr, ids)
    return ids


def _wake(m: Machine) -> None:
    """Copies were issued: a waiter's phase may now complete."""
    sched = current_scheduler(m)
    if sched is not None:
        sched.touch()


def _multicast(m: Machine, instr: Instr, act: np.ndarray, mask: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """For each destination of the active threads' multicast loads (CTA ``mask`` bits
    of their clusters): the issuing row and the destination CTA."""
    size = m.shared.cluster_size
    bits = (mask.astype(np.int64)[:, None] >> np.arange(16)) & 1
    beyond = bits[:, size:].any(axis=1)
    if beyond.any():
        k = int(np.flatnonzero(beyond)[0])
        raise m.fault(instr, "cluster rank", f"a multicast TMA load to CTA mask "
                      f"{int(mask[k]):#06x}: the cluster has {size} CTA"
                      f"{'s' if size > 1 else ''}", int(act[k]))
    rows, ranks = np.nonzero(bits)
    return rows, m.cta[act[rows]] - m.cta[act[rows]] % size + ranks


@step_rule(target_async.TmaLoad)
def _tma_load(c: TargetCompiler, instr: Instr) -> Step:
    dst, tm, c0, c1, bar, *mask = (c.slot(v) for v in instr.operands)
    # per destination: the range the box's bytes cover, and their chunks (in box order)
    # when every 16 box bytes are one aligned chunk in order (swizzles move whole ones)
    ranges: dict[tuple[int, int, int], tuple[tuple[int, int] | None, np.ndarray | None]] = {}

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        value: TmaValue = fr.regs[tm]
        t = value.tmap
        dest = m.cta[act]
        bars = fr.regs[bar][act].astype(np.int64)
        addr = fr.regs[dst][act].astype(np.int64)
        coords = np.stack([fr.regs[c0][act], fr.regs[c1][act]], axis=1).astype(np.int64)
        if mask:  # one row per destination CTA, its mbarrier at the same address there
            rows, dest = _multicast(m, instr, act, fr.regs[mask[0]][act])
            act, bars, addr, coords = act[rows], bars[rows], addr[rows], coords[rows]
        flat = m.shared.index(dest, bars, 8, m.failer(instr, act))
        ids = m.shared.slots(flat[:, 0])
        check_visible(m, instr, act, bars, ids)
        fail = m.failer(instr, act)
        for a in np.unique(addr):
            rows = np.flatnonzero(addr == a)
            where = box_where(t, int(a), m.shared, "TMA destination",
                              lambda w, msg, rows=rows: fail(int(rows[0]), w, msg))
            try:  # the box's bytes in box order: byte i lands at where[i]
                data = tma_box(t, value.buffer, coords[rows])
            except ArchError as err:
                raise m.fault(instr, "tma", err.message, int(act[rows[0]])) from None
            ctas = dest[rows]
            key = (int(a), t.swizzle, t.box_bytes)
            if key not in ranges:
                ranges[key] = (bulk.covered_range(where), bulk.chunks_in_order(where))
            span = ranges[key][0] if bulk.distinct(ctas) else None
            local = ranges[key][1] if m.shared.size % CHUNK == 0 else None
            if bulk.range_unfenced(m.shared, ctas, *span) if span is not None else \
                    m.shared.unfenced[ctas[:, None] * m.shared.size + where[None, :]].any():
                # a generic write the async proxy may pass
                fail(int(rows[0]), "missing proxy fence", "TMA overwrites shared memory "
                     "written by st.shared with no fence.proxy.async since")
            copy = Copy(act[rows], ids[rows], None, data, span, None if local is None else
                        ctas[:, None] * (m.shared.size // CHUNK) + local[None, :],
                        (int(where.min()), int(where.max()) + 1), where,
                        ctas if mask else None)
            issue(m, copy, lambda i, w, t, rows=rows: fail(int(rows[i]), w, t))
            m.tma.append(copy)
        _wake(m)
    return step


@step_rule(target_async.BulkLoad)
def _bulk_load(c: TargetCompiler, instr: Instr) -> Step:
    dst, src, size, bar = (c.slot(v) for v in instr.operands)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        ids = _barriers(m, instr, act, fr.regs[bar][act])
        fail = m.failer(instr, act)
        for k, t in enumerate(act):  # one thread issues a bulk copy, as a rule
            a, n = int(fr.regs[dst][t]), int(fr.regs[size][t])
            if n % 16 or a % 16 or n <= 0:
                fail(k, "misaligned address", f"a bulk copy of {n} bytes to shared address "
                     f"{a}: the size must be a positive multiple of 16 and the address "
                     "16-byte aligned")
            where = a - m.shared.base + np.arange(n, dtype=np.int64)
            if where.min() < 0 or where.max() >= m.shared.size:
                fail(k, "out of bounds", f"the bulk copy of {n} bytes at shared address {a} "
                     f"leaves the CTA's shared memory: {m.shared.outside(a)}")
            data = m.glob.read(np.array([int(fr.regs[src][t])]), n,
                               lambda _i, w, msg, k=k: fail(k, w, msg), align=16)
            cta = np.array([m.cta[t]])
            if m.shared.unfenced[cta * m.shared.size + where].any():
                fail(k, "missing proxy fence", "a bulk copy overwrites shared memory written "
                     "by st.shared with no fence.proxy.async since")
            copy = Copy(act[k:k + 1], ids[k:k + 1], None, data, None, None,
                        (int(where[0]), int(where[-1]) + 1), where)
            issue(m, copy, lambda i, w, msg, k=k: fail(k, w, msg))
            m.tma.append(copy)
        _wake(m)
    return step


def box_where(t: TensorMap, a: int, shared: SharedMemory, what: str,
              fail: Callable[[str, str], None]) -> np.ndarray:
    """The CTA-local bytes (of ``shared``'s per-CTA arrays) of the box at shared address
    ``a``, in box order (swizzled); ``fail`` is called when ``a`` (the ``what``) is not
    128-byte aligned or the box leaves the CTA's shared memory."""
    where = swizzle_address(a + np.arange(t.box_bytes, dtype=np.int64), t.swizzle) - shared.base
    if a % 128:
        fail("misaligned address", f"{what} at shared address {a} is not 128-byte aligned")
    if where.min() < 0 or where.max() >= shared.size:
        fail("out of bounds", f"the TMA box of {t.box_bytes} bytes at shared address {a} "
             f"leaves the CTA's shared memory: {shared.outside(shared.base + int(where.min()))}")
    return where


def box_rows(t: TensorMap, nbytes: int, coords: np.ndarray) -> np.ndarray | None:
    """The rows (G, box height) that the boxes at ``coords`` (G, 2) cover in a buffer of
    ``nbytes`` bytes viewed as rows of one box row each: for a 2-D map with unit strides
    whose boxes lie inside the tensor and whose rows are whole, aligned rows of the
    buffer; else None."""
    if t.rank != 2 or t.strides != (1, 1) or not len(coords):
        return None
    esize = t.dtype.size
    (w, h), dims = t.smem_box, t.global_dims
    row = w * esize
    c0, c1 = coords[:, 0], coords[:, 1]
    if not ((c0 >= 0) & (c0 + w <= dims[0]) & (c1 >= 0) & (c1 + h <= dims[1])).all():
        return None
    starts = c0[:, None] * esize + (c1[:, None] + np.arange(h)) * t.global_strides[0]
    if nbytes % row or (starts % row).any() or starts.max() + row > nbytes:
        return None
    return starts // row


def tma_box(t: TensorMap, buffer: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """The bytes of the boxes at ``coords`` (G, 2), as :func:`tessera.arch.tma.tma_box`
    gives them: where :func:`box_rows` finds the boxes' rows, one row copy per box row
    and no index per element; the other boxes take the arch function."""
    t.validate()
    rows = box_rows(t, buffer.nbytes, coords)
    if rows is not None:
        raw = np.ascontiguousarray(buffer).reshape(-1).view(np.uint8)
        return np.take(raw.reshape(-1, t.smem_box[0] * t.dtype.size), rows,
                       axis=0).reshape(len(coords), -1)
    return arch_tma.tma_box(t, buffer, coords)


def _complete_tma(m: Machine, instr: Instr, ids: np.ndarray, who: int) -> None:
    """Land every TMA load in flight to the mbarriers ``ids`` and complete their bytes.

    All of them land together, so a phase whose announced bytes are fewer than the
    loads bring (it would complete early, with loads still in flight) is reported.
    """
    mb = m.mbar
    tags: list[np.ndarray] = []  # the mbarrier of each landing box, and its bytes
    sizes: list[np.ndarray] = []
    still = []
    waited: np.ndarray = m.mbar_waited  # type: ignore[attr-defined]
    waited[ids] = True
    try:
        for copy in m.tma:
            done = waited[copy.tag]  # np.isin(copy.tag, ids)
            if done.any():
                tags.append(copy.tag[done])
                sizes.append(np.full(len(tags[-1]), copy.data.shape[1], np.int64))
                rest = land(m, copy, done, False)
                if rest is not None:
                    still.append(rest)
            else:
                still.append(copy)
    finally:
        waited[ids] = False
    m.tma = still
    if not tags:
        return
    # per mbarrier hit (ascending), the bytes landing on it: no pass over every slot
    hit, where = np.unique(np.concatenate(tags), return_inverse=True)
    landing = np.zeros(len(hit), np.int64)
    add_at(landing, where, np.concatenate(sizes))
    early = (mb.pending[hit] == 0) & (mb.tx[hit] < landing)
    if early.any():
        k = int(np.flatnonzero(early)[0])
        i = int(hit[k])
        raise m.fault(instr, "mbarrier", f"expect-tx count too small: the phase announced "
                      f"{int(m.mbar_tx[0, i])} tx bytes but its TMA loads bring "
                      f"{int(m.mbar_tx[1, i] + landing[k])}; it would complete with loads "
                      "still in flight", who)
    m.mbar_tx[1, hit] += landing
    tracked(m, instr, np.array([who]), hit, mb.complete_tx, hit, landing)


@step_rule(target_async.MbarrierWait)
def _mbarrier_wait(c: TargetCompiler, instr: Instr) -> Step:
    a, p = (c.slot(v) for v in instr.operands)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        ids = _barriers(m, instr, act, fr.regs[a][act])
        mb = mbar(m)
        land_bound(m, ids)  # cp.async copies bound to these barriers complete first
        parity = fr.regs[p][act].astype(np.int64)
        # A wait on a phase that already completed returns at once (a stale parity lets
        # the kernel run ahead of its loads); only the others make loads land.
        done = mb.try_wait_parity(ids, parity)
        if not done.all():
            _complete_tma(m, instr, np.unique(ids[~done]), int(act[0]))
        ok = np.asarray(tracked(m, instr, act, ids, mb.try_wait_parity, ids, parity))
        sched = current_scheduler(m)
        while not ok.all() and sched is not None and sched.block():
            # another arm ran (arrived, issued loads); poll again, as the try_wait loop does
            _complete_tma(m, instr, np.unique(ids[~ok]), int(act[0]))
            ok = np.asarray(tracked(m, instr, act, ids, mb.try_wait_parity, ids, parity))
        parked = getattr(m, "parked", None)  # PTX control flow: others may arrive later
        if ok.all() or (parked is not None and
                        parked.wait_later(act[~ok], mb.pending[ids[~ok]] == 0)):
            acquire(m, ids[ok])
            return
        k = int(np.flatnonzero(~ok)[0])
        i = ids[k]
        raise m.fault(instr, "mbarrier", "mbarrier phase never completes: expected "
                      f"{int(m.mbar_tx[0, i])} tx bytes, got {int(m.mbar_tx[1, i])}; "
                      f"{int(mb.pending[i])} of {int(mb.expected[i])} arrivals missing "
                      f"(waiting for parity {int(parity[k]) & 1})", int(act[k]))
    return step


__all__ = ["Copy", "TmaValue", "box_rows", "box_where"]
