"""Exact accumulators: sums of products held exactly, rounded once at the end.

The tile level's exact ``mma`` and its exact accumulation across a K loop hold their
value here. Three forms, with the same exact values and the same bits when rounded:

* :class:`.lazy.ExactSum` (what :func:`exact_products` and :func:`to_exact` make):
  the operands and exact start values, unevaluated, rounded once by the correctly
  rounded matrix product (float64 with error bounds, the undecided elements settled
  exactly) -- as fast as the graph interpreter's matmul;
* :class:`.carried.RowSums` (what a carried exact sum makes): the blocks of a long row,
  rounded once by ``sum_rounded``;
* :mod:`.reference`: a Kulisch accumulator of Python integer counts of ``2**-298``
  in object arrays, the definition, used where the lazy form cannot go (a selection
  that mixes accumulators of different structure with narrow values) and by the tests.

Both have ``dtype == EXACT``. The functions below take either form (and mixtures)
and keep the lazy form where they can.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.numerics.reductions.accumulator import reference
from tessera.numerics.reductions.accumulator.carried import RowSums
from tessera.numerics.reductions.accumulator.lazy import ExactSum, exact_dtype
from tessera.numerics.reductions.accumulator.reference import EXACT, OPERAND_SCALE, SCALE


def is_exact(x: Any) -> bool:
    """Whether ``x`` is an exact accumulator (either form)."""
    return getattr(x, "dtype", None) == EXACT


def to_exact(x: Any) -> Any:
    """The exact accumulator of the values ``x``: float arrays of formats up to f32 (or
    float64 values that are multiples of ``2**-SCALE``), or an accumulator whose
    elements a selection may have mixed with floats."""
    if type(x) is ExactSum or type(x) is RowSums:
        return x
    arr = np.asarray(x)
    if exact_dtype(arr.dtype):
        return ExactSum((), (arr,))
    return reference.to_exact(arr)


def _lazy(x: Any) -> ExactSum:
    if type(x) is ExactSum:
        return x
    arr = np.asarray(x)
    if arr.dtype == EXACT:
        return ExactSum((), (reference.to_exact(arr),))
    return ExactSum((), (arr,))


def add_exact(x: Any, y: Any) -> Any:
    """The exact sum of two accumulators (elementwise, NumPy broadcasting)."""
    if type(x) is not ExactSum and type(y) is not ExactSum:
        return reference.add_exact(x, y)
    return _lazy(x).plus(_lazy(y))


def negate_exact(x: Any) -> Any:
    """The exact negation of an accumulator."""
    if type(x) is ExactSum:
        return x.negated()
    return np.negative(x)


def exact_products(a: Any, b: Any) -> Any:
    """The exact ``a @ b`` over the last two axes (leading axes broadcast) of float
    arrays of formats up to f32, as an accumulator."""
    wa, wb = np.asarray(a), np.asarray(b)
    if wa.ndim >= 2 and wb.ndim >= 2 and wa.shape[-1] != wb.shape[-2]:
        raise ValueError(f"exact products of shapes {wa.shape} and {wb.shape}: "
                         "the contraction sizes differ")
    if exact_dtype(wa.dtype) and exact_dtype(wb.dtype) and wa.ndim >= 2 and wb.ndim >= 2:
        return ExactSum(((wa, wb),))
    return reference.exact_products(wa, wb)


def round_exact(x: Any, to: Any) -> np.ndarray:
    """The accumulator ``x`` rounded once, to nearest even, to the format ``to``."""
    if type(x) is ExactSum or type(x) is RowSums:
        return x.rounded(to)
    return reference.round_exact(x, to)


__all__ = ["EXACT", "OPERAND_SCALE", "SCALE", "ExactSum", "add_exact", "exact_products",
           "is_exact", "negate_exact", "round_exact", "to_exact"]
