"""A launch's thread block clusters (:mod:`tessera.arch.cluster`): its CTAs numbered
cluster by cluster, so that CTA index ``c`` has rank ``c % size`` in the cluster of CTAs
``c - c % size`` onwards, and the special registers that name a CTA's place.

Numbering the CTAs cluster by cluster keeps each CTA's and each cluster's threads one
range of thread ids, which is what the shared-memory race records (lowest and highest
reader, :mod:`.races`) need to tell another CTA's accesses from a CTA's own. The order
in which atomics of different CTAs land (``cta_order``) is this numbering.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

from tessera.arch.cluster import cluster_order, launch_shape
from tessera.errors import ArgumentError, Loc
from tessera.interp.target.cluster.races import ClusterRaces


class ClusterLaunchError(ArgumentError):
    """A launch in thread block clusters that a GPU refuses (``cudaErrorInvalidClusterSize``):
    a grid that is not a whole number of clusters, a cluster of too many CTAs, a shape
    other than the kernel's ``.reqnctapercluster``, or a target before sm_90."""


@dataclass
class Clusters:
    """The clusters of a launch (which names their shape, so ``%is_explicit_cluster``
    is true): their shape and each CTA's ``%ctaid`` (ncta, 3) in CTA order."""

    dims: tuple[int, int, int]
    ctaids: np.ndarray


def kernel_clusters(m: Any, target: str, directives: dict[str, object],
                    cluster: tuple[int, int, int] | None, loc: Loc | None = None) -> None:
    """Give launch ``m`` of a kernel for ``target`` with performance ``directives`` the
    clusters it asks for (``cluster``) or its ``.reqnctapercluster`` names, if any
    (:class:`ClusterLaunchError`, at the kernel's ``loc``, where a GPU refuses the
    launch): its CTAs are numbered cluster by cluster from here on."""
    dims, problem = launch_shape(target, directives, m.grid, cluster)
    if problem:
        raise ClusterLaunchError(f"a GPU would refuse this launch of '{m.fn.name}': "
                                 f"{problem}", loc=loc)
    if dims is not None:
        m.cluster = Clusters(dims, cluster_order(m.grid, dims))
        m.shared.cluster_size = prod(dims)
        if m.shared.races and m.shared.size and m.shared.cluster_size > 1:
            m.shared.clustered = ClusterRaces(m.shared)


def cluster_special(m: Any, reg: str) -> np.ndarray:
    """The value of cluster special register ``%reg`` for every thread of ``m``: each
    CTA a cluster of its own where the launch has none."""
    dims = m.cluster.dims if m.cluster is not None else (1, 1, 1)
    size = m.shared.cluster_size
    if reg == "is_explicit_cluster":
        return np.full(m.n, m.cluster is not None)
    if reg in ("cluster_ctarank", "cluster_nctarank"):
        value: Any = m.cta % size if reg == "cluster_ctarank" else size
    else:
        name, axis = reg.split(".")
        k = "xyz".index(axis)
        ids = m.cta_xyz(m.cta)[k]
        value = {"cluster_ctaid": ids % dims[k], "cluster_nctaid": dims[k],
                 "clusterid": ids // dims[k], "nclusterid": m.grid[k] // dims[k]}[name]
    return np.broadcast_to(np.asarray(value, np.uint32), (m.n,)).copy()


__all__ = ["ClusterLaunchError", "Clusters", "cluster_special", "kernel_clusters"]
