"""Placement rules of the collective ops: placement changes of the global value.

Under ``@ts.jit`` a collective names the placement its result must have along an axis;
the value does not change (``ppermute`` moves shards). A replicated operand of a
reducing collective is *one* contribution: ``all_reduce`` of it is the identity and
``reduce_scatter`` of it keeps each device's piece, summing nothing. That is what
keeps gradients exact: the adjoint of ``all_gather`` is ``reduce_scatter``, and when the
cotangent is replicated (every device computed the same loss) nothing is counted once
per device.

=====================  ===========================  ==================================
collective             operand along each axis      result along each axis
=====================  ===========================  ==================================
``all_gather``         sharded or replicated        replicated
``all_reduce(sum)``    partial(sum) or replicated   replicated
``all_reduce(max)``    partial(max) or replicated   replicated (min likewise)
``all_reduce(mean)``   replicated                   replicated
``reduce_scatter``     partial(sum) or replicated   sharded on ``dim``
``all_to_all``         sharded on ``concat_dim``    sharded on ``split_dim``
``mesh_broadcast``     replicated                   replicated
``ppermute``           sharded, or replicated       as the operand
                       under a full permutation
``shard``              replicated                   sharded on ``dim``
=====================  ===========================  ==================================

Where the operand is in another placement the pass first moves it (an all_reduce
before an all_gather of a partial value, an all_gather before an all_reduce of a
sharded one). A placement no collective can reach (the max of summands, a ppermute
of summands) is a PlacementError: such per-device values belong in an
``index_launch`` body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.errors import MeshError, PlacementError
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.sharding.rules import Mesh, Plan, placement, rule, settled
from tessera.ir.types import PARTIAL, SHARDED, Sharding, TensorType
from tessera.mesh_checks import check_perm, check_rank

LOCAL_VIEW = "per-device values are what an index_launch body works on: write the " \
             "collective inside ts.index_launch(axis=...)(fn)"


def check_axes(s: Sharding, axis: Any) -> tuple[str, ...]:
    """The op's axes, each an axis of the mesh (MeshError naming the mesh otherwise)."""
    names = graph_ir.axis_names(axis)
    for a in names:
        if a not in s.axes:
            mesh = ", ".join(f"{x}={n}" for x, n in s.mesh)
            raise MeshError(f"axis {a!r} is not an axis of the mesh <{mesh}>",
                            hint=f"use one of {s.axes}")
    if len(set(names)) != len(names):
        raise MeshError(f"axis named twice in {names}", hint="name each axis once")
    return names


def gathered(s: Sharding, axes: Sequence[str]) -> Sharding:
    """``s`` with ``axes`` removed from its dims (replicated there)."""
    return s.with_dims(tuple(tuple(a for a in d if a not in axes) for d in s.dims))


def reduced(s: Sharding, axes: Sequence[str]) -> Sharding:
    """``s`` with ``axes`` removed from its partial axes."""
    return s.with_partial(tuple(p for p in s.partial if p[0] not in axes))


def _single(op: Any, s: Sharding) -> str:
    names = check_axes(s, op.axis)
    if len(names) != 1:
        raise MeshError(f"{op.name} runs along one axis, got {names}",
                        hint=f"name a single axis, one of {s.axes}")
    return names[0]


@rule(graph_ir.AllGather)
def _all_gather(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                mesh: Mesh) -> Plan:
    s = placement(operands[0], mesh)
    axes = check_axes(s, op.axis)
    need = reduced(s, axes)
    for d, entry in enumerate(need.dims):
        gone = tuple(a for a in entry if a in axes)
        if gone and entry[len(entry) - len(gone):] != gone:
            raise PlacementError(f"cannot gather {gone} alone out of the axes {entry} that "
                                 f"split dim {d}", hint=f"gather the minor axes first, e.g. "
                                                        f"all_gather(x, {entry[-1]!r})")
        if gone and op.dim is not None and op.dim % len(s.dims) != d:
            raise PlacementError(f"all_gather(dim={op.dim}) of a value sharded over "
                                 f"{gone} on dim {d}", hint="leave dim out under @ts.jit: "
                                 "the value's placement says which dim is sharded")
    return Plan((need,), (gathered(need, axes),))


