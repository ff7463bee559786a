"""The specified tanh-form GELU against a scalar transcription of its algorithm (Python
floats are IEEE binary64, each operation correctly rounded) and against the exact GELU
evaluated with ``decimal`` at 60 digits: its documented error bound in binary64, and
correctly rounded binary32 results."""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental.gelu64 import (
    CUBIC,
    NUDGE,
    K,
    gelu_tanh_f64_specified,
)
from tests.numerics.reference import fraction_round
from tests.numerics.transcendental.test_exp64 import scalar_spec as exp_scalar

#: pi to 64 digits, for sqrt(2/pi) in the reference
PI = Decimal("3.141592653589793238462643383279502884197169399375105820974944592")
U = 2.0**-53


def scalar_spec(x: float) -> float:
    """Steps 1-6 of the module docstring, one Python float operation at a time."""
    c = (x * x) * x
    z = K * (x + CUBIC * c)
    d = 1.0 + exp_scalar(z)
    g = x / d  # Python's float division: -inf / inf is NaN, x / inf is +-0
    return g + abs(g) * NUDGE if d == 2.0 and g != 0.0 else g


def exact_gelu(x: float) -> tuple[Decimal, Decimal]:
    """The tanh-form GELU with the exact constants 0.044715 and sqrt(2/pi) at 60 digits,
    and its ``z = -2 sqrt(2/pi) (x + 0.044715 x^3)``."""
    with localcontext() as ctx:
        ctx.prec = 60
        d = Decimal(x)
        z = -2 * (2 / PI).sqrt() * (d + Decimal("0.044715") * d**3)
        return d / (1 + z.exp()), z


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


SPECIALS = [0.0, -0.0, math.inf, -math.inf, 10.68, 10.69, -21.15, -21.17, -10.77, 1e-300,
            -1e-300, 5e-324, 1e200, -1e200]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-30, 30, allow_nan=False, width=64)
                | st.floats(allow_nan=False, width=64) | st.sampled_from(SPECIALS),
                min_size=1, max_size=40))
def test_equals_the_scalar_algorithm_bit_for_bit(xs: list[float]) -> None:
    want = np.array([scalar_spec(x) for x in xs])
    got = gelu_tanh_f64_specified(np.array(xs))
    assert bits(np.where(np.isnan(got), np.nan, got)) == bits(np.where(np.isnan(want), np.nan,
                                                                        want))


def test_special_values() -> None:
    got = gelu_tanh_f64_specified(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 11.0, -22.0,
                                            -1e200]))
    assert got[0] == 0.0 and not np.signbit(got[0]) and np.signbit(got[1])
    assert got[2] == np.inf and np.isnan(got[3]) and np.isnan(got[4])
    assert got[5] == 11.0  # e^z flushed to +0: the result is x
    assert got[6] == 0.0 and np.signbit(got[6]) and got[7] == 0.0 and np.signbit(got[7])
    assert gelu_tanh_f64_specified(np.zeros((2, 0))).shape == (2, 0)


@settings(max_examples=60, deadline=None)
@given(st.floats(-21, 30, allow_nan=False, width=64).filter(lambda v: abs(v) > 1e-300))
def test_within_the_documented_bound_of_the_exact_gelu(x: float) -> None:
    exact, z = exact_gelu(x)
    got = float(gelu_tanh_f64_specified(np.array([x]))[0])
    if abs(float(exact)) < 2.0**-1000:  # below the normal range: the bound does not hold
        return
    err = abs(Decimal(got) - exact) / abs(exact)
    assert err <= Decimal((4.7 + 7 * abs(float(z))) * U * 1.01)


def test_the_bound_on_a_grid_of_the_f32_range() -> None:
    """From -10.8 (where binary32 results reach 0) to 11, with the largest error found."""
    worst = 0.0
    for x in np.linspace(-10.8, 11, 1500):
        exact, z = exact_gelu(float(x))
        got = float(gelu_tanh_f64_specified(np.array([x]))[0])
        rel = float(abs(Decimal(got) - exact) / abs(exact)) / ((4.7 + 7 * abs(float(z))) * U)
        worst = max(worst, rel)
    assert worst <= 1.0


def _round_f32(q: Decimal) -> float:
    return fraction_round(Fraction(q), 24, -126, float(np.finfo(np.float32).max))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-10.75, 12, width=32) | st.floats(-0.0009765625, 0.0009765625, width=32),
                min_size=1, max_size=20))
def test_binary32_results_are_correctly_rounded(xs: list[float]) -> None:
    x = np.array(xs, np.float32)
    got = gelu_tanh_f64_specified(x.astype(np.float64)).astype(np.float32)
    for xi, gi in zip(x, got):
        want = _round_f32(exact_gelu(float(xi))[0])
        assert float(gi) == want or (gi == 0 and want == 0), (xi, gi, want)


def test_binary32_results_of_tiny_inputs_keep_the_exact_side_of_x_over_2() -> None:
    """Subnormal binary32 inputs: ``x / 2`` is a rounding midpoint when ``x``'s last bit
    is odd, and the exact GELU (``x / 2 + x^2 / sqrt(2 pi)``) lies above it, so positive
    inputs round up and negative ones toward zero (step 6); 0 and -0 stay."""
    k = np.arange(1, 200, dtype=np.int64)
    x = np.concatenate([k, -k]).astype(np.float64) * 2.0**-149
    x = np.concatenate([x, [2.0**-126, -(2.0**-126), 2.0**-60, 0.0, -0.0]]).astype(np.float32)
    got = gelu_tanh_f64_specified(x.astype(np.float64)).astype(np.float32)
    for xi, gi in zip(x, got):
        want = _round_f32(exact_gelu(float(xi))[0]) if xi != 0 else float(xi)
        assert float(gi) == want and np.signbit(gi) == np.signbit(np.float32(want)), (xi, gi)
