"""The function runner: argument checks, errors, regions, counters (rule coverage:
tests/test_rule_tables.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings

from tessera.errors import InterpretError
from tessera.interp import run_function, run_op
from tessera.ir import parse_function
from tessera.ir.core import Block, Builder, Function, IRRegion, Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.numerics import Policy, convert, dtype
from tests.interp.graph.util import one_op, ref_round, same
from tests.strategies import graph_functions

F32_4x8 = TensorType((4, 8), "f32")


@dataclass(frozen=True)
class _Mystery(Op):
    name: ClassVar[str] = "test.mystery"

    def infer(self, operands):
        return tuple(operands)


def test_op_without_rule_is_a_loud_error() -> None:
    block = Block()
    x = block.add_arg(F32_4x8, "x")
    b = Builder(block)
    (y,) = b.create(_Mystery(), [x])
    b.create(graph_ir.Return(), [y])
    fn = Function("f", block, [F32_4x8])
    with pytest.raises(InterpretError, match=r"no rule for test\.mystery"):
        run_function(fn, [np.zeros((4, 8), np.float32)])


def test_arguments_are_checked_not_converted() -> None:
    fn = one_op(graph_ir.Exp(), [F32_4x8])
    good = np.zeros((4, 8), np.float32)
    with pytest.raises(InterpretError, match="dtype float64") as err:
        run_function(fn, [good.astype(np.float64)])
    assert "astype(np.float32)" in str(err.value)
    with pytest.raises(InterpretError, match=r"shape \(8, 4\)"):
        run_function(fn, [good.T])
    with pytest.raises(InterpretError, match="takes 1 arguments, got 2"):
        run_function(fn, [good, good])
    with pytest.raises(InterpretError, match="is a list, not a NumPy array"):
        run_function(fn, [good.tolist()])
    bf = one_op(graph_ir.Exp(), [TensorType((2,), "bf16")])
    with pytest.raises(InterpretError, match=r"ml_dtypes\.bfloat16"):
        run_function(bf, [np.zeros(2, np.float32)])


def test_tf32_arguments_must_hold_tf32_values() -> None:
    fn = one_op(graph_ir.Neg(), [TensorType((2,), "tf32")])
    assert run_function(fn, [np.array([1.5, -2.0], np.float32)])[0].tolist() == [-1.5, 2.0]
    with pytest.raises(InterpretError, match="not tf32 values"):
        run_function(fn, [np.array([1 + 2**-20, 0], np.float32)])


SYMBOLIC = """\
graph.func @f(%a: tensor<{N}x4xf32>, %b: tensor<{N}x4xf32>) -> (tensor<{N}x4xf32>) {
  %0 = graph.add(%a, %b) : (tensor<{N}x4xf32>, tensor<{N}x4xf32>) -> tensor<{N}x4xf32>
  graph.return(%0) : (tensor<{N}x4xf32>) -> ()
}
"""


def test_symbolic_dims_bind_consistently() -> None:
    fn = parse_function(SYMBOLIC)
    a = np.ones((3, 4), np.float32)
    assert run_function(fn, [a, a])[0].tolist() == (2 * a).tolist()
    with pytest.raises(InterpretError, match="bound so far: N=3"):
        run_function(fn, [a, np.ones((5, 4), np.float32)])


INT_DIV = """\
graph.func @f(%a: tensor<2xint32>, %b: tensor<2xint32>) -> (tensor<2xint32>) {
  %0 = graph.div(%a, %b) : (tensor<2xint32>, tensor<2xint32>) -> tensor<2xint32>
  graph.return(%0) : (tensor<2xint32>) -> ()
}
"""


def test_runtime_errors_carry_the_instruction_location() -> None:
    fn = parse_function(INT_DIV, file="model.tir")
    a = np.array([1, 2], np.int32)
    with pytest.raises(InterpretError) as err:
        run_function(fn, [a, np.array([1, 0], np.int32)])
    assert str(err.value).startswith("model.tir:2: interpreter error: graph.div")


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(InterpretError, match="unknown interpreter mode"):
        run_function(
            one_op(graph_ir.Exp(), [F32_4x8]), [np.zeros((4, 8), np.float32)], mode="turbo"
        )


def test_custom_runs_its_region_and_sees_outer_values() -> None:
    block = Block()
    x = block.add_arg(F32_4x8, "x")
    outer = Builder(block)
    (e,) = outer.create(graph_ir.Exp(), [x])
    body = Block()
    y = body.add_arg(F32_4x8, "y")
    inner = Builder(body)
    (s,) = inner.create(graph_ir.Add(), [y, e])  # e is defined outside the region
    inner.create(graph_ir.Yield(), [s])
    (c,) = outer.create(graph_ir.Custom("my_rule"), [x], regions=[IRRegion([body])],
                        result_types=[F32_4x8])
    outer.create(graph_ir.Return(), [c])
    fn = Function("f", block, [F32_4x8])
    v = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    exp_v = ref_round(np.exp(v.astype(np.float64)), "f32")
    want = ref_round(v.astype(np.float64) + exp_v.astype(np.float64), "f32")
    assert same(run_function(fn, [v])[0], want)


def test_results_are_fresh_arrays() -> None:
    block = Block()
    x = block.add_arg(F32_4x8, "x")
    b = Builder(block)
    (t,) = b.create(graph_ir.Reshape((8, 4)), [x])
    b.create(graph_ir.Return(), [x, x, t])
    fn = Function("f", block, [F32_4x8, F32_4x8, TensorType((8, 4), "f32")])
    v = np.ones((4, 8), np.float32)
    outs = run_function(fn, [v])
    for o in outs:
        assert o.flags.writeable and not np.shares_memory(o, v)
    assert not np.shares_memory(outs[0], outs[1])


def test_run_op_eagerly() -> None:
    a = np.array([1.5, 2.5], ml_dtypes.bfloat16)
    t = TensorType((2,), "bf16")
    (out,) = run_op(graph_ir.Mul(), [a, a], [t, t])
    assert out.dtype == ml_dtypes.bfloat16 and out.tolist() == [2.25, 6.25]
    with pytest.raises(InterpretError, match=r"graph\.mul: argument 1"):
        run_op(graph_ir.Mul(), [a, a.astype(np.float32)], [t, t])


def _sr_cast_function(n: int, seed: int) -> Function:
    t = TensorType((n,), "f32")
    sr = Policy(dtype("bf16"), stochastic_round=True, seed=seed)
    block = Block()
    x = block.add_arg(t, "x")
    b = Builder(block)
    (c1,) = b.create(graph_ir.Cast(sr), [x])
    (c2,) = b.create(graph_ir.Cast(sr), [x])
    b.create(graph_ir.Return(), [c1, c2])
    return Function("sr", block, [c1.type, c2.type])


def test_stochastic_rounding_is_reproducible_and_unbiased_per_element() -> None:
    n = 4096
    x = (1.0 + np.arange(n) * 2.0**-20).astype(np.float32)  # between bf16 neighbours
    fn = _sr_cast_function(n, seed=11)
    first = run_function(fn, [x])
    again = run_function(_sr_cast_function(n, seed=11), [x])
    assert all(same(p, q) for p, q in zip(first, again))
    # Each application has its own counters, so the two casts differ somewhere.
    assert not same(first[0], first[1])
    down = ref_round(np.floor(x.astype(np.float64) * 128) / 128, "bf16")
    up = ref_round(np.ceil(x.astype(np.float64) * 128) / 128, "bf16")
    assert np.all((first[0] == down) | (first[0] == up))
    assert np.any(first[0] != ref_round(x.astype(np.float64), "bf16"))
    other = run_function(_sr_cast_function(n, seed=12), [x])
    assert not same(first[0], other[0])


@settings(max_examples=100, deadline=None)
@given(graph_functions())
def test_random_functions_run_the_same_twice_and_fast_mode_runs(fn) -> None:
    rng = np.random.default_rng(0)
    args = [convert(rng.uniform(-2, 2, a.type.shape), dtype(a.type.element)) for a in fn.args]
    first = run_function(fn, args)
    second = run_function(fn, args)
    assert all(same(p, q) for p, q in zip(first, second))
    fast = run_function(fn, args, mode="fast")
    assert [f.dtype for f in fast] == [f.dtype for f in first]


def test_run_op_reports_errors_at_the_callers_line() -> None:
    t = TensorType((2,), "int32")
    a = np.array([1, 2], np.int32)
    with pytest.raises(InterpretError) as err:
        run_op(graph_ir.Div(), [a, np.zeros(2, np.int32)], [t, t])
    assert str(err.value).startswith(f"{__file__}:")
