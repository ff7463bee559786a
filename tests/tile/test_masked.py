"""Masked (edge-tile) accesses: ``ts.tile.load(ref, mask=, other=)`` and
``ts.tile.store(ref, value, mask=)`` against NumPy, bit for bit, in every mode and
schedule; the sanitizer's view of them (a masked-off element is never accessed, a
masked-on element outside the tensor is reported at that element); compile errors at
the user's line; and the Tile IR text of the ops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import IRVerifyError
from tessera.interp.tile.errors import SanitizerError
from tessera.interp.tile.launcher import SCHEDULES
from tessera.ir import parse_module, print_module, verify_module
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType
from tessera.numerics import dtype

BM, BN = 8, 16
MODES = ("reference", "checked", "fast")
HERE = Path(__file__).read_text().splitlines()


def _line(tag: str) -> int:
    return next(k + 1 for k, line in enumerate(HERE) if line.rstrip().endswith(f"# {tag}"))


@ts.kernel
def scale_edges(a: ts.Tensor["M", "N", ts.f32], b: ts.Tensor["M", "N", ts.f32]):
    ctx = ts.tile.context()
    nt = (ctx.N + 15) // 16
    pid = ts.tile.linear_id()
    i = (pid // nt) * 8
    j = (pid % nt) * 16
    rows = (i + ts.tile.arange(8)) < ctx.M
    cols = (j + ts.tile.arange(16)) < ctx.N
    m = rows[:, None] & cols[None, :]
    x = ts.tile.load(a[i:i + 8, j:j + 16], mask=m, other=-7.0)
    ts.tile.store(b[i:i + 8, j:j + 16], x * 2.0 + 1.0, mask=m)


@ts.kernel
def unmasked_edges(a: ts.Tensor["M", "N", ts.f32], b: ts.Tensor["M", "N", ts.f32]):
    ctx = ts.tile.context()
    nt = (ctx.N + 15) // 16
    pid = ts.tile.linear_id()
    i = (pid // nt) * 8
    j = (pid % nt) * 16
    b[i:i + 8, j:j + 16] = a[i:i + 8, j:j + 16] * 2.0  # UNMASKED


@ts.kernel
def leaky_mask(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32]):
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    m = (i + ts.tile.arange(16)) <= ctx.N  # one lane too many
    x = ts.tile.load(a[i:i + 16], mask=m, other=0.0)  # LEAKY LOAD
    ts.tile.store(b[i:i + 16], x, mask=m)


@ts.kernel
def leaky_store(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32]):
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    m = (i + ts.tile.arange(16)) < ctx.N
    x = ts.tile.load(a[i:i + 16], mask=m, other=0.0)
    ts.tile.store(b[i:i + 16], x, mask=(i + ts.tile.arange(16)) < ctx.N + 2)  # LEAKY STORE


@ts.kernel
def padded_sum(a: ts.Tensor["N", ts.f32], out: ts.Tensor["G", ts.f32]):
    ctx = ts.tile.context()
    pid = ts.tile.linear_id()
    i = pid * 16
    x = ts.tile.load(a[i:i + 16], mask=(i + ts.tile.arange(16)) < ctx.N, other=0.0)
    out[pid] = ts.tile.reduce_sum(x)


def _grid(m: int, n: int) -> int:
    return -(-m // BM) * -(-n // BN)


def _expected(a: np.ndarray) -> np.ndarray:
    return (a * np.float32(2.0) + np.float32(1.0)).astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_masked_edge_tiles_match_numpy(mode: str, schedule: str) -> None:
    m, n = 13, 21  # not multiples of the 8x16 tile
    a = np.random.default_rng(0).standard_normal((m, n)).astype(np.float32)
    b = np.full((m, n), np.nan, np.float32)
    scale_edges(a, b, grid=_grid(m, n), mode=mode, schedule=schedule)
    assert np.array_equal(b, _expected(a))


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 30), n=st.integers(1, 40), seed=st.integers(0, 2**16),
       mode=st.sampled_from(MODES), schedule=st.sampled_from(SCHEDULES))
def test_masked_edge_tiles_of_any_shape(m: int, n: int, seed: int, mode: str,
                                        schedule: str) -> None:
    a = np.random.default_rng(seed).standard_normal((m, n)).astype(np.float32)
    b = np.zeros((m, n), np.float32)
    scale_edges(a, b, grid=_grid(m, n), mode=mode, schedule=schedule)
    assert np.array_equal(b, _expected(a))


@pytest.mark.parametrize("mode", MODES)
def test_masked_off_lanes_read_other(mode: str) -> None:
    a = np.arange(1, 38, dtype=np.float32)  # 37 elements: 3 tiles, the last one ragged
    out = np.zeros(3, np.float32)
    padded_sum(a, out, grid=3, mode=mode)
    want = np.array([a[k * 16:(k + 1) * 16].astype(np.float64).sum() for k in range(3)],
                    np.float32)
    assert np.array_equal(out, want)


def test_an_unmasked_edge_tile_is_an_out_of_bounds_report() -> None:
    a = np.zeros((13, 21), np.float32)
    with pytest.raises(ts.tile.SanitizerError) as info:
        unmasked_edges(a, np.zeros_like(a), grid=_grid(13, 21))
    assert info.value.kind == "out-of-bounds" or "out of bounds" in str(info.value)
    assert info.value.loc.line == _line("UNMASKED")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_mask_that_lets_one_lane_out_is_reported_at_that_element(mode: str,
                                                                   schedule: str) -> None:
    a = np.zeros(37, np.float32)
    with pytest.raises(ts.tile.SanitizerError) as info:
        leaky_mask(a, np.zeros_like(a), grid=3, mode=mode, schedule=schedule)
    err = info.value
    assert err.loc.line == _line("LEAKY LOAD") and err.index == (37,) and err.memory == "a"
    assert err.lane == 5  # element 5 of the tile at 32
    with pytest.raises(ts.tile.SanitizerError) as info:
        leaky_store(a, np.zeros_like(a), grid=3, mode=mode, schedule=schedule)
    err = info.value
    assert err.loc.line == _line("LEAKY STORE") and err.index == (37,) and err.memory == "b"


@pytest.mark.parametrize("mode", MODES)
def test_masked_stores_leave_masked_off_elements_alone(mode: str) -> None:
    a = np.random.default_rng(1).standard_normal(37).astype(np.float32)
    b = np.full(37, 5.0, np.float32)

    @ts.kernel
    def odd_only(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32]):
        ctx = ts.tile.context()
        i = ts.tile.linear_id() * 16
        k = i + ts.tile.arange(16)
        m = (k < ctx.N) & (k % 2 == 1)
        ts.tile.store(b[i:i + 16], ts.tile.load(a[i:i + 16], mask=m, other=0.0), mask=m)

    odd_only(a, b, grid=3, mode=mode)
    want = np.where(np.arange(37) % 2 == 1, a, np.float32(5.0))
    assert np.array_equal(b, want)


def _compile_error(src_kernel, *args) -> ts.TesseraError:  # type: ignore[no-untyped-def]
    with pytest.raises(ts.tile.KernelCompileError) as info:
        src_kernel(*args, grid=1)
    return info.value


def test_wrong_masks_are_compile_errors_at_their_line() -> None:
    x = np.zeros(16, np.float32)

    @ts.kernel
    def wrong_shape(a: ts.Tensor[16, ts.f32]):
        a[0:16] = ts.tile.load(a[0:16], mask=ts.tile.arange(8) < 4)  # WRONG SHAPE

    @ts.kernel
    def not_bool(a: ts.Tensor[16, ts.f32]):
        a[0:16] = ts.tile.load(a[0:16], mask=ts.tile.arange(16))  # NOT BOOL

    @ts.kernel
    def tile_other(a: ts.Tensor[16, ts.f32]):
        m = ts.tile.arange(16) < 4
        a[0:16] = ts.tile.load(a[0:16], mask=m, other=a[0:16])  # TILE OTHER

    @ts.kernel
    def no_mask(a: ts.Tensor[16, ts.f32]):
        ts.tile.store(a[0:16], 1.0)  # NO MASK

    for kernel, tag, words in ((wrong_shape, "WRONG SHAPE", "does not broadcast"),
                               (not_bool, "NOT BOOL", "must be bool"),
                               (tile_other, "TILE OTHER", "must be a scalar"),
                               (no_mask, "NO MASK", "needs mask=")):
        err = _compile_error(kernel, x.copy())
        assert err.loc.line == _line(tag) and err.loc.file == __file__, tag
        assert words in str(err), tag


def test_masked_ops_round_trip_through_text() -> None:
    a = np.zeros((13, 21), np.float32)
    text = scale_edges.inspect_ir("tile", a, a.copy(), grid=_grid(13, 21))
    assert "tile.masked_load(" in text and "tile.masked_store(" in text
    assert "tile.arange()" in text
    module = parse_module(text)
    verify_module(module)
    assert print_module(module) == text


def test_invalid_masked_ops_are_rejected() -> None:
    f32, boolean, i64 = dtype("f32"), dtype("bool"), dtype("int64")
    mem = MemRefType("global", (10,), f32)
    start, other = TensorType((), i64), TensorType((), f32)
    with pytest.raises(IRVerifyError, match="bool mask"):
        tile_memory.MaskedLoad((4,)).infer([mem, start, TensorType((4,), f32), other])
    with pytest.raises(IRVerifyError, match="bool mask"):
        tile_memory.MaskedLoad((4,)).infer([mem, start, TensorType((3,), boolean), other])
    with pytest.raises(IRVerifyError, match="scalar"):
        tile_memory.MaskedLoad((4,)).infer([mem, start, TensorType((4,), boolean),
                                            TensorType((4,), f32)])
    with pytest.raises(IRVerifyError, match="starts"):
        tile_memory.MaskedStore((4,)).infer([mem, TensorType((4,), f32),
                                             TensorType((4,), boolean)])
    ok = tile_memory.MaskedLoad((4,)).infer([mem, start, TensorType((4,), boolean), other])
    assert ok == (TensorType((4,), f32),)


@ts.kernel
def shared_half(a: ts.Tensor[16, ts.f32]):
    smem = ts.tile.alloc_shared((16,), ts.f32)
    m = ts.tile.arange(16) < 8
    ts.tile.store(smem[0:16], 1.0, mask=m)
    ts.tile.barrier()
    a[0:16] = smem[0:16]  # SHARED UNINIT


@ts.kernel
def shared_edges(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32], leak: ts.int32):
    """Tiles of 16 staged through a 12-element buffer whose window reaches past its
    end: the mask keeps the accesses inside it (``leak`` 1 lets one element out)."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 12
    smem = ts.tile.alloc_shared((12,), ts.f32)
    inside = (i + ts.tile.arange(16) < ctx.N) & (ts.tile.arange(16) < 12 + leak)
    x = ts.tile.load(a[i:i + 16], mask=inside, other=0.0)
    ts.tile.store(smem[0:16], x * 2.0, mask=inside)  # SHARED STORE
    ts.tile.barrier()
    y = ts.tile.load(smem[0:16], mask=inside, other=-1.0)
    ts.tile.store(b[i:i + 16], y, mask=inside)


