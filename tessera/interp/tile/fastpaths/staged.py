"""Staged K loops: the trips after the first of a ``cp_async`` + ``mma`` loop, at once.

The loop this fast path serves is a tiled GEMM's, one trip per K step::

    for k in tile.range(lo, hi, step):
        tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])   # views of read-only
        tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])   # parameters
        (tile.cp_commit_group() / tile.cp_wait_group(n))*        # optional
        tile.barrier()
        acc = tile.mma(load(smem_a), load(smem_b), acc)          # a deferred accumulator
        tile.barrier()

(index arithmetic that does not depend on ``k`` may sit anywhere before the first
barrier; ``acc += mma(...)`` is accepted as well). The general loop runs each trip's
dozen steps one by one; here the first trip does, and the rest are derived from it.

Why the result and the reports are the general loop's (and so the reference's):

* **No later trip reports.** With one tile per group (or in fast mode, which records
  no race shadows) the only checks of a trip are: the views' bounds, the async-copy
  pending test of each whole-buffer write, the uninitialised-read and pending tests of
  the loads, and the barriers' convergence (a no-op outside compacted contexts, which
  are refused here). After the first trip, every staged buffer is initialised (a
  whole-buffer write clears its ``init`` shadow for good) and carries no copy tag (the
  barrier before the loads, and the one ending the trip, clear every buffer's tags);
  the runner verifies this state. Each later trip makes the same whole writes, then
  a barrier before its loads: the same tests on the same state, so they pass. A
  view's start along each axis is a loop-invariant value (as in the first trip) or
  ``k`` itself; the in-bounds set of ``k`` is an interval, and ``k`` runs monotonically
  from the first trip's value to the last trip's, so testing the last trip's views
  (with the same function the view step uses) covers every trip. When that test
  fails, the runner declines and the general loop goes on from the second trip, with
  nothing changed, and reports where the definition does.
* **The same operands.** The sources are parameters the kernel never writes (no read
  tracking, no copy on load), so a trip's loaded tile is a chain of NumPy views of the
  parameter's array: the access plan's strided view, the storage conversion (the
  identity: the runner requires the storage dtype), the whole-write's reshape that
  drops the local axis, and the load's access plan. The shapes and strides of each
  view depend only on the shapes involved, never on ``k``; the byte offset of the
  first is affine in ``k`` (``sum_d start_d * stride_d``) and each later view keeps its
  offset from its base. So trip ``t``'s operand is trip 1's with its data pointer moved
  by ``(k_t - k_1) * sum(strides of the axes started at k)`` bytes, and so is the
  buffer's storage. The runner checks that trip 1's operands and storage really are
  views of the parameter's buffer (their data lies inside it; a copy would lie in an
  allocation of its own), else it declines, and rebuilds each trip's view
  with that offset (NumPy checks that it lies inside the buffer). The deferred
  accumulator receives what the ``mma`` step would give it, trip by trip, so its
  single product (:mod:`.pending`) is the same BLAS call on the same buffers. When the
  trips' operands lie end to end along K (the step times the offset per unit of ``k``
  is the operand's K extent in bytes) and fit the K columns it holds without a flush,
  it receives trip 1's operands made ``n`` trips long instead: the same elements in
  the same order, so the same buffers.
* **The same state after the loop.** A later trip changes: each staged buffer's
  storage (the last trip's tile is left in it, marked as handed out by a load), the
  barrier epochs of the groups present (two per trip), and the async-copy counters
  (each program's open group id advances by the count of groups the trip's copies,
  commits, waits and barriers close, which the matcher counts statically; the
  completed bound becomes the open id at the trip's closing barrier, and nothing is
  left open). Nothing else: the buffers' tags are cleared again, their ``init`` stays
  clear, no race shadow exists, and the parameters are only read. Registers of values
  defined inside the body are not visible after the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.fastpaths.pending import PendingMma
from tessera.interp.tile.memory.access import bounds_violation
from tessera.interp.tile.memory.spaces import GlobalMem, Ref, SharedMem
from tessera.interp.tile.numeric import num
from tessera.interp.tile.rules import IMPLS
from tessera.ir.core import Instr, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType

#: ops that compute program coordinates or constants (pure, no memory)
_IDS = (tile_ir.GridCoord, tile_ir.LinearId, tile_ir.GroupId, tile_ir.LocalId)


@dataclass
class _Stage:
    """One ``cp_async`` of a trip: the view's slots, and the buffer the load reads."""

    parent: int  # slot of the parameter's Ref
    starts: list[int | None]  # slot of each start, None where the start is ``k``
    sizes: tuple[int, ...]
    view: int  # slot of the view's Ref
    dst: int  # slot of the shared buffer's Ref


