"""GEMM kernels whose epilogues the TMA-store tests run: the warp-specialised GEMM of
``tessera/conformance/kernels/gemm.py`` with a fused epilogue (bias, activation, cast,
residual) and a bf16, f16 or f32 output."""

from __future__ import annotations

import tessera as ts


def product(A, B):
    """The group's ``(BM, BN)`` tile of ``A @ B`` (bf16), its f32 accumulator: the
    example GEMM's K loop, inlined into the kernels that call it."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    return acc


@ts.kernel
def gemm_bf16(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
              C: ts.Tensor["M", "N", ts.bf16]):
    """C = bf16(A @ B): the cast is the store's rounding."""
    acc = product(A, B)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def gemm_f16(A: ts.Tensor["M", "K", ts.f16], B: ts.Tensor["K", "N", ts.f16],
             C: ts.Tensor["M", "N", ts.f16]):
    """C = f16(A @ B) with f16 operands."""
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


@ts.kernel
def gemm_bias_relu_bf16(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                        bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.bf16]):
    """C = bf16(relu(A @ B + bias)): bias and activation, then the cast."""
    acc = product(A, B)
    out = ts.tile.maximum(acc + bias[tile_n:tile_n + BN], 0.0)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.cast(out, ts.bf16)


@ts.kernel
def gemm_residual_f16(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                      R: ts.Tensor["M", "N", ts.f32], C: ts.Tensor["M", "N", ts.f16]):
    """C = f16(A @ B + R): a residual tile read in the epilogue."""
    acc = product(A, B)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc + R[tile_m:tile_m + BM, tile_n:tile_n + BN]


@ts.kernel
def gemm_scale_f32(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                   bias: ts.Tensor["N", ts.f32], C: ts.Tensor["M", "N", ts.f32]):
    """C = (A @ B) * 0.5 + bias, f32 output (staged with st.shared, not stmatrix)."""
    acc = product(A, B)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc * 0.5 + bias[tile_n:tile_n + BN]
