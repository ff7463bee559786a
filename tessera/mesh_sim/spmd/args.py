"""Distributed arguments: a ``DistTensor`` seen by tracing, autodiff and the operators.

``@ts.jit``, ``ts.grad`` and the ``ts.*`` operators work on
:class:`~tessera.frontend.tensor.Tensor` values. A :class:`DistArg` is the ``Tensor``
that stands for a ``DistTensor``: its type carries the placement (so the function is
traced with it), and its ``array`` is the global value, made only if someone asks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tessera.frontend.tensor import Tensor
from tessera.ir.types import Sharding, TensorType
from tessera.mesh_sim.errors import MeshError
from tessera.mesh_sim.mesh import Mesh
from tessera.mesh_sim.tensor import DistTensor


def mesh_pairs(mesh: Mesh) -> tuple[tuple[str, int], ...]:
    """The ``(axis, size)`` pairs of a mesh: the mesh as a placement names it."""
    return tuple(zip(mesh.axes, mesh.shape))


def sharding_of(t: DistTensor) -> Sharding:
    """The placement of a DistTensor (its partial axes are summands)."""
    return Sharding(mesh_pairs(t.mesh), t.dim_axes, tuple((a, "sum") for a in t.partial_axes))


class DistArg(Tensor):
    """The ``Tensor`` that stands for a ``DistTensor`` (``dist``) in tessera's machinery."""

    __slots__ = ("dist",)

    def __init__(self, dist: DistTensor) -> None:  # no super().__init__: no global array
        self.dist = dist
        self.type = TensorType(dist.shape, dist.element, sharding_of(dist))

    @property  # type: ignore[override]
    def array(self) -> np.ndarray:
        """The global value (assembled from the shards on first use)."""
        return self.dist.numpy()

    def __repr__(self) -> str:
        return f"DistArg({self.dist!r})"


def one_mesh(values: Iterable[Any]) -> Mesh | None:
    """The mesh of the distributed values among ``values`` (MeshError if several)."""
    meshes: list[Mesh] = []
    for v in values:
        m = v.dist.mesh if isinstance(v, DistArg) else v.mesh if isinstance(v, DistTensor) \
            else None
        if m is not None and m not in meshes:
            meshes.append(m)
    if len(meshes) > 1:
        raise MeshError(f"operands live on different meshes: {meshes[0]!r} and {meshes[1]!r}",
                        hint="put every distributed operand of one program on one mesh "
                             "(dist.relayout cannot move values between meshes)")
    return meshes[0] if meshes else None


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
