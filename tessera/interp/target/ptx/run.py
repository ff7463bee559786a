"""Running a :class:`~tessera.ir.dialects.target.cfg.CfgKernel`: PTX's own control flow.

Each thread has a program counter (a block index). At every step the threads waiting
at the block of lowest :func:`~tessera.ir.dialects.target.cfg.schedule_order` rank run
that block together (all CTAs at once, as the structured interpreter runs them), then
follow its branch. Threads split by a divergent branch therefore meet again at the
branch's immediate post-dominator in reducible control flow, before any of them goes
on, so warp-synchronous instructions there (``shfl.sync``, ``mma.sync``) see their warp
converged, as on hardware; ``bar.sync`` needs every thread of the CTA that has not
exited (``ret``/``exit``) to be there, at this or another ``bar.sync`` of its id. A
``bar.sync`` whose barrier has not completed parks its threads there
(:class:`~tessera.interp.target.ptx.parked.Parked`): they resume after it once the other
threads' ``bar.arrive``/``bar.sync`` complete it, and when every live thread waits so,
the kernel has deadlocked. A failed ``mbarrier`` wait parks its threads at the wait, to
poll again when no other thread can run; a round of polls that changes nothing is the
wait's fault.

Registers are PTX's mutable registers: one array over all threads per register, in the
storage of its declared type. An instruction reads each operand register as the type
the instruction names (a bit cast; a wider register is truncated), runs its Target IR
instructions with the tessera step rules on the threads that execute it (its block's
threads, narrowed by an ``@%p`` guard), and writes each result register per thread
(zero- or sign-extended into a wider register). A wide ``f32`` value (an exact ``mma``
accumulator) is rounded to ``f32`` when written: a PTX register holds 32 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.errors import InterpretError
from tessera.interp.target import barriers as _barriers
from tessera.interp.target import runner as _runner
from tessera.interp.target.cluster.geometry import kernel_clusters
from tessera.interp.target.cluster.rules import check_exits
from tessera.interp.target.memory.bulk_store import not_waited, unretired
from tessera.interp.target.memory.state import GlobalMemory, SharedMemory
from tessera.interp.target.ptx import memory as _ptx_memory
from tessera.interp.target.ptx import rules as _ptx_rules
from tessera.interp.target.ptx.memory import LocalMemory
from tessera.interp.target.ptx.parked import Parked
from tessera.interp.target.ptx.poison import Poison, classify
from tessera.interp.target.ptx.printf import flush as flush_printed
from tessera.interp.target.state import (
    DTYPES,
    Machine,
    TargetCompiler,
    TargetFault,
    TargetFrame,
    run,
    tensor_core_model,
)
from tessera.ir.dialects.target import REG_TYPES, RegType
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.cfg import CfgKernel, PtxInstr, schedule_order

_ = (_ptx_memory, _ptx_rules, _runner)  # register every step rule
#: block executions after which a kernel is reported as not terminating
STEP_LIMIT = 1 << 22
#: steps threads may wait at a block while others run before they run next
FAIR_STEPS = 16


class CfgMachine(Machine):
    """A launch of a PTX kernel: the machine plus its parameter space, tensor maps and
    each thread's local memory."""

    def __init__(self, kernel: CfgKernel, grid: tuple[int, int, int],
                 block: tuple[int, int, int], glob: GlobalMemory, shared: SharedMemory,
                 params: np.ndarray, tmaps: dict[int, Any]) -> None:
        fn: Any = kernel  # Machine reads only fn.name
        super().__init__(fn, grid, block, glob, shared)
        self.params = params
        self.param_offsets = {p.name: p.offset for p in kernel.params}
        self.local = LocalMemory(self.n, kernel.local_bytes)
        self.tmaps = tmaps
        self.textures: dict[int, Any] = {}  # texture objects by handle (arch.texture)
        self.heap: Any = None  # the device heap (heap.DeviceHeap), made on first malloc
        self.executed = np.zeros(self.n, np.uint64)  # instructions each thread has run
        self.workspace = 0  # a cooperative launch's grid workspace (0: none)
        self.poison = Poison(self.n)  # registers holding unwritten shared bytes

    def clock(self, reg: str) -> np.ndarray:
        """``%clock64``, ``%clock`` (its low 32 bits) and ``%clock_hi`` (its high 32
        bits), and ``%globaltimer`` (with ``_lo`` and ``_hi``) alike: the PTX
        instructions the thread has executed before this one. A GPU's clocks count SM
        cycles and its timer nanoseconds, which no CPU run reproduces; a count of the
        thread's own instructions advances as they do, never goes back, and is the same
        in every run and schedule (back-off loops that read the timer end as they
        would)."""
        if reg in target_ops.WIDE_CLOCKS:
            return self.executed.copy()
        high = reg.endswith("_hi")
        return (self.executed >> np.uint64(32 if high else 0)).astype(np.uint32)

    def special(self, reg: str) -> np.ndarray:
        """Special registers, with the y and z components the base table lacks."""
        bx, by, bz = self.block
        extra = {"tid.z": self.tid // (bx * by), "ntid.y": by, "ntid.z": bz,
                 "envreg1": self.workspace >> 32, "envreg2": self.workspace & 0xFFFFFFFF}
        if reg.startswith("envreg"):  # the driver's: only the grid workspace is set
            extra.setdefault(reg, 0)
        if reg in extra:
            return np.broadcast_to(np.asarray(extra[reg], np.uint32), (self.n,)).copy()
        return super().special(reg)


