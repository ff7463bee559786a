"""``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16``: shared memory to fragments.

PTX ISA sec. 9.7.14.5.15 "ldmatrix" (sm_75+): a warp loads one, two or four 8x8 matrices
of 16-bit elements.  Threads ``8k .. 8k+7`` give the addresses of the eight rows of
matrix ``k`` (16 bytes each, 16-byte aligned); with ``.x1`` only threads 0-7 and with
``.x2`` only threads 0-15 supply addresses.  Register ``k`` of lane ``l`` receives row
``l // 4`` of matrix ``k``, elements ``2*(l % 4)`` (low half) and ``2*(l % 4) + 1``
(high half).  ``.trans`` delivers each matrix transposed.
"""

from __future__ import annotations

import numpy as np

from tessera.arch.errors import AlignmentError
from tessera.errors import ArgumentError, ShapeError

_ROW_BYTES = 16


def ldmatrix(smem: np.ndarray, addrs: np.ndarray, num: int, trans: bool = False) -> np.ndarray:
    """Execute one ``ldmatrix`` per warp; return the 32-bit registers of every lane.

    ``smem`` is a CTA's shared memory as bytes (uint8, shape ``(..., size)``) and
    ``addrs`` the per-lane shared byte addresses (shape ``(..., 32)``, same leading
    batch shape, one warp per batch entry).  Returns uint32 of shape ``(..., 32, num)``.
    Raises :class:`AlignmentError` for a used row address that is not 16-byte aligned
    and :class:`ArgumentError` for one outside shared memory.
    """
    if num not in (1, 2, 4):
        raise ArgumentError(f"ldmatrix .num must be .x1, .x2 or .x4, got {num!r}",
                            hint="pass num=1, 2 or 4")
    smem = np.asarray(smem)
    if smem.dtype != np.uint8:
        raise ArgumentError(f"shared memory must be a uint8 byte array, got {smem.dtype}",
                            hint="view the buffer with .view(np.uint8)")
    addrs = np.asarray(addrs, np.int64)
    if addrs.shape[-1:] != (32,) or addrs.shape[:-1] != smem.shape[:-1]:
        raise ShapeError(f"ldmatrix needs 32 lane addresses per warp matching shared memory's "
                         f"batch shape {smem.shape[:-1]}, got {addrs.shape}")
    used = addrs[..., : 8 * num]  # only threads 0..8*num-1 supply row addresses
    bad = used % _ROW_BYTES != 0
    if np.any(bad):
        where = tuple(np.argwhere(bad)[0])
        raise AlignmentError(
            f"ldmatrix row address {int(used[where])} of lane {int(where[-1])} is not "
            "16-byte aligned (PTX ISA sec. 9.7.14.5.15: each row address must be aligned to "
            "16 bytes)", hint="align each 8x8 matrix row of 16 bytes to a 16-byte boundary")
    size = smem.shape[-1]
    if np.any(used < 0) or np.any(used + _ROW_BYTES > size):
        raise ArgumentError(f"ldmatrix row address outside shared memory of {size} bytes",
                            hint="check the per-lane row addresses")
    # rows[..., k, r, b]: byte b of row r of matrix k.
    byte_idx = used.reshape(*used.shape[:-1], num, 8, 1) + np.arange(_ROW_BYTES)
    flat = byte_idx.reshape(*byte_idx.shape[:-3], -1)
    rows = np.take_along_axis(smem, flat, axis=-1).reshape(byte_idx.shape)
    mats = rows.copy().view("<u2")  # (..., num, 8, 8) little-endian b16 elements
    if trans:
        mats = np.swapaxes(mats, -1, -2)
    lane = np.arange(32)
    lo = mats[..., lane >> 2, 2 * (lane & 3)].astype(np.uint32)
    hi = mats[..., lane >> 2, 2 * (lane & 3) + 1].astype(np.uint32)
    regs = lo | (hi << np.uint32(16))  # (..., num, 32)
    return np.swapaxes(regs, -1, -2).astype(np.uint32)
