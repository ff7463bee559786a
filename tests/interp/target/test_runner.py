"""The Target IR interpreter: launches, global memory, integer ops, control flow with
per-thread masks, warp shuffles and the faults it reports."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.errors import ArgumentError, InterpretError
from tessera.interp.target import TensorMapArg, run_target
from tessera.interp.target.state import TargetFault
from tests.interp.target.kit import S32, U32, U64, Kernel, reg, run_map, target_ops


def _saxpy(block: int = 64, grid: int = 3) -> Kernel:
    """y[i] = a * x[i] + y[i] for i < n, with mul.rn and add.rn (no fusion)."""
    k = Kernel("saxpy", [U64, U64, reg("f32"), U32], block=(block,), grid=(grid, 1, 1))
    x, y, a, n = k.args
    i = k.gtid()

    def body() -> None:
        ya = k.elem_addr(y, i, 4)
        ax = k.bin("mul", "f32", a, k.ld("global", "f32", k.elem_addr(x, i, 4)), "rn")
        k.st("global", "f32", ya, k.bin("add", "f32", ax, k.ld("global", "f32", ya), "rn"))
    k.if_(k.setp("lt", "u32", i, n), body)
    return k


def test_saxpy_with_divergent_tail() -> None:
    """Threads with i >= n skip the body; they must not touch memory."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(150).astype(np.float32)
    y = rng.standard_normal(150).astype(np.float32)
    want = np.float32(1.5) * x + y
    run_target(_saxpy().build(), [x, y, 1.5, 150])
    np.testing.assert_array_equal(y, want)


def test_out_of_bounds_global_read_names_op_line_and_thread() -> None:
    """Without the guard, thread 150 (CTA 2, thread 22) reads one past the end."""
    k = _saxpy()
    fn = k.build()
    x = np.zeros(150, np.float32)
    with pytest.raises(TargetFault, match="out of bounds") as info:
        run_target(fn, [x, np.zeros(150, np.float32), 1.0, 1000])
    err = info.value
    assert isinstance(err, InterpretError)
    assert (err.thread, err.cta) == (22, (2, 0, 0))
    assert "ptx.ld" in str(err) and "<saxpy>:" in str(err) and "600 bytes" in str(err)


def test_non_contiguous_arguments_are_written_back() -> None:
    x = np.arange(300, dtype=np.float32)[::2]
    y = np.zeros((150, 2), np.float32)[:, 0]
    run_target(_saxpy().build(), [x, y, 2.0, 150])
    np.testing.assert_array_equal(y, 2 * x)


def test_misaligned_global_access() -> None:
    """A 4-byte load from an address that is not a multiple of 4 (PTX ISA sec. 5.4.3)."""
    k = Kernel("mis", [U64], block=(32,))
    addr = k.bin("add", "u64", k.args[0], k.const(2, "u64"))
    k.st("global", "f32", addr, k.ld("global", "f32", addr))
    with pytest.raises(TargetFault, match="misaligned address"):
        run_target(k.build(), [np.zeros(64, np.float32)])


def test_vector_load_store_and_offsets() -> None:
    """ld.global.v4.f32 / st.global.v4 with an immediate offset, 16-byte aligned."""
    k = Kernel("v4", [U64, U64], block=(16,))
    i = k.tid()
    v = k.ld("global", "f32", k.elem_addr(k.args[0], i, 16), vec=4, offset=16)
    k.st("global", "f32", k.elem_addr(k.args[1], i, 16), v, vec=4)
    src = np.arange(68, dtype=np.float32)
    dst = np.zeros(64, np.float32)
    run_target(k.build(), [src, dst])
    np.testing.assert_array_equal(dst, src[4:])


u32s = st.integers(0, 2**32 - 1)
s32s = st.integers(-(2**31), 2**31 - 1)


