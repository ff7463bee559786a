"""Ordering rules of a whole Target IR kernel that no single op can check.

ptxas accepts PTX that breaks several of these (it silently repairs a missing
``wgmma.fence`` and never sees a missing proxy fence), so the backend checks them on
the IR before rendering:

* ``wgmma.fence`` before a ``wgmma`` whose accumulators were touched by anything else
  since the last fence (PTX ISA sec. 9.7.15.6.1);
* a ``wgmma`` result is read only after ``wgmma.commit_group`` and a
  ``wgmma.wait_group`` that retires its group (sec. 9.7.15.6.2-3); yielding it as a
  loop's carried value is not a read where the chain accumulates into that carried
  value (its registers, :mod:`tessera.backend.ptx.render.regalloc`), and the carried
  value stays in its group; any other yield is a register copy, a read (ptxas
  serialises such a pipeline, C7514);
* the register A operand of a ``wgmma`` (``wgmma_rs``) is in flight with its group
  too: no other instruction reads it, and none writes its registers (a loop body's
  next run of the instruction that made it) before the group retires (sec. 9.7.15.6:
  the input registers of an in-flight ``wgmma`` must not be accessed);
* shared memory written by ordinary stores (``st.shared``, ``stmatrix``) is fenced with
  ``fence.proxy.async`` before a ``wgmma`` or a TMA store reads it or a TMA load
  overwrites it (sec. 9.7.13.4, async proxy).
  Only stores into the buffers the ``wgmma`` or TMA touches count (a store to a ring
  counter does not): each address is traced back to the ``ptx.shared`` buffers it is
  computed from, and a store whose address cannot be traced counts for every buffer;
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
from collections.abc import Callable
from dataclasses import dataclass, field

from tessera.errors import IRVerifyError
from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects.target import For, If, While
from tessera.ir.dialects.target.async_ops import (
    CpAsync,
    Fence,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    TmaLoad,
    TmaStore,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.ir.dialects.target.guarded import GuardedStore
from tessera.ir.dialects.target.ops import (
    Binary,
    Const,
    Cvt,
    Pack,
    SharedAlloc,
    Special,
    Store,
)
from tessera.ir.dialects.target.ptx_ops import Stmatrix
from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA


@dataclass
class _State:
    fenced: bool = False  # a wgmma.fence since accumulators were last touched
    uncommitted: set[Value] = field(default_factory=set)
    groups: list[set[Value]] = field(default_factory=list)  # committed, oldest first
    # shared buffers (ptx.shared symbols; ANY when untraceable) stored to by st.shared
    # or cp.async since the last fence.proxy.async
    dirty: frozenset[str] = frozenset()
    barrier_init: str = "ready"  # "ready" | "unfenced"
    a_regs: frozenset[Value] = frozenset()  # register A operands met (for the messages)

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
                      [a | b for a, b in zip(ga, gb)], self.dirty | other.dirty, worst,
                      self.a_regs | other.a_regs)


def _fail(instr: Instr, message: str, hint: str) -> None:
    raise IRVerifyError(message, hint=hint, loc=instr.loc)


#: the buffer set of an address that cannot be traced to its ptx.shared buffers
ANY = "*"
_ARITH = (Binary, Cvt, Pack, Const, Special)


class _Provenance:
    """Which ``ptx.shared`` buffers an address (or a matrix descriptor) is computed
    from: through arithmetic to ``ptx.shared`` results, a loop-carried value through
    its initial and yielded values, :data:`ANY` for anything else (a loaded pointer)."""

    def __init__(self, fn: Function) -> None:
        self.loops: dict[Block, Instr] = {}
        for instr in walk(fn.body):
            if isinstance(instr.op, (For, While)):
                for region in instr.regions:
                    self.loops[region.block] = instr
        self.seen: dict[Value, frozenset[str]] = {}

    def of(self, v: Value) -> frozenset[str]:
        """The buffers of ``v``."""
        if v in self.seen:
            return self.seen[v]
        self.seen[v] = frozenset()  # a cycle through a loop adds nothing new
        owner = v.owner
        if isinstance(owner, Instr) and isinstance(owner.op, SharedAlloc):
            out = frozenset([owner.op.sym])
        elif isinstance(owner, Instr) and isinstance(owner.op, _ARITH):
            out = frozenset().union(*(self.of(x) for x in owner.operands))
        elif isinstance(owner, Block) and owner in self.loops:
            out = frozenset().union(*(self.of(x) for x in self._carried(owner, v)))
        else:
            out = frozenset([ANY])
        self.seen[v] = out
        return out

    def _carried(self, block: Block, v: Value) -> list[Value]:
        """The values a loop's block argument ``v`` takes: its initial value and the
        value the body yields for it (none for a ``ptx.for`` index)."""
        loop = self.loops[block]
        k = block.args.index(v)
        body = loop.regions[-1].block
        if isinstance(loop.op, For):
            if k == 0:
                return []
            init, k = loop.operands[3 + k - 1], k - 1
        else:
            init = loop.operands[k]
        term = body.terminator
        return [init] + ([term.operands[k]] if term is not None and k < len(term.operands)
                         else [])


def _touches(st: _State, used: frozenset[str]) -> bool:
    """Whether an async-proxy access of ``used`` meets an unfenced generic store."""
    return bool(st.dirty) and (ANY in st.dirty or ANY in used or bool(st.dirty & used))


def _reads(instr: Instr, st: _State) -> _State:
    """The rule on wgmma results alone: fail at a read of one still in flight, and
    track the groups."""
    op = instr.op
    if not isinstance(op, (Wgmma, WgmmaCommit, WgmmaWait, WgmmaFence)):
        flying = st.in_flight()
        for v in instr.operands:
            if v in flying:
                what = ("the register A operand of a wgmma" if v in st.a_regs
                        else "a wgmma accumulator")
                _fail(instr, f"{op.name} reads {what} before wgmma.wait_group "
                      "retires it", "commit the wgmma group and wait for it "
                      "(wgmma.commit_group; wgmma.wait_group 0) before reading results")
        for v in instr.results:  # a loop body's next run rewrites the same registers
            if v in flying:
                _fail(instr, f"{op.name} overwrites the register A operand of a wgmma "
                      "still in flight", "wait for the wgmma group "
                      "(wgmma.wait_group) before making the next A fragments")
    return _track_groups(instr, st)


def _step(instr: Instr, st: _State, prov: _Provenance) -> _State:
    op = instr.op
    st = _reads(instr, st)
    if isinstance(op, WgmmaFence):
        st.fenced = True
    elif isinstance(op, Wgmma):
        if not st.fenced:
            _fail(instr, "wgmma without a wgmma.fence since its accumulators were last "
                  "accessed", "emit wgmma.fence before the first wgmma of a sequence")
        if _touches(st, prov.of(instr.operands[1]) | prov.of(instr.operands[2])):
            _fail(instr, "wgmma reads shared memory written by st.shared without "
                  "fence.proxy.async", "emit fence.proxy.async.shared::cta and bar.sync "
                  "between the stores and the wgmma")
    elif isinstance(op, WgmmaWait):
        st.fenced = False  # the results are about to be touched
    elif (isinstance(op, (Store, GuardedStore)) and op.space == "shared") or \
            isinstance(op, (CpAsync, Stmatrix)):
        st.dirty = st.dirty | prov.of(instr.operands[0])
    elif isinstance(op, Fence) and op.kind != "acq_rel_gpu":  # a memory-order fence only
        st.dirty = frozenset() if op.kind == "proxy_async" else st.dirty
        if st.barrier_init == "unfenced":
            st.barrier_init = "ready"
    elif isinstance(op, MbarrierInit):
        st.barrier_init = "unfenced"
    if isinstance(op, TmaLoad) and _touches(st, prov.of(instr.operands[0])):
        _fail(instr, "a TMA load overwrites shared memory written by st.shared without "
              "fence.proxy.async", "emit fence.proxy.async.shared::cta and bar.sync "
              "between the stores and the TMA load")
    if isinstance(op, TmaStore) and _touches(st, prov.of(instr.operands[0])):
        _fail(instr, "a TMA store reads shared memory written by st.shared or stmatrix "
              "without fence.proxy.async", "emit fence.proxy.async.shared::cta, then a "
              "barrier of the writing threads, before the TMA store")
    if isinstance(op, (MbarrierArrive, MbarrierWait, TmaLoad)) and st.barrier_init != "ready":
        _fail(instr, f"{op.name} uses an mbarrier before its initialisation is fenced and "
              "synchronised", "emit fence.mbarrier_init (or fence.proxy.async) after "
              "mbarrier.init")
    return st


def _track_groups(instr: Instr, st: _State) -> _State:
    """The wgmma groups after ``instr``, and nothing else."""
    op = instr.op
    if isinstance(op, Wgmma):
        st.uncommitted.add(instr.results[0])
        if isinstance(op, WgmmaRegA):
            st.uncommitted.add(instr.operands[1])
            st.a_regs = st.a_regs | {instr.operands[1]}
    elif isinstance(op, WgmmaCommit):
        if st.uncommitted:
            st.groups.append(st.uncommitted)
        st.uncommitted = set()
    elif isinstance(op, WgmmaWait):
        st.groups = st.groups[len(st.groups) - op.n:] if op.n else []
    return st


def _carry(instr: Instr, st: _State, dsts: list[list[Value]]) -> _State:
    """A region's yield: an accumulator still in flight is not read but carried, so its
    destinations join its group. That holds only where the carried value shares its
    registers: a loop's ``wgmma`` chain that accumulates into the loop's own carried
    value. Any other yield of a value in flight is a register copy that reads it."""
    flying = st.in_flight()
    for v, targets in zip(instr.operands, dsts):
        if v not in flying:
            continue
        if _chain_root(v) not in targets:
            _fail(instr, "a region yields a wgmma register still in flight into other "
                  "registers: the copy reads it before wgmma.wait_group retires it",
                  "wait for the group before the region ends, or let the wgmma "
                  "accumulate into the loop's carried value itself")
        for group in (st.uncommitted, *st.groups):
            if v in group:
                group.update(targets)
    return st


def _chain_root(v: Value) -> Value:
    """The accumulator a chain of ``wgmma`` (each adding into the last's result, in its
    registers) started from."""
    while isinstance(v.owner, Instr) and isinstance(v.owner.op, Wgmma):
        v = v.owner.operands[0]
    return v


Step = Callable[[Instr, _State], _State]


def _walk(block: Block, st: _State, step: Step,
          dsts: list[list[Value]] | None = None) -> _State:
    for instr in block.instrs:
        op = instr.op
        if isinstance(op, If):
            out = [[r] for r in instr.results]
            st = _walk(instr.regions[0].block, st.copy(), step, out).merge(
                _walk(instr.regions[1].block, st.copy(), step, out))
        elif isinstance(op, For):
            body = instr.regions[0].block
            out = [[a, r] for a, r in zip(body.args[1:], instr.results)]
            once = _walk(body, st.copy(), step, out)
            st = st.merge(_walk(body, st.merge(once), step, out))
        elif isinstance(op, While):
            for region in instr.regions:
                once = _walk(region.block, st.copy(), step)
                st = st.merge(_walk(region.block, st.merge(once), step))
        elif op.terminator and dsts is not None:
            st = _carry(instr, st, dsts)
        else:
            st = step(instr, st)
    return st


#: the ops every rule above is about: a kernel without one breaks none
_RULED = (Wgmma, TmaLoad, TmaStore, MbarrierArrive, MbarrierWait)


def _has_ruled(block: Block) -> bool:
    for instr in block.instrs:
        if isinstance(instr.op, _RULED):
            return True
        for region in instr.regions:
            if any(_has_ruled(b) for b in region.blocks):
                return True
    return False


def check_kernel(fn: Function, *, reads_only: bool = False) -> None:
    """Raise IRVerifyError at the first ordering rule ``fn`` breaks; ``reads_only``
    checks the one rule whose breach no run can show (a kernel's IR computes every
    ``wgmma`` at once, and ptxas inserts the missing wait on its own): every ``wgmma``
    result is read after a ``wgmma.wait_group`` retires its group."""
    if not _has_ruled(fn.body):
        return
    if reads_only:
        _walk(fn.body, _State(), _reads)
    else:
        prov = _Provenance(fn)
        _walk(fn.body, _State(), lambda instr, st: _step(instr, st, prov))


__all__ = ["check_kernel"]
