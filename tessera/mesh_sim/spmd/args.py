"""Distributed arguments: a ``DistTensor`` seen by tracing, autodiff and the operators.

:class:`DistArg` (the ``Tensor`` that stands for a ``DistTensor``) and the placement
helpers are defined in :mod:`tessera.frontend.graph.dist_arg`, so that the front end need not
import the simulator; they are re-exported here with :func:`to_dist`, which makes
DistTensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.frontend.graph.dist_arg import DistArg, mesh_pairs, one_mesh, sharding_of
from tessera.frontend.graph.tensor import Tensor
from tessera.mesh_sim.mesh import Mesh
from tessera.mesh_sim.tensor import DistTensor


def to_dist(x: Any, mesh: Mesh) -> DistTensor:
    """An argument as a DistTensor on ``mesh``: a plain tensor is replicated (its one
    array shared by every device, nothing copied)."""
    if isinstance(x, DistArg):
        return x.dist
    if isinstance(x, DistTensor):
        return x
    array = x.array if isinstance(x, Tensor) else np.asarray(x)
    elem = x.type.element if isinstance(x, Tensor) else None
    t = Tensor(array, elem) if elem is None else x
    return DistTensor(t.shape, t.type.element, mesh, ((),) * t.ndim,
                      global_array=t.array)


__all__ = ["DistArg", "mesh_pairs", "one_mesh", "sharding_of", "to_dist"]
