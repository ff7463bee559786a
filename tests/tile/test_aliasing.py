"""Overlapping, repeated and read-only array arguments: one memory as on a GPU, or a
clear error before anything runs."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera.interp.tile.memory.alias import AliasSpace, alias_groups
from tests.tile import bugs_order, correct_order


def test_overlap_is_found_from_byte_ranges() -> None:
    a = np.zeros(16, np.float32)
    b = np.zeros(4, np.float32)
    assert alias_groups([a[:8], b, a[4:], None]) == [[0, 2]]
    assert alias_groups([a[::2], a[1::2]]) == [[0, 1]]  # interleaved: one space
    assert alias_groups([a[:8], a[8:]]) == []  # adjacent, disjoint
    assert alias_groups([a[:8], a[4:]], [False, False]) == []  # read-only: no group
    assert alias_groups([a[:8], b, a[4:]], [False, True, True]) == [[0, 2]]
    m = np.zeros((4, 6), np.float32)
    assert alias_groups([m[:, 1], m[2]]) == [[0, 1]]


def test_alias_space_maps_each_element_to_its_own_unit() -> None:
    a = np.zeros(12, np.float32)
    x, y = a[0:8], a[4:12]
    space = AliasSpace([x, y], ["x", "y"])
    vx, vy = space.view(x, "owner"), space.view(y, "owner")
    vx[5] = 7  # a[5] is y[1]
    assert vy[1] == 7 and (vy[np.arange(8) != 1] == -1).all()
    space.reset()
    assert (vx == -1).all()
    m = np.zeros((3, 4), np.float32)
    col, row = m[:, 1], m[1]
    space = AliasSpace([col, row], ["col", "row"])
    space.view(col, "reader")[1] = 3  # m[1, 1]
    assert list(space.view(row, "reader")) == [-1, 3, -1, -1]


def test_converted_overlapping_arguments_are_refused() -> None:
    a = np.arange(8, dtype=np.float64)  # the kernel's tensors are f32: a converted copy
    before = a.copy()
    with pytest.raises(ts.ArgumentError, match="share memory") as info:
        correct_order.in_place_alias(a, a, grid=8)
    assert "test_aliasing.py" in str(info.value)
    assert np.array_equal(a, before)
    b = np.arange(8, dtype=np.float64)
    correct_order.read_only_alias(b, b, np.zeros(8, np.float32), grid=8)  # only read


def test_repeated_or_read_only_outputs_are_refused_before_the_launch() -> None:
    x = np.arange(8, dtype=np.float32)
    zero_stride = np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (8,), (0,))
    with pytest.raises(ts.ArgumentError, match="repeats its elements"):
        correct_order.in_place_alias(x, zero_stride, grid=8)
    frozen = np.zeros(8, np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ts.ArgumentError, match="read-only"):
        correct_order.in_place_alias(x, frozen, grid=8)


def test_reports_name_the_overlapping_parameter() -> None:
    a = np.arange(8, dtype=np.float32)
    with pytest.raises(ts.tile.SanitizerError) as info:
        bugs_order.shift_in_place(a, a, grid=8)
    assert "global tensor 'out' (its memory overlaps 'x')" in str(info.value)
    assert info.value.memory == "out"


@pytest.mark.parametrize("mode", ["checked", "fast"])
def test_in_place_update_gives_the_separate_arrays_bits(mode: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal(64).astype(np.float32)
    separate = np.zeros(64, np.float32)
    correct_order.in_place_alias(a.copy(), separate, grid=16, group_size=4, mode=mode)
    same = a.copy()
    correct_order.in_place_alias(same, same, grid=16, group_size=4, mode=mode)
    assert np.array_equal(same.view(np.uint32), separate.view(np.uint32))


def test_fast_mode_follows_group_order_for_overlapping_arguments() -> None:
    """Without sanitizers a cross-group race still runs in group order (auto), the
    order a reader of the sequential schedule expects: tile i reads a[i - 1] after
    tile i - 1 wrote it."""
    a = np.ones(9, np.float32)
    bugs_order.copy_overlapping(a[:-1], a[1:], grid=8, mode="fast")
    assert np.array_equal(a, 2.0 ** np.arange(9, dtype=np.float32))
