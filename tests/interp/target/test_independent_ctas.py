"""CTAs that wait independently (``run_target(ctas=...)``): a warp-specialised kernel
whose CTAs run key loops of different lengths, and release a buffer after the loop,
hangs when every CTA's consumer runs in lockstep (a CTA whose loop ended is held there
until the longest one ends) but not on a GPU, nor in the interpreter's default mode,
which runs the launch again with one task per warpgroup of each CTA. A genuine hang,
a race and the CTA order of atomics are still reported and kept there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tessera.errors import ArgumentError
from tessera.interp.target import run_target
from tessera.interp.target import runner as target_runner
from tessera.interp.target.state import TargetFault
from tessera.ir.core import Function, Value
from tests.interp.target.kit import U64, Kernel, async_ops, target_ops

LANES = 32  # a producer warp and a consumer warp per CTA
MOST = 4  # blocks of the longest CTA's loop (the source holds as many per CTA)


def _u32(k: Kernel, v: int) -> Value:
    return k.const(v, "u32")


def ring(trips: tuple[int, ...], release_after_loop: bool = True,
         read_early: bool = False) -> tuple[Function, int]:
    """CTA ``c`` sums ``trips[c]`` blocks of 32 words that its producer warp copies,
    block by block, into a one-stage shared ring (``full``: filled, ``empty``: free
    again), into row ``c`` of the output, whose last word counts the consumer threads'
    trips (``red.global.add``). The consumer warp releases each block in its loop but
    the last, which it releases after the loop (``release_after_loop``); the
    producer's last trip waits for that release. ``read_early`` plants a race: the
    consumer reads a block before it waits for it. The kernel and the line of the
    producer's wait."""
    k = Kernel("ring", [U64, U64], block=(2 * LANES,), grid=(len(trips), 1, 1),
               target="sm_90a")
    src, dst = k.args
    t = k.tid()
    lane = k.bin("rem", "u32", t, _u32(k, LANES))
    cta = k.sreg("ctaid.x")
    # n = trips[cta], from a select chain over the CTA index
    n = k.const(trips[0], "s32")
    for c, count in enumerate(trips[1:], 1):
        n = k.selp("s32", k.const(count, "s32"), n, k.setp("eq", "u32", cta, _u32(k, c)))
    buf = k.shared("buf", 4 * LANES, 16)
    full = k.shared("full", 8, 8)
    empty = k.shared("empty", 8, 8)

    def init() -> None:
        k.op(async_ops.MbarrierInit(LANES), full)
        k.op(async_ops.MbarrierInit(LANES), empty)
    k.if_(k.setp("eq", "u32", t, _u32(k, 0)), init)
    k.op(async_ops.Fence("mbarrier_init"))
    k.bar()
    zero, one = k.const(0, "s32"), k.const(1, "s32")
    row = k.bin("mul", "u32", cta, _u32(k, LANES + 1))  # the CTA's output row
    row_end = k.elem_addr(dst, k.bin("add", "u32", row, _u32(k, LANES)), 4)
    slot = k.sh_addr(buf, lane, 4)
    waits: list[int] = []

    def produce() -> None:
        def trip(j: Value) -> None:
            # the ring's one stage is free when the release of block j - 1 completed
            # (a fresh barrier's phase of parity 1 counts as complete)
            ju = k.cvt("u32", "s32", j)
            free = k.bin("xor", "u32", k.bin("and", "u32", ju, _u32(k, 1)), _u32(k, 1))
            k.op(async_ops.MbarrierWait(), empty, free)
            waits.append(k.line)

            def fill() -> None:
                block = k.bin("add", "u32", k.bin("mul", "u32", cta, _u32(k, MOST)), ju)
                word = k.bin("add", "u32", k.bin("mul", "u32", block, _u32(k, LANES)), lane)
                k.st("shared", "u32", slot, k.ld("global", "u32", k.elem_addr(src, word, 4)))
                k.op(async_ops.MbarrierArrive(), full)
            k.if_(k.setp("lt", "s32", j, n), fill)
        k.for_(zero, k.bin("add", "s32", n, one), one, [], trip)

    def consume() -> None:
        def trip(i: Value, acc: Value) -> Value:
            iu = k.cvt("u32", "s32", i)
            word = k.ld("shared", "u32", slot) if read_early else None
            k.op(async_ops.MbarrierWait(), full, k.bin("and", "u32", iu, _u32(k, 1)))
            got = k.bin("add", "u32", acc, k.ld("shared", "u32", slot) if word is None else word)
            k.op(target_ops.Reduce("global", "add", "u32"), row_end, _u32(k, 1))
            more = k.setp("lt", "s32", k.bin("add", "s32", i, one), n)
            k.if_(more, lambda: k.op(async_ops.MbarrierArrive(), empty))
            return got
        total = k.for_(zero, n, one, [_u32(k, 0)], trip)
        if release_after_loop:
            k.op(async_ops.MbarrierArrive(), empty)
        k.st("global", "u32", k.elem_addr(dst, k.bin("add", "u32", row, lane), 4), total)
    k.if_(k.setp("lt", "u32", t, _u32(k, LANES)), produce, consume)
    return k.build(), waits[0]


def _data(ctas: int) -> np.ndarray:
    return np.random.default_rng(5).integers(0, 2**32, (ctas, MOST, LANES), np.uint32)


def _out(ctas: int = 2) -> np.ndarray:
    return np.zeros((ctas, LANES + 1), np.uint32)


