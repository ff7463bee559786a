"""wgmma matrix descriptors (tessera.lower.sm90a.gemm) against the bit-level models of
:mod:`tessera.arch`: every descriptor addresses exactly the sub-matrix a TMA box copy
stored (PTX ISA sec. 9.7.9.27 and cuda.h for TMA; sec. 9.7.15.5.1.2 "Shared Memory
Matrix Layout" / "Matrix Descriptor Format" for what a descriptor reads)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch.descriptor import decode_descriptor, encode_descriptor, load_operand
from tessera.arch.errors import AlignmentError
from tessera.arch.swizzle import Swizzle
from tessera.arch.tma import TensorMap, TensorMapDataType, tma_load
from tessera.errors import ShapeError, UnsupportedError
from tessera.ir.core import Value
from tessera.ir.dialects.target import RegType
from tessera.lower.sm90a.gemm import descriptor_fields, geometry, operand_offset
from tessera.lower.tiles import ELEM_BYTES, SharedBox

TMA_DTYPE = {"bf16": TensorMapDataType.BFLOAT16, "e4m3": TensorMapDataType.UINT8}


def tma_fill(g: np.ndarray, elem: str, rows: int, cols: int, swizzle: int, row0: int,
              col0: int, base: int, smem: np.ndarray) -> None:
    """What :class:`TmaCopy` does to ``dst`` (panel by panel), on the arch TMA model."""
    eb = ELEM_BYTES[elem]
    w = swizzle // eb
    tmap = TensorMap(TMA_DTYPE[elem], 0, (g.shape[1], g.shape[0]), (g.shape[1] * eb,),
                     (w, rows), swizzle=Swizzle(swizzle))
    for p in range(cols // w):
        tma_load(tmap, g, np.array([col0 + p * w, row0]), smem, base + p * rows * swizzle)


def box_of(rows: int, cols: int, elem: str, swizzle: int, align: int = 1024) -> SharedBox:
    """A box with a placeholder address value (for the static layout helpers)."""
    return SharedBox(Value(RegType("u32")), rows, cols, elem, swizzle, align)


def static_desc(box: SharedBox, base: int, k: int, mn: int, k_major: bool) -> int:
    """The descriptor of the (k, mn) step of ``box`` at shared address ``base``, from the
    static layout helpers."""
    lbo, sbo = descriptor_fields(box, k_major=k_major)
    start = base + operand_offset(box, k, mn, k_major=k_major)
    return encode_descriptor(start, lbo, sbo, Swizzle(box.swizzle))


@settings(max_examples=40, deadline=None)
@given(elem=st.sampled_from(["bf16", "e4m3"]), swizzle=st.sampled_from([32, 64, 128]),
       panels=st.integers(1, 2), blocks=st.integers(1, 2), kmajor_b=st.booleans(),
       n8=st.integers(1, 8), data=st.data())
def test_descriptor_addresses_what_tma_wrote(elem: str, swizzle: int, panels: int, blocks: int,
                                             kmajor_b: bool, n8: int,
                                             data: st.DataObject) -> None:
    """Every k-step / 64-row-block descriptor reads exactly the sub-matrix TMA stored
    (PTX ISA sec. 9.7.15.5.1.2: K-major SBO = 8 rows x span, MN-major LBO = panel stride,
    SBO = 8 k-rows x span; the k-step moves the start address inside the atom)."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    eb = ELEM_BYTES[elem]
    ks = 32 // eb  # k16 for 16-bit, k32 for 8-bit
    bk = panels * swizzle // eb
    if bk < ks:
        return
    base = 1024 * data.draw(st.integers(1, 3))
    smem = np.zeros(1 << 17, np.uint8)
    rows_a = 64 * blocks
    bits = np.uint16 if eb == 2 else np.uint8
    ga = rng.integers(0, 1 << (8 * eb), (rows_a + 8, bk + 64), dtype=bits)
    a = box_of(rows_a, bk, elem, swizzle)
    row0, col0 = 8, 32  # the tile sits inside a larger tensor
    tma_fill(ga, elem, rows_a, bk, swizzle, row0, col0, base, smem)
    for k in range(0, bk, ks):
        for i in range(blocks):
            d = static_desc(a, base, k, 64 * i, True)
            got = load_operand(smem, d, operand="a", mn=64, k=ks, element_bytes=eb)
            want = ga[row0 + 64 * i:row0 + 64 * i + 64, col0 + k:col0 + k + ks]
            np.testing.assert_array_equal(got, want)
    if not kmajor_b and eb != 2:
        return
    n = 8 * n8 if kmajor_b else (swizzle // eb) * data.draw(st.integers(1, 2))
    bbase = base + 1024 * 8 * blocks * panels
    if kmajor_b:  # B^T: (N, K) K-major
        gb = rng.integers(0, 1 << (8 * eb), (n, bk), dtype=bits)
        b = box_of(n, bk, elem, swizzle, 1024)
        tma_fill(gb, elem, n, bk, swizzle, 0, 0, bbase, smem)
    else:  # B: (K, N) MN-major
        gb = rng.integers(0, 1 << (8 * eb), (bk, n), dtype=bits)
        b = box_of(bk, n, elem, swizzle, 1024)
        tma_fill(gb, elem, bk, n, swizzle, 0, 0, bbase, smem)
    for k in range(0, bk, ks):
        d = static_desc(b, bbase, k, 0, kmajor_b)
        got = load_operand(smem, d, operand="b", mn=n, k=ks, element_bytes=eb,
                           k_major=kmajor_b)
        want = gb[:, k:k + ks].T if kmajor_b else gb[k:k + ks, :]
        np.testing.assert_array_equal(got, want)


def test_descriptor_constants_follow_the_isa() -> None:
    """K-major bf16 128B: SBO 1024, layout code 1 (128B), a k16 step is +2 encoded; the
    64B/32B codes are 2/3 (PTX ISA 'Matrix Descriptor Format', bits 62-63)."""
    a = box_of(64, 64, "bf16", 128, 1024)
    d0, d1 = (decode_descriptor(static_desc(a, 2048, k, 0, True)) for k in (0, 16))
    assert (d0.stride_byte_offset, d0.swizzle) == (1024, Swizzle.B128)
    assert (static_desc(a, 2048, 16, 0, True) - static_desc(a, 2048, 0, 0, True)) == 2
    assert d1.start_address - d0.start_address == 32
    for sw, code in ((64, 2), (32, 3)):
        box = box_of(64, sw // 2, "bf16", sw, 1024)
        assert static_desc(box, 0, 0, 0, True) >> 62 == code


def test_geometry_rejects_bad_operands() -> None:
    with pytest.raises(AlignmentError, match="1024-byte aligned"):
        geometry(box_of(64, 64, "bf16", 128, 512))
    with pytest.raises(UnsupportedError, match="swizzle"):
        geometry(box_of(64, 64, "bf16", 0, 1024))
    with pytest.raises(ShapeError, match="panels"):
        geometry(box_of(64, 48, "bf16", 128, 1024))
    with pytest.raises(UnsupportedError, match="1- or 2-byte"):
        geometry(box_of(64, 32, "f32", 128, 1024))
    box = box_of(64, 64, "bf16", 128, 1024)
    with pytest.raises(ShapeError, match="core matrix"):
        operand_offset(box, 4, 0, k_major=True)
