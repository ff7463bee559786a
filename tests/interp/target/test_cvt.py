"""``cvt`` in the Target IR interpreter against exact rational rounding, NumPy and
ml_dtypes (PTX ISA, "cvt")."""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tests.interp.target.kit import run_map
from tests.interp.target.test_numeric import round_ref, same_bits

BF16 = ml_dtypes.bfloat16


def _random_f32(n: int, seed: int) -> np.ndarray:
    """Random float32 bit patterns: every exponent, subnormals, infinities and NaNs."""
    bits = np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64)
    return bits.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize(("to", "ref"), [("bf16", BF16), ("f16", np.float16)])
def test_cvt_rn_f32_to_16_bit_matches_ml_dtypes(to: str, ref: type) -> None:
    """cvt.rn.{bf16,f16}.f32 (PTX ISA, "cvt") equals the RNE casts of ml_dtypes and
    NumPy, which round float32 correctly."""
    x = _random_f32(4096, 1)
    got = run_map(lambda k, v: k.cvt(to, "f32", v[0], rnd="rn"), [x], ["f32"], to)
    with np.errstate(over="ignore", invalid="ignore"):
        same_bits(got, x.astype(ref))


@pytest.mark.parametrize("mode", ["rn", "rz", "rm", "rp"])
@pytest.mark.parametrize(("to", "frm"), [("bf16", "f32"), ("f16", "f32"), ("f32", "f64"),
                                         ("bf16", "f64")])
def test_cvt_float_rounding_modes(mode: str, to: str, frm: str) -> None:
    """Float narrowing with .rn/.rz/.rm/.rp against exact rational rounding."""
    rng = np.random.default_rng(2)
    top = 120 if frm == "f32" else 140  # float64 sources also overflow float32
    x = rng.standard_normal(1024) * np.exp2(rng.integers(-150, top, 1024))
    x[:5] = [65520.0, -65520.0, 3.3e38, 1e-45, -1e-45]
    x = x.astype(np.float32 if frm == "f32" else np.float64)
    dt = {"bf16": BF16, "f16": np.float16, "f32": np.float32}[to]
    target = "sm_90a" if (to, frm) == ("bf16", "f64") else "sm_80"  # cvt.bf16.f64: sm_90
    got = run_map(lambda k, v: k.cvt(to, frm, v[0], rnd=mode), [x], [frm], to, target=target)
    want = np.array([round_ref(Fraction(float(v)), to, mode) if v else float(v)
                     for v in x]).astype(dt)  # zeros convert exactly, sign included
    same_bits(got, want)


def test_cvt_satfinite_clamps_to_the_largest_finite_value() -> None:
    """cvt.rn.satfinite.f16.f32: out-of-range values and infinities become +-MAX_NORM;
    NaN stays NaN (PTX ISA, "cvt")."""
    x = np.tile(np.array([1e6, -1e6, np.inf, -np.inf, np.nan, 1.5, 65504, 65520], np.float32),
                8)
    got = run_map(lambda k, v: k.cvt("f16", "f32", v[0], rnd="rn", sat="satfinite"), [x],
                  ["f32"], "f16")
    want = np.tile(np.array([65504, -65504, 65504, -65504, np.nan, 1.5, 65504, 65504],
                            np.float16), 8)
    same_bits(got, want)


@pytest.mark.parametrize("rnd", ["rzi", "rni", "rmi", "rpi"])
def test_cvt_f32_to_s32_rounds_and_saturates(rnd: str) -> None:
    """Float to integer cvt saturates to the range and maps NaN to 0 (PTX ISA,
    "cvt": float-to-integer conversions saturate)."""
    x = np.concatenate([np.array([2.5, -2.5, 3.5, -0.5, 0.5, 1e10, -1e10, np.nan, np.inf,
                                  -np.inf, 2147483520.0, -2147483648.0], np.float32),
                        _random_f32(52, 3)])
    got = run_map(lambda k, v: k.cvt("s32", "f32", v[0], rnd=rnd), [x], ["f32"], "s32")
    fn = {"rzi": math.trunc, "rni": round, "rmi": math.floor, "rpi": math.ceil}[rnd]
    want = []
    for v in x.tolist():
        if math.isnan(v):
            want.append(0)
        elif math.isinf(v):
            want.append(2**31 - 1 if v > 0 else -(2**31))
        else:
            want.append(min(max(fn(v), -(2**31)), 2**31 - 1))  # round(): half to even
    np.testing.assert_array_equal(got, np.array(want, np.int64))


def test_cvt_integer_to_float_rounds_once() -> None:
    """cvt.rn.f32.s32 and cvt.rn.bf16.s64 of large integers: one RNE rounding."""
    ints = np.random.default_rng(4).integers(-(2**31), 2**31, 64).astype(np.int32)
    got = run_map(lambda k, v: k.cvt("f32", "s32", v[0], rnd="rn"), [ints], ["s32"], "f32")
    same_bits(got, np.array([round_ref(Fraction(int(v)), "f32") for v in ints], np.float32))
    big = (np.random.default_rng(5).integers(2**53, 2**62, 64) | 1).astype(np.int64)
    got = run_map(lambda k, v: k.cvt("bf16", "s64", v[0], rnd="rn"), [big], ["s64"], "bf16",
                  target="sm_90a")  # cvt.bf16.s64 exists from sm_90 on
    same_bits(got, np.array([round_ref(Fraction(int(v)), "bf16") for v in big]).astype(BF16))


def test_cvt_between_integers_extends_by_source_sign() -> None:
    """cvt.u64.s32 sign-extends, cvt.u16.u32 keeps the low bits, cvt.sat clamps."""
    x = np.array([-1, -2**31, 2**31 - 1, 70000] * 16, np.int32)
    got = run_map(lambda k, v: k.cvt("u64", "s32", v[0]), [x], ["s32"], "u64")
    np.testing.assert_array_equal(got, np.array([int(v) % 2**64 for v in x], np.uint64))
    got = run_map(lambda k, v: k.cvt("u16", "s32", v[0]), [x], ["s32"], "u16")
    np.testing.assert_array_equal(got, np.array([int(v) % 2**16 for v in x], np.uint16))
    got = run_map(lambda k, v: k.cvt("s16", "s32", v[0], sat="sat"), [x], ["s32"], "s16")
    np.testing.assert_array_equal(got, np.clip(x, -(2**15), 2**15 - 1).astype(np.int16))