def _storage(t: str) -> np.dtype:
    return DTYPES[t]


def read_register(x: np.ndarray, elem: str) -> np.ndarray:
    """Register storage ``x`` read as PTX type ``elem`` (bit cast, truncating)."""
    dt = DTYPES[elem]
    if x.dtype == dt:
        return x
    if dt == np.bool_ or x.dtype == np.bool_:
        return x.astype(dt)
    if x.dtype.itemsize == dt.itemsize:
        return x.view(dt)
    if x.dtype.itemsize > dt.itemsize:
        low = x.view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.dtype(f"u{dt.itemsize}"))
        return low.view(dt)
    wide = x.view(np.dtype(f"u{x.dtype.itemsize}")).astype(np.dtype(f"u{dt.itemsize}"))
    return wide.view(dt)


def write_register(value: np.ndarray, elem: str, storage: np.dtype) -> np.ndarray:
    """A value of PTX type ``elem`` as register storage (extension by ``elem``'s sign)."""
    if elem == "f32" and value.dtype == np.float64:
        value = value.astype(np.float32)  # a register holds 32 bits
    if storage == np.bool_ or value.dtype == np.bool_:
        return value.astype(storage)
    if value.dtype.itemsize == storage.itemsize:
        return value.view(storage)
    size = storage.itemsize
    if value.dtype.itemsize < size:
        kind = REG_TYPES[elem][1]
        ext = value.view(np.dtype(f"{'i' if kind == 's' else 'u'}{value.dtype.itemsize}"))
        return ext.astype(np.dtype(f"{'i' if kind == 's' else 'u'}{size}")).view(storage)
    low = value.view(np.dtype(f"u{value.dtype.itemsize}")).astype(np.dtype(f"u{size}"))
    return low.view(storage)


class _Compiled:
    """One PTX instruction ready to run: slots of its bindings and its steps."""

    def __init__(self, comp: TargetCompiler, pi: PtxInstr, kernel: CfgKernel) -> None:
        self.pi = pi
        self.steps = [comp.instr(i) for i in pi.instrs]
        # a CTA-wide bar.sync stops waiting for exited threads; a named one counts
        self.barrier = any(isinstance(i.op, target_ops.Bar) and not i.op.count
                           for i in pi.instrs)
        loads, self.sink, self.rule = classify(pi)
        # a plain load: an unwritten shared byte it reads marks the value, not a fault
        self.defer = functools.partial(comp.m.poison.note_read, pi) if loads else None
        self.reads = [(comp.slot(v), names, _elem(v)) for v, names in pi.reads]
        self.writes = [(comp.slot(v), names, _elem(v),
                        [_storage(kernel.registers[n]) for n in names])
                       for v, names in pi.writes]


