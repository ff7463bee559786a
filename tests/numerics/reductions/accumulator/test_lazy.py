"""The lazy exact accumulator (``ExactSum``) against the reference Kulisch accumulator
of Python integers: the same exact values and, rounded to every format, the same bits
-- products of f32, bf16, f16 and fp8 values, sums of mixed magnitudes, cancellation to
an exact zero, ties at the rounding boundaries, the non-finite classes, broadcast
leading axes."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.numerics.reductions import accumulator
from tessera.numerics.reductions.accumulator import (
    ExactSum,
    add_exact,
    exact_products,
    negate_exact,
    round_exact,
    to_exact,
)
from tessera.numerics.reductions.accumulator import reference as ref

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16,
           "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}
TARGETS = ["f32", "bf16", "f16", "tf32", "fp8_e5m2", "fp8_e4m3", "f64"]
#: boundary values: subnormals, the largest f32, the ties of f32 (2^-24), bf16 (2^-8)
#: and f16 (2^-11) next to 1, and values far below them that break a tie
HARD = [0.0, -0.0, 1.0, -1.0, 1.5, 2.0**-24, -(2.0**-24), 2.0**-8, 2.0**-11, 2.0**-40,
        2.0**-80, 2.0**-126, 2.0**-133, 2.0**-149, -(2.0**-149), 3.0e38, -3.0e38, 2.0**60,
        65504.0, 448.0, 57344.0, 2.0**-14, 2.0**-24 * 3]
NON_FINITE = [math.inf, -math.inf, math.nan]


def values(non_finite: bool) -> st.SearchStrategy[float]:
    parts = [st.sampled_from(HARD), st.floats(-(2.0**100), 2.0**100, width=32),
             st.floats(-4.0, 4.0, width=32)]
    if non_finite:
        parts.append(st.sampled_from(NON_FINITE))
    return st.one_of(*parts)


def draw_array(data: st.DataObject, shape: tuple[int, ...], fmt: str,
               non_finite: bool) -> np.ndarray:
    n = math.prod(shape)
    vals = data.draw(st.lists(values(non_finite), min_size=n, max_size=n))
    with np.errstate(all="ignore"):
        return np.array(vals, np.float64).reshape(shape).astype(FORMATS[fmt])


def ref_add(x: object, y: object) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf + -inf: the NaN of the rule
        return ref.add_exact(x, y)


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def same_exact(x: np.ndarray, y: np.ndarray) -> bool:
    """Elementwise equal integer counts, or the same non-finite float."""
    if x.shape != y.shape:
        return False
    for u, v in zip(x.flat, y.flat):
        if type(u) is not type(v):
            return False
        if type(u) is float and not (u == v or (u != u and v != v)):
            return False
        if type(u) is int and u != v:
            return False
    return True


@settings(max_examples=120, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 3), st.integers(1, 3),
       st.integers(0, 2), st.sampled_from(sorted(FORMATS)), st.booleans(), st.data())
def test_sums_of_products_and_starts_round_like_the_reference(
        m: int, k: int, n: int, terms: int, bases: int, fmt: str, non_finite: bool,
        data: st.DataObject) -> None:
    lazy: object = None
    want: object = None
    for _ in range(terms):
        kk = data.draw(st.integers(0, k))
        tfmt = data.draw(st.sampled_from([fmt, "f32"]))
        a = draw_array(data, (m, kk), tfmt, non_finite)
        b = draw_array(data, (kk, n), data.draw(st.sampled_from([fmt, tfmt])), non_finite)
        term, exact = exact_products(a, b), ref.exact_products(a, b)
        lazy = term if lazy is None else add_exact(lazy, term)
        want = exact if want is None else ref_add(want, exact)
    for _ in range(bases):
        c = draw_array(data, (m, n), data.draw(st.sampled_from([fmt, "f32"])), non_finite)
        lazy = add_exact(to_exact(c), lazy)
        want = ref_add(ref.to_exact(c), want)
    assert type(lazy) is ExactSum
    assert same_exact(np.asarray(lazy), np.asarray(want))
    for to in TARGETS:
        assert same_bits(round_exact(lazy, to), ref.round_exact(want, to)), to
    minus = negate_exact(lazy)
    assert same_bits(round_exact(minus, "f32"), ref.round_exact(np.negative(want), "f32"))


@pytest.mark.parametrize("to,step", [("f32", 2.0**-24), ("bf16", 2.0**-8), ("f16", 2.0**-11)])
@pytest.mark.parametrize("below", [0.0, 2.0**-140, -(2.0**-140)])
def test_ties_at_the_rounding_boundary(to: str, step: float, below: float) -> None:
    """1 + half an ulp of ``to`` is a tie (to even: 1); the smallest term above or
    below it decides, although float64 drops it."""
    a = np.array([[1.0, step, below and 2.0**-70]], np.float32)
    b = np.array([[1.0], [1.0], [below and math.copysign(2.0**-70, below)]], np.float32)
    got = round_exact(exact_products(a, b), to)
    assert same_bits(got, ref.round_exact(ref.exact_products(a, b), to))
    up = np.array([1.0 + 2 * step]).astype(got.dtype)
    assert got[0, 0] == (up[0] if below > 0 else 1.0)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_cancellation_to_an_exact_zero_is_plus_zero(fmt: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 6)).astype(FORMATS[fmt])
    b = rng.standard_normal((6, 5)).astype(FORMATS[fmt])
    total = add_exact(exact_products(a, b), exact_products(-a, b))
    start = -np.zeros((4, 5), np.float32)  # -0 starts add an exact zero too
    total = add_exact(to_exact(start), total)
    for to in TARGETS:
        out = round_exact(total, to)
        assert same_bits(out, ref.round_exact(ref.to_exact(np.zeros((4, 5), np.float32)), to))
        assert not np.signbit(out.astype(np.float64)).any()


def test_tiny_subnormal_products_beside_huge_values() -> None:
    """2^-298 (the accumulator's quantum) next to 2^254: 552 bits apart, held exactly."""
    a = np.array([[2.0**-149, 3.0e38, -3.0e38, 2.0**-149]], np.float32)
    b = np.array([[2.0**-149], [3.0e38], [3.0e38], [-(2.0**-149)]], np.float32)
    for lazy, want in ((exact_products(a, b), ref.exact_products(a, b)),
                       (exact_products(a[:, :1], b[:1]), ref.exact_products(a[:, :1], b[:1]))):
        assert same_exact(np.asarray(lazy), want)
        for to in TARGETS:
            assert same_bits(round_exact(lazy, to), ref.round_exact(want, to))


@pytest.mark.parametrize("row,col,cls", [
    ([math.inf, 1.0], [1.0, 0.0], math.inf),
    ([math.inf, 1.0], [0.0, 1.0], math.nan),  # inf * 0
    ([math.inf, -math.inf], [1.0, 1.0], math.nan),  # infinities of both signs
    ([math.nan, 0.0], [0.0, 0.0], math.nan),
    ([-math.inf, 3e38], [1.0, 3e38], -math.inf),
])
def test_non_finite_classes(row: list[float], col: list[float], cls: float) -> None:
    a, b = np.array([row], np.float32), np.array([col], np.float32).T
    for to in TARGETS:
        got = round_exact(exact_products(a, b), to)
        assert same_bits(got, ref.round_exact(ref.exact_products(a, b), to))
        if to == "f32":
            assert np.array_equal(got.astype(np.float64), [[cls]], equal_nan=True)
    # a non-finite start meets finite and non-finite products
    start = np.array([[-math.inf]], np.float32)
    lazy = add_exact(to_exact(start), exact_products(a, b))
    want = ref_add(ref.to_exact(start), ref.exact_products(a, b))
    assert same_bits(round_exact(lazy, "f32"), ref.round_exact(want, "f32"))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([(2, 1), (1, 3), (2, 3)]),
       st.sampled_from([(2, 1), (1, 3), (1, 1), ()]), st.sampled_from(sorted(FORMATS)))
