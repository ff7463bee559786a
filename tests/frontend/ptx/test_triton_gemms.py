"""Triton's matrix products for sm_90a (tests/ir/text/ptx/ptx_corpus/triton_gemms.py made
the PTX), run on the CPU by ``ts.ptx`` against NumPy in float64: TMA-fed and persistent
bf16 GEMMs, an fp8 GEMM, and a split-K GEMM whose slices meet in sm_90's vector
atomics; the tf32 one is refused where it feeds ``wgmma`` unrounded f32 bits. The
launches are those the comments in the PTX give (Triton's metadata)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault
from tests.frontend.ptx.corpus import CORPUS, descriptors, scratch, triton_launch

PTX = CORPUS / "triton_gemms_sm90a.ptx"
TEXT = PTX.read_text()
M, N, K = 256, 256, 256
rng = np.random.default_rng(71)


@pytest.fixture(scope="module")
def mod() -> ts.ptx.PtxProgram:
    return ts.ptx.load(PTX)


def _run(mod: ts.ptx.PtxProgram, name: str, grid: tuple[int, ...], args: list[object],
         text: str | None = None) -> None:
    threads, shared, _ = triton_launch(TEXT, name)
    program = ts.ptx.load(text) if text else mod
    program.kernel(name).run(grid=grid, block=threads, shared_bytes=shared,
                             args=[*args, np.int32(M), np.int32(N), np.int32(K), *scratch()])


@pytest.mark.parametrize("name, grid", [("matmul_tma", (2, 2)),
                                        ("matmul_persistent", (3,))])  # 3 CTAs, 4 tiles
def test_bf16_gemms_through_tensor_maps(mod: ts.ptx.PtxProgram, name: str,
                                        grid: tuple[int, ...]) -> None:
    """K / 16 ``wgmma`` steps rounded to f32 (each exact within, as the interpreter's
    tensor cores add), then one rounding to bf16: within a bf16 ulp of the float64
    product and K / 16 f32 roundings of the sum of |a||b| (where the product cancels)."""
    a, b = (rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16) for _ in range(2))
    c = np.zeros((M, N), ml_dtypes.bfloat16)
    _run(mod, name, grid, descriptors([a, b, c], triton_launch(TEXT, name)[2]))
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    ulp = np.abs(np.spacing(np.abs(want).astype(ml_dtypes.bfloat16)).astype(np.float64))
    bound = ulp + K // 16 * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64))
    assert (np.abs(c.astype(np.float64) - want) <= bound).all()


def test_fp8_gemm(mod: ts.ptx.PtxProgram) -> None:
    a, b = (rng.standard_normal((M, K)).astype(ml_dtypes.float8_e4m3fn) for _ in range(2))
    c = np.zeros((M, N), np.float32)
    _run(mod, "matmul_fp8", (4, 4), [a, b, c])
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-5, atol=1e-5)


def test_split_k_through_vector_atomics(mod: ts.ptx.PtxProgram) -> None:
    """Four K slices added into C by ``atom.global.add.v4.f32``: each element's four
    adds in the launch's arrival order (the same on every run), within four f32
    roundings of the float64 product."""
    a, b = (rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16) for _ in range(2))
    first, second = np.zeros((M, N), np.float32), np.zeros((M, N), np.float32)
    _run(mod, "matmul_splitk", (4, 4, 4), [a, b, first])
    _run(mod, "matmul_splitk", (4, 4, 4), [a, b, second])
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 4 * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert (np.abs(first - want) <= bound).all()
    np.testing.assert_array_equal(first.view(np.uint32), second.view(np.uint32))


def test_a_misaligned_vector_atomic(mod: ts.ptx.PtxProgram) -> None:
    start = TEXT.index(".visible .entry matmul_splitk")
    at = TEXT.index("atom.global.", start)
    old = TEXT[at:TEXT.index(";", at)]
    assert "+ 0 ]" in old
    text = TEXT.replace(old, old.replace("+ 0 ]", "+ 4 ]"), 1)
    a = np.zeros((M, K), ml_dtypes.bfloat16)
    with pytest.raises(TargetFault, match="misaligned") as err:
        _run(mod, "matmul_splitk", (4, 4, 4), [a, a, np.zeros((M, N), np.float32)], text)
    assert text.splitlines()[err.value.loc.line - 1].strip().startswith("@%p")


def test_tf32_operands_must_be_rounded(mod: ts.ptx.PtxProgram) -> None:
    """Triton hands ``wgmma ... tf32`` the f32 bits of its operands; which of the 13
    bits a tf32 value has not the tensor cores drop is unmeasured here, so the
    interpreter refuses such operands at the instruction rather than guess."""
    a, b = (rng.standard_normal((M, K)).astype(np.float32) for _ in range(2))
    with pytest.raises(TargetFault, match=r"round it with cvt\.rna\.tf32\.f32") as err:
        _run(mod, "matmul_tf32", (4, 4), [a, b, np.zeros((M, N), np.float32)])
    assert "wgmma.mma_async" in TEXT.splitlines()[err.value.loc.line - 1]
