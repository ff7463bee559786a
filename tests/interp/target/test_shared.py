"""Shared memory in the Target IR interpreter: barriers, the sanitizer checks
(divergent barrier, uninitialised read, race, out of bounds) and cp.async groups."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.arch.limits import SHARED_BASE
from tessera.interp.target import run_target
from tessera.interp.target.memory.state import SharedMemory
from tessera.interp.target.state import TargetFault
from tessera.ir.core import Value
from tessera.ir.dialects.target import ptx_ops
from tests.interp.target.kit import U64, Kernel, async_ops, target_ops

T = 128


def _tree_reduce(barriers: bool = True) -> Kernel:
    """out[cta] = sum of x over the CTA: shared tree, halving strides, bar.sync between."""
    k = Kernel("tree", [U64, U64], block=(T,), grid=(2, 1, 1))
    x, out = k.args
    t = k.tid()
    buf = k.shared("buf", 4 * T, 16)
    mine = k.sh_addr(buf, t, 4)
    k.st("shared", "f32", mine, k.ld("global", "f32", k.elem_addr(x, k.gtid(), 4)))
    k.bar()
    s = T // 2
    while s:
        def add(s: int = s) -> None:
            other = k.ld("shared", "f32", k.sh_addr(buf, k.bin("add", "u32", t,
                                                                k.const(s, "u32")), 4))
            k.st("shared", "f32", mine, k.bin("add", "f32", k.ld("shared", "f32", mine),
                                               other, "rn"))
        k.if_(k.setp("lt", "u32", t, k.const(s, "u32")), add)
        if barriers:
            k.bar()
        s //= 2

    def write() -> None:
        k.st("global", "f32", k.elem_addr(out, k.sreg("ctaid.x"), 4),
             k.ld("shared", "f32", buf))
    k.if_(k.setp("eq", "u32", t, k.const(0, "u32")), write)
    return k


def test_tree_reduction_with_barriers() -> None:
    """Equals the same tree of float32 additions done by NumPy."""
    x = np.random.default_rng(0).standard_normal(2 * T).astype(np.float32)
    out = np.zeros(2, np.float32)
    run_target(_tree_reduce().build(), [x, out])
    want = x.reshape(2, T).copy()
    s = T // 2
    while s:
        want[:, :s] = want[:, :s] + want[:, s:2 * s]
        s //= 2
    np.testing.assert_array_equal(out, want[:, 0])


def test_missing_barrier_is_a_race() -> None:
    """Without bar.sync, thread 0 reads what thread 64 wrote in the same phase."""
    x = np.ones(2 * T, np.float32)
    with pytest.raises(TargetFault, match="shared memory race"):
        run_target(_tree_reduce(barriers=False).build(), [x, np.zeros(2, np.float32)])


def test_race_check_can_be_turned_off() -> None:
    x = np.ones(2 * T, np.float32)
    out = np.zeros(2, np.float32)
    run_target(_tree_reduce(barriers=False).build(), [x, out], check_races=False)
    assert out.tolist() == [T, T]  # lockstep execution happens to order the phases


def test_divergent_barrier_is_caught() -> None:
    """bar.sync inside a branch taken by half the CTA (PTX ISA, "bar, barrier": all
    threads of the CTA must execute the same bar.sync)."""
    k = Kernel("div", [], block=(T,))
    k.if_(k.setp("lt", "u32", k.tid(), k.const(64, "u32")), k.bar)
    with pytest.raises(TargetFault, match="divergent barrier") as info:
        run_target(k.build(), [])
    assert "64 of 128 threads" in str(info.value) and "<div>:" in str(info.value)


def test_barrier_in_a_branch_uniform_per_cta_is_fine() -> None:
    k = Kernel("uni", [], block=(T,), grid=(2, 1, 1))
    k.if_(k.setp("eq", "u32", k.sreg("ctaid.x"), k.const(0, "u32")), k.bar)
    run_target(k.build(), [])


def test_uninitialised_shared_read_is_caught() -> None:
    k = Kernel("uninit", [U64], block=(32,))
    buf = k.shared("buf", 256, 16)
    t = k.tid()
    k.st("shared", "u32", k.sh_addr(buf, t, 4), t)  # bytes 0..127 only
    k.bar()
    v = k.ld("shared", "u32", k.sh_addr(buf, k.bin("add", "u32", t, k.const(16, "u32")), 4))
    k.st("global", "u32", k.elem_addr(k.args[0], t, 4), v)
    # byte 128 of the buffer, which starts above the reserved kilobyte
    with pytest.raises(TargetFault, match="uninitialised shared read: shared address 1152"):
        run_target(k.build(), [np.zeros(32, np.uint32)])


def test_shared_out_of_bounds_and_alignment() -> None:
    k = Kernel("oob", [], block=(32,))
    buf = k.shared("buf", 128, 16)
    k.st("shared", "u32", k.sh_addr(buf, k.tid(), 8), k.const(0, "u32"))
    with pytest.raises(TargetFault, match="out of bounds"):
        run_target(k.build(), [])
    k = Kernel("mis", [], block=(32,))
    buf = k.shared("buf", 1024, 16)
    zeros = k.pack("f32", *[k.const(0.0, "f32")] * 4)
    k.st("shared", "f32", k.sh_addr(buf, k.tid(), 4), zeros, vec=4)  # 4-byte steps
    with pytest.raises(TargetFault, match="misaligned address"):
        run_target(k.build(), [])


def test_shared_buffers_honour_alignment() -> None:
    """Buffers are laid out in order at their declared alignment from the end of the
    kilobyte reserved for system use, shared address 1024, where an H100 has them."""
    k = Kernel("layout", [U64], block=(32,))
    addrs = [k.shared("a", 40, 16), k.shared("b", 8, 1024), k.shared("c", 4, 8)]
    for j, a in enumerate(addrs):
        k.if_(k.setp("eq", "u32", k.tid(), k.const(j, "u32")),
              lambda a=a: k.st("global", "u32", k.elem_addr(k.args[0], k.tid(), 4), a))
    out = np.zeros(32, np.uint32)
    run_target(k.build(), [out])
    assert out[:3].tolist() == [1024, 2048, 2056]
    assert SHARED_BASE == 1024


def test_shared_addresses_index_each_ctas_bytes_from_the_base() -> None:
    """CTA c's shared address 1024 + i is byte c * size + i of the arrays, which hold
    no reserved kilobyte; addresses below 1024 or past the CTA's bytes fault."""
    sh = SharedMemory(2, 32, 64, races=False)
    assert sh.data.size == 2 * 64
    flat = sh.index(np.array([0, 1]), np.array([SHARED_BASE, SHARED_BASE + 60]), 4, _raise)
    assert flat.tolist() == [[0, 1, 2, 3], [124, 125, 126, 127]]
    for addr, why in ((0, "0 to 1023 are reserved"), (1020, "0 to 1023 are reserved"),
                      (1086, "are shared addresses 1024 to 1087")):
        with pytest.raises(AssertionError, match=f"at shared address {addr}; .*{why}"):
            sh.index(np.array([1]), np.array([addr]), 4, _raise, align=2)


