"""Compile Tile IR into lists of precompiled closures, and run them.

Every value of a kernel gets a slot in a register list; every instruction becomes one
closure ``step(frame)`` that reads its operand slots, makes one NumPy call for all
programs at once and writes its result slot. Running a block is a walk over its list
of steps: no per-op dispatch beyond the call. Control flow (:mod:`tessera.interp.tile.flow`) runs
regions in place when a condition is uniform and in compacted frames when it is not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import InterpretError, TesseraError
from tessera.interp.slots import Slots
from tessera.interp.tile.context import Ctx
from tessera.interp.tile.fastpaths.memo import coordinate_memo
from tessera.interp.tile.live import last_uses, releasing
from tessera.interp.tile.memory.access import broadcast_shape
from tessera.interp.tile.numeric import F32, num
from tessera.interp.tile.phase import quiet_accesses
from tessera.interp.tile.rules import IMPLS, mma_rule
from tessera.interp.tile.state import Reschedule, State
from tessera.ir.core import Block, Function, Instr, Op, Value, rule_decorator, walk
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import compute as C
from tessera.ir.dialects.tile import memory as M
from tessera.ir.types import TensorType


class Frame:
    """Registers, programs and launch state of one running block."""

    __slots__ = ("ctx", "regs", "st")

    def __init__(self, regs: list[Any], ctx: Ctx, st: State) -> None:
        self.regs = regs
        self.ctx = ctx
        self.st = st


Step = Callable[[Frame], None]


@dataclass
class Body:
    """A compiled block: steps, argument and yield slots, and the (slot, rank) of the
    outer values it uses (gathered into compacted frames)."""

    steps: list[Step]
    args: list[int]
    yields: list[int]
    liveins: list[tuple[int, int]] = field(default_factory=list)


def rank_of(v: Value) -> int:
    return v.type.rank if isinstance(v.type, TensorType) else 0


def run(steps: list[Step], fr: Frame) -> None:
    """Run steps in order; a failure outside the sanitizer names the op's source line."""
    step: Any = None
    try:
        for step in steps:
            step(fr)
    except (TesseraError, Reschedule):
        raise
    except Exception as err:
        raise InterpretError(f"{getattr(step, 'opname', 'a tile op')} failed: {err}",
                             loc=getattr(step, "loc", None),
                             hint="this is a simulator limitation or a kernel the verifier "
                                  "let through; simplify the op") from err


def fork(fr: Frame, sel: np.ndarray, liveins: list[tuple[int, int]]) -> Frame:
    """A frame for the programs at flat positions ``sel`` of ``fr``."""
    regs = list(fr.regs)
    for slot, rank in liveins:
        regs[slot] = fr.ctx.take(fr.regs[slot], rank, sel)
    return Frame(regs, fr.ctx.compact(sel), fr.st)


#: op class -> factory of a step (for ops that are more than a pure function)
STEPS: dict[type[Op], Callable[[Compiler, Instr], Step]] = {}


step_rule = rule_decorator(STEPS, "step rule")  # ``@step_rule(OpA, OpB)``