def test_leading_axes_broadcast_and_fold(seed: int, lead_a: tuple, lead_b: tuple,
                                         fmt: str) -> None:
    """Leading (program) axes along which one operand varies are folded into its rows
    or columns: the bits of the reference's batched product."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):  # (fp8 saturates or overflows)
        a = (rng.standard_normal((*lead_a, 5, 7))
             * 2.0 ** rng.integers(-20, 20, (*lead_a, 5, 7))).astype(FORMATS[fmt])
    b = rng.standard_normal((*lead_b, 7, 4)).astype(FORMATS[fmt])
    c = rng.standard_normal((4,)).astype(np.float32)  # a start broadcast along rows
    lazy = add_exact(to_exact(c), exact_products(a, b))
    want = ref.add_exact(ref.to_exact(c), ref.exact_products(a, b))
    assert lazy.shape == want.shape
    for to in ("f32", "bf16"):
        assert same_bits(round_exact(lazy, to), ref.round_exact(want, to))


def test_reference_forms_mix_with_lazy_ones() -> None:
    """A selection that mixed an accumulator with narrow values is an object array; it
    joins lazy sums as a start value and is rounded by the reference."""
    a = np.array([[1.0, 2.0**-24]], np.float32)
    b = np.array([[1.0, 1.0], [1.0, 1.0]], np.float32)
    mixed = np.where([[True, False]], np.asarray(exact_products(a, b)), np.float32(0.25))
    back = to_exact(mixed)
    assert back.dtype == accumulator.EXACT and type(back) is not ExactSum
    total = add_exact(back, exact_products(a, b))
    want = ref.add_exact(ref.to_exact(mixed), ref.exact_products(a, b))
    assert same_bits(round_exact(total, "f32"), ref.round_exact(want, "f32"))
    assert round_exact(total, "f32").tolist() == [[2.0, 1.25]]  # two ties, to even
