"""The wgmma shared-memory matrix descriptor and the operand it addresses.

PTX ISA 9.x, sec. 9.7.15.5.1.2.2 "Matrix Descriptor Format": bits 0-13 encode(start),
16-29 encode(LBO), 32-45 encode(SBO), 49-51 base offset, 62-63 swizzle (0 none, 1 = 128B,
2 = 64B, 3 = 32B), encode(x) = (x & 0x3FFFF) >> 4; sec. 9.7.15.5.1.2 "Shared Memory Matrix
Layout" (core matrices of 8 rows x 16 bytes in swizzle atoms).  The operands are laid out
by TMA (tessera.arch.tma) as a kernel would, and read back through the descriptor.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import (
    AlignmentError,
    DescriptorError,
    MatrixDescriptor,
    Swizzle,
    TensorMap,
    TensorMapDataType,
    decode_descriptor,
    encode_descriptor,
    load_operand,
    tma_load,
)
from tessera.errors import ShapeError, UnsupportedError

offsets = st.integers(0, (1 << 14) - 1).map(lambda v: v * 16)


@settings(max_examples=100, deadline=None)
@given(start=offsets, lbo=offsets, sbo=offsets, base=st.integers(0, 7),
       swz=st.sampled_from(list(Swizzle)))
def test_encode_decode_round_trip(start: int, lbo: int, sbo: int, base: int,
                                  swz: Swizzle) -> None:
    value = encode_descriptor(start, lbo, sbo, swz, base)
    assert 0 <= value < 1 << 64
    # Field by field, as the ISA's table places them.
    assert value & 0x3FFF == start >> 4
    assert (value >> 16) & 0x3FFF == lbo >> 4
    assert (value >> 32) & 0x3FFF == sbo >> 4
    assert (value >> 49) & 7 == base
    assert value >> 62 == {Swizzle.NONE: 0, Swizzle.B128: 1, Swizzle.B64: 2, Swizzle.B32: 3}[swz]
    # Reserved bits stay zero.
    assert value & ~((0x3FFF) | (0x3FFF << 16) | (0x3FFF << 32) | (7 << 49) | (3 << 62)) == 0
    assert decode_descriptor(value) == MatrixDescriptor(start, lbo, sbo, base, swz)


@settings(max_examples=100, deadline=None)
@given(value=st.integers(0, (1 << 64) - 1))
def test_decode_encode_keeps_the_defined_bits(value: int) -> None:
    defined = 0x3FFF | (0x3FFF << 16) | (0x3FFF << 32) | (7 << 49) | (3 << 62)
    assert decode_descriptor(value).encode() == value & defined


def test_known_value_and_k_step_advance() -> None:
    # K-major bf16, 128B swizzle at 0x400: SBO 1024, LBO 16 (unused).
    value = encode_descriptor(0x400, 16, 1024, Swizzle.B128)
    assert value == 0x40 | (1 << 16) | (64 << 32) | (1 << 62)
    # One k16 step inside the 128-byte atom adds 32 bytes, i.e. 2 to the encoded field.
    assert decode_descriptor(value).advanced(32).encode() == value + 2


@pytest.mark.parametrize("kwargs", [
    {"start_address": 8, "leading_byte_offset": 16, "stride_byte_offset": 16},
    {"start_address": 1 << 18, "leading_byte_offset": 16, "stride_byte_offset": 16},
    {"start_address": 0, "leading_byte_offset": 24, "stride_byte_offset": 16},
    {"start_address": 0, "leading_byte_offset": 16, "stride_byte_offset": 1 << 18},
    {"start_address": 0, "leading_byte_offset": 16, "stride_byte_offset": 16, "base_offset": 8},
    {"start_address": -16, "leading_byte_offset": 16, "stride_byte_offset": 16},
])
def test_unrepresentable_fields_raise(kwargs: dict) -> None:
    with pytest.raises(DescriptorError):
        MatrixDescriptor(**kwargs)


def _tma_tile(matrix: np.ndarray, dtype: TensorMapDataType, inner: int, swz: Swizzle,
              smem: np.ndarray, base: int) -> int:
    """Load the row-major ``matrix`` (rows, cols) as boxes of ``inner`` columns, one after
    another from ``base``; return the bytes of one box."""
    rows, cols = matrix.shape
    es = matrix.itemsize
    tmap = TensorMap(dtype, 0, (cols, rows), (cols * es,), (inner, rows), swizzle=swz)
    box = tmap.box_bytes
    for j in range(cols // inner):
        tma_load(tmap, matrix, (j * inner, 0), smem, base + j * box)
    return box


# (element type, bytes, swizzle) -> K-major descriptor: 16-byte rows per core matrix
# without swizzle (LBO = next K box, SBO = 8 rows * 16 B), swizzle-span rows otherwise.
CASES = [(TensorMapDataType.BFLOAT16, s) for s in Swizzle] + \
        [(TensorMapDataType.UINT8, s) for s in Swizzle]


@pytest.mark.parametrize(("dtype", "swz"), CASES)
def test_k_major_operand_round_trip_through_tma(dtype: TensorMapDataType, swz: Swizzle) -> None:
    es = dtype.size
    m, kdim = 64, 128 // es  # a 64-row tile, 128 bytes of K
    k = 32 // es             # one instruction: k16 for 16-bit, k32 for 8-bit
    rng = np.random.default_rng(int(swz.value) + es)
    np_t = np.uint16 if es == 2 else np.uint8
    a = rng.integers(0, 1 << (8 * es), (m, kdim)).astype(np_t)
    base = 3 * 1024
    smem = np.zeros(64 * 1024, np.uint8)
    inner = (swz.span if swz is not Swizzle.NONE else 16) // es
    box = _tma_tile(a, dtype, inner, swz, smem, base)
    for step in range(kdim // k):
        # The kernel's descriptor: which box holds this k-step, then +32 B inside it.
        byte_k = step * 32
        if swz is Swizzle.NONE:
            start, lbo, sbo = base + (byte_k // 16) * box, box, 8 * 16
        else:
            start = base + (byte_k // swz.span) * box + byte_k % swz.span
            lbo, sbo = 16, 8 * swz.span
        desc = encode_descriptor(start, lbo, sbo, swz)
        got = load_operand(smem, desc, operand="a", mn=m, k=k, element_bytes=es)
        assert got.dtype == np_t
        assert np.array_equal(got, a[:, step * k:(step + 1) * k])
        # B operand (K-major, i.e. B^T stored row-major) comes back as (K, N).
        got_b = load_operand(smem, desc, operand="b", mn=m, k=k, element_bytes=es)
        assert np.array_equal(got_b, a[:, step * k:(step + 1) * k].T)


def test_mn_major_b_operand_round_trip_through_tma() -> None:
    # B (K x N) with N contiguous, 128B swizzle: boxes of 64 N-columns x 64 K-rows.
    # MN-major swizzled: LBO = next 64-column box, SBO = 8 K-rows * 128 B.
    rng = np.random.default_rng(5)
    kdim, n = 64, 128
    b = rng.integers(0, 1 << 16, (kdim, n)).astype(np.uint16)
    smem = np.zeros(64 * 1024, np.uint8)
    base = 2048
    box = _tma_tile(b, TensorMapDataType.BFLOAT16, 64, Swizzle.B128, smem, base)
    for step in range(kdim // 16):
        desc = encode_descriptor(base + step * 16 * 128, box, 1024, Swizzle.B128)
        got = load_operand(smem, desc, operand="b", mn=n, k=16, element_bytes=2,
                           k_major=False)
        assert np.array_equal(got, b[step * 16:(step + 1) * 16])


def test_planted_layout_errors_change_the_matrix_or_raise() -> None:
    rng = np.random.default_rng(11)
    a = rng.integers(0, 1 << 16, (64, 64)).astype(np.uint16)
    smem = np.zeros(32 * 1024, np.uint8)
    base = 4096
    _tma_tile(a, TensorMapDataType.BFLOAT16, 64, Swizzle.B128, smem, base)

    def read(desc: int) -> np.ndarray:
        return load_operand(smem, desc, operand="a", mn=64, k=16, element_bytes=2)

    want = a[:, 16:32]
    assert np.array_equal(read(encode_descriptor(base + 32, 16, 1024, Swizzle.B128)), want)
    # A wrong stride byte offset.
    assert not np.array_equal(read(encode_descriptor(base + 32, 16, 512, Swizzle.B128)), want)
    # The TMA enum value of 128B (3) written into the descriptor means 32B to wgmma.
    mixed = encode_descriptor(base + 32, 16, 1024) | (3 << 62)
    assert not np.array_equal(read(mixed), want)
    # A forgotten k-step advance.
    assert not np.array_equal(read(encode_descriptor(base, 16, 1024, Swizzle.B128)), want)
    # A buffer that is 128- but not 1024-byte aligned: the pattern starts mid-atom.
    smem2 = np.zeros(32 * 1024, np.uint8)
    bad = base + 128
    _tma_tile(a, TensorMapDataType.BFLOAT16, 64, Swizzle.B128, smem2, bad)
    with pytest.raises(AlignmentError, match="1024"):
        load_operand(smem2, encode_descriptor(bad + 32, 16, 1024, Swizzle.B128),
                     operand="a", mn=64, k=16, element_bytes=2)


def test_operand_argument_errors() -> None:
    smem = np.zeros(16 * 1024, np.uint8)
    desc = encode_descriptor(0, 16, 1024, Swizzle.B128)
    with pytest.raises(ShapeError):
        load_operand(smem, desc, operand="a", mn=64, k=32, element_bytes=2)
    with pytest.raises(UnsupportedError):
        load_operand(smem, desc, operand="a", mn=64, k=32, element_bytes=1, k_major=False)
    with pytest.raises(UnsupportedError):
        load_operand(smem, encode_descriptor(0, 16, 1024, Swizzle.B128, base_offset=1),
                     operand="a", mn=64, k=16, element_bytes=2)


def test_batched_over_ctas() -> None:
    rng = np.random.default_rng(2)
    smem = rng.integers(0, 256, (3, 16 * 1024), dtype=np.uint8)
    desc = encode_descriptor(1024 + 64, 16, 1024, Swizzle.B128)
    got = load_operand(smem, desc, operand="a", mn=64, k=16, element_bytes=2)
    assert got.shape == (3, 64, 16)
    for c in range(3):
        one = load_operand(smem[c], desc, operand="a", mn=64, k=16, element_bytes=2)
        assert np.array_equal(got[c], one)
