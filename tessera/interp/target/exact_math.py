"""Elementary functions of one float at any precision, with :mod:`decimal`: the referee
the approximate-instruction models (:mod:`tessera.interp.target.approx`) call for the
rare element whose float64 value lies too near a rounding boundary to decide it.

Each function returns ``f(a)`` to the context's precision (plus guard digits it adds
itself where the evaluation cancels): ``2^a``, ``log2 a``, ``1/sqrt a``, ``tanh a``,
``sin a`` and ``cos a``. ``sin`` and ``cos`` reduce their argument modulo 2 pi with pi to
as many digits as the argument's magnitude needs (a float32 reaches 3.4e38), pi from
Machin's formula ``pi = 16 atan(1/5) - 4 atan(1/239)``.
"""

from __future__ import annotations

import functools
from decimal import Decimal, getcontext, localcontext


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


__all__ = ["evaluate", "pi"]
