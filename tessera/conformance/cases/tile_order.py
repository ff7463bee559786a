"""The order of reductions in tile kernels (decisions.md Numerics: the reference order
of every reduction is fixed): ``+=`` from several tiles in group, then local-id order,
in loops, at elements chosen by data, into windows that overlap and from split-K
slices, and a row sum's pairwise tree. Each case's inputs tell its order from others."""
# ruff: noqa: F821 - kernels name their dimensions free (N), the compiler binds them

from __future__ import annotations

import functools
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance.registry import KERNEL, case

ORDER = "decisions.md Numerics: the reference order of every reduction is fixed"


@ts.kernel
def add_in_group_order(x: ts.Tensor["N", ts.f32], out: ts.Tensor["R", ts.f32]):
    out[0] += x[ts.tile.linear_id()]


def _order(grid: int, group_size: int) -> Any:
    def run(ctx: Any) -> None:
        n = grid * group_size
        x = np.ones(n, np.float32)
        x[0] = 2.0**24  # 2^24 + 1 rounds back to 2^24 (a tie, to even) in f32
        x[-1] = -(2.0**24)
        out = np.zeros(1, np.float32)
        ctx.launch(add_in_group_order, x, out, grid=grid, group_size=group_size)
        want = functools.reduce(lambda s, v: np.float32(s + v), x, np.float32(0.0))
        assert out[0] == want and want == 0.0, (out, want)  # the exact sum is n - 2

    run.__doc__ = (f"``out[0] += x[i]`` over {grid} groups of {group_size}: f32 additions in "
                   "ascending group, then local id order (2^24 first makes the ones vanish).")
    return run


case("tile.reduce.group-order", spec=f"{ORDER}: += in ascending group order",
     backends=KERNEL)(_order(8, 1))
case("tile.reduce.local-order", spec=f"{ORDER}: within a group, ascending local id",
     backends=KERNEL)(_order(2, 4))


@ts.kernel
def add_in_loop_order(x: ts.Tensor["N", 2, ts.f32], out: ts.Tensor["R", ts.f32]):
    i = ts.tile.linear_id()
    for k in range(2):
        out[0] += x[i, k]


@case("tile.reduce.loop-order", spec=f"{ORDER}: a tile's += in a loop, tile by tile",
      backends=KERNEL)
def _loop_order(ctx: Any) -> None:
    """Each of 8 tiles adds its two elements in a loop: tile 0's 2^24 and -2^24 cancel
    first and the 14 ones count (tile order, then iteration); iteration-major order
    would lose the ones added while 2^24 is there (7)."""
    x = np.ones((8, 2), np.float32)
    x[0] = 2.0**24, -(2.0**24)
    out = np.zeros(1, np.float32)
    ctx.launch(add_in_loop_order, x, out, grid=8)
    assert out[0] == 14.0, out


@ts.kernel
def scale_by_key(x: ts.Tensor["N", ts.f32], key: ts.Tensor["N", ts.int32],
                 out: ts.Tensor["B", ts.f32]):
    i = ts.tile.linear_id()
    out[key[i]] *= x[i]


@case("tile.reduce.data-order", spec=f"{ORDER}: updates of elements chosen by data, "
      "in tile order", backends=KERNEL)
def _data_order(ctx: Any) -> None:
    """``out[key[i]] *= x[i]`` (no atomic multiplies): each bin is the f32 product of
    its tiles' factors in tile order; the reverse order differs in some bin."""
    rng = np.random.default_rng(5)
    x = (1 + rng.standard_normal(96) / 4).astype(np.float32)
    key = rng.integers(0, 4, 96).astype(np.int32)
    out = np.ones(4, np.float32)
    ctx.launch(scale_by_key, x, key, out, grid=3, group_size=32)

    def product(order: np.ndarray) -> np.ndarray:
        bins = np.ones(4, np.float32)
        for i in order:
            bins[key[i]] = np.float32(bins[key[i]] * x[i])
        return bins
    want = product(np.arange(96))
    assert not np.array_equal(want, product(np.arange(96)[::-1]))
    assert np.array_equal(out, want), (out, want)


