"""A table-driven f32 ``exp`` with a rounding test: the constants and the proof.

:mod:`tessera.numerics.transcendental.exp` specifies checked mode's ``exp`` by an
algorithm that is the correctly rounded e^x on every binary32 input. Any other method
that provably returns the correctly rounded result therefore has the same bits. This
module defines a cheaper one in Tang's style (P. T. P. Tang, "Table-driven
implementation of the exponential function in IEEE floating-point arithmetic", ACM
TOMS 15(2), 1989), which :func:`tessera.lower.arith.mathlib.emit_exp_f32` emits:

1. ``xc``: ``x`` clamped to [-104, 89] in binary32 (a NaN becomes 89, answered last).
2. ``t = fma.rn.f32(xc, INV_L32, SHIFT32)``: ``N = rne(xc * INV_L32)`` sits in the low
   bits of ``t`` (``SHIFT32`` = 1.5 * 2^23 has ulp 1 and ``|N| < 2^15``);
   ``n = t - SHIFT32`` is ``N`` exactly. ``N`` may be one off ``rne(x * 128 / ln 2)``
   (``INV_L32`` is rounded), which only widens the reduced argument to ``|r| < RADIUS``.
3. ``r1 = fma.rn.f32(n, -L1, xc)`` is exact: ``L1`` has 9 significant bits, so
   ``n * L1`` is exact, and ``x - n * L1`` lies on ``x``'s grid (or ``L1``'s) with
   fewer than 24 significant bits for every ``|x| <= 104`` (:func:`check_reduction`).
4. ``r = fma.rn.f64(n, -L2, r1)``: ``L2`` = RN64(ln 2 / 128 - L1), so
   ``r = x - N ln 2 / 128`` within ``|N| |ln 2/128 - L1 - L2| + 2^-53 |r|``.
5. ``q = r * P(r)``, ``P`` a degree-3 polynomial for ``(e^r - 1) / r`` (three ``fma``
   and a ``mul``), and ``s = fma.rn.f64(T[j], q, T[j])`` with ``T[j]`` = RN64(2^(j/128)),
   ``j = N mod 128`` read from a 128-entry table (:data:`TABLE`).
6. ``v = s * 2^m``, ``m = N >> 7``, by adding ``m`` to ``s``'s exponent field (exact:
   ``v`` is a normal binary64), then one RNE conversion to binary32.

:func:`error_bound` proves ``|v - e^x| <= EPS e^x`` with ``EPS`` < 2^-51. A binary32
result is then the correctly rounded e^x unless a rounding boundary (a midpoint
between binary32 neighbours) lies within ``EPS e^x`` of ``v``: in units of ``v``'s last
binary64 place that is at most ``EPS * 2^53 * (1 + EPS)`` ulps, and the boundaries are
where the 29 bits binary32 drops equal ``2^28``. So when those bits are more than
:data:`MARGIN_ULPS` from ``2^28`` the conversion is correct; otherwise (about one input
in 2^24), and for results that may be binary32 subnormals (``-104 < x < X_NORMAL``,
where the boundaries are elsewhere), the specified algorithm itself runs. Every
result is therefore the correctly rounded one, the bits of
:func:`~tessera.numerics.transcendental.exp.exp_f32`.
"""

from __future__ import annotations

import decimal
from fractions import Fraction
from functools import cache

import numpy as np

from tessera.numerics.transcendental.exp import chebyshev

#: log2 of the table size
TABLE_BITS = 7
#: the table's entries: 2^(j / 128), j = 0..127
TABLE_SIZE = 1 << TABLE_BITS
#: fma.rn.f32 with this addend leaves rne(x * INV_L32) in the low bits of the result
SHIFT32 = 12582912.0  # 1.5 * 2^23
#: binary32 bit pattern of SHIFT32: N = bits(t) - SHIFT32_BITS
SHIFT32_BITS = 0x4B400000
#: the first part of ln 2 / 128: 355 * 2^-16 (9 significant bits)
L1 = 355 / 65536
#: binary32 results below 2^-126 come from x below ln(2^-126) = -87.33654...: from
#: here down the specified algorithm runs (down to the clamp, whose result is +0)
X_NORMAL = -87.33
#: the bound of the rounding test, in binary64 ulps of v
MARGIN_ULPS = 8
#: the degree of P
DEGREE = 3
#: |r| stays below this (ln 2 / 256 and N's possible one-off)
RADIUS = Fraction(272, 100000)
#: |N| <= 104 * 128 / ln 2 < 19206 after the clamp (plus one)
N_MAX = 19207


def _ln2(prec: int = 60) -> Fraction:
    with decimal.localcontext() as ctx:
        ctx.prec = prec
        return Fraction(decimal.Decimal(2).ln())


