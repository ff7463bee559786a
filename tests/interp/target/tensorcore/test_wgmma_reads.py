"""The Target IR interpreter refuses, before the launch, a kernel that reads a wgmma
accumulator before its group is retired (PTX ISA, "wgmma.wait_group": undefined;
ptxas would insert a wait of its own, C7517): no run can show it, since the
interpreter computes each wgmma at once. The rule is the ordering check's
(``tessera.ir.dialects.target.check``), run for the reads alone."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tessera.errors import IRVerifyError
from tessera.interp.target import run_target
from tessera.ir.core import Value
from tessera.ir.dialects.target.check import check_kernel
from tests.interp.target.kit import U64, Kernel, async_ops

N = 16  # accumulator columns: 8 f32 registers per thread


def _kernel(body: Callable[[Kernel, Callable[[Value], Value], Value], None]) -> Kernel:
    """A warpgroup kernel; ``body(k, mma, acc0)`` issues wgmma through ``mma(acc)``."""
    k = Kernel("inflight", [U64], block=(128,), target="sm_90a")
    z = k.const(0.0, "f32")
    acc0 = k.pack("f32", *([z] * (N // 2)))
    desc = k.const(0, "u64")
    yes = k.setp("eq", "u32", k.tid(), k.tid())

    def mma(acc: Value) -> Value:
        return k.op(async_ops.Wgmma(N, "bf16", "bf16"), acc, desc, desc, yes)

    body(k, mma, acc0)
    return k


def _read(k: Kernel, acc: Value) -> None:
    k.st("global", "f32", k.elem_addr(k.args[0], k.tid(), 4), k.unpack("f32", N // 2, acc)[0])


def _commit(k: Kernel) -> None:
    k.op(async_ops.WgmmaCommit())


def _wait(k: Kernel, n: int) -> None:
    k.op(async_ops.WgmmaWait(n))


def _faults(k: Kernel) -> None:
    with pytest.raises(IRVerifyError, match=r"ptx\.unpack reads a wgmma accumulator "
                       r"before wgmma\.wait_group retires it") as info:
        run_target(k.build(), [np.zeros(128, np.float32)])
    assert "wgmma.wait_group 0" in info.value.hint and info.value.loc.file == "<inflight>"


def _passes(fn: object) -> None:
    check_kernel(fn, reads_only=True)  # type: ignore[arg-type]


def test_reading_without_commit_and_wait_faults() -> None:
    _faults(_kernel(lambda k, mma, acc: _read(k, mma(acc))))


def test_a_committed_group_still_in_flight_faults() -> None:
    def body(k: Kernel, mma: Callable[[Value], Value], acc: Value) -> None:
        d = mma(acc)
        _commit(k)
        _read(k, d)
    _faults(_kernel(body))


def test_wait_group_retires_only_the_older_groups() -> None:
    def body(k: Kernel, mma: Callable[[Value], Value], acc: Value, read_newer: bool) -> None:
        old = mma(acc)
        _commit(k)
        new = mma(acc)
        _commit(k)
        _wait(k, 1)  # the newest group may still run
        _read(k, new if read_newer else old)
    _passes(_kernel(lambda *a: body(*a, False)).build())
    _faults(_kernel(lambda *a: body(*a, True)))


@pytest.mark.parametrize("final_wait", [False, True])
def test_a_k_loop_chains_in_flight_and_waits_before_the_epilogue(final_wait: bool) -> None:
    """The pipelined main loop: each step chains on the carried accumulator, commits and
    waits for all but the newest group; the epilogue must wait for that one too."""
    def body(k: Kernel, mma: Callable[[Value], Value], acc: Value) -> None:
        def step(i: Value, carried: Value) -> Value:
            d = mma(carried)
            _commit(k)
            _wait(k, 1)
            return d
        s32 = lambda v: k.const(v, "s32")  # noqa: E731
        out = k.for_(s32(0), s32(4), s32(1), [acc], step)
        if final_wait:
            _wait(k, 0)
        _read(k, out)
    k = _kernel(body)
    if final_wait:
        _passes(k.build())
    else:
        _faults(k)


def test_a_wait_on_one_branch_only_is_not_enough() -> None:
    def body(k: Kernel, mma: Callable[[Value], Value], acc: Value) -> None:
        d = mma(acc)
        _commit(k)
        k.if_(k.setp("lt", "u32", k.tid(), k.const(64, "u32")), lambda: _wait(k, 0))
        _read(k, d)
    _faults(_kernel(body))


def test_a_wait_inside_a_loop_that_may_not_run_is_not_enough() -> None:
    def body(k: Kernel, mma: Callable[[Value], Value], acc: Value) -> None:
        d = mma(acc)
        _commit(k)
        s32 = lambda v: k.const(v, "s32")  # noqa: E731
        k.for_(s32(0), k.cvt("s32", "u32", k.tid()), s32(1), [],
               lambda i: _wait(k, 0))
        _read(k, d)
    _faults(_kernel(body))


# ------------------------------------------------ register A and carried registers
def _rs_loop(wait: int, read_a: bool = False) -> Kernel:
    """A loop whose body packs register-A fragments from its index, chains a
    ``wgmma_rs`` on the carried accumulator, commits and waits ``wait``."""
    from tessera.ir.dialects.target.wgmma_rs import WgmmaRegA

    k = Kernel("inflight", [U64], block=(128,), target="sm_90a")
    z = k.const(0.0, "f32")
    acc0 = k.pack("f32", *([z] * (N // 2)))
    desc = k.const(0, "u64")
    yes = k.setp("eq", "u32", k.tid(), k.tid())
    s32 = lambda v: k.const(v, "s32")  # noqa: E731

    def step(i: Value, carried: Value) -> Value:
        w = k.cvt("b32", "s32", i)
        a = k.pack("b32", w, w, w, w)  # the next iteration rewrites these registers
        d = k.op(WgmmaRegA(N, "bf16", "bf16", 0, 1), carried, a, desc, yes)
        _commit(k)
        if read_a:
            k.unpack("b32", 4, a)
        _wait(k, wait)
        return d
    out = k.for_(s32(0), s32(4), s32(1), [acc0], step)
    _wait(k, 0)
    _read(k, out)
    return k


def test_register_a_is_in_flight_with_its_group() -> None:
    """PTX ISA, wgmma.mma_async: the A registers of an in-flight wgmma must not be
    accessed: a read before the wait, or the loop's next fragments written into them
    while the group is still in flight, are refused; a wait_group 0 first is fine."""
    check_kernel(_rs_loop(0).build(), reads_only=True)
    with pytest.raises(IRVerifyError, match=r"ptx\.unpack reads the register A operand of a "
                                            r"wgmma before wgmma\.wait_group retires it"):
        check_kernel(_rs_loop(0, read_a=True).build(), reads_only=True)
    with pytest.raises(IRVerifyError, match=r"ptx\.pack overwrites the register A operand "
                                            r"of a wgmma still in flight"):
        check_kernel(_rs_loop(1).build(), reads_only=True)


@pytest.mark.parametrize("own", [False, True])
def test_a_carried_value_in_flight_must_be_the_chains_own_registers(own: bool) -> None:
    """A loop may carry an accumulator in flight only where its wgmma chain adds into
    the carried value itself; a chain from fresh registers is copied into the carried
    ones at the back edge, a read of registers in flight (ptxas: C7514)."""
    def body(k: Kernel, mma: Callable[[Value], Value], acc: Value) -> None:
        z = k.const(0.0, "f32")

        def step(i: Value, carried: Value) -> Value:
            d = mma(carried if own else k.pack("f32", *([z] * (N // 2))))
            _commit(k)
            _wait(k, 1)
            return d
        s32 = lambda v: k.const(v, "s32")  # noqa: E731
        out = k.for_(s32(0), s32(4), s32(1), [acc], step)
        _wait(k, 0)
        _read(k, out)
    fn = _kernel(body).build()
    if own:
        check_kernel(fn, reads_only=True)
    else:
        with pytest.raises(IRVerifyError, match="yields a wgmma register still in flight "
                                                "into other registers"):
            check_kernel(fn, reads_only=True)
