"""Every program of the kernel-count table (tests/ir/transforms/schedule/programs.py)
runs as generated tile kernels with the graph interpreter's bits and the table's
kernel counts: attention, MLP, layernorm, RMSnorm, softmax, the elementwise chain and
the pre-norm transformer block."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
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
