"""The simulator's fast path for loops ``s = s + data[i]`` (one gather and one add per
trip over all programs) gives the bits of the general loop, for any grid, group size,
data length and stride: the same float32 additions in the same order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.tile import fastpaths
from tests.tile.fastpaths import block_reduction, taken


def run(data: np.ndarray, grid: int, group: int, fast: bool, mode: str) -> bytes:
    kernel = block_reduction()  # a fresh kernel: nothing compiled is shared
    total = np.zeros(1, np.float32)
    with fastpaths.disabled(*(() if fast else ("strided_sum",))):
        kernel(data, total, grid=grid, group_size=group, mode=mode)
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


def test_the_fast_path_runs_for_the_benchmark_shape() -> None:
    before = taken("strided_sum")
    data = np.ones(1 << 14, np.float32)
    total = np.zeros(1, np.float32)
    block_reduction()(data, total, grid=4, group_size=64)
    assert taken("strided_sum") > before and total[0] == data.size


def _partial_sums(data: ts.Tensor["N", ts.f32], out: ts.Tensor["P", ts.f32], step: int,
                  start: float):
    s = ts.tile.cast(start, ts.f32)
    for i in ts.tile.range(ts.tile.linear_id(), N, step):
        s += data[i]
    out[ts.tile.linear_id()] = s


def _partials(data: np.ndarray, out: np.ndarray, step: int, start: float, programs: int,
              fast: bool) -> bytes:
    """Each program's ``s = start; for i in range(pid, n, step): s += data[i]``."""
    partial_sums = ts.kernel(_partial_sums)  # a fresh kernel: nothing compiled is shared
    with fastpaths.disabled(*(() if fast else ("strided_sum",))):
        partial_sums(data, out, step, start, grid=programs)
    return out.tobytes()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 4000), programs=st.integers(1, 40), step=st.integers(1, 90),
       start=st.sampled_from([0.0, -0.0, 1.5, -3e-8]))
def test_per_program_partials_equal_the_general_loop(n: int, programs: int, step: int,
                                                    start: float) -> None:
    """Every program's partial sum, bit for bit, whether the trips overlap (a step below
    the number of programs), leave programs short (-0.0 padding) or start elsewhere
    than zero."""
    rng = np.random.default_rng(n * 7 + step)
    data = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(np.float32)
    data[::5] = -0.0
    fast = _partials(data, np.zeros(programs, np.float32), step, start, programs, True)
    slow = _partials(data, np.zeros(programs, np.float32), step, start, programs, False)
    assert fast == slow
