"""The sm_90a path of the Target IR interpreter: TMA loads with a 128-byte swizzle,
mbarrier phases and wgmma from shared-memory descriptors, against float64 products.

Layouts in these kernels come from the PTX ISA's text and /work/shared/PTX-NOTES.md, not
from tessera.arch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch.descriptor import encode_descriptor
from tessera.arch.errors import ArchError
from tessera.arch.limits import SHARED_BASE
from tessera.arch.swizzle import Swizzle
from tessera.errors import ArgumentError
from tessera.interp.target import TensorMapArg, run_target
from tessera.interp.target import runner as target_runner
from tessera.interp.target.state import TargetFault
from tessera.interp.target.tensorcore import mma as mma_rules
from tessera.ir.core import Value
from tessera.ir.dialects.target import TensorMapType
from tests.interp.target.kit import U64, Kernel, async_ops, target_ops
from tests.interp.target.tensorcore.test_mma import _bf16, _exact

N = 64
TX = 2 * 64 * 64 * 2  # two 64x64 bf16 boxes


def _desc(k: Kernel, addr: Value, step: int) -> Value:
    """A K-major 128B-swizzled descriptor (SBO 1024) at ``addr + 32 * step`` bytes
    (PTX-NOTES: advance the start address by 32 bytes per k16 step inside the atom)."""
    start = k.bin("add", "u32", addr, k.const(32 * step, "u32"))
    field = k.bin("and", "u32", k.bin("shr", "u32", start, k.const(4, "u32")),
                  k.const(0x3FFF, "u32"))
    # bits 16-29 LBO >> 4 = 1, bits 32-45 SBO >> 4 = 64, bits 62-63 layout 1 = 128B swizzle
    # (PTX ISA sec. 9.7.15.5.1.2.2 'Matrix Descriptor Format', PTX-NOTES)
    high = k.const(1 << 16 | 64 << 32 | 1 << 62, "u64")
    return k.bin("or", "u64", high, k.cvt("u64", "u32", field))


def _wgmma_kernel(tx: int = TX, nctas: int = 1, kdim: int = 64,
                  stale: bool = False, touch: bool = False, init: float = 0.0) -> Kernel:
    """C (64 x 64 per CTA) = A (64 x kdim) @ Bt^T: a K loop of 64-wide blocks, each two
    TMA loads on one mbarrier (the wait parity flips every block) and four wgmma k16
    (``touch``: the group is retired and a ``mov`` reads the accumulator between the
    second and the third), from an accumulator of ``init``."""
    ta = TensorMapType(0, "bf16", (64, 64), 128)
    tb = TensorMapType(1, "bf16", (64, 64), 128)
    k = Kernel("wgmma", [ta, tb, U64], block=(128,), grid=(nctas, 1, 1), target="sm_90a")
    tma_a, tma_b, pc = k.args
    t = k.tid()
    sa = k.shared("sA", 8192, 1024)
    sb = k.shared("sB", 8192, 1024)
    bar = k.shared("bar", 8, 8)
    first = k.setp("eq", "u32", t, k.const(0, "u32"))
    k.if_(first, lambda: k.op(async_ops.MbarrierInit(1), bar))
    k.op(async_ops.Fence("mbarrier_init"))
    k.bar()
    row0 = k.cvt("s32", "u32", k.bin("mul", "u32", k.sreg("ctaid.x"), k.const(64, "u32")))
    z = k.const(init, "f32")
    acc0 = k.pack("f32", *([z] * (N // 2)))

    def kblock(kb: Value, acc: Value) -> Value:
        def issue() -> None:
            k.op(async_ops.MbarrierArrive(tx), bar)
            k.op(async_ops.TmaLoad(), sa, tma_a, kb, row0, bar)
            k.op(async_ops.TmaLoad(), sb, tma_b, kb, k.const(0, "s32"), bar)
        k.if_(first, issue)
        parity = k.bin("and", "u32", k.bin("shr", "u32", k.cvt("u32", "s32", kb),
                                           k.const(6, "u32")), k.const(1, "u32"))
        if stale:  # the bug: always wait for parity 0
            parity = k.const(0, "u32")
        k.op(async_ops.MbarrierWait(), bar, parity)
        k.op(async_ops.WgmmaFence())
        for step in range(4):
            if touch and step == 2:  # registers are read once their group is retired
                k.op(async_ops.WgmmaCommit())
                k.op(async_ops.WgmmaWait(0))
                acc = k.un("mov", "f32", acc)
                k.op(async_ops.WgmmaFence())
            acc = k.op(async_ops.Wgmma(N, "bf16", "bf16"), acc, _desc(k, sa, step),
                       _desc(k, sb, step), k.setp("eq", "u32", t, t))
        k.op(async_ops.WgmmaCommit())
        k.op(async_ops.WgmmaWait(0))
        k.bar()  # every warpgroup is done with the tiles before the next loads
        return acc
    s32 = lambda v: k.const(v, "s32")  # noqa: E731
    acc = k.for_(s32(0), s32(kdim), s32(64), [acc0], kblock)
    # accumulator layout (PTX-NOTES / sec. 9.7.15.5.1): warp w, g = lane>>2, q = lane&3:
    # register i at row 16w + g + 8((i>>1)&1), column 8(i>>2) + 2q + (i&1)
    lane = k.sreg("laneid")
    base_row = k.bin("add", "u32", k.bin("mul", "u32", k.sreg("warpid"), k.const(16, "u32")),
                     k.bin("shr", "u32", lane, k.const(2, "u32")))
    base_row = k.bin("add", "u32", base_row, k.bin("mul", "u32", k.sreg("ctaid.x"),
                                                   k.const(64, "u32")))
    q2 = k.bin("mul", "u32", k.bin("and", "u32", lane, k.const(3, "u32")), k.const(2, "u32"))
    for i, v in enumerate(k.unpack("f32", N // 2, acc)):
        rr = k.bin("add", "u32", base_row, k.const(8 * ((i >> 1) & 1), "u32"))
        cc = k.bin("add", "u32", q2, k.const(8 * (i >> 2) + (i & 1), "u32"))
        idx = k.bin("add", "u32", k.bin("mul", "u32", rr, k.const(N, "u32")), cc)
        k.st("global", "f32", k.elem_addr(pc, idx, 4), v)
    return k


def _tmaps(a: np.ndarray, bt: np.ndarray) -> list[TensorMapArg]:
    return [TensorMapArg(a, "bf16", (64, 64), 128), TensorMapArg(bt, "bf16", (64, 64), 128)]


@pytest.mark.parametrize(("nctas", "kdim"), [(1, 64), (2, 64), (2, 192)])
def test_wgmma_m64n64k16_over_tma_swizzled_tiles(nctas: int, kdim: int) -> None:
    """TMA (128B swizzle) -> mbarrier expect-tx/wait -> 4 x wgmma.m64n64k16 from K-major
    descriptors (PTX ISA sec. 9.7.15.5.1.2 descriptors, 9.7.9.27 TMA) equals A @ B; the
    K loop reuses the mbarrier with alternating phase parity (sec. 9.7.13.15.16)."""
    rng = np.random.default_rng(3)
    a, bt = _bf16(rng, (64 * nctas, kdim)), _bf16(rng, (N, kdim))
    c = np.zeros((64 * nctas, N), np.float32)
    run_target(_wgmma_kernel(nctas=nctas, kdim=kdim).build(), [*_tmaps(a, bt), c])
    np.testing.assert_array_equal(c, _exact(a, bt.T))


@pytest.mark.parametrize(("model", "init"), [("exact", 0.0), ("hopper", 0.0), ("exact", -0.0)])
@pytest.mark.parametrize("touch", [False, True])
def test_lazy_wgmma_results_equal_the_scattered_ones(model: str, init: float, touch: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A wgmma chain hands its accumulator matrices on as lazy register values (and
    its first one reads the lazily widened zeros); the bits equal those of a plain
    register list, where each wgmma scatters its result into registers, with the chain
    read in between (``touch``) or not, and under both tensor-core models (wide
    exponent ranges: the hopper model rounds). From ``-0`` accumulators, rows of ``-0``
    give ``-0`` sums (the loop's sign, kept along the chain)."""
    rng = np.random.default_rng(5)
    a, bt = _bf16(rng, (128, 192)), _bf16(rng, (N, 192))
    a[::3] *= np.float32(2.0**20)
    a[1::7] = -0.0
    bt[:] = np.abs(bt)
    outs = []
    for lazy in (True, False):
        if not lazy:  # a plain register list: every value is made at once
            monkeypatch.setattr(target_runner, "RegisterFile", list)
        c = np.zeros((128, N), np.float32)
        run_target(_wgmma_kernel(nctas=2, kdim=192, touch=touch, init=init).build(),
                   [*_tmaps(a, bt), c], tensor_cores=model)
        outs.append(c)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    if model == "exact":
        np.testing.assert_array_equal(outs[0], _exact(a, bt.T))
        assert np.signbit(outs[0][1::7]).all() == (init == 0 and np.signbit(init))


