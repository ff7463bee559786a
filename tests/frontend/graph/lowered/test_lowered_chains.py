"""Hypothesis-drawn graph programs down to PTX: chains of matmuls, softmax, norms,
reductions and elementwise steps (the chains of tests/ir/transforms/to_tile/
test_programs.py) in f32, bf16, f16 and fp8, on shapes that are no multiple of any
tile, give the graph interpreter's bits under ``backend="target"`` on sm_80 and sm_90a.

A program the lowering refuses must be refused with one of the documented reasons
(docs/schedule.md, "Not yet"), at the user's line, and still run with
``backend="tile"``; any other refusal fails."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.frontend.graph.lowered_target import TargetGenerationError
from tests.frontend.graph.lowered.same import TARGETS, bits, same_on_target
from tests.ir.transforms.to_tile.test_programs import STEPS, _chain

FORMATS = {"f32": ts.f32, "bf16": ts.bf16, "f16": ts.f16, "fp8_e4m3": ts.fp8_e4m3,
           "fp8_e5m2": ts.fp8_e5m2}

#: the refusals docs/schedule.md lists as not lowered yet
KNOWN_GAPS = [
    r"a memory tile (cannot be read into|broadcast into) layout BRow",
    r"an exact mma accumulator must be a 2-D blocked tile",
]


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
    fn, args = _chain(steps), [x, *ws]
    try:
        ts.jit(fn).lower(*args).ptx(target=target)
    except TargetGenerationError as err:
        message = str(err)
        assert "test_programs.py:" in message, message  # the user's line
        assert any(re.search(gap, message) for gap in KNOWN_GAPS), message
        event("refused: " + next(g for g in KNOWN_GAPS if re.search(g, message)))
        lowered = ts.jit(fn).lower(*args)
        assert bits(lowered.run(*args, backend="tile")) == bits(lowered.run(*args))
        return
    event("lowered")
    same_on_target(fn, args, target)