def _wrap(v: int, bits: int, signed: bool) -> int:
    v %= 2**bits
    return v - 2**bits if signed and v >= 2 ** (bits - 1) else v


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(s32s, s32s), min_size=16, max_size=16))
def test_s32_arithmetic_wraps(pairs: list[tuple[int, int]]) -> None:
    """add/sub/mul.lo wrap modulo 2^32; mul.wide/mul.hi give the full product; div/rem
    truncate toward zero (PTX ISA, "Integer Arithmetic Instructions")."""
    a = np.array([p[0] for p in pairs], np.int32)
    b = np.array([p[1] or 1 for p in pairs], np.int32)
    cases = {
        "add": lambda x, y: _wrap(x + y, 32, True), "sub": lambda x, y: _wrap(x - y, 32, True),
        "mul": lambda x, y: _wrap(x * y, 32, True), "min": min, "max": max,
        "div": lambda x, y: _wrap(_trunc_div(x, y), 32, True),
        "rem": lambda x, y: x - y * _trunc_div(x, y),
        "hi": lambda x, y: (x * y) >> 32,
    }
    for name, fn in cases.items():
        op, mode = ("mul", "hi") if name == "hi" else (name, "")
        got = run_map(lambda k, v, op=op, mode=mode: k.bin(op, "s32", *v, mode), [a, b],
                      ["s32", "s32"], "s32", block=16)
        np.testing.assert_array_equal(got, [fn(int(x), int(y)) for x, y in zip(a, b)], name)
    got = run_map(lambda k, v: k.bin("mul", "s32", *v, "wide"), [a, b], ["s32", "s32"],
                  "s64", block=16)
    np.testing.assert_array_equal(got, [int(x) * int(y) for x, y in zip(a, b)])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(u32s, st.integers(0, 70)), min_size=16, max_size=16))
def test_shifts_clamp_at_the_register_width(pairs: list[tuple[int, int]]) -> None:
    """shl/shr.u/shr.s/shr.b32 with amounts beyond 31: zero, or the sign for shr.s
    (PTX ISA "shl"/"shr": 'shift amounts greater than the register width N are
    clamped to N')."""
    x = np.array([p[0] for p in pairs], np.uint32)
    n = np.array([p[1] for p in pairs], np.uint32)
    for elem, op in [("u32", "shl"), ("u32", "shr"), ("b32", "shr"), ("s32", "shr")]:
        xs = x.view(np.int32) if elem == "s32" else x
        got = run_map(lambda k, v, e=elem, o=op: k.bin(o, e, *v), [xs, n], [elem, "u32"],
                      elem, block=16)
        want = []
        for v, s in zip(xs.tolist(), n.tolist()):
            s = min(s, 32)
            want.append(_wrap(v << s, 32, False) if op == "shl" else v >> s)
        np.testing.assert_array_equal(got.astype(np.int64), want, f"{op}.{elem}")


def test_integer_division_by_zero_is_reported() -> None:
    a = np.arange(64, dtype=np.uint32)
    b = np.ones(64, np.uint32)
    b[40] = 0
    with pytest.raises(TargetFault, match="division by zero"):
        run_map(lambda k, v: k.bin("div", "u32", *v), [a, b], ["u32", "u32"], "u32")


def test_if_else_merges_per_thread() -> None:
    """r = (x < 0) ? -x : x + 1, yielded by both regions and merged per thread."""
    x = np.arange(-32, 32, dtype=np.int32)

    def body(k: Kernel, v: list) -> object:
        neg = k.setp("lt", "s32", v[0], k.const(0, "s32"))
        return k.if_(neg, lambda: k.un("neg", "s32", v[0]),
                     lambda: k.bin("add", "s32", v[0], k.const(1, "s32")), types=[S32])
    got = run_map(body, [x], ["s32"], "s32")
    np.testing.assert_array_equal(got, np.where(x < 0, -x, x + 1))


