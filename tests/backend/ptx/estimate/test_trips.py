"""Trip counts and thread splits of the static estimate that depend on ``ctaid`` and on
``tid.x`` (a consumer warpgroup's own query tile), on small hand-built Target IR and on
the warp-specialised flash attention, against counts worked out independently."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.estimate import census as census_mod
from tessera.backend.ptx.estimate import estimate, trips
from tessera.backend.ptx.estimate.threads import split_threads
from tessera.conformance.kernels.flash_attention import flash_attention
from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects.target import For, TensorMapType, async_ops
from tessera.ir.dialects.target.async_ops import TmaLoad
from tessera.ir.dialects.target.ops import Cvt
from tests.interp.target.kit import Kernel


def loop_to(hi: Any, block: int = 256, grid: int = 4) -> tuple[Function, Instr]:
    """A kernel of one empty loop from 0 to ``hi(k)``, ``k`` the kernel builder."""
    k = Kernel("bounds", [], block=(block,), grid=(grid, 1, 1), target="sm_90a")
    k.for_(k.const(0, "s32"), hi(k), k.const(1, "s32"), [], lambda i: None)
    fn = k.build()
    return fn, next(i for i in walk(fn) if isinstance(i.op, For))


def wg_tile(k: Kernel, per_cta: int = 4, per_wg: int = 2) -> Value:
    """``per_cta * ctaid.x + per_wg * (tid.x >> 7)`` as s32."""
    wg = k.bin("shr", "u32", k.tid(), k.const(7, "u32"))
    cta = k.sreg("ctaid.x")
    total = k.bin("add", "u32", k.bin("mul", "u32", cta, k.const(per_cta, "u32")),
                  k.bin("mul", "u32", wg, k.const(per_wg, "u32")))
    return k.op(Cvt("s32", "u32"), total)


def test_bounds_per_warpgroup_are_the_mean_over_ctas_and_warpgroups() -> None:
    fn, loop = loop_to(wg_tile)
    # CTAs 0, 1, 2, 3 and warpgroups 0, 1: 4 c + 2 w = 0, 2, 4, ..., 14: mean 7
    assert trips.trip_count(loop, [4, 1, 1], range(256)) == 7
    assert trips.trip_count(loop, [4, 1, 1], range(128, 256)) == 8  # warpgroup 1 alone
    assert trips.trip_count(loop, [1, 1, 1], range(128)) == 0
    assert trips.trip_count(loop, [4, 1, 1]) is None  # which threads run it is needed
    assert census_mod.loops(fn.body, grid=[4, 1, 1], threads=range(256))[0][1] == 7
    assert estimate(fn).runs == 7


def test_a_loop_known_to_run_no_trip_counts_none() -> None:
    """A count of 0 (the odd iteration's loop after an even number of key blocks, say)
    is 0, not the unknown count's 1."""
    fn, loop = loop_to(lambda k: k.const(0, "s32"))
    assert trips.trip_count(loop, [4, 1, 1], range(256)) == 0
    assert census_mod.loops(fn.body, grid=[4, 1, 1], threads=range(256))[0][1] == 0
    unknown, _ = loop_to(lambda k: k.op(Cvt("s32", "u32"), k.sreg("laneid")))
    assert census_mod.loops(unknown.body, grid=[4, 1, 1], threads=range(256))[0][1] == 1


def test_min_and_max_bounds() -> None:
    def hi(k: Kernel) -> Value:  # min(max(3 ctaid.x, 2), 7) over CTAs 0..3: 2, 3, 6, 7
        cta = k.op(Cvt("s32", "u32"), k.sreg("ctaid.x"))
        low = k.bin("max", "s32", k.bin("mul", "s32", cta, k.const(3, "s32")), k.const(2, "s32"))
        return k.bin("min", "s32", low, k.const(7, "s32"))
    _, loop = loop_to(hi)
    assert trips.trip_count(loop, [4, 1, 1]) == round((2 + 3 + 6 + 7) / 4)


def test_a_loop_that_reads_memory_has_no_trip_count() -> None:
    _, loop = loop_to(lambda k: k.op(Cvt("s32", "u32"), k.sreg("laneid")))
    assert trips.trip_count(loop, [4, 1, 1], range(256)) is None


def test_one_elected_thread_per_warpgroup() -> None:
    k = Kernel("split", [], block=(384,), target="sm_90a")
    inner = k.bin("and", "u32", k.tid(), k.const(127, "u32"))
    first = k.setp("eq", "u32", inner, k.const(0, "u32"))
    group = k.setp("eq", "u32", k.bin("shr", "u32", k.tid(), k.const(7, "u32")),
                   k.const(1, "u32"))
    odd = k.setp("eq", "u32", k.bin("rem", "u32", k.tid(), k.const(3, "u32")), k.const(1, "u32"))
    consumers = range(256)
    assert split_threads(first, consumers) == (range(0, 256, 128), consumers)
    assert split_threads(first, range(384)) == (range(0, 384, 128), range(384))
    assert split_threads(group, range(384)) == (range(128, 256), range(384))  # not a range
    assert split_threads(group, consumers) == (range(128, 256), range(0, 128))
    assert split_threads(odd, range(8)) == (range(1, 8, 3), range(8))


def test_each_loop_is_counted_once_per_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    fn, _ = loop_to(wg_tile)
    seen: list[int] = []
    original = trips.trip_count

    def counting(loop: Instr, *args: Any) -> int | None:
        seen.append(id(loop))
        return original(loop, *args)

    monkeypatch.setattr(trips, "trip_count", counting)
    assert estimate(fn).runs == 7
    assert len(seen) == len(set(seen)) == 1


def producer_with_grid_bounds() -> Function:
    """Thread 128 copies one box an iteration for 16 iterations, its bound written with
    ``ctaid.x`` (``16 + 0 ctaid.x``); threads 0..127 wait on the same 16 iterations."""
    k = Kernel("ws", [TensorMapType(0, "bf16", (64, 64), 128)], block=(256,), grid=(8, 1, 1),
               target="sm_90a")
    bars = k.shared("bars", 32, 8)
    for _ in range(4):
        k.op(async_ops.MbarrierInit(1), bars)
    buf = k.shared("ring", 16384, 1024)
    zero, one = k.const(0, "s32"), k.const(1, "s32")
    cta = k.op(Cvt("s32", "u32"), k.sreg("ctaid.x"))
    grid_hi = k.bin("add", "s32", k.bin("mul", "s32", cta, zero), k.const(16, "s32"))

    def fill(i: Value) -> None:
        c = k.const(0, "s32")
        k.op(async_ops.TmaLoad(), buf, k.args[0], c, c, bars)

    def consume(i: Value) -> None:
        k.op(async_ops.MbarrierWait(), bars, k.const(0, "u32"))

    k.if_(k.setp("eq", "u32", k.tid(), k.const(128, "u32")),
          lambda: k.for_(zero, grid_hi, one, [], fill) and None,
          lambda: k.for_(zero, k.const(16, "s32"), one, [], consume) and None)
    return k.build()


def test_a_producer_loop_bounded_by_ctaid_is_a_companion() -> None:
    fn = producer_with_grid_bounds()
    est = estimate(fn)
    assert est.runs == 16 and est.iteration is not None
    assert est.iteration.tma_copies == 1 and est.iteration.tma_bytes == 64 * 64 * 2
    assert est.outside.resources["memory"] == 0  # not also counted as a prologue


def warp_specialised(seq: int, causal: bool, d: int = 64) -> Any:
    q = np.zeros((1, seq, d), ml_dtypes.bfloat16)
    config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=12, num_stages=2)
    return ts.compile_kernel(flash_attention, q, q, q, is_causal=causal, target="sm_90a",
                             config=config, mode="fast").kernel


