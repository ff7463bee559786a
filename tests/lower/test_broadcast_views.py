"""A broadcast of a loaded tile is a view with stride-0 axes that each use reads in its
own layout: into an ``mma`` accumulator (a bias over a GEMM's rows) and into blocked
tiles of any rank; the Target IR interpreter gives the tile interpreter's bits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.frontend.kernel.backends.compile import compile_kernel

TARGETS = ("sm_80", "sm_90a")


@ts.kernel
def gemm_bias(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
              bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.f32]):
    """C = A @ B + bias: the bias row read straight into the accumulator's layout."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc + bias[tile_n:tile_n + BN][None, :]


@pytest.mark.parametrize("target", TARGETS)
def test_bias_broadcast_into_the_accumulator(target: str) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(64).astype(np.float32)
    c = np.zeros((128, 64), np.float32)
    ts.check_against_reference(gemm_bias, a, b, bias, c, backend="target", target=target,
                               tile_shape=(64, 64, 32))
    stats = compile_kernel(gemm_bias, a, b, bias, c, target=target,
                           tile_shape=(64, 64, 32)).assemble().stats["gemm_bias"]
    assert stats.spill_stores == 0
