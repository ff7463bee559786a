"""The long accumulator's deposit and rounding (tessera.lower.exact.longacc) against
exact rational arithmetic.

Small ``ptx.kernel``s built with the emitter run on the Target IR interpreter: one
rounds words with unnormalised carries, as a reduction leaves them, and must give the
float64 rounded to odd and the correctly rounded f32, bf16 and f16 of the exact
rational (``fractions.Fraction``, rounded by the independent ``ref_round_fraction``);
the other deposits f32 values and must hold their exact sum.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import tessera as ts
from tessera.ir.core import Block, Function, Value
from tessera.ir.dialects.target import KERNEL, RegType, Return
from tessera.ir.dialects.target.ops import SharedAlloc
from tessera.lower.emit import TargetEmitter
from tessera.lower.exact.longacc import (
    NAN_BIT,
    NINF_BIT,
    PINF_BIT,
    SUM_DIGITS,
    SUM_QUANTUM,
    SharedAcc,
    deposit_f32,
    round_words,
    to_format,
    zero_shared,
)
from tests.interp.graph.util import ref_round_fraction

target = pytest.importorskip("tessera.interp.target",
                             reason="the Target IR interpreter is not in this tree")

THREADS = 128
D = SUM_DIGITS


def _kernel(name: str, nparams: int, body) -> Function:  # type: ignore[no-untyped-def]
    block = Block()
    params = [block.add_arg(RegType("u64")) for _ in range(nparams)]
    e = TargetEmitter(block)
    body(e, e.sreg("tid.x"), params)
    e.op(Return())
    return Function(name, block, [], kind=KERNEL,
                    attrs={"target": "sm_80", "block": [THREADS], "grid": [1]})


def _at(e: TargetEmitter, base: Value, index: Value, size: int) -> Value:
    return e.add(base, e.bin("mul", index, e.const(size, "u32"), "u32", "wide"), "u64")


def _round_kernel(divisor: int) -> Function:
    """Thread i rounds words[i, :] with flags[i] into f64 (to odd), f32, bf16, f16."""
    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        row = _at(e, p[0], i, 8 * D)
        flags = e.ld("global", _at(e, p[1], i, 4), "u32")
        odd = round_words(e, D, lambda em, k: em.ld("global", row, "u64", offset=8 * k),
                          lambda em, k, w: em.st("global", row, em.pack([w], "u64"), "u64",
                                                 offset=8 * k),
                          flags, SUM_QUANTUM, divisor)
        e.st("global", _at(e, p[2], i, 8), odd, "f64")
        for param, element in zip(p[3:], (ts.f32, ts.bf16, ts.f16)):
            e.st("global", _at(e, param, i, 4), to_format(e, odd, element), "f32")
    return _kernel("round_words", 6, body)


def _odd(q: Fraction) -> float:
    """``q`` rounded to float64 to odd (53 significant bits; q in the normal range)."""
    if q == 0:
        return 0.0
    e = math.floor(math.log2(abs(q)))
    while Fraction(2) ** e > abs(q):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    quantum = Fraction(2) ** (e - 52)
    m = abs(q) / quantum
    whole = m.numerator // m.denominator
    if whole != m and whole % 2 == 0:
        whole += 1
    return math.copysign(float(whole * quantum), q)


def _run_round(words: np.ndarray, flags: np.ndarray, divisor: int):  # type: ignore[no-untyped-def]
    outs = [np.zeros(THREADS, np.float64)] + [np.zeros(THREADS, np.float32) for _ in range(3)]
    target.run_target(_round_kernel(divisor), [words.copy(), flags, *outs])
    return outs


def _words_of(n: int) -> list[int]:
    """An integer as D signed words that sum to it (carries left unnormalised)."""
    out = []
    for _ in range(D - 1):
        out.append(n & 0xFFFFFFFF)
        n >>= 32
    return [*out, n]


def _edge_values() -> list[int]:
    """Integers (in quanta of 2**-149) around rounding boundaries: ties of f32 with and
    without a far sticky bit, one quantum, huge and cancelling values."""
    big = 1 << 140
    return [0, 1, -1, 2, (1 << 53) + 1, (1 << 24) + 1, ((1 << 24) + 1) << 100,
            (((1 << 24) + 1) << 100) + 1, -((((1 << 24) + 1) << 100) + 1),
            (1 << 276) - 1, -(1 << 276), big - 1, -(big + 3), (1 << 149) * 3 - 1,
            ((1 << 8) + 1) << 120, (((1 << 8) + 1) << 120) + 1, ((1 << 11) + 1) << 30]


@pytest.mark.parametrize("divisor", [1, 3, 37, 4096, 2**31 - 1])
def test_rounding_of_unnormalised_words_is_the_correct_rounding(divisor: int) -> None:
    rng = np.random.default_rng(divisor)
    ints = _edge_values()
    words = np.zeros((THREADS, D), np.int64)
    for t in range(THREADS):
        if t < len(ints):
            w = _words_of(ints[t])
            if t % 2:  # move a carry into the next word: the same integer
                w[3] += 5 << 32
                w[4] -= 5
        else:  # random signed words with carries, below 2**40 each (the top word, whose
            # normalised value must stay below 2**32 as a sum of < 2**43 terms keeps it,
            # below 2**8)
            w = [int(v) for v in rng.integers(-(2**40), 2**40, D)]
            w[-1] >>= 32
            w[rng.integers(0, D)] = 0
            if t % 3 == 0:
                w[7:] = [0] * (D - 7)
        words[t] = w
    flags = np.zeros(THREADS, np.uint32)
    f64, f32, bf16, f16 = _run_round(words.view(np.uint64), flags, divisor)
    for t in range(THREADS):
        n = sum(int(v) << (32 * k) for k, v in enumerate(words[t]))
        q = Fraction(n, (1 << SUM_QUANTUM) * divisor)
        assert f64[t] == _odd(q) and (n != 0 or not math.copysign(1, f64[t]) < 0), t
        for got, name in ((f32, "f32"), (bf16, "bf16"), (f16, "f16")):
            want = np.float32(ref_round_fraction(q, name)) if n else np.float32(0.0)
            assert got[t].tobytes() == want.tobytes(), (t, name, n, got[t], want)


def test_non_finite_flags_round_to_nan_or_the_infinity() -> None:
    flags = np.array([0, NAN_BIT, PINF_BIT, NINF_BIT, PINF_BIT | NINF_BIT,
                      NAN_BIT | PINF_BIT] * 22, np.uint32)[:THREADS]
    words = np.zeros((THREADS, D), np.uint64)
    words[:, 4] = 7  # 7 * 2**-21: exact in every format
    f64, f32, bf16, f16 = _run_round(words, flags, 1)
    want = {0: 7 * 2.0**-21, NAN_BIT: np.nan, PINF_BIT: np.inf, NINF_BIT: -np.inf,
            PINF_BIT | NINF_BIT: np.nan, NAN_BIT | PINF_BIT: np.nan}
    # NaN bits, as a GPU writes them: the f64 NaN constant moved by selp; cvt.rn.f32.f64
    # keeps its payload (0x7FC00000, seen on an H100); the 16-bit values' canonical NaN
    # 0x7FFF widened by a bit move (bf16, 0x7FFF0000) or by cvt.f32.f16, which writes
    # f32's canonical NaN (seen on an H200)
    nan_bits = (0x7FF8000000000000, 0x7FC00000, 0x7FFF0000, 0x7FFFFFFF)
    for t in range(THREADS):
        expect = want[int(flags[t])]
        for got, bits in zip((f64, f32, bf16, f16), nan_bits):
            assert np.array_equal(got[t], expect, equal_nan=True)
            if np.isnan(expect):
                assert int(got[t:t + 1].view(f"u{got.itemsize}")[0]) == bits, (t, hex(bits))


def test_deposits_from_every_thread_hold_the_exact_sum() -> None:
    """128 threads deposit 3 f32 values each into 4 shared accumulators (thread t into
    row t % 4); the words, read back, are the exact sums in quanta of 2**-149."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((THREADS, 3)) * 2.0 ** rng.integers(-149, 127, (THREADS, 3))
         ).astype(np.float32)
    x[5, 1] = np.float32(2.0**-149)
    x[6, 0] = -np.float32(3.4e38)
    x[9] = [np.nan, np.inf, 0.0]
    x[10, 2] = -np.inf
    x[11, 0] = np.inf  # row 3: +inf only
    rows = 4

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        base = e.one(SharedAlloc("acc", rows * 8 * (D + 1), 8))
        acc = SharedAcc(base, rows, D)
        zero_shared(e, base, rows * (D + 1))
        e.bar()
        row = acc.row(e, e.cvt(e.bin("rem", i, e.const(rows, "u32"), "u32"), "s32", "u32"))
        for c in range(3):
            deposit_f32(e, row, acc, e.ld("global", _at(e, p[0], i, 12), "f32", offset=4 * c))
        e.bar()
        ok = e.setp("lt", i, e.const(rows * (D + 1), "u32"), "u32")
        e.if_(ok, lambda inner: inner.st(
            "global", _at(inner, p[1], i, 8),
            inner.ld("shared", inner.add(base, inner.mul(i, inner.const(8, "u32"), "u32"),
                                         "u32"), "u64"), "u64"))
    out = np.zeros(rows * (D + 1), np.uint64)
    target.run_target(_kernel("deposit", 2, body), [x, out])
    words = out.view(np.int64).reshape(rows, D + 1)
    for r in range(rows):
        vals = x[r::rows].ravel()
        finite = vals[np.isfinite(vals)]
        exact = sum(int(Fraction(float(v)) * (1 << SUM_QUANTUM)) for v in finite)
        assert sum(int(w) << (32 * k) for k, w in enumerate(words[r, :D])) == exact
        flags = int(words[r, D]) & 0xFFFFFFFF
        want = (NAN_BIT if np.isnan(vals).any() else 0) | \
            (PINF_BIT if (vals == np.inf).any() else 0) | \
            (NINF_BIT if (vals == -np.inf).any() else 0)
        assert flags == want, r


