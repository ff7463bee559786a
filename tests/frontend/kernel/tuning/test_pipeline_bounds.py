"""The autotuner's bounds for the sm_90a warp-specialised GEMM pipeline: a
configuration whose stages do not fit in shared memory, or whose consumer threads would
hold more accumulators than fit in their registers, is rejected with its reason."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from tessera.frontend.kernel.tuning.autotune import check
from tessera.frontend.kernel.tuning.regs import RegisterEstimate

GEMM = runpy.run_path(str(Path(__file__).resolve().parents[4] / "examples" / "kernels"
                          / "gemm.py"))["gemm"]


def specialise(tile: tuple[int, int, int], config: dict[str, Any] | None = None) -> Any:
    a = np.zeros((512, 512), ml_dtypes.bfloat16)
    c = np.zeros((512, 512), np.float32)
    _, module = GEMM.specialise((a, a, c), {"tile_shape": tile, "config": config or {}})
    return module.functions["gemm"]


def test_stages_that_fit_are_valid() -> None:
    fn = specialise((128, 128, 64), {"num_warps": 8, "num_stages": 4})
    assert check(fn) == []
    est = RegisterEstimate(fn)
    assert est.threads == 256 and est.pipeline is not None and est.pipeline.stages == 4


def test_too_many_stages_are_rejected() -> None:
    why = check(specialise((128, 256, 64), {"num_warps": 12, "num_stages": 6}))
    assert any("shared memory" in w for w in why)


def test_one_consumer_for_a_128x256_tile_is_rejected() -> None:
    why = check(specialise((128, 256, 64), {"num_warps": 8}))
    assert any("256 accumulators" in w for w in why)


def test_two_consumers_split_the_register_estimate() -> None:
    one = RegisterEstimate(specialise((128, 256, 64), {"warp_specialize": False}))
    two = RegisterEstimate(specialise((128, 256, 64), {"num_warps": 12}))
    assert one.per_thread() > 255 and two.per_thread() <= 255 and two.threads == 384
    assert check(specialise((128, 256, 64), {"num_warps": 12})) == []