@cache
def table() -> tuple[float, ...]:
    """RN64(2^(j / 128)) for j = 0..127 (``decimal`` at 40 digits, then the correctly
    rounded conversion of its decimal string)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 40
        ln2 = decimal.Decimal(2).ln()
        return tuple(float((ln2 * j / TABLE_SIZE).exp()) for j in range(TABLE_SIZE))


def table_bits() -> tuple[int, ...]:
    """The table as binary64 bit patterns (the ``.b64`` initializer)."""
    return tuple(int(b) for b in np.array(table(), np.float64).view(np.uint64))


def inv_l32() -> float:
    """RN32(128 / ln 2)."""
    return float(np.float32(float(TABLE_SIZE / _ln2())))


def l2() -> float:
    """RN64(ln 2 / 128 - L1)."""
    return float(_ln2() / TABLE_SIZE - Fraction(L1))


@cache
def _economized(taylor: int = 16) -> tuple[tuple[Fraction, ...], Fraction]:
    """Exact coefficients (constant first) of ``(e^r - 1) / r`` = sum r^k / (k+1)!,
    truncated at ``taylor`` and Chebyshev-economized to :data:`DEGREE` on
    [-RADIUS, RADIUS]; and the bound on the error this adds (the tail beyond ``taylor``
    included)."""
    import math

    a = [Fraction(1, math.factorial(k + 1)) for k in range(taylor + 1)]
    bound = 2 * RADIUS ** (taylor + 1) / math.factorial(taylor + 2)  # tail, e^r < 2
    for k in range(taylor, DEGREE, -1):
        cheb = chebyshev(k)
        scale = a[k] * RADIUS**k / cheb[k]
        for i, c in enumerate(cheb):
            a[i] -= scale * c / RADIUS**i
        bound += abs(scale)
    return tuple(a[:DEGREE + 1]), bound


def coefficients() -> tuple[float, ...]:
    """P's coefficients rounded to binary64, highest degree first (Horner order)."""
    return tuple(float(c) for c in reversed(_economized()[0]))


def error_bound() -> Fraction:
    """A bound on ``|v - e^x| / e^x`` for the fast path (steps 2-6), every clamped x.

    ``v = T~ (1 + q~) (1 + e_f)``: ``T~`` the rounded table entry (relative error <= u,
    u = 2^-53), ``e_f`` the rounding of the last fma (<= u), ``q~`` = e^r* e^dr - 1 +
    dq with ``r*`` the exact reduced argument, ``dr`` the error of ``r`` and ``dq`` the
    polynomial's approximation and rounding errors. So ``|v / e^x - 1| <= (1 + u)^2
    (e^|dr| + |dq| e^RADIUS) - 1``."""
    u = Fraction(1, 2**53)
    rho = RADIUS
    dr = N_MAX * abs(_ln2() / TABLE_SIZE - Fraction(L1) - Fraction(l2())) + u * rho
    approx = rho * _economized()[1]
    # rounding of the coefficients (each <= u |c| <= u) times r^k, and Horner: the
    # last fma (P ~ 1.002) and the mul by r each add u relative: |q| (2u + 3u rho)
    rounding = rho * u * 4 + rho * Fraction(1002, 1000) * 3 * u
    dq = approx + rounding
    exp_dr = 1 + dr * Fraction(1001, 1000)  # e^d < 1 + 1.001 d for d < 2^-40
    e_rho = Fraction(10028, 10000)  # e^0.00272 < 1.0028
    return (1 + u) ** 2 * (exp_dr + dq * e_rho) - 1


def check_reduction() -> None:
    """Step 3's exactness: ``n * L1`` has at most 24 significant bits and ``x - n * L1``
    fits binary32 for every binary32 ``|x| <= 104`` (checked per binade of x, from the
    widest ``|r1|`` there). Raises AssertionError otherwise."""
    l1 = Fraction(L1)
    assert l1.denominator == 2**16 and l1.numerator < 2**9 and N_MAX < 2**15
    gap = abs(_ln2() / TABLE_SIZE - l1)
    for e in range(-9, 7):  # binades [2^e, 2^(e+1)) of |x|; below 2^-9, N = 0
        n_max = min(N_MAX, int(Fraction(2 ** (e + 1)) * TABLE_SIZE / _ln2()) + 1)
        r1_max = RADIUS + n_max * gap
        grid = min(Fraction(2) ** (e - 23), Fraction(1, 2**16))
        assert r1_max < 2**24 * grid, (e, float(r1_max))


__all__ = ["DEGREE", "L1", "MARGIN_ULPS", "RADIUS", "SHIFT32", "SHIFT32_BITS", "TABLE_BITS",
           "TABLE_SIZE", "X_NORMAL", "check_reduction", "coefficients", "error_bound", "inv_l32",
           "l2", "table", "table_bits"]
