"""State and compiler of the Target IR interpreter: faults, the machine, frames, steps.

Every thread of every CTA runs in lockstep: a register is one NumPy array over all
``ncta * nthreads`` threads (shape ``(N,)``, or ``(N, count)`` for a register vector),
and a *frame* carries the mask of threads that execute the current region. Pure
register instructions compute for every thread (values of inactive threads are never
observed); memory, synchronisation and warp-level instructions look at the mask.

Register storage per PTX type: ``pred`` bool; ``u``/``s`` types unsigned/signed NumPy
integers (wrap-around arithmetic); ``b`` types and packed ``f16x2``/``bf16x2`` unsigned
integers holding bit patterns; ``f16`` float16, ``bf16`` ml_dtypes.bfloat16, ``f32``
float32, ``f64`` float64. An ``f32`` register holding a float64 array is *wide* (an
exact ``mma``/``wgmma`` accumulator, see :mod:`tessera.ir.dialects.target.ops`).

Kernels are compiled, once per launch, into closures ``step(frame)`` (the tile
simulator's scheme, :mod:`tessera.interp.tile.exec`); rule tables keyed by op class
live in the ``target_*`` modules and register themselves with :func:`step_rule`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from tessera.arch.cluster import CLUSTER_REGS
from tessera.arch.limits import SM_COUNT, WARP_SLOTS
from tessera.errors import ArgumentError, InterpretError, Loc, TesseraError
from tessera.interp.slots import Slots
from tessera.interp.target.cluster.geometry import cluster_special
from tessera.interp.target.wide import wide_registers
from tessera.ir.core import Block, Function, Instr, Op, Value, rule_decorator, uses
from tessera.ir.text import op_attr_text
from tessera.progress import ProgressBar

#: NumPy storage of each PTX register type
DTYPES: dict[str, np.dtype] = {k: np.dtype(v) for k, v in {
    "pred": np.bool_, "b16": np.uint16, "b32": np.uint32, "b64": np.uint64,
    "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "s16": np.int16, "s32": np.int32,
    "s64": np.int64, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32,
    "f64": np.float64, "f16x2": np.uint32, "bf16x2": np.uint32}.items()}
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

_HINTS = {
    "out of bounds": "check the address arithmetic against the buffer's size",
    "misaligned address": "PTX accesses must be aligned to their size (vectors: total size)",
    "divergent barrier": "every thread of a CTA must reach the same bar.sync: move it out of "
                         "thread-dependent control flow",
    "uninitialised shared read": "write the shared buffer (or copy into it and wait) first",
    "async copy read before its wait": "wait for the copy (cp.async.wait_group, or the "
                                       "mbarrier of a TMA load) and bar.sync before reading",
    "async copy overwritten before its wait": "wait for the copy before reusing its "
                                              "destination",
    "shared memory race": "order the accesses with bar.sync (across CTAs, the cluster "
                          "barrier), or a flag's st.release and ld.acquire",
    "cluster address": "reach another CTA's shared memory with a .shared::cluster access "
                       "of the address mapa gives",
    "mbarrier": "announce (arrive.expect_tx) exactly the bytes of the loads on the phase, "
                "and arrive the init count of times",
    "warp divergence": "warp-synchronous instructions (.sync.aligned) need every thread of "
                       "the warp (or warpgroup) to execute them together",
    "missing proxy fence": "put fence.proxy.async (and bar.sync) between st.shared and the "
                           "wgmma or TMA load that accesses the same bytes",
    "shared memory overwritten while a wgmma reads it": "retire the wgmma group "
                                                        "(wgmma.wait_group) before the "
                                                        "buffer is released for reuse",
}


class TargetFault(InterpretError):
    """A kernel bug found while interpreting Target IR, worded like compute-sanitizer.

    ``what`` names the problem (``out of bounds``, ``divergent barrier``, ...); ``op`` is
    the instruction's text; ``thread`` (CTA-local linear id) and ``cta`` (x, y, z) name
    the first offending thread when there is one.
    """

    kind = "kernel fault"

    def __init__(self, what: str, message: str, *, kernel: str, op: str, loc: Loc,
                 thread: int | None = None, cta: tuple[int, int, int] | None = None,
                 hint: str | None = None) -> None:
        self.what = what
        self.op = op
        self.thread = thread
        self.cta = cta
        who = f" (thread {thread} of CTA {cta})" if thread is not None else ""
        super().__init__(f"kernel '{kernel}': {op}: {what}: {message}{who}",
                         hint=hint or _HINTS.get(what.split(":")[0]), loc=loc)


def op_text(instr: Instr) -> str:
    """The instruction as IR text: op name and non-default attributes."""
    attrs = op_attr_text(instr.op)
    return f"{instr.op.name} {attrs}" if attrs else instr.op.name


#: tensor-core accumulation models: ``"exact"``, the golden convention that defines a
#: kernel's meaning (:mod:`tessera.arch.mma`), and ``"hopper"``, what an H100/H200's
#: tensor cores return bit for bit (:mod:`tessera.arch.mma_hopper`)
TENSOR_CORES = ("exact", "hopper")


def tensor_core_model(name: str) -> str:
    """``name`` checked against :data:`TENSOR_CORES`."""
    if name not in TENSOR_CORES:
        raise ArgumentError(f"unknown tensor-core model {name!r}",
                            hint=f"use one of {TENSOR_CORES}")
    return name


class Machine:
    """Launch geometry and every memory of one kernel launch."""

    def __init__(self, fn: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
                 glob: Any, shared: Any) -> None:
        self.fn = fn
        self.grid = grid
        self.block = block
        self.nthreads = block[0] * block[1] * block[2]
        self.ncta = grid[0] * grid[1] * grid[2]
        self.n = self.ncta * self.nthreads
        self.lin = np.arange(self.n, dtype=np.int64)
        self.tid = self.lin % self.nthreads
        self.cta = self.lin // self.nthreads
        self.glob = glob
        self.shared = shared
        # cp.async: committed groups per thread and the copies still in flight
        self.committed = np.zeros(self.n, np.int64)
        self.copies: list[Any] = []
        self.bound: list[Any] = []  # copies cp.async.mbarrier.arrive bound to a barrier
        # TMA loads in flight and the mbarrier objects (created on first use)
        self.tma: list[Any] = []
        self.mbar: Any = None
        self.mbar_tx: Any = None
        #: shared symbol -> its shared address (from SHARED_BASE, above the reserved kilobyte)
        self.shared_layout: dict[str, int] = {}
        #: the launch's progress bar (silent unless :func:`run_target` shows one)
        self.bar = ProgressBar()
        #: how mma.sync/wgmma steps accumulate (:data:`TENSOR_CORES`)
        self.tensor_cores = "exact"
        #: module variable symbol -> (address, its bytes, the instruction naming it)
        self.module_vars: dict[str, tuple[int, np.ndarray, Instr]] = {}
        #: the order in which atomics of different CTAs land: ascending CTA index, or
        #: "descending" (another order a GPU may take, for order-independence tests)
        self.cta_order = "ascending"
        #: whether the arms of a concurrent ``ptx.if`` run one task per warpgroup of each
        #: CTA (:mod:`tessera.interp.target.flow`) rather than all CTAs in lockstep
        self.independent = False
        #: the text the launch's ``printf`` calls wrote, flushed when the launch ends
        self.printed: list[str] = []
        #: whether some concurrent tasks of the launch found that none could continue
        #: (:mod:`tessera.interp.target.schedule`)
        self.tasks_hung = False
        #: the launch's thread block clusters (``cluster.geometry.Clusters``); None: none
        self.cluster: Any = None

    def cta_xyz(self, c: Any) -> tuple[Any, Any, Any]:
        """The ``%ctaid`` (x, y, z) of CTA index ``c`` (an int or an array): x fastest,
        or cluster by cluster in a launch with clusters (:mod:`.cluster.geometry`)."""
        if self.cluster is not None:
            ids = self.cluster.ctaids[c]
            return ids[..., 0], ids[..., 1], ids[..., 2]
        gx, gy, _ = self.grid
        return c % gx, c // gx % gy, c // (gx * gy)

    def special(self, reg: str) -> np.ndarray:
        """The value of special register ``%reg`` for every thread (uint32)."""
        if reg in CLUSTER_REGS:
            return cluster_special(self, reg)
        bx, by, _ = self.block
        x, y, z = self.cta_xyz(self.cta)
        table = {"tid.x": self.tid % bx, "tid.y": self.tid // bx % by, "ntid.x": bx,
                 "ctaid.x": x, "ctaid.y": y, "ctaid.z": z, "nctaid.x": self.grid[0],
                 "nctaid.y": self.grid[1], "nctaid.z": self.grid[2],
                 "laneid": self.tid % 32, "warpid": self.tid // 32,
                 "smid": self.cta % SM_COUNT, "nsmid": SM_COUNT, "nwarpid": WARP_SLOTS}
        if reg.startswith("lanemask_"):  # the lanes below, at or above this one's
            lane = (self.tid % 32).astype(np.uint64)
            below, at = (np.uint64(1) << lane) - np.uint64(1), np.uint64(1) << lane
            table[reg] = {"eq": at, "lt": below, "le": below | at, "gt": ~(below | at),
                          "ge": ~below}[reg[9:]] & np.uint64(0xFFFFFFFF)
        return np.broadcast_to(np.asarray(table[reg], np.uint32), (self.n,)).copy()

    def fault(self, instr: Instr, what: str, message: str, thread: int | None = None,
              hint: str | None = None) -> TargetFault:
        """A :class:`TargetFault` at ``instr``; ``thread`` is a global linear thread id."""
        local, cta = (None, None) if thread is None else (
            int(self.tid[thread]), tuple(int(v) for v in self.cta_xyz(int(self.cta[thread]))))
        return TargetFault(what, message, kernel=self.fn.name, op=op_text(instr),
                           loc=instr.loc, thread=local, cta=cta, hint=hint)

    def failer(self, instr: Instr, who: np.ndarray) -> Callable[[int, str, str], None]:
        """A callback ``fail(k, what, message)`` raising the fault of thread ``who[k]``."""
        def fail(k: int, what: str, message: str) -> None:
            raise self.fault(instr, what, message, int(who[k]))
        return fail


class Lazy:
    """A register value made when an instruction first reads it: ``make()`` gives the
    array (once), ``dtype`` is its type beforehand, and ``keep`` is what its maker
    keeps for a later instruction of its own kind, which reads the value raw
    (:meth:`RegisterFile.raw`): a ``wgmma`` chain hands its accumulator matrices on
    with no scatter into, and gather out of, per-thread registers between steps."""

    __slots__ = ("_make", "_value", "dtype", "keep")

    def __init__(self, make: Callable[[], np.ndarray], dtype: np.dtype, keep: Any) -> None:
        self._make: Callable[[], np.ndarray] | None = make
        self._value: np.ndarray | None = None
        self.dtype = dtype
        self.keep = keep

    def get(self) -> np.ndarray:
        """The value (made on the first call)."""
        if self._make is not None:
            self._value, self._make = self._make(), None
        assert self._value is not None
        return self._value


def value(v: Any) -> Any:
    """``v`` itself, or the value of a :class:`Lazy` one."""
    return v.get() if type(v) is Lazy else v


class RegisterFile(list):
    """A register file (one value per slot) whose reads make :class:`Lazy` values."""

    def __getitem__(self, i: Any) -> Any:
        v = list.__getitem__(self, i)
        return v.get() if type(v) is Lazy else v

    def raw(self, i: int) -> Any:
        """The value of slot ``i`` as stored: a :class:`Lazy` one stays lazy."""
        return list.__getitem__(self, i)


def raw(regs: list[Any], i: int) -> Any:
    """Slot ``i`` of any register file as stored (:meth:`RegisterFile.raw`)."""
    return list.__getitem__(regs, i)


class TargetFrame:
    """The register file and the mask of active threads of one running region."""

    __slots__ = ("m", "mask", "regs")

    def __init__(self, regs: list[Any], mask: np.ndarray, m: Machine) -> None:
        self.regs = regs
        self.mask = mask
        self.m = m


Step = Callable[[TargetFrame], None]


@dataclass
class TargetBody:
    """A compiled block: its steps, argument slots and yielded slots."""

    steps: list[Step]
    args: list[int]
    yields: list[int]


#: op class -> factory of the step of one instruction
STEPS: dict[type[Op], Callable[[TargetCompiler, Instr], Step]] = {}


step_rule = rule_decorator(STEPS, "step rule")  # ``@step_rule(OpA, OpB)``


class TargetCompiler(Slots):
    """Assigns register slots and turns blocks into :class:`TargetBody` objects."""

    def __init__(self, m: Machine) -> None:
        super().__init__()
        self.m = m
        self._wide: set[Value] | None = None
        self._uses: dict[Value, list[Instr]] | None = None

    def users(self, v: Value) -> list[Instr]:
        """The instructions of the kernel that use ``v``, one entry per operand (none
        known for a kernel without a structured body: PTX text runs as a CFG)."""
        if self._uses is None:
            body = getattr(self.m.fn, "body", None)
            self._uses = uses(body) if isinstance(body, Block) else {}
        return self._uses.get(v, [])

    def wide_slots(self, values: list[Value]) -> list[int]:
        """The slots of ``values`` that hold wide ``f32`` values (``interp.target.wide``);
        none under the ``"hopper"`` tensor-core model, whose accumulators are plain f32
        registers as on the hardware (an ``add.f32`` of one rounds)."""
        if not values or self.m.tensor_cores == "hopper":
            return []
        if self._wide is None:
            self._wide = wide_registers(self.m.fn)
        return [self.slot(v) for v in values if v in self._wide]

    def body(self, block: Block) -> TargetBody:
        """Compile a block (its terminator only provides the yielded slots). A loop's
        carried register that is wide is widened on entry, where its first value may
        still be narrow."""
        args = [self.slot(a) for a in block.args]
        steps = [self.instr(i) for i in block.instrs if not i.op.terminator]
        wide_args = self.wide_slots(block.args)
        if wide_args:
            steps.insert(0, lambda fr: widen_slots(fr.regs, wide_args))
        term = block.terminator
        yields = [self.slot(v) for v in term.operands] if term is not None else []
        return TargetBody(steps, args, yields)

    def instr(self, instr: Instr) -> Step:
        """The step of one instruction."""
        factory = STEPS.get(type(instr.op))
        if factory is None:
            raise InterpretError(f"the Target IR interpreter has no rule for {instr.op.name}",
                                 loc=instr.loc, hint="add a rule in tessera.interp.target")
        step = factory(self, instr)
        outs = self.wide_slots(instr.results) if instr.regions else []
        if outs:  # a join of structured flow: wide on every thread, whichever path
            inner = step

            def step(fr: TargetFrame) -> None:
                inner(fr)
                widen_slots(fr.regs, outs)
        step.instr = instr  # type: ignore[attr-defined]
        return step


def run(steps: list[Step], fr: TargetFrame) -> None:
    """Run steps in order; an unexpected failure names the instruction and its line."""
    step: Any = None
    fr.m.bar.update(len(steps))
    try:
        for step in steps:
            step(fr)
    except InterpretError:
        raise
    except (TesseraError, ArithmeticError, ValueError, IndexError, TypeError) as err:
        instr = getattr(step, "instr", None)
        if instr is None:
            raise
        detail = err.message if isinstance(err, TesseraError) else str(err)
        raise InterpretError(f"kernel '{fr.m.fn.name}': {op_text(instr)} failed: {detail}",
                             loc=instr.loc, hint=getattr(err, "hint", None)) from err


def widen_mask(mask: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``mask`` shaped to broadcast against ``value`` (an extra axis for vectors)."""
    return mask[:, None] if value.ndim == 2 else mask


