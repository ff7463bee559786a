"""The static estimate on synthetic Target IR: exact cycle counts where the model is
exact, the bound it names, and monotonicity in the pipeline depth."""

from __future__ import annotations

import math

import pytest

from tessera.backend.ptx.estimate import A100_SXM, H100_SXM, estimate, format_estimate, model
from tessera.backend.ptx.estimate import census as census_mod
from tessera.errors import ArgumentError
from tessera.ir.core import Block, Function
from tessera.ir.dialects.target import U64, async_ops
from tests.interp.target.kit import Kernel


def wgmma_loop(trips: int, per_iter: int, wait: int, grid: int = 132,
               beside: int = 0) -> Function:
    """A loop of ``per_iter`` m64n128k16 bf16 wgmmas per iteration, no memory traffic;
    ``beside`` f32 additions between the commit and the wait."""
    k = Kernel("tc", [], block=(128,), grid=(grid, 1, 1), target="sm_90a")
    desc = k.const(0, "u64")
    true = k.const(1, "pred")
    acc0 = k.pack("f32", *[k.const(0.0, "f32")] * 64)
    x = k.const(1.0, "f32")

    def body(i, acc):  # type: ignore[no-untyped-def]
        k.op(async_ops.WgmmaFence())
        for _ in range(per_iter):
            acc = k.op(async_ops.Wgmma(128, "bf16", "bf16"), acc, desc, desc, true)
        k.op(async_ops.WgmmaCommit())
        y = x
        for _ in range(beside):
            y = k.bin("add", "f32", y, x, "rn")
        k.op(async_ops.WgmmaWait(wait))
        return acc

    k.for_(k.const(0, "s32"), k.const(trips, "s32"), k.const(1, "s32"), [acc0], body)
    return k.build()


def copy_loop(trips: int, wait: int, grid: int = 1, f32_ops: int = 8) -> Function:
    """Each iteration: a 16-byte cp.async per thread, commit, wait_group ``wait``, then
    ``f32_ops`` dependent f32 additions (waits drain nothing more)."""
    k = Kernel("cp", [U64], block=(128,), grid=(grid, 1, 1), target="sm_80")
    buf = k.shared("buf", 4096)
    x0 = k.const(1.0, "f32")

    def body(i, x):  # type: ignore[no-untyped-def]
        k.op(async_ops.CpAsync(16), buf, k.args[0])
        k.op(async_ops.CpAsyncCommit())
        k.op(async_ops.CpAsyncWait(wait))
        for _ in range(f32_ops):
            x = k.bin("add", "f32", x, x, "rn")
        return x

    k.for_(k.const(0, "s32"), k.const(trips, "s32"), k.const(1, "s32"), [x0], body)
    return k.build()


def test_wgmma_loop_is_tensor_core_bound_with_the_exact_cycle_count() -> None:
    est = estimate(wgmma_loop(10, 4, wait=1))
    flops = 4 * 2 * 64 * 128 * 16  # four m64n128k16 per iteration
    assert est.runs == 10 and est.iteration is not None and est.loop_path is not None
    assert est.iteration.wgmma == 4 and sum(est.iteration.tensor_flops.values()) == flops
    assert est.loop_path.resources["tensor"] == flops / 4096 == 256  # H100: 4096 FLOP/clk/SM
    assert model.sm_cycles(est.loop_path, 1) == 256  # nothing else on the critical path
    assert est.time.cycles == model.sm_cycles(est.outside, 1) + 10 * 256
    assert est.bound == "tensor core"
    assert est.flops == 132 * 10 * flops


def test_wgmma_wait_zero_serialises_the_tensor_core_with_the_issue() -> None:
    overlapped = estimate(wgmma_loop(10, 4, wait=1)).loop_path
    serial = estimate(wgmma_loop(10, 4, wait=0)).loop_path
    assert overlapped is not None and serial is not None
    assert not overlapped.serial_wgmma and serial.serial_wgmma
    assert serial.busy == serial.non_tensor + 256 + H100_SXM.wgmma_latency
    assert serial.total > overlapped.total


def test_work_between_commit_and_wait_group_0_runs_beside_the_products() -> None:
    """A deferred product (attention's P V issued before the softmax, retired after it):
    the instructions between the commit and the wait hide that much tensor time."""
    alone = estimate(wgmma_loop(10, 4, wait=0)).loop_path
    some = estimate(wgmma_loop(10, 4, wait=0, beside=100)).loop_path
    more = estimate(wgmma_loop(10, 4, wait=0, beside=400)).loop_path
    assert alone is not None and some is not None and more is not None
    drain = H100_SXM.wgmma_latency
    assert some.busy == some.non_tensor + drain + (256 - 100)  # 100 cycles of issue hidden
    assert more.busy == more.non_tensor + drain  # the products ran wholly beside them
    assert alone.busy == alone.non_tensor + drain + 256


