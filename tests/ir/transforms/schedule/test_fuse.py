"""``fuse``: kernel counts of traced programs, each rule on a program that needs it, and
the scheduled program's bits equal to the graph interpreter's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.interp import schedule as _schedule_rules  # noqa: F401 - registers the rules
from tessera.interp.graph import run_function
from tessera.ir import PassManager, parse_module, print_module
from tessera.ir.core import Function, Instr, Module
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.transforms.schedule import schedule_module
from tessera.ir.transforms.schedule.cost import traffic
from tests.ir.transforms.schedule.programs import KERNELS, PROGRAMS, attention_4d, traced


def scheduled(fn: Function, passes: tuple[str, ...] = ("graph-to-schedule", "fuse", "tile")
              ) -> Function:
    return schedule_module(Module("m", {fn.name: fn}), passes).functions[fn.name]


def total_traffic(fn: Function) -> int:
    return sum(traffic(k.operands, k.results) for k in schedule_ops.kernels(fn))


def graph_ops_in(kernel: Instr) -> list[str]:
    return [i.op.name for i in kernel.regions[0].block.instrs[:-1]]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_kernel_counts_bits_and_bytes(name: str) -> None:
    fn, args = traced(name)
    unfused = scheduled(fn, ("graph-to-schedule",))
    fused = scheduled(fn)
    n = len(schedule_ops.kernels(fused))
    if name == "block":
        assert n <= KERNELS[name]
    else:
        assert n == KERNELS[name]
    assert len(schedule_ops.kernels(unfused)) == len(fn.body.instrs) - 1
    if len(fn.body.instrs) > 2:  # more than one op: fusing saves global traffic
        assert total_traffic(fused) < total_traffic(unfused)
    # the kernels hold the graph's own ops: exact mode gives the interpreter's bits
    want = run_function(fn, args)
    for got in (run_function(fused, args), run_function(unfused, args)):
        assert all(np.array_equal(a, b) for a, b in zip(want, got))
    # and the scheduled text reads back as the same module
    text = print_module(Module("m", {fn.name: fused}))
    assert print_module(parse_module(text)) == text


def test_attention_is_one_kernel_holding_both_matmuls_and_the_softmax() -> None:
    fn, _ = traced("causal_where")
    (kernel,) = schedule_ops.kernels(scheduled(fn))
    ops = graph_ops_in(kernel)
    assert ops.count("graph.matmul") == 2 and "graph.softmax" in ops and "graph.where" in ops
    # loops: batch, query rows, head dim of V (grid); keys, head dim of Q.K (sequential)
    assert kernel.op.extents == (4, 64, 32, 64, 32)  # keys outside the Q.K contraction
    assert kernel.op.kinds == ("grid", "grid", "grid", "seq", "seq")


def test_the_mlp_cuts_between_the_gelu_and_the_second_matmul() -> None:
    fn, _ = traced("mlp")
    first, second = schedule_ops.kernels(scheduled(fn))
    assert graph_ops_in(first) == ["graph.matmul", "graph.broadcast", "graph.add", "graph.gelu"]
    assert graph_ops_in(second) == ["graph.matmul", "graph.broadcast", "graph.add"]
    assert second.operands[0] is first.results[0]


def test_transformer_block_fuses_qkv_and_norm_prologue() -> None:
    fn, _ = traced("block")
    kernels = schedule_ops.kernels(scheduled(fn))
    first = kernels[0]
    assert graph_ops_in(first).count("graph.matmul") == 3  # Q, K and V share h
    assert "graph.mean" in graph_ops_in(first)  # the norm is their prologue
    assert len(first.results) == 3


def _graph(text: str) -> Function:
    return parse_module(text).functions["f"]


def test_a_full_reduction_of_a_matmul_keeps_the_matmul_rows_parallel() -> None:
    fn = _graph("""
    graph.func @f(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>) -> (tensor<f32>) {
      %0 = graph.matmul(%a, %b) : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
      %1 = graph.sum(%0) : (tensor<64x64xf32>) -> tensor<f32>
      graph.return(%1) : (tensor<f32>) -> ()
    }""")
    assert len(schedule_ops.kernels(scheduled(fn))) == 2


def test_ops_without_a_fusion_rule_are_kernels_of_their_own() -> None:
    fn = _graph("""
    graph.func @f(%x: tensor<8xc64>) -> (tensor<8xc64>) {
      %0 = graph.exp(%x) : (tensor<8xc64>) -> tensor<8xc64>
      %1 = graph.fft(%0) : (tensor<8xc64>) -> tensor<8xc64>
      %2 = graph.exp(%1) : (tensor<8xc64>) -> tensor<8xc64>
      graph.return(%2) : (tensor<8xc64>) -> ()
    }""")
    kernels = schedule_ops.kernels(scheduled(fn))
    assert [graph_ops_in(k) for k in kernels] == [["graph.exp"], ["graph.fft"], ["graph.exp"]]


def test_a_value_used_outside_its_kernel_is_one_of_its_results() -> None:
    def two_outputs(x: Any) -> Any:
        y = op.exp(x)
        return y, op.softmax(y)

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    jitted = ts.jit(two_outputs)
    jitted.compile(x)
    fn = jitted.last.function
    (kernel,) = schedule_ops.kernels(scheduled(fn))
    assert len(kernel.results) == 2
    want = run_function(fn, [x])
    got = run_function(scheduled(fn), [x])
    assert all(np.array_equal(a, b) for a, b in zip(want, got))


def test_returned_index_maps_and_arguments_get_their_values() -> None:
    fn = _graph("""
    graph.func @f(%x: tensor<2x3xf32>) -> (tensor<3x2xf32>, tensor<2x3xf32>) {
      %0 = graph.transpose(%x) {perm = [1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      graph.return(%0, %x) : (tensor<3x2xf32>, tensor<2x3xf32>) -> ()
    }""")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t, same = run_function(scheduled(fn), [x])
    np.testing.assert_array_equal(t, x.T)
    np.testing.assert_array_equal(same, x)


def test_fuse_starts_from_any_schedule_and_is_idempotent() -> None:
    fn, _ = traced("block")
    once = scheduled(fn, ("graph-to-schedule", "fuse"))
    twice = schedule_module(Module("m", {fn.name: once}), ("fuse",)).functions[fn.name]
    assert print_module(Module("m", {fn.name: once})) == \
        print_module(Module("m", {fn.name: twice}))


def test_graph_functions_pass_through_fuse_untouched() -> None:
    fn = _graph("""
    graph.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) {
      %0 = graph.exp(%x) : (tensor<4xf32>) -> tensor<4xf32>
      graph.return(%0) : (tensor<4xf32>) -> ()
    }""")
    out = PassManager.from_names(["fuse", "tile"]).run(Module("m", {"f": fn})).functions["f"]
    assert out is fn and isinstance(out.body.instrs[0].op, graph_ops.Exp)


def test_row_and_column_sums_of_one_value_keep_a_parallel_loop_each() -> None:
    def sums(x: Any) -> Any:
        e = op.exp(x)
        return op.sum(e, axis=0), op.sum(e, axis=1)

    jitted = ts.jit(sums)
    jitted.compile(np.zeros((256, 512), np.float32))
    kernels = schedule_ops.kernels(scheduled(jitted.last.function))
    assert len(kernels) == 2
    assert all("grid" in k.op.kinds for k in kernels)


def test_long_attention_is_still_one_kernel() -> None:
    x = np.zeros((2, 8, 4096, 128), np.float32)
    jitted = ts.jit(attention_4d)
    jitted.compile(x, x, x)
    (kernel,) = schedule_ops.kernels(scheduled(jitted.last.function))
    assert kernel.op.extents == (2, 8, 4096, 128, 4096, 128)
    # the key rows do not fit one tile: exact two-pass softmax, keys streamed in chunks
    assert kernel.op.reduction == "two_pass" and kernel.op.tile[4] <= 128
