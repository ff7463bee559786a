"""Instructions the reader writes as a few Target IR instructions (``sad``, ``mul24``,
``dp4a``, ``dp2a``, ``szext``, ``cnot``, ``testp``, the hints): each against its PTX ISA
formula computed here in Python integers and NumPy float classes."""

from __future__ import annotations

import numpy as np
import pytest

from tests.interp.target.ptx.harness import run_elementwise

rng = np.random.default_rng(21)
A, B, C = (rng.integers(0, 2**32, 64, dtype=np.uint64).astype(np.uint32) for _ in "abc")


def field(x: np.ndarray, start: int, width: int, signed: bool) -> np.ndarray:
    """Bits ``start .. start + width`` of ``x`` as Python-sized integers (int64)."""
    v = (x.astype(np.int64) >> start) & ((1 << width) - 1)
    return np.where(signed & ((v >> (width - 1)) == 1), v - (1 << width), v)


def word(v: np.ndarray) -> np.ndarray:
    """The low 32 bits, as a u32 register holds them."""
    return (v & 0xFFFFFFFF).astype(np.uint32)


def s32(x: np.ndarray) -> np.ndarray:
    return x.view(np.int32).astype(np.int64)


@pytest.mark.parametrize("body, want", [
    ("sad.s32 %d, %a, %b, %c;", word(s32(C) + np.abs(s32(A) - s32(B)))),
    ("sad.u32 %d, %a, %b, %c;", word(C.astype(np.int64) + np.abs(A.astype(np.int64) - B))),
    ("mul24.lo.u32 %d, %a, %b;", word(field(A, 0, 24, False) * field(B, 0, 24, False))),
    ("mul24.hi.s32 %d, %a, %b;", word((field(A, 0, 24, True) * field(B, 0, 24, True)) >> 16)),
    ("dp4a.s32.u32 %d, %a, %b, %c;", word(s32(C) + sum(
        field(A, 8 * i, 8, True) * field(B, 8 * i, 8, False) for i in range(4)))),
    ("dp4a.u32.u32 %d, %a, %b, %c;", word(C.astype(np.int64) + sum(
        field(A, 8 * i, 8, False) * field(B, 8 * i, 8, False) for i in range(4)))),
    ("dp2a.hi.u32.s32 %d, %a, %b, %c;", word(s32(C) + sum(
        field(A, 16 * i, 16, False) * field(B, 8 * (2 + i), 8, True) for i in range(2)))),
    ("cnot.b32 %d, %c;", (C == 0).astype(np.uint32)),
])
def test_integer_instructions(body: str, want: np.ndarray) -> None:
    np.testing.assert_array_equal(run_elementwise(body, A, B, C), want)


@pytest.mark.parametrize("mode", ["clamp", "wrap"])
def test_szext_extends_the_low_bits(mode: str) -> None:
    n = (B % 40).astype(np.uint32)
    bits = np.minimum(n, 32) if mode == "clamp" else n % 32
    want = [int(field(np.array([x]), 0, int(k), True)[0]) if k else 0 for x, k in zip(A, bits)]
    got = run_elementwise(f"szext.{mode}.s32 %d, %a, %b;", A, n, C)
    np.testing.assert_array_equal(got, word(np.array(want, np.int64)))


def test_testp_classes() -> None:
    x = np.array([1.0, np.inf, -np.inf, np.nan, 1e-40, 0.0, -(2.0**-126), 3e38], np.float32)
    classes = {"finite": np.isfinite(x), "infinite": np.isinf(x), "number": ~np.isnan(x),
               "notanumber": np.isnan(x),
               "normal": np.isfinite(x) & (np.abs(x) >= np.finfo(np.float32).tiny),
               "subnormal": (x != 0) & (np.abs(x) < np.finfo(np.float32).tiny)}
    bits = x.view(np.uint32)
    for test, want in classes.items():
        got = run_elementwise(f"testp.{test}.f32 %p, %a;\n    selp.u32 %d, 1, 0, %p;",
                              bits, bits, bits)
        np.testing.assert_array_equal(got.astype(bool), want, err_msg=test)


def test_hints_change_nothing() -> None:
    body = "prefetch.global.L2 [%rd0];\n    prefetchu.L1 [%rd0];\n    nanosleep.u32 %a;\n" \
           "    mov.u32 %d, %b;"
    np.testing.assert_array_equal(run_elementwise(body, A % 100, B, C), B)
