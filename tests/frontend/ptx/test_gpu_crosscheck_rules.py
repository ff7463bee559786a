"""The ts.ptx GPU cross-check's own rules, without a GPU: which tensor-core steps a
third-party kernel has, and so whether the Hopper model's bits are claimed for it."""

from __future__ import annotations

import tessera as ts
from tessera.arch import mma_hopper
from tests.frontend.ptx import gpu_crosscheck
from tests.frontend.ptx.corpus import NVCC_PTX, TRITON_PTX


def test_nvccs_mma_sync_kernel_is_claimed_and_saxpy_has_no_steps() -> None:
    program = ts.ptx.load(NVCC_PTX)
    steps = gpu_crosscheck._tensor_core_steps(program.kernel("mma_tile").ir)
    assert steps and set(steps) == {(False, "bf16", "bf16")} and mma_hopper.covers(steps)
    assert gpu_crosscheck._tensor_core_steps(program.kernel("saxpy").ir) == []


def test_tritons_wgmma_kernel_is_claimed() -> None:
    program = ts.ptx.load(TRITON_PTX)
    (name,) = program.kernels
    steps = gpu_crosscheck._tensor_core_steps(program.kernel(name).ir)
    assert steps and all(wgmma for wgmma, _, _ in steps) and mma_hopper.covers(steps)
