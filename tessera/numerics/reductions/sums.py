"""Correctly rounded sums and means (``sum_rounded``), by the scheme of ``rounding``.

Level 1 is NumPy's float64 sum with the bound gamma_n * sum(|x|), valid for every
summation order. Level 2 (undecided rows) is the double-double sum of
``exact.refine_sum``; what it leaves open (exact ties, mostly of narrow inputs) it
takes again with a quantum: where the values' exponent range proves the double-double
sum exact, ``round_double_double`` rounds it exactly. Level 3 is exact Fraction
arithmetic, for what is left (non-finite values, extreme exponent ranges, and means
whose exact sum lands on a tie after the division); a float64 sum of finite values
takes ``math.fsum`` there instead, the same correctly rounded value at a small part of
the cost (the carried row sums of attention over key blocks cancel to remainders that
only this level decides).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from tessera.errors import DTypeError
from tessera.numerics.formats.convert import cast_exact, real_kind
from tessera.numerics.formats.dtypes import DType
from tessera.numerics.reductions.exact import exact_sum, min_quantum, refine_sum
from tessera.numerics.reductions.matmul.operands import line_quanta, precision
from tessera.numerics.reductions.rounding import (
    TINY,
    U,
    gamma,
    round_double_double,
    round_fraction,
    round_verified,
    target,
)


def _axes(axis: int | tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if any(not -ndim <= int(a) < ndim for a in axes):
        raise DTypeError(f"axis {axis} is out of range for an array of rank {ndim}",
                         hint=f"use axes between {-ndim} and {ndim - 1}")
    return tuple(sorted({int(a) % ndim for a in axes}))


def _int_sum(rows: np.ndarray) -> np.ndarray:
    wide = rows.astype(np.int64)
    peak = int(np.abs(wide).max(initial=0))
    if peak * max(rows.shape[-1], 1) < 2**62:
        return wide.sum(axis=-1)
    return rows.astype(object).sum(axis=-1)  # Python ints: exact at any size


def _sum_rows(rows: np.ndarray, fmt_to: DType, divisor: int) -> np.ndarray:
    """Correctly rounded ``rows.sum(-1) / divisor`` for a real 2-D array."""
    n = rows.shape[-1]
    if real_kind(rows.dtype) in ("int", "bool"):
        total = _int_sum(rows)
        if divisor == 1 and total.dtype == np.int64:
            from tessera.numerics.formats.convert import convert

            return convert(total, fmt_to)  # one exact rounding of each integer
        approx = total.astype(np.float64) / divisor
        # Two roundings (int to float64, division), each below u relative.
        bound = np.abs(approx) * 2.0**-51 + TINY
        return round_verified(approx, bound, fmt_to, lambda idx: _rounded(
            [Fraction(int(total[i]), divisor) for i in idx.tolist()], np.arange(idx.size),
            fmt_to))
    x = rows.astype(np.float64)

    def by_fractions(idx: np.ndarray) -> np.ndarray:
        if fmt_to.name == "f64" and divisor == 1:
            return _fsum_rows(x, idx)
        vals = [exact_sum(x[i]) for i in idx.tolist()]
        return _rounded([v / divisor if isinstance(v, Fraction) else v for v in vals],
                        np.arange(len(vals)), fmt_to)

    def settle(idx: np.ndarray) -> np.ndarray:
        # The rows the double-double sum left open (ties of narrow inputs, mostly),
        # again: where the values' exponent range proves that sum exact, it is rounded
        # exactly; Fractions take the rest.
        chunk = x[idx]
        approx2, err, eta = refine_sum(chunk, None, min_quantum(chunk, precision(rows.dtype)))
        res = np.empty(idx.size, dtype=fmt_to.np_dtype)
        done = eta == 0
        if done.any():
            res[done] = round_double_double(approx2[done], err[done], fmt_to)
        if not done.all():
            res[~done] = by_fractions(idx[~done])
        return res

    def exact(idx: np.ndarray) -> np.ndarray:
        if divisor != 1 and fmt_to.name == "f64":
            return by_fractions(idx)
        # Second level: a double-double sum of the undecided rows, in cache-sized
        # batches; Fractions only where that cannot decide either.
        res = np.empty(idx.size, dtype=fmt_to.np_dtype)
        step = max(1, 65536 // max(n, 1))
        for first in range(0, idx.size, step):
            part = idx[first:first + step]
            chunk = x[part]  # a fresh copy: refine_sum may overwrite it
            if not np.isfinite(chunk).all():
                res[first:first + step] = by_fractions(part)
                continue
            approx2, err, eta = refine_sum(chunk)
            offset = err
            fallback = settle
            if divisor != 1:  # one more rounding, covered by widening the bound
                approx2 = approx2 / divisor
                eta = (np.abs(err) + eta) / divisor * (1 + 2.0**-50) + \
                    np.abs(approx2) * 2.0**-51
                offset = None
                fallback = by_fractions
            res[first:first + step] = round_verified(
                approx2, eta, fmt_to, lambda sub, part=part, fallback=fallback: fallback(
                    part[sub]), offset=offset)
        return res

    proven = None
    if 0 < n and precision(rows.dtype) <= 26:
        # Narrow values (bf16, f16, fp8, ...): every value of a row is a multiple of
        # 2**q; where the sum of |values| is below 2**(53 + q), every partial sum in any
        # order is a float64, so the float64 sum is exact (ties included).
        with np.errstate(over="ignore", invalid="ignore"):
            magnitude = np.abs(x).sum(axis=-1)
            quantum = line_quanta(rows, -1, x, precision(rows.dtype))
            top = np.ldexp(1.0, quantum + 53)
            proven = magnitude * (1 + 2 * gamma(n)) < top  # the slack: magnitude's rounding
    if fmt_to.name == "f64" and divisor == 1:
        # A float64 result is never decided by the float64 sum and its bound: go
        # straight to the double-double level, where the sum is not proven exact.
        if proven is None:
            return exact(np.arange(rows.shape[0]))
        res = x.sum(axis=-1) + 0.0  # an exact zero is +0 whatever the order
        rest = np.flatnonzero(~proven)
        if rest.size:
            res[rest] = exact(rest)
        return res
    with np.errstate(over="ignore", invalid="ignore"):
        approx = x.sum(axis=-1) + 0.0  # an exact zero is +0 whatever the order
        bound = gamma(max(n, 1)) * (np.abs(x).sum(axis=-1) if proven is None else magnitude)
        if proven is not None:
            bound[proven] = 0.0  # the float64 sum is exact
        if divisor != 1:
            approx = approx / divisor
            bound = bound / divisor * (1 + 4 * U) + np.abs(approx) * 2.0**-52 + TINY
    if rows.dtype.itemsize == 8:
        # float64 partial sums can overflow in one order and not in another: decide
        # every non-finite result exactly.
        redo = ~np.isfinite(approx)
        approx, bound = np.where(redo, 0.0, approx), np.where(redo, np.inf, bound)
    return round_verified(approx, bound, fmt_to, exact)


def _fsum_rows(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The float64 sums of the rows ``x[idx]``, each the exact sum rounded once to
    nearest even: ``math.fsum`` (Shewchuk's exact partials, "Adaptive Precision
    Floating-Point Arithmetic and Fast Robust Geometric Predicates", 1997, rounded once
    at the end), which costs a small part of the Fraction sum. A row with a NaN or an
    infinity, or whose partials overflow, takes the Fractions."""
    rows = x[idx]
    finite = np.isfinite(rows).all(axis=-1).tolist()
    out = np.empty(idx.size, dtype=np.float64)
    for k, row in enumerate(rows.tolist()):
        try:
            if finite[k]:
                out[k] = math.fsum(row) + 0.0  # an exact zero is +0
                continue
        except OverflowError:
            pass
        v = exact_sum(rows[k])
        out[k] = round_fraction(v, target("f64")) if isinstance(v, Fraction) else v
    return out


