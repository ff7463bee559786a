"""Carried exact sums: a row summed block by block into one exact accumulator.

The tile level's ``tile.reduce(x, c)`` with ``exact`` (a row too long for one program,
walked in blocks) adds each block's terms to the running accumulator ``c``; the sum is
exact, so the blocks' order and size cannot change a bit. A carried *sum* returns the
accumulator ``c + sum(x)`` (rounded once later, where it is used); a carried *mean*
returns ``(c + sum(x)) / count`` rounded once to nearest even (``round_fraction`` of
the exact quotient), the value of the exact mean of the whole row.

The block's terms enter the reference accumulator (Python integer counts of
``2**-298``, :mod:`.reference`): float formats of at most 32 bits always fit, float64
terms when they are whole multiples of the quantum (the products of two such values,
which an exact mean squared error sums); any other float64 term is a
:class:`CarriedSumError`.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from tessera.errors import TesseraError
from tessera.numerics.formats.convert import convert
from tessera.numerics.reductions.accumulator import reference
from tessera.numerics.reductions.rounding import round_fraction, target


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
        return np.asarray(reference.add_exact.reduce(moved, axis=-1), dtype=reference.EXACT)


def _quotient(total: Any, count: int, to: Any) -> Any:
    """``total * 2**-298 / count`` rounded once to ``to`` (the default NaN)."""
    if type(total) is not int:
        value = float(total)  # a non-finite sum: its class survives the division
        return convert(np.array(math.nan if value != value else value), to)[()]
    return round_fraction(Fraction(total, count << reference.SCALE), to)


def carried_reduce(x: Any, c: Any, axis: int, kind: str, count: int, to: Any) -> Any:
    """``c + sum(x)`` along ``axis`` (``kind="sum"``: an exact accumulator), or that
    divided by ``count`` and rounded once to ``to`` (``kind="mean"``)."""
    acc = reference.to_exact(np.asarray(c))
    total = np.asarray(reference.add_exact(acc, block_sum(np.asarray(x), axis)),
                       dtype=reference.EXACT)
    if kind == "sum":
        return total
    flat = [_quotient(v, count, to) for v in total.reshape(-1).tolist()]
    return np.array(flat, dtype=target(to).np_dtype).reshape(total.shape)


__all__ = ["CarriedSumError", "block_sum", "carried_reduce"]
