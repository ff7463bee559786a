"""Checked mode's table-driven ``exp`` (:mod:`tessera.numerics.transcendental.exp_table`,
emitted by :func:`tessera.lower.arith.mathlib.emit_exp_f32`) against the tile simulator's
definition, :func:`tessera.numerics.transcendental.exp.exp_f32`, bit for bit on the
Target IR interpreter; its proof's ingredients; its cost; the table op's rules."""

from __future__ import annotations

import decimal
from fractions import Fraction

import numpy as np
import pytest

from tessera.errors import IRVerifyError
from tessera.ir.core import Block
from tessera.ir.dialects.target import If, RegType
from tessera.ir.dialects.target.tables import TABLES, TableLoad
from tessera.lower.arith import mathlib
from tessera.lower.emit import TargetEmitter
from tessera.numerics.transcendental import exp_table as tang
from tessera.numerics.transcendental.exp import exp_f32, exp_f32_unrounded

target = pytest.importorskip("tessera.interp.target")
from tests.lower.arith.test_mathlib import THREADS, address, exp_kernel, kernel, run_exp  # noqa: E402

#: f32 inputs whose e^x lies within a few binary64 ulps of a binary32 rounding boundary
#: (found by scanning all binary32 inputs in [2^-24, 89) and (-87.3, -2^-24])
HARD = np.array([0x33800000, 0x343FFFFF, 0x34DFFFFD, 0x356FFFF9, 0x35F7FFF1, 0x367BFFE1,
                 0x36FDFFC1, 0x377EFF81, 0x383A3EF1, 0x38AD9E29, 0x38E69CC1, 0x39C6BE5B,
                 0x39E5BB1D, 0xBAE0E25C, 0xBBB70EE8, 0xBBF0EDF1, 0xBC2A461A, 0x3D1A274E,
                 0x3FE67199, 0x4001B249, 0x40315B33, 0xC0781533, 0xC16912CD, 0x41CBF87B,
                 0x4288942B], np.uint32).view(np.float32)


def dropped_distance(x: np.ndarray) -> np.ndarray:
    """|the 29 bits binary32 drops - 2^28| of the specified algorithm's binary64 value."""
    bits = exp_f32_unrounded(x).view(np.int64)
    return np.abs((bits & ((1 << 29) - 1)) - (1 << 28))


def special_ranges() -> np.ndarray:
    """Every binary32 around the thresholds: overflow, the smallest normal result, the
    clamp, the last nonzero result, zero and one, plus NaNs, infinities and subnormals."""
    def around(v: float, k: int) -> np.ndarray:
        c = int(np.array(v, np.float32).view(np.uint32))
        return np.arange(c - k, c + k, dtype=np.uint32).view(np.float32)

    parts = [around(v, 2048) for v in (88.72283, -87.33654, -87.33, -103.97208, -104.0,
                                       89.0, 1.0, -1.0, 0.5, -0.5)]
    parts.append(np.arange(0, 4096, dtype=np.uint32).view(np.float32))  # +0, subnormals
    parts.append(np.arange(0x80000000, 0x80001000, dtype=np.uint32).view(np.float32))
    parts.append(np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001, 0x7F800001,
                           0xFF812345, 0x7F7FFFFF, 0xFF7FFFFF], np.uint32).view(np.float32))
    return np.concatenate(parts)


def pad(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, np.zeros(-x.size % THREADS, np.float32)])


def check(x: np.ndarray) -> None:
    x = pad(x)
    got, want = run_exp(x), exp_f32(x)
    bad = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert not bad.size, [(hex(int(x.view(np.uint32)[i])), got[i], want[i]) for i in bad[:5]]


def test_random_inputs_bit_for_bit() -> None:
    """2^20 inputs: uniform over the whole range and random bit patterns."""
    rng = np.random.default_rng(20)
    uniform = rng.uniform(-110, 90, 3 << 18).astype(np.float32)
    patterns = rng.integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    check(np.concatenate([uniform, patterns.view(np.float32)]))


def test_special_ranges_and_hard_cases_bit_for_bit() -> None:
    assert (dropped_distance(HARD) <= 16).all()  # they do test the rounding test
    check(np.concatenate([special_ranges(), HARD]))


