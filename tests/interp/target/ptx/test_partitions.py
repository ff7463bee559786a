"""Warp-specialised PTX in the CFG mode: warps that take different paths and meet at
barriers and mbarriers, as the code Triton writes with ``warp_specialize`` does.

* A CTA-wide ``bar.sync id`` may be reached at different instructions by different
  warps (sm_70 and later); a warp that exits instead leaves the others waiting.
* An ``mbarrier`` wait whose phase has not completed parks its threads until others
  have run (a producer warp filling a ring, a consumer warp draining it); when no thread
  can run on, the wait is reported.
* What inline assembly brings: labels scoped to their ``{ }`` block (each wait loop
  says ``waitLoop``), predicate registers named without ``%``, an arrival count on
  ``mbarrier.arrive``, immediates in vector operands.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.target import TargetFault
from tessera.interp.target.barriers import BarrierDeadlock
from tessera.ir.text.ptx import PtxSyntaxError
from tests.interp.target.ptx.harness import HEADER, run_elementwise

HOPPER = ".version 8.0\n.target sm_90a\n.address_size 64\n"

# the wait loop of Triton's inline assembly: a block with its own predicate and label
WAIT = """
  {{
    .reg .pred complete;
  waitLoop:
    mbarrier.try_wait.parity.shared::cta.b64 complete, [{bar}], {parity};
    @!complete bra.uni waitLoop;
  }}"""

RING = HOPPER + """
.visible .entry ring(.param .u64 out, .param .u32 n)
{
  .reg .b32 %r<16>;
  .reg .b64 %rd<4>;
  .reg .pred %p<4>;
  .shared .align 8 .b64 full[2];
  .shared .align 8 .b64 empty[2];
  .shared .align 4 .b32 slots[64];
  mov.u32 %r0, %tid.x;
  and.b32 %r1, %r0, 31;
  shr.u32 %r2, %r0, 5;
  ld.param.u32 %r3, [n];
  setp.eq.u32 %p0, %r0, 0;
  mov.u32 %r4, full;
  mov.u32 %r5, empty;
  @%p0 mbarrier.init.shared::cta.b64 [%r4], 32;
  @%p0 mbarrier.init.shared::cta.b64 [%r4+8], 32;
  @%p0 mbarrier.init.shared::cta.b64 [%r5], 32;
  @%p0 mbarrier.init.shared::cta.b64 [%r5+8], 32;
  bar.sync 0;
  mov.u32 %r6, 0;
  mov.u32 %r7, 0;
  mov.u32 %r14, slots;
  setp.ne.u32 %p1, %r2, 0;
  @%p1 bra CONSUMER;
PRODUCER:
  and.b32 %r8, %r6, 1;
  shl.b32 %r10, %r8, 3;
  shr.u32 %r9, %r6, 1;
  and.b32 %r9, %r9, 1;
  xor.b32 %r9, %r9, 1;
  add.u32 %r11, %r5, %r10;""" + WAIT.format(bar="%r11", parity="%r9") + """
  mad.lo.u32 %r12, %r6, 100, %r1;
  shl.b32 %r13, %r8, 5;
  add.u32 %r13, %r13, %r1;
  shl.b32 %r13, %r13, 2;
  add.u32 %r13, %r13, %r14;
  st.shared.u32 [%r13], %r12;
  add.u32 %r11, %r4, %r10;
  mbarrier.arrive.shared::cta.b64 _, [%r11];
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p2, %r6, %r3;
  @%p2 bra PRODUCER;
  bra.uni DONE;
CONSUMER:
  and.b32 %r8, %r6, 1;
  shl.b32 %r10, %r8, 3;
  shr.u32 %r9, %r6, 1;
  and.b32 %r9, %r9, 1;
  add.u32 %r11, %r4, %r10;""" + WAIT.format(bar="%r11", parity="%r9") + """
  shl.b32 %r13, %r8, 5;
  add.u32 %r13, %r13, %r1;
  shl.b32 %r13, %r13, 2;
  add.u32 %r13, %r13, %r14;
  ld.shared.u32 %r12, [%r13];
  add.u32 %r7, %r7, %r12;
  bar.sync 1, 32;
  setp.eq.u32 %p3, %r1, 0;
  add.u32 %r11, %r5, %r10;
  @%p3 mbarrier.arrive.shared::cta.b64 _, [%r11], 32;
  add.u32 %r6, %r6, 1;
  setp.lt.u32 %p2, %r6, %r3;
  @%p2 bra CONSUMER;
  ld.param.u64 %rd0, [out];
  mul.wide.u32 %rd1, %r1, 4;
  add.s64 %rd2, %rd0, %rd1;
  st.global.u32 [%rd2], %r7;
DONE:
  ret;
}
"""


def _ring(text: str, n: int) -> np.ndarray:
    out = np.zeros(32, np.uint32)
    ts.ptx.load(text).kernel("ring").run(grid=2, block=64, args=[out, np.uint32(n)])
    return out


@pytest.mark.parametrize("n", [1, 2, 7])
def test_a_producer_warp_and_a_consumer_warp_share_a_ring(n: int) -> None:
    """Two slots, n items: from the third on, the producer waits for the consumer to
    release a slot (its one lane arriving 32 times) and the consumer for the producer
    to fill one; each lane sums its values."""
    lanes = np.arange(32)
    np.testing.assert_array_equal(_ring(RING, n), 100 * n * (n - 1) // 2 + n * lanes)


def test_a_slot_never_released_is_reported_at_the_wait() -> None:
    text = RING.replace("@%p3 mbarrier.arrive.shared::cta.b64 _, [%r11], 32;", "")
    with pytest.raises(TargetFault, match="phase never completes") as err:
        _ring(text, 5)
    assert "32 of 32 arrivals missing" in str(err.value)
    assert text.splitlines()[err.value.loc.line - 1].strip().startswith("mbarrier.try_wait")


def test_too_many_arrivals_on_a_slot() -> None:
    text = RING.replace("[%r11], 32;", "[%r11], 33;")
    with pytest.raises(TargetFault, match="more arrivals than its expected count 32"):
        _ring(text, 3)


def test_an_arrival_count_needs_sm_90_and_ptx_7_8() -> None:
    old = RING.replace(".target sm_90a", ".target sm_80").replace("::cta", "")
    with pytest.raises(PtxSyntaxError, match=r"arrival count needs \.target sm_90") as err:
        ts.ptx.load(old.replace("try_wait", "test_wait"))
    assert "[%r11], 32;" in old.splitlines()[err.value.loc.line - 1]


SPLIT = HEADER + """
.visible .entry split(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p<2>;
  .shared .align 4 .b32 buf[64];
  mov.u32 %r0, %tid.x;
  shl.b32 %r1, %r0, 2;
  mov.u32 %r2, buf;
  add.u32 %r3, %r2, %r1;
  setp.lt.u32 %p0, %r0, 32;
  @%p0 bra FIRST;
  mul.lo.u32 %r4, %r0, 3;
  st.shared.u32 [%r3], %r4;
  bar.sync 1;
  xor.b32 %r5, %r1, 128;
  add.u32 %r5, %r2, %r5;
  ld.shared.u32 %r6, [%r5];
  bra.uni STORE;
FIRST:
  st.shared.u32 [%r3], %r0;
  bar.sync 1;
  add.u32 %r5, %r3, 128;
  ld.shared.u32 %r6, [%r5];
STORE:
  ld.param.u64 %rd0, [out];
  mul.wide.u32 %rd1, %r0, 4;
  add.s64 %rd2, %rd0, %rd1;
  st.global.u32 [%rd2], %r6;
  ret;
}
"""


def test_a_cta_barrier_reached_at_two_instructions() -> None:
    """Warp 0 and warp 1 each write their half, meet at their own ``bar.sync 1`` and
    read the other half: the barrier is the id, not the instruction."""
    out = np.zeros(64, np.uint32)
    ts.ptx.load(SPLIT).kernel("split").run(grid=1, block=64, args=[out])
    t = np.arange(64)
    np.testing.assert_array_equal(out, np.where(t < 32, (t + 32) * 3, t - 32))


def test_warps_at_different_cta_barriers_deadlock() -> None:
    text = SPLIT.replace("  bar.sync 1;\n  xor", "  bar.sync 2;\n  xor")
    with pytest.raises(BarrierDeadlock, match="never completes: 32 of 64 threads arrived"):
        ts.ptx.load(text).kernel("split").run(grid=1, block=64, args=[np.zeros(64, np.uint32)])


@pytest.mark.parametrize("old, new", [
    ("  mul.lo.u32 %r4, %r0, 3;", "  ret;"),  # warp 1 exits before warp 0 waits
    ("FIRST:\n  st.shared.u32 [%r3], %r0;", "FIRST:\n  ret;"),  # after warp 1 waits
])
def test_a_warp_that_exits_counts_as_arrived(old: str, new: str) -> None:
    """Hardware waits for the threads that have not exited: whichever warp ran first,
    the other passes the barrier and reads the half that was never written."""
    text = SPLIT.replace(old, new)
    with pytest.raises(TargetFault, match="uninitialised shared read") as err:
        ts.ptx.load(text).kernel("split").run(grid=1, block=64, args=[np.zeros(64, np.uint32)])
    assert text.splitlines()[err.value.loc.line - 1].strip().startswith("ld.shared")


@pytest.mark.parametrize("body, want", [
    ("mov.b64 %rd7, {%a, 5};\n mov.b64 {%t, %d}, %rd7;", lambda a: np.full_like(a, 5)),
    ("st.local.v2.b32 [tmp], {0, %a};\n ld.local.v2.u32 {%t, %d}, [tmp];", lambda a: a),
    ("st.local.v2.b32 [tmp], {%a, -1};\n ld.local.v2.u32 {%t, %d}, [tmp];",
     lambda a: np.full_like(a, 0xFFFFFFFF)),
])
def test_immediates_in_vector_operands(body: str, want) -> None:
    """A source vector may hold immediates, as LLVM writes them (``{0, 16843009}``)."""
    a = np.arange(1, 33, dtype=np.uint32) * 7919
    got = run_elementwise(body, a, a, a, decls=".local .align 8 .b32 tmp[2];")
    np.testing.assert_array_equal(got, want(a))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4),
       st.lists(st.integers(0, 2**64 - 1), min_size=4, max_size=4))
def test_mul_hi_of_64_bit_integers(xs: list[int], ys: list[int]) -> None:
    """``mul.hi.u64``/``.s64``: the high half of the 128-bit product (Triton divides by
    constants so), against Python's integers."""
    kernel = HEADER + """
.visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 pu, .param .u64 ps)
{
  .reg .b32 %t; .reg .b64 %rd<12>;
  ld.param.u64 %rd0, [pa]; ld.param.u64 %rd1, [pb];
  ld.param.u64 %rd2, [pu]; ld.param.u64 %rd3, [ps];
  mov.u32 %t, %tid.x;
  mul.wide.u32 %rd4, %t, 8;
  add.s64 %rd5, %rd0, %rd4; ld.global.u64 %rd6, [%rd5];
  add.s64 %rd5, %rd1, %rd4; ld.global.u64 %rd7, [%rd5];
  mul.hi.u64 %rd8, %rd6, %rd7;
  mul.hi.s64 %rd9, %rd6, %rd7;
  add.s64 %rd5, %rd2, %rd4; st.global.u64 [%rd5], %rd8;
  add.s64 %rd5, %rd3, %rd4; st.global.u64 [%rd5], %rd9;
  ret;
}
"""
    a, b = np.array(xs, np.uint64), np.array(ys, np.uint64)
    hi_u, hi_s = np.zeros(4, np.uint64), np.zeros(4, np.uint64)
    ts.ptx.load(kernel).kernel("k").run(grid=1, block=4, args=[a, b, hi_u, hi_s])

    def signed(x: int) -> int:
        return x - (1 << 64) if x >> 63 else x
    assert hi_u.tolist() == [(x * y) >> 64 for x, y in zip(xs, ys)]
    assert hi_s.tolist() == [((signed(x) * signed(y)) >> 64) % (1 << 64)
                             for x, y in zip(xs, ys)]


