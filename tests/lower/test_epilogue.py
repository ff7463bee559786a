"""GEMM epilogues that read a tile from memory and broadcast it onto the accumulator
(``acc + bias[tile_n:tile_n + BN]``): each thread loads the elements of the rows or
columns it holds, and the result equals the tile interpreter's bit for bit."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tests.lower.test_lowering import same_bits

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(77)


@ts.kernel
def gemm_bias(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
              bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.f32]):
    """C = A @ B + bias (one bias value per column)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc + bias[tile_n:tile_n + BN]


@ts.kernel
def gemm_bias_square(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                     bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.f32]):
    """C = A @ B + bias; ``[None, :]`` keeps the bias on the columns when BM == BN (a
    1-D tile as long as the row count broadcasts along rows otherwise)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc + bias[tile_n:tile_n + BN][None, :]


@ts.kernel
def gemm_row_scale(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                   scale: ts.Tensor["M", ts.bf16], C: ts.Tensor["M", "N", ts.f32]):
    """C = diag(scale) @ (A @ B), with a bf16 scale per row."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc * scale[tile_m:tile_m + BM][:, None]


def _operands(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("tile", [(64, 32, 64), (128, 64, 32)])
def test_bias_row_epilogue(target: str, tile: tuple[int, int, int]) -> None:
    a, b = _operands(128, 128, 64)
    bias = rng.standard_normal(128).astype(np.float32)
    c = np.zeros((128, 128), np.float32)
    same_bits(gemm_bias, a, b, bias, c, target=target, tile_shape=tile)
    # an independent reference: the exact product, plus the bias, rounded once
    ts.launch(gemm_bias, None, (a, b, bias, c), backend="target", target=target,
              tile_shape=tile)
    exact = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    assert np.array_equal(c, exact.astype(np.float32))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_bias_row_of_square_tiles(target: str) -> None:
    a, b = _operands(128, 128, 64)
    bias = rng.standard_normal(128).astype(np.float32)
    c = np.zeros((128, 128), np.float32)
    same_bits(gemm_bias_square, a, b, bias, c, target=target, tile_shape=(64, 64, 64))
    ts.launch(gemm_bias_square, None, (a, b, bias, c), backend="target", target=target,
              tile_shape=(64, 64, 64))
    exact = a.astype(np.float64) @ b.astype(np.float64) + bias.astype(np.float64)
    assert np.array_equal(c, exact.astype(np.float32))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_row_scale_epilogue(target: str) -> None:
    a, b = _operands(128, 64, 32)
    scale = rng.standard_normal(128).astype(BF16)
    same_bits(gemm_row_scale, a, b, scale, np.zeros((128, 64), np.float32), target=target,
              tile_shape=(64, 64, 32))


def test_the_epilogue_loads_each_column_once_per_thread() -> None:
    a, b = _operands(64, 32, 64)
    ptx = compile_kernel(gemm_bias, a, b, np.zeros(32, np.float32),
                         np.zeros((64, 32), np.float32), target="sm_80",
                         tile_shape=(64, 32, 64)).ptx
    # a thread holds 2 columns of each of the 4 n8 blocks: 8 bias loads, one per column
    assert ptx.count("ld.global.f32") == 8


def test_a_blocked_tile_broadcast_onto_an_accumulator_is_refused() -> None:
    @ts.kernel
    def gemm_plus_loaded_row(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                             bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.f32]):
        smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
        smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
        acc = ts.tile.zeros((BM, BN), ts.f32)
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
        ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        row = bias[tile_n:tile_n + BN] * 2.0  # a register tile, not a memory view
        C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc + row

    a, b = _operands(64, 32, 64)
    with pytest.raises(UnsupportedError, match="broadcast from") as info:
        compile_kernel(gemm_plus_loaded_row, a, b, np.zeros(32, np.float32),
                       np.zeros((64, 32), np.float32), target="sm_80", tile_shape=(64, 32, 64))
    assert info.value.loc.file == __file__


@ts.kernel
def add_row_vector(x: ts.Tensor["M", "N", ts.f32], v: ts.Tensor["N", ts.f32],
                   out: ts.Tensor["M", "N", ts.f32]):
    """out = x + v (v broadcast over the rows), a tile of BM rows per group."""
    out[tile_m:tile_m + BM, 0:N] = x[tile_m:tile_m + BM, 0:N] + v[0:N]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(("m", "n", "bm"), [(16, 64, 4), (8, 96, 8)])
def test_a_memory_row_broadcast_onto_a_blocked_tile(target: str, m: int, n: int,
                                                    bm: int) -> None:
    x = rng.standard_normal((m, n)).astype(np.float32)
    v = rng.standard_normal(n).astype(np.float32)
    same_bits(add_row_vector, x, v, np.zeros((m, n), np.float32), target=target,
              tile_shape=(bm,))
    out = np.zeros((m, n), np.float32)
    ts.launch(add_row_vector, None, (x, v, out), backend="target", target=target,
              tile_shape=(bm,))
    assert np.array_equal(out, x + v)
