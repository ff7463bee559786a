"""Register fragment layouts of ``mma.sync`` (sm_80+) and the wgmma accumulator (sm_90a).

A fragment layout says, for every thread of a warp (or warpgroup) and every element it
holds, which (row, col) of the matrix that element is.  Layouts are index arrays of shape
``(threads, elements)`` so that scattering a matrix into registers, or gathering it back,
is one fancy-indexing call batched over any number of warps.

Sources: PTX ISA 9.x, sec. 9.7.14.5 "Matrix Fragments for mma.m16n8k16 with floating
point type" and "Matrix Fragments for mma.m16n8k32"; sec. 9.7.15.5.1
"Register Fragments" of wgmma (the m64nNk16 D matrix).  Notation of the ISA:
``groupID = lane >> 2`` and ``threadID_in_group = lane % 4``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.errors import ArgumentError, ShapeError


@dataclass(frozen=True, eq=False)
class FragmentLayout:
    """Where each element held by each thread lies in the matrix.

    ``row[t, i]`` and ``col[t, i]`` are the coordinates of element ``i`` of thread ``t``
    (int64 arrays of shape ``(threads, elements)``).  ``element_bits`` is the width of
    one element; ``elements * element_bits / 32`` 32-bit registers hold them, element
    ``i`` in register ``i * element_bits // 32`` with lower ``i`` in lower bits.
    """

    name: str
    rows: int
    cols: int
    element_bits: int
    row: np.ndarray
    col: np.ndarray

    @property
    def threads(self) -> int:
        """Threads taking part: 32 for mma.sync, 128 for a wgmma warpgroup."""
        return int(self.row.shape[0])

    @property
    def elements(self) -> int:
        """Elements each thread holds."""
        return int(self.row.shape[1])

    @property
    def registers(self) -> int:
        """32-bit registers each thread uses for its elements."""
        return self.elements * self.element_bits // 32

    def covers_exactly_once(self) -> bool:
        """True when every matrix position is held by exactly one (thread, element)."""
        counts = np.zeros((self.rows, self.cols), np.int64)
        np.add.at(counts, (self.row, self.col), 1)
        return bool(np.all(counts == 1))


def _lane_grid(threads: int, elements: int) -> tuple[np.ndarray, np.ndarray]:
    t, i = np.meshgrid(np.arange(threads), np.arange(elements), indexing="ij")
    return t.astype(np.int64), i.astype(np.int64)


def mma_m16n8k16_a() -> FragmentLayout:
    """A (16x16, .bf16/.f16) of ``mma.m16n8k16``: 8 elements per lane in 4 registers.

    PTX ISA sec. 9.7.14.5 (m16n8k16 fragments): row = groupID for a0,a1,a4,a5 and
    groupID+8 for a2,a3,a6,a7; col = 2*threadID_in_group + (i & 1), plus 8 for a4..a7.
    """
    lane, i = _lane_grid(32, 8)
    row = (lane >> 2) + 8 * ((i >> 1) & 1)
    col = 2 * (lane & 3) + (i & 1) + 8 * (i >> 2)
    return FragmentLayout("mma.m16n8k16.A", 16, 16, 16, row, col)


def mma_m16n8k16_b() -> FragmentLayout:
    """B (16x8 = KxN, .bf16/.f16) of ``mma.m16n8k16``: 4 elements per lane in 2 registers.

    PTX ISA sec. 9.7.14.5 (m16n8k16 fragments): row (k) = 2*threadID_in_group + (i & 1),
    plus 8 for b2,b3; col (n) = groupID.
    """
    lane, i = _lane_grid(32, 4)
    row = 2 * (lane & 3) + (i & 1) + 8 * (i >> 1)
    col = lane >> 2
    return FragmentLayout("mma.m16n8k16.B", 16, 8, 16, row, col)


def mma_m16n8_c(element_bits: int = 32) -> FragmentLayout:
    """C/D (16x8) of ``mma.m16n8k16`` and ``mma.m16n8k32``: 4 elements per lane.

    PTX ISA sec. 9.7.14.5 (m16n8k16 fragments): row = groupID for c0,c1 and groupID+8 for c2,c3;
    col = 2*threadID_in_group + (i & 1).  With .f32 each element is one register.
    """
    lane, i = _lane_grid(32, 4)
    row = (lane >> 2) + 8 * (i >> 1)
    col = 2 * (lane & 3) + (i & 1)
    return FragmentLayout("mma.m16n8.C", 16, 8, element_bits, row, col)


def mma_m16n8k8_a() -> FragmentLayout:
    """A (16x8, .tf32) of ``mma.m16n8k8``: 4 elements per lane, one register each.

    PTX ISA sec. 9.7.14.5 (m16n8k8 fragments, .tf32): row = groupID for a0, a2 and
    groupID+8 for a1, a3; col = threadID_in_group, plus 4 for a2, a3.
    """
    lane, i = _lane_grid(32, 4)
    row = (lane >> 2) + 8 * (i & 1)
    col = (lane & 3) + 4 * (i >> 1)
    return FragmentLayout("mma.m16n8k8.A", 16, 8, 32, row, col)


def mma_m16n8k8_b() -> FragmentLayout:
    """B (8x8 = KxN, .tf32) of ``mma.m16n8k8``: 2 elements per lane, one register each.

    PTX ISA sec. 9.7.14.5 (m16n8k8 fragments, .tf32): row (k) = threadID_in_group, plus
    4 for b1; col (n) = groupID.
    """
    lane, i = _lane_grid(32, 2)
    row = (lane & 3) + 4 * i
    col = lane >> 2
    return FragmentLayout("mma.m16n8k8.B", 8, 8, 32, row, col)


def mma_m16n8k32_a() -> FragmentLayout:
    """A (16x32, .e4m3/.e5m2, sm_89+) of ``mma.m16n8k32``: 16 bytes per lane in 4 registers.

    PTX ISA sec. 9.7.14.5 (m16n8k32 fragments): row = groupID for a0..a3 and a8..a11,
    else groupID+8; col = 4*threadID_in_group + (i & 3), plus 16 for a8..a15.
    """
    lane, i = _lane_grid(32, 16)
    row = (lane >> 2) + 8 * ((i >> 2) & 1)
    col = 4 * (lane & 3) + (i & 3) + 16 * (i >> 3)
    return FragmentLayout("mma.m16n8k32.A", 16, 32, 8, row, col)


def mma_m16n8k32_b() -> FragmentLayout:
    """B (32x8 = KxN, .e4m3/.e5m2) of ``mma.m16n8k32``: 8 bytes per lane in 2 registers.

    PTX ISA sec. 9.7.14.5 (m16n8k32 fragments): row (k) = 4*threadID_in_group + (i & 3),
    plus 16 for b4..b7; col (n) = groupID.
    """
    lane, i = _lane_grid(32, 8)
    row = 4 * (lane & 3) + (i & 3) + 16 * (i >> 2)
    col = lane >> 2
    return FragmentLayout("mma.m16n8k32.B", 32, 8, 8, row, col)


def wgmma_accumulator_registers(n: int, accumulator: str = "f32") -> int:
    """Registers per thread holding the m64nNk* accumulator: N/2 for .f32, N/4 for .f16.

    PTX ISA sec. 9.7.15.5.1: the 64xN D matrix is spread over the 128 threads of the
    warpgroup, N/2 elements per thread; .f16 accumulators pack two per register.
    """
    _check_wgmma_n(n)
    if accumulator == "f32":
        return n // 2
    if accumulator == "f16":
        return n // 4
    raise ArgumentError(f"unknown wgmma accumulator type {accumulator!r}",
                        hint="use 'f32' or 'f16'")


def wgmma_accumulator(n: int, accumulator: str = "f32") -> FragmentLayout:
    """The D fragment of ``wgmma.mma_async.m64nNk*`` for the 128 threads of a warpgroup.

    Thread ``t`` (warp ``w = t // 32``, lane ``l``), element ``i``: row
    ``16w + l//4 + 8*((i>>1)&1)``, col ``8*(i>>2) + 2*(l%4) + (i&1)`` -- four m16n8 C
    fragments per warp stacked along N (PTX ISA sec. 9.7.15.5.1, WGMMA .m64nNk16 D).
    """
    _check_wgmma_n(n)
    bits = {"f32": 32, "f16": 16}.get(accumulator)
    if bits is None:
        raise ArgumentError(f"unknown wgmma accumulator type {accumulator!r}",
                            hint="use 'f32' or 'f16'")
    t, i = _lane_grid(128, n // 2)
    warp, lane = t >> 5, t & 31
    row = 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1)
    col = 8 * (i >> 2) + 2 * (lane & 3) + (i & 1)
    return FragmentLayout(f"wgmma.m64n{n}.D.{accumulator}", 64, n, bits, row, col)


def _check_wgmma_n(n: int) -> None:
    # PTX ISA sec. 9.7.15.5: for 16-bit and 8-bit inputs N is a multiple of 8 in 8..256.
    if not (isinstance(n, int) and 8 <= n <= 256 and n % 8 == 0):
        raise ArgumentError(f"wgmma N must be a multiple of 8 in 8..256, got {n!r}",
                            hint="pick N from 8, 16, 24, ..., 256")


def to_fragments(matrix: np.ndarray, layout: FragmentLayout) -> np.ndarray:
    """Scatter ``matrix`` (..., rows, cols) into per-thread elements (..., threads, elements)."""
    matrix = np.asarray(matrix)
    if matrix.shape[-2:] != (layout.rows, layout.cols):
        raise ShapeError(f"{layout.name} needs a {layout.rows}x{layout.cols} matrix, "
                         f"got trailing shape {matrix.shape[-2:]}")
    return matrix[..., layout.row, layout.col]


def from_fragments(fragments: np.ndarray, layout: FragmentLayout) -> np.ndarray:
    """Gather per-thread elements (..., threads, elements) back into (..., rows, cols)."""
    fragments = np.asarray(fragments)
    if fragments.shape[-2:] != (layout.threads, layout.elements):
        raise ShapeError(f"{layout.name} fragments have shape (..., {layout.threads}, "
                         f"{layout.elements}), got {fragments.shape}")
    out = np.empty((*fragments.shape[:-2], layout.rows, layout.cols), fragments.dtype)
    out[..., layout.row, layout.col] = fragments
    return out


def pack_registers(elements: np.ndarray, element_bits: int) -> np.ndarray:
    """Pack element bit patterns (..., n) into 32-bit registers (..., n*bits/32).

    Lower-indexed elements go to lower bits (PTX ISA sec. 9.7.14.5: ".f16x2 ... the
    lower-indexed element in the lower half").
    """
    per = 32 // element_bits
    e = np.asarray(elements).astype(np.uint32) & np.uint32((1 << element_bits) - 1)
    if e.shape[-1] % per:
        raise ShapeError(f"{e.shape[-1]} elements do not fill whole 32-bit registers")
    e = e.reshape(*e.shape[:-1], e.shape[-1] // per, per)
    shifts = (np.arange(per, dtype=np.uint32) * element_bits).astype(np.uint32)
    return np.bitwise_or.reduce(e << shifts, axis=-1).astype(np.uint32)


def unpack_registers(registers: np.ndarray, element_bits: int) -> np.ndarray:
    """Split 32-bit registers (..., r) into element bit patterns (..., r*32/bits)."""
    per = 32 // element_bits
    r = np.asarray(registers).astype(np.uint32)
    shifts = (np.arange(per, dtype=np.uint32) * element_bits).astype(np.uint32)
    e = (r[..., None] >> shifts) & np.uint32((1 << element_bits) - 1)
    out_dtype = {8: np.uint8, 16: np.uint16, 32: np.uint32}[element_bits]
    return e.reshape(*r.shape[:-1], r.shape[-1] * per).astype(out_dtype)
