"""Step rules of the cluster instructions: ``mapa`` and ``getctarank`` (the addresses
of distributed shared memory, :mod:`tessera.arch.cluster`) and the cluster barrier
(``barrier.cluster.arrive`` / ``wait``).

The cluster barrier's phase completes once every thread of the cluster's CTAs has
arrived (a thread that exited counts as arrived); a waiting thread goes on once the
phase it arrived on has completed. A phase whose arrivals all release starts a new race
epoch in the shared memory of every CTA of the cluster, as ``bar.sync`` does in one CTA,
and makes every mbarrier initialised before it visible to the whole cluster. Checked: a
second arrival before the thread's wait, a wait with no arrival before it, an
``.aligned`` form reached by part of a warp, and a wait that can never complete (the
threads that never arrive are named). Where the waiting threads are a task of a
warp-specialised kernel or PTX's own control flow, others run until the phase
completes, as :class:`~tessera.ir.dialects.target.mbarrier_ops.MbarrierWait` waits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.arch.cluster import CLUSTER_SPAN, remote_address, split_address
from tessera.interp.target.flow import check_warps
from tessera.interp.target.schedule import current
from tessera.interp.target.state import Step, TargetCompiler, TargetFault, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import mbarrier_ops, memory_ops
from tessera.ir.dialects.target.ptx_ops import SHARED_WINDOW


def _shared(fr: TargetFrame, instr: Instr, a: np.ndarray, act: np.ndarray,
            generic: bool) -> np.ndarray:
    """The shared addresses of the active threads' operand ``a`` (generic addresses
    must lie in the shared window)."""
    x = a[act].astype(np.int64)
    if not generic:
        return x
    off = x - SHARED_WINDOW
    bad = (off < 0) | (off >= CLUSTER_SPAN)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise fr.m.fault(instr, "cluster address", f"{instr.op.name[4:]} of generic address "
                         f"{int(x[k]):#x}, which is not shared memory", int(act[k]))
    return off


@step_rule(memory_ops.Mapa)
def _mapa(c: TargetCompiler, instr: Instr) -> Step:
    a, r = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    generic = instr.op.space == ""

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        addr = fr.regs[a]
        result = np.zeros_like(addr)
        if len(act):
            rank = fr.regs[r][act].astype(np.int64)
            size = m.shared.cluster_size
            bad = rank >= size
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise m.fault(instr, "cluster rank", f"mapa to CTA rank {int(rank[k])}: the "
                              f"cluster has {size} CTA{'s' if size > 1 else ''}", int(act[k]),
                              hint="ranks run from 0 to %cluster_nctarank - 1")
            own = m.cta[act] % size
            mapped = remote_address(_shared(fr, instr, addr, act, generic), rank, own)
            away = rank != own
            _note_mapped(m, instr, act[away], (m.cta[act] - own + rank)[away])
            result[act] = (mapped + (SHARED_WINDOW if generic else 0)).astype(addr.dtype)
        fr.regs[out] = result
    return step


@step_rule(memory_ops.GetCtaRank)
def _getctarank(c: TargetCompiler, instr: Instr) -> Step:
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])
    generic = instr.op.space == ""

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        result = np.zeros(m.n, np.uint32)
        if len(act):
            rank, _ = split_address(_shared(fr, instr, fr.regs[a], act, generic),
                                    m.cta[act] % m.shared.cluster_size)
            result[act] = rank
        fr.regs[out] = result
    return step


def _note_mapped(m: Any, instr: Instr, who: np.ndarray, targets: np.ndarray) -> None:
    """Remember, per CTA whose shared memory threads ``who`` map an address into, the
    latest such ``mapa`` and the cluster barrier phases completed then: the CTA must
    not exit before those threads are done (:func:`check_exits`)."""
    if not len(who):
        return
    phases = _barrier(m).done[who // (m.nthreads * m.shared.cluster_size)]
    seen: dict[int, tuple[Instr, int, int]] = m.__dict__.setdefault("cluster_mapped", {})
    order = np.lexsort((-phases, targets))  # per target, its latest phase first
    first = np.r_[True, targets[order][1:] != targets[order][:-1]]
    for k in order[first].tolist():
        target, phase = int(targets[k]), int(phases[k])
        if target not in seen or seen[target][2] < phase:
            seen[target] = (instr, int(who[k]), phase)


class _Barrier:
    """The cluster barrier of every cluster of a launch: per thread whether it arrived
    and has not yet waited, the phase it arrived on and how many phases it waited for;
    per cluster the phases completed and whether an arrival of the open phase was
    relaxed."""

    def __init__(self, m: Any) -> None:
        self.pending = np.zeros(m.n, bool)
        self.waiting = np.zeros(m.n, bool)  # arrived, not yet waited
        self.phase_of = np.zeros(m.n, np.int64)
        self.passed = np.zeros(m.n, np.int64)
        nclusters = m.ncta // m.shared.cluster_size
        self.done = np.zeros(nclusters, np.int64)
        self.relaxed = np.zeros(nclusters, bool)


def _barrier(m: Any) -> _Barrier:
    b: _Barrier | None = getattr(m, "cluster_barrier", None)
    if b is None:
        b = m.cluster_barrier = _Barrier(m)
    return b


def _complete(m: Any, clusters: np.ndarray) -> None:
    """Complete the open phase of each of ``clusters`` every thread has arrived on."""
    b = _barrier(m)
    per = m.nthreads * m.shared.cluster_size
    exited = getattr(m, "exited", None)
    for q in clusters.tolist():
        span = slice(q * per, (q + 1) * per)
        arrived = b.pending[span] if exited is None else b.pending[span] | exited[span]
        if not arrived.all():
            continue
        b.pending[span] = False
        b.done[q] += 1
        if not b.relaxed[q]:  # every access before the arrivals is ordered
            ctas = np.zeros(m.ncta, bool)
            ctas[q * m.shared.cluster_size:(q + 1) * m.shared.cluster_size] = True
            m.shared.sync(ctas)
            if m.shared.clustered is not None:
                m.shared.clustered.cluster_sync(ctas, exited)
        b.relaxed[q] = False


@step_rule(mbarrier_ops.ClusterArrive, mbarrier_ops.ClusterWait)
def _cluster_barrier(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    run = _arrive if isinstance(op, mbarrier_ops.ClusterArrive) else _wait

    def step(fr: TargetFrame) -> None:
        act = np.flatnonzero(fr.mask)
        if len(act):
            if op.aligned:
                check_warps(fr, instr)
            run(fr.m, instr, act)
    return step


def _arrive(m: Any, instr: Instr, act: np.ndarray) -> None:
    """Threads ``act`` arrive on their clusters' barriers."""
    b = _barrier(m)
    twice = b.waiting[act]
    if twice.any():
        raise m.fault(instr, "cluster barrier", "barrier.cluster.arrive again before the "
                      "thread's barrier.cluster.wait", int(act[twice][0]),
                      hint="each arrival is followed by its wait")
    q = m.cta[act] // m.shared.cluster_size
    if m.shared.clustered is not None:
        m.shared.clustered.arrive(act)
    b.pending[act] = b.waiting[act] = True
    b.phase_of[act] = b.done[q]
    if instr.op.relaxed:
        b.relaxed[np.unique(q)] = True
    _complete(m, np.unique(q))
    sched = current(m)
    if sched is not None:
        sched.touch()