def merge(mask: np.ndarray, new: Any, old: Any) -> Any:
    """Per thread ``new`` where ``mask`` else ``old`` (a wide side keeps the result wide)."""
    new, old = value(new), value(old)
    if not isinstance(new, np.ndarray):
        return new  # tensor maps and other uniform objects
    return np.where(widen_mask(mask, new), new, old)


class Widened:
    """What a lazily widened register keeps: its ``narrow`` value, which a reader that
    gathers part of it (a ``wgmma`` accumulator) widens after the gather."""

    __slots__ = ("narrow",)

    def __init__(self, narrow: np.ndarray) -> None:
        self.narrow = narrow


def widen_slots(regs: list[Any], slots: list[int]) -> None:
    """Widen the ``f32`` values of ``slots`` exactly to float64 where they are narrow
    (lazily in a :class:`RegisterFile`)."""
    for s in slots:
        v = raw(regs, s)
        if v.dtype == F64:  # a lazy value that will be wide is not made here
            continue
        if isinstance(regs, RegisterFile) and isinstance(v, np.ndarray):
            regs[s] = Lazy(lambda v=v: v.astype(F64), F64, Widened(v))
        else:
            regs[s] = value(v).astype(F64)


def narrow(x: np.ndarray, elem: str) -> np.ndarray:
    """A register value as its PTX type's storage (a wide f32 value rounds once, RNE)."""
    if elem == "f32" and x.dtype == F64:
        return x.astype(F32)
    return x


__all__ = ["DTYPES", "F32", "F64", "STEPS", "Lazy", "Machine", "RegisterFile", "Step",
           "TargetBody", "TargetCompiler", "TargetFault", "TargetFrame", "Widened", "merge",
           "narrow", "op_text", "raw", "run", "step_rule", "value", "widen_mask", "widen_slots"]