def _integral(instr: Instr) -> bool:
    return len(instr.results) == 1 and isinstance(instr.results[0].type, TensorType) \
        and num(instr.results[0].type.element).kind in ("int", "bool")


def _space(v: Value) -> str | None:
    return v.type.space if isinstance(v.type, MemRefType) else None


def _match(c: Any, loop: Instr, defer: dict[int, Any]) \
        -> tuple[list[_Stage], int, int, int, int, list[Instr]] | None:
    """(stages, slot of the loop variable, delta of the open copy-group id per trip,
    slot of the mma's a load, slot of its b load, the index arithmetic before the first
    barrier) when ``loop`` is a staged K loop."""
    block = loop.regions[0].block
    term = block.terminator
    if list(defer) != [0] or len(block.args) != 2 or term is None or len(term.operands) != 1:
        return None
    kvar, acc = block.args
    body = [i for i in block.instrs if not i.op.terminator]
    inside: set[Value] = set(block.args)
    variant = {kvar}  # values that depend on k
    stages: dict[Value, _Stage] = {}  # by the shared buffer copied into
    views: dict[Value, tuple[int, list[int | None], tuple[int, ...]]] = {}
    loads: dict[Value, Value] = {}  # loaded value -> buffer
    barriers = 0
    used = False  # the copy-group state of one program, trip after trip
    delta = 0
    math: list[Instr] = []  # the mma, and the add fused with it (``acc += mma(...)``)
    pure: list[Instr] = []
    for instr in body:
        op = instr.op
        if instr.regions:
            return None
        if barriers == 0 and (isinstance(op, _IDS) or (type(op) in IMPLS and _integral(instr))):
            if any(v in variant for v in instr.operands):
                return None  # only k itself may start a view
            pure.append(instr)
        elif barriers == 0 and isinstance(op, tile_memory.View):
            src = instr.operands[0]
            if src in inside or _space(src) != "global":
                return None
            starts: list[int | None] = []
            for v in instr.operands[1:]:
                if v is kvar:
                    starts.append(None)
                elif v in variant:
                    return None
                else:
                    starts.append(c.slot(v))
            views[instr.results[0]] = (c.slot(src), starts, tuple(op.sizes))
        elif barriers == 0 and type(op) is tile_memory.CpAsync:
            dst, src = instr.operands
            if dst in inside or _space(dst) != "shared" or src not in views or dst in stages:
                return None
            parent, starts, sizes = views[src]
            stages[dst] = _Stage(parent, starts, sizes, c.slot(src), c.slot(dst))
            used = True
        elif barriers == 0 and type(op) is tile_memory.CpCommitGroup:
            delta, used = delta + 1, False
        elif barriers == 0 and type(op) is tile_memory.CpWaitGroup:
            delta, used = delta + used, False
        elif type(op) is tile_memory.Barrier and barriers < 2:
            barriers += 1
            delta, used = delta + used, False
        elif barriers == 1 and type(op) is tile_memory.Load and instr.operands[0] in stages \
                and instr.operands[0] not in loads.values():
            loads[instr.results[0]] = instr.operands[0]
        elif (
            barriers == 1 and isinstance(op, (tile_compute.Mma, tile_compute.Add)) and len(math) < 2
        ):
            math.append(instr)
        else:
            return None
        inside.update(instr.results)
    if barriers != 2 or not math or not stages or len(loads) != len(stages):
        return None
    product = math[-1]  # the yielded value: the mma's, or the fused add's
    mma = product if len(math) == 1 else c.fused[block].get(product)
    if mma is None or mma is not math[0] or not isinstance(mma.op, tile_compute.Mma) \
            or term.operands[0] is not product.results[0] \
            or acc not in product.operands:
        return None
    a, b = mma.operands[:2]
    if a not in loads or b not in loads or a is b:
        return None
    order = list(stages)
    return ([stages[d] for d in order], c.slot(kvar), delta,
            order.index(loads[a]), order.index(loads[b]), pure)


