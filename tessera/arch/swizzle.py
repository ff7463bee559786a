"""Shared-memory swizzle modes of TMA and wgmma (sm_90): NONE, 32B, 64B and 128B.

A swizzle permutes the 16-byte chunks of shared memory so that the rows of a tile land in
different banks.  The permutation is a function of the *absolute* shared address:

    swizzled(addr) = addr XOR (((addr >> 7) & mask) << 4),   mask = 2**B - 1

with ``B = 3, 2, 1`` for 128B, 64B, 32B (CUTLASS ``Swizzle<B, 4, 3>`` on byte addresses):
bits [4, 4+B) -- the 16-byte chunk index inside a 128-byte row -- are XORed with bits
[7, 7+B).  The pattern repeats every ``2**B * 128`` bytes (1024 / 512 / 256), so a buffer
holds the canonical layout only when its base is aligned to that repeat (PTX ISA
sec. 9.7.15.5.1.2 "Shared Memory Matrix Layout": the repeating pattern starts on a
1024 / 512 / 256-byte boundary).  The hardware does not check the alignment; a misaligned
buffer silently reads permuted data, which is why :func:`check_swizzle_alignment` exists.

Two encodings of the same four modes exist and run in opposite directions:

* the wgmma matrix descriptor's layout field (bits 62-63, PTX ISA sec. 9.7.15.5.1.2.2
  "Matrix Descriptor Format"): 0 none, 1 = 128B, 2 = 64B, 3 = 32B;
* cuda.h ``CUtensorMapSwizzle``: NONE 0, 32B 1, 64B 2, 128B 3.
"""

from __future__ import annotations

import enum

import numpy as np

from tessera.arch.errors import AlignmentError
from tessera.errors import ArgumentError


class Swizzle(enum.Enum):
    """A swizzle mode; the value is its span in bytes (0 for none)."""

    NONE = 0
    B32 = 32
    B64 = 64
    B128 = 128

    @property
    def bits(self) -> int:
        """B of ``Swizzle<B, 4, 3>``: how many chunk-index bits are XORed (0..3)."""
        return {0: 0, 32: 1, 64: 2, 128: 3}[self.value]

    @property
    def span(self) -> int:
        """Bytes of one swizzled row: 32 / 64 / 128; 16 (one core-matrix row) for NONE."""
        return self.value if self.value else 16

    @property
    def atom_bytes(self) -> int:
        """Bytes after which the XOR pattern repeats: 256 / 512 / 1024 (16 for NONE)."""
        return 8 * self.value if self.value else 16

    @property
    def alignment(self) -> int:
        """Base alignment a swizzled buffer needs so the pattern starts on its first byte."""
        return self.atom_bytes


_WGMMA_CODE = {Swizzle.NONE: 0, Swizzle.B128: 1, Swizzle.B64: 2, Swizzle.B32: 3}
_TMA_CODE = {Swizzle.NONE: 0, Swizzle.B32: 1, Swizzle.B64: 2, Swizzle.B128: 3}


def to_wgmma_layout(swizzle: Swizzle) -> int:
    """The wgmma descriptor layout-field code (0 none, 1 = 128B, 2 = 64B, 3 = 32B)."""
    return _WGMMA_CODE[swizzle]


def from_wgmma_layout(code: int) -> Swizzle:
    """The swizzle mode of a wgmma descriptor layout-field code."""
    for mode, value in _WGMMA_CODE.items():
        if value == code:
            return mode
    raise ArgumentError(f"wgmma layout code {code!r} is not 0..3")


def to_tma_swizzle(swizzle: Swizzle) -> int:
    """The cuda.h ``CUtensorMapSwizzle`` value (NONE 0, 32B 1, 64B 2, 128B 3)."""
    return _TMA_CODE[swizzle]


def from_tma_swizzle(code: int) -> Swizzle:
    """The swizzle mode of a ``CUtensorMapSwizzle`` value (0..3; atom variants unsupported)."""
    for mode, value in _TMA_CODE.items():
        if value == code:
            return mode
    raise ArgumentError(f"CUtensorMapSwizzle {code!r} is not supported",
                        hint="use NONE (0), 32B (1), 64B (2) or 128B (3)")


def swizzle_address(addr: np.ndarray | int, swizzle: Swizzle) -> np.ndarray:
    """Apply ``swizzle`` to absolute shared byte addresses (vectorised, int64)."""
    a = np.asarray(addr, np.int64)
    mask = (1 << swizzle.bits) - 1
    return a ^ (((a >> 7) & mask) << 4)


def check_swizzle_alignment(base: int, swizzle: Swizzle, what: str = "shared buffer") -> None:
    """Raise :class:`AlignmentError` unless ``base`` is aligned for ``swizzle``.

    PTX ISA sec. 9.7.15.5.1.2.2: the repeating pattern of 128B / 64B / 32B swizzle starts
    on a 1024 / 512 / 256-byte boundary (with a zero matrix base offset).
    """
    if base % swizzle.alignment:
        raise AlignmentError(
            f"{what} at shared address {base} is not {swizzle.alignment}-byte aligned, as "
            f"the {swizzle.name} swizzle requires (PTX ISA 'Matrix Descriptor Format': the "
            "pattern repeats from an aligned boundary); the hardware would read permuted data",
            hint=f"align the buffer to {swizzle.alignment} bytes")


def swizzle_permutation(swizzle: Swizzle, nbytes: int = 1024, base: int = 0) -> np.ndarray:
    """Destination offset (relative to ``base``) of each byte of ``[base, base+nbytes)``."""
    addr = base + np.arange(nbytes, dtype=np.int64)
    return swizzle_address(addr, swizzle) - base
