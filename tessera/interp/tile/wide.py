"""Which tile values are *wide*: a property of the kernel's data flow, not of a run.

In exact mode an ``mma`` result is held as float64 and rounded once, when something
other than addition uses it (:mod:`tessera.interp.tile.numeric`, docs/kernels.md
section 7). Whether a value is wide is decided from the Tile IR alone: ``mma`` results
are, the results of the ops of :data:`~tessera.interp.tile.rules.WIDE_OK` with a wide
operand are, and so is every *slot* of structured control flow (a ``tile.if``'s
result, a loop's carried value, its region arguments and its result) into which a
wide value can flow, found as a least fixpoint over loops. A narrow value that reaches
a wide slot (a loop's ``zeros`` start, the branch that scaled the accumulator) is
widened exactly there, so the later ``acc + x`` adds in float64 on every path.

Deciding it statically makes every tile's bits a function of its own path: tiles that
run together, in a group or in the vectorised schedule's merged frames, never change
how another tile rounds. The PTX lowering uses the same set
(:func:`possibly_wide`) to refuse what a GPU cannot reproduce, and the Target IR
interpreter widens its joins alike (:mod:`tessera.interp.target.wide`).
"""

from __future__ import annotations

from tessera.interp.tile.numeric import num
from tessera.interp.tile.rules import WIDE_OK
from tessera.ir.core import Function, Instr, Value
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.structured import forward_closure, value_slots
from tessera.ir.types import TensorType


def possibly_wide(fn: Function) -> set[Value]:
    """The values of ``fn`` that hold a wide accumulation in exact mode: ``mma``
    results and what ``WIDE_OK`` ops and control-flow slots pass them to (a least
    fixpoint over loops). Only float values whose element is narrower than f64 are
    actually held wide (:func:`held_wide`)."""
    return forward_closure(fn, lambda instr: isinstance(instr.op, tile_compute.Mma)
                           and not instr.op.exact,
                           lambda instr: isinstance(instr.op, WIDE_OK))


def possibly_exact(fn: Function) -> set[Value]:
    """The values of ``fn`` that hold an exact accumulator in exact mode: the results of
    ``mma`` with ``exact = true``, of carried exact sums (``tile.reduce`` with an
    accumulator operand) and the control-flow slots they flow into (a narrow
    value reaching such a slot, a loop's ``zeros`` start, is made exact there). Any
    other op rounds an exact operand once (:mod:`tessera.interp.tile.numeric`)."""
    return forward_closure(fn, _makes_exact, lambda instr: False)


def _makes_exact(instr: Instr) -> bool:
    """An exact ``mma``, or an exact sum that continues an accumulator."""
    op = instr.op
    if isinstance(op, tile_compute.Mma):
        return op.exact
    return isinstance(op, tile_compute.Reduce) and len(instr.operands) == 2 and \
        op.kind == "sum"


def held_wide(v: Value, wide: set[Value]) -> bool:
    """Whether exact mode holds ``v`` as float64 although its element is narrower."""
    t = v.type
    return v in wide and isinstance(t, TensorType) and num(t.element).can_be_wide


__all__ = ["held_wide", "possibly_exact", "possibly_wide", "value_slots"]
