"""The device heap that ``malloc`` and ``free`` in a kernel use (CUDA C++ Programming
Guide, "Dynamic Global Memory Allocation and Operations"), and the step rules of
``ptx.malloc`` and ``ptx.free`` (:mod:`tessera.ir.dialects.target.printf`).

The heap is ``cudaLimitMallocHeapSize`` bytes (8 MiB unless the program sets more),
handed out in 16-byte aligned blocks in thread order, so that the same launch gives the
same addresses in every run, with 16 unused bytes after each. It outlives a launch, as a
GPU's does: a block one kernel allocates, a later kernel may use and free. Each block is
a buffer of global memory of its own, so an access past its end is out of bounds; a
block ``free`` gave back stays placed and an access to it is a use after free. ``free``
of an address that is no block, or of a block given back already, is a fault. A request
the heap cannot hold returns NULL, as on a GPU; a block given back is reused for a
request it can hold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.target.memory.global_memory import GlobalMemory
from tessera.interp.target.state import Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target.printf import DeviceFree, DeviceMalloc

#: cudaLimitMallocHeapSize's default
HEAP_BYTES = 8 << 20
#: where a launch places a heap of its own (far above the buffers it places)
HEAP_BASE = 0x100_0000_0000
_ALIGN = 16
#: bytes left unused after each block, so that a write just past one is out of bounds
#: rather than in the next block (as Memcheck's red zones; CUDA's heap keeps headers
#: between blocks too)
_RED_ZONE = 16


def _room(size: int) -> int:
    """The bytes a block of ``size`` takes: rounded up to the alignment, a red zone after."""
    return -(-size // _ALIGN) * _ALIGN + _RED_ZONE


class DeviceHeap:
    """The blocks of a device heap over ``arena`` (zeros of ``size`` bytes when not
    given) at device address ``base``."""

    def __init__(self, size: int = HEAP_BYTES, base: int = HEAP_BASE,
                 arena: np.ndarray | None = None) -> None:
        self.size, self.base = size, base
        self._arena = arena
        self.top = 0  # bytes handed out from the start, given back or not
        self.blocks: dict[int, int] = {}  # address -> size, live or given back
        self.origin: dict[int, Any] = {}  # address -> the malloc's location (a Loc)
        self.given_back: dict[int, int] = {}  # address -> room, for reuse

    @property
    def arena(self) -> np.ndarray:
        """The heap's bytes (made on first use)."""
        if self._arena is None:
            self._arena = np.zeros(self.size, np.uint8)
        return self._arena

    def _view(self, address: int, size: int) -> np.ndarray:
        at = address - self.base
        return self.arena[at:at + size]

    @staticmethod
    def _name(size: int) -> str:
        return f"the {size}-byte block from device malloc"

    def place(self, glob: GlobalMemory) -> None:
        """Every block in a launch's global memory; those given back released."""
        for address, size in self.blocks.items():
            glob.add(self._view(address, size), self._name(size), address)
            if address in self.given_back:
                glob.release(address)

    def live(self) -> list[tuple[int, int, Any]]:
        """(address, size, where malloc gave it) of each block not given back."""
        return [(a, s, self.origin.get(a)) for a, s in self.blocks.items()
                if a not in self.given_back]

    def allocate(self, size: int, glob: GlobalMemory, where: Any = None) -> int:
        """A block of ``size`` bytes placed in ``glob`` (``where``: the malloc's
        location): its address, or 0 for none."""
        if size <= 0:
            return 0
        room = _room(size)
        reuse = next((a for a, r in self.given_back.items() if r >= room), None)
        if reuse is not None:
            del self.given_back[reuse]
            self.blocks[reuse], self.origin[reuse] = size, where
            glob.replace(reuse, self._view(reuse, size), self._name(size))
            return reuse
        if self.top + room > self.size:
            return 0
        address = self.base + self.top
        self.top += room
        self.blocks[address], self.origin[address] = size, where
        glob.add(self._view(address, size), self._name(size), address)
        return address

    def free(self, address: int, glob: GlobalMemory) -> str | None:
        """Give back the block at ``address``; why that is wrong, or None."""
        if address not in self.blocks:
            return f"free({address:#x}): no block that device malloc gave starts there"
        if address in self.given_back:
            return f"free({address:#x}): the block was given back already (a double free)"
        self.given_back[address] = _room(self.blocks[address])
        glob.release(address)
        return None


def _heap(m: Any) -> DeviceHeap:
    """The launch's heap, or a new one of its own."""
    if getattr(m, "heap", None) is None:
        m.heap = DeviceHeap()
    return m.heap


@step_rule(DeviceMalloc)
def _malloc(c: TargetCompiler, instr: Instr) -> Step:
    size, out = c.slot(instr.operands[0]), c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        heap = _heap(fr.m)
        blocks = np.zeros(len(fr.mask), np.uint64)
        sizes = fr.regs[size]
        for t in np.flatnonzero(fr.mask).tolist():  # thread order: the same every run
            blocks[t] = heap.allocate(int(sizes[t]), fr.m.glob, instr.loc)
        fr.regs[out] = blocks
    return step


@step_rule(DeviceFree)
def _free(c: TargetCompiler, instr: Instr) -> Step:
    pointer = c.slot(instr.operands[0])

    def step(fr: TargetFrame) -> None:
        m: Any = fr.m
        heap = _heap(m)
        for t in np.flatnonzero(fr.mask).tolist():
            address = int(fr.regs[pointer][t])
            if address and (why := heap.free(address, m.glob)) is not None:
                raise m.fault(instr, "invalid free", why, t, hint="free each block that "
                              "malloc returned once")
    return step


__all__ = ["HEAP_BASE", "HEAP_BYTES", "DeviceHeap"]
