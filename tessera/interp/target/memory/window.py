"""Where a CTA's shared memory lies among shared addresses, for the Target IR
interpreter's :class:`~tessera.interp.target.memory.state.SharedMemory`: each CTA's
``size`` bytes are shared addresses ``base`` .. ``base + size - 1``. On the GPU ``base``
is :data:`~tessera.arch.limits.SHARED_BASE` (1024): the kilobyte below it is reserved
for system use (CUDA C++ Programming Guide, "Compute Capabilities"), and an access there
faults as out of bounds, as one past the CTA's last byte does. :meth:`SharedWindow.index`
turns addresses into flat indices into the per-CTA arrays (CTA ``c``'s byte ``i`` at
``c * size + i``: shared address ``base + i``); messages name addresses, not indices.
"""

from __future__ import annotations

import numpy as np

from tessera.arch.limits import SHARED_BASE
from tessera.interp.target.memory.global_memory import Fail
from tessera.interp.target.memory.global_memory import check_aligned as _check_aligned


class SharedWindow:
    """The shared addresses of ``ncta`` CTAs' arrays of ``size`` bytes from ``base``."""

    ncta: int
    size: int
    base: int

    def index(self, cta: np.ndarray, addr: np.ndarray, nbytes: int, fail: Fail,
              align: int | None = None) -> np.ndarray:
        """Flat byte indices (M, nbytes) of shared accesses at the shared addresses
        ``addr``; faults outside (:meth:`outside`) or misaligned."""
        a = addr.astype(np.int64)
        bad = (a < self.base) | (a + nbytes > self.base + self.size)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            fail(i, "out of bounds", f"shared access of {nbytes} bytes at shared address "
                 f"{int(a[i])}; {self.outside(int(a[i]))}")
        _check_aligned(a, align or nbytes, fail,
                       lambda x: f"shared access of {nbytes} bytes at shared address {x}")
        return (cta * self.size + (a - self.base))[:, None] + np.arange(nbytes, dtype=np.int64)

    def outside(self, addr: int) -> str:
        """Why an access at shared address ``addr`` (in the reserved kilobyte, or one
        that leaves the CTA's bytes) faults."""
        return (f"shared addresses 0 to {self.base - 1} are reserved for system use and the "
                f"CTA's shared memory starts at {self.base}" if addr < self.base else
                f"the CTA's {self.size} bytes of shared memory are shared addresses "
                f"{self.base} to {self.base + self.size - 1}" if self.size else
                "the CTA has no shared memory")

    def slots(self, flat: np.ndarray) -> np.ndarray:
        """The 8-byte slots (``SharedMemory.init_by``) of the flat byte indices ``flat``."""
        return flat // self.size * -(-self.size // 8) + flat % self.size // 8

    def _where(self, flat: np.integer | int) -> str:
        return f"shared address {self.base + int(flat) % self.size}"


__all__ = ["SHARED_BASE", "SharedWindow"]