@ts.kernel
def shared_neighbours(a: ts.Tensor[8, ts.f32], b: ts.Tensor[8, ts.f32], sync: bool,
                      peek: bool):
    """Each tile of a group of 2 writes its half of a buffer, masked; then reads its
    own half, or (``peek``) both halves: a race on the neighbour's half unless a
    barrier (``sync``) comes between."""
    me = ts.tile.local_id()
    smem = ts.tile.alloc_shared((8,), ts.f32)
    lanes = ts.tile.arange(8)
    mine = (lanes >= me * 4) & (lanes < me * 4 + 4)
    ts.tile.store(smem[0:8], a[0:8] + 1.0, mask=mine)
    if sync:
        ts.tile.barrier()
    theirs = (lanes >= (1 - me) * 4) & (lanes < (1 - me) * 4 + 4)
    seen = mine
    if peek:
        seen = mine | theirs
    got = ts.tile.load(smem[0:8], mask=seen, other=0.0)  # READ
    ts.tile.store(b[0:8], got, mask=mine)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_masked_shared_accesses_match_numpy(mode: str, schedule: str) -> None:
    a = np.random.default_rng(4).standard_normal(41).astype(np.float32)
    b = np.full(41, np.nan, np.float32)
    shared_edges(a, b, 0, grid=4, mode=mode, schedule=schedule)
    assert np.array_equal(b, a * np.float32(2.0))


