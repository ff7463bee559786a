"""An fp8 (e4m3) GEMM with f32 accumulation, ``B`` stored ``N x K`` ("TN").

fp8 tensor-core products (``wgmma ... .e4m3.e4m3``) read both operands K-major, so the
kernel takes ``B`` transposed, as fp8 GEMM libraries do, and multiplies by its
transpose view. e4m3 products are exact in float64 (4-bit significands), so the exact
accumulation of ``mma`` makes the result the product rounded once to f32 whenever the
float64 sums are exact (they are for these inputs). The PTX lowering targets sm_90a.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tessera as ts


@ts.kernel
def fp8_gemm(A: ts.Tensor["M", "K", ts.fp8_e4m3],
             Bt: ts.Tensor["N", "K", ts.fp8_e4m3],
             C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = A @ Bt.T, one (BM, BN) tile of C per group, K in BK steps."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.fp8_e4m3)
    smem_b = ts.tile.alloc_shared((BN, BK), ts.fp8_e4m3)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, Bt[tile_n:tile_n + BN, k:k + BK])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b.T, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C


def main() -> None:
    rng = np.random.default_rng(8)
    for (m, n, k), tile in [((128, 128, 256), (64, 64, 128)), ((64, 128, 128), (64, 128, 64))]:
        a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
        bt = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn)
        c = np.zeros((m, n), np.float32)
        fp8_gemm(a, bt, c, tile_shape=tile)
        exact = a.astype(np.float64) @ bt.astype(np.float64).T
        assert np.array_equal(c, exact.astype(np.float32))
        print(f"fp8_gemm {m}x{n}x{k} tiles {tile}: equal to the exactly rounded product")


if __name__ == "__main__":
    main()
