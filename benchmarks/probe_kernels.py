"""The f16 and e5m2 GEMMs of ``tensorcore_probe.py`` (the example GEMM's loop on other
tensor-core formats; the bf16 and e4m3 ones are the conformance kernels)."""

# ruff: noqa: F821  (kernels name their dimensions and tile extents free: the compiler binds them)

from __future__ import annotations

import tessera as ts


@ts.kernel
def gemm_f16(A: ts.Tensor["M", "K", ts.f16], B: ts.Tensor["K", "N", ts.f16],
             C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = A @ B on f16 operands (the example GEMM's loop)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C


@ts.kernel
def gemm_e5m2(A: ts.Tensor["M", "K", ts.fp8_e5m2], Bt: ts.Tensor["N", "K", ts.fp8_e5m2],
              C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = A @ Bt.T on e5m2 operands, B stored N x K as fp8 wgmma reads it."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.fp8_e5m2)
    smem_b = ts.tile.alloc_shared((BN, BK), ts.fp8_e5m2)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, Bt[tile_n:tile_n + BN, k:k + BK])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b.T, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C
