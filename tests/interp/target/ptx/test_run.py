"""The interpreter's control-flow-graph mode on hand-written PTX: divergent branches
and loops reconverge before warp-synchronous instructions, barriers need every
non-exited thread, and the memory instructions of other compilers (generic addresses,
atomics returning the old value, votes) behave as the PTX ISA says."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera.interp.target import TargetFault, approx
from tests.interp.target.ptx.harness import HEADER, elementwise, run_elementwise

rng = np.random.default_rng(5)

# each lane takes one side of an if/else, or loops lane times, then all shuffle
DIVERGE = HEADER + """
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    ld.param.u64 %rd0, [out];
    mov.u32 %r0, %laneid;
    and.b32 %r1, %r0, 1;
    setp.eq.u32 %p0, %r1, 0;
    @%p0 bra EVEN;
    mul.lo.s32 %r2, %r0, 10;
    bra.uni JOIN;
EVEN:
    add.s32 %r2, %r0, 1000;
JOIN:
    mov.u32 %r3, 0;
    mov.u32 %r4, 0;
LOOP:
    setp.ge.u32 %p1, %r4, %r0;
    @%p1 bra DONE;
    add.s32 %r3, %r3, %r4;
    add.s32 %r4, %r4, 1;
    bra.uni LOOP;
