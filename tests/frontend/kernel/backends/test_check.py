"""``ts.check_against_reference``: a planted difference is reported at its first
element, and the GPU tolerance follows the kernel's longest reduction."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.errors import ArgumentError, InterpretError
from tessera.frontend.kernel.backends.check import longest_reduction, tolerance
from tessera.frontend.kernel.backends.compile import compile_kernel
from tests.lower.test_lowering import example

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(5)


def test_check_against_reference_reports_the_first_difference() -> None:
    gemm = example("gemm").gemm
    a = rng.standard_normal((64, 64)).astype(BF16)
    b = rng.standard_normal((64, 64)).astype(BF16)
    c = np.zeros((64, 64), np.float32)
    ts.check_against_reference(gemm, a, b, c, backend="target", target="sm_80",
                               tile_shape=(64, 64, 32))
    compiled = compile_kernel(gemm, a, b, c, target="sm_80", tile_shape=(64, 64, 32))
    # the same kernel with its stores dropped writes nothing: caught, with the element
    from tessera.ir.core import walk
    from tessera.ir.dialects.target.ops import Store

    for instr in list(walk(compiled.kernel.body)):
        if isinstance(instr.op, Store):
            instr.parent.instrs.remove(instr)
    import tessera.frontend.kernel.backends.launch as api

    real = api.compile_kernel
    api.compile_kernel = lambda *args, **kw: compiled  # type: ignore[assignment]
    try:
        with pytest.raises(InterpretError, match=r"output 2 of 'gemm' differs .* at \(0, 0\)"):
            ts.check_against_reference(gemm, a, b, c, backend="target", target="sm_80",
                                       tile_shape=(64, 64, 32))
    finally:
        api.compile_kernel = real


def test_gpu_tolerance_follows_the_longest_reduction() -> None:
    gemm = example("gemm").gemm
    a, b = np.ones((128, 96), BF16), np.ones((96, 64), BF16)
    c = np.zeros((128, 64), np.float32)
    fn = gemm.compile(a, b, c, tile_shape=(64, 64, 32)).functions["gemm"]
    assert longest_reduction(fn) == 96  # K = 3 steps of 32
    ref = np.full((2, 2), 96.0, np.float32)
    tol = tolerance(gemm, ref, (a, b, c), {"tile_shape": (64, 64, 32)})
    u = 2.0 ** -24
    ulp = 2 * u  # one unit in the last place of the f32 output
    assert np.allclose(tol, ulp * 96 + 96 * u / (1 - 96 * u) * 97)


def test_gpu_tolerance_of_fp8_counts_steps_of_32_products() -> None:
    """fp8 tensor-core steps of 32 products: ``u = 2**-9`` per step (measured bound)."""
    fp8 = example("fp8_gemm").fp8_gemm
    a = bt = np.ones((64, 256), ml_dtypes.float8_e4m3fn)
    c = np.zeros((64, 64), np.float32)
    ref = np.full((1,), 256.0, np.float32)
    tol = tolerance(fp8, ref, (a, bt, c), {"tile_shape": (64, 64, 128)})
    steps, u = 256 // 32, 2.0 ** -9
    assert np.allclose(tol, 2.0 ** -23 * 256 + steps * u / (1 - steps * u) * 257)


@pytest.mark.parametrize("gpu_model", ["hopper", "exact"])
def test_on_hopper_tensor_core_kernels_are_compared_with_the_model(
        monkeypatch: pytest.MonkeyPatch, gpu_model: str) -> None:
    """A stand-in Hopper GPU (the Target IR interpreter under ``gpu_model``): results
    with the measured truncation pass bit for bit, exact sums do not (they differ from
    what the hardware computes)."""
    from tessera.frontend.kernel.backends import check
    from tessera.frontend.kernel.backends import launch as launch_module

    real = check.launch

    def gpu(kernel: Any, grid: Any, args: Any, *, backend: str, **kw: Any) -> Any:
        if backend == "cuda":
            return real(kernel, grid, args, backend="target", tensor_cores=gpu_model, **kw)
        return real(kernel, grid, args, backend=backend, **kw)

    monkeypatch.setattr(check, "launch", gpu)
    monkeypatch.setattr(launch_module, "device_target", lambda: "sm_90a")
    gemm = example("gemm").gemm
    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    args = (a, b, np.zeros((128, 128), np.float32))
    if gpu_model == "hopper":
        ts.check_against_reference(gemm, *args, backend="cuda", tile_shape=(64, 64, 64))
    else:
        with pytest.raises(InterpretError, match="differs from the Hopper tensor-core model"):
            ts.check_against_reference(gemm, *args, backend="cuda", tile_shape=(64, 64, 64))


def test_the_target_check_compiles_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel with float atomics runs in both orders of its atomics from one
    compilation (the second order used to compile the kernel again)."""
    import tessera.frontend.kernel.backends.launch as api
    from tests.lower.test_ordered_events import adds_and_reads

    calls = []
    real = api.compile_kernel

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(kw.get("target"))
        return real(*args, **kw)

    monkeypatch.setattr(api, "compile_kernel", counted)
    x = np.arange(1, 301, dtype=np.float32)
    ts.check_against_reference(adds_and_reads, x, np.array([0.5, 2.0], np.float32),
                               np.zeros(300, np.float32), backend="target", target="sm_80")
    assert calls == ["sm_80"]


def test_bitwise_takes_a_bool() -> None:
    from tests.lower.test_ordered_events import tiles_scale_their_own

    x = np.ones(8, np.float32)
    with pytest.raises(ArgumentError, match="bitwise='yes' should be True, False or None"):
        ts.check_against_reference(tiles_scale_their_own, x, x.copy(), backend="target",
                                   bitwise="yes")
