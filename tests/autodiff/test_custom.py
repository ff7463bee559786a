"""custom_vjp and custom_jvp: the user's rule is what differentiation uses.

Each rule is deliberately different from the exact derivative of its forward, so a
test that passes proves the rule was used (not the forward's own derivative, and not
finite differences).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tests.autodiff.util import close, jacobians

HERE = os.path.basename(__file__)


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


# ------------------------------------------------------- the seed's custom GELU, verbatim
@ts.custom_vjp
def custom_gelu(x):
    """GELU with custom backward pass"""
    return 0.5 * x * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))

def custom_gelu_fwd(x):
    y = custom_gelu(x)
    return y, (x, y)  # Save for backward

def custom_gelu_bwd(saved, grad_output):
    x, y = saved  # noqa: RUF059 - the seed's text keeps y
    # Custom gradient computation
    cdf = 0.5 * (1 + ts.tanh(0.79788456 * (x + 0.044715 * x**3)))
    pdf = ts.exp(-0.5 * x**2) / ts.sqrt(2 * ts.pi)
    grad_input = grad_output * (cdf + x * pdf)
    return grad_input

custom_gelu.defvjp(custom_gelu_fwd, custom_gelu_bwd)
# ------------------------------------------------------------------- end of seed text

C0, C1 = 0.79788456, 0.044715
# ``ts.sqrt(2 * ts.pi)`` is the square root of a lone Python float, which is an f32 scalar
# (as in JAX): the seed's pdf divides by sqrt(2 pi) rounded to f32.
SQRT_2PI = float(np.sqrt(np.float32(2 * np.pi)))


def _seed_bwd(x: np.ndarray) -> np.ndarray:
    """The seed's backward formula in NumPy: tanh-form cdf plus x times the normal pdf."""
    cdf = 0.5 * (1 + np.tanh(C0 * (x + C1 * x**3)))
    pdf = np.exp(-0.5 * x**2) / SQRT_2PI
    return cdf + x * pdf


