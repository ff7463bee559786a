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
    same_bits(fa, q, k, v, is_causal=True, target=target,
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


@pytest.mark.parametrize("target", ["sm_80", *NEW])
def test_fp8_mma_is_refused_clearly(target: str) -> None:
    fp8 = example("fp8_gemm").fp8_gemm
    a = np.zeros((64, 64), ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedError, match=f"fp8 \\(e4m3\\) mma is not lowered for "
                                               f"{target}") as info:
        compile_kernel(fp8, a, a, np.zeros((64, 64), np.float32), target=target,
                       tile_shape=(64, 64, 64))
    assert "fp8_gemm.py" in str(info.value.loc)


def test_aot_bundle_for_every_target(tmp_path: Path) -> None:
    gemm = example("gemm").gemm
    a, b = np.zeros((128, 64), BF16), np.zeros((64, 128), BF16)
    targets = ("sm_80", "sm_86", "sm_89", "sm_90a")
    ts.aot.save(gemm, tmp_path, a, b, np.zeros((128, 128), np.float32), targets=targets,
                tile_shape=(64, 64, 64))
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
