"""Interpreter rules of the contracting and reducing Graph IR ops.

``mode="exact"`` (the definition):

* ``graph.matmul``: ``numerics.matmul_rounded``, the exact product rounded once to the
  accumulator format (the declared ``@accum``, else the default accumulator of the
  promoted storage format: f32 for floats up to 32 bits), then rounded to the result
  element when that differs (bf16 inputs without a declared accumulator: exact, to f32,
  to bf16, as a GPU that accumulates in f32 and stores bf16).
* ``graph.sum`` / ``graph.mean``: ``numerics.sum_rounded``, the exact sum (divided by
  the element count for a mean) rounded once to the result element.
* ``graph.max`` / ``graph.min``: exact by nature; NaN propagates (as the default quiet
  NaN) and +0 is above -0, so the bits do not depend on the order of the elements.
* Over an empty axis a sum is 0 and a mean NaN (as in NumPy); a max or min is an error.
* ``graph.softmax``: ``e = exp_f64_specified(x - max)`` in float64 (the specified
  binary64 exp of ``numerics.transcendental.exp64``: the same bits on every machine and
  on a GPU, +0 below e^-104), divided by the correctly rounded float64 sum of those
  terms (independent of summation order), then one rounding.
* ``graph.mse``: exact then rounded once, see :func:`mse`.

``mode="fast"`` (labelled non-bitwise): matmul is ``np.matmul`` in the accumulator's
NumPy dtype (BLAS: its bits depend on the BLAS build, thread count and blocking), sums
and means are ``np.sum`` / ``np.mean`` in that dtype; the result is then rounded to the
result element. Everything else is computed as in exact mode.

Where the result element rounds stochastically, the exact value is first rounded to
float64 (``sum_rounded`` refuses stochastic targets) and then rounded stochastically by
``convert``: 29 or more spare bits, so the probabilities move by less than 2**-29.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tessera.interp.apply import Apply, rule
from tessera.interp.graph.elementwise import settle_nans
from tessera.ir.dialects import graph as graph_ir
from tessera.numerics.formats.convert import convert
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.formats.dtypes import f64 as _F64
from tessera.numerics.policy.modifiers import accum_of, product_accum
from tessera.numerics.reductions.exact import VELTKAMP_SPLITTER
from tessera.numerics.reductions.rounding import matmul_rounded, round_fraction, sum_rounded
from tessera.numerics.transcendental.exp64 import exp_f64_specified


def _reduce_to(ap: Apply) -> DType:
    # The target of a correctly rounded reduction: the result's storage format, or f64
    # when the result rounds stochastically (convert then applies the policy).
    return _F64 if ap.stochastic() else ap.storage()


@rule(graph_ir.MatMul)
def matmul(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """``a @ b`` over the last two axes (batch dims must match)."""
    a, b = operands
    acc = product_accum(*(t.element for t in ap.operand_types))
    if ap.mode == "fast" and acc.kind in ("float", "complex"):
        with np.errstate(all="ignore"):
            prod = np.matmul(a.astype(acc.np_dtype, copy=False),
                             b.astype(acc.np_dtype, copy=False))
        if acc.name == "tf32":
            prod = convert(prod, acc)  # the float32 product rounded to 10 mantissa bits
    else:
        prod = matmul_rounded(a, b, acc)
    same = acc == ap.storage() and not ap.stochastic()
    prod = settle_nans(prod)  # BLAS and the exact product need not agree on NaN signs
    return [prod if same else ap.round(prod)]


def _axes(ap: Apply, rank: int) -> tuple[int, ...]:
    return ap.op.reduced_axes(rank) if rank else ()


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool
                   ) -> tuple[int, ...]:
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)


@rule(graph_ir.Sum, graph_ir.Mean)
def sum_mean(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Sum or mean over ``axes`` (empty: all), exact then rounded once."""
    (x,) = operands
    axes = _axes(ap, x.ndim)
    keep = ap.op.keepdims
    count = math.prod(x.shape[a] for a in axes)
    is_mean = type(ap.op) is graph_ir.Mean
    if count == 0:
        # As in NumPy: the sum of nothing is 0 and the mean of nothing is NaN (without
        # NumPy's warning), in either mode; an int format cannot hold that NaN.
        if is_mean and ap.storage().kind not in ("float", "complex"):
            raise ap.fail(f"the mean over an empty axis is NaN, which {ap.storage()} "
                          "cannot hold", hint="cast to a float format first")
        return [ap.round(np.full(_reduced_shape(x.shape, axes, keep),
                                 np.nan if is_mean else 0.0))]
    if ap.mode == "fast" and ap.operand_storage().kind in ("float", "complex"):
        acc = accum_of(ap.operand_types[0].element).np_dtype
        fn = np.mean if is_mean else np.sum
        with np.errstate(all="ignore"):
            return [ap.round(settle_nans(fn(x.astype(acc), axis=axes, keepdims=keep)))]
    # A NaN sum is the default NaN: the sign of a NaN from NumPy's sum of its rows
    # depends on how many rows it reduces at once (the block a device holds).
    out = settle_nans(sum_rounded(x, axes, keep, _reduce_to(ap),
                                  divisor=count if is_mean else 1))
    return [ap.round(out) if ap.stochastic() else out]


