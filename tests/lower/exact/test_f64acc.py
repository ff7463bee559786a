"""Exact ``mma`` chains held in one f64 per element (tessera.lower.exact.f64acc): fp8_e4m3
products whose count per element stays within the bound under which f64 sums them
exactly take ``fma.rn.f64`` instead of the long accumulators, and give the exact sum
rounded once; longer contractions, and formats whose products span more than f64
holds (e5m2, bf16, f32), keep the long accumulators."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts

TARGETS = ("sm_80", "sm_90a")


@ts.kernel
def e4m3_gemm(A: ts.Tensor["M", "K", ts.fp8_e4m3], B: ts.Tensor["K", "N", ts.fp8_e4m3],
              C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """C = A @ B of e4m3 tiles, exact over the K loop, rounded once at the f32 store."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.fp8_e4m3)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.fp8_e4m3)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc, exact=True)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    return C


def matmul(x, w):  # type: ignore[no-untyped-def]
    return x @ w


def _ones(shape: tuple[int, ...], fmt: object) -> np.ndarray:
    return ts.Tensor(np.ones(shape), fmt).array


@pytest.mark.parametrize(("k", "fmt", "f64"), [
    (300, ts.fp8_e4m3, True), (171_000, ts.fp8_e4m3, True),
    # 171,196 is the bound, but the K loop's last block of 128 counts whole
    (171_196, ts.fp8_e4m3, False), (171_197, ts.fp8_e4m3, False),
    (300, ts.fp8_e5m2, False), (300, ts.bf16, False)])
def test_which_chains_one_f64_holds(k: int, fmt: object, f64: bool) -> None:
    x, w = _ones((1, k), fmt), _ones((k, 1), fmt)
    ptx = str(ts.jit(matmul).lower(x, w).ptx("sm_80"))
    assert ("fma.rn.f64" in ptx) == f64
    assert ("ld.shared.u64" in ptx) == (not f64)  # the long accumulators' words


@pytest.mark.parametrize("target", TARGETS)
def test_a_sum_spanning_more_than_f32_holds_is_exact(target: str) -> None:
    # 448 * 448 + 2^-6 * 2^-3 - 448 * 448 = 2^-9, the smallest e4m3 subnormal: f32
    # accumulation (tensor cores) would lose it under 448^2 and give 0
    x = ts.Tensor(np.array([[448.0, 2.0**-6, -448.0]] * 3), ts.fp8_e4m3).array
    w = ts.Tensor(np.array([[448.0, 1.0], [2.0**-3, 1.0], [448.0, 1.0]]), ts.fp8_e4m3).array
    lowered = ts.jit(matmul).lower(x, w)
    assert "fma.rn.f64" in str(lowered.ptx(target))
    out = np.asarray(lowered.run(x, w, backend="target", target=target).array,
                     np.float64)
    assert (out[:, 0] == 2.0**-9).all() and (out[:, 1] == 2.0**-6).all()
    assert np.asarray(lowered.run(x, w).array).tobytes() == np.asarray(
        lowered.run(x, w, backend="target", target=target).array).tobytes()


@pytest.mark.parametrize("target", TARGETS)
def test_a_hand_written_exact_e4m3_gemm_gives_the_tile_bits(target: str) -> None:
    # products 448^2 apart from 2^-18, and NaNs of both signs: the f64 sum rounds to
    # f32 as the long accumulators do, and a NaN is the default NaN
    from tessera.frontend.kernel.backends.compile import compile_kernel

    rng = np.random.default_rng(3)
    x = rng.standard_normal((32, 64)) * 2.0 ** rng.integers(-9, 9, (32, 64))
    w = rng.standard_normal((64, 16)) * 2.0 ** rng.integers(-9, 9, (64, 16))
    x[0, 0], x[1, 5], w[7, 3] = np.nan, -np.nan, -np.nan
    a, b = ts.Tensor(x, ts.fp8_e4m3).array, ts.Tensor(w, ts.fp8_e4m3).array
    c = np.zeros((32, 16), np.float32)
    launch = {"tile_shape": (32, 16, 32)}
    assert "fma.rn.f64" in compile_kernel(e4m3_gemm, a, b, c, target=target, **launch).ptx
    ts.check_against_reference(e4m3_gemm, a, b, c, backend="target", target=target,
                               bitwise=True, **launch)
