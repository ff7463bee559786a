"""``ts.grad`` through tile kernels: a kernel call wrapped in ``ts.custom_vjp`` (a
kernel or graph code for the backward) differentiates like the graph code it stands
for; without a rule, grad names the kernel and the line."""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest

import tessera as ts

HERE = os.path.basename(__file__)
F32 = np.float32


@ts.kernel
def leaky(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    v = x[i]
    y[i] = ts.tile.where(v > 0.0, v, 0.1 * v)


@ts.kernel
def leaky_grad(x: ts.Tensor["n", ts.f32], g: ts.Tensor["n", ts.f32],
               dx: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    dx[i] = ts.tile.where(x[i] > 0.0, g[i], 0.1 * g[i])


@ts.kernel
def kexp(x: ts.Tensor["n", ts.f32]) -> ts.Tensor["n", ts.f32]:
    return ts.tile.exp(x[0:n])


@ts.custom_vjp
def leaky_k(x):
    return leaky(x, out_shape=x)


leaky_k.defvjp(lambda x: (leaky(x, out_shape=x), x),
               lambda x, g: leaky_grad(x, g, out_shape=x))


@ts.custom_vjp
def leaky_graph_bwd(x):
    return leaky(x, out_shape=x)


leaky_graph_bwd.defvjp(lambda x: (leaky(x, out_shape=x), x),
                       lambda x, g: ts.where(x > 0.0, g, 0.1 * g))


@ts.custom_vjp
def exp_k(x):
    return kexp(x, grid=1)


def _exp_fwd(x):
    y = kexp(x, grid=1)
    return y, y


exp_k.defvjp(_exp_fwd, lambda y, g: g * y)


def _bits(x: Any) -> bytes:
    return np.asarray(x).tobytes()


def _loss(act: Any) -> Any:
    def loss(W, x):
        return ts.sum(act(x @ W) * (x @ W))
    return loss


def _reference(h: Any) -> Any:
    return ts.where(h > 0.0, h, 0.1 * h)


@pytest.mark.parametrize("act", [leaky_k, leaky_graph_bwd], ids=["kernel-bwd", "graph-bwd"])
def test_grad_through_a_kernel_equals_the_graph_codes_bit_for_bit(act: Any) -> None:
    rng = np.random.default_rng(0)
    W = rng.standard_normal(4).astype(F32)
    x = rng.standard_normal((8, 4)).astype(F32)
    got = ts.grad(ts.jit(_loss(act)))(W, x)
    want = ts.grad(ts.jit(_loss(_reference)))(W, x)
    assert _bits(got) == _bits(want)
    value, _ = ts.value_and_grad(_loss(act))(W, x)
    assert _bits(value) == _bits(ts.jit(_loss(_reference))(W, x))


def test_vjp_of_a_kernel_call() -> None:
    x = np.linspace(-2, 2, 9).astype(F32)
    ct = np.arange(9, dtype=F32)
    out, pull = ts.vjp(leaky_k, x)
    assert _bits(out) == _bits(np.where(x > 0, x, F32(0.1) * x))
    (dx,) = pull(ct)
    assert _bits(dx) == _bits(np.where(x > 0, ct, F32(0.1) * ct))


def test_grad_of_a_kernel_exp_against_float64_finite_differences() -> None:
    """d/dw sum(c * exp(w)) = c * exp(w). The kernel's exp is correctly rounded on
    every f32 input (tessera.numerics.transcendental.exp), relative error <= u =
    2^-24; the backward multiplies by c = 1.5 and rounds once more, so the gradient is
    within (1 + u)^2 - 1 relative of c e^w. The reference is the float64 central
    difference with h = 2^-17, whose own error (h^2 e^w / 6 truncation plus about
    2^-53 e^w / h rounding) is below 1e-10 relative."""
    w = np.linspace(-3, 3, 13).astype(F32)
    c = F32(1.5)
    got = np.asarray(ts.grad(lambda v: ts.sum(exp_k(v) * c))(w)).astype(np.float64)
    w64, h = w.astype(np.float64), 2.0 ** -17
    fd = float(c) * (np.exp(w64 + h) - np.exp(w64 - h)) / (2 * h)
    u = 2.0 ** -24
    bound = ((1 + u) ** 2 - 1 + 1e-10) * np.abs(fd)
    assert np.all(np.abs(got - fd) <= bound), np.max(np.abs(got - fd) / bound)


def test_grad_without_a_rule_names_the_kernel_and_the_line() -> None:
    def loss(v):
        return ts.sum(leaky(v, out_shape=v))

    with pytest.raises(ts.GradError) as info:
        ts.grad(loss)(np.ones(3, F32))
    lines, first = inspect.getsourcelines(loss)
    line = first + next(k for k, s in enumerate(lines) if "leaky(v" in s)
    text = str(info.value)
    assert f"{HERE}:{line}" in text and "tile kernel 'leaky'" in text
    assert "ts.custom_vjp" in text
