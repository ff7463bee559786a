"""Where a lowered tile lives: memory boxes and the accumulator register layout.

The hardware mapping of a *block* kernel (one whose tiles hold tensors): a Tessera
tile is one CTA of :data:`THREADS` threads — four warps, which on sm_90a are one
warpgroup. A tensor a tile holds is spread over those threads by a layout:

* the **accumulator layout** of an ``(BM, BN)`` ``mma`` result, shared by sm_80 and
  sm_90a (it is the ``wgmma`` m64nN accumulator layout, PTX ISA sec. 9.7.15.5.1,
  repeated every 64 rows; the sm_80 lowering issues one ``mma.sync`` m16n8k16 per
  warp, 16-row strip and n8 column block so that it lands in the same registers).
  Thread ``t`` (warp ``w = t // 32``, ``g = lane // 4``, ``q = lane % 4``) holds
  ``BM * BN / 128`` values; its register ``r = b * BN/2 + i`` (64-row block ``b``,
  ``0 <= i < BN/2``) is element ``(64 b + 16 w + g + 8 ((i >> 1) & 1),
  8 (i >> 2) + 2 q + (i & 1))``. A row is held by the four threads of one quad.
* the **row layout** of a ``(BM,)`` row statistic (a ``row_max`` of an accumulator):
  thread ``t`` holds rows ``64 b + 16 w + g + 8 h`` for ``b`` then ``h`` in 0..1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.errors import UnsupportedError
from tessera.ir.core import Value

THREADS = 128
WARPS = THREADS // 32


@dataclass(frozen=True)
class GlobalBox:
    """A ``rows x cols`` box of a row-major global tensor: ``base`` is the ``u64``
    address of element (0, 0) of the box, ``stride`` the row stride in elements."""

    base: Value
    rows: int
    cols: int
    stride: int
    elem: str  # PTX element name of ELEM_BYTES: bf16, f16, f32, e4m3, s32...


@dataclass(frozen=True)
class SharedBox:
    """A ``rows x cols`` row-major buffer in shared memory at ``u32`` address ``base``
    (aligned to ``align`` bytes). ``swizzle`` is the byte span of the 16-byte-chunk XOR
    swizzle applied to absolute addresses (0: none; 32, 64, 128 as TMA and ``wgmma``
    define them)."""

    base: Value
    rows: int
    cols: int
    elem: str
    swizzle: int = 0
    align: int = 128


#: bytes of one element of each PTX element name a box holds (tessera.lower.values.ELEM_OF)
ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1,
              "u8": 1, "s32": 4, "s64": 8, "f64": 8}


def elem_size(elem: str) -> int:
    """Bytes of one ``elem`` element (a name of :data:`ELEM_BYTES`)."""
    if elem not in ELEM_BYTES:
        raise UnsupportedError(f"the tile building blocks do not handle {elem!r} elements",
                               hint=f"use one of {', '.join(ELEM_BYTES)}")
    return ELEM_BYTES[elem]


def acc_coords(bm: int, bn: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, cols)``, each ``(128, bm * bn // 128)``: the element of the accumulator
    layout held by each thread's registers, in register order."""
    t = np.arange(THREADS)[:, None]
    w, lane = t // 32, t % 32
    g, q = lane // 4, lane % 4
    half = bn // 2
    r = np.arange(bm * bn // THREADS)[None, :]
    b, i = r // half, r % half
    rows = 64 * b + 16 * w + g + 8 * ((i >> 1) & 1)
    cols = 8 * (i >> 2) + 2 * q + (i & 1)
    return rows, cols


def row_coords(bm: int) -> np.ndarray:
    """``(128, bm // 32)``: the rows of the row layout held by each thread."""
    t = np.arange(THREADS)[:, None]
    w, g = (t // 32), (t % 32) // 4
    r = np.arange(bm // 32)[None, :]
    b, h = r // 2, r % 2
    return 64 * b + 16 * w + g + 8 * h


__all__ = ["ELEM_BYTES", "THREADS", "WARPS", "GlobalBox", "SharedBox", "acc_coords",
           "elem_size", "row_coords"]
