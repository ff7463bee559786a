"""The text form: print -> parse -> print is the identity, and bad text is reported."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from tessera.errors import IRParseError
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.core import Module
from tessera.ir.text.lexer import Lexer
from tessera.ir.text.printer import attr_text
from tessera.ir.types import Dense
from tests.strategies import graph_functions

GOLDEN = Path(__file__).parents[2] / "golden" / "ir"


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.tir")))
def test_golden_text_round_trips_exactly(name: str) -> None:
    text = (GOLDEN / name).read_text()
    module = parse_module(text, name)
    verify_module(module)
    assert print_module(module) == text


@settings(max_examples=60, deadline=None)
@given(graph_functions())
def test_random_graphs_round_trip(fn) -> None:
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
    # the signature's operand types must be the operands' own
    ("module @m { graph.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) { "
     "%0 = graph.exp(%x) : (tensor<9x9xbf16>) -> tensor<4xf32> } }",
     r"operand 0 of graph.exp has type tensor<4xf32>, but the signature says "
     r"tensor<9x9xbf16>"),
    ("module @m { graph.func @f(%x: tensor<4xf32>) -> (tensor<4xf32>) { "
     "%0 = graph.add(%x, %x) : (tensor<4xf32>) -> tensor<4xf32> } }",
     "has 2 operands but its signature lists 1 types"),
])
def test_parse_errors_name_the_line(bad: str, message: str) -> None:
    with pytest.raises(IRParseError, match=message) as info:
        parse_module(bad, "bad.tir")
    assert "bad.tir:1" in str(info.value)


@pytest.mark.parametrize("array", [np.full((32, 16), 0.00390625), np.full((3,), -0.0),
                                   np.full((2, 2), 7, np.int64), np.full((4,), True),
                                   np.full((2, 3), -np.inf), np.full((1, 5), 1.5 - 2j)])
def test_a_repeated_value_prints_once_and_reads_back(array: np.ndarray) -> None:
    """A splat constant prints as ``dense<splat VALUE, [SHAPE]>``, not every element, and
    reads back to the same array (dtype, shape and bytes)."""
    text = attr_text(Dense(array))
    assert text.startswith("dense<splat ") and text.count(",") <= array.ndim + 1
    back = Lexer(text, "<test>").attr()
    assert back == Dense(array)
    assert attr_text(Dense(np.array([1.0, 1.0 + 2.0**-52]))) == "dense<[1.0, 1.0000000000000002]>"