def test_the_slow_path_is_rare() -> None:
    """The fast path's rounding test fails about once in 2^24 normal results: never on
    2^16 uniform inputs, always within the margin (a hard case)."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-87, 88, 1 << 16).astype(np.float32)
    assert (dropped_distance(x) > 2 * tang.MARGIN_ULPS).all()
    assert (dropped_distance(HARD[:8]) <= tang.MARGIN_ULPS).all()


def test_error_bound_is_within_the_margin() -> None:
    """The proof's numbers: the reduction is exact, the bound below 2^-51 and below the
    margin (in binary64 ulps of the result, 2^53 EPS (1 + EPS))."""
    tang.check_reduction()
    eps = tang.error_bound()
    assert eps < Fraction(1, 2**51)
    assert 2**53 * eps * (1 + eps) < tang.MARGIN_ULPS


def test_measured_error_is_within_the_bound() -> None:
    """The fast path's binary64 value (modelled in float64 with exact rationals for the
    fmas) against e^x at 40 digits, on inputs spread over the range."""
    rng = np.random.default_rng(3)
    xs = rng.uniform(-87, 88, 200).astype(np.float32)
    inv = np.float32(tang.inv_l32())
    coeffs = [Fraction(c) for c in tang.coefficients()]
    worst = Fraction(0)

    def rn(v: Fraction) -> Fraction:
        return Fraction(float(v))

    with decimal.localcontext() as ctx:
        ctx.prec = 40
        for x in xs:
            n = int(np.float32(Fraction(float(x)) * Fraction(float(inv)) + Fraction(tang.SHIFT32))
                    ) - int(tang.SHIFT32)
            r1 = Fraction(float(x)) - n * Fraction(tang.L1)  # exact
            assert Fraction(float(np.float32(r1))) == r1
            r = rn(r1 - n * Fraction(tang.l2()))
            p = rn(r * coeffs[0] + coeffs[1])
            for c in coeffs[2:]:
                p = rn(p * r + c)
            q = rn(p * r)
            t = Fraction(tang.table()[n % 128])
            v = rn(t + t * q) * Fraction(2) ** (n >> 7)
            exact = Fraction(decimal.Decimal(float(x)).exp())
            worst = max(worst, abs(v - exact) / exact)
    assert worst < tang.error_bound()


def test_table_is_correctly_rounded() -> None:
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        for j in (1, 37, 64, 127):
            exact = Fraction(decimal.Decimal(2) ** (decimal.Decimal(j) / 128))
            t = Fraction(tang.table()[j])
            assert abs(t - exact) <= Fraction(1, 2**53) * exact


def test_f64_instructions_per_element() -> None:
    """At most a third of the specified algorithm's 39 binary64 instructions on the path
    every element takes; the specified algorithm sits in one rare branch."""
    block = Block()
    x = block.add_arg(RegType("f32"))
    mathlib.emit_exp_f32(TargetEmitter(block), x)
    top = [i for i in block.instrs if i.op.name != "ptx.const"]
    wide = [i for i in top if any(v.type == RegType("f64") for v in (*i.results, *i.operands))]
    assert len(wide) <= 39 // 3
    ifs = [i for i in top if isinstance(i.op, If)]
    assert len(ifs) == 1 and ifs[0].op.rare
    assert sum(isinstance(i.op, TableLoad) for i in top) == 1


def test_table_index_out_of_range_faults() -> None:
    def body(e: TargetEmitter, i, p) -> None:  # type: ignore[no-untyped-def]
        v = e.one(TableLoad("tessera_exp2_7"), e.add(i, e.const(100, "u32"), "u32"))
        e.st("global", address(e, p[0], i, 8), v, "f64")
    fn = kernel("table", 1, 1, body)
    with pytest.raises(target.TargetFault, match="entry 128 of the 128-entry table"):
        target.run_target(fn, [np.zeros(THREADS)])


def test_unknown_table_is_refused() -> None:
    block = Block()
    e = TargetEmitter(block)
    with pytest.raises(IRVerifyError, match="unknown lookup table"):
        e.one(TableLoad("nope"), e.const(0, "u32"))
    assert "tessera_exp2_7" in TABLES


def test_estimate_leaves_out_the_slow_path() -> None:
    """The static estimate charges the fast path only: fewer f64 warp instructions than
    one thread's specified algorithm."""
    from tessera.backend.ptx.estimate.census import census

    fast = census(exp_kernel(1))
    slow = census(exp_kernel(1, mathlib.emit_exp_f32_specified))
    warps = THREADS // 32
    assert fast.warp_instrs["f64"] <= 6 * warps < slow.warp_instrs["f64"]


def test_ptx_text_round_trip_runs_the_table() -> None:
    """The rendered PTX, read back and run as PTX (the module's initialized ``.global``
    table included), gives the same bits."""
    from tessera.backend.ptx.render import render
    from tessera.frontend.ptx import load

    text = render(exp_kernel(1))
    assert isinstance(text, str)
    rng = np.random.default_rng(9)
    x = np.concatenate([HARD, rng.uniform(-110, 90, THREADS - HARD.size)]).astype(np.float32)
    out = np.zeros_like(x)
    load(text).kernel("exp_f32").run(grid=1, block=THREADS, args=[x, out])
    assert np.array_equal(out.view(np.uint32), exp_f32(x).view(np.uint32))
