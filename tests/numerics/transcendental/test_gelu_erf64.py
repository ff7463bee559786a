"""The specified erf-form GELU against a scalar transcription of its steps and against
the exact ``0.5 x (1 + erf(x / sqrt 2))`` evaluated with ``decimal``: its documented
error bound in binary64, correctly rounded binary32 results, special values."""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental.gelu64 import NUDGE, R, gelu_erf_f64_specified
from tests.numerics.reference import fraction_round
from tests.numerics.transcendental.test_erf64 import PREC, exact_erf, scalar_erfc

U = 2.0**-53


def scalar_spec(x: float) -> float:
    """Steps 1-4 of the erf form, one Python float operation at a time."""
    c = scalar_erfc(abs(x) * R)
    g = x * (1.0 - 0.5 * c) if x > 0 else (0.5 * x) * c
    return g + abs(g) * NUDGE if c == 1.0 and g != 0.0 else g


def exact_gelu(x: float) -> Decimal:
    """``x/2 (1 + erf(x / sqrt 2))`` at PREC digits (1 - erf(|x|/sqrt 2) for x < 0)."""
    with localcontext() as ctx:
        ctx.prec = PREC
        d = Decimal(x)
        e = exact_erf(abs(d) / Decimal(2).sqrt())
        return d / 2 * (1 + e if x >= 0 else 1 - e)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


SPECIALS = [0.0, -0.0, -14.357, -14.383, -14.39, 1.19324, -1.7678, 4.0406, 1e-300, -1e-300,
            5e-324, 2.0**-54, -(2.0**-54), 1e200, -1e200]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.floats(-20, 20, allow_nan=False, width=64)
                | st.floats(allow_nan=False, width=64) | st.sampled_from(SPECIALS),
                min_size=1, max_size=30))
def test_equals_the_scalar_algorithm_bit_for_bit(xs: list[float]) -> None:
    want = np.array([scalar_spec(x) for x in xs])
    got = gelu_erf_f64_specified(np.array(xs))
    assert bits(np.where(np.isnan(got), np.nan, got)) == bits(np.where(np.isnan(want), np.nan,
                                                                        want))


def test_special_values() -> None:
    got = gelu_erf_f64_specified(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 40.0, -15.0,
                                           -1e200]))
    assert got[0] == 0.0 and not np.signbit(got[0]) and np.signbit(got[1])
    assert got[2] == np.inf and np.isnan(got[3]) and np.isnan(got[4])
    assert got[5] == 40.0  # erfc flushed to +0: the result is x
    assert got[6] == 0.0 and np.signbit(got[6]) and got[7] == 0.0 and np.signbit(got[7])
    assert gelu_erf_f64_specified(np.zeros((2, 0))).shape == (2, 0)


@settings(max_examples=60, deadline=None)
@given(st.floats(-14.3, 30, allow_nan=False, width=64).filter(lambda v: abs(v) > 1e-300))
def test_within_the_documented_bound_of_the_exact_gelu(x: float) -> None:
    exact = exact_gelu(x)
    got = float(gelu_erf_f64_specified(np.array([x]))[0])
    err = abs(Decimal(got) - exact) / abs(exact)
    assert err <= Decimal((9 + 1.7 * x * x) * U)
    if x > 0:
        assert err <= Decimal(4 * U)


def test_the_bound_on_a_grid_of_the_f32_range() -> None:
    """From -14.36 (where binary32 results reach 0) to 12."""
    worst = 0.0
    for x in np.linspace(-14.36, 12, 600).tolist():
        got = float(gelu_erf_f64_specified(np.array([x]))[0])
        exact = exact_gelu(x)
        worst = max(worst, float(abs(Decimal(got) - exact) / abs(exact)) / ((9 + 1.7 * x * x) * U))
    assert worst <= 1.0


def _round_f32(q: Decimal) -> float:
    return fraction_round(Fraction(q), 24, -126, float(np.finfo(np.float32).max))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-14.5, 12, width=32) | st.floats(-0.0009765625, 0.0009765625, width=32),
                min_size=1, max_size=12))
def test_binary32_results_are_correctly_rounded(xs: list[float]) -> None:
    x = np.array(xs, np.float32)
    got = gelu_erf_f64_specified(x.astype(np.float64)).astype(np.float32)
    for xi, gi in zip(x, got):
        want = _round_f32(exact_gelu(float(xi)))
        assert float(gi) == want or (gi == 0 and want == 0), (xi, gi, want)


def test_binary32_results_of_tiny_inputs_keep_the_exact_side_of_x_over_2() -> None:
    """Subnormal binary32 inputs: ``x / 2`` is a rounding midpoint when ``x``'s last bit
    is odd and the exact GELU lies above it (step 4); 0 and -0 stay."""
    k = np.arange(1, 120, dtype=np.int64)
    x = np.concatenate([k, -k]).astype(np.float64) * 2.0**-149
    x = np.concatenate([x, [2.0**-126, -(2.0**-126), 2.0**-60, 0.0, -0.0]]).astype(np.float32)
    got = gelu_erf_f64_specified(x.astype(np.float64)).astype(np.float32)
    for xi, gi in zip(x, got):
        want = _round_f32(exact_gelu(float(xi))) if xi != 0 else float(xi)
        assert float(gi) == want and np.signbit(gi) == np.signbit(np.float32(want)), (xi, gi)