def _wait(m: Any, instr: Instr, act: np.ndarray) -> None:
    """Threads ``act`` wait for the phases they arrived on (others run meanwhile where
    they can: tasks, PTX control flow)."""
    b = _barrier(m)
    lone = ~b.waiting[act]
    if lone.any():
        raise m.fault(instr, "cluster barrier", "barrier.cluster.wait with no "
                      "barrier.cluster.arrive before it", int(act[lone][0]),
                      hint="arrive on the cluster barrier first")
    q = m.cta[act] // m.shared.cluster_size

    def passed() -> np.ndarray:
        _complete(m, np.unique(q))
        return b.done[q] > b.phase_of[act]
    ok = passed()
    sched = current(m)
    while not ok.all() and sched is not None and sched.block():
        ok = passed()
    parked = getattr(m, "parked", None)  # PTX control flow: others may arrive later
    if not ok.all() and not (parked is not None and
                             parked.wait_later(act[~ok], np.zeros((~ok).sum(), bool))):
        raise _hang(m, instr, int(act[~ok][0]))
    b.waiting[act[ok]] = False
    b.passed[act[ok]] = b.phase_of[act[ok]] + 1


def _hang(m: Any, instr: Instr, thread: int) -> Any:
    """The fault of a cluster barrier wait that never completes: who never arrives."""
    b = _barrier(m)
    size = m.shared.cluster_size
    per = m.nthreads * size
    q = thread // per
    span = np.arange(q * per, (q + 1) * per)
    exited = getattr(m, "exited", None)
    missing = span[~(b.pending[span] | (exited[span] if exited is not None else False))]
    who = int(missing[0])
    cta = tuple(int(v) for v in m.cta_xyz(int(m.cta[who])))
    return m.fault(instr, "cluster barrier", f"barrier.cluster.wait never completes: "
                   f"{len(missing)} thread(s) of the cluster never arrive, the first thread "
                   f"{int(m.tid[who])} of CTA {cta} (rank {int(m.cta[who]) % size})", thread,
                   hint="every thread of every CTA of the cluster arrives on each phase")


def check_exits(m: Any) -> tuple[Instr, TargetFault] | None:
    """At the end of a launch: the ``mapa`` and its fault where a CTA's shared memory
    was mapped for another CTA's thread and the CTA's threads waited for no cluster
    barrier phase after it. A CTA's shared memory lives as long as the CTA, so without
    such a wait it may have exited first (CUDA C++ Programming Guide, "Distributed
    Shared Memory")."""
    seen: dict[int, tuple[Instr, int, int]] = getattr(m, "cluster_mapped", {})
    if not seen:
        return None
    passed = _barrier(m).passed.reshape(m.ncta, m.nthreads).min(axis=1)
    for target, (instr, thread, phase) in sorted(seen.items()):
        if passed[target] <= phase:
            rank = target % m.shared.cluster_size
            return instr, m.fault(
                instr, "cluster exit", f"CTA rank {rank}'s shared memory is mapped here, "
                f"and CTA rank {rank} waits for no cluster barrier after it: it may exit, "
                "and its shared memory be gone, before this thread is done with it", thread,
                hint="end the kernel with barrier.cluster.arrive and barrier.cluster.wait "
                     "(cluster.sync())")
    return None


__all__ = ["check_exits"]