def _raise(i: int, what: str, text: str) -> None:
    raise AssertionError(f"{what}: {text}")


@pytest.mark.parametrize("space", ["shared", "generic"])
def test_the_reserved_kilobyte_faults(space: str) -> None:
    """Shared addresses 0 to 1023 hold no buffer of the kernel (reserved for system use,
    CUDA C++ Programming Guide, "Compute Capabilities"): an access there is out of bounds,
    through a shared or a generic (cvta) address."""
    k = Kernel("reserved", [], block=(32,))
    buf = k.shared("buf", 128, 16)
    below = k.bin("sub", "u32", buf, k.const(4, "u32"))  # the reserve's last word
    if space == "shared":
        k.st("shared", "u32", below, k.const(7, "u32"))
    else:
        generic = k.op(ptx_ops.Cvta("shared"), k.cvt("u64", "u32", below))
        k.op(ptx_ops.GenericStore("u32"), generic, k.const(7, "u32"))
    with pytest.raises(TargetFault, match=r"out of bounds: shared access of 4 bytes at shared "
                       r"address 1020; shared addresses 0 to 1023 are reserved for system "
                       r"use and the CTA's shared memory starts at 1024"):
        run_target(k.build(), [])
    k = Kernel("past", [], block=(32,))
    buf = k.shared("buf", 128, 16)
    k.st("shared", "u32", k.bin("add", "u32", buf, k.const(128, "u32")), k.const(7, "u32"))
    with pytest.raises(TargetFault, match=r"shared address 1152; the CTA's 128 bytes of shared "
                       r"memory are shared addresses 1024 to 1151"):
        run_target(k.build(), [])


def _cp_async_kernel(wait_before_read: bool, groups: int = 1, wait_n: int = 0) -> Kernel:
    """Each of 32 threads copies 16 bytes per group with cp.async.cg, then every thread
    reads its neighbour's chunk of group 0 (after bar.sync)."""
    k = Kernel("cpasync", [U64, U64], block=(32,))
    src, out = k.args
    t = k.tid()
    buf = k.shared("buf", 512 * groups, 128)
    for g in range(groups):
        idx = k.bin("add", "u32", t, k.const(32 * g, "u32"))
        k.op(async_ops.CpAsync(16), k.sh_addr(buf, idx, 16), k.elem_addr(src, idx, 16))
        k.op(async_ops.CpAsyncCommit())
    if wait_before_read:
        k.op(async_ops.CpAsyncWait(wait_n))
    k.bar()
    nb = k.bin("and", "u32", k.bin("add", "u32", t, k.const(1, "u32")), k.const(31, "u32"))
    v = k.ld("shared", "u32", k.sh_addr(buf, nb, 16), vec=4)
    k.st("global", "u32", k.elem_addr(out, t, 16), v, vec=4)
    return k


