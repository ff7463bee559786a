"""Ordering that lockstep execution would hide: an mbarrier initialised by one thread is
visible to the others only after a ``bar.sync`` (PTX ISA, "mbarrier.init"), and the
proxy fence is owed only for shared bytes the async proxy (wgmma, TMA) touches (PTX ISA,
"Proxies"). Planted bugs, and their correct twins."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.errors import IRVerifyError
from tessera.interp.target import TensorMapArg, run_target
from tessera.interp.target.state import TargetFault
from tessera.ir.core import Function, Value
from tessera.ir.dialects.target import TensorMapType
from tessera.ir.dialects.target.check import check_kernel
from tests.interp.target.kit import U64, Kernel, async_ops

THREADS = 64


def _barrier_kernel(sync: bool, user: int = 0) -> Function:
    """Thread ``user`` initialises the mbarrier for all threads; everyone arrives and
    waits, then writes its id; ``sync`` puts the bar.sync after the init."""
    k = Kernel("mbar", [U64], block=(THREADS,), target="sm_90a")
    t = k.tid()
    bar = k.shared("bar", 8, 8)
    owner = k.setp("eq", "u32", t, k.const(user, "u32"))
    k.if_(owner, lambda: k.op(async_ops.MbarrierInit(THREADS), bar))
    k.op(async_ops.Fence("mbarrier_init"))
    if sync:
        k.bar()
    k.op(async_ops.MbarrierArrive(), bar)
    k.op(async_ops.MbarrierWait(), bar, k.const(0, "u32"))
    k.st("global", "u32", k.elem_addr(k.args[0], t, 4), t)
    return k.build()


@pytest.mark.parametrize("user", [0, 5])
def test_a_synchronised_init_is_used_by_every_thread(user: int) -> None:
    out = np.zeros(THREADS, np.uint32)
    run_target(_barrier_kernel(True, user), [out])
    assert np.array_equal(out, np.arange(THREADS))


@pytest.mark.parametrize("user", [0, 5])
def test_a_use_before_the_init_is_visible_is_reported(user: int) -> None:
    with pytest.raises(TargetFault, match="before its initialisation by thread "
                                          f"{user} is visible") as info:
        run_target(_barrier_kernel(False, user), [np.zeros(THREADS, np.uint32)])
    assert "mbarrier_arrive" in str(info.value)
    assert f"thread {1 if user == 0 else 0}" in str(info.value)  # the first other thread


def _desc(k: Kernel, addr: Value) -> Value:
    """A K-major 128B-swizzled wgmma descriptor of ``addr`` (SBO 1024; PTX ISA "Matrix
    Descriptor Format": bits 0-13 address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4,
    62-63 layout 1 = 128B swizzle)."""
    field = k.bin("and", "u32", k.bin("shr", "u32", addr, k.const(4, "u32")),
                  k.const(0x3FFF, "u32"))
    return k.bin("or", "u64", k.const(1 << 16 | 64 << 32 | 1 << 62, "u64"),
                 k.cvt("u64", "u32", field))


def _stores_then_wgmma(target_buffer: str, fenced: bool) -> Function:
    """Fill the operand buffer with bf16 1.0 (fenced), then st.shared into
    ``target_buffer`` ("counter": a ring counter; "operand": the wgmma's own buffer),
    fenced or not, then bar.sync and one wgmma m64n8k16 of the buffer with itself."""
    k = Kernel("proxy", [U64], block=(128,), target="sm_90a")
    sa = k.shared("sA", 8192, 1024)
    counter = k.shared("counter", 512, 16)
    t = k.tid()
    for j in range(16):  # 128 threads x 16 x 4 bytes: all of sA
        idx = k.bin("add", "u32", t, k.const(128 * j, "u32"))
        k.st("shared", "u32", k.sh_addr(sa, idx, 4), k.const(0x3F803F80, "u32"))
    k.op(async_ops.Fence("proxy_async"))
    k.bar()
    where = counter if target_buffer == "counter" else sa
    k.st("shared", "u32", k.sh_addr(where, t, 4), k.const(0x3F803F80, "u32"))
    if fenced:
        k.op(async_ops.Fence("proxy_async"))
    k.bar()
    acc = k.pack("f32", *([k.const(0.0, "f32")] * 4))
    k.op(async_ops.WgmmaFence())
    d = k.op(async_ops.Wgmma(8, "bf16", "bf16"), acc, _desc(k, sa), _desc(k, sa),
             k.setp("eq", "u32", t, t))
    k.op(async_ops.WgmmaCommit())
    k.op(async_ops.WgmmaWait(0))
    k.st("global", "f32", k.elem_addr(k.args[0], t, 4), k.unpack("f32", 4, d)[0])
    return k.build()


@pytest.mark.parametrize(("buffer", "fenced", "bug"), [
    ("counter", False, False),  # an unrelated store needs no proxy fence
    ("operand", True, False),
    ("operand", False, True),  # the planted bug: wgmma reads unfenced st.shared data
])
def test_the_proxy_fence_is_owed_for_the_buffers_wgmma_reads(buffer: str, fenced: bool,
                                                             bug: bool) -> None:
    fn = _stores_then_wgmma(buffer, fenced)
    out = np.zeros(128, np.float32)
    if bug:
        with pytest.raises(IRVerifyError, match=r"wgmma reads shared memory written by "
                                                r"st\.shared without fence\.proxy\.async"):
            check_kernel(fn)
        with pytest.raises(TargetFault, match="missing proxy fence"):
            run_target(fn, [out])
        return
    check_kernel(fn)
    run_target(fn, [out])
    assert np.all(out == 16.0)  # a row of ones times a column of ones, k = 16


def _stores_then_tma(target_buffer: str, fenced: bool) -> Function:
    """st.shared into ``target_buffer``, then thread 0 loads a TMA box into sA."""
    k = Kernel("tma", [TensorMapType(0, "bf16", (64, 64), 128), U64], block=(128,),
               target="sm_90a")
    tmap, out = k.args
    t = k.tid()
    sa = k.shared("sA", 8192, 1024)
    counter = k.shared("counter", 512, 16)
    bar = k.shared("bar", 8, 8)
    first = k.setp("eq", "u32", t, k.const(0, "u32"))
    k.if_(first, lambda: k.op(async_ops.MbarrierInit(1), bar))
    k.op(async_ops.Fence("mbarrier_init"))
    k.bar()
    where = counter if target_buffer == "counter" else sa
    k.st("shared", "u32", k.sh_addr(where, t, 4), t)
    if fenced:
        k.op(async_ops.Fence("proxy_async"))
    k.bar()
    zero = k.const(0, "s32")

    def issue() -> None:
        k.op(async_ops.MbarrierArrive(8192), bar)
        k.op(async_ops.TmaLoad(), sa, tmap, zero, zero, bar)
    k.if_(first, issue)
    k.op(async_ops.MbarrierWait(), bar, k.const(0, "u32"))
    k.st("global", "u32", k.elem_addr(out, t, 4), k.ld("shared", "u32", k.sh_addr(sa, t, 4)))
    return k.build()


@pytest.mark.parametrize(("buffer", "fenced", "bug"), [
    ("counter", False, False), ("operand", True, False), ("operand", False, True)])
def test_a_tma_load_over_unfenced_stores_is_reported(buffer: str, fenced: bool,
                                                     bug: bool) -> None:
    fn = _stores_then_tma(buffer, fenced)
    a = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    args = [TensorMapArg(a, "bf16", (64, 64), 128), np.zeros(128, np.uint32)]
    if bug:
        with pytest.raises(IRVerifyError, match="TMA load overwrites shared memory"):
            check_kernel(fn)
        with pytest.raises(TargetFault, match="missing proxy fence"):
            run_target(fn, args)
        return
    check_kernel(fn)
    run_target(fn, args)
    assert int(args[1][0]) == int(a[0, 0]) | int(a[0, 1]) << 16  # the box landed
