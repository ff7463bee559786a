"""The ``.approx`` instructions of Target IR: a deterministic value and a documented bound.

Hardware ``.approx`` results are not specified bit for bit: the PTX ISA only bounds
their error. The Target IR interpreter therefore gives each one a fixed *model* value,
the same on every machine, that satisfies the ISA's bound, and :data:`BOUNDS` records
the bound itself, which is what a fast-mode kernel's results are checked against
(:mod:`tessera.frontend.kernel.backends.fast_bounds`).

The model is the **correctly rounded** f32 result (round to nearest even), with the
``.ftz`` flushes applied. It is computed from NumPy's float64 ``exp2``/``log2``, whose
result is trusted only where it lies more than :data:`MARGIN_ULPS` float64 ulps from a
float32 rounding boundary (library float64 functions are accurate to a few ulps); the
other elements (about one in 2^19) are decided exactly with :mod:`decimal` at 60
digits, so the model does not depend on the platform's ``libm``. Values of 2^x and
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

import decimal
from dataclasses import dataclass

import numpy as np

from tessera.interp.target.numeric import canonical_nans

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
#: float64 ulps a library ``exp2``/``log2`` result may be from the exact value before
#: the element is decided exactly instead
MARGIN_ULPS = 256
_DROPPED, _HALF = (1 << 29) - 1, 1 << 28  # the 29 float64 bits float32 rounding drops
_SMALLEST_NORMAL = np.float32(2.0**-126)


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


def _near_boundary(y: np.ndarray) -> np.ndarray:
    """Where a float64 ``y`` lies within :data:`MARGIN_ULPS` of a float32 midpoint."""
    low = (np.ascontiguousarray(y).view(np.int64) & _DROPPED) - _HALF
    return np.abs(low) <= MARGIN_ULPS


def _round_exact(candidate: np.float32, exact: decimal.Decimal) -> np.float32:
    """The float32 nearest ``exact``, knowing it is ``candidate`` or a neighbour."""
    below = np.nextafter(candidate, np.float32(-np.inf))
    above = np.nextafter(candidate, np.float32(np.inf))
    # midpoints of neighbouring float32 values are exact float64 values
    if exact < decimal.Decimal((float(below) + float(candidate)) / 2):
        return below
    if exact > decimal.Decimal((float(candidate) + float(above)) / 2):
        return above
    return candidate


def _decide(x: np.ndarray, y64: np.ndarray, out: np.ndarray, fn: str) -> None:
    """Replace the elements of ``out`` whose rounding ``y64`` cannot prove."""
    hard = np.flatnonzero(np.isfinite(y64) & (y64 != 0) & _near_boundary(y64))
    if not hard.size:
        return
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        for i in hard:
            a = decimal.Decimal(float(x.flat[i]))
            exact = (decimal.Decimal(2) ** a if fn == "ex2"
                     else a.ln() / decimal.Decimal(2).ln())
            out.flat[i] = _round_exact(out.flat[i], exact)


def _flush_inputs(x: np.ndarray) -> np.ndarray:
    """``.ftz``: subnormal inputs become zeros of their sign."""
    return np.where(np.abs(x) < _SMALLEST_NORMAL, np.copysign(np.float32(0), x), x)


def ex2_approx_ftz(x: np.ndarray) -> np.ndarray:
    """The model of ``ex2.approx.ftz.f32``: 2^x correctly rounded to float32, subnormal
    inputs read as zero (2^0 = 1), subnormal results flushed to +0, NaN canonical."""
    x = _flush_inputs(np.asarray(x, F32))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        y64 = np.exp2(x.astype(F64))
        out = y64.astype(F32)
    _decide(x, y64, out, "ex2")
    # below 2^-126 the result is subnormal (x < -126 gives less than half an ulp
    # below 2^-126, never rounding up to it)
    out = np.where(x < -126, np.float32(0), out).astype(F32)
    return canonical_nans(out)


def lg2_approx_ftz(x: np.ndarray) -> np.ndarray:
    """The model of ``lg2.approx.ftz.f32``: log2(x) correctly rounded to float32;
    subnormal inputs read as zero (-inf), negative inputs give the canonical NaN."""
    x = _flush_inputs(np.asarray(x, F32))
    with np.errstate(divide="ignore", invalid="ignore"):
        y64 = np.log2(x.astype(F64))
        out = y64.astype(F32)
    ok = np.isfinite(x) & (x > 0)
    _decide(np.where(ok, x, np.float32(1)), np.where(ok, y64, 0.0), out, "lg2")
    return canonical_nans(out)  # NaN and negative inputs: NaN


#: the model of each approximate unary instruction, by ``(op, mode)``
UNARY_MODELS = {("ex2", "approx.ftz"): ex2_approx_ftz, ("lg2", "approx.ftz"): lg2_approx_ftz}

__all__ = ["BOUNDS", "MARGIN_ULPS", "UNARY_MODELS", "ApproxBound", "ex2_approx_ftz",
           "lg2_approx_ftz"]
