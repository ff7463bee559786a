"""Every program of the kernel-count table (tests/ir/transforms/schedule/programs.py)
runs as generated tile kernels with the graph interpreter's bits and the table's
kernel counts: attention, MLP, layernorm, RMSnorm, softmax, the elementwise chain and
the pre-norm transformer block; and hypothesis-drawn chains of matmuls, softmax, norms
and reductions."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tests.ir.transforms.schedule import programs

#: the block's kernels today (the table promises at most 6)
BLOCK_KERNELS = 4


@pytest.mark.parametrize("fmt", [np.float32, ml_dtypes.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_scheduled_programs_give_the_graph_bits(name: str, fmt: type) -> None:
    fn, make = programs.PROGRAMS[name]
    with np.errstate(over="ignore"):
        args = [a.astype(fmt) if a.dtype == np.float32 else a for a in make()]
    lowered = ts.jit(fn).lower(*args)
    want_kernels = BLOCK_KERNELS if name == "block" else programs.KERNELS[name]
    assert len(lowered.kernels) == want_kernels <= programs.KERNELS[name]
    got, want = lowered.run(*args, backend="tile"), lowered.run(*args)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


STEPS = ["matmul", "softmax", "center", "relu", "gelu", "scale", "rms", "sum_rows"]


def _chain(steps: list[str]):  # type: ignore[no-untyped-def]
    def fn(x, *ws):  # type: ignore[no-untyped-def]
        used = 0
        for s in steps:
            if s == "matmul":
                x = x @ ws[used]
                used += 1
            elif s == "softmax":
                x = op.softmax(x, axis=-1)
            elif s == "center":
                x = x - op.mean(x, axis=-1, keepdims=True)
            elif s == "relu":
                x = op.relu(x)
            elif s == "gelu":
                x = op.gelu(x)
            elif s == "scale":
                x = x * 0.5 + 1.0
            elif s == "rms":
                x = x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-6)
            else:
                x = op.sum(x, axis=0, keepdims=True) + x
        return x
    return fn


@settings(max_examples=20, deadline=None)
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=5),
       fmt=st.sampled_from(["f32", "bf16", "f16"]), seed=st.integers(0, 2**16),
       rows=st.sampled_from([8, 32]), width=st.sampled_from([16, 48]))
def test_hypothesis_chains_of_matmuls_and_reductions(steps: list[str], fmt: str, seed: int,
                                                     rows: int, width: int) -> None:
    np_fmt = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[fmt]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, width)).astype(np_fmt)
    ws = [(rng.standard_normal((width, width)) / 4).astype(np_fmt)
          for s in steps if s == "matmul"]
    lowered = ts.jit(_chain(steps)).lower(x, *ws)
    got, want = lowered.run(x, *ws, backend="tile"), lowered.run(x, *ws)
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes()


@pytest.mark.parametrize("name", ["attention", "mlp", "layernorm"])
def test_reference_mode_gives_the_same_bits(name: str) -> None:
    """The plain per-op rules (no fast path) agree with checked mode."""
    from tessera.interp.tile.program import run_program
    from tessera.ir.transforms.to_tile import lower_module

    fn, make = programs.PROGRAMS[name]
    args = make()
    program = lower_module(ts.jit(fn).compile(*args).module)
    checked = run_program(program, args)
    reference = run_program(program, args, mode="reference", schedule="sequential")
    assert [r.tobytes() for r in reference] == [c.tobytes() for c in checked]
