"""Thread block clusters (compute capability 9.0): which CTAs form a cluster, the
special registers that name a CTA's place in it, and the addresses of distributed
shared memory.

A launch with cluster dimensions ``(cx, cy, cz)`` groups the grid's CTAs into
clusters of ``cx * cy * cz`` CTAs; each grid dimension must be a multiple of the
cluster's (CUDA C++ Programming Guide, "Thread Block Clusters"). A cluster of at most
8 CTAs is portable; up to 16 needs the kernel's non-portable opt-in
(``cudaFuncAttributeNonPortableClusterSizeAllowed``). A CTA's rank in its cluster,
``%cluster_ctarank``, counts x fastest: ``x + cx * (y + cy * z)`` of its
``%cluster_ctaid`` (PTX ISA, "Special Registers": ``%cluster_ctaid``,
``%cluster_ctarank``, ``%clusterid``, ``%nclusterid``). A launch without clusters
runs each CTA as a cluster of one (rank 0, ``%is_explicit_cluster`` false).

Distributed shared memory: every CTA of a cluster may read and write the shared memory
of the others through ``.shared::cluster`` addresses, which ``mapa`` makes from the
CTA's own shared addresses (PTX ISA, "Data Movement and Conversion Instructions: mapa";
the ``.shared::cta`` window lies within the ``.shared::cluster`` window, so a CTA's own
shared addresses are cluster addresses of its own memory). The bits of a remote address
are the hardware's own business; here the address of byte ``a`` of rank ``r``'s memory
is ``(r + 1) << SLOT_SHIFT | a`` for a rank other than the CTA's own, which keeps each
rank's window apart, below 2**32, and inside the 64 MiB of the generic window tessera
reserves for shared memory.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from tessera.arch.limits import arch_number

#: the special registers of a CTA's place in its cluster (sm_90 on; PTX ISA 7.8): u32,
#: but ``%is_explicit_cluster`` (whether the launch named a cluster shape) a predicate
CLUSTER_REGS = (*(f"{r}.{c}" for r in ("clusterid", "nclusterid", "cluster_ctaid",
                                        "cluster_nctaid") for c in "xyz"),
                "cluster_ctarank", "cluster_nctarank", "is_explicit_cluster")
#: the most CTAs a portable cluster has, and the most with the non-portable opt-in
PORTABLE_CLUSTER = 8
MAX_CLUSTER = 16
#: a remote rank's shared memory lies at ``(rank + 1) << SLOT_SHIFT`` (2 MiB windows,
#: more than the 228 KiB of shared memory an SM has)
SLOT_SHIFT = 21
#: the shared addresses that may be cluster addresses (rank ``MAX_CLUSTER - 1``'s end)
CLUSTER_SPAN = (MAX_CLUSTER + 1) << SLOT_SHIFT


def cluster_problem(grid: tuple[int, int, int], cluster: tuple[int, int, int],
                    non_portable: bool = False) -> str | None:
    """Why a launch of ``grid`` in clusters of ``cluster`` CTAs fails, or None."""
    if any(c < 1 for c in cluster):
        return f"cluster dimensions {cluster} must be positive"
    odd = [k for k in range(3) if grid[k] % cluster[k]]
    if odd:
        k = odd[0]
        return (f"grid dimension {'xyz'[k]} ({grid[k]}) is not a multiple of the cluster's "
                f"({cluster[k]})")
    most = MAX_CLUSTER if non_portable else PORTABLE_CLUSTER
    if prod(cluster) > most:
        extra = ("" if non_portable else "; up to 16 needs the kernel's "
                 "cudaFuncAttributeNonPortableClusterSizeAllowed")
        return f"a cluster of {prod(cluster)} CTAs is more than {most}{extra}"
    return None


def launch_shape(target: str, directives: dict[str, object], grid: tuple[int, int, int],
                 cluster: tuple[int, int, int] | None
                 ) -> tuple[tuple[int, int, int] | None, str | None]:
    """The cluster shape of a launch over ``grid`` of a kernel for ``target`` with the
    performance directives ``directives`` (PTX ISA sec. 11.4: ``.reqnctapercluster``
    fixes the shape, ``.explicitcluster`` needs one, ``.maxclusterrank`` bounds its CTAs)
    asking for clusters of ``cluster`` (None: none): (shape or None, why a GPU refuses
    it or None)."""
    req: Any = directives.get("reqnctapercluster")
    want = (*req, 1, 1)[:3] if req else None
    if cluster is None and want is None:
        if "explicitcluster" in directives:
            return None, ("the kernel is marked .explicitcluster: launch it with cluster "
                          "dimensions")
        return None, None
    if arch_number(target) < 90:
        return None, f"thread block clusters need sm_90 or later; the kernel is for {target}"
    if cluster is not None and want is not None and tuple(cluster) != tuple(want):
        return None, (f"the kernel's .reqnctapercluster asks for clusters of {want}, not "
                      f"{tuple(cluster)}")
    dims = tuple(want if want is not None else cluster)  # type: ignore[arg-type]
    most: Any = directives.get("maxclusterrank")
    if most and prod(dims) > most[0]:
        return None, (f"a cluster of {prod(dims)} CTAs: the kernel's .maxclusterrank "
                      f"allows {most[0]}")
    if problem := cluster_problem(grid, dims):  # type: ignore[arg-type]
        return None, f"a grid of {grid} in clusters of {dims}: {problem}"
    return dims, None  # type: ignore[return-value]


def cluster_order(grid: tuple[int, int, int], cluster: tuple[int, int, int]) -> np.ndarray:
    """The ``(x, y, z)`` CTA ids (ncta, 3) in cluster-major order: the CTAs of cluster 0
    by rank, then those of cluster 1 (clusters counted x fastest over the grid of
    clusters), so that each cluster's CTAs are consecutive."""
    n_clusters = [g // c for g, c in zip(grid, cluster)]
    size = prod(cluster)
    k = np.arange(prod(grid), dtype=np.int64)
    q, r = k // size, k % size
    qx, qy, qz = q % n_clusters[0], q // n_clusters[0] % n_clusters[1], \
        q // (n_clusters[0] * n_clusters[1])
    cx, cy = cluster[0], cluster[1]
    rx, ry, rz = r % cx, r // cx % cy, r // (cx * cy)
    return np.stack([qx * cx + rx, qy * cy + ry, qz * cluster[2] + rz], axis=1)


def remote_address(addr: np.ndarray, rank: np.ndarray, own: np.ndarray) -> np.ndarray:
    """``mapa``: the cluster address of shared address ``addr`` (the CTA's own) in the
    memory of CTA ``rank``; the address itself where ``rank`` is the CTA's ``own``."""
    a = addr.astype(np.int64) & ((1 << SLOT_SHIFT) - 1)
    return np.where(rank == own, a, ((rank.astype(np.int64) + 1) << SLOT_SHIFT) | a)


def split_address(addr: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (rank, shared address in that rank's memory) of cluster addresses ``addr``;
    addresses below the first remote window are the CTA's ``own``."""
    a = addr.astype(np.int64)
    slot = a >> SLOT_SHIFT
    return np.where(slot > 0, slot - 1, own), a & ((1 << SLOT_SHIFT) - 1)


__all__ = ["CLUSTER_REGS", "CLUSTER_SPAN", "MAX_CLUSTER", "PORTABLE_CLUSTER", "SLOT_SHIFT",
           "cluster_order", "cluster_problem", "launch_shape", "remote_address",
           "split_address"]
