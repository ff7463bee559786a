"""Integer values of a lowered kernel evaluated for every CTA (or thread) of its
launch, while compiling.

A tile's window into global memory (``C[tile_m:tile_m + BM, tile_n:tile_n + BN]``)
is address arithmetic on ``%ctaid``, the launch's sizes, constants and kernel
parameters. Evaluating it for each CTA tells which CTAs write the same window, which
the ordered tensor updates of :mod:`tessera.lower.rules.ordered_tiles` need to know.
The evaluation is vectorised over the CTAs (one NumPy ``int64`` per CTA) and follows
the PTX ISA's integer rules: results wrap to their register's width, ``div``/``rem``
truncate toward zero, ``shr`` is arithmetic on signed types. A value this cannot
evaluate (a load, ``%tid``, a float) gives ``None``.
"""

from __future__ import annotations

import numpy as np

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import REG_TYPES
from tessera.ir.dialects.target import ops as target_ops

#: how deep an address computation may nest before it is taken as not evaluable
MAX_DEPTH = 96
#: threads evaluated together by :func:`thread_values`
CHUNK = 1 << 18
_OPS = {"add", "sub", "mul", "div", "rem", "shl", "shr", "and", "or", "xor", "min",
           "max"}

_LOGIC = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
#: integer comparisons (the unsigned spellings compare the unsigned values, which the
#: registers of an unsigned type hold)
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
            "hi": np.greater, "hs": np.greater_equal}


def _wrap(x: np.ndarray, rtype: str) -> np.ndarray:
    """``x`` as a register of ``rtype`` holds it (two's complement, its width)."""
    bits, signed = _int_type(rtype)
    if bits >= 64:
        return x
    x = x & ((1 << bits) - 1)
    return x - ((x >> (bits - 1)) << bits) if signed else x


def _int_type(rtype: str) -> tuple[int, bool]:
    bits = REG_TYPES[rtype][0]
    return bits, rtype.startswith("s")


class CtaValues:
    """Evaluates integer :class:`Value` s for each CTA of a grid of ``ctas x batch``
    (``%ctaid.x``, ``%ctaid.y``) of ``block`` threads, or with ``threads`` for each
    thread of it (``%tid.x`` too); each kernel parameter in ``params`` is a distinct
    symbolic base far from the others, so that addresses in different arguments never
    compare equal."""

    def __init__(self, ctas: int, batch: int, block: int, params: list[Value],
                 threads: bool = False, span: range | None = None) -> None:
        per = block if threads else 1
        span = range(ctas * batch * per) if span is None else span
        linear = np.arange(span.start, span.stop, dtype=np.int64)  # these CTAs or threads
        cta = linear // per
        whole = {"nctaid.x": ctas, "nctaid.y": batch, "nctaid.z": 1, "ntid.x": block,
                 "ntid.y": 1, "ntid.z": 1, "ctaid.z": 0, "tid.y": 0, "tid.z": 0}
        self.sregs = {"ctaid.x": cta % ctas, "ctaid.y": cta // ctas,
                      **{name: np.full_like(linear, v) for name, v in whole.items()}}
        if threads:
            self.sregs["tid.x"] = linear % per
        self.params = {id(p): (k + 1) << 44 for k, p in enumerate(params)}
        self.n = len(linear)
        self._memo: dict[int, np.ndarray | None] = {}

    def __call__(self, v: Value) -> np.ndarray | None:
        """``v`` in every CTA (or thread) of the span, in linear order, or None where it
        is not evaluable."""
        return self._eval(v, 0)

    def _eval(self, v: Value, depth: int) -> np.ndarray | None:
        key = id(v)
        if key not in self._memo:
            self._memo[key] = self._compute(v, depth)
        return self._memo[key]

    def _compute(self, v: Value, depth: int) -> np.ndarray | None:
        if id(v) in self.params:
            return np.full(self.n, self.params[id(v)], np.int64)
        owner = v.owner
        if not isinstance(owner, Instr) or depth > MAX_DEPTH:
            return None
        op = owner.op
        if isinstance(op, target_ops.Special):
            return self.sregs.get(op.reg)
        if isinstance(op, target_ops.Const):
            if op.type not in REG_TYPES or op.type[0] not in "usb" or op.type == "pred":
                return None
            return np.full(self.n, _wrap(np.int64(int(op.value)), op.type), np.int64)
        args = [self._eval(x, depth + 1) for x in owner.operands]
        if any(a is None for a in args):
            return None
        if isinstance(op, target_ops.Cvt) and op.frm[0] in "us" and op.to[0] in "us":
            return _wrap(args[0], op.to)  # type: ignore[arg-type]
        if isinstance(op, target_ops.Binary) and op.type == "pred" and op.op in _LOGIC:
            return _LOGIC[op.op](*args)  # type: ignore[arg-type]
        if isinstance(op, target_ops.Binary) and op.type[0] in "usb" and op.op in _OPS and \
                op.mode != "hi":  # mul.hi is not an address computation's
            return _binary(op, *args)  # type: ignore[arg-type]
        if isinstance(op, target_ops.Unary) and op.type == "pred" and op.op == "not":
            return 1 - args[0]  # type: ignore[operator]
        if isinstance(op, target_ops.Setp) and op.type[0] in "usb" and op.cmp in _COMPARE:
            a, b = (_wrap(x, op.type) for x in args)  # type: ignore[arg-type]
            return _COMPARE[op.cmp](a, b).astype(np.int64)
        if isinstance(op, target_ops.Selp) and op.type[0] in "usb":
            return np.where(args[2] != 0, args[0], args[1])  # type: ignore[call-overload]
        return None


def thread_values(ctas: int, batch: int, block: int, params: list[Value], v: Value,
                  chunk: int = CHUNK) -> np.ndarray | None:
    """``v`` in every thread of the launch, evaluated :data:`CHUNK` threads at a time
    (a launch of millions of threads would otherwise hold an array of that length for
    every value of the expression at once)."""
    n, parts = ctas * batch * block, []
    for start in range(0, n, chunk):
        part = CtaValues(ctas, batch, block, params, True, range(start, min(n, start + chunk)))(v)
        if part is None:
            return None
        parts.append(part)
    return np.concatenate(parts)


def distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, ascending (by a sort: ``np.unique``
    took 4 s for 2^22 values where the sort takes a quarter of a second)."""
    ordered = np.sort(values, kind="stable")
    keep = np.ones(len(ordered), bool)
    keep[1:] = ordered[1:] != ordered[:-1]
    return ordered[keep]


def _binary(op: target_ops.Binary, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    name, rtype = op.op, op.type
    bits, signed = _int_type(rtype)
    if name in ("div", "rem"):
        if not b.all():
            return None  # a division by zero in some CTA: not a window
        q = np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)  # truncated toward zero
        out = q if name == "div" else a - q * b
    elif name == "shl":
        out = a << np.minimum(b, bits)
    elif name == "shr":
        out = a >> np.minimum(b, bits) if signed else (a & ((1 << bits) - 1)) >> np.minimum(
            b, bits)
    else:
        out = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and,
               "or": np.bitwise_or, "xor": np.bitwise_xor, "min": np.minimum,
               "max": np.maximum}[name](a, b)
    if name == "mul" and op.mode == "wide":
        return _wrap(out, {"u32": "u64", "s32": "s64", "u16": "u32", "s16": "s32"}[rtype])
    return _wrap(out, rtype)


__all__ = ["CHUNK", "CtaValues", "distinct", "thread_values"]