def test_mbarrier_expect_tx_mismatch_is_caught() -> None:
    """Announcing more bytes than the TMA loads bring: the phase can never complete
    (PTX ISA sec. 9.7.13.15: a phase completes when arrivals and tx-count reach zero)."""
    rng = np.random.default_rng(4)
    a, bt = _bf16(rng, (64, 64)), _bf16(rng, (N, 64))
    with pytest.raises(TargetFault, match=f"expected {TX + 1024} tx bytes, got {TX}"):
        run_target(_wgmma_kernel(tx=TX + 1024).build(),
                   [*_tmaps(a, bt), np.zeros((64, N), np.float32)])


def test_stale_mbarrier_parity_reads_data_in_flight() -> None:
    """Waiting on parity 0 in the second K block returns at once (phase 0 completed
    long ago), so wgmma reads a tile whose TMA load is still in flight."""
    rng = np.random.default_rng(6)
    a, bt = _bf16(rng, (64, 128)), _bf16(rng, (N, 128))
    with pytest.raises(TargetFault, match="async copy read before its wait") as info:
        run_target(_wgmma_kernel(kdim=128, stale=True).build(),
                   [*_tmaps(a, bt), np.zeros((64, N), np.float32)])
    assert "ptx.wgmma" in str(info.value)


def test_mbarrier_expect_tx_too_small_is_caught() -> None:
    rng = np.random.default_rng(5)
    a, bt = _bf16(rng, (64, 64)), _bf16(rng, (N, 64))
    with pytest.raises(TargetFault, match="expect-tx count too small"):
        run_target(_wgmma_kernel(tx=TX - 8192).build(),
                   [*_tmaps(a, bt), np.zeros((64, N), np.float32)])


