"""What kernels of a ``tessera run-cuda`` program reach, by address: its device and
pinned allocations (anonymous ``mmap`` memory, page-aligned, placed in every launch at
its own address), the pages of host memory it registers, and the storage of its
``__device__`` variables, apart from their host shadows as on a GPU.
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


Shadows = dict[tuple[int, str], tuple[np.ndarray, bytes]]


def device_symbols(lib: Any, memory: DeviceMemory
                   ) -> tuple[dict[tuple[int, str], np.ndarray], Shadows]:
    """Each variable the program registered (``lib``'s table), by (fat binary, PTX name):
    its device storage, a new allocation of ``memory`` (a ``__managed__`` variable's is
    its host memory); and each one's host shadow with the shadow's bytes now."""
    symbols, shadows = {}, {}
    get = lib.tessera_symbol
    get.restype = ctypes.c_char_p
    host, size, module, managed = (ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_int(),
                                   ctypes.c_int())
    for k in range(lib.tessera_symbol_count()):
        name = get(k, ctypes.byref(host), ctypes.byref(size), ctypes.byref(module),
                   ctypes.byref(managed)).decode()
        shadow = host_view(host.value, (size.value,))
        if managed.value:
            symbols[module.value, name] = shadow
            continue
        shadows[module.value, name] = (shadow, shadow.tobytes())
        storage = variable_storage(lib, memory, size.value)
        lib.tessera_set_symbol_device(k, ctypes.c_void_p(storage.ctypes.data))
        symbols[module.value, name] = storage
    return symbols, shadows


def variable_storage(lib: Any, memory: DeviceMemory, nbytes: int) -> np.ndarray:
    """Device storage of ``nbytes`` for a variable: an allocation of ``memory``, which
    every launch places, entered in the runtime's (``lib``'s) table of allocations."""
    address = memory.alloc(nbytes)
    lib.tessera_add_allocation(ctypes.c_void_p(address), ctypes.c_size_t(nbytes))
    return memory.arrays[address][:nbytes]


def written_shadows(shadows: Shadows) -> list[str]:
    """The variables whose host shadows host code wrote since they were last reported
    (each is reported once): a GPU's kernels never see those writes."""
    written = [key for key, (shadow, was) in shadows.items() if shadow.tobytes() != was]
    for key in written:
        del shadows[key]
    return [name for _, name in written]


__all__ = ["DeviceMemory", "device_symbols", "host_view", "variable_storage",
           "written_shadows"]
