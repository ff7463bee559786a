"""Shared-memory swizzle modes (TMA and wgmma).

PTX ISA 9.x, sec. 9.7.15.5.1.2 "Shared Memory Matrix Layout" and sec. 9.7.15.5.1.2.2
"Matrix Descriptor Format" (layout field 0 none, 1 = 128B, 2 = 64B, 3 = 32B; the pattern
repeats from a 1024 / 512 / 256-byte boundary); cuda.h CUtensorMapSwizzle (NONE 0, 32B 1,
64B 2, 128B 3).  The XOR rule is CUTLASS's Swizzle<B,4,3> on byte addresses.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import (
    AlignmentError,
    Swizzle,
    check_swizzle_alignment,
    from_tma_swizzle,
    from_wgmma_layout,
    swizzle_address,
    swizzle_permutation,
    to_tma_swizzle,
    to_wgmma_layout,
)
from tessera.errors import ArgumentError

SWIZZLED = [Swizzle.B32, Swizzle.B64, Swizzle.B128]


def test_enum_encodings_run_in_opposite_directions() -> None:
    assert [to_wgmma_layout(s) for s in (Swizzle.NONE, Swizzle.B128, Swizzle.B64,
                                         Swizzle.B32)] == [0, 1, 2, 3]
    assert [to_tma_swizzle(s) for s in (Swizzle.NONE, Swizzle.B32, Swizzle.B64,
                                        Swizzle.B128)] == [0, 1, 2, 3]
    for s in Swizzle:
        assert from_wgmma_layout(to_wgmma_layout(s)) is s
        assert from_tma_swizzle(to_tma_swizzle(s)) is s
    # The classic mix-up: TMA's 128B code read as a wgmma layout code means 32B.
    assert from_wgmma_layout(to_tma_swizzle(Swizzle.B128)) is Swizzle.B32
    with pytest.raises(ArgumentError):
        from_tma_swizzle(4)


def test_spans_and_alignments() -> None:
    assert [(s.span, s.alignment) for s in SWIZZLED] == [(32, 256), (64, 512), (128, 1024)]
    assert Swizzle.NONE.bits == 0 and Swizzle.B128.bits == 3


def test_hand_computed_addresses() -> None:
    # 128B: chunk bits 4-6 ^= bits 7-9.  Row 1 chunk 0 -> chunk 1; row 7 chunk 7 -> chunk 0.
    assert swizzle_address(0x80, Swizzle.B128) == 0x90
    assert swizzle_address(0x3F0, Swizzle.B128) == 0x380
    assert swizzle_address(0x400 + 0x3F5, Swizzle.B128) == 0x400 + 0x385
    # 64B: bits 4-5 ^= bits 7-8; bit 9 plays no part.
    assert swizzle_address(0x180, Swizzle.B64) == 0x1B0
    assert swizzle_address(0x200, Swizzle.B64) == 0x200
    # 32B: bit 4 ^= bit 7.
    assert swizzle_address(0x80, Swizzle.B32) == 0x90
    assert swizzle_address(0x100, Swizzle.B32) == 0x100
    assert swizzle_address(0x1234, Swizzle.NONE) == 0x1234


@pytest.mark.parametrize("mode", list(Swizzle))
def test_permutation_within_each_atom_and_bijective(mode: Swizzle) -> None:
    atom = mode.atom_bytes
    perm = swizzle_permutation(mode, 4 * atom)
    assert np.array_equal(np.sort(perm), np.arange(4 * atom))  # a bijection
    assert np.array_equal(perm // atom, np.arange(4 * atom) // atom)  # stays in its atom
    assert np.array_equal(perm % 16, np.arange(4 * atom) % 16)  # 16-byte chunks move whole
    addr = np.arange(1 << 14)
    assert np.array_equal(swizzle_address(swizzle_address(addr, mode), mode), addr)


@pytest.mark.parametrize("mode", SWIZZLED)
def test_swizzle_acts_on_absolute_addresses(mode: Swizzle) -> None:
    aligned = swizzle_permutation(mode, mode.atom_bytes, base=4 * 1024)
    shifted = swizzle_permutation(mode, mode.atom_bytes, base=4 * 1024 + 128)
    assert not np.array_equal(aligned, shifted)  # a misaligned buffer sees another layout
    assert np.array_equal(aligned, swizzle_permutation(mode, mode.atom_bytes))


@settings(max_examples=60, deadline=None)
@given(mode=st.sampled_from(SWIZZLED), base=st.integers(0, 1 << 17).map(lambda b: b * 16))
def test_alignment_checker(mode: Swizzle, base: int) -> None:
    if base % mode.alignment == 0:
        check_swizzle_alignment(base, mode)
        # An aligned buffer sees the same relative layout as one at address 0.
        assert np.array_equal(swizzle_permutation(mode, mode.atom_bytes, base),
                              swizzle_permutation(mode, mode.atom_bytes))
    else:
        with pytest.raises(AlignmentError, match=str(mode.alignment)):
            check_swizzle_alignment(base, mode)
