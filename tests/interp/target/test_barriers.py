"""Named barriers in the Target IR interpreter (interp/target/barriers.py): ``bar.sync``
and ``bar.arrive`` between warpgroups that run as tasks, their deadlock and count
checks, and the memory order a completed barrier gives exactly its threads."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tessera.interp.target import TargetFault, run_target
from tessera.interp.target.barriers import BarrierCountError, BarrierDeadlock
from tessera.ir.core import Value

from .kit import U64, Kernel, async_ops, target_ops

TURNS = 3


def _wg(k: Kernel) -> Value:
    return k.bin("shr", "u32", k.tid(), k.const(7, "u32"))


def _each(k: Kernel, wg: Value, first: Callable[[], None], second: Callable[[], None]) -> None:
    """``first`` on warpgroup 0, ``second`` on warpgroup 1 (one branch, uniform per
    warpgroup, as barrier ids are immediates)."""
    k.if_(k.setp("eq", "u32", wg, k.const(0, "u32")), first, second)


def pingpong(*, pre_arrive: bool = True, arrive_count: int = 256) -> Kernel:
    """Two warpgroups take ``TURNS`` turns each, warpgroup 0 first: barrier 1 lets
    warpgroup 0 go, barrier 2 warpgroup 1 (FlashAttention-3's inter-warpgroup
    schedule). In its turn a warpgroup's leader reads the shared counter, logs its own
    number at that position of ``out`` and increments the counter."""
    k = Kernel("pingpong", [U64], block=(256,))
    turn = k.shared("turn", 16)
    tid = k.tid()
    lead0 = k.setp("eq", "u32", tid, k.const(0, "u32"))
    k.if_(lead0, lambda: k.st("shared", "u32", turn, k.const(0, "u32")))
    k.bar()

    def consumers() -> None:
        wg = _wg(k)
        if pre_arrive:  # warpgroup 0 goes first
            _each(k, wg, lambda: None,
                  lambda: k.op(target_ops.BarArrive(1, arrive_count)) and None)

        def step(i: Value) -> None:
            _each(k, wg, lambda: k.op(target_ops.Bar(1, 256)) and None,
                  lambda: k.op(target_ops.Bar(2, 256)) and None)
            lead = k.setp("eq", "u32", k.bin("and", "u32", tid, k.const(127, "u32")),
                          k.const(0, "u32"))

            def critical() -> None:
                n = k.ld("shared", "u32", turn)
                mark = k.bin("add", "u32", k.bin("mul", "u32", wg, k.const(100, "u32")),
                             k.cvt("u32", "s32", i))
                k.st("global", "u32", k.elem_addr(k.args[0], n, 4), mark)
                k.st("shared", "u32", turn, k.bin("add", "u32", n, k.const(1, "u32")))
            k.if_(lead, critical)
            last = k.setp("eq", "s32", i, k.const(TURNS - 1, "s32"))
            # warpgroup 1 does not hand over after its last turn: nobody waits for it
            _each(k, wg, lambda: k.op(target_ops.BarArrive(2, 256)) and None,
                  lambda: k.if_(last, lambda: None, lambda: k.op(
                      target_ops.BarArrive(1, arrive_count)) and None))
        k.for_(k.const(0, "s32"), k.const(TURNS, "s32"), k.const(1, "s32"), [],
               lambda i: step(i))
    k.if_(k.setp("lt", "u32", tid, k.const(256, "u32")), consumers)
    return k


def test_warpgroups_take_turns_at_named_barriers() -> None:
    out = np.full(2 * TURNS, 999, np.uint32)
    run_target(pingpong().build(), [out])
    expect = [w * 100 + i for i in range(TURNS) for w in (0, 1)]
    assert out.tolist() == expect


def test_planted_missing_arrive_is_a_deadlock() -> None:
    """Without warpgroup 1's first arrival each warpgroup waits for the other."""
    with pytest.raises(BarrierDeadlock, match=r"bar.sync 1, 256 never completes: 128 of "
                                              r"256 threads arrived") as err:
        run_target(pingpong(pre_arrive=False).build(), [np.zeros(2 * TURNS, np.uint32)])
    assert err.value.what == "deadlock" and err.value.loc.file == "<pingpong>"
    assert isinstance(err.value, TargetFault)


def test_planted_wrong_count_is_reported() -> None:
    with pytest.raises(BarrierCountError, match=r"bar.arrive 1, 384: threads of this CTA "
                                                r"already wait on barrier 1 with count 256"):
        run_target(pingpong(arrive_count=384).build(), [np.zeros(2 * TURNS, np.uint32)])


def test_more_arrivals_than_the_count_are_reported() -> None:
    k = Kernel("over", [], block=(256,))
    k.op(target_ops.BarArrive(3, 128))
    with pytest.raises(BarrierCountError, match="256 threads of the CTA arrive on a "
                                                "barrier of 128"):
        run_target(k.build(), [])


