"""The autotuner's cost model counts the shared memory of an attention's sm_90a K/V
ring: each stage is one more K and one more V block (and four mbarriers), which can
cost CTAs per SM."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.frontend.kernel.tuning.autotune import estimate


def specialise(d: int, stages: int, seq: int = 1024) -> Any:
    q = np.zeros((16, seq, d), ml_dtypes.bfloat16)
    config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=stages)
    _, module = flash_attention.specialise((q, q, q), {"is_causal": False, "config": config})
    return module.functions["flash_attention"], config


def test_stages_cost_shared_memory() -> None:
    for d in (64, 128):
        block = 64 * d * 2  # one bf16 K (or V) block
        buffers = 3 * block  # Q, K and V of the tile program
        shared = {s: estimate(*specialise(d, s)).shared for s in (1, 2, 3)}
        assert shared[1] == buffers  # one stage: the tile program's buffers
        assert shared[2] == buffers + 2 * block + 2 * 32
        assert shared[3] == buffers + 4 * block + 3 * 32


def test_a_deeper_ring_can_cost_ctas_per_sm() -> None:
    """The model does not see the copies the ring hides, only the shared memory it
    takes: at a head dimension of 128, four stages (147 KiB) leave one CTA per SM
    where two stages (80 KiB) leave two, so 512 CTAs take more waves."""
    two, four = (estimate(*specialise(128, s, seq=2048)) for s in (2, 4))
    assert 227 * 1024 // two.shared == 2 and 227 * 1024 // four.shared == 1
    assert four.seconds > two.seconds