SPIN = HEADER + """
.visible .entry spin(.param .u64 lock, .param .u64 total)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<4>;
  .reg .pred %p<3>;
  ld.param.u64 %rd0, [lock];
  ld.param.u64 %rd1, [total];
  mov.u32 %r0, %tid.x;
  and.b32 %r1, %r0, 31;
  setp.eq.u32 %p0, %r1, 0;
  mov.u32 %r2, %ctaid.x;
  shr.u32 %r3, %r0, 5;
  mad.lo.u32 %r3, %r2, 2, %r3;
  add.u32 %r3, %r3, 1;
SPIN:
  mov.u32 %r4, 0;
  @%p0 atom.global.cas.b32 %r4, [%rd0], 0, 1;
  shfl.sync.idx.b32 %r5, %r4, 0, 31, -1;
  setp.ne.u32 %p1, %r5, 0;
  @%p1 bra.uni SPIN;
  @%p0 ld.global.u32 %r6, [%rd1];
  @%p0 add.u32 %r6, %r6, %r3;
  @%p0 st.global.u32 [%rd1], %r6;
  membar.gl;
  @%p0 atom.global.exch.b32 %r7, [%rd0], 0;
  ret;
}
"""


def test_a_spin_lock_between_warps_and_ctas() -> None:
    """Each warp takes a lock (lane 0's ``atom.cas``, its old value shuffled to the
    warp), adds its number to a total with a plain load and store, and frees the lock.
    The waiters loop at a block that comes first; the holder, at a later block, still
    runs, as a GPU's scheduler runs every warp that can."""
    lock, total = np.zeros(1, np.uint32), np.zeros(1, np.uint32)
    ts.ptx.load(SPIN).kernel("spin").run(grid=3, block=64, args=[lock, total])
    assert total[0] == sum(range(1, 7)) and lock[0] == 0


