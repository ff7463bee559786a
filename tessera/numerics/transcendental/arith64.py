"""The binary64 operations a specified function is written in, so that one definition
runs on NumPy arrays here and on PTX registers in :mod:`tessera.lower.arith.mathlib_steps`.

A function such as :func:`tessera.numerics.transcendental.erf64.erf_steps` takes an
:class:`Arith` and its input and calls only these operations: IEEE binary64
``add``/``sub``/``mul``/``div`` rounded to nearest even (never fused), ``neg`` and
``abs`` (the sign bit), ``less`` (false for a NaN), ``select``, the specified ``exp``
(:mod:`tessera.numerics.transcendental.exp64`), ``high_part`` (the low 32 bits of the
pattern cleared), ``exponent_split`` (fdlibm's ``log`` reduction, integer operations on
the high word) and ``quiet_nan_of``. Branches are selects: every element computes
every case. :class:`NumpyArith` implements them on float64 arrays, so the same calls
give the same bits on both sides by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

import numpy as np

from tessera.numerics.transcendental.exp64 import QUIET_BIT_F64, exp_f64_specified

V = TypeVar("V")
P = TypeVar("P")


class Arith(Protocol, Generic[V, P]):
    """The binary64 operations (values ``V``, predicates ``P``) of a specified function."""

    def const(self, c: float) -> V: ...
    def add(self, a: V, b: V) -> V: ...
    def sub(self, a: V, b: V) -> V: ...
    def mul(self, a: V, b: V) -> V: ...
    def div(self, a: V, b: V) -> V: ...
    def neg(self, a: V) -> V: ...
    def abs(self, a: V) -> V: ...
    def less(self, a: V, b: V) -> P: ...
    def select(self, p: P, a: V, b: V) -> V: ...
    def exp(self, a: V) -> V: ...
    def high_part(self, a: V) -> V: ...
    def exponent_split(self, a: V) -> tuple[V, V]: ...
    def quiet_nan_of(self, x: V, v: V) -> V: ...


class NumpyArith:
    """:class:`Arith` on binary64 NumPy arrays (NumPy's ``+ - * /`` are IEEE binary64,
    rounded to nearest even and never fused)."""

    def const(self, c: float) -> np.ndarray:
        return np.float64(c)  # type: ignore[return-value]

    add, sub, mul, div = (staticmethod(np.add), staticmethod(np.subtract),
                          staticmethod(np.multiply), staticmethod(np.divide))
    neg, abs, less = staticmethod(np.negative), staticmethod(np.abs), staticmethod(np.less)

    def select(self, p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(p, a, b)

    def exp(self, a: np.ndarray) -> np.ndarray:
        return exp_f64_specified(a)

    def high_part(self, a: np.ndarray) -> np.ndarray:
        bits = np.asarray(a, np.float64).view(np.uint64) & np.uint64(0xFFFFFFFF00000000)
        return bits.view(np.float64)

    def exponent_split(self, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(m, k)`` with ``a = m 2^k``, ``sqrt(2)/2 <= m < sqrt(2)`` for a positive
        normal ``a`` (step 2 of :mod:`tessera.numerics.transcendental.log64`)."""
        bits = np.asarray(a, np.float64).view(np.uint64)
        high = (bits >> np.uint64(32)).astype(np.uint32)
        mant = high & np.uint32(0xFFFFF)
        i = (mant + np.uint32(0x95F64)) & np.uint32(0x100000)
        new_high = (mant | (i ^ np.uint32(0x3FF00000))).astype(np.uint64)
        m = ((new_high << np.uint64(32)) | (bits & np.uint64(0xFFFFFFFF))).view(np.float64)
        k = (high >> np.uint32(20)) + (i >> np.uint32(20))  # u32, as the PTX
        return m, (k.astype(np.int32) - np.int32(1023)).astype(np.float64)

    def quiet_nan_of(self, x: np.ndarray, v: np.ndarray) -> np.ndarray:
        nan = np.isnan(x)
        if not nan.any():
            return v
        quiet = (x.view(np.uint64) | np.uint64(QUIET_BIT_F64)).view(np.float64)
        return np.where(nan, quiet, v)


def run_numpy(steps: Callable[[NumpyArith, np.ndarray], np.ndarray],
              x: np.ndarray) -> np.ndarray:
    """``steps`` on a binary64 array (any shape, computed flat), IEEE exceptions quiet:
    the cases an element does not select may divide by zero or overflow."""
    w = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        out = steps(NumpyArith(), np.ascontiguousarray(w).reshape(-1))
    return np.asarray(out, np.float64).reshape(w.shape)


__all__ = ["Arith", "NumpyArith", "P", "V", "run_numpy"]
