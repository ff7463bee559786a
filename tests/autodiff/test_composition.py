"""grad composed with jit, argnums/wrt selection, pytrees, and the default wrt rule.

References are hand-written NumPy float64 gradients.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.autodiff import default_wrt
from tests.autodiff.util import close

RNG = np.random.default_rng(7)
X = RNG.normal(size=(5, 3))
W = RNG.normal(size=(3, 2))
B = RNG.normal(size=(2,))
Y = RNG.normal(size=(5, 2))


def _tanh_loss_grads(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dL/dx, dL/dW) of L = sum(tanh(x @ W))."""
    d = 1 - np.tanh(x @ w) ** 2
    return d @ w.T, x.T @ d


@ts.jit
def tanh_loss(x: Any, w: Any) -> Any:
    return ts.sum(ts.tanh(ts.matmul(x, w)))


# ---------------------------------------------------------------- grad and jit together
def test_grad_of_jit_function() -> None:
    dx, dw = _tanh_loss_grads(X, W)
    close(ts.grad(tanh_loss, argnums=1)(X, W), dw)
    close(ts.grad(tanh_loss, argnums=0)(X, W), dx)
    # the jit function still runs on its own, and grad(jit(grad)) composes
    close(tanh_loss(X, W), np.sum(np.tanh(X @ W)))
    close(ts.jit(ts.grad(tanh_loss, argnums=1))(X, W), dw)


def test_jit_function_calling_grad_with_closure() -> None:
    """Inside jit, grad of a closure over a traced value (x) is traced into the graph."""
    @ts.jit
    def step(x: Any, w: Any) -> Any:
        dw = ts.grad(lambda w: tanh_loss(x, w))(w)
        return w - 0.1 * dw

    @ts.jit
    def step_argnums(x: Any, w: Any) -> Any:
        return w - 0.1 * ts.grad(tanh_loss, argnums=1)(x, w)

    _, dw = _tanh_loss_grads(X, W)
    close(step(X, W), W - 0.1 * dw)
    close(step_argnums(X, W), W - 0.1 * dw)
    # a second call with other values reuses the trace and still closes over the new x
    x2 = X * 0.5
    close(step(x2, W), W - 0.1 * _tanh_loss_grads(x2, W)[1])
    text = ts.inspect_ir(step, "graph")
    assert "graph.tanh" in text and "graph.matmul" in text


def test_closure_over_traced_value_in_both_positions() -> None:
    """A closure captures a traced value that also depends on the differentiated one."""
    @ts.jit
    def f(x: Any) -> Any:
        scale = ts.sum(x)  # traced, captured by the lambda below
        return ts.grad(lambda y: ts.sum(ts.sin(y) * scale))(x)

    x = np.array([0.2, -0.4, 1.3])
    # the inner grad treats `scale` as a constant: d/dy sum(sin(y) * s) = cos(y) * s
    close(f(x), np.cos(x) * np.sum(x))


def test_value_and_grad() -> None:
    dx, dw = _tanh_loss_grads(X, W)
    value, g = ts.value_and_grad(tanh_loss, argnums=1)(X, W)
    close(value, np.sum(np.tanh(X @ W)))
    close(g, dw)
    value, (gx, gw) = ts.value_and_grad(tanh_loss, argnums=(0, 1))(X, W)
    close(value, np.sum(np.tanh(X @ W)))
    close(gx, dx)
    close(gw, dw)


# ------------------------------------------------------------------ argnums and wrt
def three(a: Any, b: Any, c: Any) -> Any:
    return ts.sum(a * b * 2.0 + c**2)


A3, B3, C3 = np.array([1.0, 2.0]), np.array([3.0, -1.0]), np.array([0.5, 4.0])


@pytest.mark.parametrize("spec,expected", [
    (dict(argnums=0), 2 * B3),
    (dict(argnums=-1), 2 * C3),
    (dict(argnums=(0,)), (2 * B3,)),
    (dict(argnums=(2, 0)), (2 * C3, 2 * B3)),
    (dict(argnums=(-3, -2)), (2 * B3, 2 * A3)),
    (dict(wrt="b"), 2 * A3),
    (dict(wrt=["c"]), (2 * C3,)),
    (dict(wrt=["c", "a"]), (2 * C3, 2 * B3)),
    (dict(wrt=("a", "b", "c")), (2 * B3, 2 * A3, 2 * C3)),
])
def test_argnums_and_wrt(spec: dict[str, Any], expected: Any) -> None:
    """An int or a str gives one bare gradient; a sequence gives a tuple in its order."""
    got = ts.grad(three, **spec)(A3, B3, C3)
    if isinstance(expected, tuple):
        assert isinstance(got, tuple) and len(got) == len(expected)
        for g, e in zip(got, expected):
            close(g, e)
    else:
        assert not isinstance(got, tuple)
        close(got, expected)


