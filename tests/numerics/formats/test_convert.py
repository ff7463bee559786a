"""Conversion: RNE, satfinite and NaN rules, checked bit for bit against references."""

from __future__ import annotations

import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import tessera.numerics as ts
from tessera.errors import DTypeError
from tessera.numerics.formats.convert import round_to_odd_f32, tf32_from_f32
from tests.numerics.reference import (
    NAN_TO_MAX,
    SATURATING,
    TABLES,
    bits_equal,
    fraction_round,
    reference_round,
)

NARROW = sorted(TABLES)  # every format narrower than f32, tf32 included
RNG = np.random.default_rng(20240611)


def _midpoints(name: str) -> np.ndarray:
    vals = TABLES[name].values
    vals = np.append(vals, TABLES[name].next_up)
    mids = (vals[:-1] + vals[1:]) / 2
    return np.concatenate([mids, -mids])


def _f32_cases(name: str) -> np.ndarray:
    """1M random bit patterns (all exponents, subnormals, inf, NaN), exact ties between
    adjacent target values, their float32 neighbours, and overflowing values."""
    random_bits = RNG.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    mids = _midpoints(name).astype(np.float32)
    assert np.array_equal(mids.astype(np.float64), _midpoints(name))  # ties are exact
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf))])
    top = TABLES[name].max
    with np.errstate(over="ignore"):
        over = np.float32(top) * RNG.uniform(1, 4, 10_000).astype(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, top, -top], dtype=np.float32)
    return np.concatenate([random_bits.view(np.float32), mids, near, over, -over, special])


def _as_f64(x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return x.astype(np.float64)


@pytest.mark.parametrize("name", NARROW)
def test_f32_to_every_format_matches_nearest_value_reference(name: str) -> None:
    x = _f32_cases(name)
    got = ts.convert(x, name)
    expected = reference_round(_as_f64(x), name)
    ok = bits_equal(_as_f64(got), expected)
    assert ok.all(), (x[~ok][:5], got[~ok][:5], expected[~ok][:5])


@pytest.mark.parametrize("name", sorted(set(NARROW) - {"tf32"}))
def test_f32_conversion_is_ml_dtypes_rne_plus_satfinite(name: str) -> None:
    x = _f32_cases(name)
    target = ts.dtype(name)
    src = x
    if name in SATURATING:
        src = np.clip(x, -np.float32(target.max_finite), np.float32(target.max_finite))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = src.astype(target.np_dtype)
    if name in NAN_TO_MAX:
        expected[np.isnan(x)] = target.max_finite
    assert bits_equal(ts.convert(x, name), expected).all()


@pytest.mark.parametrize("name", [*NARROW, "f32"])
def test_every_fp16_pattern_widened(name: str) -> None:
    x = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    got = _as_f64(ts.convert(x, name))
    if name == "f32":
        expected = _as_f64(x)
    else:
        expected = reference_round(_as_f64(x), name)
    assert bits_equal(got, expected).all()


@pytest.mark.parametrize("name", NARROW)
def test_float64_inputs_round_once(name: str) -> None:
    # ml_dtypes casts from float64 round twice (via float32): a value a hair above
    # a midpoint must still round up, a hair below must round down.
    mids = _midpoints(name)
    mids = mids[np.isfinite(mids)]
    cases = np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf),
                            mids * (1 + 2.0**-40), mids * (1 - 2.0**-40),
                            RNG.standard_normal(100_000) * 2.0 ** RNG.integers(-140, 130,
                                                                            100_000)])
    got = _as_f64(ts.convert(cases, name))
    assert bits_equal(got, reference_round(cases, name)).all()


def test_satfinite_clamps_explicitly() -> None:
    for name in sorted(SATURATING):
        top = ts.dtype(name).max_finite
        x = np.array([top * 1.5, -top * 1.5, np.inf, -np.inf, 1e30, top], dtype=np.float32)
        assert list(ts.convert(x, name).astype(np.float64)) == [top, -top, top, -top, top, top]
    assert ts.fp8_e4m3.max_finite == 448.0
    assert ts.fp8_e5m2.max_finite == 57344.0
    assert ts.fp6_e2m3.max_finite == 7.5 and ts.fp6_e3m2.max_finite == 28.0
    assert ts.fp4_e2m1.max_finite == 6.0


def test_nan_rules() -> None:
    nan = np.array([np.nan, -np.nan], dtype=np.float32)
    for name in ("fp8_e4m3", "fp8_e5m2", "bf16", "f16", "tf32", "f32", "e8m0"):
        assert np.isnan(_as_f64(ts.convert(nan, name))).all(), name
    for name in sorted(NAN_TO_MAX):  # no NaN encoding: +max finite (PTX satfinite)
        out = _as_f64(ts.convert(nan, name))
        assert list(out) == [ts.dtype(name).max_finite] * 2