def test_masked_shared_access_past_the_buffer_is_reported_at_that_element() -> None:
    a = np.ones(41, np.float32)
    with pytest.raises(SanitizerError, match="out of bounds") as info:
        shared_edges(a, np.zeros_like(a), 1, grid=4)
    assert info.value.loc.line == _line("SHARED STORE")
    assert "masked-on element [12] of shared buffer" in str(info.value)


def test_masked_shared_reads_are_checked_for_uninitialised_elements() -> None:
    with pytest.raises(SanitizerError, match="uninitialised") as info:
        shared_half(np.zeros(16, np.float32), grid=1)
    assert info.value.loc.line == _line("SHARED UNINIT")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_masked_shared_races_only_on_masked_on_elements(schedule: str) -> None:
    a = np.arange(8, dtype=np.float32)
    b = np.zeros(8, np.float32)
    for sync, peek in [(True, True), (False, False)]:  # synchronised, or own halves only
        b = np.zeros(8, np.float32)
        shared_neighbours(a, b, sync, peek, grid=1, group_size=2, schedule=schedule)
        assert np.array_equal(b, a + 1)
    with pytest.raises(SanitizerError, match="race") as info:
        shared_neighbours(a, b, False, True, grid=1, group_size=2, schedule=schedule)
    assert info.value.loc.line == _line("READ")
    assert "written by local tile" in str(info.value)


