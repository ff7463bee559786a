"""``ts.launch``, ``ts.check_against_reference`` and ``ts.aot`` without a GPU: the
CPU backends, the GPU backend's clear refusal, and everything the GPU path computes
before ``cuLaunchKernel`` (tensor-map arguments checked against cuda.h's rules)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.driver import GpuUnavailable, cuda_available
from tessera.errors import InterpretError
from tessera.frontend.kernel.backends.compile import compile_kernel, target_arguments
from tessera.frontend.kernel.backends.launch import longest_reduction, tolerance
from tests.lower.test_lowering import example

BF16 = ml_dtypes.bfloat16
rng = np.random.default_rng(5)


def test_target_backend_returns_what_the_kernel_returns() -> None:
    saxpy = example("saxpy").saxpy
    x, y = rng.standard_normal(100).astype(np.float32), np.zeros(100, np.float32)
    out = ts.launch(saxpy, 100, (x, y, 2.0), backend="target", target="sm_80")
    assert out is y and np.array_equal(y, np.float32(2.0) * x)
    assert ts.launch(saxpy, None, (x, np.zeros(100, np.float32), 2.0), backend="interp") \
        is not None


def test_backends_convert_arrays_back_and_return_the_callers_array() -> None:
    # float64 arrays run as the annotated f32 storage; both backends write the result
    # back into the caller's array and return that array, not the f32 copy
    saxpy = example("saxpy").saxpy
    x = rng.standard_normal(100)
    want = (np.float32(2.0) * x.astype(np.float32)).astype(np.float64)
    for backend in ("interp", "target"):
        y = np.zeros(100)
        out = ts.launch(saxpy, 100, (x, y, 2.0), backend=backend, target="sm_80")
        assert out is y and np.array_equal(y, want), backend


def test_cuda_backend_without_a_gpu_says_why() -> None:
    ok, why = cuda_available()
    if ok:
        pytest.skip("a GPU is present: the refusal is not reachable")
    saxpy = example("saxpy").saxpy
    x = np.zeros(8, np.float32)
    with pytest.raises(GpuUnavailable, match="no CUDA GPU"):
        ts.launch(saxpy, 8, (x, x.copy(), 1.0))
    assert why


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
    assert np.allclose(tol, u * 96 + 96 * u / (1 - 96 * u) * 97)


@pytest.mark.parametrize("name, make, launch", [
    ("gemm", lambda: (np.zeros((128, 128), BF16), np.zeros((128, 256), BF16),
                      np.zeros((128, 256), np.float32)), {"tile_shape": (64, 128, 64)}),
    ("flash_attention", lambda: tuple(np.zeros((2, 128, 64), BF16) for _ in range(3)),
     {"is_causal": True}),
    ("fp8_gemm", lambda: (np.zeros((128, 256), ml_dtypes.float8_e4m3fn),
                          np.zeros((128, 256), ml_dtypes.float8_e4m3fn),
                          np.zeros((128, 128), np.float32)), {"tile_shape": (64, 64, 128)}),
])
def test_tensor_maps_of_lowered_kernels_obey_cuda_h(name: str, make, launch) -> None:
    """Every tensor map an sm_90a kernel takes, as the launcher would encode it for a
    256-byte aligned device array, passes cuTensorMapEncodeTiled's rules."""
    kernel = getattr(example(name), name)
    args = make()
    compiled = compile_kernel(kernel, *args, target="sm_90a", **launch)
    prep, _ = kernel.specialise(args, dict(launch))
    targs, _ = target_arguments(compiled, prep.runtime)
    maps = [a for a in targs if hasattr(a, "box")]
    assert maps
    for tmap in maps:
        tmap.tensor_map(0x7F0000000100).validate()


def test_aot_bundle_round_trip(tmp_path: Path) -> None:
    gemm = example("gemm").gemm
    a, b = np.zeros((128, 64), BF16), np.zeros((64, 128), BF16)
    c = np.zeros((128, 128), np.float32)
    manifest = ts.aot.save(gemm, tmp_path, a, b, c, targets=("sm_80", "sm_90a"),
                           tile_shape=(64, 64, 64))
    bundle = ts.aot.load(tmp_path)
    assert manifest.exists() and bundle.select(cc=(9, 0)).kind == "cubin"
    assert bundle.select(cc=(8, 9)).target == "sm_80"
