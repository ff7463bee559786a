"""Correctly rounded matmul and sums against exact Fraction arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera.numerics as ts
from tessera.errors import PolicyError, ShapeError
from tests.numerics.reference import fraction_round

IN_TYPES = [np.float32, ml_dtypes.bfloat16, np.float16, np.float64, ml_dtypes.float8_e4m3fn]
OUT_NAMES = ["f32", "bf16", "f16", "f64", "fp8_e4m3", "tf32"]


def expected_value(terms: list[tuple[float, float]], to: str, divisor: int = 1) -> float:
    """Independent reference: the exact sum of products, rounded once."""
    q = sum((Fraction(x) * Fraction(y) for x, y in terms), Fraction(0)) / divisor
    if q == 0:
        return 0.0  # an exact zero is +0 (an accumulator starts at +0)
    fmt = ts.dtype(to).format
    out = fraction_round(q, fmt.nmant + 1, fmt.emin, fmt.max)
    if math.isinf(out) and fmt.saturating:
        out = math.copysign(fmt.max, out)
    return out


def same_bits(got: np.ndarray, expected: np.ndarray) -> bool:
    g = np.asarray(got).astype(np.float64)
    e = np.asarray(expected, dtype=np.float64)
    return bool(np.array_equal(g.view(np.uint64), e.view(np.uint64)))


@st.composite
def operand(draw: st.DrawFn, shape: tuple[int, ...], np_type: object) -> np.ndarray:
    """Values over many binades, zeros of both signs, subnormals and cancellation."""
    n = math.prod(shape)
    lim = {np.float16: 12, ml_dtypes.float8_e4m3fn: 6}.get(np_type, 60)
    mant = draw(st.lists(st.floats(-2, 2, width=32), min_size=n, max_size=n))
    expo = draw(st.lists(st.integers(-lim - 100 * (np_type == np.float32), lim),
                         min_size=n, max_size=n))
    with np.errstate(all="ignore"):
        x = (np.array(mant) * np.exp2(np.array(expo, dtype=np.float64))).astype(np_type)
    x = np.where(np.isfinite(x.astype(np.float64)), x, np.zeros((), np_type))
    if draw(st.booleans()) and n >= 3:  # heavy cancellation: [big, small, -big]
        x.flat[0], x.flat[-1] = x.flat[-1], -x.flat[-1]
    return x.reshape(shape)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_matmul_matches_fractions(data: st.DataObject) -> None:
    m, k, n = (data.draw(st.integers(1, 5)) for _ in range(3))
    ta, tb = data.draw(st.sampled_from(IN_TYPES)), data.draw(st.sampled_from(IN_TYPES))
    a = data.draw(operand((m, k), ta))
    b = data.draw(operand((k, n), tb))
    to = data.draw(st.sampled_from(OUT_NAMES))
    got = ts.matmul_rounded(a, b, to)
    a64, b64 = ts.to_f64(a), ts.to_f64(b)
    exp = [[expected_value(list(zip(a64[i], b64[:, j])), to) for j in range(n)]
           for i in range(m)]
    assert same_bits(got, exp), (a, b, to, got, exp)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_sum_matches_fractions(data: st.DataObject) -> None:
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    x = data.draw(operand(shape, data.draw(st.sampled_from(IN_TYPES))))
    axis = data.draw(st.sampled_from([None, 0, -1, tuple(range(len(shape)))]))
    keep = data.draw(st.booleans())
    to = data.draw(st.sampled_from(OUT_NAMES))
    divisor = data.draw(st.sampled_from([1, 3, 7]))
    got = ts.sum_rounded(x, axis, keep, to, divisor=divisor)
    x64 = ts.to_f64(x)
    moved = np.sum(x64 * 0, axis=axis, keepdims=keep)  # only for the expected shape
    assert got.shape == moved.shape
    axes = range(x.ndim) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    rows = np.moveaxis(x64, [a % x.ndim for a in axes],
                       list(range(-len(tuple(axes)), 0)))
    rows = rows.reshape(-1, math.prod(x.shape[a % x.ndim] for a in axes))
    exp = [expected_value([(v, 1.0) for v in r], to, divisor) for r in rows]
    assert same_bits(got.ravel(), exp), (x, axis, to, got, exp)


@given(st.fractions(), st.sampled_from(["f32", "bf16", "fp8_e5m2", "f64", "tf32"]))
def test_round_fraction_matches_reference(q: Fraction, to: str) -> None:
    got = float(ts.round_fraction(q, to))
    fmt = ts.dtype(to).format
    exp = fraction_round(q, fmt.nmant + 1, fmt.emin, fmt.max) if q else 0.0
    if math.isinf(exp) and fmt.saturating:
        exp = math.copysign(fmt.max, exp)
    assert got == exp and math.copysign(1, got) == math.copysign(1, exp)


def test_classic_cases() -> None:
    assert float(ts.sum_rounded(np.array([1e8, 1, -1e8], np.float32), None, False,
                                "f32")) == 1.0
    # Exact ties are decided by round-half-even, never by the float64 approximation.
    a = np.array([[2.0**24, 1.0], [2.0**24, 3.0]], np.float32)
    got = ts.matmul_rounded(a, np.ones((2, 1), np.float32), ts.f32)
    assert got.ravel().tolist() == [2.0**24, 2.0**24 + 4]
    # float64 partial sums overflow in some orders, the exact value does not.
    big = np.array([[1e308, 1e308, -1e308]])
    assert ts.matmul_rounded(big, np.ones((3, 1)), ts.f64)[0, 0] == 1e308
    assert ts.sum_rounded(big, None, False, ts.f64) == 1e308
    assert ts.matmul_rounded(big, np.ones((3, 1)), ts.f32)[0, 0] == np.inf


def test_non_finite_inputs() -> None:
    a = np.array([[np.inf, 1.0], [np.inf, -np.inf], [np.inf, 0.0], [np.nan, 1.0]], np.float32)
    got = ts.matmul_rounded(a, np.array([[1.0], [1.0]], np.float32), ts.f32).ravel()
    assert got[0] == np.inf and np.isnan(got[1]) and got[2] == np.inf and np.isnan(got[3])
    zero_inf = ts.matmul_rounded(np.array([[np.inf]]), np.array([[0.0]]), ts.f32)
    assert np.isnan(zero_inf[0, 0])


def test_int_complex_mixed_and_shapes() -> None:
    rng = np.random.default_rng(3)
    a8 = rng.integers(-128, 128, (6, 300)).astype(np.int8)
    b8 = rng.integers(-128, 128, (300, 5)).astype(np.int8)
    exact = a8.astype(np.int64) @ b8.astype(np.int64)
    assert np.array_equal(ts.matmul_rounded(a8, b8, ts.int32), exact)
    assert np.array_equal(ts.matmul_rounded(a8, b8, ts.int8), np.clip(exact, -128, 127))
    huge = np.full((1, 4), 2**62, np.int64)
    assert ts.matmul_rounded(huge, np.ones((4, 1), np.int64), ts.int64)[0, 0] == 2**63 - 1

    za = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(np.complex64)
    zb = (rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))).astype(np.complex64)
    got = ts.matmul_rounded(za, zb, ts.c64)
    for i in range(3):
        for j in range(2):
            re = [(float(za[i, k].real), float(zb[k, j].real)) for k in range(4)] + \
                 [(-float(za[i, k].imag), float(zb[k, j].imag)) for k in range(4)]
            im = [(float(za[i, k].real), float(zb[k, j].imag)) for k in range(4)] + \
                 [(float(za[i, k].imag), float(zb[k, j].real)) for k in range(4)]
            assert got[i, j].real == expected_value(re, "f32")
            assert got[i, j].imag == expected_value(im, "f32")

    x = rng.standard_normal((2, 3, 4)).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    batched = ts.matmul_rounded(x, y, ts.f32)
    assert batched.shape == (2, 3, 5)
    assert np.array_equal(batched[1], ts.matmul_rounded(x[1], y, ts.f32))
    v = rng.standard_normal(4).astype(np.float32)
    assert ts.matmul_rounded(v, y, ts.f32).shape == (5,)
    assert ts.matmul_rounded(y.T, v, ts.f32).shape == (5,)
    with pytest.raises(ShapeError):
        ts.matmul_rounded(y, y, ts.f32)
    with pytest.raises(PolicyError):
        ts.matmul_rounded(y.T, y, ts.bf16 @ ts.stochastic_round)


def test_sum_ints_and_means() -> None:
    x = np.arange(10, dtype=np.int32).reshape(2, 5)
    assert ts.sum_rounded(x, 1, False, ts.int32).tolist() == [10, 35]
    assert ts.sum_rounded(x, 1, True, ts.int32, divisor=4).tolist() == [[2], [9]]  # 2.5, 8.75
    assert ts.sum_rounded(x, None, False, ts.f32, divisor=3) == np.float32(15.0)
    third = ts.sum_rounded(np.ones(3, np.float32), 0, False, ts.f32, divisor=9)
    assert third == np.float32(1 / 3)
    z = np.array([1 + 2j, 3 - 1j], np.complex64)
    assert ts.sum_rounded(z, 0, False, ts.c64) == np.complex64(4 + 1j)
