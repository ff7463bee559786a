"""Placement rules of the Graph IR ops: what placements an op needs, what it gives.

A rule is ``rule(op, operands, results, mesh) -> Plan``: ``operands`` are the operand
types with their current placements, ``results`` the unplaced result types, ``mesh``
the ``(axis, size)`` pairs of the function's mesh. The plan names the placement every
operand must be in (the shard-propagation pass inserts collectives where one is not)
and the placement of every result. Rules are keyed by op class (``PLACEMENT_RULES`` in
:mod:`.check`, which the verifier consults) and are *idempotent*: for
operands already in the needed placements a rule needs exactly those again, so running
the pass twice changes nothing.

The rules of this module (the shape and collective ops have their own modules):

* elementwise ops: every operand in one placement, chosen per dim from the operands
  in operand order (the first operand that shards a dim decides); replicated operands
  are sliced locally, partial ones reduced (``reduce_scatter`` where the others are
  sharded on that axis);
* ``graph.matmul``: batch, row (M) and column (N) dims keep the operands' sharding; a
  contraction dim (K) sharded on both operands gives a result partial over those axes;
  where two claims need one axis, the one whose loss would gather the larger operand
  wins;
* reductions: a reduced dim sharded over an axis makes the result partial over it
  (``sum`` for sum, mean and mse; ``max``/``min`` for max and min);
* constants are replicated; a function returns no partial value (it is all-reduced).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tessera.errors import MeshError
from tessera.ir.core import OPS, Type, rule_decorator
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.sharding.check import PLACEMENT_RULES
from tessera.ir.types import Sharding, TensorType

Mesh = tuple[tuple[str, int], ...]
Dims = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Plan:
    """The placements an op needs for its operands and gives its results."""

    operands: tuple[Sharding, ...]
    results: tuple[Sharding, ...]


Rule = Callable[[Any, Sequence[TensorType], Sequence[TensorType], Mesh], Plan]


rule = rule_decorator(PLACEMENT_RULES, "placement rule")


def placement(t: Type, mesh: Mesh) -> Sharding:
    """The placement of an operand type (an unplaced one is replicated on ``mesh``)."""
    assert isinstance(t, TensorType)
    if t.sharding is None:
        return Sharding.replicated(mesh, t.rank)
    if t.sharding.mesh != mesh:
        raise MeshError(f"operands live on different meshes: {_mesh_text(t.sharding.mesh)} "
                        f"and {_mesh_text(mesh)}",
                        hint="put every distributed operand of one program on one mesh")
    return t.sharding


def _mesh_text(mesh: Mesh) -> str:
    return "mesh<" + ", ".join(f"{a}={n}" for a, n in mesh) + ">"


def settled(s: Sharding) -> Sharding:
    """``s`` with its partial axes reduced (they become replicated)."""
    return s.with_partial(())


def unify(placements: Sequence[Sharding], mesh: Mesh, rank: int) -> Sharding:
    """One placement for operands that must agree: per dim, the first operand (in
    operand order) that shards it decides, unless its axes are taken already."""
    dims: list[tuple[str, ...]] = [() for _ in range(rank)]
    used: set[str] = set()
    for s in placements:
        for d, axes in enumerate(s.dims):
            if axes and not dims[d] and not used & set(axes):
                dims[d] = axes
                used |= set(axes)
    return Sharding(mesh, tuple(dims))


def replicated_like(t: TensorType, mesh: Mesh) -> Sharding:
    return Sharding.replicated(mesh, t.rank)


# ----------------------------------------------------------------------- elementwise
ELEMENTWISE = (graph_ir.Unary, graph_ir.ToReal, graph_ir.Binary, graph_ir.Where, graph_ir.Cast)


def _elementwise(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
                 mesh: Mesh) -> Plan:
    rank = results[0].rank
    target = unify([settled(placement(t, mesh)) for t in operands], mesh, rank)
    return Plan((target,) * len(operands), (target,))


for _cls in [c for c in OPS.values() if c.name.startswith("graph.")
             and issubclass(c, ELEMENTWISE)]:
    PLACEMENT_RULES[_cls] = _elementwise


@rule(graph_ir.Constant)
def _constant(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
              mesh: Mesh) -> Plan:
    return Plan((), (replicated_like(results[0], mesh),))


@rule(graph_ir.Return, graph_ir.Yield)
def _return(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
            mesh: Mesh) -> Plan:
    return Plan(tuple(settled(placement(t, mesh)) for t in operands), ())


# --------------------------------------------------------------------------- matmul
def _claim(claims: list[tuple[int, int, str, tuple[str, ...]]], used: set[str]
           ) -> dict[str, tuple[str, ...]]:
    """Assign axes to slots, highest priority first; a slot whose axes are taken stays
    unsharded (its operand is gathered there)."""
    out: dict[str, tuple[str, ...]] = {}
    for _, _, slot, axes in sorted(claims, key=lambda c: (-c[0], c[1])):
        if axes and not used & set(axes):
            out[slot] = axes
            used |= set(axes)
        else:
            out[slot] = ()
    return out


@rule(graph_ir.MatMul)
def _matmul(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
            mesh: Mesh) -> Plan:
    ta, tb = operands
    a, b = (settled(placement(t, mesh)) for t in operands)
    batch = unify([a.with_dims(a.dims[:-2]), b.with_dims(b.dims[:-2])], mesh,
                  len(a.dims) - 2).dims
    ka, kb = a.dims[-1], b.dims[-2]
    # Priority of a claim: the elements gathered if it loses.
    size_a, size_b = ta.size, tb.size
    if ka == kb:
        k_claim = (size_a + size_b, ka)
    else:
        k_claim = max((size_a if ka else -1, ka), (size_b if kb else -1, kb))
    claims = [(size_a, 0, "M", a.dims[-2]), (size_b, 1, "N", b.dims[-1]),
              (k_claim[0], 2, "K", k_claim[1])]
    slots = _claim(claims, {x for axes in batch for x in axes})
    m, n, k = slots["M"], slots["N"], slots["K"]
    need_a = Sharding(mesh, (*batch, m, k))
    need_b = Sharding(mesh, (*batch, k, n))
    out = Sharding(mesh, (*batch, m, n), tuple((x, "sum") for x in k))
    return Plan((need_a, need_b), (out,))


# ------------------------------------------------------------------------ reductions
_PARTIAL_OF = {graph_ir.Sum: "sum", graph_ir.Mean: "sum", graph_ir.Max: "max", graph_ir.Min: "min"}


@rule(graph_ir.Sum, graph_ir.Mean, graph_ir.Max, graph_ir.Min)
def _reduce(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
            mesh: Mesh) -> Plan:
    (t,) = operands
    s = settled(placement(t, mesh))
    reduced = set(op.reduced_axes(t.rank)) if t.rank else set()
    dims = [() if d in reduced else axes for d, axes in enumerate(s.dims)
            if op.keepdims or d not in reduced]
    over = [x for d in sorted(reduced) for x in s.dims[d]]
    out = Sharding(mesh, tuple(dims), tuple((x, _PARTIAL_OF[type(op)]) for x in over))
    return Plan((s,), (out,))


@rule(graph_ir.Mse)
def _mse(op: Any, operands: Sequence[TensorType], results: Sequence[TensorType],
         mesh: Mesh) -> Plan:
    target = unify([settled(placement(t, mesh)) for t in operands], mesh, operands[0].rank)
    over = [x for axes in target.dims for x in axes]
    return Plan((target, target), (Sharding(mesh, (), tuple((x, "sum") for x in over)),))


def mesh_of(types: Sequence[Type]) -> Mesh | None:
    """The mesh of the first placed type, or None."""
    for t in types:
        if isinstance(t, TensorType) and t.sharding is not None:
            return t.sharding.mesh
    return None


__all__ = ["ELEMENTWISE", "Mesh", "Plan", "Rule", "mesh_of", "placement", "rule", "settled",
           "unify"]