def _elem(v: Any) -> str:
    t = v.type
    assert isinstance(t, RegType)
    return t.elem


def _guard(phys: dict[str, np.ndarray], guard: tuple[str, bool] | None,
           mask: np.ndarray) -> np.ndarray:
    if guard is None:
        return mask
    name, negated = guard
    p = phys[name]
    return mask & (~p if negated else p)


def _renamed(err: InterpretError, pi: PtxInstr) -> InterpretError:
    """The error of a Target IR instruction reported as the PTX instruction it came
    from (same class, the PTX text instead of the IR op, the PTX line)."""
    if isinstance(err, TargetFault):
        text = err.message.replace(f": {err.op}: ", f": {pi.text}: ", 1)
        new = type(err).__new__(type(err))  # a BarrierDeadlock stays one
        InterpretError.__init__(new, text, hint=err.hint, loc=pi.loc)
        new.what, new.op, new.thread, new.cta = err.what, pi.text, err.thread, err.cta
        return new
    return err


def _run_instr(ci: _Compiled, regs: list[Any], phys: dict[str, np.ndarray],
               mask: np.ndarray, m: CfgMachine, exited: np.ndarray) -> None:
    poison = m.poison
    if poison.active:
        poison.check_guard(m, ci.pi.guard, mask, f"the guard of {ci.pi.text} (PTX line "
                           f"{ci.pi.loc.line})")
    mask = _guard(phys, ci.pi.guard, mask)
    if not mask.any():
        return
    if poison.active:
        poison.check_uses(m, ci.pi, ci.sink, mask)
    for slot, names, elem in ci.reads:
        if len(names) == 1:
            regs[slot] = read_register(phys[names[0]], elem)
        else:
            regs[slot] = np.stack([read_register(phys[n], elem) for n in names], axis=1)
    frame_mask = mask | exited if ci.barrier else mask
    m.shared.defer = ci.defer
    try:
        run(ci.steps, TargetFrame(regs, frame_mask, m))
    except InterpretError as err:
        raise _renamed(err, ci.pi) from None
    finally:
        m.shared.defer = None
    if poison.active or poison.fresh is not None:
        poison.propagate(ci.pi, ci.rule, phys, mask)
    for slot, names, elem, stores in ci.writes:
        value = regs[slot]
        cols = [value] if len(names) == 1 else [value[:, k] for k in range(len(names))]
        for name, col, storage in zip(names, cols, stores):
            new = write_register(np.asarray(col), elem, storage)
            phys[name] = np.where(mask, new, phys[name])