def _exact_forward_derivative(x: np.ndarray) -> np.ndarray:
    """d/dx of the seed's forward 0.5 x (1 + tanh(C0 (x + C1 x^3)))."""
    t = np.tanh(C0 * (x + C1 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * C0 * (1 + 3 * C1 * x**2)


X = np.linspace(-3.0, 3.0, 13)


def test_custom_gelu_forward() -> None:
    close(custom_gelu(X), 0.5 * X * (1 + np.tanh(C0 * (X + C1 * X**3))), rtol=1e-12)


def test_custom_gelu_gradient_is_the_custom_rule() -> None:
    g = ts.grad(lambda x: ts.sum(custom_gelu(x)))(X)
    close(g, _seed_bwd(X), rtol=1e-12, atol=1e-12)
    # The rule is not the exact derivative of the forward (the two differ by up to 8e-4,
    # eight orders of magnitude above float64 noise), and the gradient is not a finite
    # difference of the forward either.
    exact = _exact_forward_derivative(X)
    (fd,) = jacobians(lambda x: np.sum(0.5 * x * (1 + np.tanh(C0 * (x + C1 * x**3)))), [X])
    close(fd, exact, rtol=1e-9, atol=1e-10)
    assert np.max(np.abs(np.asarray(g) - exact)) > 5e-4
    assert np.max(np.abs(np.asarray(g) - fd)) > 5e-4


def test_custom_gelu_under_jit_and_inside_a_model() -> None:
    @ts.jit
    def model(x: Any, w: Any) -> Any:
        return ts.sum(custom_gelu(x * w) * 2.0)

    w = np.full_like(X, 0.5)
    gw = ts.grad(model, argnums=1)(X, w)
    close(gw, 2.0 * _seed_bwd(X * w) * X, rtol=1e-12, atol=1e-12)
    text = ts.inspect_ir(model, "graph", X, w)
    assert "graph.custom" in text


def test_custom_gelu_forward_mode_uses_the_rule() -> None:
    """jvp transposes the custom backward, so forward mode agrees with the custom rule."""
    t = np.linspace(-1.0, 1.0, X.size)
    out, tan = ts.jvp(custom_gelu, (X,), (t,))
    close(out, 0.5 * X * (1 + np.tanh(C0 * (X + C1 * X**3))), rtol=1e-12)
    close(tan, _seed_bwd(X) * t, rtol=1e-12, atol=1e-12)


def test_custom_vjp_two_arguments_tuple_cotangents() -> None:
    @ts.custom_vjp
    def scaled_product(a: Any, b: Any) -> Any:
        return a * b

    def fwd(a: Any, b: Any) -> Any:
        return a * b, (a, b)

    def bwd(saved: Any, ct: Any) -> tuple[Any, Any]:
        a, b = saved
        # deliberately not the true derivative (b, a): scaled by 10 and 100
        return ct * b * 10.0, ct * a * 100.0

    scaled_product.defvjp(fwd, bwd)
    a, b = np.array([1.0, -2.0, 0.5]), np.array([3.0, 4.0, -1.0])
    ga, gb = ts.grad(lambda a, b: ts.sum(scaled_product(a, b) * a), argnums=(0, 1))(a, b)
    # the product rule applies around the custom call: d/da [f(a,b) * a] = f_a * a + f
    close(ga, 10 * b * a + a * b)
    close(gb, 100 * a * a)
    _, pullback = ts.vjp(scaled_product, a, b)
    pa, pb = pullback(np.ones(3))
    close(pa, 10 * b)
    close(pb, 100 * a)


def test_custom_vjp_bwd_may_return_none_for_an_argument() -> None:
    @ts.custom_vjp
    def clip_grad(x: Any, limit: Any) -> Any:
        return x * 1.0

    clip_grad.defvjp(lambda x, limit: (x * 1.0, limit),
                     lambda limit, ct: (ts.minimum(ts.maximum(ct, -limit), limit), None))
    x = np.array([1.0, 2.0, 3.0])
    g = ts.grad(lambda x: ts.sum(clip_grad(x, np.array([0.5, 0.5, 0.5])) * x * 2.0))(x)
    # cotangent into clip_grad is 2x, clipped to 0.5; plus the direct term 2x
    close(g, np.minimum(2 * x, 0.5) + 2 * x)


def test_custom_vjp_second_order_differentiates_the_rule() -> None:
    """grad of grad differentiates the user's backward formula."""
    g2 = ts.grad(lambda x: ts.sum(ts.grad(lambda y: ts.sum(custom_gelu(y)))(x)))(X)
    pdf = np.exp(-0.5 * X**2) / SQRT_2PI
    t = np.tanh(C0 * (X + C1 * X**3))
    d_cdf = 0.5 * (1 - t**2) * C0 * (1 + 3 * C1 * X**2)
    close(g2, d_cdf + pdf - X**2 * pdf, rtol=1e-10, atol=1e-12)


def test_missing_defvjp_raises() -> None:
    @ts.custom_vjp
    def no_rule(x: Any) -> Any:
        return ts.sin(x)

    close(no_rule(X), np.sin(X))  # the forward alone works
    with pytest.raises(ts.GradError) as info:
        line = _line() + 1
        ts.grad(lambda x: ts.sum(no_rule(x)))(X)
    assert f"{HERE}:{line}" in str(info.value)
    assert "no_rule" in str(info.value) and "defvjp" in str(info.value)


def test_bwd_with_wrong_number_of_cotangents_raises() -> None:
    @ts.custom_vjp
    def f(a: Any, b: Any) -> Any:
        return a + b

    f.defvjp(lambda a, b: (a + b, None), lambda saved, ct: ct)
    with pytest.raises(ts.GradError, match="returned 1 cotangents for 2 arguments"):
        ts.grad(lambda a: ts.sum(f(a, a)))(X)


# --------------------------------------------------------------------------- custom_jvp
@ts.custom_jvp
def odd_sin(x: Any) -> Any:
    return ts.sin(x)


# not cos(x): 3 + x**2 times the tangent, so a match proves the rule is used
odd_sin.defjvp(lambda primals, tangents: (ts.sin(primals[0]),
                                          (3.0 + primals[0] ** 2) * tangents[0]))


def test_custom_jvp_used_by_jvp() -> None:
    t = np.linspace(0.5, 1.5, X.size)
    out, tan = ts.jvp(odd_sin, (X,), (t,))
    close(out, np.sin(X))
    close(tan, (3.0 + X**2) * t)
    assert np.max(np.abs(np.asarray(tan) - np.cos(X) * t)) > 1.0


def test_custom_jvp_transposed_by_grad() -> None:
    w = np.linspace(-1.0, 1.0, X.size)
    g = ts.grad(lambda x: ts.sum(odd_sin(x) * w))(X)
    close(g, (3.0 + X**2) * w)
    _, pullback = ts.vjp(odd_sin, X)
    (ct,) = pullback(w)
    close(ct, (3.0 + X**2) * w)


def test_custom_jvp_two_arguments() -> None:
    @ts.custom_jvp
    def mix(a: Any, b: Any) -> Any:
        return a * b

    # tangent map t -> 2 t_a + b^2 t_b (not the true b t_a + a t_b)
    mix.defjvp(lambda p, t: (p[0] * p[1], 2.0 * t[0] + p[1] ** 2 * t[1]))
    a, b = np.array([1.0, 2.0]), np.array([-3.0, 0.5])
    ta, tb = np.array([0.1, -0.2]), np.array([1.0, 2.0])
    _, tan = ts.jvp(mix, (a, b), (ta, tb))
    close(tan, 2 * ta + b**2 * tb)
    ga, gb = ts.grad(lambda a, b: ts.sum(mix(a, b)), argnums=(0, 1))(a, b)
    close(ga, [2.0, 2.0])
    close(gb, b**2)


def test_custom_jvp_inside_jit_and_value() -> None:
    @ts.jit
    def f(x: Any) -> Any:
        return ts.sum(odd_sin(x) ** 2)

    value, g = ts.value_and_grad(f)(X)
    close(value, np.sum(np.sin(X) ** 2))
    close(g, 2 * np.sin(X) * (3.0 + X**2))


def test_missing_defjvp_raises() -> None:
    @ts.custom_jvp
    def no_jvp(x: Any) -> Any:
        return ts.exp(x)

    with pytest.raises(ts.GradError) as info:
        line = _line() + 1
        ts.jvp(no_jvp, (X,), (X,))
    assert f"{HERE}:{line}" in str(info.value) and "defjvp" in str(info.value)
    with pytest.raises(ts.GradError):
        ts.grad(lambda x: ts.sum(no_jvp(x)))(X)




def test_a_custom_function_closing_over_a_traced_value_records_the_capture() -> None:
    """Captured outer values are trailing operands of graph.custom, counted in its
    ``captures`` attribute, so the rule is handed only the function's own arguments."""

    @ts.jit
    def f(x, w):
        @ts.custom_vjp
        def scaled(v):
            return v * w  # closes over the traced w

        return scaled(x)

    x = np.array([1.0, -2.0], np.float64)
    w = np.array([5.0, 7.0], np.float64)
    np.testing.assert_array_equal(np.asarray(f(x, w)), x * w)
    text = f.inspect_ir("graph")
    assert "graph.custom(%x, %w) {rule = " in text and "captures = 1}" in text
