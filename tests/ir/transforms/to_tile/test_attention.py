"""Attention ``softmax(Q Kᵀ · s [+ mask | where]) V`` as one tile kernel with the graph
interpreter's bits: the exact mma rounds the scores as the graph's matmul does, the
softmax is the graph's float64 arithmetic, and P·V is the exact mma again."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.ir.transforms.to_tile.kernel import grid_of
from tests.ir.transforms.schedule import programs

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _bits(x: object) -> bytes:
    return np.asarray(x).tobytes()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", ["attention", "attention_4d", "causal_where",
                                  "causal_additive"])
def test_attention_is_one_kernel_with_the_graph_bits(name: str, fmt: str) -> None:
    fn, make = programs.PROGRAMS[name]
    with np.errstate(over="ignore"):  # the additive mask's -1e9 is -inf in f16
        args = [a.astype(FORMATS[fmt]) if a.dtype == np.float32 else a for a in make()]
    lowered = ts.jit(fn).lower(*args)
    assert len(lowered.kernels) == programs.KERNELS[name] == 1
    text = lowered.kernels[0].text
    assert text.count("tile.mma(") == 2 and text.count("exact = true") == 3
    assert _bits(lowered.run(*args, backend="tile")) == _bits(lowered.run(*args))


def test_a_fully_masked_row_and_extreme_scores() -> None:
    """A row whose every key is masked to -1e9, and scores far apart: the float64
    softmax and the exact P·V still give the graph's bits."""
    fn, make = programs.PROGRAMS["causal_where"]
    q, k, v, mask = make()
    mask[:, 3, :] = False
    q[:, 5, :] *= 1e4
    v[:, :, 0] = [2.0**-40 if j % 2 else 1.0 for j in range(v.shape[1])]
    lowered = ts.jit(fn).lower(q, k, v, mask)
    assert _bits(lowered.run(q, k, v, mask, backend="tile")) == \
        _bits(lowered.run(q, k, v, mask))


@pytest.mark.parametrize("queries,grid", [(256, [2, 3, 4]), (40, [2, 3])])
def test_4d_attention_takes_a_grid_axis_per_loop_of_several_tiles(
        queries: int, grid: list[int]) -> None:
    """4-D attention has four grid loops (batch, heads, queries, V's columns); a loop of
    one tile (the columns, and the queries when they fit one tile) takes no grid axis,
    so three loops of several tiles keep three grid axes, whose tile views the
    simulator takes as strided views, with the graph's bits either way."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, queries, 64)).astype(np.float32)
    k, v = (rng.standard_normal((2, 3, 256, 64)).astype(np.float32) for _ in range(2))
    lowered = ts.jit(programs.attention_4d).lower(q, k, v)
    (kernel,) = lowered.kernels
    assert f"grid = {grid}" in kernel.text
    assert "tile.group_id" not in kernel.text  # no linear axis unfolded
    assert _bits(lowered.run(q, k, v, backend="tile")) == _bits(lowered.run(q, k, v))


def test_four_loops_of_several_tiles_share_one_linear_grid_axis() -> None:
    assert grid_of([2, 3, 4, 1]) == (2, 3, 4)
    assert grid_of([1, 1, 1, 1]) == grid_of([]) == (1,)
    assert grid_of([2, 3, 4, 2]) == (48,)
    assert grid_of([2, 1, 3]) == (2, 1, 3)  # up to three loops: an axis each, as before
