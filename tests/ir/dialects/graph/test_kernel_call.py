"""``graph.kernel_call`` in the text syntax: it prints, parses back to the same text,
verifies, and the parsed function runs with the graph interpreter; malformed calls are
verification errors."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.interp.graph import run_function
from tessera.ir import parse_module
from tessera.ir.verifier import verify_module


@ts.kernel
def axpy_into(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32], alpha: ts.f32,
              out: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = alpha * x[i] + y[i]


@ts.kernel
def twice(x: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    return x[tile_m:tile_m + BM, tile_n:tile_n + BN] * 2.0


def _f(x, y):
    return axpy_into(x, y, 0.5, out_shape=ts.Tensor[8, ts.f32]) + 1.0


def _text() -> str:
    x = np.arange(8, dtype=np.float32)
    return ts.inspect_ir(_f, "graph", x, x)


def test_round_trip_and_run() -> None:
    text = _text()
    assert 'graph.kernel_call(%x, %y, %0) {kernel = "axpy_into", grid = [8], ' \
           'tile_shape = [64, 64, 32], results = [3], fresh = [3]} (' in text
    assert "^bb(%2: gmem<8xf32>, %3: gmem<8xf32>, %alpha: tensor<f32>, %out: gmem<8xf32>)" \
        in text
    module = parse_module(text)
    verify_module(module)
    assert str(module) == text
    assert str(parse_module(str(module))) == text
    x = np.arange(8, dtype=np.float32)
    y = np.linspace(0, 1, 8).astype(np.float32)
    (got,) = run_function(module.functions["_f"], [x, y])
    np.testing.assert_array_equal(got, np.float32(0.5) * x + y + np.float32(1))


def test_a_returned_tile_round_trips() -> None:
    text = ts.inspect_ir(lambda v: twice(v, tile_shape=(2, 2)), "graph",
                         np.ones((4, 2), np.float32))
    assert "results = [-1]" in text and "tile.return(%" in text
    module = parse_module(text)
    (got,) = run_function(module.functions["lambda"], [np.full((4, 2), 3, np.float32)])
    np.testing.assert_array_equal(got, np.full((4, 2), 6.0))


@pytest.mark.parametrize("old, new, message", [
    ("fresh = [3]", "fresh = []", "4 kernel parameters for 3 operands and 0 fresh outputs"),
    ("results = [3]", "results = [3, 0]", "lists 2 results but has 1"),
    ("results = [3]", "results = [-1]", "the returned tile, but the kernel returns none"),
    ("results = [3]", "results = [2]", "result parameter 2 is not a tensor parameter"),
    ("grid = [8]", "grid = [0]", "must be positive"),
])
def test_malformed_calls_do_not_verify(old: str, new: str, message: str) -> None:
    with pytest.raises(ts.IRVerifyError, match=message):
        verify_module(parse_module(_text().replace(old, new)))


def test_an_operand_of_the_wrong_type_does_not_verify() -> None:
    from tessera.ir.dialects.tile import MemRefType

    module = parse_module(_text())
    call = module.functions["_f"].body.instrs[1]
    call.regions[0].block.args[0].type = MemRefType("global", (9,), ts.f32)  # one too long
    with pytest.raises(ts.IRVerifyError,
                       match="operand for parameter 0 is tensor<8xf32>, the kernel takes "
                             "gmem<9xf32>"):
        verify_module(module)
