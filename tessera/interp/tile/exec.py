"""Compile Tile IR into lists of precompiled closures, and run them.

Every value of a kernel gets a slot in a register list; every instruction becomes one
closure ``step(frame)`` that reads its operand slots, makes one NumPy call for all
programs at once and writes its result slot. Running a block is a walk over its list
of steps: no per-op dispatch beyond the call. The steps are the reference rules
(:mod:`tessera.interp.tile.reference`: control flow, memory; :mod:`.rules` for values),
each wrapped by the enabled fast paths of its op (:mod:`tessera.interp.tile.fastpaths`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import InterpretError, TesseraError
from tessera.interp.slots import Slots
from tessera.interp.tile import fastpaths
from tessera.interp.tile.context import Ctx
from tessera.interp.tile.fastpaths.memo import coordinate_memo
from tessera.interp.tile.live import last_uses, releasing
from tessera.interp.tile.numeric import F64, num
from tessera.interp.tile.rules import IMPLS
from tessera.interp.tile.state import Reschedule, State
from tessera.interp.tile.wide import held_wide, possibly_exact, possibly_wide
from tessera.ir.core import Block, Function, Instr, Op, Value, rule_decorator, walk
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.numerics.reductions.accumulator import to_exact


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
    #: the step that runs each instruction (a fused producer has none of its own)
    step_of: dict[Instr, Step] = field(default_factory=dict)


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
    """Assigns slots and turns blocks into :class:`Body` objects: each op's reference
    step, wrapped by the ``enabled`` fast paths (none: the reference definition)."""

    def __init__(self, fast: bool, enabled: frozenset[str] = frozenset(),
                 fn: Function | None = None) -> None:
        super().__init__()
        self.fast = fast
        self.fn = fn
        #: the names of the fast paths compiled in (``fastpaths.REGISTRY``)
        self.enabled = enabled
        self.wrappers = fastpaths.wrappers(enabled)
        #: the fusions of every compiled block (consumer -> producer, see
        #: ``fastpaths.fusion``)
        self.fused: dict[Block, dict[Instr, Instr]] = {}
        #: a global write after which nothing in the launch can fail (``last_store``)
        self.last: Instr | None = None
        self.bodies: dict[Block, Body] = {}
        self.analyses: dict[str, Any] = {}

    def cached(self, key: str, analyse: Callable[[Function], Any]) -> Any:
        """``analyse(fn)`` of the kernel being compiled, computed once."""
        if key not in self.analyses:
            self.analyses[key] = analyse(self.fn)  # type: ignore[arg-type]
        return self.analyses[key]

    def body(self, block: Block) -> Body:
        """The compiled ``block`` (once: a loop's fast paths share its body)."""
        found = self.bodies.get(block)
        if found is None:
            found = self.bodies[block] = self._body(block)
        return found

    def _body(self, block: Block) -> Body:
        args = [self.slot(a) for a in block.args]
        fused = self.fused[block] = self._fusions(block)
        kept = [i for i in block.instrs if not i.op.terminator and i not in fused.values()]
        steps = [self.fuse(i, fused[i]) if i in fused else self.instr(i) for i in kept]
        # clear each tile value's register after its last use (see tile_live)
        steps = [releasing(step, [self.slot(v) for v in dead]) if dead else step
                 for step, dead in zip(steps, last_uses(block, kept, fused))]
        step_of = dict(zip(kept, steps))
        wide_args = self.wide_slots(block.args)
        if wide_args:  # a loop's carried accumulator: wide from its first trip on
            steps.insert(0, lambda fr: widen_slots(fr.regs, wide_args))
        exact_args = self.exact_slots(block.args)
        if exact_args:  # a loop's carried exact accumulator: exact from its first trip on
            steps.insert(0, lambda fr: exact_slots(fr.regs, exact_args))
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
        return Body(steps, args, yields, liveins, step_of)

    def _fusions(self, block: Block) -> dict[Instr, Instr]:
        if not self.enabled & {"fused_mma_add", "fused_mma_scale", "fused_store"}:
            return {}
        from tessera.interp.tile.fastpaths.fusion import fusions
        return fusions(block, self.enabled, self.fast)

    def instr(self, instr: Instr) -> Step:
        cls = type(instr.op)
        if cls in IMPLS:
            impl = IMPLS[cls](instr, self.fast)
            if _integral(instr) and instr.operands and "coordinate_memo" in self.enabled:
                # integer results of coordinates alone are the same in every launch of
                # a geometry (a constant is made once already)
                fastpaths.REGISTRY["coordinate_memo"].taken += 1
                impl = coordinate_memo(impl)
            step = self._pure(instr, impl)
        elif cls in STEPS:
            step = STEPS[cls](self, instr)
        else:
            raise InterpretError(f"the tile simulator has no rule for {instr.op.name}",
                                 loc=instr.loc, hint="every Tile IR op needs a rule in "
                                 "tessera.interp.tile.rules or tile_exec")
        for path in self.wrappers.get(cls, ()):
            step = path.factory(self, instr, step) or step  # type: ignore[misc]
        if instr.regions:
            step = self._widening(instr, step)
        step.loc = instr.loc  # type: ignore[attr-defined]
        step.opname = instr.op.name  # type: ignore[attr-defined]
        return step

    def wide_slots(self, values: list[Value]) -> list[int]:
        """The slots of ``values`` that exact mode holds wide (:mod:`.wide`): none in
        fast mode, where nothing is wide."""
        if self.fast or not values:
            return []
        wide = self.cached("wide", possibly_wide)
        return [self.slot(v) for v in values if held_wide(v, wide)]

    def exact_slots(self, values: list[Value]) -> list[int]:
        """The slots of ``values`` that exact mode holds as exact accumulators
        (:func:`.wide.possibly_exact`): none in fast mode."""
        if self.fast or not values:
            return []
        exact = self.cached("exact", possibly_exact)
        return [self.slot(v) for v in values if v in exact]

    def _widening(self, instr: Instr, step: Step) -> Step:
        """``step`` of a structured op, followed by the exact widening of the results
        that are wide slots (whichever path, or fast path, produced them), and the
        conversion of those that are exact accumulators."""
        outs = self.wide_slots(instr.results)
        exacts = self.exact_slots(instr.results)
        if not outs and not exacts:
            return step

        def widening(fr: Frame) -> None:
            step(fr)
            widen_slots(fr.regs, outs)
            exact_slots(fr.regs, exacts)
        return widening

    def fuse(self, consumer: Instr, producer: Instr) -> Step:
        """One step for ``consumer`` and the ``producer`` of one of its operands."""
        from tessera.interp.tile.fastpaths.fusion import fused_step
        step = fused_step(self, consumer, producer)
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


def widen_slots(regs: list[Any], slots: list[int]) -> None:
    """Widen the values of ``slots`` exactly to float64 where they are narrow (a
    deferred product, :class:`~.fastpaths.pending.PendingMma`, is wide when forced)."""
    for s in slots:
        v = regs[s]
        dt = getattr(v, "dtype", None)
        if dt is not None and dt != F64 and isinstance(v, (np.ndarray, np.generic)):
            regs[s] = v.astype(F64)


def exact_slots(regs: list[Any], slots: list[int]) -> None:
    """Make the values of ``slots`` exact accumulators where they are not (a narrow
    start, or a selection that mixed an accumulator with narrow values)."""
    for s in slots:
        v = regs[s]
        if isinstance(v, (np.ndarray, np.generic)):
            regs[s] = to_exact(v)


def _integral(instr: Instr) -> bool:
    """Whether ``instr`` has one integer or boolean tensor result (index arithmetic,
    masks)."""
    if len(instr.results) != 1 or not isinstance(instr.results[0].type, TensorType):
        return False
    return num(instr.results[0].type.element).kind in ("int", "bool")


@dataclass
class Program:
    """A kernel compiled for the simulator (one per specialisation and mode)."""

    fn: Function
    body: Body
    nslots: int
    fast: bool


def compile_kernel(fn: Function, fast: bool, reference: bool = False) -> Program:
    """Compile a ``tile.kernel`` function into closures; ``reference`` compiles the
    plain definition, op by op, with every fast path of the simulator left out;
    otherwise every enabled one (``fastpaths.enabled()``) is compiled in."""
    from tessera.interp.tile.reference import flow, masked, memory  # noqa: F401 - register steps

    fastpaths.load()
    c = Compiler(fast, frozenset() if reference else fastpaths.enabled(), fn)
    term = fn.body.terminator
    kept = [i for i in fn.body.instrs if not i.op.terminator]
    if (
        "last_store" in c.enabled
        and kept
        and isinstance(
            kept[-1].op, (tile_memory.Store, tile_memory.StoreVector, tile_memory.Update)
        )
        and (term is None or not term.operands)
    ):
        c.last = kept[-1]  # the kernel's final statement is a store (saxpy, a GEMM's C)
    body = c.body(fn.body)
    if term is not None:
        body.steps.append(c.instr(term))
    return Program(fn, body, len(c.slots), fast)


__all__ = ["STEPS", "Body", "Compiler", "Frame", "Program", "compile_kernel", "fork",
           "rank_of", "run", "step_rule", "widen_slots"]