def key_loops(kernel: Function) -> tuple[list[Instr], Instr]:
    """The consumers' key loops and the producer's loop."""
    every = [f for f, _, _ in census_mod.loops(kernel.body)]
    producer = [f for f in every if census_mod.loop_threads(kernel, f) == range(256, 257)]
    assert len(producer) == 1
    return [f for f in every if f is not producer[0]], producer[0]


def test_each_consumer_copies_its_query_tile_from_one_thread() -> None:
    kernel = warp_specialised(512, causal=False)
    copies = [i for i in walk(kernel) if isinstance(i.op, TmaLoad)]
    consumers, producer = key_loops(kernel)
    outside = census_mod.census(kernel, skip=(producer, *consumers))
    # one 64-row query box for each of the two consumer warpgroups
    box = next(i.operands[1].type for i in copies if i.operands[1].type.box[1] == 64)
    assert outside.tma_copies == 2
    assert outside.tma_bytes == 2 * box.box[0] * box.box[1] * 2


@pytest.mark.parametrize("seq", [512, 640])
def test_causal_consumer_trip_counts_per_warpgroup(seq: int) -> None:
    kernel = warp_specialised(seq, causal=True)
    grid = kernel.attrs["grid"]
    tiles = seq // 64
    (below, diagonal), producer = key_loops(kernel)
    counts = census_mod.TripCounts(grid)
    # query tile t of 64 rows runs t key blocks below its diagonal and one on it;
    # consumer w of CTA c has tile 2 c + w
    for w, threads in ((0, range(128)), (1, range(128, 256))):
        assert counts(below, threads) == round(np.mean([2 * c + w for c in range(grid[0])]))
        assert counts(diagonal, threads) == 1
    assert counts(below, range(256)) == round(np.mean([2 * c + w for c in range(grid[0])
                                                       for w in (0, 1)]))
    # the producer loads the blocks of the CTA's last tile: min(2 c + 1, tiles - 1) + 1
    assert counts(producer, range(256, 257)) == round(
        np.mean([min(2 * c + 1, tiles - 1) + 1 for c in range(grid[0])]))
    est = estimate(kernel)
    assert est.runs == counts(below, range(256)) and est.iteration is not None
    assert est.iteration.tma_copies == 2  # one K and one V box a block, not each branch's
    assert census_mod.census(kernel).unknown_trips == 0


def test_a_lone_thread_runs_one_region_of_a_data_dependent_branch() -> None:
    """Thread 0 picks one of two copies by its loop counter: one copy an iteration; a
    branch of the whole CTA is charged both regions (a warp may diverge)."""
    k = Kernel("pick", [TensorMapType(0, "bf16", (64, 64), 128)], block=(128,),
               target="sm_90a")
    buf = k.shared("buf", 8192, 1024)
    bars = k.shared("bars", 8, 8)

    def copy() -> None:
        c = k.const(0, "s32")
        k.op(async_ops.TmaLoad(), buf, k.args[0], c, c, bars)

    def body(i: Value) -> None:
        late = k.setp("ge", "s32", i, k.const(4, "s32"))
        k.if_(late, copy, copy)

    lo, hi, one = k.const(0, "s32"), k.const(8, "s32"), k.const(1, "s32")
    k.if_(k.setp("eq", "u32", k.tid(), k.const(0, "u32")),
          lambda: k.for_(lo, hi, one, [], body) and None)
    k.for_(lo, hi, one, [], body)
    fn = k.build()
    lone, everyone = (census_mod.loop_census(fn, f) for f, _, _ in census_mod.loops(fn.body))
    assert lone.tma_copies == 1
    assert everyone.tma_copies == 2 * 128
