"""The simulator's fast path for the shared-memory tree of block reductions gives the
bits and the launch state of the general loop, and leaves every kernel it cannot prove
clean to the general loop, whose sanitizers report it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.tile import fastpaths
from tests.tile.fastpaths import block_reduction, taken

SOURCE = Path(__file__).read_text().splitlines()


def line_of(text: str) -> int:
    return next(k for k, line in enumerate(SOURCE, 1) if text in line)


def tree(data: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32],
         parts: ts.Tensor["G", ts.f32]):
    ctx = ts.tile.context()
    buf = ts.tile.alloc_shared((ctx.group_size,), ts.f32)
    s = 0.0
    for i in ts.tile.range(ts.tile.linear_id(), N, ctx.grid[0] * ctx.group_size):
        s += data[i]
    buf[ts.tile.local_id()] = s
    ts.tile.barrier()
    stride = ctx.group_size // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            buf[ts.tile.local_id()] += buf[ts.tile.local_id() + stride]
        ts.tile.barrier()
        stride //= 2
    # after the loop: the buffer is read again (the race shadows must be the loop's)
    parts[ts.tile.linear_id()] = buf[ts.tile.local_id()]
    if ts.tile.local_id() == 0:
        total[0] += buf[0]


@ts.kernel
def too_far(data: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    ctx = ts.tile.context()
    buf = ts.tile.alloc_shared((ctx.group_size,), ts.f32)
    buf[ts.tile.local_id()] = data[ts.tile.linear_id()]
    ts.tile.barrier()
    stride = ctx.group_size
    while stride > 0:
        if ts.tile.local_id() < stride:
            buf[ts.tile.local_id()] += buf[ts.tile.local_id() + stride]  # TOO FAR
        ts.tile.barrier()
        stride //= 2
    total[0] += buf[0]


@ts.kernel
def half_written(data: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    ctx = ts.tile.context()
    buf = ts.tile.alloc_shared((ctx.group_size,), ts.f32)
    if ts.tile.local_id() < 2:
        buf[ts.tile.local_id()] = data[ts.tile.linear_id()]
    ts.tile.barrier()
    stride = ctx.group_size // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            buf[ts.tile.local_id()] += buf[ts.tile.local_id() + stride]  # UNWRITTEN
        ts.tile.barrier()
        stride //= 2
    total[0] += buf[0]


@ts.kernel
def no_barrier_before(data: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    ctx = ts.tile.context()
    buf = ts.tile.alloc_shared((ctx.group_size,), ts.f32)
    buf[ts.tile.local_id()] = data[ts.tile.linear_id()]
    stride = ctx.group_size // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            buf[ts.tile.local_id()] += buf[ts.tile.local_id() + stride]  # RACY
        ts.tile.barrier()
        stride //= 2
    total[0] += buf[0]


def launch(data: np.ndarray, grid: int, group: int, mode: str, fast: bool,
           schedule: str = "auto") -> tuple[bytes, bytes]:
    with fastpaths.disabled(*(() if fast else ("tree_sum",))):
        k = ts.kernel(tree)  # a fresh kernel: nothing compiled is shared
        total, parts = np.zeros(1, np.float32), np.zeros(grid * group, np.float32)
        k(data, total, parts, grid=grid, group_size=group, mode=mode, schedule=schedule)
    return total.tobytes(), parts.tobytes()


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3000), grid=st.integers(1, 4), log_group=st.integers(0, 6),
       mode=st.sampled_from(["checked", "fast"]),
       schedule=st.sampled_from(["auto", "sequential"]))
def test_fast_path_equals_the_general_loop(n: int, grid: int, log_group: int, mode: str,
                                           schedule: str) -> None:
    data = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    group = 1 << log_group
    assert launch(data, grid, group, mode, True, schedule) == \
        launch(data, grid, group, mode, False, schedule)


def test_the_fast_path_runs_for_the_shipped_reduction() -> None:
    before = taken("tree_sum")
    data = np.random.default_rng(0).standard_normal(1 << 14).astype(np.float32)
    total = np.zeros(1, np.float32)
    block_reduction()(data, total, grid=4, group_size=64)
    assert taken("tree_sum") == before + 1
    want = np.add.reduce(data.reshape(-1, 256), axis=0).reshape(4, 64).astype(np.float64)
    assert abs(float(total[0]) - want.sum()) <= 1e-3


@pytest.mark.parametrize(("kernel", "kind", "mark"), [
    (too_far, "out of bounds", "# TOO FAR"),
    (half_written, "uninitialised read", "# UNWRITTEN"),
    (no_barrier_before, "race", "# RACY"),
])
def test_what_the_fast_path_cannot_prove_is_reported(kernel, kind: str, mark: str) -> None:
    data = np.ones(64, np.float32)
    with pytest.raises(ts.tile.SanitizerError) as info:
        kernel(data, np.zeros(1, np.float32), grid=2, group_size=32)
    assert info.value.kind == kind and info.value.loc.line == line_of(mark)
