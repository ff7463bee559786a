"""Running the per-index bodies of an ``index_launch`` in lockstep.

Each index along the launch axis has its own traced body (a Graph IR function on its
local shards). The bodies run together: every body runs its instructions up to its
next collective, and there all of them meet; the collective combines the values of all
indices *in index order* and hands each index its result. Bodies must reach the same
collectives in the same order with the same attributes; a body that stops early, or
reaches another collective, is a :class:`LaunchError` at its source line (a divergent
collective, as a divergent barrier in a kernel).

Local-view collectives (``xs[i]`` is index ``i``'s value, ``n`` the axis size):

==================  ==================================================================
``all_reduce``      every index gets ``reduce_in_order(xs, op)`` (sum, mean, max, min)
``all_gather``      every index gets ``concatenate(xs, dim)`` (``dim`` default 0)
``reduce_scatter``  index ``i`` gets piece ``i`` (``numpy.array_split`` on ``dim``) of
                    the reduction
``all_to_all``      index ``j`` gets the ``j``-th pieces (on ``split_dim``) of every
                    ``xs[i]``, concatenated on ``concat_dim`` in index order
``mesh_broadcast``  every index gets ``xs[root]``
``ppermute``        index ``dst`` gets ``xs[src]``; others get zeros
``shard``           index ``i`` keeps piece ``i`` of its own value
==================  ==================================================================

Reductions add in index order in the element's accumulation format and round once
(:func:`tessera.mesh_sim.reduce.reduce_in_order`), as the core's collectives do.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

import numpy as np

from tessera.errors import UNKNOWN_LOC, Loc, TesseraError
from tessera.interp.graph import run_op
from tessera.ir.core import Function, Instr, Value
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.mesh_sim.reduce import reduce_in_order

Combine = Callable[[Any, list[np.ndarray], TensorType], list[np.ndarray]]


class LaunchError(TesseraError):
    """Launch bodies that cannot run together (divergent collectives, wrong axis)."""

    kind = "index launch error"


def _pieces(x: np.ndarray, n: int, dim: int) -> list[np.ndarray]:
    return np.array_split(x, n, axis=dim)


def _all_reduce(op: graph_ir.AllReduce, xs: list[np.ndarray], t: TensorType) -> list[np.ndarray]:
    out = reduce_in_order(xs, t.element, op.op)
    return [out] * len(xs)


def _all_gather(op: graph_ir.AllGather, xs: list[np.ndarray], t: TensorType) -> list[np.ndarray]:
    out = np.concatenate(xs, axis=op.dim or 0)
    return [out] * len(xs)


def _reduce_scatter(op: graph_ir.ReduceScatter, xs: list[np.ndarray], t: TensorType
                    ) -> list[np.ndarray]:
    return _pieces(reduce_in_order(xs, t.element, op.op), len(xs), op.dim)


def _all_to_all(op: graph_ir.AllToAll, xs: list[np.ndarray], t: TensorType) -> list[np.ndarray]:
    parts = [_pieces(x, len(xs), op.split_dim) for x in xs]
    return [np.concatenate([p[j] for p in parts], axis=op.concat_dim) for j in range(len(xs))]


def _broadcast(op: graph_ir.MeshBroadcast, xs: list[np.ndarray], t: TensorType) -> list[np.ndarray]:
    return [xs[op.root]] * len(xs)


def _ppermute(op: graph_ir.Ppermute, xs: list[np.ndarray], t: TensorType) -> list[np.ndarray]:
    src = {d: s for s, d in op.perm}
    return [xs[src[j]] if j in src else np.zeros_like(xs[j]) for j in range(len(xs))]


def _shard(op: graph_ir.Shard, xs: list[np.ndarray], t: TensorType) -> list[np.ndarray]:
    return [_pieces(x, len(xs), op.dim)[i] for i, x in enumerate(xs)]


#: collective op class -> its local-view rule over the values of all indices
LOCAL_VIEW: dict[type, Combine] = {
    graph_ir.AllReduce: _all_reduce,
    graph_ir.AllGather: _all_gather,
    graph_ir.ReduceScatter: _reduce_scatter,
    graph_ir.AllToAll: _all_to_all,
    graph_ir.MeshBroadcast: _broadcast,
    graph_ir.Ppermute: _ppermute,
    graph_ir.Shard: _shard,
}
#: collectives whose result is the same on every index
INVARIANT = (graph_ir.AllReduce, graph_ir.AllGather, graph_ir.MeshBroadcast)

Body = Generator[tuple[Instr, np.ndarray], np.ndarray, list[np.ndarray]]


def _body(fn: Function, args: Sequence[np.ndarray], mode: str) -> Body:
    """Run ``fn``, stopping at every collective for its combined result."""
    env: dict[Value, np.ndarray] = dict(zip(fn.args, args))
    for instr in fn.body.instrs:
        operands = [env[v] for v in instr.operands]
        if instr.op.terminator:
            return operands
        if type(instr.op) in LOCAL_VIEW:
            result = yield instr, operands[0]
            outs = [result]
        else:
            loc = None if instr.loc == UNKNOWN_LOC else instr.loc
            outs = run_op(instr.op, operands, [v.type for v in instr.operands],
                          [r.type for r in instr.results], mode=mode,
                          regions=instr.regions, loc=loc)
        env.update(zip(instr.results, outs))
    raise LaunchError(f"@{fn.name} ends without a return", hint="verify the body")


def _where(instr: Instr) -> Loc | None:
    return None if instr.loc == UNKNOWN_LOC else instr.loc


def run_lockstep(fns: Sequence[Function], args: Sequence[Sequence[np.ndarray]], axis: str,
                 mode: str = "exact") -> list[list[np.ndarray]]:
    """Run one body per index in lockstep; return each index's results."""
    bodies = [_body(fn, a, mode) for fn, a in zip(fns, args)]
    pending: list[Any] = [None] * len(bodies)
    done: list[list[np.ndarray] | None] = [None] * len(bodies)
    while True:
        stops: list[tuple[Instr, np.ndarray] | None] = []
        for i, body in enumerate(bodies):
            try:
                stops.append(body.send(pending[i]))
            except StopIteration as stop:
                done[i] = stop.value
                stops.append(None)
        if all(s is None for s in stops):
            return done  # type: ignore[return-value]
        _check_together(stops, axis)
        first = next(s for s in stops if s is not None)[0]
        result_type = first.results[0].type
        assert isinstance(result_type, TensorType)
        pending = LOCAL_VIEW[type(first.op)](first.op, [s[1] for s in stops  # type: ignore[index]
                                                        ], result_type)