def _moved(x: np.ndarray, array: np.ndarray, start: int, offset: int, axis: int = -1,
           count: int = 1) -> np.ndarray:
    """``x`` (a view of ``array``'s buffer, ``start`` bytes into it) with its data
    ``offset`` bytes further on, and ``count`` times as long along ``axis``."""
    shape = x.shape
    if count != 1:
        k = axis % x.ndim
        shape = (*shape[:k], shape[k] * count, *shape[k + 1:])
    out = np.ndarray(shape, x.dtype, array, start + offset, x.strides)
    if not x.flags.writeable:
        out.flags.writeable = False
    return out


def _starts(arrays: list[np.ndarray], owners: list[np.ndarray]) -> list[int] | None:
    """Where each array's data lies in its owner's buffer (bytes from its start), or
    None when one lies outside: a copy, not a view (live buffers never overlap)."""
    base: dict[int, int] = {}
    out = []
    for x, o in zip(arrays, owners):
        b = base.get(id(o))
        if b is None:
            b = base[id(o)] = o.__array_interface__["data"][0]
        at = x.__array_interface__["data"][0] - b
        if not 0 <= at < o.nbytes:
            return None
        out.append(at)
    return out


@register("staged_loop", needs=("deferred_mma",))
def staged_proof() -> None:
    """Proof: the module docstring of :mod:`tessera.interp.tile.fastpaths.staged` (no
    later trip reports; the deferred accumulator receives the same operands; the launch
    state after the loop is the one the trips would leave). Consulted by
    ``deferred_mma`` after a deferred K loop's first trip."""


