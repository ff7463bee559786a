"""Tracing graph functions: the IR they produce, promotion, broadcasting, caching."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import graph, op

F32 = np.float32


def test_attention_module_traces_to_the_expected_graph_ir() -> None:
    @graph.module("attention")
    def attention(Q, K, V):
        S = op.matmul(Q, K.T)
        A = op.softmax(S)
        return op.matmul(A, V)

    q = np.zeros((4, 8), F32)
    text = ts.inspect_ir(attention, "graph", q, q, q)
    assert text.splitlines()[0] == "module @attention {"
    ops = [line.split("=")[1].split("(")[0].strip() for line in text.splitlines()
           if " = graph." in line]
    assert ops == ["graph.transpose", "graph.matmul", "graph.softmax", "graph.matmul"]


def test_python_scalars_take_the_tensor_format_and_broadcast_in_the_graph() -> None:
    @ts.jit
    def f(x):
        return x * 2.0 + 1

    x = np.ones((2, 3), ml_dtypes.bfloat16)
    out = f(x)
    assert out.dtype == ts.bf16
    np.testing.assert_array_equal(np.asarray(out).astype(F32), np.full((2, 3), 3.0, F32))
    text = f.inspect_ir("graph")
    assert "graph.constant() {value = dense<2.0>, element = #bf16}" in text
    assert "graph.broadcast" in text


def test_mixed_formats_promote_with_an_explicit_cast() -> None:
    @ts.jit
    def f(a, b):
        return a + b

    a = np.ones(3, F32)
    b = np.ones(3, ml_dtypes.bfloat16)
    assert f(a, b).dtype == ts.f32
    assert "graph.cast(%b) {to = #f32}" in f.inspect_ir("graph")


def test_numpy_broadcasting_of_operands() -> None:
    @ts.jit
    def f(a, b):
        return a - b

    a = np.arange(6, dtype=F32).reshape(2, 3)
    b = np.arange(3, dtype=F32)
    np.testing.assert_array_equal(np.asarray(f(a, b)), a - b)
    np.testing.assert_array_equal(np.asarray(f(a, b[None, :])), a - b)


def test_one_trace_per_signature() -> None:
    traces = []

    @ts.jit
    def f(x, scale):
        traces.append(1)
        return x * scale

    f(np.ones(3, F32), 2.0)
    f(np.zeros(3, F32), 2.0)
    assert len(traces) == 1
    f(np.ones(4, F32), 2.0)  # new shape
    f(np.ones(4, F32), 3.0)  # new static constant
    f(np.ones(4, np.float64), 3.0)  # new format
    assert len(traces) == 4


def test_pytrees_in_and_out() -> None:
    @ts.jit
    def f(params, x):
        h = ts.tanh(ts.matmul(x, params["w"]) + params["b"])
        return {"h": h, "stats": (ts.mean(h), ts.max(h))}

    rng = np.random.default_rng(1)
    p = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    x = rng.standard_normal((4, 3))
    out = f(p, x)
    ref = np.tanh(x @ p["w"] + p["b"])
    np.testing.assert_allclose(np.asarray(out["h"]), ref, rtol=1e-12)
    np.testing.assert_allclose(float(out["stats"][0]), ref.mean(), rtol=1e-12)
    assert float(out["stats"][1]) == ref.max()


def test_basic_indexing() -> None:
    @ts.jit
    def f(x):
        return x[1:3, ::2], x[0], x[None, ..., -1], x[:, 1]

    x = np.arange(20, dtype=F32).reshape(4, 5)
    got = [np.asarray(t) for t in f(x)]
    for g, want in zip(got, (x[1:3, ::2], x[0], x[None, ..., -1], x[:, 1])):
        np.testing.assert_array_equal(g, want)


def test_eager_operators_return_tensors() -> None:
    x = np.array([1.0, 4.0, 9.0], F32)
    y = ts.sqrt(x)
    assert isinstance(y, ts.Tensor)
    np.testing.assert_array_equal(np.asarray(y), np.sqrt(x))
    z = y.astype(ts.fp8_e4m3)
    assert np.asarray(z).dtype == ml_dtypes.float8_e4m3fn
    assert float(ts.sum(y)) == 6.0


def test_matmul_keeps_the_tile_shape_hint() -> None:
    @ts.jit
    def f(a, b):
        return op.matmul(a, b, tile_shape=(128, 128, 64))

    a = np.ones((2, 3), F32)
    f(a, a.T)
    assert "graph.matmul(%a, %b) {tile_shape = [128, 128, 64]}" in f.inspect_ir("graph")


def test_capture_graph_changes_nothing_off_the_gpu_and_says_so() -> None:
    with pytest.warns(ts.CaptureGraphWarning, match="no effect on backend 'interp'"):
        @ts.jit(capture_graph=True)
        def f(x):
            return ts.exp(x)

    x = np.linspace(-1, 1, 5)
    np.testing.assert_array_equal(np.asarray(f(x)), np.exp(x))
    assert f.capture_graph


def test_fast_mode_is_close_but_labelled_non_bitwise() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 64)).astype(F32)

    def mm(x, y):
        return ts.matmul(x, y)

    exact = np.asarray(ts.jit(mm)(a, a))
    fast = np.asarray(ts.jit(mm, mode="fast")(a, a))
    np.testing.assert_allclose(fast, exact, rtol=1e-5, atol=1e-5)
    want = (a.astype(np.float64) @ a.astype(np.float64)).astype(F32)
    np.testing.assert_array_equal(exact, want)


def test_target_stage_not_built_for_graph_functions() -> None:
    f = ts.jit(lambda x: x + 1)
    f(np.ones(2, F32))
    with pytest.raises(ts.StageError, match="target"):
        ts.inspect_ir(f, "target")
    assert "tile.kernel @lambda_k0" in ts.inspect_ir(f, "tile")


def test_equality_operators_are_elementwise_inside_and_outside_traces() -> None:
    f = ts.jit(lambda x: (ts.where(x == 1.0, 0.0, x), x != x))
    x = np.array([1.0, 2.0, np.nan], F32)
    masked, nan_mask = f(x)
    np.testing.assert_array_equal(np.asarray(masked), [0.0, 2.0, np.nan])
    np.testing.assert_array_equal(np.asarray(nan_mask), [False, False, True])
    np.testing.assert_array_equal(np.asarray(ts.as_tensor(x) == 2.0), [False, True, False])