@ts.kernel
def overlapping_stores(b: ts.Tensor["N", ts.f32], own_only: bool):
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 8
    k = ts.tile.arange(16)
    m = (i + k) < ctx.N
    if own_only:
        m = m & (k < 8)
    ts.tile.store(b[i:i + 16], 1.0, mask=m)  # OVERLAP


@ts.kernel
def neighbour_read(b: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32], own_only: bool):
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 8
    k = ts.tile.arange(16)
    ts.tile.store(b[i:i + 16], 2.0, mask=((i + k) < ctx.N) & (k < 8))  # OWN WRITE
    m = (i + k) < ctx.N
    if own_only:
        m = m & (k < 8)
    x = ts.tile.load(b[i:i + 16], mask=m, other=0.0)  # NEIGHBOUR
    ts.tile.store(out[i:i + 16], x, mask=((i + k) < ctx.N) & (k < 8))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_masked_accesses_are_race_checked_where_masked_on(schedule: str) -> None:
    b = np.zeros(20, np.float32)
    overlapping_stores(b, True, grid=3, schedule=schedule)  # masked-off overlap: clean
    assert np.array_equal(b, np.ones(20, np.float32))
    with pytest.raises(ts.tile.SanitizerError) as info:
        overlapping_stores(np.zeros(20, np.float32), False, grid=3, schedule=schedule)
    err = info.value
    assert err.kind == "global write conflict" and err.loc.line == _line("OVERLAP")
    assert err.index[0] in range(8, 20)
    out = np.zeros(20, np.float32)
    neighbour_read(np.zeros(20, np.float32), out, True, grid=3, schedule=schedule)
    assert np.array_equal(out, np.full(20, 2.0, np.float32))
    with pytest.raises(ts.tile.SanitizerError) as info:
        neighbour_read(np.zeros(20, np.float32), out, False, grid=3, schedule=schedule)
    err = info.value
    # tile 0 reads elements 8.. that tile 1 writes: the write after the read, in
    # program order, whatever the schedule
    assert err.kind == "race" and err.loc.line == _line("OWN WRITE")
    assert "after a read" in str(err) and err.index[0] in range(8, 20)