def _check_together(stops: list[tuple[Instr, np.ndarray] | None], axis: str) -> None:
    present = [(i, s[0]) for i, s in enumerate(stops) if s is not None]
    i0, first = present[0]
    if len(present) != len(stops):
        gone = next(i for i, s in enumerate(stops) if s is None)
        raise LaunchError(f"index {i0} waits in {first.op.name} but index {gone} has "
                          "finished: the bodies reach different collectives",
                          loc=_where(first), hint="every index must call the same "
                                                  "collectives in the same order")
    for i, instr in present[1:]:
        if instr.op != first.op:
            raise LaunchError(f"index {i0} calls {first.op} but index {i} calls {instr.op} "
                              "at the same point: divergent collectives", loc=_where(instr),
                              hint="every index must call the same collectives, with the "
                                   "same arguments, in the same order")
    if graph_ir.axis_names(first.op.axis) != (axis,):  # type: ignore[attr-defined]
        raise LaunchError(f"{first.op.name} over {first.op.axis!r} in a launch over "  # type: ignore[attr-defined]
                          f"{axis!r}", loc=_where(first),
                          hint=f"a launch body combines values along its own axis: "
                               f"axis={axis!r}")


__all__ = ["INVARIANT", "LOCAL_VIEW", "LaunchError", "run_lockstep"]