class Compiler(Slots):
    """Assigns slots and turns blocks into :class:`Body` objects."""

    def __init__(self, fast: bool, reference: bool = False) -> None:
        super().__init__()
        self.fast = fast
        #: the plain definition: no fusion, memo, quiet access or loop fast path
        self.reference = reference
        #: the fusions of every compiled block (consumer -> producer, see ``fusions``)
        self.fused: dict[Block, dict[Instr, Instr]] = {}
        #: shared accesses whose race-shadow entries nothing reads (see tile_phase)
        self.quiet: set[Instr] = set()
        #: a global write after which nothing in the launch can fail: a vectorised run
        #: need not save the tensor it writes (see memory.globals._planned_write)
        self.last: Instr | None = None

    def body(self, block: Block) -> Body:
        args = [self.slot(a) for a in block.args]
        fused = self.fused[block] = {} if self.reference else fusions(block)
        kept = [i for i in block.instrs if not i.op.terminator and i not in fused.values()]
        steps = [self.fuse(i, fused[i]) if i in fused else self.instr(i) for i in kept]
        # clear each tile value's register after its last use (see tile_live)
        steps = [releasing(step, [self.slot(v) for v in dead]) if dead else step
                 for step, dead in zip(steps, last_uses(block, kept, fused))]
        term = block.terminator
        yields = [self.slot(v) for v in term.operands] if term is not None else []
        defined = set(block.args)
        used: dict[Value, None] = {}
        for instr in walk(block):
            defined.update(instr.results)
            for region in instr.regions:
                for b in region.blocks:
                    defined.update(b.args)
            for v in instr.operands:
                used.setdefault(v, None)
        liveins = [(self.slot(v), rank_of(v)) for v in used if v not in defined]
        return Body(steps, args, yields, liveins)

    def instr(self, instr: Instr) -> Step:
        cls = type(instr.op)
        if cls in IMPLS:
            impl = IMPLS[cls](instr, self.fast)
            if _integral(instr) and instr.operands and not self.reference:
                # integer results of coordinates alone are the same in every launch of
                # a geometry (a constant is made once already)
                impl = coordinate_memo(impl)
            step = self._pure(instr, impl)
        elif cls in STEPS:
            step = STEPS[cls](self, instr)
        else:
            raise InterpretError(f"the tile simulator has no rule for {instr.op.name}",
                                 loc=instr.loc, hint="every Tile IR op needs a rule in "
                                 "tessera.interp.tile.rules or tile_exec")
        step.loc = instr.loc  # type: ignore[attr-defined]
        step.opname = instr.op.name  # type: ignore[attr-defined]
        return step

    def fuse(self, consumer: Instr, producer: Instr) -> Step:
        """One step for ``consumer`` and the ``producer`` of one of its operands."""
        step = FUSED[type(consumer.op)](self, consumer, producer)
        step.loc = producer.loc  # type: ignore[attr-defined]
        step.opname = f"{producer.op.name}+{consumer.op.name}"  # type: ignore[attr-defined]
        return step

    def _pure(self, instr: Instr, impl: Callable[..., Any]) -> Step:
        ins = [self.slot(v) for v in instr.operands]
        out = self.slot(instr.results[0])
        if not ins:
            def step0(fr: Frame) -> None:
                fr.regs[out] = impl()
            return step0
        if len(ins) == 1:
            (a,) = ins

            def step1(fr: Frame) -> None:
                r = fr.regs
                r[out] = impl(r[a])
            return step1
        if len(ins) == 2:
            a, b = ins

            def step2(fr: Frame) -> None:
                r = fr.regs
                r[out] = impl(r[a], r[b])
            return step2

        def stepn(fr: Frame) -> None:
            r = fr.regs
            r[out] = impl(*[r[i] for i in ins])
        return stepn


def _integral(instr: Instr) -> bool:
    """Whether ``instr`` has one integer or boolean tensor result (index arithmetic,
    masks)."""
    if len(instr.results) != 1 or not isinstance(instr.results[0].type, TensorType):
        return False
    return num(instr.results[0].type.element).kind in ("int", "bool")


def _mma_add(c: Compiler, add: Instr, mma: Instr) -> Step:
    """``acc + mma(a, b)`` as one ``mma(a, b, acc)``: the same sum, one array less."""
    other = add.operands[1] if add.operands[0] is mma.results[0] else add.operands[0]
    impl = IMPLS[C.Mma](Instr(mma.op, [*mma.operands, other], add.results, [], mma.loc),
                        c.fast)
    a, b, acc = (c.slot(v) for v in (*mma.operands, other))
    out = c.slot(add.results[0])

    def step(fr: Frame) -> None:
        r = fr.regs
        r[out] = impl(r[a], r[b], r[acc])
    return step


def row_reduced(instr: Instr) -> bool:
    """Whether ``instr``'s result is reduced along its rows (``tile.reduce`` over the
    last axis) in its block: a product laid out by columns serves that faster."""
    block = instr.parent
    result = instr.results[0]
    rank = result.type.rank if isinstance(result.type, TensorType) else 0
    return rank >= 2 and block is not None and any(
        isinstance(i.op, C.Reduce) and i.operands[0] is result and i.op.axis % rank == rank - 1
        for i in block.instrs)