def _rounded(values: list[Any], idx: np.ndarray, fmt_to: DType) -> np.ndarray:
    out = np.empty(len(idx), dtype=fmt_to.np_dtype)
    for k, i in enumerate(idx.tolist()):
        v = values[i]
        out[k] = round_fraction(v, fmt_to) if isinstance(v, Fraction) else cast_exact(
            np.array(v), fmt_to)[()]
    return out


def sum_rounded(x: Any, axis: int | tuple[int, ...] | None, keepdims: bool, to: Any,
                divisor: int = 1) -> np.ndarray:
    """The exact sum of ``x`` along ``axis``, divided by ``divisor``, rounded once.

    ``divisor`` makes a correctly rounded mean (``divisor = n``) without the inexact
    ``1/n``. Inputs are any real or complex storage arrays; complex sums round the real
    and imaginary parts separately. The float64 fast path uses the bound
    gamma_n * sum(|x|), valid for every summation order.
    """
    fmt_to = target(to)
    if not isinstance(divisor, (int, np.integer)) or divisor < 1:
        raise DTypeError(f"divisor must be a positive int, got {divisor!r}",
                         hint="pass the element count of the reduction for a mean")
    arr = np.asarray(x)
    axes = _axes(axis, arr.ndim)
    kept = [d for i, d in enumerate(arr.shape) if i not in axes]
    moved = np.moveaxis(arr, axes, tuple(range(arr.ndim - len(axes), arr.ndim)))
    rows = moved.reshape(-1, math.prod(arr.shape[a] for a in axes))
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(arr.shape)) if keepdims \
        else tuple(kept)
    if real_kind(arr.dtype) == "complex" or fmt_to.kind == "complex":
        if fmt_to.kind != "complex":
            raise DTypeError(f"cannot sum complex values into {fmt_to}",
                             hint="sum x.real or abs(x), or reduce into c64/c128")
        out = np.empty(rows.shape[0], dtype=fmt_to.np_dtype)
        part = fmt_to.component
        out.real = _sum_rows(np.real(rows), part, int(divisor))
        out.imag = _sum_rows(np.imag(rows) if np.iscomplexobj(rows) else np.zeros_like(rows),
                             part, int(divisor))
        return out.reshape(out_shape)
    if fmt_to.kind == "bool":
        raise DTypeError("cannot reduce into bool", hint="reduce into an int format")
    return _sum_rows(rows, fmt_to, int(divisor)).reshape(out_shape)


