"""Tessera's own PTX passes the reader's ISA checks: the forms its lowerings write
(warp-specialised and ping-pong attention in FlashAttention-3's order, checked mode's
float64 exp, persistent and TMA-store GEMMs, the sm_80 cp.async rings) are all
instructions ptxas takes, so the reader must take them too."""

from __future__ import annotations

import importlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.ir.text.ptx import parse_ptx

BF16 = ml_dtypes.bfloat16


def kernel(name: str) -> Any:
    return getattr(importlib.import_module(f"tessera.conformance.kernels.{name}"), name)


@pytest.mark.parametrize("target, mode, causal, extra", [
    ("sm_90a", "fast", False, {"num_warps": 12, "BLOCK_N": 128, "schedule": "pingpong",
                               "defer_pv": "fa3"}),
    ("sm_90a", "checked", True, {"num_warps": 12, "BLOCK_N": 128, "defer_pv": "fa3"}),
    ("sm_90a", "fast", True, {"num_warps": 12, "unroll": 2}),
    ("sm_80", "fast", False, {}),
])
def test_attention(target: str, mode: str, causal: bool, extra: dict[str, Any]) -> None:
    q = np.zeros((1, 256, 128), BF16)
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2, **extra}
    compiled = compile_kernel(kernel("flash_attention"), q, q, q, target=target, mode=mode,
                              is_causal=causal, config=config)
    assert parse_ptx(compiled.ptx, "attention.ptx").kernels


@pytest.mark.parametrize("target, tile, config", [
    ("sm_90a", (128, 256, 64), {}), ("sm_90a", (256, 128, 64), {"schedule": "pingpong"}),
    ("sm_90a", (128, 128, 64), {"persistent": True}), ("sm_80", (128, 128, 32), {}),
])
def test_gemm(target: str, tile: tuple[int, int, int], config: dict[str, Any]) -> None:
    a, b = np.zeros((512, 256), BF16), np.zeros((256, 512), BF16)
    compiled = compile_kernel(kernel("gemm"), a, b, np.zeros((512, 512), np.float32),
                              target=target, tile_shape=tile, config=config)
    assert parse_ptx(compiled.ptx, "gemm.ptx").kernels