def test_f64_deposits_of_whole_quanta_hold_the_exact_sum() -> None:
    """The accumulator of softmax terms and of the carried sums of attention's key
    blocks (tessera.lower.exact.sum64): f64 values that are whole numbers of quanta
    2**-203 below 2**30 in magnitude, of both signs and also below 2**-151 (shifted
    right, exactly), deposited by every thread, hold the exact sum."""
    from tessera.lower.exact.sum64 import SUM64_DIGITS, SUM64_QUANTUM, deposit_f64

    rng = np.random.default_rng(4)
    exponents = rng.integers(-203, 30, (THREADS, 3))
    mant = rng.integers(1, 2**53, (THREADS, 3)).astype(np.float64)
    x = np.ldexp(mant / 2.0**52, exponents)  # significand of 53 bits, ulp >= 2**-203?
    x = np.where(np.ldexp(1.0, exponents - 52) < 2.0**-203,
                 np.round(np.ldexp(x, 203)) * 2.0**-203, x)  # whole quanta
    x *= np.where(rng.random((THREADS, 3)) < 0.5, -1.0, 1.0)
    x[0] = [2.0**-203, -(2.0**-203), 3 * 2.0**-180]
    x[1] = [np.nan, 0.0, -0.0]
    rows, digits = 4, SUM64_DIGITS

    def body(e: TargetEmitter, i: Value, p: list[Value]) -> None:
        base = e.one(SharedAlloc("acc", rows * 8 * (digits + 1), 8))
        acc = SharedAcc(base, rows, digits)
        zero_shared(e, base, rows * (digits + 1))
        e.bar()
        row = acc.row(e, e.cvt(e.bin("rem", i, e.const(rows, "u32"), "u32"), "s32", "u32"))
        for c in range(3):
            deposit_f64(e, row, acc, e.ld("global", _at(e, p[0], i, 24), "f64",
                                          offset=8 * c))
        e.bar()
        ok = e.setp("lt", i, e.const(rows * (digits + 1), "u32"), "u32")
        e.if_(ok, lambda inner: inner.st(
            "global", _at(inner, p[1], i, 8),
            inner.ld("shared", inner.add(base, inner.mul(i, inner.const(8, "u32"), "u32"),
                                         "u32"), "u64"), "u64"))
    out = np.zeros(rows * (digits + 1), np.uint64)
    target.run_target(_kernel("deposit64", 2, body), [x, out])
    words = out.view(np.int64).reshape(rows, digits + 1)
    for r in range(rows):
        vals = x[r::rows].ravel()
        exact = sum(Fraction(float(v)) * (1 << SUM64_QUANTUM) for v in vals[~np.isnan(vals)])
        assert exact.denominator == 1
        assert sum(int(w) << (32 * k) for k, w in enumerate(words[r, :digits])) == exact
        assert (int(words[r, digits]) & NAN_BIT) == (NAN_BIT if np.isnan(vals).any() else 0)
