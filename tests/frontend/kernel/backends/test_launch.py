"""``ts.launch`` and ``ts.aot`` without a GPU: the CPU backends, the GPU backend's clear
refusal, and everything the GPU path computes before ``cuLaunchKernel`` (tensor-map
arguments checked against cuda.h's rules)."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.driver import GpuUnavailable, cuda_available
from tessera.frontend.kernel.backends.compile import compile_kernel, target_arguments
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
    # the targets of a bundle share one dynamic shared-memory size: two stages keep the
    # pipelined GEMM of both targets in static shared memory
    manifest = ts.aot.save(gemm, tmp_path, a, b, c, targets=("sm_80", "sm_90a"),
                           tile_shape=(64, 64, 64), config={"num_stages": 2})
    bundle = ts.aot.load(tmp_path)
    assert manifest.exists() and bundle.select(cc=(9, 0)).kind == "cubin"
    assert bundle.select(cc=(8, 9)).target == "sm_80"
