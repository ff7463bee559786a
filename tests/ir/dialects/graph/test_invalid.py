"""Invalid Graph IR: each rule of the verifier rejects a program that breaks it."""

from __future__ import annotations

import pytest

from tessera.errors import IRVerifyError
from tessera.ir import parse_module, verify_module

T = "tensor<2x3xf32>"


def body(*lines: str, args: str = f"%x: {T}, %y: {T}", results: str = T) -> str:
    inner = "\n".join(f"    {line}" for line in lines)
    return f"module @m {{\n  graph.func @f({args}) -> ({results}) {{\n{inner}\n  }}\n}}\n"


CASES = {
    "elementwise shapes": (body(
        "%0 = graph.add(%x, %y) : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x3xf32>",
        f"graph.return(%0) : ({T}) -> ()", args=f"%x: {T}, %y: tensor<3x2xf32>"),
        "operands have shapes"),
    "storage formats": (body(
        f"%0 = graph.mul(%x, %y) : ({T}, tensor<2x3xbf16>) -> {T}",
        f"graph.return(%0) : ({T}) -> ()", args=f"%x: {T}, %y: tensor<2x3xbf16>"),
        "mixes f32 and bf16"),
    "wrong result type": (body(
        f"%0 = graph.exp(%x) : ({T}) -> tensor<2x3xf16>",
        "graph.return(%0) : (tensor<2x3xf16>) -> ()", results="tensor<2x3xf16>"),
        "should be"),
    "matmul contraction": (body(
        f"%0 = graph.matmul(%x, %y) : ({T}, {T}) -> tensor<2x3xf32>",
        f"graph.return(%0) : ({T}) -> ()"), "do not contract"),
    "transpose permutation": (body(
        f"%0 = graph.transpose(%x) {{perm = [0, 0]}} : ({T}) -> {T}",
        f"graph.return(%0) : ({T}) -> ()"), "not a permutation"),
    "reshape size": (body(
        f"%0 = graph.reshape(%x) {{shape = [4, 2]}} : ({T}) -> tensor<4x2xf32>",
        "graph.return(%0) : (tensor<4x2xf32>) -> ()", results="tensor<4x2xf32>"),
        "cannot turn"),
    "broadcast rule": (body(
        f"%0 = graph.broadcast(%x) {{shape = [2, 4]}} : ({T}) -> tensor<2x4xf32>",
        "graph.return(%0) : (tensor<2x4xf32>) -> ()", results="tensor<2x4xf32>"),
        "cannot broadcast"),
    "reduce axis": (body(
        f"%0 = graph.sum(%x) {{axes = [2]}} : ({T}) -> tensor<2x3xf32>",
        f"graph.return(%0) : ({T}) -> ()"), "out of range"),
    "fft of a real tensor": (body(
        f"%0 = graph.fft(%x) : ({T}) -> {T}",
        f"graph.return(%0) : ({T}) -> ()"), "complex operand"),
    "where condition": (body(
        f"%0 = graph.where(%x, %x, %y) : ({T}, {T}, {T}) -> {T}",
        f"graph.return(%0) : ({T}) -> ()"), "must be bool"),
    "slice bounds": (body(
        f"%0 = graph.slice(%x) {{starts = [0, 0], stops = [3, 3], steps = [1, 1]}} : ({T}) -> {T}",
        f"graph.return(%0) : ({T}) -> ()"), "outside an axis"),
    "return types": (body(
        f"graph.return(%x) : ({T}) -> ()", results="tensor<3xf32>"), "declares"),
    "missing terminator": (body(
        f"%0 = graph.exp(%x) : ({T}) -> {T}"), "terminator"),
    "terminator in the middle": (body(
        f"graph.return(%x) : ({T}) -> ()",
        f"graph.return(%x) : ({T}) -> ()"), "last instruction"),
    "custom region arguments": (body(
        "%0 = graph.custom(%x) {rule = \"r\"} (",
        "  ^bb(%a: tensor<3xf32>) {",
        "    graph.yield(%a) : (tensor<3xf32>) -> ()",
        "  }",
        f") : ({T}) -> {T}",
        f"graph.return(%0) : ({T}) -> ()"), "region arguments"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_invalid_graph_ir_is_rejected(case: str) -> None:
    text, message = CASES[case]
    module = parse_module(text, "case.tir")
    with pytest.raises(IRVerifyError, match=message) as info:
        verify_module(module)
    assert "case.tir:" in str(info.value), "the error names the IR file and line"
