"""The 64-bit wgmma shared-memory matrix descriptor and the operand it describes.

Bit layout (PTX ISA sec. 9.7.15.5.1.2.2 "Matrix Descriptor Format"), with
``encode(x) = (x & 0x3FFFF) >> 4``:

====== ===========================================================
 0-13  encode(matrix start address)
16-29  encode(leading dimension byte offset, LBO)
32-45  encode(stride dimension byte offset, SBO)
49-51  matrix base offset (0 when the swizzle pattern starts aligned)
62-63  layout / swizzle: 0 none, 1 = 128B, 2 = 64B, 3 = 32B
====== ===========================================================

Which shared byte holds element (mn, k) of an operand (PTX ISA sec. 9.7.15.5.1.2
"Shared Memory Matrix Layout": matrices are built of 8-row x 16-byte core matrices inside
swizzle atoms; the canonical forms are those of CUTLASS's ``make_gmma_desc``).  With
``T = 16 / element_bytes`` elements per 16-byte chunk, ``W`` the swizzle span in bytes and
``S`` the swizzle applied to the absolute address (see :mod:`tessera.arch.swizzle`):

K-major (rows along M/N, K contiguous)::

    none:     start + (mn%8)*16 + (mn//8)*SBO + (k//T)*LBO + (k%T)*eb
    swizzled: S(start + (mn%8)*W  + (mn//8)*SBO + (k//T)*16  + (k%T)*eb)

MN-major (M/N contiguous; 16-bit types only)::

    none:     start + (mn%T)*eb + (mn//T)*SBO + (k%8)*16 + (k//8)*LBO
    swizzled: S(start + (mn%T)*eb + ((mn//T) % (W/16))*16 + (mn//T // (W/16))*LBO
                + (k%8)*W + (k//8)*SBO)

One instruction reads 32 bytes of K per row (k16 for 16-bit, k32 for 8-bit), which fits
every swizzle span, so K-major swizzled layouts never use LBO.  Kernels step through a
128-byte atom by adding ``32 >> 4 = 2`` to the start-address field per k-step.

With a zero base offset the swizzle pattern must start on its 1024 / 512 / 256-byte
boundary, so a swizzled start address may lie only inside the first 128-byte row of a
pattern (bits 7 .. 7+B-1 clear); anything else means a misaligned buffer and raises
:class:`~tessera.arch.errors.AlignmentError`.  Non-zero base offsets are not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.arch.errors import AlignmentError, DescriptorError
from tessera.arch.swizzle import Swizzle, from_wgmma_layout, swizzle_address, to_wgmma_layout
from tessera.errors import ArgumentError, ShapeError, UnsupportedError

_FIELD_MAX = (1 << 14) - 1
_ADDR_LIMIT = 1 << 18  # encode() keeps address bits 4..17


@dataclass(frozen=True)
class MatrixDescriptor:
    """A decoded wgmma matrix descriptor; byte quantities, not the >>4 encoded fields."""

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    base_offset: int = 0
    swizzle: Swizzle = Swizzle.NONE

    def __post_init__(self) -> None:
        for name in ("start_address", "leading_byte_offset", "stride_byte_offset"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 0:
                raise DescriptorError(f"descriptor {name} must be a non-negative int, "
                                      f"got {value!r}")
            if value % 16:
                raise DescriptorError(
                    f"descriptor {name} {value} is not a multiple of 16 (PTX ISA 'Matrix "
                    "Descriptor Format': the field stores the value >> 4)",
                    hint="align shared buffers and offsets to 16 bytes")
            if value >= _ADDR_LIMIT:
                raise DescriptorError(
                    f"descriptor {name} {value} does not fit the 14-bit field of value >> 4 "
                    f"(at most {_FIELD_MAX * 16})", hint="use a smaller offset")
        if not 0 <= self.base_offset <= 7:
            raise DescriptorError(f"descriptor base offset {self.base_offset} is not 0..7")
        if not isinstance(self.swizzle, Swizzle):
            raise DescriptorError(f"descriptor swizzle must be a Swizzle, got {self.swizzle!r}")

    def encode(self) -> int:
        """The 64-bit descriptor value."""
        return ((self.start_address >> 4)
                | (self.leading_byte_offset >> 4) << 16
                | (self.stride_byte_offset >> 4) << 32
                | self.base_offset << 49
                | to_wgmma_layout(self.swizzle) << 62)

    def advanced(self, nbytes: int) -> MatrixDescriptor:
        """The descriptor with its start address moved by ``nbytes`` (a k-step)."""
        return MatrixDescriptor(self.start_address + nbytes, self.leading_byte_offset,
                                self.stride_byte_offset, self.base_offset, self.swizzle)


def encode_descriptor(start_address: int, leading_byte_offset: int, stride_byte_offset: int,
                      swizzle: Swizzle = Swizzle.NONE, base_offset: int = 0) -> int:
    """Validate and pack the fields (byte values) into a 64-bit descriptor."""
    return MatrixDescriptor(start_address, leading_byte_offset, stride_byte_offset,
                            base_offset, swizzle).encode()


def decode_descriptor(value: int) -> MatrixDescriptor:
    """Unpack a 64-bit descriptor; fields come back as byte values."""
    value = int(value)
    if not 0 <= value < 1 << 64:
        raise DescriptorError(f"descriptor {value:#x} is not a 64-bit value")
    return MatrixDescriptor(
        start_address=(value & _FIELD_MAX) << 4,
        leading_byte_offset=((value >> 16) & _FIELD_MAX) << 4,
        stride_byte_offset=((value >> 32) & _FIELD_MAX) << 4,
        base_offset=(value >> 49) & 7,
        swizzle=from_wgmma_layout((value >> 62) & 3))


def operand_addresses(desc: MatrixDescriptor | int, mn: int, k: int, element_bytes: int,
                      k_major: bool = True) -> np.ndarray:
    """Absolute shared byte address of the first byte of each element, shape (mn, k)."""
    d = desc if isinstance(desc, MatrixDescriptor) else decode_descriptor(desc)
    if element_bytes not in (1, 2, 4):
        raise ArgumentError(f"wgmma shared operands have 1-, 2- or 4-byte (tf32) elements, "
                            f"got {element_bytes}")
    if k * element_bytes != 32:
        raise ShapeError(f"one wgmma reads 32 bytes of K per row; k={k} with "
                         f"{element_bytes}-byte elements is {k * element_bytes} bytes",
                         hint="k8 for tf32, k16 for 16-bit types, k32 for 8-bit types")
    if d.base_offset:
        raise UnsupportedError("a non-zero matrix base offset is not modelled",
                               hint="align swizzled buffers so the base offset is 0")
    phase = (d.start_address >> 7) & ((1 << d.swizzle.bits) - 1)
    if phase:
        # PTX ISA 'Matrix Descriptor Format': with base offset 0 the swizzle pattern starts
        # on a 1024/512/256-byte boundary, so the start address may sit only within the
        # first 128-byte row of a pattern (the k-step advance), never further in.
        raise AlignmentError(
            f"matrix start address {d.start_address} lies in row {phase} of a "
            f"{d.swizzle.name} swizzle pattern while the base offset is 0: the shared buffer "
            f"is not {d.swizzle.alignment}-byte aligned",
            hint=f"align the operand buffer to {d.swizzle.alignment} bytes")
    if not k_major and element_bytes != 2:
        # PTX ISA sec. 9.7.15.5: imm-trans-a/b (MN-major) is valid only for .f16/.bf16.
        raise UnsupportedError("MN-major (transposed) wgmma operands need 16-bit elements")
    t = 16 // element_bytes
    m = np.arange(mn, dtype=np.int64)[:, None]
    kk = np.arange(k, dtype=np.int64)[None, :]
    lbo, sbo, w = d.leading_byte_offset, d.stride_byte_offset, d.swizzle.span
    if k_major:
        if d.swizzle is Swizzle.NONE:
            off = (m % 8) * 16 + (m // 8) * sbo + (kk // t) * lbo + (kk % t) * element_bytes
        else:
            off = (m % 8) * w + (m // 8) * sbo + (kk // t) * 16 + (kk % t) * element_bytes
    else:
        chunk = m // t
        if d.swizzle is Swizzle.NONE:
            off = (m % t) * element_bytes + chunk * sbo + (kk % 8) * 16 + (kk // 8) * lbo
        else:
            per = w // 16
            off = ((m % t) * element_bytes + (chunk % per) * 16 + (chunk // per) * lbo
                   + (kk % 8) * w + (kk // 8) * sbo)
    return swizzle_address(d.start_address + off, d.swizzle)


def load_operand(smem: np.ndarray, desc: MatrixDescriptor | int, *, operand: str, mn: int,
                 k: int, element_bytes: int, k_major: bool = True) -> np.ndarray:
    """Read a wgmma shared operand as raw element bit patterns.

    ``operand`` is ``"a"`` (returns (M, K)) or ``"b"`` (returns (K, N)); ``mn`` is M (64)
    or N.  Elements are uint16 for 2-byte and uint8 for 1-byte types; ``smem`` holds one
    CTA's shared memory (uint8, shape ``(..., size)``, any batch of CTAs).
    """
    if operand not in ("a", "b"):
        raise ArgumentError(f"operand must be 'a' or 'b', got {operand!r}")
    smem = np.asarray(smem)
    if smem.dtype != np.uint8:
        raise ArgumentError(f"shared memory must be uint8 bytes, got {smem.dtype}")
    addr = operand_addresses(desc, mn, k, element_bytes, k_major)
    if addr.max() + element_bytes > smem.shape[-1]:
        raise ArgumentError(f"the operand reaches shared byte {int(addr.max())}, beyond the "
                            f"{smem.shape[-1]} bytes of shared memory",
                            hint="check the descriptor's start address, LBO and SBO")
    value = smem[..., addr].astype(np.uint16)
    if element_bytes == 2:
        value = value | (smem[..., addr + 1].astype(np.uint16) << np.uint16(8))
    else:
        value = value.astype(np.uint8)
    return np.swapaxes(value, -1, -2) if operand == "b" else value
