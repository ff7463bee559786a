"""Tensor updates the window plan cannot order (tessera.lower.rules.ordered.rows):
windows that overlap in part, updates under an ``if``, in a loop, at a window chosen by
data and several updates of one tensor are recorded as rows with their addresses and
applied by the last CTA in tile order, then program order: the Target IR interpreter
gives the tile interpreter's bits whichever order the CTAs' atomics land in, the PTX
has no float ``red`` and ptxas assembles it without spills or advisories."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tests.lower.test_ordered import F32_RED, _target_result, _tile_result
from tests.lower.test_ordered_tiles import ORDERS, TARGETS, _spread


@ts.kernel
def overlapping_bands(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["W", ts.f32]):
    """Tile i adds a row into ``out[i:i + C]``: windows that overlap in part."""
    out[tile_m:tile_m + C] += x[tile_m, 0:C]


@ts.kernel
def adds_in_a_branch(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["C", ts.f32]):
    """Odd tiles add their row into ``out``: not every CTA reaches the update."""
    if tile_m % 2 == 1:
        out[0:C] += x[tile_m, 0:C]


@ts.kernel
def bands_in_a_loop(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["W", ts.f32]):
    """Each tile adds its row three times, shifted by one each trip, then once more
    scaled: events in a loop and after it, into windows that meet."""
    for k in range(3):
        out[tile_m + k:tile_m + k + C] += x[tile_m, 0:C]
    out[tile_m:tile_m + C] += x[tile_m, 0:C] * 0.5


@ts.kernel
def rows_by_key(x: ts.Tensor["R", "C", ts.f32], key: ts.Tensor["R", ts.int32],
                out: ts.Tensor["B", "C", ts.f32]):
    """Tile i adds its row into the row of ``out`` its key names: a window chosen by
    loaded data."""
    out[key[tile_m], 0:C] += x[tile_m, 0:C]


@ts.kernel
def rows_counted(x: ts.Tensor["R", "C", ts.f32], count: ts.Tensor[1, ts.int32],
                 out: ts.Tensor["C", ts.f32]):
    """A loop of loaded trip count: its events cannot be numbered."""
    for _ in range(count[0]):
        out[0:C] += x[tile_m, 0:C]


@ts.kernel
def tile_and_element(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["C", ts.f32]):
    """One tensor updated as a tile and as one element."""
    out[0:C] += x[tile_m, 0:C]
    out[0] += x[tile_m, 0]


def _same_bits(kernel: Any, *args: np.ndarray, out: int, **launch: Any) -> None:
    want = _tile_result(kernel, *args, **launch)[out]
    for order in ORDERS:
        got = _target_result(kernel, *args, cta_order=order, **launch)[out]
        assert got.tobytes() == want.tobytes(), order


@settings(max_examples=10, deadline=None)
@given(tiles=st.integers(1, 9), cols=st.integers(1, 200), seed=st.integers(0, 2**31 - 1))
def test_overlapping_windows_have_the_tile_bits(tiles: int, cols: int, seed: int) -> None:
    """Any number of tiles, rows of any length (elements past a chunk's end masked)."""
    rng = np.random.default_rng(seed)
    x, out = _spread(rng, (tiles, cols)), _spread(rng, (tiles + cols,))
    _same_bits(overlapping_bands, x, out, out=1, tile_shape=(1,), grid=tiles)


@pytest.mark.parametrize("kernel", [bands_in_a_loop, adds_in_a_branch])
def test_loops_branches_and_several_updates_have_the_tile_bits(kernel: Any) -> None:
    rng = np.random.default_rng(7)
    x = _spread(rng, (6, 64))
    out = _spread(rng, (72,) if kernel is bands_in_a_loop else (64,))
    _same_bits(kernel, x, out, out=1, tile_shape=(1,), grid=6)


def test_a_window_chosen_by_data_has_the_tile_bits() -> None:
    rng = np.random.default_rng(8)
    x, key = _spread(rng, (10, 48)), rng.integers(0, 3, 10).astype(np.int32)
    _same_bits(rows_by_key, x, key, _spread(rng, (3, 48)), out=2, tile_shape=(1,), grid=10)


@pytest.mark.parametrize("target", TARGETS)
def test_the_rows_assemble_without_float_red(target: str) -> None:
    rng = np.random.default_rng(9)
    compiled = compile_kernel(bands_in_a_loop, _spread(rng, (6, 64)), np.zeros(72, np.float32),
                              target=target, tile_shape=(1,), grid=6)
    ptx = compiled.ptx
    assert F32_RED not in ptx and ptx.count("atom.") == 1
    assert "__tessera_bands_in_a_loop_rows_tags[96]" in ptx  # 6 CTAs x 4 events
    log = compiled.assemble().log
    assert "advisory" not in log.lower() and " 0 bytes spill stores" in log


def test_what_the_rows_cannot_number_keeps_red_or_is_refused() -> None:
    """A loop of loaded trip count keeps ``red.global.add.f32``; one tensor updated
    as a tile and as an element is refused at the kernel."""
    x = np.ones((4, 32), np.float32)
    ptx = compile_kernel(rows_counted, x, np.array([2], np.int32), np.zeros(32, np.float32),
                         target="sm_80", tile_shape=(1,), grid=4).ptx
    assert F32_RED in ptx
    with pytest.raises(UnsupportedError, match="both as a tile") as info:
        compile_kernel(tile_and_element, x, np.zeros(32, np.float32), target="sm_80",
                       tile_shape=(1,), grid=4)
    assert "test_ordered_rows.py" in str(info.value)


@ts.kernel
def rows_read_back(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32],
                   y: ts.Tensor["R", "C", ts.f32]):
    """Odd tiles add into their own row of ``out``, and every tile reads its row."""
    if tile_m % 2 == 1:
        out[tile_m, 0:C] += x[tile_m, 0:C]
    y[tile_m, 0:C] = out[tile_m, 0:C]


def test_a_tile_reads_its_own_rows() -> None:
    """A tensor the kernel also reads is not recorded as rows (the tile's read would
    come before the kernel's end): the update stays in place, as the interpreters see it."""
    rng = np.random.default_rng(10)
    x, out = _spread(rng, (6, 32)), np.ones((6, 32), np.float32)
    ts.check_against_reference(rows_read_back, x, out, np.zeros((6, 32), np.float32),
                               backend="target", target="sm_80", tile_shape=(1,), grid=6)
