"""The integer ``mma`` (tessera.lower.exact.intmma): int8 tiles into an int32
accumulator, summed per thread in 64-bit registers and saturated once, give the tile
interpreter's bits on both targets (and its definition, the int64 sum saturated to
int32), with no tensor cores and no spills."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.lower.exact.intmma import SHORT_K
from tests.lower.test_lowering import same_bits

rng = np.random.default_rng(8)


@ts.kernel
def mm_int8(A: ts.Tensor["M", "K", ts.int8], B: ts.Tensor["K", "N", ts.int8],
            C: ts.Tensor["M", "N", ts.int32]):
    """One mma of int8 tiles."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.int8)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.int8)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(smem_a, smem_b)


@ts.kernel
def mm_int8_onto(A: ts.Tensor["M", "K", ts.int8], B: ts.Tensor["K", "N", ts.int8],
                 C0: ts.Tensor["M", "N", ts.int32], C: ts.Tensor["M", "N", ts.int32]):
    """An mma of int8 tiles onto an int32 accumulator loaded from C0."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.int8)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.int8)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    acc = C0[tile_m:tile_m + BM, tile_n:tile_n + BN]
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(smem_a, smem_b, acc)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_integer_mma_sums_per_thread_and_saturates_as_the_tile_level(target: str) -> None:
    # int8 extremes; sums onto accumulators at the int32 limits saturate once
    a = rng.choice(np.array([-128, 127, -1, 0, 1, 5], np.int8), (64, 32))
    b = rng.choice(np.array([-128, 127, -3, 0, 2], np.int8), (32, 64))
    same_bits(mm_int8, a, b, np.zeros((64, 64), np.int32), target=target,
              tile_shape=(64, 64, 32))
    c0 = rng.choice(np.array([2**31 - 1, -2**31, 2**31 - 2**18, 0, -5], np.int32), (64, 64))
    same_bits(mm_int8_onto, a, b, c0, np.zeros((64, 64), np.int32), target=target,
              tile_shape=(64, 64, 32))
    # the tile level's definition: the int64 sum, saturated once
    wide = c0 + a.astype(np.int64) @ b.astype(np.int64)
    assert (np.abs(wide) > 2**31).any()  # the saturation is exercised
    out = np.zeros((64, 64), np.int32)
    mm_int8_onto(a, b, c0, out, tile_shape=(64, 64, 32))
    assert np.array_equal(out, np.clip(wide, -2**31, 2**31 - 1))
    ptx = compile_kernel(mm_int8_onto, a, b, c0, out, target=target,
                         tile_shape=(64, 64, 32)).ptx
    assert "mma.sync" not in ptx and "wgmma" not in ptx


def test_a_contraction_of_2_15_products_sums_in_s64() -> None:
    # K = SHORT_K: the products are summed in s64 (no s32 bound is proved), then the
    # accumulator at the top of the range is added and the sum saturated
    k = SHORT_K
    a = np.full((1, k), -128, np.int8)
    a[0, ::3] = 127
    b = np.full((k, 1), -128, np.int8)
    c0 = np.array([[2**31 - 100]], np.int32)
    same_bits(mm_int8_onto, a, b, c0, np.zeros((1, 1), np.int32), target="sm_80",
              tile_shape=(1, 1, k))
    out = np.zeros((1, 1), np.int32)
    mm_int8_onto(a, b, c0, out, tile_shape=(1, 1, k))
    assert out[0, 0] == 2**31 - 1 == np.clip(c0 + a.astype(np.int64) @ b, None, 2**31 - 1)