def test_keyword_arguments() -> None:
    close(ts.grad(three, wrt="c")(A3, c=C3, b=B3), 2 * C3)


def test_python_and_numpy_scalars() -> None:
    """Python numbers become f32 tensors; NumPy scalars keep their own format."""
    g = ts.grad(lambda x: x * x)(3.0)
    assert np.asarray(g).dtype == np.float32 and float(g) == 6.0
    g64 = ts.grad(lambda x: x * x)(np.float64(1.0 / 3.0))
    assert np.asarray(g64).dtype == np.float64
    assert float(g64) == 2.0 / 3.0


# ------------------------------------------------------------------------- pytrees
def mlp_loss(params: dict[str, Any], x: Any, y: Any) -> Any:
    h = ts.tanh(ts.matmul(x, params["W"]) + params["b"])
    return ts.mse(h, y)


def _mlp_grads(params: dict[str, np.ndarray], x: np.ndarray,
               y: np.ndarray) -> dict[str, np.ndarray]:
    h = np.tanh(x @ params["W"] + params["b"])
    dz = 2 * (h - y) / h.size * (1 - h**2)
    return {"W": x.T @ dz, "b": dz.sum(axis=0)}


def test_dict_of_params_gives_dict_of_grads() -> None:
    params = {"W": W, "b": B}
    grads = ts.grad(mlp_loss)(params, X, Y)  # default rule: params only (x, y are data)
    assert isinstance(grads, dict) and set(grads) == {"W", "b"}
    ref = _mlp_grads(params, X, Y)
    close(grads["W"], ref["W"])
    close(grads["b"], ref["b"])
    # jit in between, and value_and_grad, keep the structure
    value, grads2 = ts.value_and_grad(ts.jit(mlp_loss))(params, X, Y)
    close(value, np.mean((np.tanh(X @ W + B) - Y) ** 2))
    close(grads2["W"], ref["W"])


def test_nested_pytree_and_tuple_of_groups() -> None:
    def loss(layers: list[tuple[Any, Any]], x: Any) -> Any:
        for w, b in layers:
            x = ts.tanh(ts.matmul(x, w) + b)
        return ts.sum(x)

    w2, b2 = RNG.normal(size=(2, 2)), RNG.normal(size=(2,))
    layers = [(W, B), (w2, b2)]
    g_layers, g_x = ts.grad(loss, argnums=(0, 1))(layers, X)
    assert isinstance(g_layers, list) and len(g_layers) == 2
    assert all(isinstance(t, tuple) and len(t) == 2 for t in g_layers)
    # reference by the chain rule
    h1 = np.tanh(X @ W + B)
    h2 = np.tanh(h1 @ w2 + b2)
    d2 = 1 - h2**2
    d1 = (d2 @ w2.T) * (1 - h1**2)
    close(g_layers[1][0], h1.T @ d2)
    close(g_layers[1][1], d2.sum(axis=0))
    close(g_layers[0][0], X.T @ d1)
    close(g_layers[0][1], d1.sum(axis=0))
    close(g_x, d1 @ W.T)


def test_static_arguments_pass_through() -> None:
    """Non-tensor arguments are specialisation constants; a new value retraces."""
    def loss(x: Any, power: int, mode: str) -> Any:
        y = x**power
        return ts.sum(y if mode == "plain" else ts.sin(y))

    g = ts.grad(loss, argnums=0)
    x = np.array([0.5, 1.5])
    close(g(x, 2, "plain"), 2 * x)
    close(g(x, 3, "plain"), 3 * x**2)
    close(g(x, 2, "sin"), np.cos(x**2) * 2 * x)


def test_unused_argument_has_zero_gradient() -> None:
    ga, gb = ts.grad(lambda a, b: ts.sum(a * 3.0), argnums=(0, 1))(A3, B3)
    close(ga, [3.0, 3.0])
    close(gb, [0.0, 0.0])
    close(ts.grad(lambda a: ts.sum(ts.tensor(np.ones(2))))(A3), [0.0, 0.0])


# ------------------------------------------------------------ the default wrt rule
@ts.jit
@ts.autodiff
def train_step(x: Any, y: Any, W: Any) -> Any:
    """Training step with automatic gradient computation"""
    pred = ts.gemm(x, W)
    loss = ts.mse(pred, y)
    return loss


@ts.jit
@ts.autodiff
def loss_function(x: Any, W: Any, b: Any, y_true: Any) -> Any:
    """Automatic differentiation example"""
    y_pred = ts.matmul(x, W) + b
    y_pred = ts.relu(y_pred)
    loss = ts.mse(y_pred, y_true)
    return loss


@ts.jit
@ts.autodiff
def distributed_loss(x: Any, W: Any) -> Any:
    """The seed's example without its all_gather (that belongs to the mesh simulator)."""
    y = ts.matmul(x, W)
    loss = ts.sum(y**2)
    return loss


