"""The Ampere and Ada targets sm_86 and sm_89 take the sm_80 lowering (cp.async,
ldmatrix, mma.sync): every entry point accepts them, their PTX names its own
``.target`` at the PTX ISA version that introduced it (sm_86: 7.1, sm_89: 7.8), ptxas
assembles it for that architecture, and the Target IR interpreter gives the tile
interpreter's bits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.lower.shared import check_shared_limit
from tests.lower.test_lowering import ROOT, example, same_bits
from tests.lower.test_shared_memory import reverse

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(86)
NEW = ("sm_86", "sm_89")
VERSION = {"sm_86": "7.1", "sm_89": "7.8"}


@pytest.mark.parametrize("target", NEW)
def test_gemm_and_flash_attention(target: str) -> None:
    gemm = example("gemm").gemm
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    same_bits(gemm, a, b, np.zeros((128, 128), np.float32), target=target,
              tile_shape=(64, 64, 64))
    compiled = compile_kernel(gemm, a, b, np.zeros((128, 128), np.float32), target=target,
                              tile_shape=(64, 64, 64))
    assert f".target {target}" in compiled.ptx and "mma.sync.aligned.m16n8k16" in compiled.ptx
    version = tuple(int(p) for p in compiled.ptx.split()[1].split("."))
    assert version >= tuple(int(p) for p in VERSION[target].split("."))
    fa = example("flash_attention").flash_attention
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(BF16) for _ in range(3))
    # ptxas 13.5 caps this 128-thread kernel at 128 registers on sm_86 and sm_89 (four
    # CTAs in their 64K registers) and spills 16 bytes there; sm_80's heuristic takes 106
    same_bits(fa, q, k, v, is_causal=True, target=target, spills=True,
              config=dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2))


@pytest.mark.parametrize("target", NEW)
def test_scalar_kernels(target: str) -> None:
    saxpy = example("saxpy").saxpy
    x, y = rng.standard_normal(300).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    same_bits(saxpy, x, y, 2.5, target=target)


@pytest.mark.parametrize("target", NEW)
def test_the_99_kib_limit(target: str) -> None:
    ok = np.zeros(24000, np.float32)  # 96,016 bytes: dynamic, under 101,376
    compiled = compile_kernel(reverse, ok, np.zeros_like(ok), target=target, grid=1,
                              group_size=128)
    assert compiled.shared_bytes == 96016 and ".extern .shared" in compiled.ptx
    compiled.assemble()
    check_shared_limit(compiled.kernel, "sm_80")
    big = np.zeros(30000, np.float32)  # 120,016 bytes: fits sm_80's 163 KiB, not 99 KiB
    compile_kernel(reverse, big, np.zeros_like(big), target="sm_80", grid=1, group_size=128)
    with pytest.raises(ts.arch.errors.SharedMemoryLimitError, match=r"101,376 bytes \(99 KiB\)"):
        compile_kernel(reverse, big, np.zeros_like(big), target=target, grid=1,
                       group_size=128)


@pytest.mark.parametrize("target", ["sm_80", "sm_86"])
def test_fp8_mma_is_refused_clearly_before_sm89(target: str) -> None:
    fp8 = example("fp8_gemm").fp8_gemm
    a = np.zeros((64, 64), ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedError, match=f"fp8 \\(e4m3\\) mma is not lowered for "
                                               f"{target}") as info:
        compile_kernel(fp8, a, a, np.zeros((64, 64), np.float32), target=target,
                       tile_shape=(64, 64, 64))
    assert "fp8_gemm.py" in str(info.value.loc)


@ts.kernel
def fp8_gemm_swizzled(A: ts.Tensor["M", "K", ts.fp8_e5m2], Bt: ts.Tensor["N", "K", ts.fp8_e5m2],
                      C: ts.Tensor["M", "N", ts.f32]):
    """C = A @ Bt.T with e5m2 operands in xor-swizzled buffers."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.fp8_e5m2, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BN, BK), ts.fp8_e5m2, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, Bt[tile_n:tile_n + BN, k:k + BK])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b.T, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@pytest.mark.parametrize(("shape", "tile"), [((128, 128, 256), (64, 64, 128)),
                                             ((64, 128, 128), (64, 128, 64)),
                                             ((64, 48, 96), (64, 24, 32))])
