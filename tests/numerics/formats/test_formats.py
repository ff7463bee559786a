"""Formats: names and aliases, dtype() normalisation, format parameters, promotion."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

import tessera.numerics as ts
from tessera.errors import DTypeError
from tests.numerics.reference import TABLES

ALIASES = {
    "f32": ["f32", "fp32", "float32", "FP32", " Float32 ", "ts.f32"],
    "f64": ["fp64", "float64", "double"],
    "f16": ["fp16", "float16", "half"],
    "bf16": ["bf16", "bfloat16", "BF16"],
    "tf32": ["tf32"],
    "fp8_e4m3": ["fp8_e4m3", "e4m3", "float8_e4m3fn", "fp8", "FP8_E4M3"],
    "fp8_e5m2": ["e5m2", "float8_e5m2"],
    "fp6_e2m3": ["fp6", "e2m3", "float6_e2m3fn"],
    "fp6_e3m2": ["e3m2", "float6_e3m2fn"],
    "fp4_e2m1": ["fp4", "e2m1", "float4_e2m1fn"],
    "e8m0": ["e8m0", "ue8m0", "float8_e8m0fnu"],
    "int8": ["int8", "i8"], "int32": ["i32", "int32"], "int64": ["i64"],
    "bool": ["bool", "pred"], "c64": ["c64", "complex64"], "c128": ["complex128"],
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_names_and_aliases(name: str) -> None:
    for spelling in ALIASES[name]:
        assert ts.dtype(spelling) is ts.DTYPES[name], spelling


def test_constants_and_aliases_are_the_same_objects() -> None:
    assert ts.f32 is ts.fp32 is ts.float32 is ts.DTYPES["f32"]
    assert ts.fp6 is ts.fp6_e2m3 and ts.fp4 is ts.fp4_e2m1 and ts.fp8 is ts.fp8_e4m3
    assert ts.i8 is ts.int8 and ts.i32 is ts.int32 and ts.complex64 is ts.c64
    assert ts.fp16 is ts.f16 is ts.float16 and ts.fp64 is ts.f64 is ts.float64


def test_dtype_normalises_everything() -> None:
    assert ts.dtype(float) is ts.f32 and ts.dtype(int) is ts.int32
    assert ts.dtype(bool) is ts.bool_ and ts.dtype(complex) is ts.c64
    assert ts.dtype(np.float64) is ts.f64 and ts.dtype(np.dtype("float16")) is ts.f16
    assert ts.dtype(ml_dtypes.bfloat16) is ts.bf16
    assert ts.dtype(ml_dtypes.float8_e4m3fn) is ts.fp8_e4m3
    assert ts.dtype(ts.bf16 @ ts.accum(ts.f32)) is ts.bf16
    assert ts.dtype("bf16 @accum(f32)") is ts.bf16
    assert ts.from_numpy_dtype(np.float32) is ts.f32  # never tf32
    assert ts.from_numpy_dtype(np.complex128) is ts.c128


@pytest.mark.parametrize("bad", ["f33", "", "float", np.int16, 3.5, object()])
def test_unknown_formats_raise_with_the_known_names(bad: object) -> None:
    with pytest.raises(DTypeError) as info:
        ts.dtype(bad)
    assert "f32" in (info.value.hint or "")


def test_format_properties() -> None:
    assert ts.bf16.is_float and not ts.bf16.is_low_precision
    assert ts.fp8_e4m3.is_low_precision and ts.fp4.is_low_precision and ts.fp6.bits == 6
    assert ts.int8.max_finite == 127 and ts.int32.max_finite == 2**31 - 1
    assert ts.f16.max_finite == 65504.0 and ts.tf32.max_finite == (2 - 2.0**-10) * 2.0**127
    assert ts.c64.max_finite == ts.f32.max_finite
    assert ts.tf32.np_dtype == np.float32 and ts.tf32.format.nmant == 10
    for name, table in TABLES.items():
        assert ts.dtype(name).max_finite == table.max, name


def _values(name: str) -> np.ndarray:
    if name in TABLES:
        vals = TABLES[name].values
        return np.concatenate([vals, -vals])
    if name == "e8m0":
        return np.ldexp(1.0, np.arange(-127, 128))
    return np.array([])  # f32 / f64: only ever promoted into themselves or f64


LOW_AND_16 = [n for n in TABLES if n != "tf32"] + ["e8m0"]


@pytest.mark.parametrize(("a", "b"), list(itertools.combinations(
    [*LOW_AND_16, "tf32", "f32", "f64"], 2)))
def test_float_promotion_holds_both_operands_exactly(a: str, b: str) -> None:
    res = ts.promote(ts.dtype(a), ts.dtype(b))
    assert res == ts.promote(ts.dtype(b), ts.dtype(a))
    for name in (a, b):
        vals = _values(name)
        back = ts.to_f64(ts.convert(vals, res))
        assert np.array_equal(back, vals), (a, b, res)


def test_promotion_table() -> None:
    p = ts.promote
    assert p(ts.bf16, ts.f16) is ts.f32
    assert p(ts.fp8_e4m3, ts.fp8_e5m2) is ts.bf16
    assert p(ts.fp8_e4m3, ts.f16) is ts.f16 and p(ts.fp4, ts.bf16) is ts.bf16
    assert p(ts.tf32, ts.f32) is ts.f32 and p(ts.tf32, ts.bf16) is ts.tf32
    assert p(ts.e8m0, ts.f16) is ts.f32 and p(ts.f32, ts.f64) is ts.f64
    assert p(ts.int8, ts.bf16) is ts.bf16 and p(ts.int8, ts.int32) is ts.int32
    assert p(ts.bool_, ts.int8) is ts.int8 and p(ts.bool_, ts.fp8) is ts.fp8
    assert p(ts.c64, ts.f32) is ts.c64 and p(ts.c64, ts.f64) is ts.c128
    assert p(ts.c64, ts.c128) is ts.c128 and p(ts.int32, ts.c64) is ts.c64
    for d in ts.DTYPES.values():
        assert p(d, d) is d