def test_a_group_left_in_flight_past_wait_group_1_overlaps_the_other_work() -> None:
    """Two groups an iteration, one retired by wait_group 1 and one by wait_group 0 (an
    attention's next scores over its softmax, then P V): half the tensor work waits."""
    k = Kernel("tc2", [], block=(128,), grid=(132, 1, 1), target="sm_90a")
    desc, true = k.const(0, "u64"), k.const(1, "pred")
    acc0 = k.pack("f32", *[k.const(0.0, "f32")] * 64)

    def body(i, acc):  # type: ignore[no-untyped-def]
        for wait in (1, 0):
            k.op(async_ops.WgmmaFence())
            for _ in range(4):
                acc = k.op(async_ops.Wgmma(128, "bf16", "bf16"), acc, desc, desc, true)
            k.op(async_ops.WgmmaCommit())
            k.op(async_ops.WgmmaWait(wait))
        return acc

    k.for_(k.const(0, "s32"), k.const(10, "s32"), k.const(1, "s32"), [acc0], body)
    p = estimate(k.build()).loop_path
    assert p is not None and p.serial_wgmma and p.resources["tensor"] == 512
    assert p.busy == max(p.non_tensor, 256) + 256 + H100_SXM.wgmma_latency
    assert "partly overlapped (wait_group 1, then 0)" in format_estimate(estimate(k.build()))


def test_a_copy_kernel_is_memory_bound() -> None:
    k = Kernel("copy", [U64, U64], block=(128,), grid=(132 * 256, 1, 1))
    i = k.gtid()
    x = k.ld("global", "f32", k.elem_addr(k.args[0], i, 16), vec=4)
    k.st("global", "f32", k.elem_addr(k.args[1], i, 16), x, vec=4)
    est = estimate(k.build())
    traffic = 132 * 256 * 128 * 32  # 16 bytes read and 16 written per thread
    assert est.iteration is None
    assert est.time.hbm_cycles == pytest.approx(traffic / H100_SXM.hbm_bytes_per_clk)
    assert est.bound == "memory (HBM)" and est.cycles == est.time.hbm_cycles
    assert est.flops == 0 and est.tflops == 0


def test_waiting_for_the_copy_just_issued_exposes_the_memory_latency() -> None:
    est = estimate(copy_loop(32, wait=0))
    p = est.loop_path
    assert p is not None and est.iteration is not None
    assert est.iteration.cp_async_bytes == 128 * 16
    assert p.lead == 0 and p.exposed == H100_SXM.memory_latency
    assert est.bound == "latency"


def test_more_stages_are_never_estimated_slower() -> None:
    loops = [estimate(copy_loop(32, wait=n)) for n in range(5)]
    exposed = [e.loop_path.exposed for e in loops]  # type: ignore[union-attr]
    cycles = [e.cycles for e in loops]
    assert exposed == sorted(exposed, reverse=True) and exposed[0] > exposed[-1]
    assert cycles == sorted(cycles, reverse=True)
    assert [e.loop_path.lead for e in loops] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]


def test_more_resident_ctas_are_never_estimated_slower() -> None:
    p = estimate(copy_loop(32, wait=0)).loop_path
    assert p is not None
    per_cta = [model.sm_cycles(p, k) / k for k in range(1, 9)]
    assert per_cta == sorted(per_cta, reverse=True)


def test_occupancy_is_limited_by_registers_shared_memory_and_threads() -> None:
    assert model.occupancy(H100_SXM, 128, 1024, None) == model.Occupancy(16, "threads")
    assert model.occupancy(H100_SXM, 128, 100 * 1024, None) == model.Occupancy(
        2, "shared memory")
    # 154 registers round up to 160: 65536 / (160 x 128) = 3.2
    assert model.occupancy(H100_SXM, 128, 1024, 154) == model.Occupancy(3, "registers")


def test_single_thread_regions_count_one_warp_and_one_issuer() -> None:
    k = Kernel("one", [], block=(256,), target="sm_90a")
    is0 = k.setp("eq", "u32", k.tid(), k.const(0, "u32"))
    k.if_(is0, lambda: [k.bin("add", "u32", k.tid(), k.tid())])
    k.bin("add", "u32", k.tid(), k.tid())
    c = census_mod.census(k.build())
    assert c.warp_instrs["int"] == 8 + 1 + 8  # setp by 8 warps, one warp's add, 8 adds


def test_the_hot_loop_is_the_one_with_the_tensor_work() -> None:
    fn = wgmma_loop(6, 2, wait=1)
    hot = estimate(fn)
    assert hot.runs == 6
    loops = census_mod.loops(fn.body)
    assert len(loops) == 1 and census_mod.trip_count(loops[0][0]) == 6


def test_a100_constants_and_format() -> None:
    est = estimate(wgmma_loop(4, 4, wait=1), A100_SXM)
    assert est.loop_path is not None and est.loop_path.resources["tensor"] == 512
    text = format_estimate(est)
    assert "A100 SXM" in text and "not a measurement" in text and "bound: tensor core" in text
    assert math.isclose(A100_SXM.peak_flops("bf16"), 311.9e12, rel_tol=1e-3)
    assert math.isclose(H100_SXM.peak_flops("bf16"), 989.4e12, rel_tol=1e-3)


