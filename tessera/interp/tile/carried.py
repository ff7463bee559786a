"""Carried exact sums of the tile simulator: ``tile.reduce(x, c)`` with ``exact``.

A row too long for one program is summed block by block; the running sum is an exact
accumulator (:mod:`tessera.numerics.reductions.accumulator`), so the blocks' order and
size cannot change a bit. A carried *sum* returns the accumulator ``c + sum(x)``, which
the simulator rounds once where another op uses it (:mod:`.numeric`); a carried *mean*
returns ``(c + sum(x)) / count`` rounded once (``round_fraction``: the exact quotient,
to nearest even), the value the graph's exact mean of the whole row gives.

The block's terms enter the reference accumulator (Python integer counts of
``2**-298``): float formats of at most 32 bits always fit, float64 terms when they are
whole multiples of the quantum (the products of two such values that an exact mean
squared error sums); any other float64 term is a :class:`CarriedSumError`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from tessera.errors import TesseraError
from tessera.interp.tile.numeric import Num, num
from tessera.ir.core import Instr
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.numerics import convert
from tessera.numerics.reductions.accumulator import add_exact, reference, to_exact
from tessera.numerics.reductions.rounding import round_fraction


class CarriedSumError(TesseraError):
    """A carried exact sum met a term its accumulator cannot hold exactly."""


def block_sum(x: np.ndarray, axis: int) -> np.ndarray:
    """The exact sum of ``x`` (storage values) along ``axis`` as a reference accumulator:
    Python integer counts of ``2**-298`` (floats for non-finite sums)."""
    try:
        terms = reference.to_exact(x)
    except ValueError as err:
        raise CarriedSumError(f"a carried exact sum of float64 terms: {err}",
                              hint="carry sums of formats of at most 32 bits, or of "
                                   "products of two such values") from None
    moved = np.moveaxis(terms, axis, -1)
    if moved.shape[-1] == 0:
        return np.zeros(moved.shape[:-1], dtype=reference.EXACT)
    with np.errstate(invalid="ignore"):  # inf + -inf is the NaN of the rule
        return reference.add_exact.reduce(moved, axis=-1)


def _quotient(total: Any, count: int, element: Any) -> Any:
    """``total * 2**-298 / count`` rounded once to ``element`` (the default NaN)."""
    if type(total) is not int:
        value = float(total)  # a non-finite sum: its class survives the division
        return convert(np.array(math.nan if value != value else value), element)[()]
    return round_fraction(Fraction(total, count << reference.SCALE), element)


def carried_rule(instr: Instr) -> Any:
    """The impl of a ``tile.reduce`` with an accumulator operand (exact mode; fast mode
    computes the same exact values)."""
    op = instr.op
    assert isinstance(op, tile_compute.Reduce)
    src = instr.operands[0].type
    assert isinstance(src, TensorType)
    axis = op.axis % src.rank - src.rank  # from the end: works with program axes
    n: Num = num(src.element)
    out = instr.results[0].type
    assert isinstance(out, TensorType)
    element = out.element

    def total(x: Any, c: Any) -> np.ndarray:
        acc = np.asarray(to_exact(c))
        return np.asarray(add_exact(acc, block_sum(np.asarray(n.narrow(x)), axis)))

    if op.kind == "sum":
        return total

    def mean(x: Any, c: Any) -> Any:
        sums = total(x, c)
        flat = [_quotient(v, op.count, element) for v in sums.reshape(-1).tolist()]
        return np.array(flat, dtype=num(element).sd).reshape(sums.shape)
    return mean


__all__ = ["CarriedSumError", "block_sum", "carried_rule"]
