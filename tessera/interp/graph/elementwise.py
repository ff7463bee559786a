"""Interpreter rules of the elementwise Graph IR ops.

Floats and complex values are widened exactly to float64 / complex128, computed with
NumPy and rounded once to the result element (see :mod:`tessera.interp.graph` for the
numerics contract). Integers are computed exactly (int64, or Python ints where int64
could overflow) and then saturated to the result format by ``numerics.convert``.
``exp`` of a real format of up to 32 bits (f32, bf16, f16, tf32, fp8, ...) is instead
the specified, correctly rounded f32 exp (``numerics.transcendental.exp``) rounded to
the element, so its bits do not depend on the platform's math library, and so are
``erf`` (``numerics.transcendental.erf64``), ``tanh`` (``tanh64``), ``log``
(``log64``) and both forms of ``gelu`` (``gelu64``) of every real float format,
computed in binary64 by specified algorithms and rounded once; f64 ``exp``, complex
``log`` and ``tanh`` and the other transcendentals (sin, cos, pow) remain NumPy's. Ops
whose result is one of their operands (maximum, minimum, relu on ints, where) select
values and round nothing.

A NaN that an op computes is the default quiet NaN (positive, NumPy's ``np.nan``),
whatever NaNs came in: NumPy's SIMD and scalar loops give NaNs of different signs for
the same operands (``np.add(-nan, nan)`` depends on the element's position in the
array), so without this the bits of a result would depend on how it is split into
blocks (on a mesh, for instance). GPUs similarly return a canonical NaN. Pure
selections (``where``, ``relu``, ``neg``, ``real``, ``imag``) move NaNs as they are.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tessera.interp.apply import Apply, rule
from tessera.ir.dialects import graph as graph_ir
from tessera.numerics import extrema
from tessera.numerics.transcendental.erf64 import erf_f64_specified
from tessera.numerics.transcendental.exact import pow_f32, rounded_function
from tessera.numerics.transcendental.exp import exp_f32
from tessera.numerics.transcendental.gelu64 import (
    gelu_erf_f64_specified,
    gelu_tanh_f64_specified,
)
from tessera.numerics.transcendental.log64 import log_f64_specified
from tessera.numerics.transcendental.tanh64 import tanh_f64_specified

_INT64 = np.iinfo(np.int64)


def settle_nans(v: np.ndarray) -> np.ndarray:
    """``v`` with every NaN (each NaN part of a complex value) the default quiet NaN."""
    if v.dtype.kind == "c":
        re, im = np.real(v), np.imag(v)
        if not (np.isnan(re).any() or np.isnan(im).any()):
            return v
        out = np.empty(v.shape, v.dtype)
        out.real, out.imag = settle_nans(re.copy()), settle_nans(im.copy())
        return out
    if v.dtype.kind in "biuO":
        return v
    nan = np.isnan(v)  # also for the ml_dtypes formats (bf16, fp8, ...)
    return np.where(nan, np.nan, v).astype(v.dtype, copy=False) if nan.any() else v


# ---------------------------------------------------------------------------- integers
def is_int(ap: Apply, k: int = 0) -> bool:
    """True when operand ``k`` is stored as an integer format."""
    return ap.operand_storage(k).kind == "int"


def exact_ints(x: np.ndarray) -> np.ndarray:
    """Integers in a dtype where +, -, * cannot overflow: int64, or Python ints for int64."""
    return x.astype(object) if x.dtype.itemsize >= 8 else x.astype(np.int64)


def store_ints(ap: Apply, v: np.ndarray, k: int = 0) -> np.ndarray:
    """Exact integer results saturated to result ``k`` (convert saturates int64 further)."""
    if v.dtype == object:
        v = np.clip(v, _INT64.min, _INT64.max).astype(np.int64)
    return ap.round(v, k)


def _needs_real(ap: Apply, x: np.ndarray) -> None:
    if np.iscomplexobj(x):
        raise ap.fail("is not defined for complex values",
                      hint="apply it to the real and imaginary parts separately")


# ------------------------------------------------------------------------------- unary
#: unary ops computed on float64 / complex128 and rounded once
_FLOAT_UNARY: dict[type, Callable[[np.ndarray], np.ndarray]] = {
    graph_ir.Neg: np.negative,
    graph_ir.Exp: np.exp,
    graph_ir.Log: np.log,
    graph_ir.Tanh: np.tanh,
    graph_ir.Sqrt: np.sqrt,
    graph_ir.Sign: np.sign,
    graph_ir.Sin: np.sin,
    graph_ir.Cos: np.cos,
    graph_ir.Round: np.round,
    graph_ir.Conj: np.conj,
}


#: sin and cos of real formats of up to 32 bits: correctly rounded to f32 (the name
#: :func:`~tessera.numerics.transcendental.exact.evaluate` knows, NumPy's function)
_ROUNDED = {graph_ir.Sin: ("sin", np.sin), graph_ir.Cos: ("cos", np.cos)}
F32 = np.dtype(np.float32)

#: real log and tanh: specified binary64 functions (numerics.transcendental)
_SPECIFIED = {graph_ir.Log: log_f64_specified, graph_ir.Tanh: tanh_f64_specified}


def _narrow_float(ap: Apply, k: int = 0) -> bool:
    fmt = ap.operand_storage(k)
    return fmt.kind == "float" and fmt.bits <= 32


@rule(*_FLOAT_UNARY)
def unary(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """neg, exp, log, tanh, sqrt, sign, sin, cos, round (half to even), conj."""
    (x,) = operands
    kind = type(ap.op)
    if is_int(ap) and kind in (graph_ir.Neg, graph_ir.Sign, graph_ir.Round, graph_ir.Conj):
        v = exact_ints(x)
        if kind is graph_ir.Neg:
            v = -v
        elif kind is graph_ir.Sign:
            v = np.sign(x.astype(np.int64))
        return [store_ints(ap, v)]
    if kind is graph_ir.Exp and _narrow_float(ap):
        # the specified, correctly rounded f32 exp (every real format of up to 32 bits
        # is a subset of f32), then rounded to the element: the same bits on any machine
        out = exp_f32(np.asarray(ap.wide(x), np.float32)).astype(np.float64)
    elif kind in _ROUNDED and _narrow_float(ap) and not np.iscomplexobj(w := ap.wide(x)):
        # sin and cos correctly rounded to f32, decided exactly where NumPy's float64
        # value cannot prove the rounding, then rounded to the element (as exp)
        name, fn = _ROUNDED[kind]
        with np.errstate(invalid="ignore"):
            out = rounded_function(name, w, fn(w), F32).astype(np.float64)
    elif kind in _SPECIFIED and not np.iscomplexobj(w := ap.wide(x)):
        out = _SPECIFIED[kind](w)  # a specified binary64 function (complex: NumPy's)
    else:
        out = _FLOAT_UNARY[kind](ap.wide(x))
    # neg and conj move a NaN (flipping a sign bit), bit for bit in any NumPy loop
    return [ap.round(out if kind in (graph_ir.Neg, graph_ir.Conj) else settle_nans(out))]


@rule(graph_ir.Erf)
def erf(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """The error function: the specified binary64 erf (``numerics.transcendental.erf64``),
    rounded once."""
    x = ap.wide(operands[0])
    _needs_real(ap, x)
    return [ap.round(settle_nans(erf_f64_specified(x)))]


@rule(graph_ir.Gelu)
def gelu(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """GELU: the tanh form ``0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`` by the specified
    binary64 algorithm, or ``0.5x(1 + erf(x/sqrt 2))`` by the specified binary64 algorithm
    through erfc (both in ``numerics.transcendental.gelu64``), rounded once."""
    x = ap.wide(operands[0])
    _needs_real(ap, x)
    out = gelu_tanh_f64_specified(x) if ap.op.approximate else gelu_erf_f64_specified(x)
    return [ap.round(settle_nans(out))]


@rule(graph_ir.Relu)
def relu(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """``x`` where ``x > 0`` or ``x`` is NaN, else +0 (so relu(-0.0) is +0.0)."""
    (x,) = operands
    if is_int(ap):
        return [np.maximum(x, np.zeros((), x.dtype))]
    w = ap.wide(x)
    _needs_real(ap, w)
    return [ap.select(np.where((w > 0) | np.isnan(w), w, 0.0))]


@rule(graph_ir.Abs, graph_ir.Real, graph_ir.Imag)
def to_real(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """abs (modulus of complex values, via hypot), real and imaginary parts."""
    (x,) = operands
    kind = type(ap.op)
    if is_int(ap):
        v = exact_ints(x)
        return [store_ints(ap, np.abs(v) if kind is graph_ir.Abs else
                           (v if kind is graph_ir.Real else np.zeros_like(v)))]
    w = ap.wide(x)
    if kind is graph_ir.Abs:
        return [ap.round(settle_nans(np.abs(w)))]
    return [ap.select(np.real(w) if kind is graph_ir.Real else np.imag(w).copy())]


# ------------------------------------------------------------------------------ binary
_FLOAT_BINARY: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    graph_ir.Add: np.add,
    graph_ir.Sub: np.subtract,
    graph_ir.Mul: np.multiply,
    graph_ir.Div: np.divide,
    graph_ir.Pow: np.power,
}


def _int_div(ap: Apply, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Integer division truncates toward zero, as C, CUDA and lax.div do.
    if np.any(b == 0):
        raise ap.fail("integer division by zero",
                      hint="mask the divisor (graph.where) or divide in a float format")
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _int_pow(ap: Apply, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b < 0):
        raise ap.fail("integer power with a negative exponent",
                      hint="raise a float format to a negative power instead")
    base, expo = a.astype(object), b.astype(object)
    # |base| >= 2 to a power above 64 saturates any int format; keep the parity (sign).
    big = (np.abs(a) >= 2) & (b > 64)
    expo = np.where(big, 64 + (b.astype(np.int64) % 2), expo)
    return base**expo


@rule(*_FLOAT_BINARY)
def arith(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """add, sub, mul, div, pow: float64 (complex128) then one rounding; ints exact."""
    a, b = operands
    kind = type(ap.op)
    if is_int(ap, 0):
        ia, ib = exact_ints(a), exact_ints(b)
        if kind is graph_ir.Div:
            return [store_ints(ap, _int_div(ap, ia, ib))]
        if kind is graph_ir.Pow:
            return [store_ints(ap, _int_pow(ap, ia, ib))]
        return [store_ints(ap, _FLOAT_BINARY[kind](ia, ib))]
    wa, wb = ap.wide(a, 0), ap.wide(b, 1)
    if kind is graph_ir.Pow and _narrow_float(ap) and _narrow_float(ap, 1) \
            and not np.iscomplexobj(wa):
        return [ap.round(settle_nans(pow_f32(wa, wb).astype(np.float64)))]
    return [ap.round(settle_nans(_FLOAT_BINARY[kind](wa, wb)))]


@rule(graph_ir.Maximum, graph_ir.Minimum)
def extremum(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """maximum / minimum; a NaN operand gives the default NaN, and ``+0`` ranks above
    ``-0`` (:mod:`tessera.numerics.extrema`). Exact: otherwise the result is an
    operand."""
    a, b = operands
    fn = extrema.maximum if type(ap.op) is graph_ir.Maximum else extrema.minimum
    if ap.operand_storage(0).kind in ("int", "bool"):
        return [fn(a, b)]
    wa, wb = ap.wide(a, 0), ap.wide(b, 1)
    _needs_real(ap, wa)
    return [ap.select(settle_nans(fn(wa, wb)))]


_COMPARE: dict[type, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    graph_ir.Gt: np.greater,
    graph_ir.Ge: np.greater_equal,
    graph_ir.Lt: np.less,
    graph_ir.Le: np.less_equal,
    graph_ir.Eq: np.equal,
    graph_ir.Ne: np.not_equal,
}


@rule(*_COMPARE)
def compare(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Comparisons (IEEE: every comparison with NaN is false except ``!=``)."""
    a, b = operands
    fn = _COMPARE[type(ap.op)]
    if ap.operand_storage(0).kind in ("int", "bool"):
        return [fn(a, b)]
    wa, wb = ap.wide(a, 0), ap.wide(b, 1)
    if np.iscomplexobj(wa) and type(ap.op) not in (graph_ir.Eq, graph_ir.Ne):
        raise ap.fail("complex values are not ordered",
                      hint="compare abs(x) or the real parts")
    return [fn(wa, wb)]


@rule(graph_ir.Where)
def where(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """``cond ? a : b``; selects stored values, so nothing is rounded."""
    c, a, b = operands
    return [np.where(c, a, b)]


@rule(graph_ir.Cast)
def cast(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Convert to the target element: ``numerics.convert`` (RNE or stochastic, satfinite)."""
    return [ap.round(operands[0])]


@rule(graph_ir.Constant)
def constant(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """The attribute's exact values rounded once to the constant's element."""
    return [ap.round(ap.op.value.array)]
