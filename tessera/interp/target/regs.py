"""Register instructions of Target IR (PTX ISA, chapter 9.7): one NumPy call each.

Integers wrap around (NumPy integer arrays do); ``shl``/``shr`` clamp shift amounts to
the register width (PTX ISA "shl"/"shr": ``shr.s`` fills with the sign). Floats follow IEEE
RNE (NumPy float32/float64 arithmetic is correctly rounded); 16-bit floats compute in
float32 and round once, which is exact for ``+ - * /`` (24 >= 2 * 11 + 2). ``.ftz``
flushes subnormal operands and results to zeros of their sign. ``.approx``
instructions (``ex2`` of f32, f16 and bf16, ``lg2``, ``sqrt``, ``rcp``, each with or
without ``.ftz``) have the deterministic models of :mod:`tessera.interp.target.approx`:
the correctly rounded result, within the ISA's bound, the same on every machine, not
bit-exact to hardware; ``div.full.f32`` is modelled by the correctly rounded quotient.
``div``, ``sqrt``, ``rcp`` and f64 ``fma`` rounded in a direction are
:mod:`tessera.interp.target.rounding`'s.

NaN results: an instruction that computes an f32, f16 or bf16 value (arithmetic,
``fma``, the unary functions, ``cvt`` to 16 bits) writes that format's canonical NaN
(:func:`tessera.interp.target.numeric.canonical_nans`: the bits an H100 writes); f64
arithmetic and widening ``cvt`` keep IEEE's bits; ``mov``, ``selp``, ``ld``/``st`` and
the bitwise operations move bits unchanged.

Wide accumulators: ``add``, ``sub``, ``neg``, ``abs``, ``mov`` and ``selp`` keep a float64
``f32`` value wide (a narrow operand widens exactly); ``cvt``, ``pack`` and ``unpack`` are
in :mod:`tessera.interp.target.convert`; every other instruction rounds a wide value to
float32 first. The registers of structured joins that a wide value can reach are wide
on every thread (:mod:`tessera.interp.target.wide`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import UnsupportedError
from tessera.interp.target import approx, rounding
from tessera.interp.target import numeric as tn
from tessera.interp.target.state import (
    DTYPES,
    F32,
    F64,
    Step,
    TargetCompiler,
    TargetFrame,
    narrow,
    step_rule,
)
from tessera.ir.core import Instr
from tessera.ir.dialects.target import REG_TYPES
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.ops import DIRECTED

Impl = Callable[..., Any]


def pure(c: TargetCompiler, instr: Instr, impl: Impl) -> Step:
    """A step computing ``impl(*operands)`` into the single result slot."""
    ins = [c.slot(v) for v in instr.operands]
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        r = fr.regs
        r[out] = impl(*[r[i] for i in ins])
    return step


def unsupported(instr: Instr, what: str) -> UnsupportedError:
    """The error for an instruction form the interpreter does not model."""
    return UnsupportedError(f"{instr.op.name}: {what} is not modelled by the Target IR "
                            "interpreter", loc=instr.loc)


@step_rule(target_ops.Special)
def _special(c: TargetCompiler, instr: Instr) -> Step:
    reg = instr.op.reg
    out = c.slot(instr.results[0])
    if reg in target_ops.CLOCKS:  # read when the instruction runs: the clocks advance
        def tick(fr: TargetFrame) -> None:
            fr.regs[out] = fr.m.clock(reg)
        return tick
    value = c.m.special(reg)

    def step(fr: TargetFrame) -> None:
        fr.regs[out] = value
    return step


def const_array(value: Any, elem: str, n: int) -> np.ndarray:
    """An immediate of PTX type ``elem`` for ``n`` threads (integers wrap to the width)."""
    dt = DTYPES[elem]
    bits, kind = REG_TYPES[elem]
    if kind in "usb" and isinstance(value, (int, np.integer)):
        pattern = np.array(int(value) & ((1 << bits) - 1), np.dtype(f"u{bits // 8}"))
        return np.full(n, pattern.view(dt))
    return np.full(n, value, dt)


@step_rule(target_ops.Const)
def _const(c: TargetCompiler, instr: Instr) -> Step:
    value = const_array(instr.op.value, instr.op.type, c.m.n)
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        fr.regs[out] = value
    return step


def _float_binary(op: str, elem: str, mode: str = "") -> Impl:
    dt = DTYPES[elem]
    if op == "copysign":  # copysign d, a, b: b's magnitude with a's sign (a bit operation)
        return lambda x, y: np.copysign(narrow(y, elem), narrow(x, elem)).astype(dt)
    if op in ("min", "max"):
        def minmax(x: Any, y: Any) -> Any:
            x, y = narrow(x, elem), narrow(y, elem)
            if dt.itemsize == 2:
                out = tn.fmin_fmax(x.astype(F32), y.astype(F32), op == "max").astype(dt)
            else:
                out = tn.fmin_fmax(x, y, op == "max")
            if mode == "NaN":  # min.NaN / max.NaN: a NaN operand gives the canonical NaN
                out = tn.canonical_nan_where(np.isnan(x) | np.isnan(y), out)
            return out
        return minmax
    if mode in DIRECTED and op == "div":  # toward zero, -inf or +inf
        return lambda x, y: rounding.divide(narrow(x, elem), narrow(y, elem), mode)
    if mode in DIRECTED:  # f32 and f64 add, sub, mul
        return lambda x, y: tn.directed(op, narrow(x, elem), narrow(y, elem), mode)
    fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide}[op]
    canon = tn.canonical_nans  # a NaN result has the canonical NaN's bits, as on the GPU
    if elem == "f32" and op in ("add", "sub"):
        def wide(x: Any, y: Any) -> Any:
            if x.dtype == F64 or y.dtype == F64:  # a wide NaN that rounds to f32's
                return canon(fn(x.astype(F64), y.astype(F64)), wide=True)
            return canon(fn(x, y))
        return wide
    if dt.itemsize == 2:
        return lambda x, y: canon(fn(x.astype(F32), y.astype(F32)).astype(dt))
    return lambda x, y: canon(fn(narrow(x, elem), narrow(y, elem)))


def _flushing(fn: Impl, elem: str, result: bool = True) -> Impl:
    """``fn`` with ``.ftz`` (:func:`tessera.interp.target.numeric.with_ftz`) on its
    operands narrowed to ``elem``."""
    flushed = tn.with_ftz(fn, elem, result)
    return lambda *xs: flushed(*(narrow(x, elem) for x in xs))


#: the packed types (PTX ISA sec. 9.7.4): two 16-bit floats in one 32-bit register
PACKED = {"f16x2": "f16", "bf16x2": "bf16"}


def per_half(fn: Impl, elem: str) -> Impl:
    """``fn`` (of 16-bit float operands) applied to both halves of ``elem``
    (``f16x2``/``bf16x2``) registers independently: the first element lies in the low
    16 bits, the second in the high."""
    half = DTYPES[PACKED[elem]]
    u16, u32 = np.dtype(np.uint16), np.dtype(np.uint32)

    def packed(*xs: Any) -> Any:
        lo = fn(*((x & u32.type(0xFFFF)).astype(u16).view(half) for x in xs))
        hi = fn(*((x >> u32.type(16)).astype(u16).view(half) for x in xs))
        lo, hi = (np.asarray(v).astype(half).view(u16).astype(u32) for v in (lo, hi))
        return (hi << u32.type(16)) | lo
    return packed


def _shift(op: str, elem: str) -> Impl:
    dt = DTYPES[elem]
    width = 8 * dt.itemsize

    def shift(x: Any, amount: Any) -> Any:
        big = amount >= width
        k = np.minimum(amount, width - 1).astype(dt)
        if op == "shl":
            return np.where(big, 0, x << k).astype(dt)
        # shr: NumPy shifts signed integers arithmetically and unsigned ones logically
        fill = x >> np.array(width - 1, dt) if dt.kind == "i" else np.zeros_like(x)
        return np.where(big, fill, x >> k).astype(dt)
    return shift


def _mul_hi64(x: Any, y: Any) -> Any:
    """The high 64 bits of the 128-bit product of 64-bit integers (signed when ``x`` is),
    from four 32x32-bit products that ``uint64`` holds exactly."""
    u64 = np.uint64
    a, b = np.asarray(x).astype(u64), np.asarray(y).astype(u64)
    low, half = u64(0xFFFFFFFF), u64(32)
    al, ah, bl, bh = a & low, a >> half, b & low, b >> half
    mid1, mid2 = ah * bl, al * bh
    carry = ((al * bl) >> half) + (mid1 & low) + (mid2 & low)
    hi = ah * bh + (mid1 >> half) + (mid2 >> half) + (carry >> half)
    if np.asarray(x).dtype.kind == "i":  # two's complement: subtract y for x < 0, x for y < 0
        hi = hi - np.where(np.asarray(x) < 0, b, u64(0)) - np.where(np.asarray(y) < 0, a, u64(0))
    return hi


def _int_binary(instr: Instr) -> Impl:
    op, elem, mode = instr.op.op, instr.op.type, instr.op.mode
    dt = DTYPES[elem]
    if op in ("shl", "shr"):
        return _shift(op, elem)
    if op == "mul" and mode == "wide":
        wide = DTYPES[instr.results[0].type.elem]
        return lambda x, y: x.astype(wide) * y.astype(wide)
    if op == "mul" and mode == "hi":
        if dt.itemsize == 8:
            return lambda x, y: _mul_hi64(x, y).astype(dt)
        wide = np.dtype(np.int64 if dt.kind == "i" else np.uint64)
        shift = np.array(8 * dt.itemsize, wide)
        return lambda x, y: ((x.astype(wide) * y.astype(wide)) >> shift).astype(dt)
    table = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum,
             "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
             "xor": np.bitwise_xor}
    if op in table:
        fn = table[op]
        return lambda x, y: fn(x, y).astype(dt)
    if op == "rem":
        return lambda x, y: np.fmod(x, np.where(y == 0, 1, y)).astype(dt)

    def div(x: Any, y: Any) -> Any:  # C division: truncate toward zero
        y = np.where(y == 0, 1, y).astype(dt)
        if dt.kind == "u":
            return x // y
        return ((x - np.fmod(x, y)) // y).astype(dt)  # exact: x - rem divides by y
    return div


@step_rule(target_ops.Binary)
def _binary(c: TargetCompiler, instr: Instr) -> Step:
    op, elem = instr.op.op, instr.op.type
    kind = REG_TYPES[elem][1]
    if elem in PACKED:
        if op not in ("add", "sub", "mul", "min", "max"):
            raise unsupported(instr, f"{op} on {elem}")
        half = PACKED[elem]
        fn = _float_binary(op, half, instr.op.mode)
        return pure(c, instr, per_half(_flushing(fn, half) if instr.op.ftz else fn, elem))
    if kind == "p":
        if op not in ("and", "or", "xor"):
            raise unsupported(instr, f"{op} on predicates")
        fn = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
        return pure(c, instr, fn)
    if kind == "f":
        if op not in ("add", "sub", "mul", "div", "min", "max", "copysign"):
            raise unsupported(instr, f"{op} on {elem}")
        fn = _float_binary(op, elem, instr.op.mode)
        return pure(c, instr, _flushing(fn, elem) if instr.op.ftz else fn)
    impl = _int_binary(instr)
    if op not in ("div", "rem"):
        return pure(c, instr, impl)
    a, b = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])

    def checked(fr: TargetFrame) -> None:
        y = fr.regs[b]
        zero = (y == 0) & fr.mask
        if zero.any():
            k = int(np.flatnonzero(zero)[0])
            raise fr.m.fault(instr, "integer division by zero", "the divisor is 0 (PTX "
                             "leaves the result unspecified)", k)
        with np.errstate(all="ignore"):
            fr.regs[out] = impl(fr.regs[a], y)
    return checked


@step_rule(target_ops.Unary)
def _unary(c: TargetCompiler, instr: Instr) -> Step:
    op, elem = instr.op.op, instr.op.type
    kind = REG_TYPES[elem][1]
    if op == "mov":
        return pure(c, instr, lambda x: x)
    if kind == "p":
        if op != "not":
            raise unsupported(instr, f"{op} on predicates")
        return pure(c, instr, np.logical_not)
    if op == "not":
        return pure(c, instr, np.invert)
    if elem in PACKED:
        return pure(c, instr, per_half(_float_unary(instr, PACKED[elem]), elem))
    if kind == "f":
        return pure(c, instr, _float_unary(instr, elem))
    if op in ("neg", "abs"):
        fn = np.negative if op == "neg" else np.abs
        dt = DTYPES[elem]
        return pure(c, instr, lambda x: fn(x).astype(dt))
    raise unsupported(instr, f"{op} on {elem}")


def _float_unary(instr: Instr, elem: str) -> Impl:
    """The unary float instruction ``instr`` on values of float type ``elem``."""
    op = instr.op.op
    if op in ("neg", "abs"):  # sign operations are exact in any format and keep wide
        # values; a NaN operand keeps its payload with the sign flipped or cleared: the
        # ISA does not specify their NaN output, and the GPU's has not been measured
        fn = np.negative if op == "neg" else np.abs
        return _flushing(fn, elem) if instr.op.ftz else fn
    model = approx.unary_model(op, instr.op.mode, elem)
    if model is not None:  # a deterministic model within the ISA bound
        return lambda x: model(narrow(x, elem))
    if op not in ("sqrt", "rcp"):
        raise unsupported(instr, f"{op}.{instr.op.mode or 'rn'}.{elem}")
    if instr.op.mode in DIRECTED:
        mode = instr.op.mode
        one = np.ones((), DTYPES[elem])
        fn: Impl = (lambda x: rounding.square_root(narrow(x, elem), mode)) if op == "sqrt" \
            else (lambda x: rounding.divide(np.broadcast_to(one, x.shape), narrow(x, elem),
                                            mode))
        return _flushing(fn, elem) if instr.op.ftz else fn
    math = {"sqrt": np.sqrt, "rcp": np.reciprocal}[op]  # .rn: IEEE, correctly rounded
    canon = tn.canonical_nans
    dt = DTYPES[elem]
    if dt.itemsize == 2:
        return lambda x: canon(math(x.astype(F32)).astype(dt))
    rounded: Impl = lambda x: canon(math(narrow(x, elem)))  # noqa: E731
    return _flushing(rounded, elem) if instr.op.ftz else rounded


@step_rule(target_ops.Fma)
def _fma(c: TargetCompiler, instr: Instr) -> Step:
    elem, rnd = instr.op.type, instr.op.rnd
    if elem == "f32":
        fma32: Impl = lambda a, b, d: tn.fma_f32(  # noqa: E731
            narrow(a, elem), narrow(b, elem), narrow(d, elem))
        if rnd != "rn":
            fma32 = lambda a, b, d: tn.directed(  # noqa: E731
                "mul", narrow(a, elem), narrow(b, elem), rnd, narrow(d, elem))
        return pure(c, instr, _flushing(fma32, elem) if instr.op.ftz else fma32)
    if elem == "f64":
        return pure(c, instr, tn.fma_f64 if rnd == "rn" else
                    lambda a, b, d: rounding.fma64(a, b, d, rnd))
    half = PACKED.get(elem, elem)
    if half not in ("f16", "bf16"):
        raise unsupported(instr, f"fma on {elem}")
    dt = DTYPES[half]

    def fma16(a: Any, b: Any, d: Any) -> Any:
        # product exact in float64; a round-to-odd float64 sum then rounds once to 16 bits
        s = tn.add_round_to_odd(a.astype(F64) * b.astype(F64), d.astype(F64))
        return tn.cvt_float(s, dt, "rn", False)
    fn = _flushing(fma16, half) if instr.op.ftz else fma16
    return pure(c, instr, per_half(fn, elem) if elem in PACKED else fn)


def _ordered(cmp: str) -> Callable[[Any, Any], Any]:
    return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}[cmp]


@step_rule(target_ops.Setp)
def _setp(c: TargetCompiler, instr: Instr) -> Step:
    cmp, elem = instr.op.cmp, instr.op.type
    kind = REG_TYPES[elem][1]
    if kind != "f":
        if cmp not in ("eq", "ne", "lt", "le", "gt", "ge"):
            raise unsupported(instr, f"setp.{cmp} on integers")
        return pure(c, instr, _ordered(cmp))
    dt = DTYPES[elem]

    def setp(x: Any, y: Any) -> Any:
        x, y = narrow(x, elem), narrow(y, elem)
        if dt.itemsize == 2:
            x, y = x.astype(F32), y.astype(F32)
        nan = np.isnan(x) | np.isnan(y)
        if cmp == "num":
            return ~nan
        if cmp == "nan":
            return nan
        if cmp.endswith("u"):  # unordered: true when either operand is NaN
            return _ordered(cmp[:-1])(x, y) | nan
        return _ordered(cmp)(x, y) & ~nan  # ordered: false on NaN (ne too)
    return pure(c, instr, _flushing(setp, elem, result=False) if instr.op.ftz else setp)


@step_rule(target_ops.Selp)
def _selp(c: TargetCompiler, instr: Instr) -> Step:
    def selp(a: Any, b: Any, p: Any) -> Any:
        if a.dtype != b.dtype:  # one side wide: widen the other exactly
            a, b = a.astype(F64), b.astype(F64)
        return np.where(p[:, None] if a.ndim == 2 else p, a, b)
    return pure(c, instr, selp)


__all__ = ["PACKED", "const_array", "per_half", "pure", "unsupported"]
