"""Matmul kernels at the tile level: which contractions the checked ``mma`` sums
exactly, the K loop it generates, and its refusal of the others."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.interp.graph import run_function
from tessera.interp.tile.program import run_program
from tessera.ir.transforms.to_tile import TileGenerationError, lower_module
from tessera.ir.transforms.to_tile.matmul import exact_contraction
from tessera.numerics import dtype
from tests.ir.transforms.to_tile import programs

GOLDEN = Path(__file__).parents[3] / "golden" / "to_tile"


@pytest.mark.parametrize(("a", "b", "limit"), [
    # e4m3: products are multiples of 2^-18 below 448^2 < 2^18, so 2^53 / (448^2 2^18)
    ("fp8_e4m3", "fp8_e4m3", int(2**53 // (448.0**2 * 2**18))),
    ("int8", "int8", 2**17 - 1),
    ("f32", "f32", 0), ("bf16", "bf16", 0), ("f16", "f16", 0), ("fp8_e5m2", "fp8_e5m2", 0),
    ("fp8_e4m3", "f32", 0), ("int8", "int32", 0),
])
def test_exact_contraction(a: str, b: str, limit: int) -> None:
    assert exact_contraction(dtype(a), dtype(b)) == limit


def test_the_bound_is_tight_for_e4m3() -> None:
    """At the bound the largest partial sum in quanta is at most 2^53; one more product
    of the largest magnitude passes it."""
    quanta = 448.0**2 * 2**18
    k = exact_contraction(dtype("fp8_e4m3"), dtype("fp8_e4m3"))
    assert k * quanta <= 2**53 < (k + 1) * quanta


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8)


def test_linear_relu_golden_and_bits() -> None:
    rng = np.random.default_rng(3)
    args = [_int8(rng, (16, 256)), _int8(rng, (256, 16)), _int8(rng, (16,))]
    compiled = ts.jit(programs.linear_relu).compile(*args)
    program = lower_module(compiled.module)
    assert str(program) + "\n" == (GOLDEN / "linear_relu.tir").read_text()
    text = str(program.kernels[0])
    assert text.count("tile.mma(") == 1 and "tile.for(" in text and "tile.cp_async" in text
    want = run_function(compiled.function, args)
    assert [g.tobytes() for g in run_program(program, args)] == [w.tobytes() for w in want]


def test_f32_matmul_is_refused_with_the_reason() -> None:
    x = np.ones((8, 16), np.float32)
    compiled = ts.jit(programs.linear_relu).compile(x, np.ones((16, 8), np.float32),
                                                   np.ones(8, np.float32))
    with pytest.raises(TileGenerationError, match="formats alone do not guarantee"):
        lower_module(compiled.module)


def test_transposed_and_batched_operands_are_refused() -> None:
    x = np.ones((8, 16), np.int8)
    # a transpose is an index map, copied into the matmul's kernel: refused first
    with pytest.raises(TileGenerationError, match=r"graph\.transpose"):
        lower_module(ts.jit(lambda x, w: x @ op.transpose(w, (1, 0))).compile(x, x).module)
    x3 = np.ones((2, 8, 16), np.int8)
    w3 = np.ones((2, 16, 8), np.int8)
    with pytest.raises(TileGenerationError, match="2-D"):
        lower_module(ts.jit(lambda x, w: x @ w).compile(x3, w3).module)
