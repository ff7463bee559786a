"""Ordering rules of a whole Target IR kernel that no single op can check.

ptxas accepts PTX that breaks several of these (it silently repairs a missing
``wgmma.fence`` and never sees a missing proxy fence), so the backend checks them on
the IR before rendering:

* ``wgmma.fence`` before a ``wgmma`` whose accumulators were touched by anything else
  since the last fence (PTX ISA sec. 9.7.15.6.1);
* a ``wgmma`` result is read only after ``wgmma.commit_group`` and a
  ``wgmma.wait_group`` that retires its group (sec. 9.7.15.6.2-3); yielding it as a
  loop's carried value (the next iteration's ``wgmma`` accumulates into the same
  registers) is not a read, and the carried value stays in its group;
* shared memory written by ordinary stores is fenced with ``fence.proxy.async``
  before a ``wgmma`` reads shared memory (sec. 9.7.13.4, async proxy);
* an ``mbarrier.init`` is fenced (``fence.mbarrier_init`` or ``fence.proxy.async``)
  before the barrier is used (sec. 9.7.13.15.9); a ``bar.sync`` must also separate
  the init from other threads' uses — the Target IR interpreter reports a use of an
  uninitialised barrier.

The walk is abstract interpretation over the structured control flow: a loop body is
walked twice so that what its end leaves behind meets its start, and the two arms of
an ``if`` are merged pessimistically.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tessera.errors import IRVerifyError
from tessera.ir.core import Block, Function, Instr, Value
from tessera.ir.dialects.target import For, If, While
from tessera.ir.dialects.target.async_ops import (
    CpAsync,
    Fence,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.ops import Store


@dataclass
class _State:
    fenced: bool = False  # a wgmma.fence since accumulators were last touched
    uncommitted: set[Value] = field(default_factory=set)
    groups: list[set[Value]] = field(default_factory=list)  # committed, oldest first
    dirty_shared: bool = False  # st.shared since the last fence.proxy.async
    barrier_init: str = "ready"  # "ready" | "unfenced"

    def copy(self) -> _State:
        return dataclasses.replace(self, uncommitted=set(self.uncommitted),
                                   groups=[set(g) for g in self.groups])

    def in_flight(self) -> set[Value]:
        out = set(self.uncommitted)
        for g in self.groups:
            out |= g
        return out

    def merge(self, other: _State) -> _State:
        order = {"ready": 0, "unfenced": 1}
        worst = max(self.barrier_init, other.barrier_init, key=order.__getitem__)
        n = max(len(self.groups), len(other.groups))
        pad = [set()] * n
        ga = (pad + self.groups)[-n:] if n else []
        gb = (pad + other.groups)[-n:] if n else []
        return _State(self.fenced and other.fenced, self.uncommitted | other.uncommitted,
                      [a | b for a, b in zip(ga, gb)], self.dirty_shared or other.dirty_shared,
                      worst)


def _fail(instr: Instr, message: str, hint: str) -> None:
    raise IRVerifyError(message, hint=hint, loc=instr.loc)


def _step(instr: Instr, st: _State) -> _State:
    op = instr.op
    flying = st.in_flight()
    if not isinstance(op, (Wgmma, WgmmaCommit, WgmmaWait, WgmmaFence)):
        for v in instr.operands:
            if v in flying:
                _fail(instr, f"{op.name} reads a wgmma accumulator before wgmma.wait_group "
                      "retires it", "commit the wgmma group and wait for it "
                      "(wgmma.commit_group; wgmma.wait_group 0) before reading results")
    if isinstance(op, WgmmaFence):
        st.fenced = True
    elif isinstance(op, Wgmma):
        if not st.fenced:
            _fail(instr, "wgmma without a wgmma.fence since its accumulators were last "
                  "accessed", "emit wgmma.fence before the first wgmma of a sequence")
        if st.dirty_shared:
            _fail(instr, "wgmma reads shared memory written by st.shared without "
                  "fence.proxy.async", "emit fence.proxy.async.shared::cta and bar.sync "
                  "between the stores and the wgmma")
        st.uncommitted.add(instr.results[0])
    elif isinstance(op, WgmmaCommit):
        if st.uncommitted:
            st.groups.append(st.uncommitted)
        st.uncommitted = set()
    elif isinstance(op, WgmmaWait):
        keep = op.n
        st.groups = st.groups[len(st.groups) - keep:] if keep else []
        st.fenced = False  # the results are about to be touched
    elif (isinstance(op, Store) and op.space == "shared") or isinstance(op, CpAsync):
        st.dirty_shared = True
    elif isinstance(op, Fence):
        st.dirty_shared = False if op.kind == "proxy_async" else st.dirty_shared
        if st.barrier_init == "unfenced":
            st.barrier_init = "ready"
    elif isinstance(op, MbarrierInit):
        st.barrier_init = "unfenced"
    elif isinstance(op, (MbarrierArrive, MbarrierWait, TmaLoad)) and st.barrier_init != "ready":
        _fail(instr, f"{op.name} uses an mbarrier before its initialisation is fenced and "
              "synchronised", "emit fence.mbarrier_init (or fence.proxy.async) after "
              "mbarrier.init")
    return st


def _carry(instr: Instr, st: _State, dsts: list[list[Value]]) -> _State:
    """A region's yield: an accumulator still in flight is not read but carried (the
    carried values share its registers), so its destinations join its group."""
    for v, targets in zip(instr.operands, dsts):
        for group in (st.uncommitted, *st.groups):
            if v in group:
                group.update(targets)
    return st


def _walk(block: Block, st: _State, dsts: list[list[Value]] | None = None) -> _State:
    for instr in block.instrs:
        op = instr.op
        if isinstance(op, If):
            out = [[r] for r in instr.results]
            st = _walk(instr.regions[0].block, st.copy(), out).merge(
                _walk(instr.regions[1].block, st.copy(), out))
        elif isinstance(op, For):
            body = instr.regions[0].block
            out = [[a, r] for a, r in zip(body.args[1:], instr.results)]
            once = _walk(body, st.copy(), out)
            st = st.merge(_walk(body, st.merge(once), out))
        elif isinstance(op, While):
            for region in instr.regions:
                once = _walk(region.block, st.copy())
                st = st.merge(_walk(region.block, st.merge(once)))
        elif op.terminator and dsts is not None:
            st = _carry(instr, st, dsts)
        else:
            st = _step(instr, st)
    return st


def check_kernel(fn: Function) -> None:
    """Raise IRVerifyError at the first ordering rule ``fn`` breaks."""
    _walk(fn.body, _State())


__all__ = ["check_kernel"]