def test_estimate_refuses_a_function_that_is_not_lowered() -> None:
    with pytest.raises(ArgumentError, match=r"ptx\.kernel"):
        estimate(Function("f", Block(), [], "tile.kernel"))


def test_pipe_classes() -> None:
    from tessera.ir.dialects.target import ops as target_ops

    assert census_mod.pipe_of(target_ops.Fma("f64")) == "f64"
    assert census_mod.pipe_of(target_ops.Unary("ex2", "f32", "approx")) == "sfu"
    assert census_mod.pipe_of(target_ops.Cvt("f64", "f32")) == "sfu"
    assert census_mod.pipe_of(target_ops.Cvt("u64", "u32")) == "int"  # a register move
    assert census_mod.pipe_of(target_ops.Binary("add", "u32")) == "int"
    assert census_mod.pipe_of(target_ops.Pack("b32")) is None


def producer_consumer(stages: int, trips: int = 16) -> Function:
    """A warp-specialised loop: threads 128.. are the producer, whose thread 128 issues a
    64x64 bf16 TMA box per iteration into a ring of ``stages`` (2 mbarriers a stage);
    threads 0..127 wait and run two wgmmas per iteration."""
    from tessera.ir.dialects.target import TensorMapType

    k = Kernel("ws", [TensorMapType(0, "bf16", (64, 64), 128)], block=(256,), grid=(132, 1, 1),
               target="sm_90a")
    bars = k.shared("bars", 16 * stages, 8)
    for _ in range(2 * stages):
        k.op(async_ops.MbarrierInit(1), bars)
    buf = k.shared("ring", 8192 * stages, 1024)
    lo, hi, one = k.const(0, "s32"), k.const(trips, "s32"), k.const(1, "s32")
    zero = k.const(0, "u32")

    def produce() -> None:
        def fill(i):  # type: ignore[no-untyped-def]
            k.op(async_ops.MbarrierWait(), bars, zero)
            c = k.const(0, "s32")
            k.op(async_ops.TmaLoad(), buf, k.args[0], c, c, bars)
            k.op(async_ops.MbarrierArrive(tx=8192), bars)
        k.if_(k.setp("eq", "u32", k.tid(), k.const(128, "u32")),
              lambda: k.for_(lo, hi, one, [], fill) and None)

    def consume() -> None:
        desc, true = k.const(0, "u64"), k.const(1, "pred")
        acc0 = k.pack("f32", *[k.const(0.0, "f32")] * 32)

        def step(i, acc):  # type: ignore[no-untyped-def]
            k.op(async_ops.MbarrierWait(), bars, zero)
            k.op(async_ops.WgmmaFence())
            for _ in range(2):
                acc = k.op(async_ops.Wgmma(64, "bf16", "bf16"), acc, desc, desc, true)
            k.op(async_ops.WgmmaCommit())
            k.op(async_ops.WgmmaWait(1))
            return acc
        k.for_(lo, hi, one, [acc0], step)

    k.if_(k.setp("ge", "u32", k.tid(), k.const(128, "u32")), produce, consume)
    return k.build()


def test_a_producer_warp_feeds_the_consumer_loop() -> None:
    fn = producer_consumer(stages=3)
    loop = estimate(fn)
    assert loop.iteration is not None and loop.loop_path is not None
    assert loop.runs == 16
    assert loop.iteration.wgmma == 2  # one consumer warpgroup, not the whole CTA
    assert loop.iteration.tma_bytes == 64 * 64 * 2 and loop.iteration.tma_copies == 1
    assert loop.iteration.ring_stages == 3 and loop.loop_path.lead == 2
    assert loop.iteration.mbarrier_waits == 1  # the producer's wait is on its own path
    assert loop.outside.resources["memory"] == 0  # the producer's loop is not a prologue
    assert loop.flops == 132 * 16 * 2 * 2 * 64 * 64 * 16


def test_thread_ranges_of_warp_specialised_regions() -> None:
    fn = producer_consumer(stages=2)
    found = [census_mod.loop_threads(fn, f) for f, _, _ in census_mod.loops(fn.body)]
    assert found == [range(128, 129), range(0, 128)]
    assert census_mod.warps_of(range(128, 256, 32)) == 4
    assert census_mod.warps_of(range(0)) == 0


def test_a_wait_before_the_commit_sees_only_older_groups() -> None:
    k = Kernel("ring", [U64], block=(128,), target="sm_80")
    buf = k.shared("buf", 4096)

    def body(i):  # type: ignore[no-untyped-def]
        k.op(async_ops.CpAsyncWait(1))  # tile i landed: committed two iterations ago
        k.op(async_ops.CpAsync(16), buf, k.args[0])
        k.op(async_ops.CpAsyncCommit())

    k.for_(k.const(0, "s32"), k.const(8, "s32"), k.const(1, "s32"), [], body)
    est = estimate(k.build())
    assert est.iteration is not None and est.iteration.wait_first
    assert est.loop_path is not None and est.loop_path.lead == 2
