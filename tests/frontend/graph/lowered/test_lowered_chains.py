"""Hypothesis-drawn graph programs down to PTX: chains of matmuls, softmax, norms,
reductions and elementwise steps (the chains of tests/ir/transforms/to_tile/
test_programs.py) in f32, bf16, f16 and fp8, on shapes that are no multiple of any
tile, give the graph interpreter's bits under ``backend="target"`` on sm_80 and sm_90a.
Every drawn program is lowered: a refusal fails."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tests.frontend.graph.lowered.same import TARGETS, same_on_target
from tests.ir.transforms.to_tile.test_programs import STEPS, _chain

FORMATS = {"f32": ts.f32, "bf16": ts.bf16, "f16": ts.f16, "fp8_e4m3": ts.fp8_e4m3,
           "fp8_e5m2": ts.fp8_e5m2}


@settings(max_examples=25, deadline=None)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=4),
       fmt=st.sampled_from(sorted(FORMATS)), target=st.sampled_from(TARGETS),
       seed=st.integers(0, 2**16), rows=st.integers(1, 9), width=st.integers(1, 19))
def test_drawn_chains_on_target_give_the_graph_bits(steps: list[str], fmt: str, target: str,
                                                     seed: int, rows: int, width: int) -> None:
    rng = np.random.default_rng(seed)
    x = ts.Tensor(rng.standard_normal((rows, width)), FORMATS[fmt]).array
    ws = [ts.Tensor(rng.standard_normal((width, width)) / 4, FORMATS[fmt]).array
          for s in steps if s == "matmul"]
    same_on_target(_chain(steps), [x, *ws], target)
