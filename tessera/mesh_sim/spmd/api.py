"""The user-facing collectives: one name for DistTensors, traced values and launches.

``ts.all_gather(x, axis="tp")`` (and ``ts.dist.all_gather``):

* on a DistTensor, outside any trace, it is the core's collective
  (:mod:`tessera.mesh_sim.collectives`), run at once;
* on a traced value (inside ``@ts.jit``, ``ts.grad`` or an ``index_launch`` body) it
  adds the Graph IR op. Under ``@ts.jit`` the op is a placement change of the global
  value; in a launch body it combines the values of all indices in index order.

``dim`` arguments name tensor dims (``"row"``, ``"col"`` or an int); under ``@ts.jit``
``all_gather`` needs none (the value's placement says which dim is sharded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.errors import user_api
from tessera.frontend.graph.trace import Tracer
from tessera.ir.dialects import graph as graph_ir
from tessera.mesh_checks import check_dim, check_perm, check_rank
from tessera.mesh_sim import collectives as core
from tessera.mesh_sim import p2p


def _traced(x: Any) -> bool:
    return isinstance(x, Tracer)


def _axis(axis: Any) -> Any:
    return axis if isinstance(axis, str) else tuple(axis)


def _dim(x: Tracer, dim: Any, what: str) -> int:
    return check_dim(dim, x.ndim, what)


def _axis_size(x: Tracer, axis: Any) -> int | None:
    """The number of devices along ``axis`` where it is known while tracing: in a
    launch body, or under ``@ts.jit`` from the mesh of the traced function's placed
    arguments (else the placement rule checks ranks when the function is placed)."""
    from tessera.mesh_sim.spmd.lockstep_trace import current

    here = current(axis)
    if here is not None:
        return here[0].n
    names = graph_ir.axis_names(_axis(axis))
    for t in [x.type, *(a.type for a in x.trace.block.args)]:
        s = getattr(t, "sharding", None)
        if s is not None and len(names) == 1 and names[0] in s.axes:
            return s.size((names[0],))
    return None


def _bind(op: graph_ir.Collective, x: Tracer) -> Any:
    from tessera.frontend.graph.ops import bind
    from tessera.mesh_sim.spmd.lockstep_trace import current

    here = current(op.axis)
    if here is None:
        return bind(op, x)[0]
    lockstep, index = here  # a launch body: the result shape depends on every index
    return bind(op, x, result_types=[lockstep.meet(index, op, x.type)])[0]


@user_api
def all_gather(x: Any, axis: Any, dim: Any = None) -> Any:
    """Sharded -> replicated along ``axis``; the value is unchanged."""
    if _traced(x):
        return _bind(graph_ir.AllGather(_axis(axis), None if dim is None else
                                 _dim(x, dim, "all_gather")), x)
    return core.all_gather(x, axis)


@user_api
def reduce_scatter(x: Any, axis: Any, op: str = "sum", dim: Any = 0) -> Any:
    """Sum the contributions along ``axis`` and split the result on ``dim``."""
    if _traced(x):
        return _bind(graph_ir.ReduceScatter(_axis(axis), _dim(x, dim, "reduce_scatter"), op), x)
    return core.reduce_scatter(x, axis, op=op, dim=dim)


@user_api
def all_reduce(x: Any, axis: Any, op: str = "sum") -> Any:
    """Combine the contributions along ``axis`` (``op``: sum, mean, max, min)."""
    if _traced(x):
        return _bind(graph_ir.AllReduce(_axis(axis), op), x)
    return core.all_reduce(x, axis, op=op)


@user_api
def all_to_all(x: Any, axis: str, split_dim: Any, concat_dim: Any) -> Any:
    """Re-split along ``axis``: sharded on ``concat_dim`` -> sharded on ``split_dim``."""
    if _traced(x):
        return _bind(graph_ir.AllToAll(axis, _dim(x, split_dim, "all_to_all split_dim"),
                                _dim(x, concat_dim, "all_to_all concat_dim")), x)
    return core.all_to_all(x, axis, split_dim, concat_dim)


@user_api
def broadcast(x: Any, axis: str, root: int = 0) -> Any:
    """Every device along ``axis`` takes the value of rank ``root``."""
    if _traced(x):
        return _bind(graph_ir.MeshBroadcast(axis, check_rank(root, _axis_size(x, axis), "root")), x)
    return p2p.broadcast(x, axis, root)


@user_api
def ppermute(x: Any, axis: str, perm: Sequence[tuple[int, int]]) -> Any:
    """Rank ``dst`` receives rank ``src``'s block for each ``(src, dst)`` pair."""
    if _traced(x):
        return _bind(graph_ir.Ppermute(axis, check_perm(perm, _axis_size(x, axis))), x)
    return p2p.ppermute(x, axis, perm)


@user_api
def send(x: Any, axis: str, *, src: int, dst: int) -> Any:
    """Rank ``src``'s block goes to rank ``dst``; every other rank holds zeros."""
    return ppermute(x, axis, [(src, dst)])


@user_api
def recv(x: Any, axis: str, *, src: int, dst: int) -> Any:
    """Rank ``dst`` receives rank ``src``'s block (the same exchange as ``send``)."""
    return ppermute(x, axis, [(src, dst)])


__all__ = ["all_gather", "all_reduce", "all_to_all", "broadcast", "ppermute", "recv",
           "reduce_scatter", "send"]