@rule(graph_ir.AllReduce)
def _all_reduce(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                mesh: Mesh) -> Plan:
    s = placement(operands[0], mesh)
    axes = check_axes(s, op.axis)
    for a in axes:
        have = s.partial_op(a)
        if have is not None and (op.op == "mean" or have != op.op):
            raise PlacementError(
                f"all_reduce(op={op.op!r}) over {a!r} of a value partial({have}) over "
                f"{a!r}: the result is not a function of the global value",
                hint=f"reduce it with op={have!r}; {LOCAL_VIEW}")
    need = gathered(s, axes)
    return Plan((need,), (reduced(need, axes),))


@rule(graph_ir.ReduceScatter)
def _reduce_scatter(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                    mesh: Mesh) -> Plan:
    s = placement(operands[0], mesh)
    axes = check_axes(s, op.axis)
    for a in axes:
        have = s.partial_op(a)
        if op.op != "sum" or have not in (None, "sum"):
            raise PlacementError(f"reduce_scatter(op={op.op!r}) over {a!r} of a value "
                                 f"{s.state(a)} over {a!r}",
                                 hint=f"under @ts.jit reduce_scatter sums; {LOCAL_VIEW}")
    need = gathered(s, axes)
    dim = op.dim % len(s.dims)
    out = reduced(need, axes)
    out = out.with_dims(tuple(d + axes if k == dim else d for k, d in enumerate(out.dims)))
    return Plan((need,), (out,))


@rule(graph_ir.AllToAll)
def _all_to_all(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                mesh: Mesh) -> Plan:
    s = settled(placement(operands[0], mesh))
    ax = _single(op, s)
    rank = len(s.dims)
    split, concat = op.split_dim % rank, op.concat_dim % rank
    dims = [tuple(a for a in d if a != ax) for d in s.dims]
    dims[concat] = dims[concat] + (ax,)
    need = s.with_dims(tuple(dims))
    dims[concat] = dims[concat][:-1]
    dims[split] = dims[split] + (ax,)
    return Plan((need,), (s.with_dims(tuple(dims)),))


@rule(graph_ir.MeshBroadcast)
def _mesh_broadcast(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                    mesh: Mesh) -> Plan:
    s = placement(operands[0], mesh)
    ax = _single(op, s)
    check_rank(op.root, s.size(ax), "root")
    if s.state(ax) == PARTIAL:
        raise PlacementError(f"mesh_broadcast over {ax!r} of a value partial over {ax!r}: "
                             "one device's summand is not a function of the global value",
                             hint=LOCAL_VIEW)
    need = gathered(s, (ax,))
    return Plan((need,), (need,))


@rule(graph_ir.Ppermute)
def _ppermute(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
              mesh: Mesh) -> Plan:
    s = placement(operands[0], mesh)
    ax = _single(op, s)
    check_perm(op.perm, s.size(ax))
    state = s.state(ax)
    full = sorted(d for _, d in op.perm) == list(range(s.size(ax)))
    if state == PARTIAL or (state != SHARDED and not full):
        raise PlacementError(f"ppermute over {ax!r} of a value {state} over {ax!r} "
                             f"{'' if full else 'with ranks left empty'}",
                             hint="ppermute moves the shards of a value sharded over the "
                                  f"axis; {LOCAL_VIEW}")
    return Plan((s,), (s,))


@rule(graph_ir.Shard)
def _shard(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
           mesh: Mesh) -> Plan:
    s = placement(operands[0], mesh)
    axes = check_axes(s, op.axis)
    need = gathered(s, axes)
    if any(s.partial_op(a) for a in axes):
        need = reduced(need, axes)
    dim = op.dim % len(s.dims)
    out = need.with_dims(tuple(d + axes if k == dim else d for k, d in enumerate(need.dims)))
    return Plan((need,), (out,))


__all__ = ["check_axes", "gathered", "reduced"]
