"""The checked-mode row sum: its exact shortcut gives the float64 tree's bits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tessera.numerics.reductions import treesum
from tessera.numerics.reductions.treesum import row_extreme, row_sum_f64, tree_sum_f64


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, np.float64).view(np.int64),
                          np.asarray(b, np.float64).view(np.int64))


def test_tree_is_adjacent_pairs() -> None:
    x = np.array([1.0, 2.0**53, 1.0, -(2.0**53), 3.0], np.float32)
    # (1 + 2^53) rounds to 2^53 in float64, then 2^53 + (1 - 2^53) = 1, then + 3 + -0.0s
    assert tree_sum_f64(x).tolist() == (((1.0 + 2.0**53) + (1.0 - 2.0**53)) + 3.0)


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 5), st.integers(1, 300)),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True)))
def test_equals_the_tree_on_any_rows(x: np.ndarray) -> None:
    with np.errstate(invalid="ignore", over="ignore"):
        assert same_bits(row_sum_f64(x), tree_sum_f64(x))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(treesum.SHORT, 2048), st.integers(0, 40))
def test_equals_the_tree_at_the_exactness_threshold(seed: int, n: int, spread: int) -> None:
    """Rows whose exponent range is around the limit the shortcut may take, where a
    wrongly derived limit would show as a different rounding."""
    rng = np.random.default_rng(seed)
    mant = rng.integers(1 << 23, 1 << 24, n).astype(np.float64)
    exps = rng.integers(-spread, 1, n)
    signs = rng.choice([-1.0, 1.0], n)
    x = (signs * np.ldexp(mant, exps - 23)).astype(np.float32)[None, :]
    assert same_bits(row_sum_f64(x), tree_sum_f64(x))


def trees_taken(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """The shapes of the rows :func:`row_sum_f64` hands to the tree, recorded."""
    seen: list[tuple[int, ...]] = []

    def tree(rows: np.ndarray) -> np.ndarray:
        seen.append(rows.shape)
        return tree_sum_f64(rows)
    monkeypatch.setattr(treesum, "tree_sum_f64", tree)
    return seen


def test_shortcut_is_taken_and_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows in a narrow range are summed by NumPy; a zero or a wide exponent range sends
    a row to the tree; both give the tree's bits."""
    rng = np.random.default_rng(0)
    x = rng.uniform(1.0, 2.0, (64, 1024)).astype(np.float32)
    x[3, 7] = 0.0
    x[5, 9] = 2.0**-40
    want = tree_sum_f64(x)
    seen = trees_taken(monkeypatch)
    assert same_bits(row_sum_f64(x), want)
    assert seen == [(2, 1024)]


@settings(max_examples=300, deadline=None)
@given(hnp.arrays(np.float32,
                  st.tuples(st.integers(1, 4), st.sampled_from([1, 8, 16, 32, 64, 96, 128, 256])),
                  elements=st.one_of(st.sampled_from([0.0, -0.0, np.nan, np.inf, -np.inf]),
                                     st.floats(width=32, allow_nan=True))),
       st.sampled_from(["max", "min"]), st.sampled_from([0, 1, -1]))
def test_row_extreme_has_numpy_bits(x: np.ndarray, kind: str, axis: int) -> None:
    want = (np.max if kind == "max" else np.min)(x, axis=axis)
    got = row_extreme(x, axis, kind)
    assert got.shape == want.shape
    assert np.array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def test_row_extreme_with_payload_nans_and_zeros() -> None:
    x = np.zeros((6, 64), np.float32)
    x[0, 5], x[1, 40] = -0.0, -0.0
    x[2] = -0.0
    nan1, nan2 = np.array([0x7FC00001, 0xFFC00002], np.uint32).view(np.float32)
    x[3, 3], x[3, 50] = nan1, nan2
    x[4, 63] = nan2
    x[5] = np.arange(64)
    for kind in ("max", "min"):
        want = (np.max if kind == "max" else np.min)(x, axis=-1)
        got = row_extreme(x, -1, kind)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_long_mixed_sign_rows_of_a_multi_dimensional_tile() -> None:
    """Every row of both signs, rows of 128 or more, several leading axes: the exactness
    test covers all rows at once (it used to index them with a 2-D mask)."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 128)).astype(np.float32)
    assert same_bits(row_sum_f64(x), tree_sum_f64(x))


def _column_layout(x: np.ndarray) -> np.ndarray:
    """``x`` (rows last) stored with its row axis outermost, as a column-layout tile."""
    return np.moveaxis(np.ascontiguousarray(np.moveaxis(x, -1, 0)), 0, -1)


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(1, 40),
                                        st.sampled_from([1, 2, 8, 64, 100])),
                  elements=st.one_of(st.sampled_from([0.0, -0.0, np.nan, np.inf, 1e-30]),
                                     st.floats(width=32, allow_nan=True))),
       st.booleans())
def test_column_layout_short_rows_equal_the_tree(x: np.ndarray, with_wide: bool) -> None:
    """Short rows whose axis is not innermost in memory take the exact shortcut (NumPy
    reduces such an axis by whole rows, fast at any length); with or without the shared
    float64 copy, the bits are the tree's. (The tree is taken from the copy when there
    is one: which NaN payload an add of two NaNs keeps depends on NumPy's inner loop.)"""
    cols = _column_layout(x)
    wide = cols.astype(np.float64) if with_wide else None
    with np.errstate(invalid="ignore", over="ignore"):
        want = tree_sum_f64(x.astype(np.float64) if with_wide else x)
        assert same_bits(row_sum_f64(cols, wide), want)


def test_column_layout_takes_the_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    """A column-layout tile of 64-wide rows is summed by NumPy except for its one row
    with a zero; contiguous 64-wide rows all take the tree."""
    rng = np.random.default_rng(1)
    x = rng.uniform(0.25, 1.0, (2, 512, 64)).astype(np.float32)
    x[1, 7, 3] = 0.0
    want = tree_sum_f64(x)
    seen = trees_taken(monkeypatch)
    cols = _column_layout(x)
    assert same_bits(row_sum_f64(cols, cols.astype(np.float64)), want)
    assert seen == [(1, 64)]
    seen.clear()
    assert same_bits(row_sum_f64(x), want)
    assert seen == [x.shape]
