"""Shared accesses that skip their race-shadow entries (``tile_phase``): only those no
later access can consult before a barrier or the kernel's end, so every race is still
reported — across the branches of an ``if`` and across the trips of a loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.interp.tile.phase import quiet_accesses
from tests.tile.fastpaths import block_reduction

SOURCE = Path(__file__).read_text().splitlines()


def line_of(text: str) -> int:
    return next(k for k, line in enumerate(SOURCE, 1) if text in line)


def _quiet_lines(kernel: ts.Kernel, *args: object, **launch: object) -> set[tuple[str, int]]:
    fn = kernel.compile(*args, **launch).functions[kernel.name]
    return {(i.op.name, i.loc.line) for i in quiet_accesses(fn)}


def test_a_block_reductions_last_accesses_of_each_phase_are_quiet() -> None:
    kernel = block_reduction()
    data, total = np.ones(4096, np.float32), np.zeros(1, np.float32)
    quiet = _quiet_lines(kernel, data, total, grid=4, group_size=64)
    names = sorted(name for name, _ in quiet)
    # the partial sums' store (a barrier follows), the tree's update (its level's
    # barrier follows) and the final read (the kernel ends); the tree's read is
    # followed by the update, so it records its readers
    assert names == ["tile.load", "tile.store", "tile.update"]
    assert kernel(data, total, grid=4, group_size=64) is None
    assert total[0] == 4096.0


def branch_race(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    buf[ts.tile.local_id()] = 1.0
    ts.tile.barrier()
    if ts.tile.local_id() == 0:
        out[ts.tile.linear_id()] = buf[1]  # read, then the else branch writes slot 1
    else:
        buf[ts.tile.local_id()] = 2.0  # RACE: tile 1 writes what tile 0 read


def loop_race(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    for _ in ts.tile.range(0, 2):
        buf[ts.tile.local_id()] = 2.0  # LOOP RACE: the previous trip's read of it
        ts.tile.barrier()
        out[ts.tile.linear_id()] = buf[(ts.tile.local_id() + 1) % 4]


def loop_fixed(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    for _ in ts.tile.range(0, 2):
        buf[ts.tile.local_id()] = 2.0
        ts.tile.barrier()
        out[ts.tile.linear_id()] = buf[(ts.tile.local_id() + 1) % 4]
        ts.tile.barrier()


@pytest.mark.parametrize("body, mark", [(branch_race, "# RACE"), (loop_race, "# LOOP RACE")])
def test_a_read_that_a_later_write_can_race_with_is_recorded(body: object, mark: str) -> None:
    kernel = ts.kernel(body)
    out = np.zeros(4, np.float32)
    assert not any(name == "tile.load" for name, _ in _quiet_lines(kernel, out, grid=1,
                                                                    group_size=4))
    with pytest.raises(ts.tile.SanitizerError) as info:
        kernel(out, grid=1, group_size=4)
    assert info.value.kind == "race" and "read/write race" in str(info.value)
    assert f"test_phase.py:{line_of(mark)}:" in str(info.value)


def test_a_barrier_before_the_next_trip_makes_the_read_quiet() -> None:
    kernel = ts.kernel(loop_fixed)
    out = np.zeros(4, np.float32)
    assert any(name == "tile.load" for name, _ in _quiet_lines(kernel, out, grid=1,
                                                                group_size=4))
    kernel(out, grid=1, group_size=4)
    assert np.array_equal(out, np.full(4, 2.0, np.float32))
