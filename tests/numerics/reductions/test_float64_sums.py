"""Float64 sums that the double-double level leaves open, against Fractions: the
carried row sums of attention over key blocks (a row's terms beside the negated
roundings of their sum) cancel to remainders that only the last level decides."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera.numerics as ts
from tessera.numerics.reductions import sums as sums_module
from tests.numerics.reductions.test_exact_paths import ref_round, same_bits


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_float64_sums_left_open_match_fractions(data: st.DataObject) -> None:
    """Float64 sums of float64 rows with cancellation (a carried expansion: the row's
    terms beside the negated roundings of their sum, as the passes over key blocks
    reduce them), ties, subnormals and overflowing partials: ``sum_rounded`` and the
    last level (``_fsum_rows``) forced on every row give the Fractions' bits."""
    rows, n = data.draw(st.integers(1, 4)), data.draw(st.sampled_from([1, 2, 7, 40]))
    mant = data.draw(st.lists(st.floats(-2, 2), min_size=rows * n, max_size=rows * n))
    lim = data.draw(st.sampled_from([3, 60, 1070]))
    expo = data.draw(st.lists(st.integers(-lim, lim), min_size=rows * n, max_size=rows * n))
    with np.errstate(over="ignore", invalid="ignore"):
        x = (np.array(mant) * np.exp2(np.array(expo, dtype=np.float64))).reshape(rows, n)
    x = np.where(np.isfinite(x), x, 1.0)
    extra = []
    for _ in range(data.draw(st.integers(0, 2))):  # -RN64 of what is left, as carried
        left = [sum((Fraction(float(v)) for v in r), Fraction(0)) for r in
                np.concatenate([x, *extra], axis=1)]
        extra.append(np.array([[-ref_round(q, "f64")] for q in left]))
    if data.draw(st.booleans()):  # a tie: 1 + 2^-53 (+ a term that breaks it or not)
        extra.append(np.array([[1.0, 2.0**-53, data.draw(st.sampled_from([0.0, 2.0**-80]))]]
                              * rows))
    if data.draw(st.booleans()):  # partials that overflow in some orders
        extra.append(np.array([[1.7e308, 1.7e308, -1.7e308]] * rows))
    x = np.concatenate([x, *extra], axis=1)
    want = np.array([ref_round(sum((Fraction(float(v)) for v in r), Fraction(0)), "f64")
                     for r in x])
    got = ts.sum_rounded(x, 1, False, "f64")
    assert same_bits(got, want), x
    assert same_bits(sums_module._fsum_rows(x, np.arange(rows)), want), x


def test_float64_sums_left_open_keep_the_non_finite_rule() -> None:
    x = np.array([[np.inf, 1.0], [np.inf, -np.inf], [np.nan, 1.0], [-0.0, -0.0],
                  [1e308, 1e308]])
    got = sums_module._fsum_rows(x, np.arange(5))
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])
    assert got[3] == 0 and not np.signbit(got[3]) and got[4] == np.inf
