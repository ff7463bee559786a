"""NaN bits do not depend on how an array is split into blocks.

NumPy's SIMD and scalar loops give NaNs of different signs for the same operands (the
first 8 elements of ``np.add(-nan, nan)`` differ from the rest), so an op applied to a
whole array and to its pieces could disagree in the bits. The interpreter makes every
NaN an op computes the default NaN (``np.nan``); ops that only move values (neg, where,
relu, real) keep them as they are.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.ir.dialects import graph as graph_ir
from tests.interp.graph.util import run1, stored

SETTINGS = settings(max_examples=40, deadline=None)
POOL = [math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.5]
COMPUTED = [
    graph_ir.Add(),
    graph_ir.Sub(),
    graph_ir.Mul(),
    graph_ir.Div(),
    graph_ir.Maximum(),
    graph_ir.Minimum(),
]
UNARY = [
    graph_ir.Tanh(),
    graph_ir.Exp(),
    graph_ir.Sqrt(),
    graph_ir.Log(),
    graph_ir.Sin(),
    graph_ir.Abs(),
]
DEFAULT_NAN = np.float32(np.nan).tobytes()


@st.composite
def pairs(draw: st.DrawFn) -> tuple[str, np.ndarray, np.ndarray]:
    name = draw(st.sampled_from(["f32", "bf16", "f64"]))
    n = draw(st.integers(1, 24))  # past NumPy's 8-wide loops
    a, b = (stored(np.array(draw(st.lists(st.sampled_from(POOL), min_size=n, max_size=n))),
                   name) for _ in range(2))
    return name, a, b


def _all_default(x: np.ndarray) -> None:
    """Every NaN of ``x`` is the default NaN: its bits are those of ``np.nan``."""
    nan = np.isnan(x.astype(np.float64))
    want = np.full(int(nan.sum()), np.nan).astype(x.dtype)
    assert x[nan].tobytes() == want.tobytes()


def _pieces(n: int, cut: int) -> list[slice]:
    return [slice(0, cut), slice(cut, n)]


@SETTINGS
@given(pairs(), st.sampled_from(COMPUTED), st.integers(0, 24))
def test_binary_bits_do_not_depend_on_blocking(case, op, cut) -> None:
    name, a, b = case
    whole = run1(op, a, b, elements=[name, name])
    parts = [run1(op, a[s], b[s], elements=[name, name]) for s in _pieces(a.size, cut)]
    assert np.concatenate(parts).tobytes() == whole.tobytes()
    _all_default(whole)


@SETTINGS
@given(pairs(), st.sampled_from(UNARY), st.integers(0, 24))
def test_unary_bits_do_not_depend_on_blocking(case, op, cut) -> None:
    name, a, _ = case
    whole = run1(op, a, elements=[name])
    parts = [run1(op, a[s], elements=[name]) for s in _pieces(a.size, cut)]
    assert np.concatenate(parts).tobytes() == whole.tobytes()
    _all_default(whole)


@SETTINGS
@given(
    st.sampled_from(["f32", "bf16"]),
    st.integers(1, 12),
    st.integers(1, 4),
    st.data(),
    st.sampled_from(
        [graph_ir.Sum((0,)), graph_ir.Mean((0,)), graph_ir.Max((0,)), graph_ir.Min((0,))]
    ),
)
def test_reductions_do_not_depend_on_the_columns_reduced_together(
    name, rows, cols, data, op
) -> None:
    vals = data.draw(st.lists(st.sampled_from(POOL), min_size=rows * cols,
                              max_size=rows * cols))
    x = stored(np.array(vals).reshape(rows, cols), name)
    whole = run1(op, x, elements=[name])
    columns = [run1(op, np.ascontiguousarray(x[:, j:j + 1]), elements=[name])
               for j in range(cols)]
    assert np.concatenate(columns).tobytes() == whole.tobytes()
    _all_default(whole)


def test_moving_ops_keep_nan_signs() -> None:
    x = np.array([-math.nan, math.nan], np.float32)
    assert np.signbit(run1(graph_ir.Neg(), x)).tolist() == [False, True]
    assert np.signbit(run1(graph_ir.Relu(), x)).tolist() == [True, False]
    out = run1(graph_ir.Add(), x, np.zeros(2, np.float32))
    assert [v.tobytes() for v in out] == [DEFAULT_NAN, DEFAULT_NAN]
