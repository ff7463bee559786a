"""What kernels of a ``tessera run-cuda`` program reach, by address: its device and
pinned allocations (anonymous ``mmap`` memory, page-aligned, placed in every launch at
its own address) and the pages of host memory it registers.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

import numpy as np


def host_view(address: int, shape: tuple[int, ...], dtype: Any = np.uint8,
              strides: tuple[int, ...] | None = None) -> np.ndarray:
    """The process's own memory at ``address`` as a NumPy array (no copy): ``shape``
    elements of ``dtype``, in C order or at byte ``strides``."""
    dt = np.dtype(dtype)
    if strides is None:
        strides = tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) * dt.itemsize
                        for k in range(len(shape)))
    span = dt.itemsize + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    buf = (ctypes.c_uint8 * max(span, 1)).from_address(address)
    return np.ndarray(shape, dt, buf, 0, strides)


class DeviceMemory:
    """What kernels reach, by address: the program's device (and pinned host)
    allocations, and the pages of host memory it registered."""

    def __init__(self) -> None:
        self.arrays: dict[int, np.ndarray] = {}
        self._registered: dict[int, int] = {}  # address -> bytes, as the program gave them
        self._pages: list[int] = []  # the bases of the page ranges placed for those

    def register(self, address: int, nbytes: int, add: int) -> int:
        """Place host memory the program registers (``add``) or unregisters in every
        launch: the whole pages it lies on, overlapping ranges merged. 0 (done)."""
        if add:
            self._registered[address] = nbytes
        else:
            self._registered.pop(address, None)
        for base in self._pages:
            del self.arrays[base]
        page = mmap.PAGESIZE
        spans = sorted((a // page * page, -(-(a + n) // page) * page)
                       for a, n in self._registered.items())
        merged: list[list[int]] = []
        for lo, hi in spans:
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self._pages = [lo for lo, _ in merged]
        for lo, hi in merged:
            self.arrays[lo] = host_view(lo, (hi - lo,))
        return 0

    def alloc(self, nbytes: int) -> int:
        """A zeroed allocation of ``nbytes`` (at least one page); its address."""
        region = mmap.mmap(-1, max(int(nbytes), 1))
        array = np.frombuffer(region, np.uint8)
        address = array.ctypes.data
        self.arrays[address] = array
        return address

    def free(self, address: int) -> int:
        """0, or 1 when ``address`` is no allocation (cudaFree's invalid value)."""
        return 0 if self.arrays.pop(address, None) is not None else 1


__all__ = ["DeviceMemory", "host_view"]
