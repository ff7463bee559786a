"""Arguments that are not a whole array or a scalar: a pointer into an array, and a C
struct passed by value.

CUDA passes a struct argument as its bytes: nvcc declares it ``.param .align A .b8
name[N]`` and reads its fields at byte offsets. :func:`struct` lays fields out as a C
compiler does (each at the next multiple of its alignment, the whole padded to the
largest), so that ``ts.ptx.struct(x, np.int32(n))`` is ``struct { float *x; int n; }``.
A pointer field names an array (or :func:`pointer` into one) and becomes the address
the launch gives that array, so one launch's struct and plain pointer arguments agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import ArgumentError

#: places an array in the launch's global memory (once) and gives its address
Placer = Callable[[np.ndarray], int]


@dataclass(frozen=True, eq=False)
class DevicePointer:
    """The global address of byte ``offset`` of ``array`` (what ``ptr + k`` is in CUDA
    when ``ptr`` is the array's device pointer)."""

    array: np.ndarray
    offset: int = 0

    def address(self, place: Placer) -> int:
        """The address in a launch whose arrays ``place`` lays out."""
        return place(self.array) + self.offset


def _root(a: np.ndarray) -> tuple[np.ndarray, int]:
    """(the C-contiguous array that owns ``a``'s memory, ``a``'s byte offset in it), or
    (``a``, 0) when ``a`` is not a contiguous view into one."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    if root is a or not (a.flags.c_contiguous and root.flags.c_contiguous):
        return a, 0
    start = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    if not 0 <= start <= root.nbytes - a.nbytes:
        return a, 0
    return root, start


def pointer(array: np.ndarray, offset: int = 0) -> DevicePointer:
    """A pointer to byte ``offset`` of ``array``. A contiguous view (``temp[64:]``)
    points into the array it views, so that one allocation can be carved into parts as
    CUDA code does with its temporary storage (accesses are bounds-checked against the
    whole array)."""
    if not isinstance(array, np.ndarray) or array.ndim == 0:
        raise ArgumentError(f"ts.ptx.pointer needs a NumPy array, not {type(array).__name__}")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise ArgumentError(f"a pointer's offset is a number of bytes, not {offset!r}")
    root, start = _root(array)
    if not 0 <= start + int(offset) <= root.nbytes:
        raise ArgumentError(f"offset {offset} lies outside the array's {array.nbytes} bytes",
                            hint="give a byte offset from 0 to the array's nbytes")
    return DevicePointer(root, start + int(offset))


@dataclass(frozen=True, eq=False)
class Struct:
    """A C struct's fields with their byte offsets; ``size`` and ``align`` as C has
    them."""

    fields: tuple[tuple[int, Any], ...]
    size: int
    align: int

    def pack(self, place: Placer) -> np.ndarray:
        """The struct's bytes, pointers resolved by ``place``; padding is zero."""
        out = np.zeros(self.size, np.uint8)
        for at, f in self.fields:
            raw = _field_bytes(f, place)
            out[at:at + raw.size] = raw
        return out


def _field_bytes(f: Any, place: Placer) -> np.ndarray:
    if isinstance(f, Struct):
        return f.pack(place)
    if isinstance(f, (np.ndarray, DevicePointer)):
        ptr = f if isinstance(f, DevicePointer) else DevicePointer(f)
        return np.frombuffer(np.uint64(ptr.address(place)).tobytes(), np.uint8)
    if isinstance(f, (bytes, bytearray)):
        return np.frombuffer(bytes(f), np.uint8)
    return np.frombuffer(f.tobytes(), np.uint8)


def _layout(f: Any, k: int) -> tuple[int, int]:
    """(size, alignment) of field ``k``."""
    if isinstance(f, Struct):
        return f.size, f.align
    if isinstance(f, DevicePointer) or (isinstance(f, np.ndarray) and f.ndim > 0):
        return 8, 8
    if isinstance(f, (bytes, bytearray)):
        return len(f), 1
    if isinstance(f, np.generic) and f.dtype.kind in "biuf":
        return f.dtype.itemsize, f.dtype.itemsize
    raise ArgumentError(
        f"struct field {k}: {type(f).__name__} has no C layout",
        hint="give NumPy scalars (np.int32(n), np.float32(x): their size is the field's), "
        "arrays or ts.ptx.pointer(...) for pointer fields, ts.ptx.struct(...) for a nested "
        "struct, or bytes for raw padding")


def struct(*fields: Any, align: int | None = None) -> Struct:
    """A struct passed by value, its fields in declaration order: NumPy scalars, arrays
    or :func:`pointer` (8-byte pointers), nested structs and ``bytes``. ``align``
    raises the struct's alignment, as ``alignas`` does."""
    placed: list[tuple[int, Any]] = []
    end, most = 0, 1
    for k, f in enumerate(fields):
        size, al = _layout(f, k)
        at = -(-end // al) * al
        placed.append((at, f))
        end, most = at + size, max(most, al)
    if align is not None:
        if align < 1 or align & (align - 1):
            raise ArgumentError(f"struct alignment {align} is not a power of two")
        most = max(most, align)
    # C++ gives an empty struct (a stateless functor) one byte
    return Struct(tuple(placed), max(-(-end // most) * most, 1), most)


__all__ = ["DevicePointer", "Placer", "Struct", "pointer", "struct"]
