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

import operator
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from tessera.ir.core import Block, Instr, Value
from tessera.ir.dialects.target.ops import Binary, Const, Cvt, Selp, Special

if TYPE_CHECKING:
    from tessera.lower.emit import TargetEmitter

#: blocks of ``ptx.for`` loops whose index counts up from a non-negative start, by id
_COUNTING: weakref.WeakValueDictionary[int, Block] = weakref.WeakValueDictionary()
#: how far :func:`span` follows a value's operands
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


#: what is known of an integer: inclusive lower and upper bounds, None where unknown
Span = tuple[int | None, int | None]
UNKNOWN: Span = (None, None)


def span(v: Value, depth: int = DEPTH) -> Span:
    """The bounds of the integer ``v`` as index arithmetic computes it: immediates,
    special registers (at least 0; ``%tid.x`` below :func:`threads`), counting loop
    indices, and ``+ * / % & >> min max selp`` and integer ``cvt`` of those, which index
    arithmetic never lets overflow."""
    owner = v.owner
    if isinstance(owner, Block):
        counting = _COUNTING.get(id(owner)) is owner and owner.args[0] is v
        return (0, None) if counting else UNKNOWN
    if not isinstance(owner, Instr) or depth == 0:
        return UNKNOWN
    op, args = owner.op, owner.operands
    value = const_int(v)
    if value is not None:
        return (value, value)
    if isinstance(op, Special):
        n = _THREADS.get() if op.reg == "tid.x" else None
        return (0, None if n is None else n - 1)
    if isinstance(op, Cvt):
        return span(args[0], depth - 1) if op.to[0] in "us" and op.frm[0] in "us" \
            else UNKNOWN
    if not isinstance(op, (Binary, Selp)) or getattr(op, "mode", "") == "hi":
        return UNKNOWN
    (alo, ahi), (blo, bhi) = (span(x, depth - 1) for x in args[:2])
    kind = "selp" if isinstance(op, Selp) else op.op
    if kind == "selp":
        return (_both(min, alo, blo), _both(max, ahi, bhi))
    if kind == "min":
        return (_both(min, alo, blo), _either(min, ahi, bhi))
    if kind == "max":
        return (_either(max, alo, blo), _both(max, ahi, bhi))
    if kind == "add":
        return (_both(operator.add, alo, blo), _both(operator.add, ahi, bhi))
    if alo is None or alo < 0:  # the rules below hold for a non-negative operand
        if kind == "and" and blo is not None and blo >= 0:
            return (0, bhi)
        return (0, None) if kind == "shr" and op.type[0] == "u" else UNKNOWN
    if kind == "mul" and blo is not None and blo >= 0:
        return (alo * blo, _both(operator.mul, ahi, bhi))
    if kind in ("div", "rem") and blo is not None and blo >= 1:
        if kind == "rem":
            return (0, _either(min, ahi, None if bhi is None else bhi - 1))
        return (alo // bhi if bhi else 0, None if ahi is None else ahi // blo)
    if kind == "and":  # at most either non-negative operand
        return (0, _either(min, ahi, bhi if blo is not None and blo >= 0 else None))
    shift = const_int(args[1])
    if kind == "shr" and shift is not None and shift >= 0:
        return (alo >> shift, None if ahi is None else ahi >> shift)
    return UNKNOWN


def _both(f: Callable[[int, int], int], x: int | None, y: int | None) -> int | None:
    """``f(x, y)``, known only where both are."""
    return None if x is None or y is None else f(x, y)


def _either(f: Callable[[int, int], int], x: int | None, y: int | None) -> int | None:
    """``f(x, y)`` of those known (a bound that holds whichever is taken)."""
    return y if x is None else x if y is None else f(x, y)


def nonneg(v: Value) -> bool:
    """``v`` is provably at least 0 and below 2^31 when read as a signed integer
    (:func:`span`)."""
    lo, hi = span(v)
    return lo is not None and lo >= 0 and (hi is None or hi < 2 ** 31)


def below(v: Value) -> int | None:
    """An exclusive upper bound of the non-negative integer ``v``, or None where none is
    known (:func:`span`)."""
    lo, hi = span(v)
    return hi + 1 if lo is not None and lo >= 0 and hi is not None else None


def divide(e: TargetEmitter, op: str, a: Value, b: Value, type: str) -> Value | None:
    """``a / b`` or ``a % b`` (``op``) of integers as shifts and masks, or None where
    ``b`` is not a constant power of two (the caller emits ``div``/``rem``)."""
    d = const_int(b)
    if op not in ("div", "rem") or type[0] not in "us" or d is None or d <= 0:
        return None
    lo, hi = span(a)
    if lo is not None and lo >= 0 and hi is not None and hi < d:  # 0 <= a < d
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


__all__ = ["DEPTH", "UNKNOWN", "Span", "below", "const_int", "divide", "mark_counting", "nonneg",
           "span", "threads"]