def test_a_lone_sync_of_too_many_threads_deadlocks() -> None:
    k = Kernel("lone", [], block=(128,))
    k.op(target_ops.Bar(1, 256))
    with pytest.raises(BarrierDeadlock, match="128 of 256 threads arrived"):
        run_target(k.build(), [])


def handoff(*, barrier: bool, third: str = "none") -> Kernel:
    """Warpgroup 0 writes a shared word and arrives on barrier 1; warpgroup 1 waits on
    it, then reads the word into ``out[0]``. ``third``: warpgroup 2 first writes a
    second word, which warpgroup 1 reads into ``out[1]``, and meets no other warpgroup
    (``"write"``) or arrives on the barrier too, which then has 384 threads
    (``"join"``)."""
    threads = 256 if third == "none" else 384
    count = 384 if third == "join" else 256
    k = Kernel("handoff", [U64], block=(threads,))
    buf = k.shared("buf", 16)
    tid = k.tid()
    wg = _wg(k)
    if third != "none":
        k.if_(k.setp("eq", "u32", tid, k.const(256, "u32")),
              lambda: k.st("shared", "u32", buf, k.const(7, "u32"), offset=4))

    def writer() -> None:
        k.if_(k.setp("eq", "u32", tid, k.const(0, "u32")),
              lambda: k.st("shared", "u32", buf, k.const(42, "u32")))
        if barrier:
            k.op(target_ops.BarArrive(1, count))

    def reader() -> None:
        if barrier:
            k.op(target_ops.Bar(1, count))

        def read() -> None:
            k.st("global", "u32", k.args[0], k.ld("shared", "u32", buf))
            if third != "none":
                k.st("global", "u32", k.args[0], k.ld("shared", "u32", buf, offset=4),
                     offset=4)
        k.if_(k.setp("eq", "u32", tid, k.const(128, "u32")), read)

    def joiner() -> None:
        k.op(target_ops.BarArrive(1, count))

    k.if_(k.setp("eq", "u32", wg, k.const(0, "u32")), writer,
          lambda: k.if_(k.setp("eq", "u32", wg, k.const(1, "u32")), reader,
                        joiner if third == "join" else None))
    return k


def test_a_named_barrier_orders_a_handoff_between_warpgroups() -> None:
    out = np.zeros(1, np.uint32)
    run_target(handoff(barrier=True).build(), [out])
    assert out[0] == 42


def test_planted_handoff_without_its_barrier_is_a_race() -> None:
    with pytest.raises(TargetFault, match="shared memory race"):
        run_target(handoff(barrier=False).build(), [np.zeros(1, np.uint32)])


def test_a_named_barrier_does_not_order_threads_outside_it() -> None:
    """Warpgroup 2's write is ordered by no barrier before warpgroup 1's read (only
    warpgroups 0 and 1 meet at barrier 1); with warpgroup 2 in the barrier it is."""
    with pytest.raises(TargetFault, match="shared memory race"):
        run_target(handoff(barrier=True, third="write").build(), [np.zeros(2, np.uint32)])


def test_a_barrier_of_every_writer_orders_them_all() -> None:
    out = np.zeros(2, np.uint32)
    run_target(handoff(barrier=True, third="join").build(), [out])
    assert out.tolist() == [42, 7]


def named_init(both: bool) -> Kernel:
    """Thread 0 initialises an mbarrier; each warpgroup passes its own named barrier
    (1: warpgroup 0, 2: warpgroup 1), then warpgroup 0 (``both``: and warpgroup 1)
    arrives on the mbarrier and waits for its phase."""
    k = Kernel("named_init", [U64], block=(256,), target="sm_90a")
    t = k.tid()
    bar = k.shared("bar", 8, 8)
    k.if_(k.setp("eq", "u32", t, k.const(0, "u32")),
          lambda: k.op(async_ops.MbarrierInit(256 if both else 128), bar))
    k.op(async_ops.Fence("mbarrier_init"))

    def use() -> None:
        k.op(async_ops.MbarrierArrive(), bar)
        k.op(async_ops.MbarrierWait(), bar, k.const(0, "u32"))
        k.st("global", "u32", k.elem_addr(k.args[0], t, 4), t)

    def first() -> None:
        k.op(target_ops.Bar(1, 128))
        use()

    def second() -> None:
        k.op(target_ops.Bar(2, 128))
        if both:
            use()
    _each(k, _wg(k), first, second)
    return k


def test_a_named_barrier_makes_an_init_visible_to_its_threads() -> None:
    out = np.zeros(256, np.uint32)
    run_target(named_init(both=False).build(), [out])
    assert out[:128].tolist() == list(range(128)) and not out[128:].any()


def test_an_init_is_not_visible_through_a_barrier_without_its_initialiser() -> None:
    with pytest.raises(TargetFault, match="before its initialisation by thread 0 is "
                                          "visible") as err:
        run_target(named_init(both=True).build(), [np.zeros(256, np.uint32)])
    assert err.value.thread == 128
