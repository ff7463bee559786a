"""Ordered updates in loops, in the arms of an ``if`` and at elements chosen by loaded
data (tessera.lower.rules.ordered.scalar, ordered_fold): every execution of an update is an
event of its tile in program order, and the last CTA applies the events in tile order,
then program order, as the tile interpreter does, whichever order the CTAs' tickets
land in. An update the scheme cannot number is refused with the kernel's line."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.lower.rules.ordered.events import events_of
from tests.lower import kernels
from tests.lower.test_ordered import F32_RED, TARGETS, _target_result, _tile_result

ORDERS = ("ascending", "descending")


@ts.kernel
def loop_and_arms(x: ts.Tensor["N", ts.f32], key: ts.Tensor["N", ts.int32],
                  out: ts.Tensor["B", ts.f32]):
    """Updates before, inside and after a loop of step 2, in both arms of an ``if``,
    at a fixed element, an element of the tile and one its key names; ``*=`` and
    ``-=`` have no atomic at all."""
    i = ts.tile.linear_id()
    if i < N:
        out[0] += x[i]
        for k in range(0, 6, 2):
            out[key[i]] *= x[i]
            if k > 0:
                out[(i + k) % B] += x[i] * k
            else:
                out[1] -= x[i]
        out[0] *= 1.25


@ts.kernel
def nested_loops(x: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    """One element updated in a loop nest: events ``3 j + k``."""
    i = ts.tile.linear_id()
    for j in range(2):
        for k in range(1, 4):
            total[0] += x[i] * (j + k)


@ts.kernel
def counted_by_data(x: ts.Tensor["N", ts.f32], count: ts.Tensor[1, ts.int32],
                    total: ts.Tensor[1, ts.f32]):
    """A loop whose trip count is loaded: its updates cannot be numbered."""
    i = ts.tile.linear_id()
    for _ in range(count[0]):
        total[0] *= x[i]


@ts.kernel
def counted_adds(x: ts.Tensor["N", ts.f32], count: ts.Tensor[1, ts.int32],
                 total: ts.Tensor[1, ts.f32]):
    """The same loop adding: an f32 '+=' keeps its atomic add."""
    i = ts.tile.linear_id()
    for _ in range(count[0]):
        total[0] += x[i]


def _inputs(n: int, bins: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    x = (1 + rng.standard_normal(n) / 8).astype(np.float32)
    x[::3] *= np.float32(1e4)  # magnitudes far apart: the order shows in the bits
    key = rng.integers(0, bins, n).astype(np.int32)
    return x, key, rng.standard_normal(bins).astype(np.float32)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 400), bins=st.integers(2, 9), seed=st.integers(0, 2**31 - 1),
       launch=st.sampled_from([{}, {"grid": 3, "group_size": 64}]))
def test_loops_and_arms_have_the_tile_bits(n: int, bins: int, seed: int,
                                           launch: dict[str, Any]) -> None:
    """Both CTA orders give the tile interpreter's bits for any size and number of
    bins (launches of several CTAs, tiles sharing elements in every way)."""
    x, key, out = _inputs(n, bins, seed)
    if launch:
        launch = {"grid": -(-n // 64), "group_size": 64}
    want = _tile_result(loop_and_arms, x, key, out, **launch)[2]
    for order in ORDERS:
        got = _target_result(loop_and_arms, x, key, out, cta_order=order, **launch)[2]
        assert got.tobytes() == want.tobytes(), order


def test_the_events_follow_the_program() -> None:
    """The event numbers: one before the loop, each trip's three (the loop's update,
    then the arms' two), one after; a loop nest counts its trips' products."""
    events = events_of(compile_kernel(loop_and_arms, *_inputs(10, 4, 0), target="sm_80").tile)
    assert events.per_tile == 1 + 3 * 3 + 1
    assert sorted(events.offsets.values()) == [0, 1, 2, 3, 10]
    assert sorted(events.strides.values()) == [3]
    x = np.ones(10, np.float32)
    nest = events_of(compile_kernel(nested_loops, x, np.zeros(1, np.float32),
                                    target="sm_80").tile)
    assert nest.per_tile == 6 and sorted(nest.strides.values()) == [1, 3]


@pytest.mark.parametrize("target", TARGETS)
def test_the_ptx_has_no_float_atomic_and_assembles(target: str) -> None:
    """No float ``red``: the events go to slots (with their addresses, as an element
    depends on data), the ticket is the only atomic; ptxas has no advisory."""
    x, key, out = _inputs(300, 7, 1)
    compiled = compile_kernel(loop_and_arms, x, key, out, target=target)
    ptx = compiled.ptx
    assert F32_RED not in ptx and ptx.count("atom.") == 1
    threads = int(np.prod(compiled.grid) * np.prod(compiled.block))
    assert threads >= 300 and f".b8 __tessera_loop_and_arms_ord_tags[{4 * threads * 11}];" in ptx
    assert "__tessera_loop_and_arms_ord_dests" in ptx
    log = compiled.assemble().log
    assert "advisory" not in log.lower() and " 0 bytes spill stores" in log


def test_a_loop_nest_has_the_tile_bits() -> None:
    x = (np.random.default_rng(2).standard_normal(200) * 1e3).astype(np.float32)
    total = np.array([0.5], np.float32)
    want = _tile_result(nested_loops, x, total)[1]
    for order in ORDERS:
        assert _target_result(nested_loops, x, total, cta_order=order)[1].tobytes() == \
            want.tobytes()


def test_a_block_kernel_keeps_a_slot_per_cta() -> None:
    """A block kernel's scalar update runs once per tile (thread 0 of its CTA): one
    slot per CTA, not per thread, so the last CTA folds 32 slots, not 4096."""
    x = np.ones(1024, np.float32)
    ptx = compile_kernel(kernels.tiles_add_a_scalar, x, np.zeros(1, np.float32),
                         target="sm_80", tile_shape=(32,)).ptx
    assert ".b8 __tessera_tiles_add_a_scalar_ord_tags[128];" in ptx


def test_an_update_that_cannot_be_numbered_is_refused() -> None:
    """``*=`` in a loop of loaded trip count has no atomic and no event number: refused
    at the kernel's line (before, a plain read-modify-write lost updates on a GPU);
    ``+=`` of f32 there keeps ``red``."""
    x, count = np.ones(64, np.float32), np.array([3], np.int32)
    with pytest.raises(UnsupportedError, match=r"'\*=' of a global element") as info:
        compile_kernel(counted_by_data, x, count, np.ones(1, np.float32), target="sm_80")
    assert "test_ordered_events.py" in str(info.value)
    assert "after the loop" in str(info.value)
    ptx = compile_kernel(counted_adds, x, count, np.ones(1, np.float32), target="sm_80").ptx
    assert F32_RED in ptx


@ts.kernel
def bins_read_back(x: ts.Tensor["N", ts.f32], key: ts.Tensor["N", ts.int32],
                   bins: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    """Each tile updates the bin its key names and reads it back."""
    i = ts.tile.linear_id()
    bins[key[i]] += x[i]
    y[i] = bins[key[i]]


@ts.kernel
def scales_read_back(x: ts.Tensor["N", ts.f32], key: ts.Tensor["N", ts.int32],
                     bins: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    bins[key[i]] *= x[i]
    y[i] = bins[key[i]]


@ts.kernel
def one_tile_reads_back(x: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32],
                        y: ts.Tensor[1, ts.f32]):
    total[0] *= x[0]
    y[0] = total[0]


def test_a_tile_reads_its_own_update() -> None:
    """An update the kernel reads back is not deferred to the kernel's end, where the
    tile's read would miss it: one tile's is a plain read-modify-write, an f32 ``+=``
    of several tiles stays ``red`` (each tile reads an element no other tile updates:
    the tile interpreter reports a race otherwise), and a ``*=`` is refused."""
    rng = np.random.default_rng(13)
    x, key = rng.standard_normal(64).astype(np.float32), rng.permutation(64).astype(np.int32)
    bins, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    ts.check_against_reference(bins_read_back, x, key, bins, y, backend="target",
                               target="sm_80")
    ts.check_against_reference(one_tile_reads_back, x, bins[:1], y[:1], backend="target",
                               target="sm_80", grid=1)
    assert F32_RED in compile_kernel(bins_read_back, x, key, bins, y, target="sm_80").ptx
    with pytest.raises(UnsupportedError, match="also reads that tensor"):
        compile_kernel(scales_read_back, x, key, bins, y, target="sm_80")


@ts.kernel
def tiles_scale_their_own(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i < N:
        out[i] *= x[i]


@ts.kernel
def tiles_scale_strided(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i < N:
        out[(i * 7) % N] *= x[i]


def test_a_launch_too_large_to_keep_finds_monotonic_elements(monkeypatch: Any) -> None:
    """Beyond the launch whose addresses are kept, elements that increase (or decrease)
    thread by thread are still each tile's own (a plain read-modify-write); others
    (a stride of 7, distinct but not in order) cannot be told apart, and their ``*=``
    is refused."""
    from tessera.lower.rules.ordered import scalar

    monkeypatch.setattr(scalar, "MAX_EVALUATED", 16)
    x, out = np.ones(300, np.float32), np.ones(300, np.float32)
    ptx = compile_kernel(tiles_scale_their_own, x, out, target="sm_80").ptx
    assert "atom" not in ptx and "__tessera" not in ptx
    with pytest.raises(UnsupportedError, match="too many updates"):
        compile_kernel(tiles_scale_strided, x, out, target="sm_80")


@ts.kernel
def adds_and_reads(x: ts.Tensor["N", ts.f32], total: ts.Tensor[2, ts.f32],
                   y: ts.Tensor["N", ts.f32]):
    """Every tile adds into ``total[0]`` and reads ``total[1]``: a tensor the kernel
    reads keeps ``red`` (no tile reads an element another writes: no race)."""
    i = ts.tile.linear_id()
    if i < N:
        total[0] += x[i]
        y[i] = total[1]


def test_the_check_reports_a_result_that_depends_on_the_schedule() -> None:
    """What the schemes cannot order stays ``red``, and ``check_against_reference`` on
    the Target IR backend runs such a kernel in both CTA orders: bits that differ are
    reported, although the first order alone agrees with the tile interpreter."""
    from tessera.errors import InterpretError

    x = (np.random.default_rng(14).standard_normal(300) * 1e4).astype(np.float32)
    x[::7] = 1e-3
    total, y = np.array([0.5, 2.0], np.float32), np.zeros(300, np.float32)
    assert _target_result(adds_and_reads, x, total, y)[1].tobytes() == \
        _tile_result(adds_and_reads, x, total, y)[1].tobytes()
    with pytest.raises(InterpretError, match="depends on the order") as info:
        ts.check_against_reference(adds_and_reads, x, total, y, backend="target",
                                   target="sm_80")
    assert "read in a second launch" in str(info.value)
    # one CTA: its threads' atomics of one element land in arrival order as well
    one = (x[:100], total, y[:100])
    assert _target_result(adds_and_reads, *one)[1].tobytes() == \
        _tile_result(adds_and_reads, *one)[1].tobytes()
    with pytest.raises(InterpretError, match="last thread's first"):
        ts.check_against_reference(adds_and_reads, *one, backend="target", target="sm_80")
    ts.check_against_reference(tiles_scale_their_own, x, np.ones(300, np.float32),
                               backend="target", target="sm_80")
