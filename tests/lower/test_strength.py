"""Integer division by a constant power of two as shifts and masks
(:mod:`tessera.lower.strength`): the PTX ISA's ``div``/``rem`` results (the quotient
rounds toward zero, the remainder has the dividend's sign) for every sign and width,
run in the Target IR interpreter; which values count as non-negative; and the main
loop of the sm_90a GEMM left without a division."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.ir.core import Block, Value, walk
from tessera.ir.dialects.target.ops import Binary
from tessera.lower.emit import TargetEmitter
from tessera.lower.strength import nonneg
from tests.lower.arith.test_mathlib import THREADS, address, kernel

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")

DTYPES = {"s32": np.int32, "u32": np.uint32, "s64": np.int64, "u64": np.uint64}


def ptx_div_rem(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """``div`` and ``rem`` as the PTX ISA writes them, in Python integers."""
    q = [int(v) // d if v >= 0 else -((-int(v)) // d) for v in x.tolist()]
    r = [int(v) - qq * d for v, qq in zip(x.tolist(), q)]
    return np.array(q, dtype=x.dtype), np.array(r, dtype=x.dtype)


def inputs(dtype: type) -> np.ndarray:
    info = np.iinfo(dtype)
    edges = [0, 1, 2, 3, 7, 8, 9, 63, 64, 65, info.max, info.max - 1, info.min, info.min + 1]
    if info.min < 0:
        edges += [-1, -2, -3, -7, -8, -9, -63, -64, -65]
    rng = np.random.default_rng(7)
    rest = rng.integers(info.min, info.max, 2 * THREADS - len(edges), dtype=dtype,
                        endpoint=True)
    return np.concatenate([np.array(edges, dtype), rest])


@pytest.mark.parametrize("type", sorted(DTYPES))
@pytest.mark.parametrize("d", [1, 2, 8, 64, 2 ** 30])
def test_shifts_and_masks_give_ptx_div_and_rem(type: str, d: int) -> None:
    size = 8 if type.endswith("64") else 4

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        x = e.ld("global", address(e, p[0], i, size), type)
        for k, op in enumerate(("div", "rem")):
            out = e.bin(op, x, e.const(d, type), type)
            e.st("global", address(e, p[1 + k], i, size), out, type)
    fn = kernel("divide", 3, 2, body)
    assert not any(isinstance(i.op, Binary) and i.op.op in ("div", "rem") for i in walk(fn))
    x = inputs(DTYPES[type])
    q, r = np.zeros_like(x), np.zeros_like(x)
    target.run_target(fn, [x, q, r])
    want_q, want_r = ptx_div_rem(x, d)
    assert np.array_equal(q, want_q) and np.array_equal(r, want_r)


def test_other_divisors_stay_div() -> None:
    e = TargetEmitter(Block())
    x = e.sreg("tid.x")
    e.bin("div", x, e.const(3, "u32"), "u32")
    e.bin("rem", x, e.const(0, "u32"), "u32")
    e.bin("div", e.const(1.0, "f32"), e.const(2.0, "f32"), "f32")
    kept = [i.op for i in e.block.instrs if isinstance(i.op, Binary)]
    assert [(op.op, op.type) for op in kept] == [("div", "u32"), ("rem", "u32"),
                                                 ("div", "f32")]


def test_what_counts_as_non_negative() -> None:
    e = TargetEmitter(Block())
    tid = e.cvt(e.sreg("tid.x"), "s32", "u32")
    four = e.const(4, "s32")
    assert nonneg(tid) and nonneg(e.add(e.mul(tid, four, "s32"), four, "s32"))
    assert not nonneg(e.bin("sub", tid, four, "s32"))
    assert not nonneg(e.const(-1, "s32")) and not nonneg(e.const(2 ** 31, "u32"))
    seen: list[bool] = []

    def body(t: TargetEmitter, k: Value) -> None:
        seen.append(nonneg(k))
    e.for_(e.const(0, "s32"), four, e.const(1, "s32"), [], body)
    e.for_(e.const(-4, "s32"), four, e.const(1, "s32"), [], body)
    e.for_(e.const(4, "s32"), e.const(0, "s32"), e.const(-1, "s32"), [], body)
    assert seen == [True, False, False]
    # a known non-negative dividend takes one instruction; an unknown one, four
    e2 = TargetEmitter(Block())
    e2.bin("div", e2.cvt(e2.sreg("tid.x"), "s32", "u32"), e2.const(8, "s32"), "s32")
    n = len(e2.block.instrs)
    e2.bin("div", e2.ld("global", e2.const(0, "u64"), "s32"), e2.const(8, "s32"), "s32")
    ops = [i.op for i in e2.block.instrs[n + 1:] if isinstance(i.op, Binary)]
    assert [op.op for op in ops] == ["shr", "and", "add", "shr"]


def test_the_gemm_main_loop_divides_nothing() -> None:
    """The sm_90a GEMM's ring slot (stage, phase) and iteration number were three
    ``div``/``rem`` per K step, which ptxas assembles through the float reciprocal."""
    import ml_dtypes

    import tessera as ts
    from tessera.conformance.kernels.gemm import gemm

    a = np.zeros((256, 256), ml_dtypes.bfloat16)
    c = ts.compile_kernel(gemm, a, a, np.zeros((256, 256), np.float32), target="sm_90a",
                          tile_shape=(128, 128, 64))
    assert not any(isinstance(i.op, Binary) and i.op.op in ("div", "rem")
                   and i.op.type[0] in "us" for i in walk(c.kernel))
    assert not any(f"{op}.{t}" in c.ptx for op in ("div", "rem") for t in ("s32", "u32"))


def test_an_index_below_the_divisor_folds() -> None:
    """Under a CTA of 128 threads ``%tid.x * 4 + 3 < 512``: its quotient by 512 is 0 and
    its remainder itself, for a divisor of any size; one that may reach the divisor is
    divided. The kernel runs in the Target IR interpreter against NumPy."""
    from tessera.lower.strength import below, threads

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        tid = e.cvt(e.sreg("tid.x"), "s32", "u32")
        k = e.add(e.mul(tid, e.const(4, "s32"), "s32"), e.const(3, "s32"), "s32")
        assert below(k) == 128 * 4
        outs = [e.bin("div", k, e.const(512, "s32"), "s32"),
                e.bin("rem", k, e.const(600, "s32"), "s32"),
                e.bin("rem", k, e.const(256, "s32"), "s32"),
                e.bin("div", k, e.const(100, "s32"), "s32")]
        for j, out in enumerate(outs):
            e.st("global", address(e, p[0], e.add(e.mul(i, e.const(4, "u32"), "u32"),
                                                  e.const(j, "u32"), "u32"), 4), out, "s32")
    with threads(THREADS):
        fn = kernel("folded", 1, 1, body)
    ops = [(i.op.op, i.op.type) for i in walk(fn) if isinstance(i.op, Binary)
           and i.op.op in ("div", "rem", "shr", "and")]
    assert ops == [("and", "s32"), ("div", "s32")]  # rem 256 a mask; div 100 kept
    out = np.zeros(4 * THREADS, np.int32)
    target.run_target(fn, [out])
    k = np.arange(THREADS) * 4 + 3
    want = np.stack([k // 512, k % 600, k % 256, k // 100], axis=1).ravel()
    assert np.array_equal(out, want)
    with threads(THREADS):
        e = TargetEmitter(Block())
        assert below(e.sreg("tid.y")) is None
        assert below(e.bin("sub", e.const(9, "s32"), e.const(1, "s32"), "s32")) is None
    assert below(TargetEmitter(Block()).sreg("tid.x")) is None  # outside a lowering
