"""The specified binary64 exp against a scalar transcription of its algorithm (Python
floats are IEEE binary64, each operation correctly rounded) and against ``decimal``."""

from __future__ import annotations

import math
import struct
from decimal import Decimal, localcontext

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.transcendental.exp import (
    COEFFS,
    LN2_HI,
    LN2_LO,
    LOG2E,
    exp_f32_specified,
    exp_f32_unrounded,
)
from tessera.numerics.transcendental.exp64 import exp_f64_specified


def scalar_spec(x: float) -> float:
    """Steps 1-7 of the module docstring, one Python float operation at a time."""
    if math.isnan(x):
        bits = struct.unpack("<Q", struct.pack("<d", x))[0] | 0x0008000000000000
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    if x < -104.0:
        return 0.0
    c = min(x, 710.0)
    n = round(c * LOG2E)  # Python's round is half to even, as cvt.rni
    r = (c - n * LN2_HI) - n * LN2_LO
    p = COEFFS[0]
    for coeff in COEFFS[1:]:
        p = p * r + coeff  # two roundings: Python never fuses
    try:
        return (p * math.ldexp(1.0, n - 1)) * 2.0
    except OverflowError:
        return math.inf


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-120, 720, allow_nan=False, width=64) | st.sampled_from(
    [0.0, -0.0, math.inf, -math.inf, math.nan, -104.0, 710.0, 709.78, -103.999999]),
    min_size=1, max_size=40))
def test_equals_the_scalar_algorithm_bit_for_bit(xs: list[float]) -> None:
    want = np.array([scalar_spec(x) for x in xs])
    assert bits(exp_f64_specified(np.array(xs))) == bits(want)


def test_a_nan_keeps_its_payload_and_is_quieted() -> None:
    signalling = struct.unpack("<d", struct.pack("<Q", 0xFFF0000000000123))[0]
    got = exp_f64_specified(np.array([signalling]))
    assert struct.unpack("<Q", got.tobytes())[0] == 0xFFF8000000000123


def test_special_values_and_domain() -> None:
    got = exp_f64_specified(np.array([0.0, -0.0, -np.inf, np.inf, -104.0, -104.5, 709.7,
                                      709.8, -1e300]))
    assert got[0] == got[1] == 1.0
    assert got[2] == 0.0 and not np.signbit(got[2])  # -inf and below -104: +0
    assert got[3] == np.inf and got[7] == np.inf
    assert 0 < got[4] < 2.0**-149 and got[5] == 0.0 and got[8] == 0.0
    assert np.isfinite(got[6])
    assert exp_f64_specified(np.zeros((2, 0))).shape == (2, 0)
    assert exp_f64_specified(np.float64(1.0)).shape == ()


def test_on_f32_inputs_it_is_the_value_the_f32_exp_rounds() -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-104, 89, 20000).astype(np.float32)
    v = exp_f64_specified(x.astype(np.float64))
    assert bits(v) == bits(exp_f32_unrounded(x))
    x = np.concatenate([x, np.float32([-110, -np.inf, np.inf, 100])])
    with np.errstate(over="ignore"):  # e^100 overflows binary32, as specified
        rounded = exp_f64_specified(x.astype(np.float64)).astype(np.float32)
    assert rounded.tobytes() == exp_f32_specified(x).tobytes()


def test_error_is_within_three_ulps_of_decimal() -> None:
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.uniform(-104, 0, 400), rng.uniform(0, 709.7, 200)])
    v = exp_f64_specified(x)
    with localcontext() as ctx:
        ctx.prec = 40
        for xi, vi in zip(x, v):
            exact = Decimal(float(xi)).exp()
            err = abs(Decimal(float(vi)) - exact) / Decimal(math.ulp(float(vi)))
            assert err < 3, (xi, vi, err)
