"""The planted-bug suite: each bug is reported with the right kind at the right line,
and its fix runs clean; plus the details every report carries."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.interp.tile.errors import KINDS
from tests.tile import bugs

SOURCE = Path(bugs.__file__).read_text().splitlines()
MARKS = {int(m.group(1)): (k + 1, m.group(2).strip()) for k, line in enumerate(SOURCE)
         if (m := re.search(r"# BUG (\d+): (.*)$", line))}


@pytest.mark.parametrize("k", range(1, len(bugs.BUGS) + 1),
                         ids=[b[0] for b in bugs.BUGS])
def test_planted_bug_is_reported_at_its_line(k: int) -> None:
    _name, bad, _good, launch, make = bugs.BUGS[k - 1]
    line, kind = MARKS[k]
    with pytest.raises(ts.tile.SanitizerError) as info:
        bad(*make(), **launch)
    err = info.value
    assert err.kind == kind and kind in KINDS
    assert err.loc.line == line and err.loc.file.endswith("bugs.py")
    text = str(err)
    assert f"bugs.py:{line}: {kind}: kernel '{bad.name}'" in text
    assert "tile " in text and err.tile is not None and err.hint
    assert isinstance(err, ts.TesseraError)


@pytest.mark.parametrize("k", range(1, len(bugs.BUGS) + 1),
                         ids=[b[0] for b in bugs.BUGS])
def test_fixed_version_runs_clean(k: int) -> None:
    _name, _bad, good, launch, make = bugs.BUGS[k - 1]
    good(*make(), **launch)


def test_fast_mode_turns_the_sanitizers_off() -> None:
    x = np.zeros(4, np.int64)
    bugs.all_store_one(x, grid=4, mode="fast")  # the last tile wins
    assert x[0] == 3
    out = np.zeros(16, np.float32)
    bugs.read_uninit(out, grid=1, mode="fast")  # poison is visible instead
    assert np.isnan(out[8:]).all() and (out[:8] == 1).all()


def test_bounds_are_checked_even_in_fast_mode() -> None:
    with pytest.raises(ts.tile.SanitizerError, match="out of bounds"):
        bugs.shift_oob(np.arange(16, dtype=np.float32), np.zeros(16, np.float32), mode="fast")


def test_report_names_tile_lane_and_index() -> None:
    with pytest.raises(ts.tile.SanitizerError) as info:
        bugs.block_store_oob(np.zeros(64, np.float32), grid=4)
    err = info.value
    assert (err.tile, err.group, err.local, err.index) == (3, 3, 0, (64,))
    assert err.lane == 8  # element 8 of the 16-wide store at 56, lanes = element % 32
    assert err.memory == "x"


def test_cross_group_read_falls_back_to_group_order_in_fast_mode() -> None:
    x = np.zeros(8, np.float32)
    bugs.read_other_group(x, grid=8, mode="fast")  # sequential schedule: group order
    assert np.array_equal(x, np.cumsum(np.arange(8, dtype=np.float32)))


@ts.kernel
def _branch_barrier(out: ts.Tensor["N", ts.f32], twice: bool):
    """Group 0 alone (a compacted frame of whole groups) writes, syncs and reads."""
    buf = ts.tile.alloc_shared((4,), ts.f32)
    if ts.tile.group_id() == 0:
        buf[ts.tile.local_id()] = 1.0
        ts.tile.barrier()
        out[ts.tile.local_id()] = buf[3 - ts.tile.local_id()]
        if twice:
            buf[ts.tile.local_id()] = 2.0  # others read it since the barrier: a race


def test_a_barrier_in_a_branch_of_whole_groups_clears_its_groups_shadows() -> None:
    out = np.zeros(4, np.float32)
    _branch_barrier(out, False, grid=2, group_size=4)
    assert out.tolist() == [1.0] * 4
    with pytest.raises(ts.tile.SanitizerError) as info:
        _branch_barrier(np.zeros(4, np.float32), True, grid=2, group_size=4)
    assert info.value.kind == "race" and "read/write race" in str(info.value)
