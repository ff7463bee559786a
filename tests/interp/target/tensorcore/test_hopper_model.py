"""``tensor_cores="hopper"``: the Target IR interpreter predicts an H100/H200's bits.

The reference is the measured rule of :mod:`tessera.arch.mma_hopper` applied step by
step (K / 16 steps in ascending k, the f32 accumulator between them), and the H200's
own outputs for these very kernels and seeds, as a cross-check run reported them: the
first element's bits and how many elements differ from the exact convention.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.arch import mma_hopper
from tessera.errors import ArgumentError
from tessera.interp.target import run_target
from tests.frontend.ptx.corpus import NVCC_PTX
from tests.interp.target.tensorcore.test_mma import _bf16, _exact, _gemm_kernel
from tests.interp.target.tensorcore.test_wgmma import N, _tmaps, _wgmma_kernel


def _stepwise(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = np.zeros((a.shape[0], b.shape[1]))
    for s in range(0, a.shape[1], 16):
        acc = mma_hopper.mma(a[:, s:s + 16], b[s:s + 16], acc, "bf16")
    return acc.astype(np.float32)


def test_mma_sync_gemm_gives_the_h200_bits() -> None:
    """cp.async + ldmatrix + mma.sync, 128^3 on 16 CTAs: the H200 returned 0x41572b73 at
    (0, 0) and differed from the exact convention in 11992 of 16384 elements."""
    rng = np.random.default_rng(9)
    a, b = _bf16(rng, (128, 128)), _bf16(rng, (128, 128))
    c = np.zeros((128, 128), np.float32)
    run_target(_gemm_kernel(128, 128, 128).build(), [a, np.ascontiguousarray(b.T), c],
               tensor_cores="hopper")
    np.testing.assert_array_equal(c, _stepwise(a, b))
    assert hex(c.view(np.uint32)[0, 0]) == "0x41572b73"
    assert int((c != _exact(a, b)).sum()) == 11992


@pytest.mark.parametrize(("nctas", "kdim", "at", "bits", "differ"), [
    (1, 64, (0, 1), "0x40aafc47", 1876), (2, 192, (0, 0), "0x413a86c5", 7002)])
def test_wgmma_over_tma_gives_the_h200_bits(nctas: int, kdim: int, at: tuple[int, int],
                                            bits: str, differ: int) -> None:
    rng = np.random.default_rng(3)
    a, bt = _bf16(rng, (64 * nctas, kdim)), _bf16(rng, (N, kdim))
    c = np.zeros((64 * nctas, N), np.float32)
    run_target(_wgmma_kernel(nctas=nctas, kdim=kdim).build(), [*_tmaps(a, bt), c],
               tensor_cores="hopper")
    np.testing.assert_array_equal(c, _stepwise(a, np.ascontiguousarray(bt.T)))
    assert hex(c.view(np.uint32)[at]) == bits
    assert int((c != _exact(a, bt.T)).sum()) == differ


def test_third_party_ptx_takes_the_model_too() -> None:
    """nvcc's mma.sync kernel with large cancelling terms: exact sums keep the small
    ones, the hardware model drops what falls below 2**-25 of the largest."""
    a = np.full((16, 16), 2.0 ** -12)
    a[:, 0], a[:, 1] = 2.0 ** 14, -(2.0 ** 14)
    a = a.astype(ml_dtypes.bfloat16)
    b = np.ones((16, 8), ml_dtypes.bfloat16)
    kernel = ts.ptx.load(NVCC_PTX).kernel("mma_tile")
    outs = {}
    for model in ("exact", "hopper"):
        c = np.zeros((16, 8), np.float32)
        kernel.run(grid=1, block=32, args=[a.view(np.uint16), b.view(np.uint16), c],
                   tensor_cores=model)
        outs[model] = c
    np.testing.assert_array_equal(outs["exact"], 14 * 2.0 ** -12)
    np.testing.assert_array_equal(outs["hopper"], _stepwise(a, b))
    np.testing.assert_array_equal(outs["hopper"], 0.0)  # 2**-12 is below the quantum 2**(14 - 25)


def test_unknown_model_is_an_argument_error() -> None:
    rng = np.random.default_rng(9)
    a, b = _bf16(rng, (128, 128)), _bf16(rng, (128, 128))
    with pytest.raises(ArgumentError, match="tensor-core model 'ampere'"):
        run_target(_gemm_kernel(128, 128, 128).build(),
                   [a, b, np.zeros((128, 128), np.float32)], tensor_cores="ampere")


def test_e4m3_wgmma_gemm_gives_the_h200_bits() -> None:
    """The e4m3 GEMM of the sm_90a lowering tests (k32 steps over TMA, B N x K): the H200
    returned 0xc004e800 at (0, 0) and differed from the exact sums in 16289 of 16384."""
    from tests.lower.sm90a.test_gemm import build_gemm, gemm_args

    args, exact = gemm_args("e4m3_b_n_by_k")
    run_target(build_gemm("e4m3_b_n_by_k"), args, tensor_cores="hopper")
    c = args[2]
    assert hex(c.view(np.uint32)[0, 0]) == "0xc004e800"
    assert int((c != exact).sum()) == 16289


def test_accumulators_are_plain_f32_registers_under_the_model() -> None:
    """``C = f16(A @ B + R)``: on the hardware the accumulator is an f32 register, so the
    ``add.f32`` of R rounds before the conversion to f16. Rounding ``acc + R`` once
    instead (as a wide accumulator would) differs in 6 of 65536 elements; the H200
    returned the double-rounded 0x4994 at the first of them, (50, 133)."""
    from tessera.frontend.kernel.backends.compile import run_compiled
    from tests.lower.sm90a.test_epilogue import KERNELS, arguments, compile_

    args = arguments("gemm_residual_f16", 256, 256, 128)
    a, b, r = (x.copy() for x in args[:3])
    compiled = compile_("gemm_residual_f16", 256, 256, 128, (128, 128, 64))
    run_compiled(compiled, KERNELS["gemm_residual_f16"], *args, tile_shape=(128, 128, 64),
                 tensor_cores="hopper")
    got = args[-1]
    acc = _stepwise(a, b)  # f32 values
    hardware = (acc + r).astype(np.float16)  # add.f32 rounds, then cvt.rn.f16.f32
    once = (acc.astype(np.float64) + r).astype(np.float16)  # one rounding, to f16
    np.testing.assert_array_equal(got.view(np.uint16), hardware.view(np.uint16))
    differ = np.argwhere(hardware.view(np.uint16) != once.view(np.uint16))
    assert len(differ) == 6 and tuple(differ[0]) == (50, 133)
    assert hex(got.view(np.uint16)[50, 133]) == "0x4994"
