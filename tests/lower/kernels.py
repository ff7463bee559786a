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


@ts.kernel
def gemm_split_k(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                 C: ts.Tensor["M", "N", ts.f32]):
    """The quick-start GEMM as written (one BK slice per group, added into C), with the
    slice rounded to f32 before the add, as a GPU's atomic add does."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, tile_k:tile_k + BK])
    ts.tile.cp_async(smem_b, B[tile_k:tile_k + BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    acc = ts.tile.mma(smem_a, smem_b)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += ts.tile.cast(acc, ts.f32)


@ts.kernel
def accumulate_rows(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["C", ts.f32]):
    """Every tile adds its row into ``out`` (blocked-layout '+=' from many CTAs)."""
    out[0:C] += x[tile_m]
