"""Random tile shapes, grids and group sizes: GEMM, row softmax and a block reduction
agree with NumPy (tolerances derived from the formats, never guessed)."""

from __future__ import annotations

import math
import runpy
from pathlib import Path

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts

# The block reduction under test is the one shipped in tessera/conformance/kernels.
_EXAMPLE = (Path(__file__).resolve().parents[2] / "tessera" / "conformance" / "kernels"
            / "cooperative_reduction.py")
block_sum = runpy.run_path(str(_EXAMPLE))["block_reduction"]

U32 = 2.0 ** -24
SETTINGS = settings(max_examples=40, deadline=None)


@ts.kernel
def gemm(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
         C: ts.Tensor["M", "N", ts.f32]):
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.cp_wait_group(0)
        acc = ts.tile.mma(smem_a, smem_b, acc)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def row_softmax(x: ts.Tensor["R", "C", ts.f32], y: ts.Tensor["R", "C", ts.f32]):
    t = x[tile_m:tile_m + BM]
    e = ts.tile.exp(t - ts.tile.row_max(t))
    y[tile_m:tile_m + BM] = e / ts.tile.row_sum(e)


@SETTINGS
@given(bm=st.sampled_from([8, 16, 32]), bn=st.sampled_from([8, 16, 32]),
       bk=st.sampled_from([4, 8, 16]), gm=st.integers(1, 3), gn=st.integers(1, 3),
       gk=st.integers(1, 4), seed=st.integers(0, 2**16), explicit=st.booleans())
def test_gemm_any_tiling_is_the_exact_product_rounded_once(bm, bn, bk, gm, gn, gk, seed,
                                                            explicit) -> None:
    rng = np.random.default_rng(seed)
    m, n, k = gm * bm, gn * bn, gk * bk
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    launch = dict(grid=(gm, gn)) if explicit else {}
    gemm(a, b, c, tile_shape=(bm, bn, bk), **launch)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    # bf16 products are exact in float64 and these sums are too: one rounding to f32
    assert np.array_equal(c, exact.astype(np.float32))
    # the policy's f32-accumulation bound holds as well
    gamma = k * U32 / (1 - k * U32)
    assert np.all(np.abs(c - exact) <= (gamma + U32) * (np.abs(a.astype(np.float64)) @
                                                       np.abs(b.astype(np.float64))))


@SETTINGS
@given(bm=st.sampled_from([1, 2, 4, 8]), rows=st.integers(1, 4), cols=st.integers(1, 40),
       seed=st.integers(0, 2**16), scale=st.sampled_from([1.0, 30.0]))
def test_row_softmax_matches_numpy(bm, rows, cols, seed, scale) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((bm * rows, cols)) * scale).astype(np.float32)
    y = np.zeros_like(x)
    row_softmax(x, y, tile_shape=(bm,))
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    # f32 subtract, exp (f64, rounded once), f64 sum rounded once, f32 divide:
    # a few f32 roundings of relative size u each, amplified by |x| in the exponent
    tol = (6 + 2 * np.abs(x64).max()) * U32 * ref + 1e-30
    assert np.all(np.abs(y - ref) <= tol)
    assert np.allclose(y.sum(1), 1.0, atol=cols * 4 * U32)


@SETTINGS
@given(n=st.integers(1, 700), grid=st.integers(1, 6), log_gs=st.integers(0, 5),
       seed=st.integers(0, 2**16))
def test_block_reduction_matches_numpy(n, grid, log_gs, seed) -> None:
    rng = np.random.default_rng(seed)
    data = rng.standard_normal(n).astype(np.float32)
    total = np.zeros(1, np.float32)
    block_sum(data, total, grid=grid, group_size=2 ** log_gs)
    exact = math.fsum(data.astype(np.float64).tolist())
    # every partial sum is an f32 addition: at most n roundings of the running sums
    bound = n * U32 * float(np.abs(data.astype(np.float64)).sum()) * 1.01 + 1e-30
    assert abs(float(total[0]) - exact) <= bound
