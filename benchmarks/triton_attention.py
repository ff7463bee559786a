"""A Triton flash-attention forward kernel: the Triton anchor of ``gpu_check.py``.

Written here in the style of Triton's fused-attention tutorial (one program per
``BLOCK_M`` query rows of one batch-head, K/V streamed in ``BLOCK_N`` blocks, the
online softmax in base 2 with the scale folded into ``log2(e)``, f32 accumulators, bf16
``P`` for the second product), without the tutorial's Hopper-specific tuning (tensor
descriptors, warp specialisation, a separate unmasked pass for causal blocks below the
diagonal): it measures what a straightforward Triton kernel reaches, not Triton's best.
Causal attention stops at the diagonal block and masks inside it.

It needs Triton and PyTorch with a GPU, or ``TRITON_INTERPRET=1`` (NumPy on the CPU)
for the correctness check at the bottom:

    TRITON_INTERPRET=1 benchmarks/.env-triton/bin/python benchmarks/triton_attention.py
"""

from __future__ import annotations

import math
from typing import Any

import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _attention(Q, K, V, Out, seq, scale_log2, D: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    base = tl.program_id(1).to(tl.int64) * seq * D
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * D + dims[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = (start_m + 1) * BLOCK_M if CAUSAL else seq
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + cols
        kt = tl.load(K + base + keys[None, :] * D + dims[:, None])
        s = tl.dot(q, kt) * scale_log2
        if CAUSAL:  # key 0 is always visible, so every row's maximum is finite
            s = tl.where(rows[:, None] >= keys[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + base + keys[:, None] * D + dims[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(V.dtype.element_ty), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(Out + base + rows[:, None] * D + dims[None, :], out.to(Out.dtype.element_ty))


def config(d: int) -> dict[str, int]:
    """Tile and launch parameters by head dimension (the tutorial's usual choices)."""
    if d <= 64:
        return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
    return {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2}


def attention(q: Any, k: Any, v: Any, causal: bool, out_dtype: Any = None,
              **overrides: int) -> Any:
    """softmax(q kᵀ / sqrt(d)) v for bf16 torch tensors ``(BH, S, D)`` (the output in
    ``out_dtype``, default bf16); S must be a multiple of the blocks."""
    import torch

    bh, seq, d = q.shape
    cfg = {**config(d), **overrides}
    if seq % cfg["BLOCK_M"] or seq % cfg["BLOCK_N"]:
        raise ValueError(f"sequence length {seq} is not a multiple of the blocks {cfg}")
    out = torch.empty(q.shape, dtype=out_dtype or q.dtype, device=q.device)
    grid = (seq // cfg["BLOCK_M"], bh)
    _attention[grid](q, k, v, out, seq, LOG2E / math.sqrt(d), D=d, CAUSAL=causal, **cfg)
    return out


def _check() -> None:
    """Small shapes against float64 softmax attention (runs under TRITON_INTERPRET=1,
    whose NumPy memory mishandles bf16: the check's operands are bf16 values in f32)."""
    import torch

    torch.manual_seed(0)
    for causal in (False, True):
        for d in (64, 128):
            q, k, v = (torch.randn(2, 128, d).to(torch.bfloat16).float() for _ in range(3))
            out = attention(q, k, v, causal, torch.float32, BLOCK_M=32, BLOCK_N=32)
            scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)
            if causal:
                scores = scores.masked_fill(~torch.ones(128, 128, dtype=torch.bool).tril(),
                                            -math.inf)
            exact = torch.softmax(scores, -1) @ v.double()
            err = float((out.double() - exact).abs().max())
            assert err < 2.0 ** -6 * float(v.abs().max()), (causal, d, err)
            print(f"causal={causal} D={d}: max abs error {err:.2e}")


if __name__ == "__main__":
    _check()
