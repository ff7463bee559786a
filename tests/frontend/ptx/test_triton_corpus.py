"""Triton's sm_90a matmul PTX (cp.async into swizzled shared memory, wgmma with
descriptors, a three-stage ring; made by tests/ir/text/ptx/ptx_corpus/make_triton_ptx.sh),
run on the CPU by ``ts.ptx`` against NumPy, and planted bugs in copies of it."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault
from tests.frontend.ptx.corpus import TRITON_PTX

SHARED = 24576  # Triton's metadata: shared bytes of this configuration
rng = np.random.default_rng(9)


def _run(path: Path, m: int, n: int, k: int,
         shared: int = SHARED) -> tuple[np.ndarray, np.ndarray]:
    """C = A @ B by the kernel in ``path``, and the float64 product."""
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((m, n), np.float32)
    kernel = ts.ptx.load(path).kernel("matmul_kernel")
    scratch = [np.zeros(1, np.uint8), np.zeros(1, np.uint8)]  # global and profile scratch
    kernel.run(grid=-(-m // 64) * -(-n // 64), block=128, shared_bytes=shared,
               args=[a, b, c, np.int32(m), np.int32(n), np.int32(k), np.int32(k), np.int32(n),
                     np.int32(n), *scratch])
    return c, a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("m, n, k", [(128, 128, 96), (64, 192, 32), (128, 64, 160)])
def test_matmul(m: int, n: int, k: int) -> None:
    c, want = _run(TRITON_PTX, m, n, k)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def _planted(tmp_path: Path, old: str, new: str) -> tuple[Path, list[str]]:
    text = TRITON_PTX.read_text()
    assert text.count(old) == 1
    path = tmp_path / "triton_bug.ptx"
    path.write_text(text.replace(old, new))
    return path, path.read_text().splitlines()


def test_too_few_waits_before_wgmma(tmp_path: Path) -> None:
    path, lines = _planted(tmp_path, "cp.async.wait_group \t2;", "cp.async.wait_group \t3;")
    with pytest.raises(TargetFault, match="async copy read before its wait") as err:
        _run(path, 128, 128, 128)
    assert err.value.loc.file == str(path)
    assert lines[err.value.loc.line - 1].strip().startswith("wgmma.mma_async")


def test_too_little_dynamic_shared_memory() -> None:
    with pytest.raises(TargetFault, match="out of bounds") as err:
        _run(TRITON_PTX, 128, 128, 128, shared=16384)  # less than Triton's metadata says
    assert "16384 bytes of shared memory" in str(err.value)
    line = TRITON_PTX.read_text().splitlines()[err.value.loc.line - 1]
    assert line.strip().startswith("cp.async.cg.shared.global")
