"""Alternative spellings of the format names (pure data, imported by ``formats``)."""

from __future__ import annotations

ALIASES: dict[str, str] = {
    "fp64": "f64", "float64": "f64", "double": "f64",
    "fp32": "f32", "float32": "f32", "single": "f32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "fp16": "f16", "float16": "f16", "half": "f16",
    "fp8": "fp8_e4m3", "e4m3": "fp8_e4m3", "e4m3fn": "fp8_e4m3", "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3", "float8_e4m3": "fp8_e4m3",
    "e5m2": "fp8_e5m2", "float8_e5m2": "fp8_e5m2",
    "fp6": "fp6_e2m3", "e2m3": "fp6_e2m3", "fp6_e2m3fn": "fp6_e2m3", "float6_e2m3fn": "fp6_e2m3",
    "e3m2": "fp6_e3m2", "fp6_e3m2fn": "fp6_e3m2", "float6_e3m2fn": "fp6_e3m2",
    "fp4": "fp4_e2m1", "e2m1": "fp4_e2m1", "fp4_e2m1fn": "fp4_e2m1", "float4_e2m1fn": "fp4_e2m1",
    "ue8m0": "e8m0", "fp8_e8m0": "e8m0", "float8_e8m0fnu": "e8m0",
    "i8": "int8", "s8": "int8",
    "i32": "int32", "s32": "int32", "int": "int32",
    "i64": "int64", "s64": "int64",
    "bool_": "bool", "pred": "bool", "i1": "bool",
    "complex64": "c64", "complex": "c64",
    "complex128": "c128",
}
"""Alternative spellings (lower case) of the canonical names."""
