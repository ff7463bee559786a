"""Integer tensor-core GEMMs (tessera.lower.sm80.intmma): hand-written tile kernels of
int8 operands and an int32 accumulator lower to ``mma.sync`` m16n8k32
``.s32.s8.s8.s32`` (sm_80) and ``wgmma`` ``.s32.s8.s8`` (sm_90a) when their sums
provably stay inside s32, give the tile interpreter's bits (its int64 sum saturated
once, which those sums never reach) under the Target IR interpreter, and assemble with
no advisory or spill; kernels whose sums might leave s32, or whose operands are not
in the tensor cores' layouts, keep the per-thread sums."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tessera as ts
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.ir import parse_function, print_function
from tessera.lower.sm80.intmma import LIMIT
from tests.lower.test_lowering import same_bits

rng = np.random.default_rng(77)
INSTR = {"sm_80": "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
         "sm_90a": "wgmma.mma_async.sync.aligned.m64n{n}k32.s32.s8.s8 {{"}


@ts.kernel
def gemm_s8(A: ts.Tensor["M", "K", ts.int8], B: ts.Tensor["N", "K", ts.int8],
            C: ts.Tensor["M", "N", ts.int32]):
    """C = A @ B^T over a K loop, B given N x K (K contiguous, as 8-bit fragments are)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.int8)
    smem_b = ts.tile.alloc_shared((BN, BK), ts.int8)
    acc = ts.tile.zeros((BM, BN), ts.int32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[tile_n:tile_n + BN, k:k + BK])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b.T, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def gemm_s8_onto(A: ts.Tensor["M", "K", ts.int8], B: ts.Tensor["N", "K", ts.int8],
                 C0: ts.Tensor["M", "N", ts.int32], C: ts.Tensor["M", "N", ts.int32]):
    """One mma onto an accumulator loaded from memory: its sums are not bounded."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.int8)
    smem_b = ts.tile.alloc_shared((BN, BK), ts.int8)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(smem_b, B[tile_n:tile_n + BN, 0:BK])
    ts.tile.barrier()
    acc = C0[tile_m:tile_m + BM, tile_n:tile_n + BN]
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(smem_a, smem_b.T, acc)


def _ints(dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize(("shape", "tile"), [
    ((128, 128, 256), (64, 64, 64)),
    ((128, 256, 128), (128, 128, 32)),
    ((192, 64, 96), (64, 32, 32)),
])
def test_int8_gemm_on_tensor_cores_gives_the_tile_bits(
        target: str, shape: tuple[int, int, int], tile: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, bt = _ints(np.int8, (m, k)), _ints(np.int8, (n, k))
    c = np.zeros((m, n), np.int32)
    same_bits(gemm_s8, a, bt, c, target=target, tile_shape=tile)
    gemm_s8(a, bt, c, tile_shape=tile)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ bt.T.astype(np.int64))
    compiled = compile_kernel(gemm_s8, a, bt, c, target=target, tile_shape=tile)
    assert INSTR[target].format(n=tile[1]) in compiled.ptx
    # the Target IR's text form reads back as the same kernel
    text = print_function(compiled.kernel)
    assert print_function(parse_function(text)) == text


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_extreme_products_sum_exactly(target: str) -> None:
    # every product 2^14 (or -2^14 on odd columns) over K = 2048: sums of +-2^25
    k = 2048
    a = np.full((64, k), -128, np.int8)
    bt = np.full((64, k), -128, np.int8)
    bt[1::2] = 127
    c = np.zeros((64, 64), np.int32)
    same_bits(gemm_s8, a, bt, c, target=target, tile_shape=(64, 64, 64))
    gemm_s8(a, bt, c, tile_shape=(64, 64, 64))
    np.testing.assert_array_equal(c, a.astype(np.int64) @ bt.T.astype(np.int64))


def _on_tensor_cores(kernel: object, *args: np.ndarray, target: str, tile: tuple) -> bool:
    ptx = compile_kernel(kernel, *args, target=target, tile_shape=tile).ptx
    return "mma.sync" in ptx or "wgmma.mma_async" in ptx


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_sums_that_might_leave_s32_keep_the_per_thread_path(target: str) -> None:
    # K * 128 * 128 reaches 2^31: a wrapped s32 sum could differ from the saturated one
    k = LIMIT // (128 * 128)
    a, bt = np.zeros((64, k), np.int8), np.zeros((64, k), np.int8)
    c = np.zeros((64, 64), np.int32)
    assert not _on_tensor_cores(gemm_s8, a, bt, c, target=target, tile=(64, 64, 512))
    assert _on_tensor_cores(gemm_s8, a[:, :k - 512], bt[:, :k - 512], c, target=target,
                            tile=(64, 64, 512))
    # an accumulator from memory may already be near the limits
    a, bt = _ints(np.int8, (64, 32)), _ints(np.int8, (64, 32))
    c0 = rng.choice(np.array([2**31 - 1, -2**31, 7], np.int32), (64, 64))
    assert not _on_tensor_cores(gemm_s8_onto, a, bt, c0, c, target=target, tile=(64, 64, 32))
    same_bits(gemm_s8_onto, a, bt, c0, c, target=target, tile_shape=(64, 64, 32))
    # an M that is no multiple of 64 has no tensor-core tiling
    a, bt = _ints(np.int8, (32, 64)), _ints(np.int8, (64, 64))
    assert not _on_tensor_cores(gemm_s8, a, bt, np.zeros((32, 64), np.int32), target=target,
                                tile=(32, 64, 32))


def test_rendered_ptx_reads_back_and_runs() -> None:
    # the sm_80 kernel's PTX text, read by the PTX reader and run: NumPy's product
    a, bt = _ints(np.int8, (128, 64)), _ints(np.int8, (64, 64))
    c = np.zeros((128, 64), np.int32)
    compiled = compile_kernel(gemm_s8, a, bt, c, target="sm_80", tile_shape=(64, 64, 32))
    kernel = ts.ptx.load(compiled.ptx).kernel("gemm_s8")
    kernel.run(grid=compiled.grid, block=compiled.block, args=[a, bt, c])
    np.testing.assert_array_equal(c, a.astype(np.int64) @ bt.T.astype(np.int64))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_the_estimate_counts_integer_products_as_s8(target: str) -> None:
    from tessera.backend.ptx.estimate.census import Census
    from tessera.backend.ptx.estimate.ptx_text import count, ptx_census

    a, bt = _ints(np.int8, (128, 128)), _ints(np.int8, (128, 128))
    c = np.zeros((128, 128), np.int32)
    ptx = compile_kernel(gemm_s8, a, bt, c, target=target, tile_shape=(64, 64, 64)).ptx
    loop = ptx_census(ptx).iteration
    assert loop is not None and set(loop.tensor_flops) == {"s8"}
    census = Census()  # .satfinite does not hide the input format
    count(["mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.u8.s32 {%r0, %r1, %r2, "
           "%r3}, {%r4, %r5, %r6, %r7}, {%r8, %r9}, {%r0, %r1, %r2, %r3};"], 1, census)
    assert dict(census.tensor_flops) == {"s8": 2 * 16 * 8 * 32}


def test_mixed_integer_wgmma_renders_for_ptx_8_4_and_assembles() -> None:
    # the sm_90a kernel with B read as u8: ptxas takes mixed integer wgmma from PTX 8.4 on
    from tessera.backend.ptx.driver.assemble import ToolchainMissing, assemble
    from tessera.backend.ptx.render.kernel import render
    from tessera.ir.core import walk
    from tessera.ir.dialects.target.async_ops import Wgmma

    a, bt = _ints(np.int8, (64, 64)), _ints(np.int8, (64, 64))
    c = np.zeros((64, 64), np.int32)
    fn = compile_kernel(gemm_s8, a, bt, c, target="sm_90a", tile_shape=(64, 64, 64)).kernel
    mixed = 0
    for instr in walk(fn.body):
        if isinstance(instr.op, Wgmma):
            instr.op = dataclasses.replace(instr.op, btype="u8")
            mixed += 1
    ptx = render(fn)
    assert mixed and ".version 8.4" in ptx and ".s32.s8.u8 {" in ptx
    try:
        assemble(ptx, "sm_90a")
    except ToolchainMissing:
        pytest.skip("ptxas is not installed")
