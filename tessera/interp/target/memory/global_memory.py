"""Simulated global memory of the Target IR interpreter: each array argument lives at a
fake, 256-byte aligned address (``GLOBAL_BASE + k * GLOBAL_STRIDE``, or one the caller
chose, as a replayed CUDA program's allocations keep theirs); an address resolves to
(buffer, byte offset) with one ``np.searchsorted`` for all threads. Accesses must lie
inside one buffer and be aligned to their size (PTX ISA sec. 5.4.3 "Alignment":
naturally aligned accesses)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

GLOBAL_BASE = 0x10000000
GLOBAL_STRIDE = 0x10000000
Fail = Callable[[int, str, str], None]


def check_aligned(a: np.ndarray, step: int, fail: Fail, access: Callable[[int], str]) -> None:
    """Fault the first address of ``a`` that is not a multiple of ``step`` bytes;
    ``access`` describes the access at an address."""
    mis = a % step != 0
    if np.any(mis):
        i = int(np.flatnonzero(mis)[0])
        fail(i, "misaligned address", f"{access(int(a[i]))} is not {step}-byte aligned")


class GlobalMemory:
    """Byte views of the launch's arrays at fake global addresses."""

    def __init__(self) -> None:
        self.bases: list[int] = []
        self.bytes: list[np.ndarray] = []
        self.names: list[str] = []
        #: buffers given back (device heap blocks that ``free`` released): an access
        #: to one faults as a use after free
        self.released: set[int] = set()
        #: bases, sizes, bases ascending, the order that sorts them (None: added in
        #: ascending order already) and which are live, made on the first access after a
        #: change
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None,
                           np.ndarray] | None = None

    def add(self, array: np.ndarray, name: str, address: int | None = None) -> int:
        """Place a C-contiguous array in memory, at ``address`` or the next free slot;
        return its address. Buffers keep their index in the order they were added."""
        if array.nbytes >= GLOBAL_STRIDE:
            raise ValueError(f"{name} is too large for the simulated address space")
        if address is None:
            address = GLOBAL_BASE + GLOBAL_STRIDE * len(self.bases)
            while self.overlap(address, array.nbytes) is not None:
                address += GLOBAL_STRIDE
        self.bases.append(address)
        self.bytes.append(array.reshape(-1).view(np.uint8))
        self.names.append(name)
        self._index = None
        return address

    def overlap(self, address: int, nbytes: int) -> str | None:
        """The name of a placed buffer that bytes ``[address, address + nbytes)`` would
        overlap, or None."""
        for base, buf, name in zip(self.bases, self.bytes, self.names, strict=True):
            if address < base + max(buf.size, 1) and base < address + max(nbytes, 1):
                return name
        return None

    def first_overlap(self) -> tuple[str, str, int] | None:
        """(two placed buffers that share bytes, the later one's size), or None: one sort
        of all of them, where checking each against the others would be quadratic."""
        if len(self.bases) < 2:
            return None
        bases = np.asarray(self.bases, np.int64)
        sizes = np.maximum(np.asarray([b.size for b in self.bytes], np.int64), 1)
        order = np.argsort(bases, kind="stable")
        ends = bases[order] + sizes[order]
        clash = np.flatnonzero(ends[:-1] > bases[order][1:])
        if not len(clash):
            return None
        k, j = int(order[clash[0]]), int(order[clash[0] + 1])
        return self.names[k], self.names[j], int(self.bytes[j].size)

    def replace(self, address: int, array: np.ndarray, name: str) -> None:
        """Put ``array`` in place of the buffer at ``address`` (a heap block reused)."""
        k = self.bases.index(address)
        self.bytes[k], self.names[k] = array.reshape(-1).view(np.uint8), name
        self.released.discard(k)
        self._index = None

    def release(self, address: int) -> None:
        """Give back the buffer at ``address``: a later access to it faults."""
        self.released.add(self.bases.index(address))
        self._index = None

    def _indexed(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None,
                                np.ndarray]:
        bases = np.asarray(self.bases, np.int64)
        sizes = np.asarray([b.size for b in self.bytes], np.int64)
        ascending = bool(np.all(bases[1:] > bases[:-1]))
        order = None if ascending else np.argsort(bases, kind="stable")
        live = np.ones(len(bases), bool)
        live[list(self.released)] = False
        self._index = bases, sizes, bases if order is None else bases[order], order, live
        return self._index

    def resolve(self, addr: np.ndarray, nbytes: int, fail: Fail, what: str = "access",
                align: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(buffer index, byte offset) of each address; faults outside or misaligned
        (to ``align`` bytes, by default the access size)."""
        a = addr.astype(np.int64)
        if not self.bases:
            fail(0, "out of bounds", f"global {what} at address {int(a[0]):#x}: the launch "
                 "has no global buffers")
        bases, sizes, starts, order, live = self._index or self._indexed()
        j = np.searchsorted(starts, a, side="right") - 1
        k = j if order is None else np.where(j < 0, -1, order[np.maximum(j, 0)])
        safe = np.maximum(k, 0)
        off = a - bases[safe]
        bad = (k < 0) | (off + nbytes > sizes[safe]) | ~live[safe]
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            name = self.names[safe[i]]
            if k[i] >= 0 and not live[safe[i]] and off[i] + nbytes <= sizes[safe[i]]:
                fail(i, "use after free", f"global {what} of {nbytes} bytes at address "
                     f"{int(a[i]):#x}, inside {name}, which free gave back")
            where = (f"{int(off[i]) + nbytes - int(sizes[safe[i]])} bytes past the end of "
                     f"{name} ({int(sizes[safe[i]])} bytes)"
                     if k[i] >= 0 else "below every buffer")
            fail(i, "out of bounds", f"global {what} of {nbytes} bytes at address "
                 f"{int(a[i]):#x}, {where}")
        check_aligned(a, align or nbytes, fail,
                       lambda x: f"global {what} of {nbytes} bytes at address {x:#x}")
        return k, off

    def read(self, addr: np.ndarray, nbytes: int, fail: Fail,
             align: int | None = None) -> np.ndarray:
        """The bytes (M, nbytes) at each address."""
        k, off = self.resolve(addr, nbytes, fail, "read", align)
        if (align or nbytes) % nbytes == 0 and nbytes in (2, 4, 8, 16):
            # aligned words (checked): one element of a word view each, not a byte index
            word = np.dtype((np.void, nbytes))
            out = np.empty((addr.size, nbytes), np.uint8)
            for b in np.unique(k).tolist() if len(self.bytes) > 1 else [0]:
                buf = self.bytes[b]
                whole = buf[: buf.size - buf.size % nbytes].view(word)
                if len(self.bytes) == 1:
                    return np.take(whole, off // nbytes).view(np.uint8).reshape(-1, nbytes)
                sel = k == b
                out[sel] = np.take(whole, off[sel] // nbytes).view(np.uint8).reshape(
                    -1, nbytes)
            return out
        out = np.empty((addr.size, nbytes), np.uint8)
        span = np.arange(nbytes, dtype=np.int64)
        for b in np.unique(k):
            sel = k == b
            out[sel] = self.bytes[b][off[sel, None] + span]
        return out

    def write(self, addr: np.ndarray, data: np.ndarray, fail: Fail) -> None:
        """Store bytes ``data`` (M, nbytes); a later thread wins on overlap."""
        nbytes = data.shape[1]
        k, off = self.resolve(addr, nbytes, fail, "write")
        span = np.arange(nbytes, dtype=np.int64)
        for b in np.unique(k):
            sel = k == b
            self.bytes[b][off[sel, None] + span] = data[sel]


__all__ = ["GLOBAL_BASE", "GLOBAL_STRIDE", "Fail", "GlobalMemory", "check_aligned"]
