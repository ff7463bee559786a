"""The ``.approx`` instructions of Target IR: a deterministic value and a documented bound.

Hardware ``.approx`` results are not specified bit for bit: the PTX ISA only bounds
their error. The Target IR interpreter therefore gives each one a fixed *model* value,
the same on every machine, that satisfies the ISA's bound, and :data:`BOUNDS` records
the bound itself, which is what a fast-mode kernel's results are checked against
(:mod:`tessera.frontend.kernel.backends.fast_bounds`).

The model is the **correctly rounded** result (round to nearest even), with the
``.ftz`` flushes applied. It is computed from NumPy's float64 functions, whose result is
trusted only where it lies more than :data:`MARGIN_ULPS` float64 ulps from a rounding
boundary (library float64 functions are accurate to a few ulps); the other elements
(about one in 2^19) are decided exactly with :mod:`decimal` at 60 digits
(:mod:`tessera.numerics.transcendental.exact`), so the model does not depend on the
platform's ``libm``. Values of 2^x and
log2(x) for a float32 ``x`` are never exactly a float32 midpoint (they are either
exact float32 values, for integer ``x`` and powers of two, or transcendental).

Bounds (PTX ISA 9.1, sec. 9.7.3, "Floating Point Instructions"):

* ``ex2.approx.f32`` (sec. 9.7.3.21): "maximum ulp error is 2 ulp from correctly rounded
  result across the full range of inputs"; ``.ftz`` flushes subnormal inputs and
  results to sign-preserving zero. With the correctly rounded result's own half ulp,
  ``|d - 2^a| <= 2.5 ulp <= 5 * 2^-24 |2^a|`` for a normal result, and a flushed
  result is off by less than 2^-126.
* ``lg2.approx.f32`` (sec. 9.7.3.20): "maximum absolute error is 2^-22 when the input
  operand is in the range (0.5, 2). For positive finite inputs outside of this
  interval, maximum relative error is 2^-22", so ``|d - log2 a| <= 2^-22 (|log2 a| + 1)``.
* ``div.full.f32`` (sec. 9.7.3.8): "maximum ulp error is 2 across the full range of
  inputs", so ``|d - a/b| <= 5 * 2^-24 |a/b|`` for a normal quotient (2.5 ulp, counted
  as for ``ex2``), ``2.5 * 2^-149`` absolute for a subnormal one. Its model is
  ``div.rn.f32`` (NumPy's float32 division), which is within that bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from tessera.interp.target import numeric as tn
from tessera.numerics.transcendental.exact import MARGIN_ULPS, rounded_function

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
_ELEM = {F32: "f32", np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16"}


@dataclass(frozen=True)
class ApproxBound:
    """The error bound of one approximate instruction: ``|d - f(a)| <= relative * |f(a)|
    + absolute + offset * relative`` (``offset`` makes the bound of ``lg2`` near 1)."""

    instruction: str
    relative: float
    absolute: float
    offset: float
    source: str


BOUNDS: dict[str, ApproxBound] = {b.instruction: b for b in (
    ApproxBound("ex2.approx.ftz.f32", 5 * 2.0**-24, 2.0**-126, 0.0,
                "PTX ISA 9.1 sec. 9.7.3.21 (ex2): 2 ulp from the correctly rounded result"),
    ApproxBound("lg2.approx.ftz.f32", 2.0**-22, 0.0, 1.0,
                "PTX ISA 9.1 sec. 9.7.3.20 (lg2): 2^-22 absolute in (0.5, 2), 2^-22 "
                "relative outside"),
    ApproxBound("div.full.f32", 5 * 2.0**-24, 2.5 * 2.0**-149, 0.0,
                "PTX ISA 9.1 sec. 9.7.3.8 (div): 2 ulp across the full range"),
)}


def ex2_model(x: np.ndarray, ftz: bool) -> np.ndarray:
    """``ex2.approx{.ftz}`` of f32, f16 or bf16 ``x``: 2^x correctly rounded to x's
    format; with ``.ftz`` subnormal inputs read as zero (2^0 = 1) and subnormal results
    flush to +0; NaN canonical."""
    x = tn.flush_subnormals(x, _ELEM[x.dtype]) if ftz else x
    x64 = x.astype(F64)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = rounded_function("ex2", x64, np.exp2(x64), x.dtype)
    if ftz:  # 2^x below 2^-126 rounds to a subnormal or to 2^-126 itself only from above
        out = np.where(x64 < -126, np.zeros((), x.dtype), out).astype(x.dtype)
    return tn.canonical_nans(out)


def lg2_model(x: np.ndarray, ftz: bool) -> np.ndarray:
    """``lg2.approx{.ftz}.f32``: log2(x) correctly rounded to float32; with ``.ftz``
    subnormal inputs read as zero (-inf); negative inputs give the canonical NaN."""
    x = np.asarray(x, F32)
    x = tn.flush_subnormals(x, "f32") if ftz else x
    x64 = x.astype(F64)
    ok = np.isfinite(x64) & (x64 > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        y64 = np.log2(x64)
        out = rounded_function("lg2", np.where(ok, x64, 1.0), np.where(ok, y64, 0.0), F32)
    out = np.where(ok, out, y64.astype(F32))  # 0 -> -inf, +inf -> +inf, NaN and x < 0
    return tn.canonical_nans(out.astype(F32))


def ex2_approx_ftz(x: np.ndarray) -> np.ndarray:
    """The model of ``ex2.approx.ftz.f32``: :func:`ex2_model` of float32 ``x``."""
    return ex2_model(np.asarray(x, F32), True)


def lg2_approx_ftz(x: np.ndarray) -> np.ndarray:
    """The model of ``lg2.approx.ftz.f32``: :func:`lg2_model` with ``.ftz``."""
    return lg2_model(np.asarray(x, F32), True)


def _ieee(fn: Callable[[np.ndarray], np.ndarray], ftz: bool, elem: str
          ) -> Callable[[np.ndarray], np.ndarray]:
    """``sqrt``/``rcp`` ``.approx``: the IEEE correctly rounded result (NumPy's, the same
    everywhere), inputs and results flushed with ``.ftz``; NaN canonical."""
    inner = tn.with_ftz(fn, elem) if ftz else fn

    def model(x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return tn.canonical_nans(inner(x))
    return model


def _rsqrt(v: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(v)


#: the float64 functions whose results :func:`function_model` rounds
_F64 = {"rsqrt": _rsqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos}


def function_model(fn: str, ftz: bool) -> Callable[[np.ndarray], np.ndarray]:
    """``rsqrt``/``tanh``/``sin``/``cos`` ``.approx{.ftz}.f32``: the function correctly
    rounded to float32 (decided exactly near a boundary), operands and results flushed
    with ``.ftz``; infinities and NaN as the float64 function gives them (sin of an
    infinity is NaN, 1/sqrt of a negative is NaN, of +0 is +inf), NaN canonical."""
    def rounded(x: np.ndarray) -> np.ndarray:
        x64 = x.astype(F64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            y64 = _F64[fn](x64)
            ok = np.isfinite(x64) & np.isfinite(y64) & (x64 > 0 if fn == "rsqrt" else True)
            out = rounded_function(fn, np.where(ok, x64, 1.0), np.where(ok, y64, 1.0), F32)
        return np.where(ok, out, y64.astype(F32))
    inner = tn.with_ftz(rounded, "f32") if ftz else rounded
    return lambda x: tn.canonical_nans(inner(np.asarray(x, F32)))


def unary_model(op: str, mode: str, elem: str) -> Callable[[np.ndarray], np.ndarray] | None:
    """The deterministic model of ``<op>.<mode>.<elem>`` (``mode`` ``approx`` or
    ``approx.ftz``), or None for the correctly rounded ``.rn`` forms."""
    if not mode.startswith("approx"):
        return None
    ftz = mode.endswith(".ftz")
    if op == "ex2":
        return lambda x: ex2_model(x, ftz)
    if op == "lg2":
        return lambda x: lg2_model(x, ftz)
    if op in _F64 and elem == "f32":
        return function_model(op, ftz)
    if op == "rsqrt":  # rsqrt.approx.f64: the IEEE square root's reciprocal, rounded
        return _ieee(_rsqrt, ftz, elem)
    return _ieee({"sqrt": np.sqrt, "rcp": np.reciprocal}[op], ftz, elem)


__all__ = ["BOUNDS", "MARGIN_ULPS", "ApproxBound", "ex2_approx_ftz",
           "ex2_model", "function_model", "lg2_approx_ftz", "lg2_model", "unary_model"]