class StagedLoop:
    """The runner of one staged K loop (module docstring). Called after the first trip
    with the carried values it yielded, it runs the other trips and returns True, or
    returns False having changed nothing (the general loop goes on)."""

    def __init__(self, stages: list[_Stage], kslot: int, delta: int, ia: int, ib: int,
                 pure: list[Callable[[Any], None]], invariants: list[int],
                 record: bool) -> None:
        self.stages, self.kslot, self.delta, self.ia, self.ib = stages, kslot, delta, ia, ib
        #: the steps of the trip's index arithmetic that reads values from outside the
        #: loop (none when it starts from program coordinates and constants alone)
        self.pure = pure
        #: the slots of the view starts that are neither ``k`` nor computed from
        #: program coordinates and constants alone
        self.invariants = invariants
        #: whether to remember the trips' operands (:mod:`.first`), and what was
        self.record = record
        self.first: Any = None

    def moves(self, fr: Any, trips: range, fresh: bool = False
              ) -> list[tuple[GlobalMem, SharedMem, int]] | None:
        """Per stage (parameter, buffer, byte step per unit of ``k``) when the trips'
        state and the last trip's views allow deriving them, else None (``fresh``:
        before the first trip, the bounds left to the caller)."""
        st, ctx, regs = fr.st, fr.ctx, fr.regs
        if len(trips) < 2 or ctx.flat or (st.checked and st.geom.group_size > 1):
            return None
        for mem in st.shared:  # nothing for a barrier to complete or clear
            if mem.tag is not None or mem.wrote or mem.read:
                return None
        last = trips[-1]
        moves: list[tuple[GlobalMem, SharedMem, int]] = []
        for s in self.stages:
            parent, dst = regs[s.parent], regs[s.dst]
            if not (isinstance(parent, Ref) and isinstance(dst, Ref)):
                return None
            src, buf = parent.mem, dst.mem
            if not isinstance(src, GlobalMem) or not isinstance(buf, SharedMem) \
                    or src.written or src.track_reads or parent.squeeze \
                    or not src.array.flags.c_contiguous or src.array.dtype != buf.np_dtype \
                    or (buf.init is not None and not fresh) or buf.writer is not None \
                    or not dst.whole():
                return None
            if not fresh:
                rel = [last if slot is None else regs[slot] for slot in s.starts]
                if bounds_violation(rel, s.sizes, tuple(parent.sizes), ctx.lead) is not None:
                    return None  # the general loop reports it at its trip
            step = sum(src.array.strides[d] for d, slot in enumerate(s.starts) if slot is None)
            moves.append((src, buf, step))
        if len({id(buf) for _, buf, _ in moves}) != len(moves):
            return None
        return moves

    def __call__(self, fr: Any, trips: range, carried: list[Any]) -> bool:
        pending = carried[0]
        if type(pending) is not PendingMma or not pending.a:
            return False
        moves = self.moves(fr, trips)
        if moves is None:
            return False
        a0, b0 = pending.a[-1], pending.b[-1]
        storage = [buf.data.arr for _, buf, _ in moves]
        owners = [moves[self.ia][0].array, moves[self.ib][0].array,
                  *(src.array for src, _, _ in moves)]
        starts = _starts([a0, b0, *storage], owners)
        if starts is None:
            return False  # a copy somewhere: not a chain of views
        if not self.derive(fr, trips, pending, a0, b0, storage, starts, moves):
            return False
        if self.record:
            from tessera.interp.tile.fastpaths.first import remember
            remember(self, fr, trips, moves, pending)
        return True

    def derive(self, fr: Any, trips: range, pending: PendingMma, a0: np.ndarray,
               b0: np.ndarray, storage: list[np.ndarray], starts: list[int],
               moves: list[tuple[GlobalMem, SharedMem, int]]) -> bool:
        """Give ``pending`` the operands of the trips after the first (trip 1's are
        ``a0`` and ``b0``, ``starts`` bytes into their parameters; ``storage``: trip
        1's buffers) and leave the state after the loop; False with nothing changed
        when a view cannot be made."""
        first, last = trips[0], trips[-1]
        n, by = len(trips) - 1, trips.step
        (sa, _, da), (sb, _, db) = moves[self.ia], moves[self.ib]
        # the trips lie end to end along K and fit the kept K columns: trip 1's
        # operands made n + 1 trips long (the pending buffers get the same values)
        joined = a0.shape[-1] * a0.strides[-1] == by * da and \
            b0.shape[-2] * b0.strides[-2] == by * db and \
            pending.k + n * a0.shape[-1] <= pending.width
        try:
            moved = [_moved(x, src.array, at, (last - first) * d)
                     for (src, _, d), x, at in zip(moves, storage, starts[2:])]
            if joined:
                whole = (_moved(a0, sa.array, starts[0], 0, -1, n + 1),
                         _moved(b0, sb.array, starts[1], 0, -2, n + 1))
            else:
                rest = [(_moved(a0, sa.array, starts[0], j * by * da),
                         _moved(b0, sb.array, starts[1], j * by * db)) for j in range(1, n + 1)]
        except (ValueError, TypeError):
            return False
        if joined:
            done = pending.extend_last(*whole, n)
            assert done, "the K columns were checked above"
        else:
            for a, b in rest:
                pending.add(a, b)
        self.finish(fr, trips, moves, moved, n)
        return True

    def finish(self, fr: Any, trips: range, moves: list[tuple[GlobalMem, SharedMem, int]],
               storage: list[np.ndarray], n: int) -> None:
        """The launch state after ``n`` trips more, the last trip's tiles ``storage``
        left in the staged buffers (each now initialised)."""
        st, ctx = fr.st, fr.ctx
        for (_, buf, _), arr in zip(moves, storage):
            buf.data.arr = arr
            buf.data.exported = True
            buf.init = None  # (already, unless the first trip did not run here)
        if ctx.whole:
            st.epoch += 2 * n
        else:
            present = np.zeros(st.epoch.size, bool)
            present[ctx.group_flat] = True
            st.epoch[present] += 2 * n
        idx = ctx.flat_index()
        st.open_id[idx] += n * self.delta
        st.open_used[idx] = False
        st.done_upto[idx] = st.open_id[idx]
        fr.regs[self.kslot] = np.int64(trips[-1])
        REGISTRY["staged_loop"].taken += 1


def staged_loop(c: Any, loop: Instr, defer: dict[int, Any]) -> StagedLoop | None:
    """The runner of the staged K loop ``loop`` (:class:`StagedLoop`), or None when it
    is not one (or the fast path is off)."""
    if "staged_loop" not in c.enabled:
        return None
    found = _match(c, loop, defer)
    if found is None:
        return None
    stages, kslot, delta, ia, ib, pure = found
    step_of = c.body(loop.regions[0].block).step_of
    closed: set[Value] = set()  # computed from program coordinates and constants alone
    for instr in pure:
        if all(v in closed for v in instr.operands):
            closed.update(instr.results)
    fixed = {c.slot(v) for v in closed}
    invariants = [slot for s in stages for slot in s.starts
                  if slot is not None and slot not in fixed]
    own = all(i in step_of for i in pure)  # each has a step of its own to run
    run = [] if all(i.results[0] in closed for i in pure) or not own else \
        [step_of[i] for i in pure]
    return StagedLoop(stages, kslot, delta, ia, ib, run, invariants,
                      own and "staged_first_trip" in c.enabled)


__all__ = ["StagedLoop", "staged_loop", "staged_proof"]
