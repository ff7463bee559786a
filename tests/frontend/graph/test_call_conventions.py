"""``@ts.jit`` calls like the Python function: ``*args``, keyword-only parameters,
``**kwargs`` and iteration over tensors give what eager mode gives.

References are NumPy float64 results of the same formulas (every input is exact in f32
and every formula is a few exact or once-rounded operations, so the f32 results equal
the float64 ones rounded to f32).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tests.strategies import shapes

HERE = os.path.basename(__file__)
F32 = np.float32
RNG = np.random.default_rng(3)
A = RNG.integers(-8, 8, (3, 4)).astype(F32)
B = RNG.integers(-8, 8, (3, 4)).astype(F32)
C = RNG.integers(-8, 8, (3, 4)).astype(F32)


def f32(x: Any) -> np.ndarray:
    return np.asarray(x, np.float64).astype(F32)


def test_varargs_are_spread_as_in_eager_mode() -> None:
    def total(*xs: Any) -> Any:
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out * len(xs)

    want = (A.astype(np.float64) + B + C) * 3
    assert np.array_equal(np.asarray(ts.jit(total)(A, B, C)), f32(want))
    assert np.array_equal(np.asarray(total(ts.as_tensor(A), B, C)), f32(want))
    # a different number of arguments is a different specialisation, not a wrong value
    jitted = ts.jit(total)
    assert np.array_equal(np.asarray(jitted(A)), A)
    assert np.array_equal(np.asarray(jitted(A, B)), f32((A.astype(np.float64) + B) * 2))
    assert len(jitted.cache) == 2


def test_positional_varargs_after_named_parameters_and_static_values() -> None:
    def scaled(w: Any, *xs: Any, scale: float = 1.0) -> Any:
        return [w * x * scale for x in xs]

    got = ts.jit(scaled)(A, B, C, scale=0.5)
    assert len(got) == 2
    for g, x in zip(got, (B, C)):
        assert np.array_equal(np.asarray(g), f32(A.astype(np.float64) * x * 0.5))


def test_keyword_only_and_var_keyword_parameters() -> None:
    def mix(a: Any, *, bias: Any, **terms: Any) -> Any:
        return a + bias + terms["u"] * terms["v"]

    want = f32(A.astype(np.float64) + B + C * A)
    jitted = ts.jit(mix)
    assert np.array_equal(np.asarray(jitted(A, bias=B, u=C, v=A)), want)
    assert np.array_equal(np.asarray(jitted(A, v=A, bias=B, u=C)), want)  # keyword order


def test_jit_with_varargs_inlined_into_another_jit() -> None:
    inner = ts.jit(lambda *xs: xs[0] - xs[1])

    @ts.jit
    def outer(a: Any, b: Any) -> Any:
        return inner(a, b) * 2.0

    assert np.array_equal(np.asarray(outer(A, B)), f32((A.astype(np.float64) - B) * 2))


def test_varargs_annotation_applies_to_each_argument() -> None:
    @ts.jit
    def pair(*xs: ts.Tensor["N", ts.bf16]) -> Any:
        return [x.element for x in xs]

    assert pair(np.ones(3, F32), np.ones(3, F32)) == [ts.bf16, ts.bf16]
    with pytest.raises(ts.DimBindingError) as info:
        pair(np.ones(3, F32), np.ones(4, F32))
    assert "'N'" in str(info.value) and HERE in str(info.value)


def test_wrong_call_names_the_signature() -> None:
    jitted = ts.jit(lambda a, *, b: a + b)
    with pytest.raises(ts.ArgumentError) as info:
        jitted(A, B)
    assert "(a, *, b)" in str(info.value) and HERE in str(info.value)


@settings(max_examples=25, deadline=None)
@given(shape=shapes(1, 3, 4), data=st.data())
def test_iterating_a_traced_tensor_matches_numpy_rows(shape: tuple[int, ...],
                                                      data: st.DataObject) -> None:
    x = data.draw(st.lists(st.integers(-50, 50), min_size=int(np.prod(shape)),
                           max_size=int(np.prod(shape)))).copy()
    arr = np.asarray(x, F32).reshape(shape)

    def rows(v: Any) -> Any:
        return [r * 2.0 for r in v]

    traced = ts.jit(rows)(arr)
    eager = rows(ts.as_tensor(arr))
    want = [row.astype(np.float64) * 2 for row in arr]  # NumPy iterates along axis 0
    assert len(traced) == len(eager) == len(want) == shape[0]
    for t, e, w in zip(traced, eager, want):
        assert t.shape == e.shape == w.shape
        assert np.array_equal(np.asarray(t), f32(w)) and np.array_equal(np.asarray(e), f32(w))


def test_iteration_unpacks_and_enumerates() -> None:
    @ts.jit
    def swap(v: Any) -> Any:
        first, _, third = v
        return ts.sum(third) - ts.sum(first) + sum(k * r for k, r in enumerate(v))

    want = A[2].sum(dtype=np.float64) - A[0].sum() + (0 * A[0] + 1 * A[1] + 2 * A[2])
    assert np.array_equal(np.asarray(swap(A)), f32(want))


def test_iterating_a_0d_tensor_is_a_shape_error_at_the_users_line() -> None:
    def loop(v: Any) -> Any:
        return [r for r in v]

    line = inspect.getsourcelines(loop)[1] + 1
    for call in (lambda: ts.jit(loop)(F32(2.0)), lambda: loop(ts.as_tensor(F32(2.0)))):
        with pytest.raises(ts.ShapeError) as info:
            call()
        assert f"{HERE}:{line}" in str(info.value)
        assert "iteration over a 0-d tensor" in str(info.value)
    with pytest.raises(ts.ShapeError, match="len"):
        len(ts.as_tensor(F32(2.0)))
