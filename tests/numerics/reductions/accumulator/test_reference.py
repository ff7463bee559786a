"""Exact (Kulisch) accumulators against Fraction arithmetic: the exact products, their
sums, the non-finite classes, and the one rounding at the end."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics import matmul_rounded, round_fraction
from tessera.numerics.reductions.accumulator.reference import (
    OPERAND_SCALE,
    SCALE,
    _ints,
    add_exact,
    exact_products,
    round_exact,
    to_exact,
)


def _fraction_matmul(a: np.ndarray, b: np.ndarray) -> list[list[Fraction]]:
    return [[sum((Fraction(float(a[i, k])) * Fraction(float(b[k, j]))
                  for k in range(a.shape[1])), Fraction(0)) for j in range(b.shape[1])]
            for i in range(a.shape[0])]


def test_the_hard_case_is_held_exactly() -> None:
    """1 + 2^-24 + 2^-80 is above the midpoint 1 + 2^-24: it rounds up to 1 + 2^-23,
    where a float64 sum (which drops 2^-80) gives the midpoint and rounds down."""
    a = np.array([[1.0, 2.0**-24, 2.0**-40]], np.float32)
    b = np.array([[1.0], [1.0], [2.0**-40]], np.float32)
    acc = exact_products(a, b)
    assert Fraction(acc[0, 0], 2**SCALE) == 1 + Fraction(1, 2**24) + Fraction(1, 2**80)
    assert round_exact(acc, "f32")[0, 0] == np.float32(1 + 2.0**-23)
    assert (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)[0, 0] == 1.0


finite_f32 = st.floats(-(2.0**100), 2.0**100, width=32, allow_subnormal=True)
hard_f32 = st.sampled_from([1.0, -1.0, 2.0**-24, 2.0**-40, 2.0**-149, -(2.0**-149),
                            3.0e38, -3.0e38, 2.0**-126, 1.5, 0.0, -0.0])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 3), st.data())
def test_products_and_sums_are_exact(m: int, k: int, n: int, data: st.DataObject) -> None:
    values = st.one_of(finite_f32, hard_f32)
    a = np.array(data.draw(st.lists(values, min_size=m * k, max_size=m * k)),
                 np.float32).reshape(m, k)
    b = np.array(data.draw(st.lists(values, min_size=k * n, max_size=k * n)),
                 np.float32).reshape(k, n)
    want = _fraction_matmul(a, b)
    acc = exact_products(a, b)
    twice = add_exact(acc, acc)
    for i in range(m):
        for j in range(n):
            assert Fraction(acc[i, j], 2**SCALE) == want[i][j]
            assert Fraction(twice[i, j], 2**SCALE) == 2 * want[i][j]
            got = round_exact(acc[i:i + 1, j:j + 1], "f32")[0, 0]
            assert got.tobytes() == np.float32(round_fraction(want[i][j], "f32")).tobytes()
    assert round_exact(acc, "f32").tobytes() == matmul_rounded(a, b, "f32").tobytes()


@pytest.mark.parametrize("fmt", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e5m2])
def test_narrow_formats_match_matmul_rounded(fmt: type) -> None:
    rng = np.random.default_rng(4)
    a = (rng.standard_normal((8, 40)) * 2.0 ** rng.integers(-12, 12, (8, 40))).astype(fmt)
    b = rng.standard_normal((40, 5)).astype(fmt)
    for to in ("f32", "bf16", "f16"):
        assert round_exact(exact_products(a, b), to).tobytes() == \
            matmul_rounded(a, b, to).tobytes()


def test_non_finite_terms_follow_the_order_free_rule() -> None:
    inf = np.inf
    a = np.array([[inf, 1.0], [inf, 1.0], [np.nan, 1.0], [inf, -inf], [3e38, 3e38]],
                 np.float32)
    b = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    got = round_exact(exact_products(a, b), "f32")
    assert got[0, 0] == inf and np.isnan(got[0, 1])  # inf * 0 is NaN
    assert np.isnan(got[2]).all() and np.isnan(got[3, 0])
    assert got[4, 0] == inf and got[4, 1] == np.float32(3e38)  # the exact sum overflows f32


def test_starts_and_selections_are_made_exact() -> None:
    start = np.array([[0.5, -0.0], [np.inf, 2.0**-149]], np.float32)
    acc = to_exact(start)
    assert round_exact(acc, "f32").tobytes() == np.where(start == 0, 0, start).astype(
        np.float32).tobytes()  # an exact zero is +0
    mixed = np.where([[True, False], [True, True]], acc, np.float32(0.25))
    back = to_exact(mixed)
    assert [type(v) for v in back.flat] == [int, int, float, int]
    assert round_exact(back, "f32").tolist() == [[0.5, 0.25], [np.inf, 2.0**-149]]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**16), st.integers(0, 120), st.sampled_from([32, 64, 200]))
def test_sliced_products_are_the_integer_products(seed: int, spread: int, k: int) -> None:
    """The error-free slicing (long K, any exponent spread) against the plain integer
    matrix product of the operands' exact integer forms."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((3, 5, k)) * 2.0 ** rng.integers(-spread, spread + 1, (3, 5, k))
         ).astype(np.float32)
    b = rng.standard_normal((k, 4)).astype(np.float32)
    b[::7] *= np.float32(2.0**-100)
    want = np.matmul(_ints(a, OPERAND_SCALE), _ints(b, OPERAND_SCALE))
    assert (exact_products(a, b) == want).all()


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**620), 2**620), st.sampled_from(["f32", "bf16", "f16", "tf32",
                                                         "fp8_e5m2", "f64"]))
def test_rounding_is_round_fraction(n: int, to: str) -> None:
    """Round-to-odd to float64, then to nearest even, is the one correct rounding."""
    for v in (n, n >> 200, n >> 400, ((1 << 24) + 1) << 250, (((1 << 24) + 1) << 250) + 1):
        got = round_exact(np.array([v], dtype=object), to)
        want = round_fraction(Fraction(v, 2**SCALE), to) if v else 0
        assert got.tobytes() == np.array([want]).astype(got.dtype).tobytes()