def test_cp_async_ignore_src() -> None:
    """``cp.async``'s fourth operand may be a predicate (PTX 7.5): true reads nothing
    and fills the 16 bytes with zeros, as a src-size of 0 does."""
    text = HEADER.replace(".version 8.0", ".version 7.5") + """
.visible .entry k(.param .u64 src, .param .u64 dst)
{
  .reg .b32 %r<6>;
  .reg .b64 %rd<6>;
  .reg .pred %p<2>;
  .shared .align 16 .b8 buf[512];
  ld.param.u64 %rd0, [src];
  ld.param.u64 %rd1, [dst];
  mov.u32 %r0, %tid.x;
  mul.wide.u32 %rd2, %r0, 16;
  add.s64 %rd3, %rd0, %rd2;
  shl.b32 %r1, %r0, 4;
  mov.u32 %r2, buf;
  add.u32 %r3, %r2, %r1;
  and.b32 %r4, %r0, 1;
  setp.eq.u32 %p0, %r4, 1;
  cp.async.cg.shared.global [%r3], [%rd3], 16, %p0;
  cp.async.wait_all;
  ld.shared.v4.u32 {%r1, %r2, %r4, %r5}, [%r3];
  add.s64 %rd4, %rd1, %rd2;
  st.global.v4.u32 [%rd4], {%r1, %r2, %r4, %r5};
  ret;
}
"""
    src = np.arange(1, 129, dtype=np.uint32)
    dst = np.zeros(128, np.uint32)
    ts.ptx.load(text).kernel("k").run(grid=1, block=32, args=[src, dst])
    rows = dst.reshape(32, 4)
    np.testing.assert_array_equal(rows[0::2], src.reshape(32, 4)[0::2])
    assert not rows[1::2].any()