def _want(src: np.ndarray, trips: tuple[int, ...]) -> np.ndarray:
    return np.stack([np.r_[src[c, :n].sum(axis=0, dtype=np.uint32), LANES * n]
                     for c, n in enumerate(trips)]).astype(np.uint32)


UNEQUAL = (1, 3)  # CTA 0's consumer loop runs 1 trip, CTA 1's 3


def test_a_release_after_a_shorter_loop_hangs_in_lockstep() -> None:
    """In lockstep, CTA 0's consumer stays in the loop while CTA 1's runs on; the
    producers' wait for CTA 0's release after it then holds CTA 1's producer too."""
    fn, line = ring(UNEQUAL)
    with pytest.raises(TargetFault, match="mbarrier phase never completes") as err:
        run_target(fn, [_data(2), _out()], ctas="lockstep")
    assert err.value.loc.line == line


@pytest.mark.parametrize("ctas", ["auto", "independent"])
@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_independent_ctas_run_it_to_the_right_sums(ctas: str, order: str) -> None:
    fn, _ = ring(UNEQUAL)
    src, out = _data(2), _out()
    run_target(fn, [src, out], ctas=ctas, cta_order=order)
    assert np.array_equal(out, _want(src, UNEQUAL))


def test_the_launch_runs_again_from_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default mode runs in lockstep first and again, independently, from the
    arguments as they were (the trip counters start from zero again, not from the
    hung run's counts); a kernel whose CTAs agree is run once, in lockstep."""
    calls: list[bool] = []
    launch = target_runner._launch

    def counted(*args: Any) -> None:
        calls.append(args[-1])
        launch(*args)
    monkeypatch.setattr(target_runner, "_launch", counted)
    fn, _ = ring(UNEQUAL)
    src, out = _data(2), _out()
    run_target(fn, [src, out])
    assert calls == [False, True] and np.array_equal(out, _want(src, UNEQUAL))
    out = _out()
    run_target(fn, [src, out])  # the kernel is known to need it
    assert calls == [False, True, True] and np.array_equal(out, _want(src, UNEQUAL))
    calls.clear()
    fn, _ = ring((3, 3))
    out = _out()
    run_target(fn, [src, out])
    assert calls == [False] and np.array_equal(out, _want(src, (3, 3)))


@pytest.mark.parametrize("ctas", ["auto", "independent"])
def test_a_genuine_hang_is_reported_at_the_waiting_line(ctas: str) -> None:
    """Without the release after the loop the producers wait for ever: reported at
    the producer's wait (of CTA 0, whose one block is never released)."""
    fn, line = ring(UNEQUAL, release_after_loop=False)
    with pytest.raises(TargetFault, match="mbarrier phase never completes") as err:
        run_target(fn, [_data(2), _out()], ctas=ctas)
    assert err.value.loc.file == "<ring>" and err.value.loc.line == line
    assert err.value.cta == (0, 0, 0)
    assert "mbarrier_wait" in str(err.value)


def test_a_read_before_its_wait_is_a_race_with_independent_ctas() -> None:
    """The consumer reads a block before it waits for the producer's signal."""
    fn, _ = ring(UNEQUAL, read_early=True)
    with pytest.raises(TargetFault, match="race"):
        run_target(fn, [_data(2), _out()], ctas="independent")


def _red_kernel() -> Function:
    """Per CTA, warp 0 arrives on an mbarrier that warp 1 waits for; then warp 1's
    first thread adds ``src[ctaid]`` into ``dst[0]`` (``red.global.add.f32``)."""
    k = Kernel("red", [U64, U64], block=(2 * LANES,), grid=(3, 1, 1), target="sm_90a")
    src, dst = k.args
    t = k.tid()
    go = k.shared("go", 8, 8)
    k.if_(k.setp("eq", "u32", t, _u32(k, 0)),
          lambda: k.op(async_ops.MbarrierInit(LANES), go))
    k.op(async_ops.Fence("mbarrier_init"))
    k.bar()

    def consume() -> None:
        k.op(async_ops.MbarrierWait(), go, _u32(k, 0))

        def add() -> None:
            v = k.ld("global", "f32", k.elem_addr(src, k.sreg("ctaid.x"), 4))
            k.op(target_ops.Reduce("global", "add", "f32"), dst, v)
        k.if_(k.setp("eq", "u32", t, _u32(k, LANES)), add)
    k.if_(k.setp("lt", "u32", t, _u32(k, LANES)),
          lambda: k.op(async_ops.MbarrierArrive(), go), consume)
    return k.build()


@pytest.mark.parametrize("ctas", ["lockstep", "independent"])
def test_atomics_of_independent_ctas_land_in_the_cta_order(ctas: str) -> None:
    """1 + 1e8 - 1e8 in float32 is 0 in ascending CTA order and 1 in descending: the
    CTAs' tasks start in the launch's order, as lockstep's atomics land."""
    sums = []
    for order in ("ascending", "descending"):
        out = np.zeros(1, np.float32)
        run_target(_red_kernel(), [np.array([1.0, 1e8, -1e8], np.float32), out],
                   cta_order=order, ctas=ctas)
        sums.append(float(out[0]))
    assert sums == [0.0, 1.0]


def test_an_unknown_mode_is_refused() -> None:
    fn, _ = ring(UNEQUAL)
    with pytest.raises(ArgumentError, match="unknown ctas 'warps'"):
        run_target(fn, [_data(2), _out()], ctas="warps")

