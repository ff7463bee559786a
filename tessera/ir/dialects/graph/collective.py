"""Graph IR collectives: placement changes along named mesh axes.

Split from :mod:`tessera.ir.dialects.graph` (which re-exports every name) to keep one concern
per module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, register_op
from tessera.ir.dialects.graph import arity, norm_axis
from tessera.ir.types import TensorType

# ------------------------------------------------------------------------- collectives
AxisAttr = str | tuple[str, ...]
COLLECTIVE_OPS = ("sum", "mean", "max", "min")


def axis_names(axis: AxisAttr) -> tuple[str, ...]:
    """A collective's axis attribute as a tuple of axis names."""
    return (axis,) if isinstance(axis, str) else tuple(axis)


@dataclass(frozen=True)
class Collective(Op):
    """A collective along named mesh axes (docs/distributed.md).

    Under ``@ts.jit`` a collective is a *placement change of the global value*: its
    result has the operand's value (``ppermute`` moves shards) and only the placement in
    the type changes. On one device (unplaced types) every collective is the identity.
    In an ``index_launch`` body the view is local: the values of all indices along the
    axis are combined in index order.
    """

    axis: AxisAttr

    def __post_init__(self) -> None:
        axis = self.axis
        if not isinstance(axis, str):
            object.__setattr__(self, "axis", tuple(axis))
        if not axis_names(self.axis) or not all(isinstance(a, str) and a
                                                for a in axis_names(self.axis)):
            raise IRVerifyError(f"{self.name}: axis must name mesh axes, got {axis!r}",
                                hint='write axis="tp"')

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        (x,) = arity(self, operands, 1)
        self.check(x)
        return (x,)

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        # In a launch body (the local view) all_gather, reduce_scatter and all_to_all
        # change the shape of a value; the element and rank stay. Placed (global) values
        # keep their shape (checked with their placements, ir/transforms/sharding/check.py).
        (x,) = self.infer(operands)
        if len(results) != 1 or not isinstance(results[0], TensorType) or \
                results[0].element != x.element or results[0].rank != x.rank:  # type: ignore[attr-defined]
            raise IRVerifyError(f"{self.name}: result ({', '.join(map(str, results))}) should "
                                f"have the element and rank of {x}")

    def check(self, x: TensorType) -> None:
        """Attribute checks that need the operand's rank."""

    def reduction(self, op: str) -> None:
        if op not in COLLECTIVE_OPS:
            raise IRVerifyError(f"{self.name}: unknown reduction {op!r}",
                                hint=f"use one of {', '.join(COLLECTIVE_OPS)}")


@register_op
@dataclass(frozen=True)
class AllGather(Collective):
    """Collect the shards along ``axis``: sharded -> replicated. ``dim`` is the dim the
    shards are concatenated along in a launch body (the sharded dim under jit)."""

    name: ClassVar[str] = "graph.all_gather"
    dim: int | None = None

    def check(self, x: TensorType) -> None:
        if self.dim is not None:
            norm_axis(self, self.dim, x.rank)


@register_op
@dataclass(frozen=True)
class ReduceScatter(Collective):
    """Sum the contributions along ``axis`` and split the result on ``dim``.

    A replicated operand is one contribution, not one per device: nothing is summed
    (each device keeps its piece), so an adjoint never counts a value twice.
    """

    name: ClassVar[str] = "graph.reduce_scatter"
    dim: int = 0
    op: str = "sum"

    def check(self, x: TensorType) -> None:
        norm_axis(self, self.dim, x.rank)
        self.reduction(self.op)


@register_op
@dataclass(frozen=True)
class AllReduce(Collective):
    """Combine the contributions along ``axis``: partial -> replicated (``op`` is sum,
    mean, max or min; a replicated operand is one contribution)."""

    name: ClassVar[str] = "graph.all_reduce"
    op: str = "sum"

    def check(self, x: TensorType) -> None:
        self.reduction(self.op)


@register_op
@dataclass(frozen=True)
class AllToAll(Collective):
    """Re-split along ``axis``: sharded on ``concat_dim`` -> sharded on ``split_dim``."""

    name: ClassVar[str] = "graph.all_to_all"
    split_dim: int
    concat_dim: int

    def check(self, x: TensorType) -> None:
        if norm_axis(self, self.split_dim, x.rank) == norm_axis(self, self.concat_dim, x.rank):
            raise IRVerifyError("graph.all_to_all: split_dim equals concat_dim",
                                hint="split one dim and concatenate along another")


@register_op
@dataclass(frozen=True)
class MeshBroadcast(Collective):
    """Every device along ``axis`` takes the value of rank ``root``."""

    name: ClassVar[str] = "graph.mesh_broadcast"
    root: int = 0


@register_op
@dataclass(frozen=True)
class Ppermute(Collective):
    """Move per-device blocks along ``axis``: rank ``dst`` receives rank ``src``'s block
    for each ``(src, dst)`` of ``perm``; ranks that receive nothing hold zeros."""

    name: ClassVar[str] = "graph.ppermute"
    perm: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "perm", tuple(tuple(int(r) for r in p) for p in self.perm))


@register_op
@dataclass(frozen=True)
class Shard(Collective):
    """Replicated -> sharded on ``dim`` along ``axis``: each device keeps its own piece
    (no communication; inserted by sharding propagation, the inverse of all_gather)."""

    name: ClassVar[str] = "graph.shard"
    dim: int = 0

    def check(self, x: TensorType) -> None:
        norm_axis(self, self.dim, x.rank)
