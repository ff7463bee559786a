"""Where a CTA's shared memory lies among shared addresses, for the Target IR
interpreter's :class:`~tessera.interp.target.memory.state.SharedMemory`: each CTA's
``size`` bytes are shared addresses ``base`` .. ``base + size - 1``. On the GPU ``base``
is :data:`~tessera.arch.limits.SHARED_BASE` (1024): the kilobyte below it is reserved
for system use (CUDA C++ Programming Guide, "Compute Capabilities"), and an access there
faults as out of bounds, as one past the CTA's last byte does. :meth:`SharedWindow.index`
turns addresses into flat indices into the per-CTA arrays (CTA ``c``'s byte ``i`` at
``c * size + i``: shared address ``base + i``); messages name addresses, not indices.
In a launch with thread block clusters, whose CTAs are numbered cluster by cluster,
``.shared::cluster`` and generic accesses may reach the memory of another CTA of the
thread's cluster through its window of cluster addresses (:mod:`tessera.arch.cluster`);
the race records of such accesses are :mod:`tessera.interp.target.cluster.races`.
"""

from __future__ import annotations

import numpy as np

from tessera.arch.cluster import SLOT_SHIFT, split_address
from tessera.arch.limits import SHARED_BASE
from tessera.interp.target.memory.global_memory import Fail
from tessera.interp.target.memory.global_memory import check_aligned as _check_aligned


class SharedWindow:
    """The shared addresses of ``ncta`` CTAs' arrays of ``size`` bytes from ``base``."""

    ncta: int
    size: int
    base: int
    #: the CTAs of a cluster (consecutive CTA indices); 1: the launch has no clusters
    cluster_size: int = 1

    def index(self, cta: np.ndarray, addr: np.ndarray, nbytes: int, fail: Fail,
              align: int | None = None, cluster: bool = False) -> np.ndarray:
        """Flat byte indices (M, nbytes) of shared accesses at the shared addresses
        ``addr`` of CTAs ``cta``; faults outside (:meth:`outside`) or misaligned.
        ``cluster``: ``addr`` are cluster addresses, which may name the memory of
        another CTA of the cluster."""
        if len(addr) == 1:  # one thread (serial code): its own memory, in bounds, aligned
            x, step = int(addr[0]), align or nbytes
            if self.base <= x <= self.base + self.size - nbytes and x % step == 0:
                start = int(cta[0]) * self.size + x - self.base
                return np.arange(start, start + nbytes, dtype=np.int64)[None, :]
        a = addr.astype(np.int64)
        remote = a >= 1 << SLOT_SHIFT
        if remote.any():
            cta, a = self._remote(cta, a, remote, fail, cluster)
        bad = (a < self.base) | (a + nbytes > self.base + self.size)
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            fail(i, "out of bounds", f"shared access of {nbytes} bytes at shared address "
                 f"{int(a[i])}; {self.outside(int(a[i]))}")
        _check_aligned(a, align or nbytes, fail,
                       lambda x: f"shared access of {nbytes} bytes at shared address {x}")
        return (cta * self.size + (a - self.base))[:, None] + np.arange(nbytes, dtype=np.int64)

    def _remote(self, cta: np.ndarray, a: np.ndarray, remote: np.ndarray, fail: Fail,
                cluster: bool) -> tuple[np.ndarray, np.ndarray]:
        """The CTAs and shared addresses that the cluster addresses ``a`` name."""
        rank, low = split_address(a, np.zeros_like(a))
        i = int(np.flatnonzero(remote)[0])
        if not cluster:
            fail(i, "cluster address", f"an access of the CTA's own shared memory at "
                 f"{int(a[i]):#x}, a cluster address of CTA rank {int(rank[i])}'s memory: "
                 "only .shared::cluster and generic loads, stores and atomics reach "
                 "another CTA's")
        bad = remote & (rank >= self.cluster_size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            fail(i, "out of bounds", f"shared::cluster address {int(a[i]):#x} lies in the "
                 f"window of CTA rank {int(rank[i])}, and the cluster has "
                 f"{self.cluster_size} CTA{'s' if self.cluster_size > 1 else ''}")
        target = np.where(remote, cta - cta % self.cluster_size + rank, cta)
        return target, np.where(remote, low, a)

    def other(self, thread: int, me: int) -> str:
        """How a race report names the other thread (global ids), and the barrier that
        would have ordered the two: ``bar.sync`` in a CTA, the cluster barrier across
        the CTAs of a cluster."""
        n: int = self.nthreads
        if thread // n == me // n:
            return f"thread {thread % n} without a bar.sync between"
        return (f"thread {thread % n} of the cluster's CTA rank "
                f"{thread // n % self.cluster_size} without a cluster barrier "
                "(barrier.cluster.arrive and wait) between")

    def _where(self, flat: np.integer | int) -> str:
        rank = int(flat) // self.size % self.cluster_size if self.size else 0
        where = f" of CTA rank {rank}" if self.cluster_size > 1 else ""
        return f"shared address {self.base + int(flat) % self.size}{where}"

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



__all__ = ["SHARED_BASE", "SharedWindow"]
