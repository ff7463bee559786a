"""Distributed arguments: a ``DistTensor`` seen by tracing, autodiff and the operators.

``@ts.jit``, ``ts.grad`` and the ``ts.*`` operators work on
:class:`~tessera.frontend.graph.tensor.Tensor` values. A :class:`DistArg` is the ``Tensor``
that stands for a ``DistTensor``: its type carries the placement (so the function is
traced with it), and its ``array`` is the global value, made only if someone asks.

The front end recognises distributed values through :class:`DistValue`, the base class
of :class:`tessera.mesh_sim.tensor.DistTensor`, defined here so that the front end
needs no part of the mesh simulator until a distributed value exists (``import
tessera`` loads none of it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from tessera.errors import MeshError
from tessera.frontend.graph.tensor import Tensor
from tessera.ir.types import Sharding, TensorType

if TYPE_CHECKING:
    from tessera.mesh_sim.mesh import Mesh
    from tessera.mesh_sim.tensor import DistTensor


class DistValue:
    """Base class of every distributed value (:class:`~tessera.mesh_sim.tensor.DistTensor`).

    A subclass provides ``mesh``, ``shape``, ``element``, ``dim_axes``, ``partial_axes``
    and ``numpy()``; this class only lets the front end ask ``isinstance(x, DistValue)``
    without importing the simulator.
    """

    __slots__ = ()


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
        m = v.dist.mesh if isinstance(v, DistArg) else v.mesh if isinstance(v, DistValue) \
            else None
        if m is not None and m not in meshes:
            meshes.append(m)
    if len(meshes) > 1:
        raise MeshError(f"operands live on different meshes: {meshes[0]!r} and {meshes[1]!r}",
                        hint="put every distributed operand of one program on one mesh "
                             "(dist.relayout cannot move values between meshes)")
    return meshes[0] if meshes else None


__all__ = ["DistArg", "DistValue", "mesh_pairs", "one_mesh", "sharding_of"]
