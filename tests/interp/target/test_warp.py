"""Warp specialisation in the Target IR interpreter: elect.sync and setmaxnreg (PTX ISA
sec. 9.7.13.13 and 9.7.19.6), and a producer warp handing data to a consumer warp
through a full/empty mbarrier pair with no bar.sync (the two arms run as coroutines)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interp.target import run_target
from tessera.interp.target.state import TargetFault
from tessera.ir.core import Value
from tessera.ir.dialects.target.ptx_ops import Elect
from tessera.ir.dialects.target.warp_ops import SetMaxNReg
from tests.interp.target.kit import U64, Kernel, async_ops


def test_elect_sync_picks_the_lowest_lane_of_each_warp() -> None:
    k = Kernel("elect", [U64], block=(96,), target="sm_90a")
    p = k.op(Elect())[1]
    warp = k.bin("shr", "u32", k.tid(), k.const(5, "u32"))
    k.if_(p, lambda: k.st("global", "u32", k.elem_addr(k.args[0], warp, 4), k.tid()))
    out = np.full(3, 7, np.uint32)
    run_target(k.build(), [out])
    assert out.tolist() == [0, 32, 64]


def test_elect_sync_in_a_diverged_warp_is_caught() -> None:
    k = Kernel("elect_div", [], block=(32,), target="sm_90a")
    half = k.setp("lt", "u32", k.tid(), k.const(16, "u32"))
    k.if_(half, lambda: k.op(Elect()))
    with pytest.raises(TargetFault, match="warp divergence"):
        run_target(k.build(), [])


def test_setmaxnreg_needs_the_whole_warpgroup() -> None:
    k = Kernel("maxnreg", [], block=(128,), target="sm_90a")
    k.op(SetMaxNReg(40, inc=False))  # all four warps: fine
    some = k.setp("lt", "u32", k.tid(), k.const(64, "u32"))
    k.if_(some, lambda: k.op(SetMaxNReg(232)))
    with pytest.raises(TargetFault, match=r"setmaxnreg \{count = 232\}: warp divergence"):
        run_target(k.build(), [])


def handoff(rounds: int, consumer_waits: bool = True, consumer_releases: bool = True,
            ) -> Kernel:
    """Warp 1 writes ``100 r + lane`` to a shared slot per round; warp 0 copies it to
    global memory; full/empty mbarriers (32 arrivals each) order the rounds."""
    k = Kernel("handoff", [U64], block=(64,), target="sm_90a")
    buf = k.shared("buf", 128)
    bars = k.shared("bars", 16, 8)
    full, empty = bars, k.bin("add", "u32", bars, k.const(8, "u32"))
    first = k.setp("eq", "u32", k.tid(), k.const(0, "u32"))

    def init() -> None:
        k.op(async_ops.MbarrierInit(32), full)
        k.op(async_ops.MbarrierInit(32), empty)
    k.if_(first, init)
    k.op(async_ops.Fence("mbarrier_init"))
    k.bar()
    lane = k.bin("and", "u32", k.tid(), k.const(31, "u32"))
    slot = k.sh_addr(buf, lane, 4)
    one = k.const(1, "u32")

    def parity(r: Value, flip: bool) -> Value:
        p = k.bin("and", "u32", k.cvt("u32", "s32", r), one)
        return k.bin("xor", "u32", p, one) if flip else p

    def producer(r: Value) -> None:
        k.op(async_ops.MbarrierWait(), empty, parity(r, True))
        value = k.bin("add", "u32", k.bin("mul", "u32", k.cvt("u32", "s32", r),
                                          k.const(100, "u32")), lane)
        k.st("shared", "u32", slot, value)
        k.op(async_ops.MbarrierArrive(), full)

    def consumer(r: Value) -> None:
        if consumer_waits:
            k.op(async_ops.MbarrierWait(), full, parity(r, False))
        index = k.bin("add", "u32", k.bin("mul", "u32", k.cvt("u32", "s32", r),
                                          k.const(32, "u32")), lane)
        k.st("global", "u32", k.elem_addr(k.args[0], index, 4), k.ld("shared", "u32", slot))
        if consumer_releases:
            k.op(async_ops.MbarrierArrive(), empty)

    lo, hi, st = k.const(0, "s32"), k.const(rounds, "s32"), k.const(1, "s32")
    is_producer = k.setp("ge", "u32", k.tid(), k.const(32, "u32"))
    k.if_(is_producer, lambda: k.for_(lo, hi, st, [], producer),
          lambda: k.for_(lo, hi, st, [], consumer))
    return k


def test_producer_and_consumer_warps_hand_off_through_mbarriers() -> None:
    """No bar.sync between the rounds: the mbarrier phases order the shared accesses,
    which the race check accepts."""
    out = np.zeros(4 * 32, np.uint32)
    run_target(handoff(4).build(), [out])
    assert out.tolist() == [100 * r + lane for r in range(4) for lane in range(32)]


def test_consumer_that_does_not_wait_races_with_the_producer() -> None:
    out = np.zeros(4 * 32, np.uint32)
    with pytest.raises(TargetFault, match="shared memory race"):
        run_target(handoff(4, consumer_waits=False).build(), [out])


def test_a_hang_is_reported_not_run_forever() -> None:
    """A consumer that never arrives on ``empty``: the producer's second round waits for
    a phase no thread can complete."""
    with pytest.raises(TargetFault, match="never completes"):
        run_target(handoff(2, consumer_releases=False).build(), [np.zeros(64, np.uint32)])