def test_overflow_without_satfinite_gives_inf() -> None:
    x = np.array([1e39, -1e39, 70000.0], dtype=np.float64)
    assert list(_as_f64(ts.convert(x, "bf16"))[:2]) == [np.inf, -np.inf]
    assert _as_f64(ts.convert(x, "f16"))[2] == np.inf


def test_known_hard_fp8_cases() -> None:
    # The carries and ties other emulators get wrong.
    x = np.array([1.99, 7.7, 400.0, 416.0, 464.0, 465.0], dtype=np.float32)
    assert list(_as_f64(ts.convert(x, "fp8_e4m3"))) == [2.0, 7.5, 384.0, 416.0, 448.0, 448.0]


def test_tf32_against_fractions() -> None:
    x = np.concatenate([RNG.standard_normal(20_000) * 2.0 ** RNG.integers(-150, 127, 20_000),
                        _midpoints("tf32")[::97]]).astype(np.float32)
    got = ts.convert(x, "tf32")
    assert got.dtype == np.float32
    for v, g in zip(x.tolist(), got.tolist()):
        expected = fraction_round(Fraction(v), 11, -126, ts.tf32.max_finite)
        assert g == expected or (g == 0 and expected == 0), (v, g, expected)
    assert np.all(got.view(np.uint32) & 0x1FFF == 0)  # 10 mantissa bits are left


def test_tf32_bit_helpers() -> None:
    y = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, np.inf, np.nan], dtype=np.float32)
    out = tf32_from_f32(y)
    assert out[0] == 1.0 and out[1] == 1 + 2 * 2.0**-10 and out[2] == np.inf
    assert np.isnan(out[3])
    x = np.array([1 + 2.0**-30, 3e38 * 2, -2.0**-160], dtype=np.float64)
    odd = round_to_odd_f32(x)
    assert odd.view(np.uint32)[0] & 1 == 1 and odd[1] == np.finfo(np.float32).max
    assert odd[2] < 0 and odd.view(np.uint32)[2] & 1 == 1


def test_integers_round_half_even_and_saturate() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 126.6, 300.0, -300.0, np.inf, -np.inf, np.nan])
    assert list(ts.convert(x, ts.int8)) == [0, 2, 2, 0, -2, 127, 127, -128, 127, -128, 0]
    big = np.array([3e9, -3e9, 1e19, -1e19])
    assert list(ts.convert(big, "int32")) == [2**31 - 1, -(2**31), 2**31 - 1, -(2**31)]
    assert list(ts.convert(big, "int64"))[2:] == [2**63 - 1, -(2**63)]
    ints = np.array([2**40, -5, 127], dtype=np.int64)
    assert list(ts.convert(ints, "int8")) == [127, -5, 127]


def test_large_integers_round_once_to_floats() -> None:
    n = 2**60 + 2**36 + 1  # just above a float32 midpoint: float64 first would tie
    got = ts.convert(np.array([n], dtype=np.int64), "f32")[0]
    assert int(got) == fraction_round(Fraction(n), 24, -126, 3.4e38)


def test_complex_and_bool() -> None:
    z = np.array([1.1 + 2.2j, np.inf - 1j])
    out = ts.convert(z, ts.c64)
    assert out.dtype == np.complex64
    assert out[0] == np.complex64(1.1 + 2.2j)
    assert ts.convert(np.array([1.5, 2.0]), "c128").imag.tolist() == [0.0, 0.0]
    assert ts.convert(np.array([True, False]), "bf16").astype(np.float64).tolist() == [1, 0]
    assert ts.convert(np.array([True]), "bool").dtype == np.bool_
    with pytest.raises(DTypeError):
        ts.convert(z, "f32")
    with pytest.raises(DTypeError):
        ts.convert(np.array([1.0]), "bool")


def test_policy_targets_use_their_storage() -> None:
    x = np.array([1.0 + 2.0**-9])
    got = ts.convert(x, ts.bf16 @ ts.accum(ts.f32))
    assert got.dtype == ml_dtypes.bfloat16 and float(got[0]) == 1.0


def test_to_f64_is_exact() -> None:
    for name in NARROW:
        vals = TABLES[name].values
        stored = ts.convert(vals, name)
        assert np.array_equal(ts.to_f64(stored), vals)
    assert ts.to_f64(np.array([1 + 1j], dtype=np.complex64)).dtype == np.complex128
    with pytest.raises(DTypeError):
        ts.to_f64(np.array([2**60], dtype=np.int64))