DONE:
    add.s32 %r2, %r2, %r3;
    shfl.sync.bfly.b32 %r5, %r2, 1, 31, -1;
    mov.u32 %r6, %tid.x;
    mul.wide.u32 %rd1, %r6, 4;
    add.s64 %rd2, %rd0, %rd1;
    st.global.u32 [%rd2], %r5;
    ret;
}
"""


def test_branches_and_loops_reconverge_before_a_shuffle() -> None:
    out = np.zeros(64, np.uint32)
    ts.ptx.load(DIVERGE).kernel("k").run(grid=1, block=64, args=[out])
    lane = np.arange(64) % 32
    mine = np.where(lane % 2 == 0, lane + 1000, lane * 10) + lane * (lane - 1) // 2
    np.testing.assert_array_equal(out, mine[np.arange(64) ^ 1])


def test_shuffle_inside_a_divergent_branch_is_reported() -> None:
    text = DIVERGE.replace("mul.lo.s32 %r2, %r0, 10;",
                           "shfl.sync.bfly.b32 %r2, %r0, 1, 31, -1;")
    with pytest.raises(TargetFault, match="warp divergence") as err:
        ts.ptx.load(text).kernel("k").run(grid=1, block=32, args=[np.zeros(32, np.uint32)])
    assert err.value.loc.line == text.splitlines().index(
        "    shfl.sync.bfly.b32 %r2, %r0, 1, 31, -1;") + 1


BARRIER = HEADER + """
.visible .entry k(.param .u64 out, .param .u32 n)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 4 .b8 buf[512];
    ld.param.u64 %rd0, [out];
    ld.param.u32 %r7, [n];
    mov.u32 %r0, %tid.x;
    setp.ge.u32 %p0, %r0, %r7;
    @%p0 ret;
    shl.b32 %r1, %r0, 2;
    mov.u32 %r2, buf;
    add.s32 %r3, %r2, %r1;
    st.shared.u32 [%r3], %r0;
    bar.sync 0;
    sub.s32 %r4, %r7, 1;
    sub.s32 %r4, %r4, %r0;
    shl.b32 %r4, %r4, 2;
    add.s32 %r4, %r2, %r4;
    ld.shared.u32 %r5, [%r4];
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd2, %rd0, %rd1;
    st.global.u32 [%rd2], %r5;
    ret;
}
"""


def test_exited_threads_do_not_block_a_barrier() -> None:
    out = np.zeros(128, np.uint32)
    ts.ptx.load(BARRIER).kernel("k").run(grid=1, block=128, args=[out, np.uint32(100)])
    np.testing.assert_array_equal(out[:100], np.arange(100)[::-1])
    assert not out[100:].any()


def test_a_barrier_in_divergent_code_is_reported() -> None:
    text = BARRIER.replace("@%p0 ret;", "@%p0 bra SKIP;").replace(
        "    sub.s32 %r4, %r7, 1;", "SKIP:\n    sub.s32 %r4, %r7, 1;")
    with pytest.raises(TargetFault, match="divergent barrier") as err:
        ts.ptx.load(text).kernel("k").run(grid=1, block=128,
                                          args=[np.zeros(128, np.uint32), np.uint32(100)])
    assert "bar.sync 0" in str(err.value)


def test_generic_addresses_reach_shared_memory() -> None:
    body = """
    mov.u64 %rd6, buf;
    cvta.shared.u64 %rd6, %rd6;
    add.s64 %rd7, %rd6, %rd4;
    st.u32 [%rd7], %a;
    bar.sync 0;
    xor.b32 %e, %t, 1;
    mul.wide.u32 %rd4, %e, 4;
    add.s64 %rd7, %rd6, %rd4;
    ld.u32 %d, [%rd7];
    mul.wide.u32 %rd4, %t, 4;
    """
    a = rng.integers(0, 2**32, 64, dtype=np.uint64)
    z = np.zeros(64, np.uint64)
    got = run_elementwise(body, a, z, z, decls=".shared .align 4 .b8 buf[256];")
    np.testing.assert_array_equal(got, a[np.arange(64) ^ 1].astype(np.uint32))


def test_atomics_return_old_values_in_thread_order() -> None:
    text = elementwise("atom.global.add.u32 %d, [%rd2], %a;")  # c[0] += a, all threads
    a = np.arange(1, 33, dtype=np.uint32)
    c = np.full(32, 5, np.uint32)
    d = np.zeros(32, np.uint32)
    ts.ptx.load(text).kernel("k").run(grid=1, block=32, args=[a, a.copy(), c, d])
    np.testing.assert_array_equal(d, 5 + np.concatenate([[0], np.cumsum(a)[:-1]]))
    assert c[0] == 5 + a.sum()
    cas = elementwise("atom.global.cas.b32 %d, [%rd2], %b, %a;")
    c = np.full(4, 7, np.uint32)
    ts.ptx.load(cas).kernel("k").run(grid=1, block=4, args=[
        np.array([10, 11, 12, 13], np.uint32), np.array([3, 7, 10, 11], np.uint32), c,
        d := np.zeros(4, np.uint32)])
    np.testing.assert_array_equal(d, [7, 7, 11, 11])  # 7 -> 11 (12 fails) -> 13 in order
    assert c[0] == 13


def test_float_atomic_adds_flush_subnormals_and_inc_wraps() -> None:
    """``atom.add.f32`` and ``red.add.f32`` flush subnormal inputs and results to signed
    zero (PTX ISA, "atom" and "red"); ``red.inc`` counts up to its bound, then to 0."""
    tiny = np.float32(2.0 ** -130)  # subnormal: below 2^-126
    a = np.array([-tiny, 1.0, -tiny, -tiny], np.float32).view(np.uint32)
    c = np.array([-0.0, tiny, 1.5, 2 * tiny], np.float32).view(np.uint32)
    d = np.zeros(4, np.uint32)
    ts.ptx.load(elementwise("atom.global.add.f32 %d, [%rd5], %a;".replace(
        "%rd5", "%rd6").replace("atom", "add.s64 %rd6, %rd2, %rd4;\n    atom"))).kernel(
        "k").run(grid=1, block=4, args=[a, a.copy(), c, d])
    # each thread adds into its own c[i]: -0 + -tiny is -0 (not -tiny), tiny + 1 is 1,
    # 1.5 - tiny rounds to 1.5 either way, 2 tiny - tiny is +0 (not tiny)
    np.testing.assert_array_equal(c.view(np.float32), [-0.0, 1.0, 1.5, 0.0])
    assert list(np.signbit(c.view(np.float32))) == [True, False, False, False]
    np.testing.assert_array_equal(d, np.array([-0.0, tiny, 1.5, 2 * tiny], np.float32).view(
        np.uint32))  # the old values, unflushed
    counter = np.zeros(7, np.uint32)  # every thread counts in counter[0]
    body = "red.global.inc.u32 [%rd2], 2;\n    mov.u32 %d, 0;"
    ts.ptx.load(elementwise(body)).kernel("k").run(grid=1, block=7, args=[
        np.zeros(7, np.uint32), np.zeros(7, np.uint32), counter, np.zeros(7, np.uint32)])
    assert counter[0] == 7 % 3  # 0 -> 1 -> 2 -> 0 -> 1 -> 2 -> 0 -> 1


@pytest.mark.parametrize("ftz", [True, False])
def test_approximate_exponentials_keep_their_ftz(ftz: bool) -> None:
    """``ex2.approx.ftz.f32`` of third-party PTX runs the model tessera's own kernels
    run (subnormal results flush to zero); ``ex2.approx.f32`` keeps them."""
    x = np.array([-130.0, 0.5, -0.25, 1e-40], np.float32)
    body = f"ex2.approx{'.ftz' if ftz else ''}.f32 %d, %a;"
    got = run_elementwise(body, x.view(np.uint32), x.view(np.uint32), x.view(np.uint32))
    want = approx.ex2_model(x, ftz)
    np.testing.assert_array_equal(got, want.view(np.uint32))
    assert (got[0] == 0) == ftz  # 2^-130 is subnormal


def _ftz_reference(x: np.ndarray) -> np.ndarray:
    """IEEE float32 values with subnormals made zeros of their sign (PTX ISA, ".ftz")."""
    return np.where(np.abs(x) < np.float32(2.0**-126), np.copysign(np.float32(0), x), x)


@pytest.mark.parametrize("body, ref", [
    ("add.ftz.f32 %d, %a, %b;", lambda a, b: a + b),
    ("sub.rn.ftz.f32 %d, %a, %b;", lambda a, b: a - b),
    ("mul.rn.ftz.f32 %d, %a, %b;", lambda a, b: a * b),
    ("div.rn.ftz.f32 %d, %a, %b;", lambda a, b: a / b),
    ("fma.rn.ftz.f32 %d, %a, %b, %a;", lambda a, b: (a.astype(np.float64) * b + a)),
    ("min.ftz.f32 %d, %a, %b;", np.minimum),
    ("abs.ftz.f32 %d, %a;", lambda a, b: np.abs(a)),
    ("sqrt.rn.ftz.f32 %d, %b;", lambda a, b: np.sqrt(b)),
])
def test_ftz_arithmetic_flushes_operands_and_results(body: str, ref: Any) -> None:
    """nvcc's ``--use_fast_math`` writes ``.ftz`` on every f32 instruction: operands
    and results below 2^-126 count as zeros of their sign."""
    tiny = np.float32(2.0**-127)
    a = np.array([tiny, -tiny, 2.0**-126, 2.0**-100, 1.5, -3.0, 2.0**-60, 0.0], np.float32)
    b = np.array([1.0, 0.5, -tiny, 2.0**-30, tiny, 2.0**-130, 2.0**-70, -tiny], np.float32)
    b = np.abs(b) if "sqrt" in body else b
    got = run_elementwise(body, a.view(np.uint32), b.view(np.uint32), a.view(np.uint32))
    with np.errstate(all="ignore"):
        want = _ftz_reference(np.asarray(ref(_ftz_reference(a), _ftz_reference(b))).astype(
            np.float32))
    want_bits = np.where(np.isnan(want), np.uint32(0x7FFFFFFF), want.view(np.uint32))
    np.testing.assert_array_equal(got, want_bits)  # a NaN result is the canonical NaN
    plain = body.replace(".ftz", "")  # the same instruction keeps subnormals without it
    assert not np.array_equal(run_elementwise(plain, a.view(np.uint32), b.view(np.uint32),
                                              a.view(np.uint32)), got)


def test_setp_ftz_compares_flushed_operands() -> None:
    body = "setp.lt{}.f32 %p, %a, %b;\n    selp.u32 %d, 1, 0, %p;"
    a = np.array([-2.0**-127, 1.0], np.float32).view(np.uint32)
    b = np.zeros(2, np.uint32)
    assert list(run_elementwise(body.format(""), a, b, b)) == [1, 0]
    assert list(run_elementwise(body.format(".ftz"), a, b, b)) == [0, 0]  # -0 < 0 is false


@pytest.mark.parametrize("body, model", [
    ("rsqrt.approx.ftz.f32 %d, %a;", approx.function_model("rsqrt", True)),
    ("tanh.approx.f32 %d, %a;", approx.function_model("tanh", False)),
    ("sin.approx.f32 %d, %a;", approx.function_model("sin", False)),
    ("cos.approx.ftz.f32 %d, %a;", approx.function_model("cos", True)),
])
def test_fast_math_functions_run_their_models(body: str, model: Any) -> None:
    """Triton's ``rsqrt`` (layer and RMS norms), ``tanh`` and ``sin``/``cos`` (rotary
    embeddings) in fast math: the correctly rounded value, the same on every machine."""
    x = np.array([0.25, 2.0, 3.0, 1e-3, 12.5, 1e-40, 40.0, 0.7], np.float32)
    got = run_elementwise(body, x.view(np.uint32), x.view(np.uint32), x.view(np.uint32))
    np.testing.assert_array_equal(got, model(x).view(np.uint32))


def test_lop3_and_copysign() -> None:
    """``lop3.b32`` evaluates its 8-bit table per bit (0x96: a ^ b ^ c; 0xE8: the
    majority); ``copysign.f32 d, a, b`` gives b's magnitude with a's sign."""
    a, b, c = (rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32) for _ in "abc")
    for lut, want in ((0x96, a ^ b ^ c), (0xE8, (a & b) | (b & c) | (a & c)), (0, 0 * a)):
        got = run_elementwise(f"lop3.b32 %d, %a, %b, %c, {lut:#x};", a, b, c)
        np.testing.assert_array_equal(got, want)
    x = np.array([-1.0, 2.0, -0.0, 3.0], np.float32)
    y = np.array([5.0, -7.0, 1.0, np.inf], np.float32)
    got = run_elementwise("copysign.f32 %d, %a, %b;", x.view(np.uint32), y.view(np.uint32),
                          y.view(np.uint32))
    np.testing.assert_array_equal(got.view(np.float32), [-5.0, 7.0, -1.0, np.inf])


def test_redux_reduces_each_warp() -> None:
    """``redux.sync`` (sm_80; CUB's warp reductions of integers): every lane of a warp
    gets the reduction over the member lanes; ``add`` wraps modulo 2^32; a member mask
    that leaves out lanes which execute it is divergence."""
    a = (np.arange(64, dtype=np.uint64) * 0x0800_0001 + 0xF000_0000).astype(np.uint32)
    got = run_elementwise("redux.sync.add.u32 %d, %a, -1;", a, a, a)
    sums = [int(a[:32].astype(np.uint64).sum()) % 2**32, int(a[32:].astype(np.uint64).sum())
            % 2**32]
    np.testing.assert_array_equal(got, np.repeat(np.array(sums, np.uint32), 32))
    got = run_elementwise("redux.sync.min.s32 %d, %a, -1;", a, a, a).view(np.int32)
    np.testing.assert_array_equal(got, np.repeat([a[:32].view(np.int32).min(),
                                                  a[32:].view(np.int32).min()], 32))
    with pytest.raises(TargetFault, match="warp divergence"):
        run_elementwise("redux.sync.or.b32 %d, %a, 0xffff;", a, a, a)


def test_member_masks_in_registers() -> None:
    """``vote.sync``/``redux.sync`` with the member mask in a register (nvcc's
    ``__ballot_sync(__activemask(), p)``): the even lanes vote and reduce among
    themselves; a member lane that does not execute the instruction is divergence."""
    a = rng.integers(0, 100, 64, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 100, 64, dtype=np.uint64).astype(np.uint32)
    even = """
    and.b32 %e, %t, 1;
    setp.eq.u32 %q, %e, 0;
    mov.u32 %e, 0x55555555;
    setp.lt.u32 %p, %a, %b;
    mov.u32 %d, 7;
    """
    lanes = np.arange(64) % 32
    p = (a < b).reshape(2, 32) & (lanes.reshape(2, 32) % 2 == 0)
    ballot = (p.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1)
    got = run_elementwise(even + "@%q vote.sync.ballot.b32 %d, %p, %e;", a, b, b)
    np.testing.assert_array_equal(got, np.where(lanes % 2 == 0, np.repeat(ballot, 32), 7))
    got = run_elementwise(even + "@%q redux.sync.add.u32 %d, %a, %e;", a, b, b)
    sums = (a.reshape(2, 32)[:, ::2].astype(np.int64).sum(axis=1))
    np.testing.assert_array_equal(got, np.where(lanes % 2 == 0, np.repeat(sums, 32), 7))
    same = run_elementwise("setp.lt.u32 %p, %a, %b;\n    activemask.b32 %e;\n"
                           "    vote.sync.ballot.b32 %d, %p, %e;", a, b, b)
    np.testing.assert_array_equal(same, run_elementwise(
        "setp.lt.u32 %p, %a, %b;\n    vote.sync.ballot.b32 %d, %p, -1;", a, b, b))
    with pytest.raises(TargetFault, match=r"vote\.sync needs every member lane converged"):
        run_elementwise(even.replace("0x55555555", "0x55555557") +
                        "@%q vote.sync.ballot.b32 %d, %p, %e;", a, b, b)


def test_bar_red_reduces_a_predicate_over_the_cta() -> None:
    """``bar.red`` (CUDA's ``__syncthreads_count``/``_and``/``_or``): a barrier that
    counts, or ands or ors, a predicate over every thread of the CTA; each CTA its own."""
    a = rng.integers(0, 100, 64, dtype=np.uint64).astype(np.uint32)
    b = np.full(64, 37, np.uint32)
    body = "setp.lt.u32 %p, %a, %b;\n    {}\n    selp.u32 %d, 1, 0, %q;"
    count = run_elementwise("setp.lt.u32 %p, %a, %b;\n    bar.red.popc.u32 %d, 0, %p;",
                            a, b, b)
    np.testing.assert_array_equal(count, np.full(64, (a < b).sum()))
    for op, want in (("and", (a < b).all()), ("or", (a < b).any()), ("or", (a >= b).any())):
        neg = "!" if (op, want) == ("or", (a >= b).any()) else ""
        got = run_elementwise(body.format(f"bar.red.{op}.pred %q, 0, {neg}%p;"), a, b, b)
        np.testing.assert_array_equal(got, np.full(64, int(want)))
    with pytest.raises(TargetFault, match="divergent barrier"):
        run_elementwise("setp.lt.u32 %p, %a, %b;\n    @%p bar.red.popc.u32 %d, 0, %p;",
                        a, b, b)


def test_match_sync_finds_lanes_of_equal_values() -> None:
    """``match.any.sync``: each lane gets the mask of its warp's lanes holding its
    value; ``match.all.sync``: the member mask and true where all are equal, else 0."""
    a = rng.integers(0, 4, 64, dtype=np.uint64).astype(np.uint32)
    got = run_elementwise("match.any.sync.b32 %d, %a, -1;", a, a, a)
    want = [sum(1 << j for j in range(32) if a[32 * w + j] == a[32 * w + i])
            for w in range(2) for i in range(32)]
    np.testing.assert_array_equal(got, np.array(want, np.uint32))
    mask = "match.all.sync.b32 %d|%p, %a, -1;"
    flag = "match.all.sync.b32 %e|%p, %a, -1;\n    selp.u32 %d, 1, 0, %p;"
    same = np.full(64, 5, np.uint32)
    assert set(run_elementwise(mask, same, same, same)) == {0xFFFFFFFF}
    assert set(run_elementwise(flag, same, same, same)) == {1}
    assert len(set(a[:32])) > 1 and len(set(a[32:])) > 1  # neither warp agrees
    assert set(run_elementwise(mask, a, a, a)) == {0}
    assert set(run_elementwise(flag, a, a, a)) == {0}


def test_vote_ballot_and_any() -> None:
    body = """
    setp.lt.u32 %p, %a, %b;
    vote.sync.ballot.b32 %d, %p, -1;
    vote.sync.any.pred %q, %p, -1;
    @!%q mov.u32 %d, 77;
    """
    a = rng.integers(0, 100, 64, dtype=np.uint64)
    b = np.full(64, 50, np.uint64)
    b[32:] = 0  # the second warp votes all false
    got = run_elementwise(body, a, b, b)
    bits = (a[:32] < 50).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    np.testing.assert_array_equal(got[:32], np.full(32, bits.sum(), np.uint32))
    np.testing.assert_array_equal(got[32:], 77)


LOCAL = HEADER + """
.visible .entry k(.param .u64 out)
{
    .local .align 8 .b8 depot[16];
    .reg .b64 %SPL, %SP, %rd<4>;
    .reg .b32 %r<4>;
    mov.u64 %SPL, depot;
    cvta.local.u64 %SP, %SPL;
    mov.u32 %r0, %tid.x;
    st.local.u32 [%SPL+4], %r0;
    ld.u32 %r1, [%SP+4];
    ld.param.u64 %rd0, [out];
    mul.wide.u32 %rd1, %r0, 4;
    add.s64 %rd2, %rd0, %rd1;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""


def test_local_memory_is_per_thread() -> None:
    out = np.zeros(64, np.uint32)
    ts.ptx.load(LOCAL).kernel("k").run(grid=1, block=64, args=[out])
    np.testing.assert_array_equal(out, np.arange(64))


@pytest.mark.parametrize("old, new, what", [
    ("ld.u32 %r1, [%SP+4];", "ld.u32 %r1, [%SP+8];", "uninitialised local read"),
    ("st.local.u32 [%SPL+4], %r0;", "st.local.u32 [%SPL+16], %r0;", "out of bounds"),
])
def test_local_memory_faults(old: str, new: str, what: str) -> None:
    text = LOCAL.replace(old, new)
    with pytest.raises(TargetFault, match=what) as err:
        ts.ptx.load(text).kernel("k").run(grid=1, block=32, args=[np.zeros(32, np.uint32)])
    assert err.value.loc.line == text.splitlines().index(f"    {new}") + 1


VARIABLES = HEADER + """
.const .align 4 .b8 coef[8] = {1, 0, 0, 0, 3, 0, 0, 0};
.visible .global .align 4 .u32 counter;
.global .align 4 .f32 scale = 0f40000000;
.visible .entry k(.param .u64 out)
{
    .reg .b32 %r<6>;
    .reg .f32 %f<3>;
    .reg .b64 %rd<4>;
    mov.u32 %r0, %tid.x;
    ld.const.u32 %r1, [coef];
    ld.const.u32 %r2, [coef+4];
    mad.lo.s32 %r3, %r0, %r2, %r1;
    ld.global.f32 %f0, [scale];
    cvt.rn.f32.u32 %f1, %r3;
    mul.f32 %f2, %f1, %f0;
    mov.u64 %rd0, counter;
    atom.global.add.u32 %r4, [%rd0], 1;
    ld.param.u64 %rd1, [out];
    mul.wide.u32 %rd2, %r0, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.f32 [%rd3], %f2;
    ret;
}
"""


def test_module_variables_with_initializers_and_symbols() -> None:
    k = ts.ptx.load(VARIABLES).kernel("k")
    out = np.zeros(32, np.float32)
    k.run(grid=1, block=32, args=[out])
    np.testing.assert_array_equal(out, 2.0 * (3 * np.arange(32) + 1))
    counter = np.array([100], np.uint32)
    coef = np.array([5, 2], np.uint32)
    k.run(grid=1, block=32, args=[out], symbols={"counter": counter, "coef": coef})
    np.testing.assert_array_equal(out, 2.0 * (2 * np.arange(32) + 5))
    assert counter[0] == 132
    with pytest.raises(ts.errors.ArgumentError, match="no variable 'nope'"):
        k.run(grid=1, block=32, args=[out], symbols={"nope": counter})


def test_cache_policies_change_no_value() -> None:
    body = """
    createpolicy.fractional.L2::evict_last.b64 %rd7, 1.0;
    ld.global.L1::evict_last.L2::cache_hint.u32 %d, [%rd5], %rd7;
    """
    a = rng.integers(0, 2**32, 32, dtype=np.uint64)
    c = rng.integers(0, 2**32, 32, dtype=np.uint64)
    np.testing.assert_array_equal(run_elementwise(body, a, a, c), c.astype(np.uint32))


STMATRIX = HEADER.replace("sm_80", "sm_90a") + """
.visible .entry k(.param .u64 src, .param .u64 dst)
{
    .shared .align 16 .b8 tile[1024];
    .reg .b32 %r<12>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd0, [src];
    ld.param.u64 %rd1, [dst];
    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    shl.b32 %r2, %r0, 4;
    mul.wide.u32 %rd2, %r0, 16;
    add.s64 %rd3, %rd0, %rd2;
    ld.global.v4.u32 {%r4, %r5, %r6, %r7}, [%rd3];
    add.s32 %r3, %r1, %r2;
    st.shared.v4.u32 [%r3], {%r4, %r5, %r6, %r7};
    bar.sync 0;
    ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r8, %r9, %r10, %r11}, [%r3];
    stmatrix.sync.aligned.m8n8.x4.shared.b16 [%r3+512], {%r8, %r9, %r10, %r11};
    bar.sync 0;
    ld.shared.v4.u32 {%r4, %r5, %r6, %r7}, [%r3+512];
    add.s64 %rd4, %rd1, %rd2;
    st.global.v4.u32 [%rd4], {%r4, %r5, %r6, %r7};
    ret;
}
"""


@pytest.mark.parametrize("trans", ["", ".trans"])
def test_stmatrix_inverts_ldmatrix(trans: str) -> None:
    """Rows of 16 bytes, one per lane, form four 8x8 matrices of b16: ldmatrix then
    stmatrix puts them back; a .trans on the store alone transposes each matrix."""
    text = STMATRIX.replace("stmatrix.sync.aligned.m8n8.x4",
                            f"stmatrix.sync.aligned.m8n8.x4{trans}")
    src = rng.integers(0, 2**16, (4, 8, 8), dtype=np.uint64).astype(np.uint16)
    dst = np.zeros_like(src)
    ts.ptx.load(text).kernel("k").run(grid=1, block=32, args=[src, dst])
    want = np.swapaxes(src, 1, 2) if trans else src
    np.testing.assert_array_equal(dst, want)


SHARED_ADDRESSES = HEADER + """
.extern .shared .align 16 .b8 dyn[];
.visible .entry k(.param .u64 out)
{
    .shared .align 8 .b8 fixed[32];
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd0, [out];
    mov.u32 %r0, fixed;
    mov.u32 %r1, dyn;
    st.shared.u32 [%r1+60], %r1;
    ld.shared.u32 %r2, [%r1+60];
    mov.u64 %rd1, dyn;
    cvta.shared.u64 %rd2, %rd1;
    cvta.to.shared.u64 %rd3, %rd2;
    cvt.u32.u64 %r3, %rd3;
    st.global.v4.u32 [%rd0], {%r0, %r1, %r2, %r3};
    ret;
}
"""


def test_static_and_dynamic_shared_memory_start_above_the_reserved_kilobyte() -> None:
    """A kernel's first buffer lies at shared address 1024, the end of the kilobyte
    reserved for system use (CUDA C++ Programming Guide, "Compute Capabilities"), and
    the ``.extern .shared`` array after the static ones; its last byte is the CTA's."""
    out = np.zeros(4, np.uint32)
    kernel = ts.ptx.load(SHARED_ADDRESSES).kernel("k")
    kernel.run(grid=1, block=1, args=[out], shared_bytes=64)
    assert out.tolist() == [1024, 1056, 1056, 1056]
    with pytest.raises(TargetFault, match="shared address 1116; the CTA's 80 bytes of shared "
                       "memory are shared addresses 1024 to 1103"):
        kernel.run(grid=1, block=1, args=[out], shared_bytes=48)
