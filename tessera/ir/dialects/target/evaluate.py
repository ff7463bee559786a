"""Integer index arithmetic of a kernel evaluated at many points at once, without
running it.

Loop bounds, windows into global memory and predicates on ``%tid.x`` are integer
arithmetic on special registers, constants and kernel parameters. The lowering
evaluates a tile's window for every CTA (which CTAs write the same elements:
``tessera.lower.rules.ordered.windows``); the static estimate evaluates a causal loop's
bounds for every CTA and warp (``tessera.backend.ptx.estimate.trips``). Both use
:class:`IndexValues`: one NumPy ``int64`` per point, following the PTX ISA's integer
rules: results wrap to their register's width, ``div``/``rem`` truncate toward zero,
``shr`` is arithmetic on signed types, a ``shfl.sync.idx`` from a constant lane of a
whole warp reads that lane's value. A value it cannot evaluate (a load, a float, a
special register it was not given) gives ``None``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import REG_TYPES
from tessera.ir.dialects.target import ops as target_ops

#: how deep an expression may nest before it is taken as not index arithmetic
MAX_DEPTH = 96
_OPS = {"add", "sub", "mul", "div", "rem", "shl", "shr", "and", "or", "xor", "min", "max"}
_LOGIC = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
#: integer comparisons (the unsigned spellings compare the unsigned values, which the
#: registers of an unsigned type hold)
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal,
            "hi": np.greater, "hs": np.greater_equal}


class IndexValues:
    """Evaluates integer :class:`Value` s at ``n`` points, each point given by the
    special registers in ``sregs`` (name -> one value per point); ``params`` gives
    kernel parameters a value (one for all points), e.g. distinct symbolic bases far
    apart, so that addresses in different arguments never compare equal."""

    def __init__(self, sregs: Mapping[str, np.ndarray], n: int,
                 params: Mapping[int, int] | None = None) -> None:
        self.sregs = dict(sregs)
        self.n = n
        self.params = dict(params or {})  # id(parameter value) -> its value
        self._memo: dict[int, np.ndarray | None] = {}

    def __call__(self, v: Value) -> np.ndarray | None:
        """``v`` at every point, or None where it is not evaluable."""
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
        lane = broadcast_lane(owner)
        if lane is not None:  # the source lane of each point's warp
            return self._from_lane(owner.operands[0], lane, depth)
        args = [self._eval(x, depth + 1) for x in owner.operands]
        if any(a is None for a in args):
            return None
        return _apply(op, args)  # type: ignore[arg-type]

    def _from_lane(self, v: Value, lane: int, depth: int) -> np.ndarray | None:
        tid = self.sregs.get("tid.x")
        if tid is None:
            return None
        there = IndexValues({**self.sregs, "tid.x": tid // 32 * 32 + lane}, self.n,
                            self.params)
        return there._eval(v, depth + 1)


def broadcast_lane(owner: Instr) -> int | None:
    """The source lane of ``shfl.sync.idx`` from a constant lane of a whole warp (a
    warp-uniform broadcast, as the lowering reads a warpgroup's index), or None."""
    op = owner.op
    if not (isinstance(op, target_ops.Shfl) and op.mode == "idx" and op.clamp == 31 and
            op.mask == 0xFFFFFFFF):
        return None
    src = owner.operands[1].owner
    if not (isinstance(src, Instr) and isinstance(src.op, target_ops.Const)):
        return None
    lane = int(src.op.value)
    return lane if 0 <= lane < 32 else None


def is_index_op(op: object) -> bool:
    """Whether :class:`IndexValues` evaluates ``op``: integer conversions, arithmetic
    (not ``mul.hi``), comparisons and selects, and predicate logic."""
    if isinstance(op, target_ops.Cvt):
        return op.frm[0] in "us" and op.to[0] in "us"
    if isinstance(op, target_ops.Binary):
        return (op.type == "pred" and op.op in _LOGIC) or \
            (op.type[0] in "usb" and op.op in _OPS and op.mode != "hi")
    if isinstance(op, target_ops.Unary):
        return op.type == "pred" and op.op == "not"
    if isinstance(op, target_ops.Setp):
        return op.type[0] in "usb" and op.cmp in _COMPARE
    return isinstance(op, target_ops.Selp) and op.type[0] in "usb"


def _apply(op: object, args: list[np.ndarray]) -> np.ndarray | None:
    """An integer instruction on evaluated operands, or None for any other."""
    if not is_index_op(op):
        return None
    if isinstance(op, target_ops.Cvt):
        return _wrap(args[0], op.to)
    if isinstance(op, target_ops.Binary):
        return _LOGIC[op.op](*args) if op.type == "pred" else _binary(op, *args)
    if isinstance(op, target_ops.Unary):  # not.pred
        return 1 - args[0]
    if isinstance(op, target_ops.Setp):
        a, b = (_wrap(x, op.type) for x in args)
        return _COMPARE[op.cmp](a, b).astype(np.int64)
    return np.where(args[2] != 0, args[0], args[1])  # selp


def _wrap(x: np.ndarray, rtype: str) -> np.ndarray:
    """``x`` as a register of ``rtype`` holds it (two's complement, its width)."""
    bits, signed = REG_TYPES[rtype][0], rtype.startswith("s")
    if bits >= 64:
        return x
    x = x & ((1 << bits) - 1)
    return x - ((x >> (bits - 1)) << bits) if signed else x


def _binary(op: target_ops.Binary, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    name, rtype = op.op, op.type
    bits, signed = REG_TYPES[rtype][0], rtype.startswith("s")
    if name in ("div", "rem"):
        if not b.all():
            return None  # a division by zero at some point: not index arithmetic
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


__all__ = ["MAX_DEPTH", "IndexValues", "broadcast_lane", "is_index_op"]
