"""The simulator's fast path for loops ``s = s + data[i]`` (one gather and one add per
trip over all programs) gives the bits of the general loop, for any grid, group size,
data length and stride: the same float32 additions in the same order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera.interp.tile_flow as flow
from tests.tile.fastpaths import block_reduction, record_runs


def run(data: np.ndarray, grid: int, group: int, fast: bool, mode: str) -> bytes:
    kernel = block_reduction()  # a fresh kernel: nothing compiled is shared
    saved = flow.strided_sum
    if not fast:
        flow.strided_sum = lambda c, instr: None
    try:
        total = np.zeros(1, np.float32)
        kernel(data, total, grid=grid, group_size=group, mode=mode)
    finally:
        flow.strided_sum = saved
    return total.tobytes()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3000), grid=st.integers(1, 5), log_group=st.integers(0, 6),
       scale=st.sampled_from([1.0, 1e-30, 1e30]), mode=st.sampled_from(["checked", "fast"]))
def test_fast_path_equals_the_general_loop(n: int, grid: int, log_group: int, scale: float,
                                           mode: str) -> None:
    data = (np.random.default_rng(n).standard_normal(n) * scale).astype(np.float32)
    data[::7] = -0.0
    group = 1 << log_group
    assert run(data, grid, group, True, mode) == run(data, grid, group, False, mode)


def test_the_fast_path_runs_for_the_benchmark_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = record_runs(monkeypatch, "strided_sum")
    data = np.ones(1 << 14, np.float32)
    total = np.zeros(1, np.float32)
    block_reduction()(data, total, grid=4, group_size=64)
    assert calls and calls[0] is not None and total[0] == data.size
