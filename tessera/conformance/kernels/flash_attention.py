"""Flash attention (overview-and-quickstart.md, Example 4), corrected.

The seed's defects (docs/decisions.md, "Seed examples with bugs"): the normaliser
``l_i = alpha*l_i + beta*row_sum(p)`` double-counts the correction (``p`` is already
relative to ``m_i_new``, so it is ``l_i = alpha*l_i + row_sum(p)``), and the
accumulators are not reset per query block (the seed loops over every query block
inside one program and keeps one ``acc``). Here each group handles one block of ``BM``
query rows (``tile_m``; the default grid covers the output), starts fresh
accumulators and writes its rows by returning its tile. ``B*H`` is a batch dimension:
one program per batch index, and the body sees ``(S, D)`` tensors. A causal program
visits only the key blocks up to its diagonal and masks only those that meet it.

The autotuner only picks blocks valid for the call: at ``S = 192`` or ``320`` a
``BLOCK_M`` or ``BLOCK_N`` of 128 would read past the sequence, so those
configurations are dropped (``flash_attention.tuning_report()`` says why) and a
64-row block runs.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

import tessera as ts


def _kv_block(smem_q, smem_k, smem_v, K, V, kv_block, q_block, acc, m_i, l_i, masked, scale):
    """One key/value block of the online softmax (inlined into the kernel): the new
    (acc, m_i, l_i). ``masked``: the block meets the causal diagonal."""
    BN = ts.tile.context().BLOCK_N
    ts.tile.cp_async(smem_k, K[kv_block:kv_block + BN])
    ts.tile.cp_async(smem_v, V[kv_block:kv_block + BN])
    ts.tile.barrier()

    scores = ts.tile.mma(smem_q, smem_k.T) * scale
    if masked:
        scores = ts.tile.causal_mask(scores, q_block, kv_block)

    m_new = ts.tile.row_max(scores)
    m_i_new = ts.tile.maximum(m_i, m_new)
    alpha = ts.tile.exp(m_i - m_i_new)
    p = ts.tile.exp(scores - m_i_new)
    l_i = alpha * l_i + ts.tile.row_sum(p)
    # P in the format of V, as tensor cores multiply it (FlashAttention-2 does the same);
    # the rescaled accumulator is the product's C operand, so P V adds into it once
    # rounded instead of being rounded, then added (Triton's tutorial and FlashAttention-3
    # accumulate the same way; on a GPU it saves an add per output element and block)
    acc = ts.tile.mma(ts.tile.cast(p, ts.bf16), smem_v, alpha * acc)
    ts.tile.barrier()  # every tile is done with smem_k/smem_v before the next copy
    return acc, m_i_new, l_i


@ts.kernel.autotune(
    space=dict(
        BLOCK_M=[64, 128],
        BLOCK_N=[64, 128],
        num_warps=[4, 8],
        num_stages=[2, 3]
    )
)
def flash_attention(Q: ts.Tensor["B*H", "S", "D", ts.bf16],
                    K: ts.Tensor["B*H", "S", "D", ts.bf16],
                    V: ts.Tensor["B*H", "S", "D", ts.bf16],
                    is_causal: bool = True) -> ts.Tensor["B*H", "S", "D", ts.bf16]:
    """Flash attention with online softmax: one group per BM query rows."""
    ctx = ts.tile.context()
    BM, BN = ctx.BLOCK_M, ctx.BLOCK_N
    q_block = tile_m
    scale = 1.0 / math.sqrt(ctx.D)

    smem_q = ts.tile.alloc_shared((BM, ctx.D), ts.bf16)
    smem_k = ts.tile.alloc_shared((BN, ctx.D), ts.bf16)
    smem_v = ts.tile.alloc_shared((BN, ctx.D), ts.bf16)
    ts.tile.cp_async(smem_q, Q[q_block:q_block + BM])

    acc = ts.tile.zeros((BM, ctx.D), ts.f32)
    m_i = ts.tile.full((BM,), -float('inf'), ts.f32)
    l_i = ts.tile.zeros((BM,), ts.f32)

    # causal (FlashAttention-2/3): the key blocks wholly below the diagonal need no
    # mask, the max(1, BM // BN) blocks that meet it are masked, and those past the
    # block's last query row are masked out entirely, so the loops stop there
    diagonal = (q_block // BN) * BN if is_causal else ctx.S
    for kv_block in ts.tile.range(0, diagonal, BN):
        acc, m_i, l_i = _kv_block(smem_q, smem_k, smem_v, K, V, kv_block, q_block, acc,
                                  m_i, l_i, False, scale)
    if is_causal:
        for j in ts.tile.range(0, max(1, BM // BN)):
            acc, m_i, l_i = _kv_block(smem_q, smem_k, smem_v, K, V, diagonal + j * BN,
                                      q_block, acc, m_i, l_i, True, scale)

    return ts.tile.cast(acc / l_i[:, None], ts.bf16)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Attention in float64 NumPy."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def main() -> None:
    rng = np.random.default_rng(0)
    for bh, seq, d, causal in [(2, 128, 64, True), (3, 256, 32, False), (1, 384, 64, True),
                               (2, 192, 64, True), (1, 320, 64, False)]:
        q, k, v = (rng.standard_normal((bh, seq, d)).astype(ml_dtypes.bfloat16)
                   for _ in range(3))
        out = flash_attention(q, k, v, is_causal=causal)
        ref = reference(q, k, v, causal)
        err = np.abs(out.astype(np.float64) - ref).max()
        # one bf16 rounding of the output (|out| <= max|v|) plus f32 softmax arithmetic
        bound = 2.0 ** -8 * np.abs(v.astype(np.float64)).max() + 1e-4
        assert err <= bound, (bh, seq, d, causal, err, bound)
        print(f"flash_attention B*H={bh} S={seq} D={d} causal={causal}: max error {err:.2e} "
              f"(bound {bound:.2e}) config {flash_attention.last_config}")


if __name__ == "__main__":
    main()