def ieee_extreme(out: np.ndarray, w: np.ndarray, axes: tuple[int, ...], keep: bool,
                 is_max: bool) -> np.ndarray:
    """``out`` (NumPy's max or min of ``w`` over ``axes``) made independent of the order
    NumPy visits the elements in, as IEEE 754-2019 ``maximum``/``minimum`` define it:
    +0 is above -0, and a NaN result is the default quiet NaN (whatever NaN came in).

    NumPy returns whichever zero or NaN it met first, and that order changes with the
    array's layout; a reduction split over devices would then change bits.
    """
    zero = out == 0
    if zero.any():
        # max: +0 wherever some +0 was reduced; min: -0 wherever some -0 was.
        hit = (w == 0) & (np.signbit(w) != is_max)
        found = np.any(hit, axis=axes, keepdims=keep)
        negative = ~found if is_max else found
        out = np.where(zero, np.where(negative, -0.0, 0.0), out)
    nan = np.isnan(out)
    if nan.any():
        out = np.where(nan, np.nan, out)
    return out


@rule(graph_ir.Max, graph_ir.Min)
def extreme(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Maximum or minimum over ``axes``; exact (the result is an element), NaN wins,
    signed zeros and NaNs as :func:`ieee_extreme` says."""
    (x,) = operands
    axes = _axes(ap, x.ndim)
    is_max = type(ap.op) is graph_ir.Max
    fn = np.max if is_max else np.min
    if ap.operand_storage().kind == "complex":
        raise ap.fail("complex values are not ordered", hint="reduce abs(x) instead")
    empty = [a for a in axes if x.shape[a] == 0]
    if empty:
        raise ap.fail(f"reduces axis {empty[0]} of a {x.shape} tensor, which is empty; "
                      f"the {'maximum' if is_max else 'minimum'} of no values does not "
                      "exist", hint="reduce only non-empty axes")
    if ap.operand_storage().kind in ("int", "bool"):
        return [np.asarray(fn(x, axis=axes, keepdims=ap.op.keepdims))]
    w = ap.wide(x)
    out = np.asarray(fn(w, axis=axes, keepdims=ap.op.keepdims))
    return [ap.select(ieee_extreme(out, w, axes, ap.op.keepdims, is_max))]


@rule(graph_ir.Softmax)
def softmax(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """``e / sum(e)`` along ``axis`` in float64, ``e = exp_f64_specified(x - max)``,
    one rounding."""
    (x,) = operands
    if ap.operand_storage().kind != "float":
        raise ap.fail(f"needs a real float operand, not {ap.operand_storage()}",
                      hint="cast to a float format first")
    w = ap.wide(x)
    if w.size == 0:
        return [ap.round(w)]
    w1 = w.reshape(1) if w.ndim == 0 else w  # the softmax of a scalar is 1 (or NaN)
    axis = ap.op.axis % w1.ndim
    e = exp_f64_specified(w1 - np.max(w1, axis=axis, keepdims=True))
    total = sum_rounded(e, axis, True, _F64)
    return [ap.round(settle_nans((e / total).reshape(w.shape)))]


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's split: ``x == hi + lo`` exactly, each with at most 26 significant bits."""
    c = VELTKAMP_SPLITTER * x
    hi = c - (c - x)
    return hi, x - hi


def square_terms(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Float64 terms whose exact sum is ``sum((a - b)**2)`` (barring over/underflow).

    TwoSum gives ``a - b == s + e`` exactly; splitting ``s`` and ``e`` gives four pieces
    of at most 26 bits, whose ten pairwise products are exact in float64.
    """
    s = a - b
    bb = s - a
    e = (a - (s - bb)) + (-b - bb)  # TwoSum of a and -b
    e = np.where(np.isfinite(s), e, 0.0)  # inf - inf: the NaN/inf of s already decides
    pieces = [*_split(s), *_split(e)]
    terms = [p * p for p in pieces]
    terms += [2.0 * pieces[i] * pieces[j] for i in range(4) for j in range(i + 1, 4)]
    return np.stack(terms)


@rule(graph_ir.Mse)
def mse(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """``mean((a - b)**2)`` over all elements, a scalar.

    Exact then rounded once for every real format inside float32's exponent range
    (every format but f64): ``a - b`` is represented exactly as a float64 pair and its
    square as ten exact float64 products, summed exactly by ``sum_rounded``. For f64
    operands the same holds unless a term overflows or underflows float64. Integers are
    exact (Python ints). Complex operands: ``mean((a - b)**2)`` in complex128, rounded
    once (not exact).
    """
    a, b = operands
    fmt = ap.operand_storage()
    n = a.size
    if fmt.kind == "int":
        if n == 0:
            raise ap.fail("the mean of no integers is undefined")
        d = a.astype(object) - b.astype(object)
        total = int(np.sum(d * d))
        return [np.asarray(round_fraction(Fraction(total, n), fmt), dtype=fmt.np_dtype)]
    wa, wb = ap.wide(a, 0), ap.wide(b, 1)
    if n == 0:
        return [ap.round(np.array(np.nan))]
    if np.iscomplexobj(wa):
        return [ap.round(np.mean((wa - wb) ** 2))]
    with np.errstate(all="ignore"):
        terms = square_terms(wa, wb)
    out = sum_rounded(terms, None, False, _reduce_to(ap), divisor=n)
    return [ap.round(out) if ap.stochastic() else out]


@rule(graph_ir.Fft, graph_ir.Ifft)
def fft(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """NumPy's (pocketfft) DFT in complex128, rounded once: deterministic per NumPy build."""
    w = ap.wide(operands[0]).astype(np.complex128)
    fn = np.fft.fft if type(ap.op) is graph_ir.Fft else np.fft.ifft
    return [ap.round(settle_nans(fn(w, axis=ap.op.axis)))]