def test_fp8_mma_sync_on_sm89(shape: tuple[int, int, int], tile: tuple[int, int, int]) -> None:
    """mma.sync.m16n8k32 with e4m3 (and e5m2) operands (PTX ISA 8.4, sm_89): the lowered
    kernel equals the tile interpreter and the exact product rounded once."""
    m, n, k = shape
    for kernel, dt in ((example("fp8_gemm").fp8_gemm, ml_dtypes.float8_e4m3fn),
                       (fp8_gemm_swizzled, ml_dtypes.float8_e5m2)):
        a = rng.standard_normal((m, k)).astype(dt)
        bt = rng.standard_normal((n, k)).astype(dt)
        same_bits(kernel, a, bt, np.zeros((m, n), np.float32), target="sm_89",
                  tile_shape=tile)
        c = np.zeros((m, n), np.float32)
        ts.launch(kernel, None, (a, bt, c), backend="target", target="sm_89",
                  tile_shape=tile)
        exact = a.astype(np.float64) @ bt.astype(np.float64).T
        assert np.array_equal(c, exact.astype(np.float32))
        ptx = compile_kernel(kernel, a, bt, c, target="sm_89", tile_shape=tile).ptx
        assert "mma.sync.aligned.m16n8k32.row.col.f32" in ptx and ".version 8.4" in ptx


def test_fp8_b_must_be_k_contiguous_on_sm89() -> None:
    @ts.kernel
    def fp8_row_major_b(A: ts.Tensor["M", "K", ts.fp8_e4m3], B: ts.Tensor["K", "N", ts.fp8_e4m3],
                        C: ts.Tensor["M", "N", ts.f32]):
        smem_a = ts.tile.alloc_shared((BM, BK), ts.fp8_e4m3)
        smem_b = ts.tile.alloc_shared((BK, BN), ts.fp8_e4m3)
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
        ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(smem_a, smem_b)

    a = np.zeros((64, 32), ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedError, match="row-major e4m3 B operand") as info:
        compile_kernel(fp8_row_major_b, a, np.zeros((32, 64), ml_dtypes.float8_e4m3fn),
                       np.zeros((64, 64), np.float32), target="sm_89", tile_shape=(64, 64, 32))
    assert info.value.loc.file == __file__


def test_aot_bundle_for_every_target(tmp_path: Path) -> None:
    gemm = example("gemm").gemm
    a, b = np.zeros((128, 64), BF16), np.zeros((64, 128), BF16)
    targets = ("sm_80", "sm_86", "sm_89", "sm_90a")
    # the targets of a bundle share one dynamic shared-memory size: two stages keep the
    # pipelined GEMM of every target in static shared memory
    ts.aot.save(gemm, tmp_path, a, b, np.zeros((128, 128), np.float32), targets=targets,
                tile_shape=(64, 64, 64), config={"num_stages": 2})
    bundle = ts.aot.load(tmp_path)
    assert sorted(bundle.targets) == sorted(targets)
    assert bundle.select(cc=(8, 6)).target == "sm_86"
    assert bundle.select(cc=(8, 9)).target == "sm_89"
    assert bundle.select(cc=(8, 7)).target == "sm_86"  # the PTX of the newest below
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert all(manifest["targets"][t]["files"]["cubin"] for t in targets)


@pytest.mark.parametrize("target", NEW)
def test_cli_ptx_target(target: str, tmp_path: Path) -> None:
    out = tmp_path / "gemm.ptx"
    proc = subprocess.run(
        [sys.executable, "-m", "tessera", "ptx", "examples/kernels/gemm.py:gemm", "--target",
         target, "--arg", "A=128x64:bf16", "--arg", "B=64x128:bf16", "--arg",
         "C=128x128:f32", "--tile-shape", "64,64,64", "-o", str(out), "--stats"],
        cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f".target {target}" in out.read_text() and f"gemm {target}:" in proc.stdout + proc.stderr


@ts.kernel
def mm_f32(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
           C: ts.Tensor["M", "N", ts.f32]):
    """One mma of f32 tiles (exact f32 products at the tile level)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(smem_a, smem_b)


@ts.kernel
def mm_tf32(A: ts.Tensor["M", "K", ts.tf32], B: ts.Tensor["K", "N", ts.tf32],
            C: ts.Tensor["M", "N", ts.f32]):
    """One mma of tf32 tiles, whose f32 storage nothing rounds to tf32."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.tf32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.tf32)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(smem_a, smem_b)


@pytest.mark.parametrize(("kernel", "dtype", "out", "why"), [
    (mm_f32, np.float32, np.float32, r"tf32 tensor cores .* would give other bits"),
    (mm_tf32, np.float32, np.float32, r"not rounded to tf32 .* read only a tf32 value's 19"),
])
@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_mma_formats_without_a_lowering_are_refused_with_the_reason(
        kernel: object, dtype: type, out: type, why: str, target: str) -> None:
    with pytest.raises(UnsupportedError, match=why) as info:
        compile_kernel(kernel, np.zeros((64, 32), dtype), np.zeros((32, 64), dtype),
                       np.zeros((64, 64), out), target=target, tile_shape=(64, 64, 32))
    assert info.value.loc.file == __file__
