"""Golden numerics of one tensor-core instruction.

Convention: products exact in float64, the K products of one instruction summed in float64
in ascending k, the sum added to the float64 accumulator.  Fragment layouts per PTX ISA
9.x, sec. 9.7.14.5 (mma.m16n8k16 / mma.m16n8k32).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import (
    decode_elements,
    instruction_k,
    mma,
    mma_m16n8_c,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    mma_sync_fragments,
    pack_registers,
    to_fragments,
)
from tessera.errors import ArgumentError, DTypeError, ShapeError

TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "e4m3": ml_dtypes.float8_e4m3fn,
         "e5m2": ml_dtypes.float8_e5m2}


def _random(fmt: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    return rng.normal(0, 2, shape).astype(TYPES[fmt])


def _reference(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    out = np.zeros(c.shape, np.float64)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            s = float(a[i, 0]) * float(b[0, j])
            for k in range(1, a.shape[1]):
                s = s + float(a[i, k]) * float(b[k, j])  # Python floats are float64
            out[i, j] = float(c[i, j]) + s
    return out


@settings(max_examples=20, deadline=None)
@given(fmt=st.sampled_from(sorted(TYPES)), seed=st.integers(0, 2**31))
def test_mma_matches_sequential_float64_reference(fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = instruction_k(fmt)
    a, b = _random(fmt, (16, k), rng), _random(fmt, (k, 8), rng)
    c = rng.normal(0, 1, (16, 8))
    d = mma(a, b, c, fmt)
    assert d.dtype == np.float64
    assert np.array_equal(d, _reference(a, b, c))
    # Bit patterns give the same answer as typed arrays.
    bits = np.uint16 if k == 16 else np.uint8
    assert np.array_equal(mma(a.view(bits), b.view(bits), c, fmt), d)


def test_sum_order_is_ascending_k_then_plus_c() -> None:
    # Products 2^53, 1, -2^53, 1: ascending float64 gives ((2^53 + 1) - 2^53) + 1 = 1,
    # the exact sum would be 2.
    a = np.zeros((16, 16), ml_dtypes.bfloat16)
    b = np.zeros((16, 8), ml_dtypes.bfloat16)
    a[0, :4] = [2.0**27, 1.0, -(2.0**27), 1.0]
    b[:4, 0] = [2.0**26, 1.0, 2.0**26, 1.0]
    d = mma(a, b, np.zeros((16, 8)), "bf16")
    assert d[0, 0] == 1.0
    c = np.zeros((16, 8))
    c[0, 0] = 2.0**53
    assert mma(a, b, c, "bf16")[0, 0] == 2.0**53  # C is added after the K-sum: 2^53 + 1


def test_batched_wgmma_shapes() -> None:
    rng = np.random.default_rng(1)
    a, b = _random("bf16", (3, 64, 16), rng), _random("bf16", (3, 16, 32), rng)
    c = rng.normal(0, 1, (3, 64, 32))
    d = mma(a, b, c, "bf16")
    for i in range(3):
        assert np.array_equal(d[i], _reference(a[i], b[i], c[i]))


def test_mixed_fp8_formats() -> None:
    rng = np.random.default_rng(2)
    a, b = _random("e4m3", (16, 32), rng), _random("e5m2", (32, 8), rng)
    c = np.zeros((16, 8))
    assert np.array_equal(mma(a, b, c, "e4m3", "e5m2"), _reference(a, b, c))
    with pytest.raises(DTypeError):
        mma(a, b, c, "e4m3", "bf16")


@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
def test_mma_sync_on_registers(fmt: str) -> None:
    rng = np.random.default_rng(3)
    k = instruction_k(fmt)
    bits = 16 if k == 16 else 8
    la, lb = (mma_m16n8k16_a(), mma_m16n8k16_b()) if k == 16 else (
        mma_m16n8k32_a(), mma_m16n8k32_b())
    a, b = _random(fmt, (2, 16, k), rng), _random(fmt, (2, k, 8), rng)
    raw = np.uint16 if bits == 16 else np.uint8
    a_regs = pack_registers(to_fragments(a.view(raw), la), bits)
    b_regs = pack_registers(to_fragments(b.view(raw), lb), bits)
    assert a_regs.shape == (2, 32, 4) and b_regs.shape == (2, 32, 2)
    c = rng.normal(0, 1, (2, 16, 8))
    d = mma_sync_fragments(a_regs, b_regs, to_fragments(c, mma_m16n8_c()), fmt)
    for i in range(2):
        want = to_fragments(_reference(a[i], b[i], c[i]), mma_m16n8_c())
        assert np.array_equal(d[i], want)


def test_input_errors() -> None:
    with pytest.raises(ArgumentError):
        decode_elements(np.zeros(4, np.float64), "bf16")
    with pytest.raises(DTypeError):
        mma(np.zeros((16, 16), np.uint16), np.zeros((16, 8), np.uint16), np.zeros((16, 8)),
            "f64")
    with pytest.raises(ArgumentError):  # tf32 operands are 32-bit patterns (or float32)
        mma(np.zeros((16, 8), np.uint16), np.zeros((8, 8), np.uint16), np.zeros((16, 8)),
            "tf32")
    with pytest.raises(ShapeError):
        mma(np.zeros((16, 8), np.uint16), np.zeros((8, 8), np.uint16), np.zeros((16, 8)),
            "bf16")
    assert decode_elements(np.array([0x3F80], np.uint16), "bf16").tolist() == [1.0]
    assert decode_elements(np.array([0x38], np.uint8), "e4m3").tolist() == [1.0]
