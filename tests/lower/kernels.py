"""Small kernels for lowering tests (kernels are compiled from their source file)."""

from __future__ import annotations

import tessera as ts


@ts.kernel
def scale_unguarded(x: ts.Tensor["N", ts.f32]):
    """x[i] *= 3 with no bounds guard: correct only when exactly N tiles run."""
    i = ts.tile.linear_id()
    x[i] = x[i] * 3.0


@ts.kernel
def first_element(x: ts.Tensor["N", ts.f32]) -> ts.f32:
    """A scalar result (tile 0's value) from a launch of several CTAs."""
    return x[ts.tile.linear_id()] * 2.0


@ts.kernel
def gemm_f16(A: ts.Tensor["M", "K", ts.f16], B: ts.Tensor["K", "N", ts.f16],
             C: ts.Tensor["M", "N", ts.f32]):
    """The example GEMM on f16 inputs (exact products, f32 result rounded once)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f16)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