@ts.kernel
def add_overlapping_rows(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["W", ts.f32]):
    out[tile_m:tile_m + C] += x[tile_m, 0:C]


@case("tile.reduce.overlap-order", spec=f"{ORDER}: a tile's += into windows that overlap "
      "in part, in tile order", backends=KERNEL)
def _overlap_order(ctx: Any) -> None:
    """Tile i adds row i into ``out[i:i + 32]``: each element sums up to 32 tiles'
    values, of magnitudes far apart, in tile order; the reverse order differs."""
    rng = np.random.default_rng(17)
    x = (rng.standard_normal((12, 32)) * 10.0 ** rng.integers(-4, 5, (12, 32))).astype(
        np.float32)
    out = np.zeros(43, np.float32)
    ctx.launch(add_overlapping_rows, x, out, tile_shape=(1,), grid=12)

    def added(tiles: range) -> np.ndarray:
        want = np.zeros(43, np.float32)
        for i in tiles:
            want[i:i + 32] = (want[i:i + 32] + x[i]).astype(np.float32)
        return want
    want = added(range(12))
    assert not np.array_equal(want, added(range(11, -1, -1)))
    assert np.array_equal(out, want), np.flatnonzero(out != want)


@ts.kernel
def split_k_in_order(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                     C: ts.Tensor["M", "N", ts.f32]):
    sa = ts.tile.alloc_shared((BM, BK), ts.bf16)
    sb = ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(sa, A[tile_m:tile_m + BM, tile_k:tile_k + BK])
    ts.tile.cp_async(sb, B[tile_k:tile_k + BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += ts.tile.cast(ts.tile.mma(sa, sb), ts.f32)


@case("tile.reduce.split-k-order", spec=f"{ORDER}: a tile's += in ascending group order",
      backends=KERNEL)
def _split_k_order(ctx: Any) -> None:
    """A split-K GEMM whose four K slices' products are 2^24, 1, 1 and -2^24 in every
    element: added into C in slice (group) order they give 0 (each 1 vanishes in a
    tie to even); another order gives 1 or 2."""
    a = np.zeros((64, 64), np.float32)
    b = np.zeros((64, 64), np.float32)
    for s, v in enumerate((2.0**24, 1.0, 1.0, -(2.0**24))):
        a[:, 16 * s], b[16 * s, :] = 1.0, v
    c = np.zeros((64, 64), np.float32)
    ctx.launch(split_k_in_order, a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16),
               c, tile_shape=(64, 64, 16))
    assert not c.any(), np.unique(c)


@ts.kernel
def rowsum(x: ts.Tensor["M", "N", ts.f32], out: ts.Tensor["M", ts.f32]):
    out[0:M] = ts.tile.row_sum(x[0:M, 0:N])


def _pairwise(v: np.ndarray) -> float:
    """A float64 pairwise tree over adjacent elements."""
    vals = [float(t) for t in v]
    while len(vals) > 1:
        vals = [vals[i] + vals[i + 1] if i + 1 < len(vals) else vals[i]
                for i in range(0, len(vals), 2)]
    return vals[0]


@case("tile.row-sum.pairwise-tree", spec=f"{ORDER}: a float row_sum is a float64 pairwise "
      "tree over adjacent elements", backends=KERNEL)
def _rowsum(ctx: Any) -> None:
    """``row_sum`` equals the float64 pairwise tree rounded once to f32."""
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((4, 64)) * 2.0 ** rng.integers(-30, 30, (4, 64))).astype(
        np.float32)
    out = np.zeros(4, np.float32)
    ctx.launch(rowsum, x, out, grid=1)
    assert np.array_equal(out, np.array([np.float32(_pairwise(r)) for r in x]))
