"""The text form: print -> parse -> print is the identity, and bad text is reported."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tessera.errors import IRParseError
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.core import Module
from tests.strategies import graph_functions

EXAMPLE = """\
module @attention {
  graph.func @attention(%Q: tensor<4x8xf32>, %K: tensor<4x8xf32>, %V: tensor<4x8xf32>) -> (tensor<4x8xf32>) {
    %0 = graph.transpose(%K) {perm = [1, 0]} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %1 = graph.matmul(%Q, %0) {tile_shape = [128, 128, 64]} : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
    %2 = graph.softmax(%1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %3 = graph.matmul(%2, %V) : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    graph.return(%3) : (tensor<4x8xf32>) -> ()
  }
}
"""


def test_example_round_trips_exactly() -> None:
    module = parse_module(EXAMPLE)
    verify_module(module)
    assert print_module(module) == EXAMPLE


def test_policies_constants_and_regions_round_trip() -> None:
    text = """\
module @m {
  graph.func @f(%x: tensor<3xbf16@accum(f32)@loss_scale(128.0)>) -> (tensor<3xbf16@accum(f32)@loss_scale(128.0)>) {
    %0 = graph.constant() {value = dense<[1.5, -inf, 0.25]>, element = #bf16@accum(f32)@loss_scale(128.0)} : () -> tensor<3xbf16@accum(f32)@loss_scale(128.0)>
    %1 = graph.custom(%x, %0) {rule = "g#0"} (
      ^bb(%2: tensor<3xbf16@accum(f32)@loss_scale(128.0)>, %3: tensor<3xbf16@accum(f32)@loss_scale(128.0)>) {
        %4 = graph.mul(%2, %3) : (tensor<3xbf16@accum(f32)@loss_scale(128.0)>, tensor<3xbf16@accum(f32)@loss_scale(128.0)>) -> tensor<3xbf16@accum(f32)@loss_scale(128.0)>
        graph.yield(%4) : (tensor<3xbf16@accum(f32)@loss_scale(128.0)>) -> ()
      }
    ) : (tensor<3xbf16@accum(f32)@loss_scale(128.0)>, tensor<3xbf16@accum(f32)@loss_scale(128.0)>) -> tensor<3xbf16@accum(f32)@loss_scale(128.0)>
    graph.return(%1) : (tensor<3xbf16@accum(f32)@loss_scale(128.0)>) -> ()
  }
}
"""
    module = parse_module(text)
    verify_module(module)
    assert print_module(module) == text


@settings(max_examples=60, deadline=None)
@given(graph_functions())
def test_random_graphs_round_trip(fn) -> None:  # noqa: ANN001
    module = Module("random", {fn.name: fn})
    verify_module(module)
    text = print_module(module)
    again = parse_module(text)
    verify_module(again)
    assert print_module(again) == text


@pytest.mark.parametrize("bad, message", [
    ("module @m { graph.func @f() -> () { graph.nope() : () -> () } }", "unknown op"),
    ("module @m { graph.func @f(%x: tensor<2xf32>) -> (tensor<2xf32>) { "
     "graph.return(%y) : (tensor<2xf32>) -> () } }", "used before it is defined"),
    ("module @m { graph.func @f(%x: tensor<2xwhat>) -> () { } }", "unknown element type"),
    ("module @m { graph.func @f(%x: tensor<2xf32>) -> (tensor<2xf32>) { "
     "%0 = graph.exp(%x) : (tensor<2xf32>) -> tensor<2xf32> "
     "%0 = graph.exp(%x) : (tensor<2xf32>) -> tensor<2xf32> } }", "defined twice"),
    ("module @m { graph.func @f() -> () { %0 = graph.constant() {value = dense<[1.0]>, "
     "element = #f32, bogus = 3} : () -> tensor<1xf32> } }", "bad attributes"),
])
def test_parse_errors_name_the_line(bad: str, message: str) -> None:
    with pytest.raises(IRParseError, match=message) as info:
        parse_module(bad, "bad.tir")
    assert "bad.tir:1" in str(info.value)
