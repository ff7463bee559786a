"""Elementary functions of floats rounded correctly, the same bits on every machine.

A float64 library function (``np.sin``, ``np.exp2`` ...) is within a few ulps of the
exact value but not correctly rounded, and different platforms' ``libm`` differ there.
Rounded once more to a narrower format, its value decides the result everywhere except
within :data:`MARGIN_ULPS` float64 ulps of the midpoint between two values of that
format; :func:`correctly_rounded` decides those rare elements with :mod:`decimal` at 60
digits (:func:`evaluate`: ``2^a``, ``log2 a``, ``1/sqrt a``, ``tanh a``, ``sin a``,
``cos a``; :func:`pow_f32`: ``a^b``). ``sin`` and ``cos`` reduce their argument modulo 2
pi with pi to as many digits as the argument's magnitude needs (a float32 reaches
3.4e38), pi from Machin's formula ``pi = 16 atan(1/5) - 4 atan(1/239)``.

Used by the Target IR interpreter's ``.approx`` models and the graph interpreter's
``sin``, ``cos`` and ``pow`` of formats of up to 32 bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from decimal import Decimal, getcontext, localcontext

import numpy as np

from tessera.numerics.formats.convert import round_to_odd_f32

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
#: float64 ulps a library function's result may be from the exact value before the
#: element is decided exactly instead
MARGIN_ULPS = 256


def _atan_inverse(n: int, digits: int) -> Decimal:
    """atan(1/n) to ``digits`` digits by its Taylor series (converges for n >= 2)."""
    with localcontext() as ctx:
        ctx.prec = digits + 5
        x = Decimal(1) / n
        x2, term, total, k = x * x, x, x, 1
        while True:
            term *= -x2
            step = term / (2 * k + 1)
            if step == 0 or abs(step) < Decimal(10) ** -(digits + 3):
                return +total
            total += step
            k += 1


@functools.lru_cache(maxsize=8)
def pi(digits: int) -> Decimal:
    """pi to ``digits`` significant digits."""
    with localcontext() as ctx:
        ctx.prec = digits + 5
        return 16 * _atan_inverse(5, digits) - 4 * _atan_inverse(239, digits)


def _series(r: Decimal, start: int) -> Decimal:
    """sin r (``start`` 1) or cos r (``start`` 0) by Taylor series, |r| <= pi."""
    term = r if start == 1 else Decimal(1)
    total, n = term, start
    r2 = r * r
    while True:
        term = -term * r2 / ((n + 1) * (n + 2))
        n += 2
        if term == 0 or abs(term) < abs(total) * Decimal(10) ** -(getcontext().prec + 2):
            return total
        total += term


def _sin_cos(a: Decimal, start: int) -> Decimal:
    digits = getcontext().prec
    with localcontext() as ctx:
        ctx.prec = digits + max(0, a.adjusted()) + 10
        two_pi = 2 * pi(ctx.prec)
        r = a.remainder_near(two_pi)  # in [-pi, pi]
        # near a zero of the function the series cancels: more digits for small results
        ctx.prec += 20
        value = _series(r, start)
    return +value


def evaluate(fn: str, a: Decimal) -> Decimal:
    """``fn`` (``ex2``, ``lg2``, ``rsqrt``, ``tanh``, ``sin``, ``cos``) of ``a``, to the
    current context's precision."""
    if fn == "ex2":
        return Decimal(2) ** a
    if fn == "lg2":
        return a.ln() / Decimal(2).ln()
    if fn == "rsqrt":
        return 1 / a.sqrt()
    if fn == "tanh":
        with localcontext() as ctx:
            ctx.prec += max(0, -a.adjusted()) + 10  # 1 - e^-2|a| cancels for small a
            t = (-2 * abs(a)).exp()  # never overflows: +0 for huge |a|
            value = ((1 - t) / (1 + t)).copy_sign(a)
        return +value
    if fn in ("sin", "cos"):
        return _sin_cos(a, 1 if fn == "sin" else 0)
    raise ValueError(f"no exact {fn}")


def _nearest(candidate: np.ndarray, below: np.ndarray, above: np.ndarray,
             exact: Decimal) -> np.ndarray:
    """The one of ``below``, ``candidate``, ``above`` (neighbouring values of one
    format) nearest ``exact``. No tie arises: these functions of floats are exact only
    where the float64 value already decided them."""
    c = Decimal(float(candidate))
    if exact < (Decimal(float(below)) + c) / 2:
        return below
    if exact > (c + Decimal(float(above))) / 2:
        return above
    return candidate


def correctly_rounded(y64: np.ndarray, dt: np.dtype, exact: Callable[[int], Decimal]
                      ) -> np.ndarray:
    """f rounded once to ``dt`` (RNE, f32, f16 or bf16), given float64 approximations
    ``y64`` of it: ``y64`` decides every element that lies more than
    :data:`MARGIN_ULPS` float64 ulps from the midpoint between two ``dt`` values;
    ``exact(i)`` decides the rest, element ``i``'s value at 60 digits. The same bits on
    every machine whatever its ``libm``, subnormal results included."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = y64.astype(dt) if dt == F32 else round_to_odd_f32(y64).astype(dt)
        below = np.nextafter(out, np.array(-np.inf, dt))
        above = np.nextafter(out, np.array(np.inf, dt))
        c64, lo, hi = out.astype(F64), below.astype(F64), above.astype(F64)
        gap = np.minimum(np.abs(y64 - (c64 + lo) / 2), np.abs(y64 - (c64 + hi) / 2))
        hard = np.isfinite(y64) & (y64 != 0) & np.isfinite(c64) & (
            gap <= MARGIN_ULPS * np.spacing(np.abs(y64)))
    idx = np.flatnonzero(hard)
    if idx.size:
        with localcontext() as ctx:
            ctx.prec = 60
            for i in idx:
                out.flat[i] = _nearest(out.flat[i], below.flat[i], above.flat[i], exact(int(i)))
    return out


def rounded_function(fn: str, x64: np.ndarray, y64: np.ndarray, dt: np.dtype) -> np.ndarray:
    """``fn`` of the float64 values ``x64`` (exact in ``dt`` or f32), whose float64
    approximations are ``y64``, correctly rounded to ``dt``."""
    return correctly_rounded(y64, dt, lambda i: evaluate(fn, Decimal(float(x64.flat[i]))))


def pow_f32(a64: np.ndarray, b64: np.ndarray) -> np.ndarray:
    """``a^b`` of float64 arrays holding float32 values, correctly rounded to float32
    (NumPy's float64 ``power``, decided exactly near a boundary); NaN where it is."""
    a64, b64 = np.broadcast_arrays(a64, b64)
    with np.errstate(all="ignore"):
        y64 = np.power(a64, b64)
    return correctly_rounded(y64, F32, lambda i: Decimal(float(a64.flat[i]))
                             ** Decimal(float(b64.flat[i])))


__all__ = ["MARGIN_ULPS", "correctly_rounded", "evaluate", "pi", "pow_f32", "rounded_function"]
