"""Second-order derivatives: grad of grad, and Hessian-vector products (jvp of grad).

References are analytic second derivatives, or five-point finite differences of the
analytic gradient written in NumPy float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tests.autodiff.util import close, directional, jacobians, shapes, values

SETTINGS = settings(max_examples=20, deadline=None)


@SETTINGS
@given(x=st.floats(-3, 3, allow_nan=False))
def test_cube_scalar(x: float) -> None:
    def cube(x: Any) -> Any:
        return x**3

    x64 = np.float64(x)
    close(ts.grad(cube)(x64), 3 * x * x)
    close(ts.grad(ts.grad(cube))(x64), 6 * x)
    close(ts.grad(ts.grad(ts.grad(cube)))(x64), 6.0)
    assert np.asarray(ts.grad(ts.grad(cube))(x64)).dtype == np.float64


@SETTINGS
@given(data=st.data())
def test_sin_times_exp(data: st.DataObject) -> None:
    x = data.draw(values(data.draw(shapes(1, 2))))

    def f(x: Any) -> Any:
        return ts.sum(ts.sin(x) * ts.exp(x))

    def df(x: Any) -> Any:
        return ts.grad(f)(x)

    close(df(x), (np.sin(x) + np.cos(x)) * np.exp(x))
    # the Hessian is diagonal, so the gradient of sum(grad f) is f'' elementwise
    close(ts.grad(lambda x: ts.sum(df(x)))(x), 2 * np.cos(x) * np.exp(x))
    v = data.draw(values(x.shape))
    _, hvp = ts.jvp(df, (x,), (v,))
    close(hvp, 2 * np.cos(x) * np.exp(x) * v)


def _tanh_matmul_grad(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """d/dW sum(tanh(x @ W)), written by hand."""
    return x.T @ (1 - np.tanh(x @ w) ** 2)


@SETTINGS
@given(data=st.data())
def test_tanh_matmul_hessian_vector_products(data: st.DataObject) -> None:
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    x, w, v, u = (data.draw(values(s)) for s in [(m, k), (k, n), (k, n), (k, n)])

    def loss(x: Any, w: Any) -> Any:
        return ts.sum(ts.tanh(ts.matmul(x, w)))

    grad_w = ts.grad(loss, argnums=1)
    close(grad_w(x, w), _tanh_matmul_grad(x, w))
    hv = directional(lambda w: _tanh_matmul_grad(x, w), [w], [v])
    # forward over reverse
    _, got = ts.jvp(lambda w: grad_w(x, w), (w,), (v,))
    close(got, hv)
    # reverse over reverse: d/dW <grad(W), v> = H v (H is symmetric)
    close(ts.grad(lambda w: ts.sum(grad_w(x, w) * v))(w), hv)
    # the mixed second derivative d/dx <grad_W(x, W), u>
    (ref,) = jacobians(lambda x: np.sum(_tanh_matmul_grad(x, w) * u), [x])
    close(ts.grad(lambda x: ts.sum(grad_w(x, w) * u))(x), ref)


def _softmax_sq_grad(x: np.ndarray) -> np.ndarray:
    """d/dx sum(softmax(x)**2) along the last axis, written by hand."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    return 2 * s * (s - np.sum(s * s, axis=-1, keepdims=True))


@SETTINGS
@given(data=st.data())
def test_softmax_sum_of_squares(data: st.DataObject) -> None:
    x = data.draw(values(data.draw(shapes(1, 2))))
    v = data.draw(values(x.shape))

    def f(x: Any) -> Any:
        return ts.sum(ts.softmax(x, axis=-1) ** 2)

    close(ts.grad(f)(x), _softmax_sq_grad(x))
    hv = directional(_softmax_sq_grad, [x], [v])
    close(ts.grad(lambda x: ts.sum(ts.grad(f)(x) * v))(x), hv)
    _, got = ts.jvp(ts.grad(f), (x,), (v,))
    close(got, hv)


def test_second_order_inside_jit() -> None:
    """grad of grad traced into one graph function gives the same numbers as eagerly."""
    @ts.jit
    def curvature(x: Any) -> Any:
        return ts.grad(lambda y: ts.sum(ts.grad(lambda z: ts.sum(z**4))(y)))(x)

    x = np.array([-1.5, 0.5, 2.0])
    close(curvature(x), 12 * x**2)
    assert "graph.func @curvature" in ts.inspect_ir(curvature, "graph")


def test_hessian_columns_by_jvp_of_grad() -> None:
    """The full Hessian of a coupled function, one jvp per column, is symmetric and right."""
    a = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, -0.3], [0.0, -0.3, 3.0]])

    def f(x: Any) -> Any:
        return 0.5 * ts.sum(x * ts.matmul(a, x)) + ts.sum(ts.exp(x[0] * x[1]))

    x = np.array([0.3, -0.7, 1.1])
    cols = [np.asarray(ts.jvp(ts.grad(f), (x,), (e,))[1]) for e in np.eye(3)]
    hess = np.stack(cols, axis=1)
    ref = a.copy()
    p = np.exp(x[0] * x[1])
    ref[0, 0] += x[1] ** 2 * p
    ref[1, 1] += x[0] ** 2 * p
    ref[0, 1] += p * (1 + x[0] * x[1])
    ref[1, 0] += p * (1 + x[0] * x[1])
    close(hess, ref)
