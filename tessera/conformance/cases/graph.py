"""Graph-level operators against exact references: elementwise arithmetic is the exact
result rounded once; ``sum``, ``mean``, ``mse`` and ``matmul`` are exact and rounded
once (so independent of order and blocking); ``softmax`` is float64 then one rounding.

These run on ``interp`` (the graph interpreter) and ``tile`` (compiled to tile
kernels where the generator accepts the program; otherwise a skip with its reason).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance.reference import F32, FORMATS, exact_sum, f32_of, mismatch, same_values
from tessera.conformance.registry import GRAPH, register

SPEC_ELEM = "numerics.md Elementwise operators: exact result, rounded once"
SPEC_RED = "numerics.md Exact reductions: accumulate exactly, round once"
RNG = np.random.default_rng(2024)
_X = RNG.standard_normal((6, 16)).astype(np.float32)
_Y = (RNG.standard_normal((6, 16)) + 3.0).astype(np.float32)
A_FP8 = ts.Tensor["M", "K", ts.fp8_e4m3 @ ts.accum(ts.f32)]
B_FP8 = ts.Tensor["K", "N", ts.fp8_e4m3 @ ts.accum(ts.f32)]
A_I8 = ts.Tensor["M", "K", ts.int8 @ ts.accum(ts.int32)]
B_I8 = ts.Tensor["K", "N", ts.int8 @ ts.accum(ts.int32)]


def _binary(name: str, op: Callable[[Any, Any], Any], fmt: str) -> Callable[[Any], None]:
    def run(ctx: Any) -> None:

        store = np.float32 if fmt == "f32" else FORMATS[fmt].np_type
        x, y = _X.astype(store), _Y.astype(store)
        got = np.asarray(ctx.graph(lambda a, b: op(a, b), x, y))
        rounder = F32 if fmt == "f32" else FORMATS[fmt]
        want = np.array([rounder.round(op(Fraction(float(a)), Fraction(float(b))))
                         for a, b in zip(x.ravel(), y.ravel())]).reshape(x.shape)
        assert got.dtype == np.dtype(store), got.dtype
        assert same_values(got, want).all(), mismatch(x, got, want)


    run.__doc__ = f"``a {name} b`` on {fmt} tensors is the exact result rounded once to {fmt}."
    return run


_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
        "div": operator.truediv}
for _fmt in ("f32", "bf16", "f16"):
    for _name, _op in _OPS.items():
        register(f"graph.elementwise.{_name}.{_fmt}", _binary(_name, _op, _fmt),
                 spec=SPEC_ELEM, backends=GRAPH)


def _unary(name: str, ref: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], None]:
    def run(ctx: Any) -> None:

        x = np.abs(_Y) if name in ("log", "sqrt") else _X
        got = np.asarray(ctx.graph(lambda a: getattr(ts, name)(a), x))
        want = ref(x.astype(np.float64)).astype(np.float32)
        assert got.dtype == np.float32
        assert same_values(got, want).all(), mismatch(x, got, want)

    run.__doc__ = (f"``ts.{name}`` of f32 is the float64 function rounded once to f32 "
                   "(relu, abs, neg and sqrt are exact or correctly rounded).")
    return run


for _name, _ref in {"exp": np.exp, "tanh": np.tanh, "log": np.log, "sqrt": np.sqrt,
                    "sin": np.sin, "relu": lambda v: np.maximum(v, 0.0), "abs": np.abs,
                    "neg": np.negative}.items():
    register(f"graph.elementwise.{_name}.f32", _unary(_name, _ref),
             spec="numerics.md Elementwise operators (transcendentals through float64)",
             backends=GRAPH)


def _sum(ctx: Any) -> None:
    """``ts.sum`` of 4096 f32 values spanning 2^40 is the exact sum rounded once."""
    x = (RNG.standard_normal(4096) * 2.0 ** RNG.integers(-20, 20, 4096)).astype(np.float32)
    got = np.asarray(ctx.graph(lambda a: ts.sum(a), x))
    assert got == f32_of(exact_sum(x)), (got, f32_of(exact_sum(x)))
    perm = RNG.permutation(x)
    assert np.asarray(ctx.graph(lambda a: ts.sum(a), perm)) == got, "order changed the bits"


def _mean(ctx: Any) -> None:
    """``ts.mean`` is the exact sum divided exactly by the count, rounded once."""
    x = RNG.standard_normal((3, 333)).astype(np.float32)
    got = np.asarray(ctx.graph(lambda a: ts.mean(a, axis=-1), x))
    want = np.array([f32_of(exact_sum(row) / row.size) for row in x])
    assert np.array_equal(got, want), (got, want)


def _mse(ctx: Any) -> None:
    """``ts.mse(a, b)`` is the exact mean of squared differences, rounded once."""
    a, b = _X, _Y
    got = np.asarray(ctx.graph(lambda p, q: ts.mse(p, q), a, b))
    diffs = [(Fraction(float(p)) - Fraction(float(q))) ** 2 for p, q in zip(a.ravel(),
                                                                             b.ravel())]
    assert got == f32_of(sum(diffs, Fraction(0)) / a.size)


def _matmul(ctx: Any) -> None:
    """An f32 matmul is the exact sum of exact products rounded once; row blocks give
    the same bits as the whole."""
    a = RNG.standard_normal((12, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 5)).astype(np.float32)
    got = np.asarray(ctx.graph(lambda p, q: ts.matmul(p, q), a, b))
    want = np.array([[f32_of(exact_sum(a[i].astype(np.float64) * b[:, j])) for j in range(5)]
                     for i in range(12)])
    assert np.array_equal(got, want), mismatch(a[:, :5], got, want)
    blocks = np.concatenate([np.asarray(ctx.graph(lambda p, q: ts.matmul(p, q),
                                                  a[i:i + 4], b)) for i in (0, 4, 8)])
    assert np.array_equal(blocks, got)


def _matmul_int8(ctx: Any) -> None:
    """An int8 ``@accum(int32)`` matmul is exact in int32; without ``@accum`` the exact
    result saturates to the int8 element."""
    a = RNG.integers(-128, 128, (8, 96)).astype(np.int8)
    b = RNG.integers(-128, 128, (96, 8)).astype(np.int8)
    exact = a.astype(np.int64) @ b.astype(np.int64)

    def wide(p: A_I8, q: B_I8):
        return ts.matmul(p, q)

    got = np.asarray(ctx.graph(wide, a, b))
    assert got.dtype == np.int32 and np.array_equal(got, exact)
    narrow = np.asarray(ctx.graph(lambda p, q: ts.matmul(p, q), a, b))
    assert narrow.dtype == np.int8 and np.array_equal(narrow, np.clip(exact, -128, 127))


def _softmax(ctx: Any) -> None:
    """``ts.softmax`` is exp(x - max) in float64 over its correctly rounded sum, rounded
    once to f32; rows sum to one within the rounding of each term."""
    import math


    x = (RNG.standard_normal((4, 50)) * 8).astype(np.float32)
    got = np.asarray(ctx.graph(lambda v: ts.softmax(v), x)).astype(np.float64)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    want = (e / np.array([[math.fsum(r)] for r in e])).astype(np.float32).astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - want) <= ulp), np.max(np.abs(got - want) / ulp)
    assert np.all(np.abs(got.sum(axis=-1) - 1) <= 50 * 2.0**-24)


def _fp8_matmul_epilogue(ctx: Any) -> None:
    """An fp8_e4m3 ``@accum(f32)`` matmul with a relu epilogue: exact, rounded once."""
    a8 = (RNG.standard_normal((16, 32)) * 2).astype(ml_dtypes.float8_e4m3fn)
    b8 = (RNG.standard_normal((32, 16)) * 2).astype(ml_dtypes.float8_e4m3fn)

    def f(a: A_FP8, b: B_FP8):
        return ts.relu(ts.matmul(a, b))

    got = np.asarray(ctx.graph(f, a8, b8))
    want = np.maximum(a8.astype(np.float64) @ b8.astype(np.float64), 0).astype(np.float32)
    assert np.array_equal(got, want)


for _id, _fn in [("sum.f32", _sum), ("mean.f32", _mean), ("mse.f32", _mse),
                 ("matmul.f32", _matmul), ("matmul.int8", _matmul_int8),
                 ("matmul.fp8-relu", _fp8_matmul_epilogue)]:
    register(f"graph.exact.{_id}", _fn, spec=SPEC_RED, backends=GRAPH)
register("graph.softmax.f32", _softmax, spec="numerics.md Exact reductions: softmax",
         backends=GRAPH)
