"""Reductions and contractions against exact (Fraction) references, bit for bit."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.ir.dialects import graph as graph_ir
from tessera.numerics import Policy, dtype
from tessera.numerics.transcendental.exp64 import exp_f64_specified
from tests.interp.graph.util import ref_round, ref_round_fraction, run1, same, stored

ELEMENTS = ["f32", "bf16", "fp8_e4m3"]
SETTINGS = settings(max_examples=50, deadline=None)


@st.composite
def tensor(draw: st.DrawFn, min_rank: int = 1, max_rank: int = 3, wide: bool = False):
    name = draw(st.sampled_from(ELEMENTS))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=min_rank, max_size=max_rank)))
    scale = 2.0 ** draw(st.integers(-20, 20)) if wide else 1.0
    n = math.prod(shape)
    vals = draw(st.lists(st.floats(-100, 100, allow_nan=False, width=64), min_size=n,
                         max_size=n))
    return name, stored(np.array(vals).reshape(shape) * scale, name)


def _axes(draw_axes: list[int], rank: int) -> tuple[int, ...]:
    return tuple(sorted({a % rank for a in draw_axes}))


def _exact_sums(x: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    """Exact sums as an object array of Fractions."""
    frac = np.vectorize(Fraction, otypes=[object])(x.astype(np.float64))
    return np.sum(frac, axis=axes or None, keepdims=keep)


@SETTINGS
@given(tensor(wide=True), st.lists(st.integers(0, 2), max_size=2), st.booleans(),
       st.booleans())
def test_sum_and_mean_are_exact_then_rounded_once(case, axes, keep, mean) -> None:
    name, x = case
    ax = _axes(axes, x.ndim)
    count = math.prod(x.shape[a] for a in (ax or range(x.ndim)))
    exact = _exact_sums(x, ax, keep)
    if mean:
        exact = exact / count
    want = np.array([ref_round_fraction(Fraction(v), name) for v in np.ravel(exact)],
                    dtype=x.dtype).reshape(np.shape(exact))
    op = (graph_ir.Mean if mean else graph_ir.Sum)(ax, keep)
    assert same(run1(op, x, elements=[name]), want)


@SETTINGS
@given(tensor(), st.lists(st.integers(0, 2), max_size=2), st.booleans(), st.booleans())
def test_max_and_min(case, axes, keep, is_max) -> None:
    name, x = case
    ax = _axes(axes, x.ndim)
    want = _ref_extreme(x.astype(np.float64), ax or tuple(range(x.ndim)), keep, is_max)
    assert same(run1((graph_ir.Max if is_max else graph_ir.Min)(ax, keep), x, elements=[name]),
                want.astype(x.dtype))


def _ref_extreme(w: np.ndarray, axes: tuple[int, ...], keep: bool, is_max: bool
                 ) -> np.ndarray:
    """IEEE 754-2019 maximum/minimum of each row, with Python's max and min: NaN wins
    (the default NaN), and +0 is above -0."""
    rows = np.moveaxis(w, axes, tuple(range(w.ndim - len(axes), w.ndim)))
    kept = rows.shape[:w.ndim - len(axes)]
    out = []
    for row in rows.reshape(-1, math.prod(w.shape[a] for a in axes)).tolist():
        if any(math.isnan(v) for v in row):
            out.append(math.nan)
            continue
        best = (max if is_max else min)(row)
        if best == 0:
            zeros = [math.copysign(1.0, v) for v in row if v == 0]
            best = math.copysign(0.0, max(zeros) if is_max else min(zeros))
        out.append(best)
    shape = tuple(1 if i in axes else d for i, d in enumerate(w.shape)) if keep else kept
    return np.array(out, dtype=np.float64).reshape(shape)


@SETTINGS
@given(st.sampled_from(ELEMENTS), st.integers(1, 4), st.integers(1, 4), st.booleans(),
       st.data())
def test_max_and_min_do_not_depend_on_element_order(name, rows, cols, is_max, data) -> None:
    # Signed zeros and NaNs of both signs: NumPy's answer changes with their order,
    # the interpreter's (IEEE 754-2019 maximum/minimum) does not.
    pool = [0.0, -0.0, math.nan, -math.nan, 1.5, -2.0]
    vals = data.draw(st.lists(st.sampled_from(pool), min_size=rows * cols,
                              max_size=rows * cols))
    x = stored(np.array(vals).reshape(rows, cols), name)
    op = (graph_ir.Max if is_max else graph_ir.Min)((1,), False)
    got = run1(op, x, elements=[name])
    flipped = run1(op, np.ascontiguousarray(x[:, ::-1]), elements=[name])
    want = _ref_extreme(x.astype(np.float64), (1,), False, is_max).astype(x.dtype)
    assert got.tobytes() == want.tobytes() == flipped.tobytes()


@SETTINGS
@given(tensor(), st.integers(-3, 2))
def test_softmax_matches_float64_reference(case, axis) -> None:
    name, x = case
    axis = axis % x.ndim
    w = x.astype(np.float64)
    # e is the specified binary64 exp (checked in tests/numerics/transcendental)
    e = exp_f64_specified(w - w.max(axis=axis, keepdims=True))
    total = np.apply_along_axis(math.fsum, axis, e)  # the correctly rounded float64 sum
    want = ref_round(e / np.expand_dims(total, axis), name)
    assert same(run1(graph_ir.Softmax(axis), x, elements=[name]), want)


@SETTINGS
@given(tensor(wide=True), st.data())
def test_mse_is_exact_then_rounded_once(case, data) -> None:
    name, a = case
    b = stored(np.array(data.draw(st.lists(st.floats(-100, 100, width=64),
                                           min_size=a.size, max_size=a.size))
                        ).reshape(a.shape), name)
    exact = sum((Fraction(float(p)) - Fraction(float(q))) ** 2
                for p, q in zip(a.ravel(), b.ravel())) / a.size
    out = run1(graph_ir.Mse(), a, b, elements=[name, name])
    assert out.shape == () and same(out, ref_round_fraction(exact, name))


def test_mse_of_far_apart_values_is_exact() -> None:
    # a - b is not exact in float64 here (2**100 - 2**-100), and neither is its square.
    a = np.array([2.0**100, 1.0], np.float32)
    b = np.array([2.0**-100, 3.0], np.float32)
    exact = ((Fraction(2) ** 100 - Fraction(2) ** -100) ** 2 + 4) / 2
    assert same(
        run1(graph_ir.Mse(), a, b, elements=["f32", "f32"]), ref_round_fraction(exact, "f32")
    )


@st.composite
def matmul_case(draw: st.DrawFn):
    name = draw(st.sampled_from(ELEMENTS))
    m, k, n = (draw(st.integers(1, 6)) for _ in range(3))
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=1)))
    vals = st.floats(-50, 50, allow_nan=False, width=64)
    a = stored(np.array(draw(st.lists(vals, min_size=math.prod(batch) * m * k,
                                      max_size=math.prod(batch) * m * k))
                        ).reshape((*batch, m, k)), name)
    b = stored(np.array(draw(st.lists(vals, min_size=math.prod(batch) * k * n,
                                      max_size=math.prod(batch) * k * n))
                        ).reshape((*batch, k, n)), name)
    return name, a, b


def _exact_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    fa = np.vectorize(Fraction, otypes=[object])(a.astype(np.float64))
    fb = np.vectorize(Fraction, otypes=[object])(b.astype(np.float64))
    return np.matmul(fa, fb)


@SETTINGS
@given(matmul_case(), st.booleans())
def test_matmul_rounds_exact_product_to_accumulator_then_result(case, declare) -> None:
    name, a, b = case
    elem = Policy(dtype(name), accum=dtype("f32")) if declare else name
    out = run1(graph_ir.MatMul(), a, b, elements=[elem, elem])
    exact = _exact_matmul(a, b)
    acc = np.array([ref_round_fraction(q, "f32") for q in exact.ravel()],
                   dtype=np.float32).reshape(exact.shape)
    # A declared accumulator is the result element; otherwise f32 is rounded once more.
    want = acc if declare or name == "f32" else ref_round(acc.astype(np.float64), name)
    assert same(out, want)


def test_bf16_accum_f32_matmul_equals_float64_product_rounded() -> None:
    rng = np.random.default_rng(7)
    # Values in [2**-8, 8): every float64 partial sum of this product is exact.
    a = rng.uniform(-8, 8, (48, 64))
    b = rng.uniform(-8, 8, (64, 40))
    a, b = (np.where(np.abs(x) < 2**-8, 0.0, x).astype(ml_dtypes.bfloat16) for x in (a, b))
    f64 = a.astype(np.float64) @ b.astype(np.float64)
    elem = "bf16 @accum(f32)"
    out = run1(graph_ir.MatMul(), a, b, elements=[elem, elem])
    assert out.dtype == np.float32 and same(out, f64.astype(np.float32))
    plain = run1(graph_ir.MatMul(), a, b, elements=["bf16", "bf16"])
    assert same(plain, f64.astype(np.float32).astype(ml_dtypes.bfloat16))


def test_fast_mode_is_close_but_labelled_non_bitwise() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 64, 64)).astype(np.float32)
    exact = run1(graph_ir.MatMul(), a, b)
    fast = run1(graph_ir.MatMul(), a, b, mode="fast")
    assert fast.dtype == np.float32
    np.testing.assert_allclose(fast, exact, rtol=1e-4, atol=1e-4)
    s_fast = run1(graph_ir.Sum((1,)), a, mode="fast")
    np.testing.assert_allclose(s_fast, run1(graph_ir.Sum((1,)), a), rtol=1e-5, atol=1e-5)


def test_integer_matmul_and_sum_are_exact() -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = run1(graph_ir.MatMul(), a, a.T.copy(), elements=["int32", "int32"])
    assert out.tolist() == (a.astype(np.int64) @ a.T).tolist()
    assert run1(graph_ir.Sum(()), a, elements=["int32"]).tolist() == 66


def test_fft_roundtrip_is_numpy() -> None:
    rng = np.random.default_rng(1)
    z = (rng.standard_normal(8) + 1j * rng.standard_normal(8)).astype(np.complex64)
    out = run1(graph_ir.Fft(), z, elements=["c64"])
    assert same(out, np.fft.fft(z.astype(np.complex128)).astype(np.complex64))
    back = run1(graph_ir.Ifft(), out, elements=["c64"])
    np.testing.assert_allclose(back, z, atol=1e-5)
