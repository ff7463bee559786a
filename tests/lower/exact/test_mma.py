"""The exact mma's deposit of float64 products (tessera.lower.exact.mma.deposit_f64)
against exact integer arithmetic, over the whole range of products of two f32 values:
each thread deposits four products into the accumulator it owns, and the words, read
back, are the exact sum in quanta of 2**-MMA_QUANTUM; non-finite products set flags."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tessera.ir.core import Block, Function, Value
from tessera.ir.dialects.target import KERNEL, RegType, Return
from tessera.ir.dialects.target.ops import SharedAlloc
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import NAN_BIT, NINF_BIT, PINF_BIT, zero_shared
from tessera.lower.exact.mma import MMA_DIGITS, MMA_QUANTUM, deposit_f64

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")

THREADS = 128
TERMS = 4
WORDS = MMA_DIGITS + 1


def _at(e: TargetEmitter, base: Value, index: Value, size: int) -> Value:
    return e.add(base, e.bin("mul", index, e.const(size, "u32"), "u32", "wide"), "u64")


def _kernel() -> Function:
    """Thread t: acc[t] = sum_c x[t, c] * y[t, c] (f64 products of f32 values)."""
    block = Block()
    px, py, pout = (block.add_arg(RegType("u64")) for _ in range(3))
    e = TargetEmitter(block)
    i = e.sreg("tid.x")
    base = e.one(SharedAlloc("acc", THREADS * WORDS * 8, 8))
    zero_shared(e, base, THREADS * WORDS)
    e.bar()
    acc = e.add(base, e.mul(i, e.const(8 * WORDS, "u32"), "u32"), "u32")
    for c in range(TERMS):
        x = e.cvt(e.ld("global", _at(e, px, i, 4 * TERMS), "f32", offset=4 * c), "f64", "f32")
        y = e.cvt(e.ld("global", _at(e, py, i, 4 * TERMS), "f32", offset=4 * c), "f64", "f32")
        deposit_f64(e, acc, e.mul(x, y, "f64"))
    for k in range(WORDS):  # each thread copies its own accumulator out
        e.st("global", _at(e, pout, i, 8 * WORDS), e.ld("shared", acc, "u64", offset=8 * k),
             "u64", offset=8 * k)
    e.op(Return())
    return Function("deposit_f64", block, [], kind=KERNEL,
                    attrs={"target": "sm_80", "block": [THREADS], "grid": [1]})


def test_products_over_the_whole_f32_range_deposit_exactly() -> None:
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((THREADS, TERMS)) *
         2.0 ** rng.integers(-149, 127, (THREADS, TERMS))).astype(np.float32)
    y = (rng.standard_normal((THREADS, TERMS)) *
         2.0 ** rng.integers(-149, 127, (THREADS, TERMS))).astype(np.float32)
    tiny, huge = np.float32(2.0**-149), np.finfo(np.float32).max
    x[0], y[0] = [tiny, -tiny, huge, -huge], [tiny, tiny, huge, huge]  # 2^-298, ~2^256
    x[1], y[1] = [1.0, 2.0**-24, 2.0**-40, 0.0], [1.0, 1.0, 2.0**-40, -0.0]
    x[2], y[2] = [np.inf, 1.0, 0.0, 3.0], [0.0, 1.0, 1.0, 1.0]  # inf * 0: NaN
    x[3], y[3] = [np.inf, -2.0, 5.0, 1.0], [2.0, np.inf, 1.0, 1.0]  # +inf and -inf
    x[4], y[4] = [-np.inf, np.nan, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]
    x[5], y[5] = [huge, huge, -huge, -huge], [huge, huge, huge, huge]  # cancel exactly
    out = np.zeros(THREADS * WORDS, np.uint64)
    target.run_target(_kernel(), [x, y, out])
    words = out.view(np.int64).reshape(THREADS, WORDS)
    for t in range(THREADS):
        got = sum(int(w) << (32 * k) for k, w in enumerate(words[t, :MMA_DIGITS]))
        p = [float(a) * float(b) for a, b in zip(x[t].astype(np.float64),
                                                 y[t].astype(np.float64))]
        finite = [v for v in p if np.isfinite(v)]
        want = sum(int(Fraction(v) * (1 << MMA_QUANTUM)) for v in finite)
        assert got == want, t
        flags = int(words[t, MMA_DIGITS]) & 0xFFFFFFFF
        expect = (NAN_BIT if any(np.isnan(v) for v in p) else 0) | \
            (PINF_BIT if np.inf in p else 0) | (NINF_BIT if -np.inf in p else 0)
        assert flags == expect, t


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_hand_written_exact_gemm_on_target(target: str) -> None:
    """A ``@ts.kernel`` GEMM whose exact accumulator is carried over a K loop of two
    tiles: the Target IR interpreter gives the tile simulator's bits (the f32 row
    ``[1, 2^-24, 2^-40]`` times ``[1, 1, 2^-40]`` is ``1 + 2^-23``, which a float64 sum
    misses), ptxas assembles it without spills; a tile whose accumulators cannot fit in
    shared memory is refused at the mma's line."""
    import inspect

    import tessera as ts
    from tessera.errors import UnsupportedError
    from tessera.frontend.kernel.backends.compile import compile_kernel
    from tests.tile.test_exact import HARD_A, HARD_B, exact_gemm

    rng = np.random.default_rng(5)
    a = (rng.standard_normal((32, 32)) * 2.0 ** rng.integers(-60, 60, (32, 32))
         ).astype(np.float32)
    b = (rng.standard_normal((32, 16)) * 2.0 ** rng.integers(-60, 60, (32, 16))
         ).astype(np.float32)
    a[0, :3], b[:3, 0], a[0, 3:], b[3:, 0] = HARD_A, HARD_B, 0.0, 0.0
    c = np.zeros((32, 16), np.float32)
    launch = {"tile_shape": (16, 8, 16)}
    ts.check_against_reference(exact_gemm, a, b, c, backend="target", target=target,
                               bitwise=True, **launch)
    stats = compile_kernel(exact_gemm, a, b, c, target=target, **launch).assemble().stats
    assert stats["exact_gemm"].spill_stores == 0
    lines, start = inspect.getsourcelines(exact_gemm.fn)
    line = start + next(k for k, text in enumerate(lines) if "exact=True" in text)
    with pytest.raises(UnsupportedError, match=r"tile\.mma \(exact\) of a 64x32 tile needs "
                                               r"360,448 bytes") as err:
        compile_kernel(exact_gemm, np.zeros((64, 32), np.float32),
                       np.zeros((32, 32), np.float32), np.zeros((64, 32), np.float32),
                       target=target, tile_shape=(64, 32, 16))
    assert err.value.loc.line == line


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_register_operands_are_staged_through_shared_memory(target: str) -> None:
    """Operands computed in the kernel (``2 A`` and ``(B + 0)^T``, new on every trip of
    the K loop) are staged through shared memory between barriers: the Target IR
    interpreter gives the tile simulator's bits, and ptxas assembles without spills."""
    import tessera as ts
    from tessera.frontend.kernel.backends.compile import compile_kernel
    from tests.tile.test_exact import HARD_A, HARD_B, register_gemm

    rng = np.random.default_rng(6)
    a = (rng.standard_normal((32, 32)) * 2.0 ** rng.integers(-30, 30, (32, 32))
         ).astype(np.float32)
    bt = (rng.standard_normal((16, 32)) * 2.0 ** rng.integers(-30, 30, (16, 32))
          ).astype(np.float32)
    a[0, :3], bt[0, :3], a[0, 3:], bt[0, 3:] = HARD_A, HARD_B, 0.0, 0.0
    c = np.zeros((32, 16), np.float32)
    launch = {"tile_shape": (16, 8, 16)}
    ts.check_against_reference(register_gemm, a, bt, c, backend="target", target=target,
                               bitwise=True, **launch)
    kernel = compile_kernel(register_gemm, a, bt, c, target=target, **launch)
    assert kernel.assemble().stats["register_gemm"].spill_stores == 0
    assert kernel.ptx.count("bar.sync") >= 4  # two per staged operand
