"""Attention ``softmax(Q Kᵀ · s [+ mask | where]) V`` as one tile kernel with the graph
interpreter's bits: the exact mma rounds the scores as the graph's matmul does, the
softmax is the graph's float64 arithmetic, and P·V is the exact mma again."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tests.ir.transforms.schedule import programs

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _bits(x: object) -> bytes:
    return np.asarray(x).tobytes()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", ["attention", "attention_4d", "causal_where",
                                  "causal_additive"])
def test_attention_is_one_kernel_with_the_graph_bits(name: str, fmt: str) -> None:
    fn, make = programs.PROGRAMS[name]
    with np.errstate(over="ignore"):  # the additive mask's -1e9 is -inf in f16
        args = [a.astype(FORMATS[fmt]) if a.dtype == np.float32 else a for a in make()]
    lowered = ts.jit(fn).lower(*args)
    assert len(lowered.kernels) == programs.KERNELS[name] == 1
    text = lowered.kernels[0].text
    assert text.count("tile.mma(") == 2 and text.count("exact = true") == 3
    assert _bits(lowered.run(*args, backend="tile")) == _bits(lowered.run(*args))


def test_a_fully_masked_row_and_extreme_scores() -> None:
    """A row whose every key is masked to -1e9, and scores far apart: the float64
    softmax and the exact P·V still give the graph's bits."""
    fn, make = programs.PROGRAMS["causal_where"]
    q, k, v, mask = make()
    mask[:, 3, :] = False
    q[:, 5, :] *= 1e4
    v[:, :, 0] = [2.0**-40 if j % 2 else 1.0 for j in range(v.shape[1])]
    lowered = ts.jit(fn).lower(q, k, v, mask)
    assert _bits(lowered.run(q, k, v, mask, backend="tile")) == \
        _bits(lowered.run(q, k, v, mask))
