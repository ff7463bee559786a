"""The specified binary64 tanh against a scalar transcription of its steps (Python
floats are IEEE binary64, each operation correctly rounded), its series coefficients
against known values, and its error against ``decimal``."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental.tanh64 import (
    COEFFS,
    SPLIT,
    TINY,
    series_coefficients,
    tanh_f64_specified,
)
from tests.numerics.transcendental.test_exp64 import scalar_spec as exp_scalar


def scalar_tanh(x: float) -> float:
    """Steps 1-4 with branches: only the selected case is computed."""
    c = min(abs(x), 22.0)
    if c < TINY:
        return x
    if c < SPLIT:
        z = x * x
        h = COEFFS[0]
        for t in COEFFS[1:]:
            h = h * z + t
        return x + x * (z * h)
    far = 1.0 - 2.0 / (exp_scalar(c + c) + 1.0)
    return -far if x < 0 else far


def exact_tanh(x: float) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 80
        e = (2 * Decimal(x)).exp()
        return (e - 1) / (e + 1)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


def test_the_series_coefficients_are_tanhs() -> None:
    """tanh x = x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 - ... (OEIS A002430 and
    A036279 give the numerators and denominators)."""
    t = series_coefficients(5)
    assert t == [Fraction(-1, 3), Fraction(2, 15), Fraction(-17, 315), Fraction(62, 2835),
                 Fraction(-1382, 155925)]
    assert len(COEFFS) == 19 and COEFFS[-1] == -1 / 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-25, 25, allow_nan=False, width=64)
                | st.floats(allow_nan=False, width=64)
                | st.sampled_from([0.0, -0.0, math.inf, -math.inf, SPLIT, -SPLIT, 22.0, TINY,
                                   -TINY, 5e-324, -1e-300, 2.0**-26]),
                min_size=1, max_size=40))
def test_the_vector_algorithm_is_the_scalar_one(xs: list[float]) -> None:
    assert bits(tanh_f64_specified(np.array(xs))) == bits(np.array([scalar_tanh(v) for v in xs]))


def test_special_values() -> None:
    got = tanh_f64_specified(np.array([0.0, -0.0, np.inf, -np.inf, 30.0, -1e300, 5e-324]))
    assert bits(got) == bits(np.array([0.0, -0.0, 1.0, -1.0, 1.0, -1.0, 5e-324]))
    signalling = np.array([0x7FF0000000000123], np.uint64).view(np.float64)
    assert tanh_f64_specified(signalling).view(np.uint64)[0] == 0x7FF8000000000123
    assert tanh_f64_specified(np.float64(0.5)).shape == ()


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 30, allow_nan=False, width=64))
def test_tanh_is_odd(x: float) -> None:
    assert bits(tanh_f64_specified(np.array([-x]))) == bits(-tanh_f64_specified(np.array([x])))


def test_within_one_and_a_half_ulps_of_tanh() -> None:
    rng = np.random.default_rng(8)
    xs = np.concatenate([rng.uniform(0, SPLIT, 150), rng.uniform(SPLIT, 1.5, 100),
                         rng.uniform(1.5, 22, 50), 2.0 ** rng.uniform(-40, -1, 50)])
    for x, got in zip(xs.tolist(), tanh_f64_specified(xs).tolist()):
        exact = exact_tanh(x)
        assert float(abs(Decimal(got) - exact) / Decimal(math.ulp(float(exact)))) <= 1.5, x
