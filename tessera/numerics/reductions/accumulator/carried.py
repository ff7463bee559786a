"""Carried exact sums: a row summed block by block into one exact accumulator.

The tile level's ``tile.reduce(x, c)`` with ``exact`` (a row too long for one program,
walked in blocks) adds each block's terms to the running accumulator ``c``; the sum is
exact, so the blocks' order and size cannot change a bit. A carried *sum* returns the
accumulator ``c + sum(x)`` (rounded once later, where it is used); a carried *mean*
returns ``(c + sum(x)) / count`` rounded once to nearest even (``round_fraction`` of
the exact quotient), the value of the exact mean of the whole row.

The simulator holds the sum as the blocks that make it (:class:`RowSums`), rounded
once by ``sum_rounded`` over all of them side by side — the graph interpreter's own
correctly rounded sum, at its speed. Its value is that of the reference accumulator
(Python integer counts of ``2**-298``, :mod:`.reference`), which other uses read:
float formats of at most 32 bits always fit, float64 terms when they are whole
multiples of the quantum (the products of two such values, which an exact mean squared
error sums); any other float64 term is a :class:`CarriedSumError`.
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
from tessera.numerics.reductions.sums import sum_rounded


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


class RowSums:
    """A carried exact sum held as the blocks that make it, unevaluated: the exact sum
    of every block's terms along its last axis, plus an exact ``base`` (a reference
    accumulator, or None for zero). Rounded once by ``sum_rounded`` over the blocks
    side by side, the correctly rounded sum the graph interpreter computes, as fast as
    it; :func:`numpy.asarray` gives the reference form (Python integer counts), which
    every other use of an exact accumulator reads. Its arrays are never modified."""

    __slots__ = ("base", "blocks", "shape")

    dtype = reference.EXACT

    def __init__(self, blocks: tuple[np.ndarray, ...], base: np.ndarray | None,
                 shape: tuple[int, ...]) -> None:
        self.blocks, self.base, self.shape = blocks, base, shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        total = np.zeros(self.shape, dtype=reference.EXACT) if self.base is None \
            else np.broadcast_to(self.base, self.shape)
        with np.errstate(invalid="ignore"):  # inf + -inf is the NaN of the rule
            for block in self.blocks:
                total = reference.add_exact(total, block_sum(block, -1))
        out = np.asarray(total, dtype=reference.EXACT)
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, index: Any) -> Any:
        return np.asarray(self)[index]

    def plus(self, block: np.ndarray) -> RowSums:
        """The sum with one more block of terms (reduced along its last axis)."""
        shape = np.broadcast_shapes(self.shape, block.shape[:-1])
        return RowSums((*self.blocks, block), self.base, shape)

    def rounded(self, to: Any, divisor: int = 1) -> np.ndarray:
        """The exact sum divided by ``divisor``, rounded once to ``to`` (the default
        NaN)."""
        if self.base is not None:  # (a start that is not zero: the reference's way)
            return _rounded(np.asarray(self), divisor, to)
        if not self.blocks:
            return np.zeros(self.shape, dtype=target(to).np_dtype)
        wide = len({b.dtype for b in self.blocks}) > 1
        rows = np.concatenate([np.broadcast_to(b.astype(np.float64) if wide else b,
                                               (*self.shape, b.shape[-1]))
                               for b in self.blocks], axis=-1)
        out = sum_rounded(rows, -1, False, to, divisor=divisor)
        nan = out != out
        return np.where(nan, out.dtype.type(np.nan), out) if nan.any() else out

    @staticmethod
    def start(c: Any) -> RowSums:
        """The carried sum of an accumulator ``c`` (a zero start holds no base)."""
        if isinstance(c, RowSums):
            return c
        acc = reference.to_exact(np.asarray(c))
        zero = all(type(v) is int and v == 0 for v in acc.flat)
        return RowSums((), None if zero else acc, acc.shape)


def _rounded(total: np.ndarray, divisor: int, to: Any) -> np.ndarray:
    flat = [_quotient(v, divisor, to) for v in total.reshape(-1).tolist()]
    return np.array(flat, dtype=target(to).np_dtype).reshape(total.shape)


def carried_reduce(x: Any, c: Any, axis: int, kind: str, count: int, to: Any) -> Any:
    """``c + sum(x)`` along ``axis`` (``kind="sum"``: an exact accumulator, a
    :class:`RowSums`), or that divided by ``count`` and rounded once to ``to``
    (``kind="mean"``)."""
    block = np.moveaxis(np.asarray(x), axis, -1)
    if block.dtype == np.float64:
        _check_quanta(block)
    total = RowSums.start(c).plus(block)
    return total if kind == "sum" else total.rounded(to, count)


def _check_quanta(block: np.ndarray) -> None:
    """Float64 terms must be whole multiples of ``2**-298`` (module docstring)."""
    # (from 2**-245 up a float64's last bit is at least 2**-297: only smaller ones can
    # fall between the quanta)
    small = block[np.abs(block) < 2.0**-240]
    if small.size and np.any(small != np.ldexp(np.round(np.ldexp(small, 298)), -298)):
        raise CarriedSumError("a carried exact sum of float64 terms: a value is not a "
                              "multiple of 2**-298",
                              hint="carry sums of formats of at most 32 bits, or of "
                                   "products of two such values")


__all__ = ["CarriedSumError", "RowSums", "block_sum", "carried_reduce"]