def test_cp_async_lands_at_wait_group() -> None:
    """PTX ISA sec. 9.7.9.25: the copy is complete after cp.async.wait_group."""
    src = np.arange(128, dtype=np.uint32)
    out = np.zeros(128, np.uint32)
    run_target(_cp_async_kernel(True).build(), [src, out])
    np.testing.assert_array_equal(out, np.roll(src.reshape(32, 4), -1, axis=0).ravel())


def test_cp_async_read_before_wait_is_caught() -> None:
    src = np.arange(128, dtype=np.uint32)
    with pytest.raises(TargetFault, match="async copy read before its wait"):
        run_target(_cp_async_kernel(False).build(), [src, np.zeros(128, np.uint32)])


def test_cp_async_wait_group_n_leaves_the_newest_groups_in_flight() -> None:
    """wait_group 1 with two committed groups completes the older one only: reading
    group 0 works (an S-stage ring's N = S - 1)."""
    src = np.arange(256, dtype=np.uint32)
    out = np.zeros(128, np.uint32)
    run_target(_cp_async_kernel(True, groups=2, wait_n=1).build(), [src, out])
    np.testing.assert_array_equal(out, np.roll(src[:128].reshape(32, 4), -1, axis=0).ravel())


def test_cp_async_newest_group_is_still_in_flight() -> None:
    """Reading group 1 after wait_group 1 reads bytes still in flight."""
    k = Kernel("ring", [U64], block=(32,))
    t = k.tid()
    buf = k.shared("buf", 1024, 128)
    for g in range(2):
        idx = k.bin("add", "u32", t, k.const(32 * g, "u32"))
        k.op(async_ops.CpAsync(16), k.sh_addr(buf, idx, 16), k.elem_addr(k.args[0], idx, 16))
        k.op(async_ops.CpAsyncCommit())
    k.op(async_ops.CpAsyncWait(1))
    k.ld("shared", "u32", k.sh_addr(buf, k.bin("add", "u32", t, k.const(32, "u32")), 16))
    with pytest.raises(TargetFault, match="async copy read before its wait"):
        run_target(k.build(), [np.arange(256, dtype=np.uint32)])


def test_cp_async_src_size_zero_fills() -> None:
    """cp.async with src_size < size fills the rest of the 16 bytes with zeros."""
    k = Kernel("zfill", [U64, U64], block=(32,))
    src, out = k.args
    t = k.tid()
    buf = k.shared("buf", 512, 128)
    n = k.bin("and", "u32", t, k.const(15, "u32"))  # 0..15 bytes
    dst = k.sh_addr(buf, t, 16)
    k.op(async_ops.CpAsync(16), dst, k.elem_addr(src, t, 16), n)
    k.op(async_ops.CpAsyncCommit())
    k.op(async_ops.CpAsyncWait(0))
    v: Value = k.ld("shared", "u32", dst, vec=4)
    k.st("global", "u32", k.elem_addr(out, t, 16), v, vec=4)
    data = np.arange(1, 513, dtype=np.uint32).astype(np.uint8).reshape(32, 16)
    res = np.zeros(128, np.uint32)
    run_target(k.build(), [data, res])
    keep = np.arange(16)[None, :] < (np.arange(32) % 16)[:, None]
    np.testing.assert_array_equal(res.view(np.uint8).reshape(32, 16), np.where(keep, data, 0))


def test_red_shared_add_u32() -> None:
    k = Kernel("hist", [U64, U64], block=(T,))
    t = k.tid()
    bins = k.shared("bins", 64, 16)
    k.if_(k.setp("lt", "u32", t, k.const(16, "u32")),
          lambda: k.st("shared", "u32", k.sh_addr(bins, t, 4), k.const(0, "u32")))
    k.bar()
    b = k.ld("global", "u32", k.elem_addr(k.args[0], t, 4))
    k.op(target_ops.Reduce("shared", "add", "u32"), k.sh_addr(bins, b, 4), k.const(1, "u32"))
    k.bar()
    k.if_(k.setp("lt", "u32", t, k.const(16, "u32")),
          lambda: k.st("global", "u32", k.elem_addr(k.args[1], t, 4),
                       k.ld("shared", "u32", k.sh_addr(bins, t, 4))))
    keys = np.random.default_rng(1).integers(0, 16, T).astype(np.uint32)
    out = np.zeros(16, np.uint32)
    run_target(k.build(), [keys, out])
    np.testing.assert_array_equal(out, np.bincount(keys, minlength=16))


def test_barrier_in_a_loop_with_per_thread_trip_counts_is_divergent() -> None:
    """Threads that left the loop do not reach its bar.sync."""
    k = Kernel("loopbar", [], block=(T,))
    n = k.cvt("s32", "u32", k.bin("and", "u32", k.tid(), k.const(3, "u32")))
    zero, one = k.const(0, "s32"), k.const(1, "s32")
    k.for_(zero, n, one, [], lambda i: k.bar())
    with pytest.raises(TargetFault, match="divergent barrier"):
        run_target(k.build(), [])
