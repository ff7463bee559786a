"""Tensor-core GEMM (overview-and-quickstart.md, Example 2), corrected.

The seed has no K loop: each group multiplies one ``BK`` slice (``tile_k``) and adds
it into ``C`` with ``+=``. Under the default grid, which gives ``tile_k`` its own grid
axis, that is a split-K GEMM whose slices are reduced into ``C`` in a fixed order; with
a 2-D grid ``tile_k`` is 0 and a launch computes only the first slice. The corrected
kernel loops over K inside each group, so each output tile is written once.

Precision: bf16 inputs are exact in float64 and so are their products; the K sum of
the golden ``mma`` accumulation is float64 and the result is rounded once to f32, so
the result is the exact product rounded to f32 whenever the float64 sum is exact (it
is for these inputs), and within the f32 rounding ``2**-24 * sum|a||b|`` of it. A
policy-faithful GPU kernel accumulates in f32: its error is bounded by
``gamma_K * sum|a||b|`` with ``gamma_K = K * 2**-24 / (1 - K * 2**-24)`` (Higham,
Accuracy and Stability of Numerical Algorithms, sec. 3.1), the tolerance tests use.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import tessera as ts


@ts.kernel
def gemm(A: ts.Tensor["M", "K", ts.bf16 @ ts.accum(ts.f32)],
         B: ts.Tensor["K", "N", ts.bf16 @ ts.accum(ts.f32)],
         C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = A @ B, one group per (BM, BN) tile of C, looping over K in BK steps."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C


def tolerance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The f32-accumulation error bound of the policy, elementwise."""
    k = a.shape[1]
    u = 2.0 ** -24
    gamma = k * u / (1 - k * u)
    return (gamma + u) * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


def main() -> None:
    rng = np.random.default_rng(1)
    for (m, n, k), tile in [((128, 192, 96), (64, 64, 32)), ((256, 128, 256), (128, 64, 64)),
                            ((64, 64, 64), (32, 32, 16))]:
        a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
        c = np.zeros((m, n), np.float32)
        gemm(a, b, c, tile_shape=tile)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        assert np.all(np.abs(c - exact) <= tolerance(a, b))
        assert np.array_equal(c, exact.astype(np.float32))  # exact sums, rounded once
        print(f"gemm {m}x{n}x{k} tiles {tile}: equal to the exactly rounded product")


if __name__ == "__main__":
    main()
