"""Gradients against float64 finite differences, within bounds derived per function.

Each case differentiates ``f(x) = sum(w * op(x))`` (random weights ``w``, so every
partial derivative matters) on float64 inputs, and compares with the five-point central
difference ``(f(x-2h) - 8f(x-h) + 8f(x+h) - f(x+2h)) / 12h``. Its error is at most
``h^4/30 * M5`` (truncation; ``M5`` bounds the fifth derivative on the inputs' range,
given per operator) plus ``(18/12) * E / h``, where ``E = (n + 2) u S`` bounds the
rounding error of one float64 evaluation of the n-term sum (``u = 2^-53``, ``S`` the
sum of the terms' magnitudes; Higham, Accuracy and Stability, §3.1); the tolerance is
twice that sum plus the rounding of the gradient itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import tessera as ts
from tessera.conformance.cases.common import f64
from tessera.conformance.registry import case, register

SPEC = "programming-model-guide.md Basic Autodiff; decisions.md Autodiff: ts.grad"
H = 1e-3
U = 2.0**-53
RNG = np.random.default_rng(99)


def _fd(terms: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> tuple[np.ndarray, float]:
    """The five-point difference of ``f = sum(terms(x))`` in float64, and the bound
    ``E`` on the rounding error of one evaluation of f."""
    grad, err = np.zeros_like(x), 0.0
    for i in np.ndindex(x.shape):
        vals = []
        for s in (-2, -1, 1, 2):
            y = x.copy()
            y[i] += s * H
            v = np.asarray(terms(y), np.float64)
            vals.append(float(np.sum(v)))
            err = max(err, (v.size + 2) * U * float(np.sum(np.abs(v))))
        grad[i] = (vals[0] - 8 * vals[1] + 8 * vals[2] - vals[3]) / (12 * H)
    return grad, err


def _unary(name: str, ref: Callable[[np.ndarray], np.ndarray], lo: float, hi: float,
           m5: float) -> Callable[[Any], None]:
    def run(ctx: Any) -> None:
        x = RNG.uniform(lo, hi, (3, 5))
        w = RNG.uniform(-1, 1, (3, 5))
        if name == "relu":  # keep clear of the kink by more than 2h
            x = np.where(np.abs(x) < 4 * H, x + 8 * H, x)
        got = f64(ts.grad(lambda v: ts.sum(ts.mul(w, getattr(ts, name)(v))))(x))
        want, err = _fd(lambda v: w * ref(v), x)
        wsum = float(np.abs(w).max())
        bound = 2 * (H**4 / 30 * m5 * wsum + 1.5 * err / H) + 4 * U * np.abs(want)
        assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))

    run.__doc__ = (f"grad of sum(w * {name}(x)) on [{lo}, {hi}] matches float64 central "
                   f"differences within h^4/30*M5 + 1.5E/h (M5 = {m5:g}).")
    return run


# name: (reference, interval, bound on |f^(5)| there)
UNARY = {"exp": (np.exp, -2.0, 2.0, np.exp(2.0)), "sin": (np.sin, -3.0, 3.0, 1.0),
         "cos": (np.cos, -3.0, 3.0, 1.0), "tanh": (np.tanh, -2.0, 2.0, 17.0),
         "log": (np.log, 0.5, 3.0, 24 / 0.5**5), "sqrt": (np.sqrt, 0.5, 3.0,
                                                           105 / 32 / 0.5**4.5),
         "relu": (lambda v: np.maximum(v, 0.0), -2.0, 2.0, 0.0),
         "abs": (np.abs, 0.1, 2.0, 0.0), "neg": (np.negative, -2.0, 2.0, 0.0)}
for _name, (_ref, _lo, _hi, _m5) in UNARY.items():
    register(f"autodiff.grad.{_name}", _unary(_name, _ref, _lo, _hi, _m5), spec=SPEC)


def _binary(name: str, op: Callable[[Any, Any], Any]) -> Callable[[Any], None]:
    def run(ctx: Any) -> None:
        a = RNG.uniform(0.5, 2.0, (4, 3))
        b = RNG.uniform(0.5, 2.0, (4, 3))
        w = RNG.uniform(-1, 1, (4, 3))
        ga, gb = ts.grad(lambda p, q: ts.sum(ts.mul(w, op(p, q))), argnums=(0, 1))(a, b)
        fa, err_a = _fd(lambda v: w * op(v, b), a)
        fb, err_b = _fd(lambda v: w * op(a, v), b)
        # fifth derivatives on [0.5, 2]: none for a+b, a-b, a*b; for a/b at most
        # 5! a / b^6 <= 15360; for a**b below 100 (in a) and 1 (in b): 2e4 bounds all
        m5 = 0.0 if name in ("add", "sub", "mul") else 2e4
        for got, want, err in ((ga, fa, err_a), (gb, fb, err_b)):
            bound = 2 * (H**4 / 30 * m5 + 1.5 * err / H) + 4 * U * np.abs(want)
            assert np.all(np.abs(f64(got) - want) <= bound), np.max(np.abs(f64(got) - want))

    run.__doc__ = f"grad of sum(w * (a {name} b)) with respect to both arguments."
    return run


for _name, _op in {"add": lambda p, q: p + q, "sub": lambda p, q: p - q,
                   "mul": lambda p, q: p * q, "div": lambda p, q: p / q,
                   "pow": lambda p, q: p ** q}.items():
    register(f"autodiff.grad.{_name}", _binary(_name, _op), spec=SPEC)


@case("autodiff.grad.matmul", spec=SPEC)
def _matmul(ctx: Any) -> None:
    """grad of sum(w * (x @ W)) with respect to W is x^T w (exact in float64 here)."""
    x, w_ = RNG.standard_normal((5, 4)), RNG.standard_normal((4, 3))
    w = RNG.standard_normal((5, 3))
    g = f64(ts.grad(lambda a, b: ts.sum(ts.mul(w, ts.matmul(a, b))), argnums=1)(x, w_))
    assert np.allclose(g, x.T @ w, rtol=8 * U * 4, atol=0)


@case("autodiff.grad.softmax", spec=SPEC)
def _softmax(ctx: Any) -> None:
    """grad of sum(w * softmax(x)) is s * (w - sum(w * s)) row by row."""
    x, w = RNG.standard_normal((3, 6)), RNG.standard_normal((3, 6))
    g = f64(ts.grad(lambda v: ts.sum(ts.mul(w, ts.softmax(v))))(x))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    want = s * (w - (w * s).sum(axis=-1, keepdims=True))
    assert np.allclose(g, want, rtol=1e-13, atol=1e-15)


@case("autodiff.grad.mse-mean", spec=SPEC)
def _mse(ctx: Any) -> None:
    """grad of mse(p, y) is 2 (p - y) / n; of mean(x) it is 1/n everywhere."""
    p, y = RNG.standard_normal((4, 5)), RNG.standard_normal((4, 5))
    assert np.allclose(f64(ts.grad(lambda a: ts.mse(a, y))(p)), 2 * (p - y) / p.size,
                       rtol=4 * U, atol=0)
    assert np.array_equal(f64(ts.grad(lambda a: ts.mean(a))(p)), np.full(p.shape, 1 / p.size))


@case("autodiff.higher-order.exp", spec="decisions.md Autodiff: to any order")
def _second(ctx: Any) -> None:
    """The second derivative of exp is exp; the third of sin is -cos."""
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    d2 = ts.grad(lambda v: ts.sum(ts.grad(lambda u: ts.sum(ts.exp(u)))(v)))(x)
    assert np.allclose(f64(d2), np.exp(x), rtol=4 * U)
    d1 = ts.grad(lambda u: ts.sum(ts.sin(u)))
    d3 = ts.grad(lambda v: ts.sum(ts.grad(lambda u: ts.sum(d1(u)))(v)))(x)
    assert np.allclose(f64(d3), -np.cos(x), rtol=8 * U, atol=8 * U)


@case("autodiff.vjp-jvp.transpose", spec="decisions.md Autodiff: ts.vjp, ts.jvp")
def _vjp_jvp(ctx: Any) -> None:
    """For f(x) = tanh(x) * x: <u, J v> from jvp equals <J^T u, v> from vjp."""
    x, v, u = (RNG.standard_normal(7) for _ in range(3))

    def f(a: Any) -> Any:
        return ts.mul(ts.tanh(a), a)

    _, jv = ts.jvp(f, (x,), (v,))
    _, pullback = ts.vjp(f, x)
    (ju,) = pullback(u) if isinstance(pullback(u), tuple) else (pullback(u),)
    lhs, rhs = float(np.dot(u, f64(jv))), float(np.dot(f64(ju), v))
    assert abs(lhs - rhs) <= 64 * U * (np.abs(u) @ np.abs(f64(jv)) + 1), (lhs, rhs)
    t = np.tanh(x)
    assert np.allclose(f64(jv), (t + x * (1 - t * t)) * v, rtol=8 * U, atol=8 * U)


@case("autodiff.custom-vjp.rule-used", spec="programming-model-guide.md Custom VJP/JVP Rules")
def _custom_vjp(ctx: Any) -> None:
    """A ``custom_vjp`` rule replaces the derivative: a straight-through round gives
    the cotangent unchanged, where the true derivative is zero."""

    @ts.custom_vjp
    def st_round(x):
        return ts.round(x)

    st_round.defvjp(lambda x: (st_round(x), None), lambda saved, g: g)
    x = np.array([0.2, 1.7, -2.4])
    assert np.array_equal(f64(st_round(x)), np.round(x))
    w = np.array([1.0, -3.0, 0.5])
    assert np.array_equal(f64(ts.grad(lambda v: ts.sum(ts.mul(w, st_round(v))))(x)), w)


@case("autodiff.custom-jvp.rule-used", spec="decisions.md Autodiff: ts.custom_jvp")
def _custom_jvp(ctx: Any) -> None:
    """A ``custom_jvp`` rule gives the tangent, and grad follows it by transposition."""

    @ts.custom_jvp
    def f(x):
        return ts.exp(x)

    f.defjvp(lambda primals, tangents: (f(primals[0]), ts.mul(3.0, tangents[0])))
    x = np.array([0.0, 1.0])
    _, t = ts.jvp(f, (x,), (np.ones(2),))
    assert np.array_equal(f64(t), [3.0, 3.0])
    assert np.array_equal(f64(ts.grad(lambda v: ts.sum(f(v)))(x)), [3.0, 3.0])


@case("autodiff.value-and-grad", spec="decisions.md Autodiff: ts.value_and_grad")
def _value_and_grad(ctx: Any) -> None:
    """``value_and_grad`` returns f(x) and the gradient grad returns, bit for bit."""
    x = RNG.standard_normal(9)
    fn = ts.jit(lambda v: ts.sum(ts.mul(v, ts.sin(v))))
    value, g = ts.value_and_grad(fn)(x)
    assert np.array_equal(f64(value), f64(fn(x)))
    assert np.array_equal(f64(g), f64(ts.grad(fn)(x)))
    assert np.allclose(f64(g), np.sin(x) + x * np.cos(x), rtol=8 * U, atol=8 * U)