def _ones_times_ones(between: Callable[[Kernel, Value, Value], None]) -> Kernel:
    """128 threads store bf16 ones over an 8 KiB buffer ``sA`` with ``st.shared``, then
    (after ``between(kernel, sA, tid)``) one ``wgmma`` multiplies it by itself: 16 in
    every output that thread ``t`` stores to ``out[t]``."""
    k = Kernel("ones", [U64], block=(128,), target="sm_90a")
    sa = k.shared("sA", 8192, 1024)
    t = k.tid()
    for j in range(16):  # 128 threads x 16 x 4 bytes = 8192 bytes of bf16 1.0
        idx = k.bin("add", "u32", t, k.const(128 * j, "u32"))
        k.st("shared", "u32", k.sh_addr(sa, idx, 4), k.const(0x3F803F80, "u32"))
    between(k, sa, t)
    z = k.const(0.0, "f32")
    acc = k.pack("f32", *([z] * (N // 2)))
    k.op(async_ops.WgmmaFence())
    d = k.op(async_ops.Wgmma(N, "bf16", "bf16"), acc, _desc(k, sa, 0), _desc(k, sa, 0),
             k.setp("eq", "u32", t, t))
    k.op(async_ops.WgmmaCommit())
    k.op(async_ops.WgmmaWait(0))  # D is read only once its group is retired
    k.st("global", "f32", k.elem_addr(k.args[0], t, 4), k.unpack("f32", N // 2, d)[5])
    return k


@pytest.mark.parametrize("fenced", [False, True])
def test_wgmma_after_st_shared_needs_proxy_fence(fenced: bool) -> None:
    """Generic-proxy stores need fence.proxy.async before wgmma reads them
    (PTX ISA, "Proxies"; PTX-NOTES 'Order'); with the fence, ones @ ones = 16."""
    def between(k: Kernel, sa: Value, t: Value) -> None:
        if fenced:
            k.op(async_ops.Fence("proxy_async"))
        k.bar()
    k = _ones_times_ones(between)
    out = np.zeros(128, np.float32)
    if not fenced:
        with pytest.raises(TargetFault, match="missing proxy fence"):
            run_target(k.build(), [out])
        return
    run_target(k.build(), [out])
    assert np.all(out == 16.0)


@pytest.mark.parametrize("order", ["bar", "named", "none", "late"])
def test_wgmma_reads_only_stores_a_barrier_orders(order: str) -> None:
    """The warpgroup reads its operands together: a store by any thread (even one of
    the warpgroup) that no barrier orders before the ``wgmma`` races with it, as with
    ``ld.shared`` (PTX ISA, "Memory Consistency Model"; the fence orders the proxies,
    not the threads). ``bar.sync`` or the warpgroup's named barrier orders the stores;
    none, or a thread's store after the barrier ("late"), is a race."""
    def between(k: Kernel, sa: Value, t: Value) -> None:
        if order in ("bar", "late"):
            k.bar()
        elif order == "named":
            k.op(target_ops.Bar(id=1, count=128))
        if order == "late":  # thread 5 stores its first word again
            k.if_(k.setp("eq", "u32", t, k.const(5, "u32")), lambda: k.st(
                "shared", "u32", k.sh_addr(sa, t, 4), k.const(0x3F803F80, "u32")))
        k.op(async_ops.Fence("proxy_async"))
    k = _ones_times_ones(between)
    out = np.zeros(128, np.float32)
    if order in ("none", "late"):
        writer = "thread 5 " if order == "late" else "thread "
        with pytest.raises(TargetFault, match=f"shared memory race.*written by {writer}") as info:
            run_target(k.build(), [out])
        assert "ptx.wgmma" in str(info.value)
        return
    run_target(k.build(), [out])
    assert np.all(out == 16.0)


def test_wgmma_needs_whole_warpgroup() -> None:
    k = Kernel("partial", [], block=(128,), target="sm_90a")
    sa = k.shared("sA", 8192, 1024)
    z = k.const(0.0, "f32")
    acc = k.pack("f32", *([z] * 4))
    some = k.setp("lt", "u32", k.tid(), k.const(64, "u32"))
    k.if_(some, lambda: k.op(async_ops.Wgmma(8, "bf16", "bf16"), acc, _desc(k, sa, 0),
                             _desc(k, sa, 0), some))
    with pytest.raises(TargetFault, match="warp divergence"):
        run_target(k.build(), [])


def test_tma_128b_swizzle_lands_chunks_xor_row() -> None:
    """The 128B swizzle puts 16-byte chunk c of 128-byte row r at chunk c ^ (r % 8) of a
    1024-byte aligned buffer (PTX-NOTES 'wgmma': chunk bits 4-6 XOR address bits 7-9)."""
    k = Kernel("tmaraw", [TensorMapType(0, "bf16", (64, 64), 128), U64], block=(128,),
               target="sm_90a")
    tmap, out = k.args
    t = k.tid()
    sa = k.shared("sA", 8192, 1024)
    bar = k.shared("bar", 8, 8)
    first = k.setp("eq", "u32", t, k.const(0, "u32"))
    zero = k.const(0, "s32")

    def issue() -> None:
        k.op(async_ops.MbarrierInit(1), bar)
        k.op(async_ops.MbarrierArrive(8192), bar)
        k.op(async_ops.TmaLoad(), sa, tmap, zero, zero, bar)
    k.if_(first, issue)
    k.bar()
    k.op(async_ops.MbarrierWait(), bar, k.const(0, "u32"))
    for j in range(4):  # thread t copies raw chunks 4t .. 4t+3
        idx = k.bin("add", "u32", k.bin("mul", "u32", t, k.const(4, "u32")),
                    k.const(j, "u32"))
        v = k.ld("shared", "u32", k.sh_addr(sa, idx, 16), vec=4)
        k.st("global", "u32", k.elem_addr(out, idx, 16), v, vec=4)
    a = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    raw = np.zeros(2048, np.uint32)
    run_target(k.build(), [TensorMapArg(a, "bf16", (64, 64), 128), raw])
    chunks = raw.view(np.uint16).reshape(64, 8, 8)  # (row, stored chunk, element)
    for r in range(64):
        for c in range(8):
            np.testing.assert_array_equal(chunks[r, c ^ (r % 8)], a[r, 8 * c:8 * c + 8])


def test_tma_parameter_of_an_element_tma_cannot_copy() -> None:
    k = Kernel("tmaf8", [TensorMapType(0, "f8", (8, 16), 0)], block=(32,))
    with pytest.raises(ArgumentError, match="argument 0: TMA cannot copy 'f8'"):
        run_target(k.build(), [TensorMapArg(np.zeros((8, 16), np.uint8), "f8", (8, 16))])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list(Swizzle)), st.integers(0, 15), st.integers(0, 40),
       st.integers(1, 64), st.integers(1, 64), st.sampled_from([64, 128, 256]),
       st.booleans(), st.sampled_from([2048, 65536, 131136]))
def test_translated_descriptor_layouts_equal_their_own(swizzle: Swizzle, row: int, atom: int,
                                                       lbo: int, sbo: int, mn: int,
                                                       k_major: bool, size: int) -> None:
    """A wgmma descriptor's addresses, chunks and blocks taken from the descriptor one
    swizzle atom (1024 bytes) multiple away, moved, against its own; errors too (start
    addresses below the CTA's first byte, in the reserved kilobyte, included)."""
    start = atom * 1024 + row * 16
    d = encode_descriptor(start, lbo * 16, sbo * 16, swizzle)
    m = SimpleNamespace(shared=SimpleNamespace(size=size, base=SHARED_BASE))
    for _ in range(2):  # the second time from what the first kept
        try:
            want = mma_rules._layout(d, mn, 16, 2, k_major, size, SHARED_BASE)
        except ArchError as err:
            with pytest.raises(ArchError, match=re.escape(err.message)):
                mma_rules._translated(m, d, mn, 16, 2, k_major)
            return
        got = mma_rules._translated(m, d, mn, 16, 2, k_major)
        for x, y in zip(got, want):
            if isinstance(x, tuple):
                assert x[0] == y[0]
                x, y = x[1], y[1]
            np.testing.assert_array_equal(x, y)