def run_cfg(kernel: CfgKernel, params: np.ndarray, glob: GlobalMemory, *,
            grid: Sequence[int], block: Sequence[int], shared_bytes: int = 0,
            tmaps: dict[int, Any] | None = None, check_races: bool = True,
            tensor_cores: str = "exact", cooperative: bool = False,
            textures: dict[int, Any] | None = None, heap: Any = None,
            cluster: tuple[int, int, int] | None = None) -> None:
    """Run ``kernel`` over ``grid`` x ``block`` threads with parameter-space bytes
    ``params`` over global memory ``glob`` (arrays placed there are updated in place).
    ``shared_bytes`` is the dynamic shared memory after the static variables;
    ``tensor_cores`` the accumulation model of tensor-core steps (see ``run_target``);
    ``cooperative`` launches as ``cudaLaunchCooperativeKernel`` does, with a grid
    workspace (its size, 8, and a barrier word 0) whose address ``%envreg1`` (high
    half) and ``%envreg2`` (low half) hold, as cooperative groups' ``grid.sync()`` reads
    them; ``textures`` holds the texture objects ``tex`` fetches through, by handle;
    ``heap`` is the device heap ``malloc`` and ``free`` use (:class:`.heap.DeviceHeap`;
    by default one of the launch's own); ``cluster`` is the launch's cluster shape."""
    g = (int(grid[0]), int(grid[1]), int(grid[2]))
    b = (int(block[0]), int(block[1]), int(block[2]))
    size = kernel.static_shared + int(shared_bytes)
    size = -(-size // 16) * 16
    ncta, nthreads = g[0] * g[1] * g[2], b[0] * b[1] * b[2]
    m = CfgMachine(kernel, g, b, glob, SharedMemory(ncta, nthreads, size, check_races),
                   params, tmaps or {})
    kernel_clusters(m, kernel.target, kernel.attrs, cluster, kernel.loc)
    m.tensor_cores = tensor_core_model(tensor_cores)
    m.textures = dict(textures or {})
    if heap is not None:
        m.heap = heap
        heap.place(glob)
    if cooperative:
        m.workspace = glob.add(np.array([8, 0], np.uint32), "the grid workspace")
    comp = TargetCompiler(m)
    blocks = [[_Compiled(comp, pi, kernel) for pi in bb.body] for bb in kernel.blocks]
    regs: list[Any] = [None] * len(comp.slots)
    phys = {name: np.zeros(m.n, _storage(t)) for name, t in kernel.registers.items()}
    rank = np.asarray(schedule_order(kernel.blocks), np.int64)
    exits = np.array([not bb.body and bb.end.kind == "ret" for bb in kernel.blocks])
    pc = np.zeros(m.n, np.int64)
    pos = np.zeros(m.n, np.int64)  # where in its block a thread resumes (after a bar.sync)
    exited = m.exited = np.zeros(m.n, bool)  # updated in place: barriers read it
    parked = m.parked = Parked(m.n)
    last = np.zeros(m.n, np.int64)  # the step at which each thread last ran
    warp = m.cta * -(-m.nthreads // 32) + m.tid // 32  # each thread's warp, launch-wide
    steps = 0
    counting = _reads(kernel, target_ops.CLOCKS)
    try:
        with np.errstate(all="ignore"):
            while True:
                live = pc >= 0
                if not live.any():
                    break
                ready = live & ~parked.waiting(m) & ~parked.retry
                if not ready.any():  # softly parked arrivals run on when nothing else can
                    ready = parked.resume_soft(m, live)
                if not ready.any():  # then the mbarrier waits poll again
                    ready = parked.resume_waits(live)
                if not ready.any():  # every live thread waits at a named barrier
                    instr, err = parked.hang(m, live)
                    pi = next(ci.pi for bb in blocks for ci in bb if instr in ci.pi.instrs)
                    raise _renamed(err, pi)
                at, first, mask = _next_group(ready, pc, pos, rank, last, steps, warp)
                last[mask] = steps
                group, moved = mask, True
                for k, ci in enumerate(blocks[at][first:], first):
                    _run_instr(ci, regs, phys, mask, m, exited)
                    if counting:
                        m.executed[mask] += np.uint64(1)
                    if parked.fresh.any():  # these wait here until their barrier completes
                        pos[parked.fresh] = k + 1
                        mask = mask & ~parked.fresh
                        parked.fresh[:] = False
                    if parked.fresh_retry.any():  # these poll their mbarrier again later
                        moved = k > first or (mask & ~parked.fresh_retry).any()
                        pos[parked.fresh_retry] = k
                        mask = mask & ~parked.fresh_retry
                        parked.fresh_retry[:] = False
                if moved:
                    parked.stalled[:] = False
                else:
                    parked.stalled |= group  # polled at once, in vain
                pos[mask] = 0
                if not mask.any():
                    continue
                end = kernel.blocks[at].end
                if counting and end.text:  # a branch, ret or exit is an instruction too
                    m.executed[mask] += np.uint64(1)
                if end.kind == "jump":
                    pc[mask] = end.target
                elif end.kind == "cond":
                    if m.poison.active:
                        m.poison.check_guard(m, end.guard, mask, f"the branch {end.text} "
                                             f"(PTX line {end.loc.line})")
                    taken = _guard(phys, end.guard, mask)
                    pc[taken] = end.target
                    pc[mask & ~taken] = end.fallthrough
                elif end.kind == "ret":
                    pc[mask] = -1
                else:
                    who = int(np.flatnonzero(mask)[0])
                    raise _fault(m, kernel, end, who)
                # a thread that branched to a bare ret has exited (barriers stop waiting)
                gone = mask & (pc >= 0)
                gone[gone] = exits[pc[gone]]
                pc[gone] = -1
                gone |= mask & (pc < 0)
                if gone.any():
                    exited |= gone
                    _barriers.exits(m, gone)
                steps += 1
                if steps > STEP_LIMIT:
                    raise _fault(m, kernel, end, int(np.flatnonzero(mask)[0]), "loop limit",
                                 f"more than {STEP_LIMIT} blocks executed")
        # every CTA has exited: none before another was done with its shared memory, and
        stuck = unretired(m)  # no TMA store may still read
        late = check_exits(m) or (stuck and (stuck.instr, not_waited(m, stuck)))
        if late:
            pi = next(ci.pi for bb in blocks for ci in bb if late[0] in ci.pi.instrs)
            raise _renamed(late[1], pi)

    finally:
        flush_printed(m)


def _next_group(ready: np.ndarray, pc: np.ndarray, pos: np.ndarray, rank: np.ndarray,
                last: np.ndarray, steps: int, warp: np.ndarray) -> tuple[int, int, np.ndarray]:
    """The block, the position in it and the threads that run next: those waiting at the
    block of lowest rank (divergent threads meet at their join before going on), unless
    threads have waited :data:`FAIR_STEPS` steps while others loop (a spin lock's
    waiters, the lock's holder starving): then those that waited longest, as a GPU's
    scheduler runs every warp that can run (sm_70 and later). Threads go so only where
    none of their warp-mates that can run waits behind them (at a block of no higher
    rank): they never pass a join their warp has not reached, and a laggard whose
    warp-mates wait at the join runs on (a decoupled look-back's thread 0, which spins
    on another CTA's flag while the rest of its warp waits at ``bar.sync``)."""
    starving = ready & (steps - last > FAIR_STEPS)
    if starving.any():  # the places where threads starve, those that waited longest first
        where = np.unique(np.stack([last[starving], pc[starving], pos[starving]]), axis=1)
        warps = warp[-1] + 1
        for at, first in {(int(a), int(f)): None for _, a, f in where.T}:
            mask = ready & (pc == at) & (pos == first)
            behind = ready & ~mask & (rank[np.maximum(pc, 0)] <= rank[at])
            free = (np.bincount(warp[mask], minlength=warps) > 0) & (
                np.bincount(warp[behind], minlength=warps) == 0)
            if free.any():
                return at, first, mask & free[warp]
    here = np.unique(pc[ready])
    at = int(here[np.argmin(rank[here])])
    first = int(pos[ready & (pc == at)].min())
    return at, first, ready & (pc == at) & (pos == first)


def _reads(kernel: CfgKernel, regs: Sequence[str]) -> bool:
    """Whether ``kernel`` reads one of the special registers ``regs``."""
    return any(isinstance(i.op, target_ops.Special) and i.op.reg in regs
               for bb in kernel.blocks for pi in bb.body for i in pi.instrs)


def _fault(m: CfgMachine, kernel: CfgKernel, end: Any, who: int, what: str = "trap",
           message: str = "the kernel executed trap") -> TargetFault:
    c = int(m.cta[who])
    hint = None
    if what == "trap" and not m.workspace and _reads(kernel, ("envreg1", "envreg2")):
        hint = ("the kernel reads a cooperative launch's grid workspace (cooperative groups' "
                "grid.sync()): run it with cooperative=True, as cudaLaunchCooperativeKernel "
                "launches it")
    if end.text == "brkpt":  # a breakpoint: with no debugger attached, an exception
        message = "the kernel executed brkpt, which ends the launch when no debugger is attached"
    return TargetFault(what, message, kernel=kernel.name, op=end.text or "trap", loc=end.loc,
                       thread=int(m.tid[who]), cta=tuple(int(v) for v in m.cta_xyz(c)),
                       hint=hint)


__all__ = ["FAIR_STEPS", "STEP_LIMIT", "CfgMachine", "read_register", "run_cfg", "write_register"]