def test_for_loop_with_per_thread_trip_counts() -> None:
    """Thread i sums j for j in [0, i): threads leave the loop at different times."""
    def body(k: Kernel, v: list) -> object:
        zero, one = k.const(0, "s32"), k.const(1, "s32")
        return k.for_(zero, v[0], one, [zero], lambda j, acc: k.bin("add", "s32", acc, j))
    n = np.arange(64, dtype=np.int32)
    got = run_map(body, [n], ["s32"], "s32")
    np.testing.assert_array_equal(got, n * (n - 1) // 2)


def test_while_loop_collatz_steps() -> None:
    def body(k: Kernel, v: list) -> object:
        one = k.const(1, "u32")

        def step(x: object, count: object) -> list:
            odd = k.setp("ne", "u32", k.bin("and", "u32", x, one), k.const(0, "u32"))
            nxt = k.selp("u32", k.bin("add", "u32", k.bin("mul", "u32", x, k.const(3, "u32")),
                                      one), k.bin("shr", "u32", x, one), odd)
            return [nxt, k.bin("add", "u32", count, one)]
        res = k.while_([v[0], k.const(0, "u32")], lambda x, c: k.setp("gt", "u32", x, one),
                       step)
        return res[1]
    x = np.arange(1, 65, dtype=np.uint32)

    def steps(v: int) -> int:
        c = 0
        while v > 1:
            v = 3 * v + 1 if v % 2 else v // 2
            c += 1
        return c
    got = run_map(body, [x], ["u32"], "u32")
    np.testing.assert_array_equal(got, [steps(int(v)) for v in x])


def test_shfl_bfly_butterfly_sum() -> None:
    """Five shfl.sync.bfly.b32 rounds (xor 16, 8, 4, 2, 1) leave the warp's sum in every
    lane (PTX ISA, "shfl.sync")."""
    def body(k: Kernel, v: list) -> object:
        acc = v[0]
        for d in (16, 8, 4, 2, 1):
            acc = k.bin("add", "u32", acc, k.op(target_ops.Shfl("bfly"), acc, k.const(d, "u32")))
        return acc
    x = np.random.default_rng(1).integers(0, 1000, 128).astype(np.uint32)
    got = run_map(body, [x], ["u32"], "u32", block=128)
    np.testing.assert_array_equal(got, np.repeat(x.reshape(4, 32).sum(1), 32))


@pytest.mark.parametrize(("mode", "clamp", "shift"), [("down", 31, 3), ("up", 0, 5),
                                                      ("idx", 31, 7)])
def test_shfl_modes(mode: str, clamp: int, shift: int) -> None:
    """down: lane + b if <= 31 else own; up: lane - b if >= 0 else own; idx: lane b."""
    x = np.arange(64, dtype=np.float32) * 1.5
    got = run_map(lambda k, v: k.op(target_ops.Shfl(mode, clamp), v[0], k.const(shift, "u32")), [x],
                  ["f32"], "f32")
    lane = np.arange(64) % 32
    src = {"down": np.where(lane + shift <= 31, lane + shift, lane),
           "up": np.where(lane - shift >= 0, lane - shift, lane),
           "idx": np.full(64, shift)}[mode]
    np.testing.assert_array_equal(got, x[np.arange(64) - lane + src])


def test_shfl_from_a_lane_outside_the_member_mask() -> None:
    k = Kernel("shfl", [], block=(32,))
    k.op(target_ops.Shfl("idx", 31, 0x0000FFFF), k.const(1, "u32"), k.const(20, "u32"))
    with pytest.raises(TargetFault, match="warp divergence"):
        run_target(k.build(), [])


def test_pack_unpack_bf16_pairs() -> None:
    """mov.b32 {lo, hi}: the first operand in the low half (PTX ISA, "mov": packing)."""
    lo = np.random.default_rng(2).standard_normal(64).astype(ml_dtypes.bfloat16)
    hi = (np.arange(64) - 7.5).astype(ml_dtypes.bfloat16)
    got = run_map(lambda k, v: k.pack("b32", v[0], v[1]), [lo, hi], ["bf16", "bf16"], "b32")
    want = lo.view(np.uint16).astype(np.uint32) | hi.view(np.uint16).astype(np.uint32) << 16
    np.testing.assert_array_equal(got, want)
    back = run_map(lambda k, v: k.unpack("bf16", 2, v[0])[1], [want], ["b32"], "bf16")
    np.testing.assert_array_equal(back.view(np.uint16), hi.view(np.uint16))


def test_red_global_add_applies_in_cta_order() -> None:
    """red.global.add.f32 from 4 CTAs into one word equals the float32 sum taken in
    linear thread order (tessera.ir.dialects.target.ops convention)."""
    k = Kernel("red", [U64, U64], block=(32,), grid=(4, 1, 1))
    i = k.gtid()
    k.op(target_ops.Reduce("global", "add", "f32"), k.args[1],
         k.ld("global", "f32", k.elem_addr(k.args[0], i, 4)))
    x = (np.random.default_rng(3).standard_normal(128) * 10.0 ** np.arange(128) % 7).astype(
        np.float32)
    out = np.zeros(1, np.float32)
    run_target(k.build(), [x, out])
    want = np.float32(0)
    for v in x:
        want = np.float32(want + v)
    assert out[0] == want


def test_red_add_f32_flushes_subnormals() -> None:
    """PTX ISA, "red": 'red.add.f32 rounds to nearest even and flushes
    subnormal inputs and results to sign-preserving zero'."""
    k = Kernel("ftz", [U64, U64], block=(32,))
    t = k.tid()
    k.op(target_ops.Reduce("global", "add", "f32"), k.elem_addr(k.args[1], t, 4),
         k.ld("global", "f32", k.elem_addr(k.args[0], t, 4)))
    tiny = np.float32(np.finfo(np.float32).tiny)
    x = np.full(32, tiny / 4, np.float32)  # subnormal inputs vanish
    x[1] = tiny  # a normal input is added
    x[2] = np.float32(1.5) * tiny  # -tiny + 1.5 tiny = tiny / 2, a subnormal result
    out = np.zeros(32, np.float32)
    out[2] = -tiny
    run_target(k.build(), [x, out])
    assert out[0] == 0 and out[1] == tiny and out[2] == 0
    assert np.float32(-tiny) + x[2] != 0  # plain float32 addition would keep tiny / 2


def test_special_registers_of_a_2d_grid() -> None:
    k = Kernel("ids", [U64], block=(32,), grid=(2, 3, 1))
    lin = k.bin("add", "u32", k.sreg("ctaid.x"),
                k.bin("mul", "u32", k.sreg("ctaid.y"), k.sreg("nctaid.x")))
    g = k.bin("add", "u32", k.bin("mul", "u32", lin, k.const(32, "u32")), k.tid())
    packed = k.bin("or", "u32", k.bin("shl", "u32", k.sreg("ctaid.y"), k.const(8, "u32")),
                   k.sreg("laneid"))
    k.st("global", "u32", k.elem_addr(k.args[0], g, 4), packed)
    out = np.zeros(192, np.uint32)
    run_target(k.build(), [out])
    t = np.arange(192)
    np.testing.assert_array_equal(out, (t // 64) << 8 | t % 32)


def test_argument_errors() -> None:
    fn = _saxpy().build()
    with pytest.raises(ArgumentError, match="takes 4 arguments"):
        run_target(fn, [np.zeros(4, np.float32)])
    with pytest.raises(ArgumentError, match="pointer"):
        k = Kernel("f", [reg("f32")], block=(32,))
        run_target(k.build(), [np.zeros(4, np.float32)])
    with pytest.raises(ArgumentError, match="TensorMapArg"):
        from tessera.ir.dialects.target import TensorMapType
        k = Kernel("t", [TensorMapType(0, "bf16", (8, 8), 0)], block=(32,))
        run_target(k.build(), [TensorMapArg(np.zeros((8, 8), np.float32), "f32", (8, 8))])
