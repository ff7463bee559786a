"""Edge tiles of generated kernels: a loop runs in tiles of the schedule's size and the
last one is masked (tessera.ir.transforms.to_tile.edges). On prime and odd shapes the
tile backend gives the graph interpreter's bits, elementwise and for the exactly
summed matmuls (fp8, int8: masked K elements load 0 and add zero products); the
generated elementwise kernels lower to PTX and give the same bits under the Target IR
interpreter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.backend.ptx.driver.assemble import assemble
from tessera.frontend.kernel.backends.compile import lower_and_render
from tessera.interp.graph import run_function
from tessera.interp.target import run_target
from tessera.interp.tile.program import run_program
from tessera.ir.transforms.to_tile import lower_module
from tests.ir.transforms.to_tile import programs

GOLDEN = Path(__file__).parents[3] / "golden" / "to_tile"
PRIMES = [2, 3, 5, 7, 11, 13, 17, 31, 67, 97, 131, 257]


def _fmt(fmt: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if fmt == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return ts.Tensor(rng.standard_normal(shape) * 4, getattr(ts, fmt)).array


def _bits(arrays: Any) -> list[bytes]:
    return [np.asarray(a).tobytes() for a in arrays]


def _program(fn: Any, args: list[np.ndarray]) -> tuple[Any, Any]:
    compiled = ts.jit(fn).compile(*args)
    return compiled, lower_module(compiled.module)


def _same(fn: Any, args: list[np.ndarray]) -> Any:
    compiled, program = _program(fn, args)
    want = run_function(compiled.function, args)
    assert _bits(run_program(program, args)) == _bits(want)
    return program


def test_prime_rows_run_in_schedule_tiles_with_a_masked_edge() -> None:
    rng = np.random.default_rng(1)
    args = [_fmt("f32", rng, s) for s in [(131, 97), (131, 97), (97,)]]
    program = _same(programs.chain, args)
    (kernel,) = program.kernels
    tile = kernel.attrs["tiles"][0]
    assert 1 < tile < 131 and 131 % tile  # not the divisor tile 1
    assert program.launches[0].grid == (-(-131 // tile), 1)
    text = str(kernel)
    assert text.count("tile.masked_load(") == 2 and text.count("tile.masked_store(") == 1
    # the (97,) row vector does not run over the ragged rows: a plain load
    assert text.count(" tile.load(") == 1 and "gmem<97xf32>" in text
    assert str(program) + "\n" == (GOLDEN / "chain_edges.tir").read_text()


def test_tiles_that_divide_their_loops_are_not_masked() -> None:
    rng = np.random.default_rng(2)
    args = [_fmt("f32", rng, s) for s in [(64, 48), (64, 48), (48,)]]
    program = _same(programs.chain, args)
    assert "masked" not in str(program.module) and "arange" not in str(program.module)


def with_exp(x: Any, y: Any) -> Any:
    return op.exp(x - y) * 0.5 + op.relu(x)


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from(PRIMES), cols=st.integers(1, 70),
       fmt=st.sampled_from(["f32", "bf16"]), seed=st.integers(0, 2**16))
def test_elementwise_edges_give_the_graph_bits(rows: int, cols: int, fmt: str,
                                               seed: int) -> None:
    rng = np.random.default_rng(seed)
    _same(with_exp, [_fmt(fmt, rng, (rows, cols)) * 8 for _ in range(2)])


@settings(max_examples=10, deadline=None)
@given(m=st.sampled_from(PRIMES), k=st.integers(1, 300), n=st.sampled_from(PRIMES),
       fmt=st.sampled_from(["fp8_e4m3", "int8"]), seed=st.integers(0, 2**16))
def test_matmul_edges_give_the_graph_bits(m: int, k: int, n: int, fmt: str,
                                          seed: int) -> None:
    """Ragged M, N and K: the K elements past the edge load 0, whose products add
    nothing to the exact sums."""
    rng = np.random.default_rng(seed)
    args = [_fmt(fmt, rng, s) for s in [(m, k), (k, n), (n,)]]
    program = _same(programs.linear_relu, args)
    tiles = program.kernels[0].attrs["tiles"]
    if len(tiles) == 3 and k % tiles[2]:  # a ragged K loop stages through a masked load
        assert "tile.masked_load(%x" in str(program.kernels[0])


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("shape", [(131, 97), (67, 67), (257, 3), (3, 1031)])
def test_generated_edge_kernels_lower_and_give_the_same_bits(target: str,
                                                             shape: tuple[int, int]) -> None:
    """Each generated kernel lowers, assembles with no spills, and its Target IR gives
    the graph's bits under the Target IR interpreter."""
    rng = np.random.default_rng(3)
    x, y = (_fmt("f32", rng, shape) * 8 for _ in range(2))
    compiled, program = _program(with_exp, [x, y])
    want = run_function(compiled.function, [x, y])
    (kernel,) = program.kernels
    assert "tile.masked_store(" in str(kernel)
    lowered, ptx, lines, _ = lower_and_render(kernel, target)
    out = np.full(shape, np.nan, np.float32)
    run_target(lowered, [x, y, out])
    assert _bits([out]) == _bits(want)
    stats = assemble(ptx, target, line_map=lines, kernel=kernel.name).stats[kernel.name]
    assert stats.registers > 0 and stats.spill_stores == 0
