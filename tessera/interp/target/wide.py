"""Which ``f32`` registers of a Target IR kernel are *wide*: decided by its data flow.

The tile simulator holds an exact ``mma`` accumulation as float64 in every value the
Tile IR's data flow can bring it to, on every path (:mod:`tessera.interp.tile.wide`,
docs/kernels.md section 7); a lowered kernel must round where it does. This
interpreter holds a wide ``f32`` register as a float64 array, made by ``mma.sync`` /
``wgmma`` and kept by ``add``, ``sub``, ``neg``, ``abs``, ``mov``, ``selp``, the packing
of register vectors and their unpacking (:mod:`tessera.interp.target.regs`,
:mod:`tessera.interp.target.convert`). :func:`wide_registers` follows the same rules
through the kernel, and through the slots of ``ptx.if`` / ``ptx.for`` / ``ptx.while``
(least fixpoint over loops); the compiler widens those slots exactly where a narrow
value enters them (:meth:`~tessera.interp.target.state.TargetCompiler.body`), so a
register is wide on every thread or on none, whatever paths the threads took.

:func:`may_be_wide` asks the same question backwards about one register while a kernel
is being built (the lowering drops the rounding of a value that cannot be wide).
"""

from __future__ import annotations

from tessera.ir.core import Function, Instr, Value
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target import async_ops as target_async
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.structured import StructuredOp, forward_closure, value_slots


def _f32(v: Value) -> bool:
    return isinstance(v.type, RegType) and v.type.elem == "f32"


def keeps_wide(instr: Instr) -> bool:
    """Whether ``instr`` passes a wide operand on to its results unrounded."""
    op = instr.op
    if isinstance(op, target_ops.Binary):
        return op.op in ("add", "sub") and op.type == "f32"
    if isinstance(op, target_ops.Unary):
        return op.op == "mov" or (op.op in ("neg", "abs") and op.type == "f32")
    if isinstance(op, target_ops.Pack):  # a vector of the operands (not a bit concat)
        return instr.results[0].type.count > 1  # type: ignore[attr-defined]
    if isinstance(op, target_ops.Unpack):  # a vector split into its elements
        src = instr.operands[0].type
        return isinstance(src, RegType) and src.count == op.count and src.elem == op.type
    return isinstance(op, target_ops.Selp)


def _makes_wide(instr: Instr) -> bool:
    return isinstance(instr.op, (target_async.MmaSync, target_async.Wgmma))


def wide_registers(fn: Function) -> set[Value]:
    """The ``f32`` registers of ``fn`` that hold float64 values."""
    return forward_closure(fn, _makes_wide, keeps_wide, _f32)


def may_be_wide(v: Value) -> bool:
    """Whether the ``f32`` register ``v`` can be wide, decided from the instructions that
    made it by the rules of :func:`wide_registers` followed backwards: an ``mma`` result,
    or what an instruction that :func:`keeps_wide` or a structured slot made of one. A
    region argument (a loop's carried value) counts as possibly wide."""
    seen: set[Value] = set()
    todo = [v]
    while todo:
        x = todo.pop()
        if x in seen or not _f32(x):
            continue
        seen.add(x)
        owner = x.owner
        if not isinstance(owner, Instr) or _makes_wide(owner):
            return True
        if isinstance(owner.op, StructuredOp):
            todo += [s for sources, targets in value_slots(owner) if x in targets
                     for s in sources]
        elif keeps_wide(owner):
            todo += owner.operands
    return False


__all__ = ["keeps_wide", "may_be_wide", "wide_registers"]
