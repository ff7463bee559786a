"""The explain page of the specification's flash attention kernel (Example 4).

Writes build/explain/flash_attention.html (or the path given) for one head of 128
queries of width 64, causal: each group owns a 64-row block of queries (the output's
rows in the tile map) and reads K and V block by block, one block per barrier phase.
The configuration is fixed (64-row blocks, so two K/V blocks) rather than autotuned.

Run: ``python examples/explain/flash_attention_page.py [out.html]``
"""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.explain import write_page


def main(out: str = "build/explain/flash_attention.html") -> Path:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 128, 64)).astype(ml_dtypes.bfloat16)
               for _ in range(3))
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
    return write_page(flash_attention, out, Q=q, K=k, V=v, is_causal=True, config=config)


if __name__ == "__main__":
    print(main(*sys.argv[1:]))