def _mma_scale(c: Compiler, mul: Instr, mma: Instr) -> Step:
    """``mma(a, b) * y``: in fast mode the product is a fresh float32 array that nothing
    else holds, so the multiply writes into it (the same values, one array less)."""
    first = mul.operands[0] is mma.results[0]  # mma(a, b) * y, not y * mma(a, b)
    other = mul.operands[1] if first else mul.operands[0]
    product = mma_rule(mma, c.fast, columns=row_reduced(mul))
    scale = IMPLS[C.Mul](mul, c.fast)
    a, b, y = (c.slot(v) for v in (*mma.operands, other))
    out = c.slot(mul.results[0])

    def step(fr: Frame) -> None:
        r = fr.regs
        p, v = product(r[a], r[b]), r[y]
        if p.dtype == F32 and getattr(v, "dtype", None) == F32 and \
                broadcast_shape([p.shape, v.shape]) == p.shape:
            r[out] = np.multiply(p, v, out=p)
        else:
            r[out] = scale(p, v) if first else scale(v, p)
    return step


#: consumer op class -> factory of the step that also runs the consumer's producer
FUSED: dict[type[Op], Callable[[Compiler, Instr, Instr], Step]] = {C.Add: _mma_add,
                                                                   C.Mul: _mma_scale}
#: producer op classes whose result a plain global store may compute in place
STORE_PRODUCERS = (C.Add, C.Sub, C.Mul, C.Div)


def fusions(block: Block) -> dict[Instr, Instr]:
    """Consumers in ``block`` mapped to the producer they run with, each producer used
    only there: ``tile.add`` or ``tile.mul`` of an accumulator-free ``tile.mma``, and a
    global ``tile.store`` of an elementwise ``+ - * /``."""
    counts: dict[Value, int] = {}
    for instr in walk(block):
        for v in instr.operands:
            counts[v] = counts.get(v, 0) + 1
    producers = {i.results[0]: i for i in block.instrs
                 if (isinstance(i.op, C.Mma) and len(i.operands) == 2)
                 or isinstance(i.op, STORE_PRODUCERS)}
    found: dict[Instr, Instr] = {}
    taken: set[Instr] = set()
    for instr in block.instrs:
        if isinstance(instr.op, (C.Add, C.Mul)):
            candidates = [p for p in map(producers.get, instr.operands)
                          if p is not None and isinstance(p.op, C.Mma)]
        elif type(instr.op) is M.Store and isinstance(instr.operands[0].type, MemRefType) \
                and instr.operands[0].type.space == "global":
            p = producers.get(instr.operands[1])
            candidates = [p] if p is not None and not isinstance(p.op, C.Mma) else []
        else:
            continue
        for p in candidates:
            if counts.get(p.results[0]) == 1 and p not in taken:
                found[instr] = p
                taken.add(p)
                break
    return found


@dataclass
class Program:
    """A kernel compiled for the simulator (one per specialisation and mode)."""

    fn: Function
    body: Body
    nslots: int
    fast: bool


def compile_kernel(fn: Function, fast: bool, reference: bool = False) -> Program:
    """Compile a ``tile.kernel`` function into closures; ``reference`` compiles the
    plain definition, op by op, with every fast path of the simulator left out (the
    fusions, memo tables, quiet race shadows, loop fast paths and deferred ``mma``)."""
    from tessera.interp.tile import flow as tile_flow  # noqa: F401 - register steps
    from tessera.interp.tile.memory import steps as tile_memsteps  # noqa: F401 - register steps

    c = Compiler(fast, reference)
    c.quiet = set() if reference else quiet_accesses(fn)
    term = fn.body.terminator
    kept = [i for i in fn.body.instrs if not i.op.terminator]
    if not reference and kept and isinstance(kept[-1].op, (M.Store, M.StoreVector, M.Update)) \
            and (term is None or not term.operands):
        c.last = kept[-1]  # the kernel's final statement is a store (saxpy, a GEMM's C)
    body = c.body(fn.body)
    if term is not None:
        body.steps.append(c.instr(term))
    return Program(fn, body, len(c.slots), fast)


__all__ = ["FUSED", "STEPS", "Body", "Compiler", "Frame", "Program", "compile_kernel", "fork",
           "fusions", "rank_of", "run", "step_rule"]
