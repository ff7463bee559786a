"""The specified binary64 erf and erfc against a scalar transcription of fdlibm's
branches (Python floats are IEEE binary64, each operation correctly rounded) and against
erf evaluated with ``decimal`` from its everywhere-positive series: the documented
error bounds, special values and symmetry."""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext
from functools import cache

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental.erf64 import (
    DENOMINATORS,
    ERX,
    NUMERATORS,
    erf_f64_specified,
    erfc_f64_specified,
)
from tests.numerics.transcendental.test_exp64 import scalar_spec as exp_scalar

#: digits of the reference: 80 beyond the smallest erfc compared (about 1e-47)
PREC = 130


def _poly(coeffs: tuple[float, ...], v: float) -> float:
    coeffs = tuple(c for c in coeffs)
    while coeffs and coeffs[0] == 0.0:  # fdlibm's polynomials have no padding
        coeffs = coeffs[1:]
    h = coeffs[0]
    for c in coeffs[1:]:
        h = h * v + c
    return h


def _rational(k: int, v: float) -> float:
    return _poly(NUMERATORS[k], v) / (1.0 + v * _poly(DENOMINATORS[k], v))


def _tail(a: float, k: int) -> float:
    """fdlibm's erfc for a >= 1.25: exp(-s*s-0.5625) * exp((s-a)(s+a) + R/S) / a."""
    s = struct.unpack("<d", struct.pack("<Q", struct.unpack("<Q", struct.pack("<d", a))[0]
                                        & 0xFFFFFFFF00000000))[0]
    y = _rational(k, 1.0 / (a * a))
    return exp_scalar(-0.5625 - s * s) * exp_scalar((s - a) * (s + a) + y) / a


def _interval(a: float) -> int:
    return 0 if a < 0.84375 else 1 if a < 1.25 else 2 if a < 1 / 0.35 else 3


def scalar_erf(x: float) -> float:
    """fdlibm's erf with its branches, the specified exp and no tiny-argument cases."""
    a = min(abs(x), 28.0)
    k = _interval(a)
    if k == 0:
        return x + x * _rational(0, x * x)
    e = ERX + _rational(1, a - 1.0) if k == 1 else 1.0 - _tail(a, k)
    return -e if x < 0 else e


def scalar_erfc(x: float) -> float:
    """fdlibm's erfc with its branches and the specified exp."""
    a = min(abs(x), 28.0)
    k = _interval(a)
    if k == 0:
        xy = x * _rational(0, x * x)
        return 1.0 - (x + xy) if x < 0.25 else 0.5 - (xy + (x - 0.5))
    if k == 1:
        y = _rational(1, a - 1.0)
        return (1.0 - ERX) - y if x > 0 else 1.0 + (ERX + y)
    t = _tail(a, k)
    return t if x > 0 else 2.0 - t


@cache
def _pi() -> Decimal:
    """pi by Machin's formula, 16 atan(1/5) - 4 atan(1/239), at PREC + 10 digits."""
    with localcontext() as ctx:
        ctx.prec = PREC + 10

        def atan_inv(n: int) -> Decimal:
            total, term, k, sq = Decimal(0), Decimal(1) / n, 0, n * n
            while term:
                total += term / (2 * k + 1) * (-1) ** k
                term /= sq
                k += 1
            return total
        return 16 * atan_inv(5) - 4 * atan_inv(239)


def exact_erf(x: float) -> Decimal:
    """erf(|x|) = 2/sqrt(pi) e^(-x^2) sum 2^n x^(2n+1) / (1*3*...*(2n+1)) at PREC digits
    (every term positive: nothing cancels)."""
    with localcontext() as ctx:
        ctx.prec = PREC + 10
        d = abs(Decimal(x))
        two_sq = 2 * d * d
        term, total, n = d, Decimal(0), 0
        while term > total * Decimal(10) ** -(PREC + 5) or n <= two_sq:
            total += term
            n += 1
            term = term * two_sq / (2 * n + 1)
        return 2 / _pi().sqrt() * (-d * d).exp() * total


def ulp_error(got: float, exact: Decimal) -> float:
    """|got - exact| in units of the last place of ``exact``'s binary64 neighbourhood."""
    ulp = math.ulp(float(exact)) if exact != 0 else math.ulp(0.0)
    with localcontext() as ctx:
        ctx.prec = PREC
        return float(abs(Decimal(got) - exact) / Decimal(ulp))


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


SPECIALS = [0.0, -0.0, math.inf, -math.inf, 0.84375, 1.25, 1 / 0.35, 0.25, 28.0, 6.0,
            -0.84375, -1.25, 5e-324, -1e-300, 2.0**-28, 2.0**-56, 10.17, 1e300, -1e300]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-30, 30, allow_nan=False, width=64)
                | st.floats(allow_nan=False, width=64) | st.sampled_from(SPECIALS),
                min_size=1, max_size=40))
def test_the_vector_algorithm_is_fdlibms_branches(xs: list[float]) -> None:
    x = np.array(xs)
    assert bits(erf_f64_specified(x)) == bits(np.array([scalar_erf(v) for v in xs]))
    assert bits(erfc_f64_specified(x)) == bits(np.array([scalar_erfc(v) for v in xs]))


def test_special_values() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, 30.0, -30.0, 1e300])
    assert bits(erf_f64_specified(x)) == bits(np.array([0.0, -0.0, 1, -1, 1, -1, 1]))
    assert bits(erfc_f64_specified(x)) == bits(np.array([1.0, 1, 0, 2, 0, 2, 0]))
    signalling = np.array([0x7FF0000000000123], np.uint64).view(np.float64)
    for fn in (erf_f64_specified, erfc_f64_specified):
        assert fn(signalling).view(np.uint64)[0] == 0x7FF8000000000123
        assert fn(np.zeros((2, 0))).shape == (2, 0)
        assert fn(np.float64(0.5)).shape == ()


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 30, allow_nan=False, width=64))
def test_erf_is_odd_and_erfc_reflects(x: float) -> None:
    a, b = np.array([x]), np.array([-x])
    assert bits(erf_f64_specified(b)) == bits(-erf_f64_specified(a))
    assert float(erfc_f64_specified(b)[0]) == float(2.0 - erfc_f64_specified(a)[0]) or x < 1.25


def test_error_bounds_against_decimal() -> None:
    """Within 1 ulp for erf and 4 ulps for erfc (of erfc's magnitude), on points of
    each interval and across the tail down to erfc ~ 1e-47."""
    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.uniform(lo, hi, 40) for lo, hi in
                         [(0, 0.25), (0.25, 0.84375), (0.84375, 1.25), (1.25, 2.86),
                          (2.86, 6.0), (6.0, 10.1)]] + [2.0 ** rng.uniform(-60, -2, 20)])
    erf, erfc = erf_f64_specified(xs), erfc_f64_specified(xs)
    for x, e, c in zip(xs.tolist(), erf.tolist(), erfc.tolist()):
        exact = exact_erf(x)
        assert ulp_error(e, exact) <= 1.0, x
        with localcontext() as ctx:
            ctx.prec = PREC
            assert ulp_error(c, 1 - exact) <= 4.0, x
