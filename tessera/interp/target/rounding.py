"""Division, square root, reciprocal and f64 ``fma`` rounded toward zero, -inf or +inf
(``.rz``, ``.rm``, ``.rp``; PTX ISA sec. 9.7.3), as CUDA's ``__fdiv_rz``,
``__fsqrt_rd``, ``__frcp_ru``, ``__ddiv_ru`` and ``__fma_rz`` write them.

Each starts from the correctly rounded (to nearest) result ``s``, which NumPy computes
in the operands' type, and the sign of the exact result's distance from it, which
:func:`tessera.interp.target.numeric.toward` turns into the directed result. For f32
operands the sign is exact in float64 (a product of two f32 values has at most 48
significant bits); for f64 it is decided with ``fractions.Fraction``, element by
element. Special operands and results (NaN, infinities, division by zero) are the
nearest result's; a finite result beyond the format's range is the largest finite value
where the direction points back.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tessera.interp.target import numeric as tn

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _side(exact: Fraction, s: float) -> int:
    if math.isinf(s):  # a finite exact value beyond the range
        return -1 if s > 0 else 1
    return (exact > s) - (exact < s)


def _f64_sides(s: np.ndarray, finite: np.ndarray, exact: object) -> np.ndarray:
    """The sign of exact - ``s`` where ``finite``, ``exact(i)`` the exact value of
    element ``i`` as a Fraction."""
    side = np.zeros(s.shape, np.int64)
    for i in np.flatnonzero(finite.ravel()):
        side.flat[i] = _side(exact(i), float(s.flat[i]))  # type: ignore[operator]
    return side


def divide(a: np.ndarray, b: np.ndarray, rnd: str) -> np.ndarray:
    """``div.{rz,rm,rp}`` of f32 or f64 (``rcp`` is a division of 1)."""
    dt = a.dtype
    with np.errstate(all="ignore"):
        s = np.asarray(a / b, dt)
        finite = np.isfinite(a) & np.isfinite(b) & (b != 0)
        if dt == F32:
            a64, b64, s64 = a.astype(F64), b.astype(F64), s.astype(F64)
            side = np.sign(a64 - s64 * b64) * np.sign(b64)  # s * b is exact
        else:
            side = _f64_sides(s, finite, lambda i: Fraction(float(a.flat[i])) /
                              Fraction(float(b.flat[i])))
    out = tn.toward(s, np.where(finite, side, 0), rnd)  # special values stay
    return tn.canonical_nans(out.astype(dt)) if dt == F32 else out.astype(dt)


def square_root(a: np.ndarray, rnd: str) -> np.ndarray:
    """``sqrt.{rz,rm,rp}`` of f32 or f64."""
    dt = a.dtype
    with np.errstate(all="ignore"):
        s = np.sqrt(a)
        finite = np.isfinite(a) & (a > 0)
        if dt == F32:
            s64 = s.astype(F64)
            side = np.sign(a.astype(F64) - s64 * s64)  # s * s is exact
        else:  # the sign of a - s^2 is that of sqrt(a) - s
            side = _f64_sides(s, finite, lambda i: Fraction(float(a.flat[i])) /
                              Fraction(float(s.flat[i])))
    out = tn.toward(s, np.where(finite, side, 0), rnd)  # special values stay
    return tn.canonical_nans(out.astype(dt)) if dt == F32 else out.astype(dt)


def fma64(a: np.ndarray, b: np.ndarray, c: np.ndarray, rnd: str) -> np.ndarray:
    """``fma.{rz,rm,rp}.f64``: ``a * b + c`` rounded once in the direction; an exact
    zero sum is -0 under ``.rm`` unless both terms are +0 (IEEE 754, 6.3)."""
    s = tn.fma_f64(a, b, c)
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    side = _f64_sides(s, finite, lambda i: Fraction(float(a.flat[i])) *
                      Fraction(float(b.flat[i])) + Fraction(float(c.flat[i])))
    out = tn.toward(s, side, rnd)
    if rnd == "rm":  # an exact zero: both terms zero, or a product that cancels c
        with np.errstate(all="ignore"):
            product = a * b
        plus = (product == 0) & ~np.signbit(product) & (c == 0) & ~np.signbit(c)
        out = np.where((s == 0) & (side == 0) & finite & ~plus, -0.0, out)
    return out.astype(F64)


__all__ = ["divide", "fma64", "square_root"]
