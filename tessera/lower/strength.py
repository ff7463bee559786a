"""Integer division by a constant power of two, written as the shifts and masks it is.

ptxas 13.5 assembles ``div`` and ``rem`` of 32-bit integers through the floating-point
reciprocal (``I2F``, ``MUFU.RCP``, ``F2I`` and an integer correction) even when the
divisor is an immediate power of two: about twenty instructions on a dependent chain,
in the main loop of every pipelined kernel (a ring slot's stage and phase, a loop's
iteration number). The emitter (:meth:`tessera.lower.emit.TargetEmitter.bin`) asks this
module first, and for a divisor ``2^k`` emits:

* unsigned: ``a / 2^k = a >> k`` and ``a % 2^k = a & (2^k - 1)``;
* signed, with ``a`` known non-negative (:func:`nonneg`): the same;
* either, with ``0 <= a < d`` provable (:func:`below`: the CTA's thread count bounds
  ``%tid.x``, and a thread's element indices follow from it): ``a / d = 0`` and
  ``a % d = a``, for any positive ``d``;
* signed otherwise, as PTX defines it (the quotient rounds toward zero, the remainder
  takes the dividend's sign): ``q = (a + ((a >> 31) & (2^k - 1))) >> k`` with
  arithmetic shifts, and ``r = a - (q << k)``. The bias is added only to a negative
  ``a``, where it cannot overflow.

Every form gives the PTX ISA's result for every input; the tests run both in the Target
IR interpreter over edge values and random ones.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from tessera.ir.core import Block, Instr, Value
from tessera.ir.dialects.target.ops import Binary, Const, Cvt, Selp, Special

if TYPE_CHECKING:
    from tessera.lower.emit import TargetEmitter

#: blocks of ``ptx.for`` loops whose index counts up from a non-negative start, by id
_COUNTING: weakref.WeakValueDictionary[int, Block] = weakref.WeakValueDictionary()
#: integer ops whose result is non-negative when all their operands are
_CLOSED = ("add", "mul", "min", "max", "div", "rem")
#: how far :func:`nonneg` and :func:`below` follow a value's operands
DEPTH = 8
#: threads of the CTA being emitted (``%tid.x`` is below it), once the lowering knows
#: its final geometry; None before (a warp-specialised CTA grows while it is planned)
_THREADS: ContextVar[int | None] = ContextVar("threads", default=None)


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Within the block: the CTA has ``n`` threads along x (:func:`below` uses it)."""
    token = _THREADS.set(n)
    try:
        yield
    finally:
        _THREADS.reset(token)


def const_int(v: Value) -> int | None:
    """The integer an immediate holds, or None."""
    owner = v.owner
    if isinstance(owner, Instr) and isinstance(owner.op, Const) \
            and isinstance(owner.op.value, int) and not isinstance(owner.op.value, bool):
        return owner.op.value
    return None


def mark_counting(block: Block, lo: Value, step: Value) -> None:
    """Record that ``block``'s first argument, a loop index from ``lo`` by ``step``,
    is never negative (a non-negative start and a positive constant step)."""
    inc = const_int(step)
    if inc is not None and inc > 0 and nonneg(lo):
        _COUNTING[id(block)] = block


def nonneg(v: Value, depth: int = DEPTH) -> bool:
    """``v`` is provably at least 0 and below 2^31 when read as a signed integer:
    constants, special registers (thread and CTA indices), counting loop indices, and
    sums, products, minima, maxima, quotients and remainders of such values, which
    index arithmetic never lets overflow."""
    owner = v.owner
    if isinstance(owner, Block):
        return _COUNTING.get(id(owner)) is owner and owner.args[0] is v
    if not isinstance(owner, Instr) or depth == 0:
        return False
    op, args = owner.op, owner.operands
    if isinstance(op, Const):
        value = const_int(v)
        return value is not None and 0 <= value < 2 ** 31
    if isinstance(op, Special):
        return True
    if isinstance(op, Cvt):
        return op.to[0] in "us" and op.frm[0] in "us" and nonneg(args[0], depth - 1)
    if isinstance(op, Selp):
        return nonneg(args[0], depth - 1) and nonneg(args[1], depth - 1)
    if isinstance(op, Binary):
        if op.op in _CLOSED and op.mode != "hi":
            return all(nonneg(a, depth - 1) for a in args)
        if op.op == "and":
            return any(nonneg(a, depth - 1) for a in args)
        if op.op == "shr":
            return op.type[0] == "u" or nonneg(args[0], depth - 1)
    return False


def below(v: Value, depth: int = DEPTH) -> int | None:
    """An exclusive upper bound of the non-negative integer ``v`` (None where none is
    known): immediates, ``%tid.x`` under :func:`threads`, and the index arithmetic
    built from them (``+ * & >> / %``, ``min``, ``max``, ``selp``, integer ``cvt``)."""
    owner = v.owner
    if not isinstance(owner, Instr) or depth == 0:
        return None
    op, args = owner.op, owner.operands
    value = const_int(v)
    if value is not None:
        return value + 1 if value >= 0 else None
    if isinstance(op, Special):
        return _THREADS.get() if op.reg == "tid.x" else None
    if isinstance(op, Cvt) and op.to[0] in "us" and op.frm[0] in "us":
        return below(args[0], depth - 1)
    bounds = [below(a, depth - 1) for a in args[:2]]
    if isinstance(op, Selp):
        return None if None in bounds else max(bounds)  # type: ignore[type-var]
    if not isinstance(op, Binary) or op.mode == "hi":
        return None
    a, b = bounds
    d = const_int(args[1])
    if op.op == "and":
        known = [x for x in bounds if x is not None]
        return min(known) if known and nonneg(v) else None
    if op.op in ("div", "shr") and a is not None and d is not None and d >= 0:
        step = d if op.op == "div" else 2 ** d
        return (a - 1) // step + 1 if step > 0 else None
    if op.op == "rem" and d is not None and d > 0 and nonneg(args[0]):
        return d if a is None else min(a, d)
    if a is None or b is None:
        return None
    if op.op == "add":
        return a + b - 1
    if op.op == "mul":
        return (a - 1) * (b - 1) + 1
    if op.op in ("min", "max"):
        return (min if op.op == "min" else max)(a, b)
    return None


def divide(e: TargetEmitter, op: str, a: Value, b: Value, type: str) -> Value | None:
    """``a / b`` or ``a % b`` (``op``) of integers as shifts and masks, or None where
    ``b`` is not a constant power of two (the caller emits ``div``/``rem``)."""
    d = const_int(b)
    if op not in ("div", "rem") or type[0] not in "us" or d is None or d <= 0:
        return None
    top = below(a)
    if top is not None and top <= d and nonneg(a):  # 0 <= a < d
        return e.const(0, type) if op == "div" else a
    if d & (d - 1):
        return None
    k = d.bit_length() - 1
    mask = e.const(d - 1, type)
    shift = e.const(k, "u32")
    if type[0] == "u" or nonneg(a):
        if op == "rem":
            return e.bin("and", a, mask, type)
        return a if k == 0 else e.bin("shr", a, shift, type)
    bits = 64 if type.endswith("64") else 32
    sign = e.bin("shr", a, e.const(bits - 1, "u32"), type)  # 0 or -1: an arithmetic shift
    q = e.bin("shr", e.bin("add", a, e.bin("and", sign, mask, type), type), shift, type)
    return q if op == "div" else e.bin("sub", a, e.bin("shl", q, shift, type), type)


__all__ = ["DEPTH", "below", "const_int", "divide", "mark_counting", "nonneg", "threads"]