@ts.jit
def loss_fn(W: Any) -> Any:
    return ts.sum(ts.tanh(W) ** 2)


def test_default_wrt_train_step() -> None:
    grad_W = ts.grad(train_step)(X, Y, W)
    assert not isinstance(grad_W, tuple)
    close(grad_W, X.T @ (2 * (X @ W - Y) / Y.size))


def test_default_wrt_loss_function() -> None:
    grad_fn = ts.grad(loss_function)
    grad_W, grad_b = grad_fn(X, W, B, Y)
    z = X @ W + B
    dz = 2 * (np.maximum(z, 0) - Y) / Y.size * (z > 0)
    close(grad_W, X.T @ dz)
    close(grad_b, dz.sum(axis=0))


def test_default_wrt_distributed_loss() -> None:
    grad_W = ts.grad(distributed_loss)(X, W)
    assert not isinstance(grad_W, tuple)
    close(grad_W, X.T @ (2 * X @ W))


def test_default_wrt_loss_fn() -> None:
    grad_W = ts.grad(loss_fn)(W)
    assert not isinstance(grad_W, tuple)
    close(grad_W, 2 * np.tanh(W) * (1 - np.tanh(W) ** 2))


@pytest.mark.parametrize("names,expected", [
    (["x", "y", "W"], [2]),
    (["x", "W", "b", "y_true"], [1, 2]),
    (["x", "W"], [1]),
    (["W"], [0]),
    (["inputs", "targets", "labels", "batch", "w"], [4]),
    (["X", "Y", "logits_target", "cls_label", "theta"], [4]),
    (["x", "y"], [0]),  # only data: the first argument, as in JAX
    (["params", "x"], [0]),
])
def test_default_wrt_rule(names: list[str], expected: list[int]) -> None:
    assert default_wrt(names) == expected


def test_default_wrt_rule_with_static_names() -> None:
    assert default_wrt(["x", "W", "mode", "eps"], static={"mode", "eps"}) == [1]
    assert default_wrt(["x", "W", "eps"], static={"eps"}) == [1]
    assert default_wrt(["cfg", "x"], static={"cfg"}) == [0]


def test_default_wrt_skips_static_and_defaulted_arguments() -> None:
    """Flags, strings and hyperparameters left at their default are not differentiated."""
    def loss(x: Any, W: Any, mode: str, eps: float = 1e-3, scale: Any = None) -> Any:
        y = ts.matmul(x, W)
        return ts.sum(y * y if mode == "square" else ts.abs(y)) + eps

    g = ts.grad(loss)(X, W, "square")
    assert not isinstance(g, tuple)
    close(g, X.T @ (2 * X @ W))
    # a float hyperparameter given explicitly is an argument like any other
    g_w, g_eps = ts.grad(loss)(X, W, "square", 0.5)
    close(g_w, X.T @ (2 * X @ W))
    assert float(g_eps) == 1.0


def test_autodiff_marker_is_optional() -> None:
    """@ts.autodiff changes nothing: the same function without it differentiates alike."""
    def plain(x: Any, W: Any) -> Any:
        return ts.sum(ts.matmul(x, W) ** 2)

    close(ts.grad(plain)(X, W), ts.grad(distributed_loss)(X, W))


def test_plain_function_sees_the_current_closure() -> None:
    """grad of a plain function retraces per call: a rebound closure variable is seen."""
    batch = np.ones(3)
    g = ts.grad(lambda w: ts.sum(w * batch))
    close(g(np.zeros(3)), np.ones(3))
    batch = np.full(3, 5.0)
    close(g(np.zeros(3)), batch)


def test_vjp_and_jvp_keep_the_output_structure() -> None:
    """Outputs (and tangents) come back in the structure the function returned."""
    x = np.array([0.5, 1.0, -2.0])

    def f(x: Any) -> Any:
        return {"sin": ts.sin(x), "sq": x * x}

    out, tan = ts.jvp(f, (x,), (np.ones(3),))
    assert isinstance(out, dict) and isinstance(tan, dict)
    close(out["sin"], np.sin(x))
    close(tan["sin"], np.cos(x))
    close(tan["sq"], 2 * x)
    out, pullback = ts.vjp(f, x)
    assert set(out) == {"sin", "sq"}
    (g,) = pullback({"sq": np.ones(3), "sin": np.zeros(3)})
    close(g, 2 * x)
    # a one-element tuple stays a tuple
    out, tan = ts.jvp(lambda x: (ts.exp(x),), (x,), (x,))
    assert isinstance(out, tuple) and len(out) == 1
    close(tan[0], np.exp(x) * x)
    # a pair: the pullback takes the pair's cotangents in order
    _, pullback = ts.vjp(lambda a, b: (a * b, a + b), x, 2 * x)
    ga, gb = pullback((np.ones(3), np.full(3, 10.0)))
    close(ga, 2 * x + 10)
    close(gb, x + 10)
