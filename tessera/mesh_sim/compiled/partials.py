"""Placed Graph IR in which no device rounds a partial sum: the form that is cut into
per-device kernels.

In exact mode the mesh simulator never rounds a summand (:mod:`..spmd.pending`): a
value partial over an axis (a matmul over a sharded contraction dim, a sum or mean
over a sharded dim) stays unevaluated until the collective that completes it, and is
then evaluated once, on operands laid out so that every device holds whole
contractions. :func:`complete_partials` writes that evaluation into the program: the
op that makes an exact partial sum moves past the collectives that complete it, and
those become the gathers (``graph.all_gather``, then the local ``graph.shard``) that
lay its operands out as :func:`~..spmd.layout.relayout_dims` does. Its result then
has the placement the completing collective gave, and each device computes its block
of it with the op on its local operand blocks: the bits of one device's run.

A mean or an mse over a sharded dim is moved in every mode (a device's summand would
divide by its own count, not the global one); in fast mode a matmul's or sum's
summands are computed per device and the all-reduce adds them in rank order, as the
simulator's fast mode does.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.errors import InterpretError, UnsupportedError
from tessera.ir.core import Block, Function, Instr, IRRegion, Op, Value, clone_block
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.dialects.graph.collective import Collective
from tessera.ir.transforms.schedule.build import inline_custom
from tessera.ir.types import Sharding, TensorType
from tessera.mesh_sim.spmd.pending import OPERAND_LAYOUTS, evaluable

DimAxes = tuple[tuple[str, ...], ...]


def _sums(t: TensorType) -> bool:
    return t.sharding is not None and any(kind == "sum" for _, kind in t.sharding.partial)


def _deferred(instr: Instr, mode: str) -> bool:
    """Whether ``instr`` makes a partial sum that is evaluated after its collective."""
    if not instr.results or not isinstance(t := instr.results[0].type, TensorType) or \
            not _sums(t):
        return False
    if type(instr.op) not in OPERAND_LAYOUTS:
        raise UnsupportedError(f"{instr.op.name} makes a partial sum the scheduled program "
                               "cannot complete", loc=instr.loc, hint="use backend='interp'")
    return mode == "exact" or isinstance(instr.op, (graph_ir.Mean, graph_ir.Mse))


def _emit(body: Block, op: Op, operands: Sequence[Value], result: TensorType,
          instr: Instr) -> Value:
    new = Instr(op, list(operands), [], [], instr.loc)
    new.results = [Value(result, new, instr.results[0].hint if instr.results else "")]
    body.append(new)
    return new.results[0]


def _axis(axes: Sequence[str]) -> str | tuple[str, ...]:
    return axes[0] if len(axes) == 1 else tuple(axes)


def relayout(body: Block, v: Value, dims: DimAxes, instr: Instr) -> Value:
    """``v`` laid out with ``dims``: the gathers, then the local slices, of
    :func:`~..spmd.layout.relayout_dims` (the same steps in the same order)."""
    t = v.type
    assert isinstance(t, TensorType) and t.sharding is not None
    s: Sharding = t.sharding
    shape = [int(n) for n in t.shape]  # type: ignore[arg-type]
    for d in range(t.rank):
        have = s.dims[d]
        keep = 0
        while keep < min(len(have), len(dims[d])) and have[keep] == dims[d][keep]:
            keep += 1
        changes = keep < len(have) or keep < len(dims[d])
        if keep and changes and (shape[d] % s.size(have) or shape[d] % s.size(dims[d])):
            keep = 0  # uneven pieces over several axes do not nest: gather the dim whole
        if have[keep:]:
            s = s.with_dims(tuple(a[:keep] if k == d else a for k, a in enumerate(s.dims)))
            v = _emit(body, graph_ir.AllGather(_axis(have[keep:]), dim=d), [v],
                      t.placed(s), instr)
    for d, want in enumerate(dims):
        extra = want[len(s.dims[d]):]
        if extra:
            s = s.with_dims(tuple(a + extra if k == d else a for k, a in enumerate(s.dims)))
            v = _emit(body, graph_ir.Shard(_axis(extra), dim=d), [v], t.placed(s), instr)
    return v


def _evaluate(body: Block, producer: Instr, t: TensorType, env: dict[Value, Value],
              at: Instr) -> Value:
    """The producer of a partial sum evaluated as ``t`` (nothing summed) says."""
    assert t.sharding is not None
    in_types = [v.type for v in producer.operands]
    dims = t.sharding.dims
    whole = evaluable(producer.op, in_types, dims)
    placed = t if whole == dims else t.placed(t.sharding.with_dims(whole))
    needs = OPERAND_LAYOUTS[type(producer.op)](producer.op, in_types, whole)
    operands = [relayout(body, env[v], d, at) for v, d in zip(producer.operands, needs)]
    out = _emit(body, producer.op, operands, placed, producer)
    # a dim reduced with keepdims is evaluated whole, then each device keeps its piece
    return out if whole == dims else relayout(body, out, dims, at)


def complete_partials(fn: Function, mode: str) -> Function:
    """A copy of the placed function ``fn`` whose partial sums are evaluated after the
    collectives that complete them (see the module docstring); ``fn`` is unchanged."""
    fn = inline_custom(fn)
    body = Block()
    env: dict[Value, Value] = {a: body.add_arg(a.type, a.hint) for a in fn.args}
    pending: dict[Value, Instr] = {}
    for instr in fn.body.instrs:
        if _deferred(instr, mode):
            pending[instr.results[0]] = instr
            continue
        if isinstance(instr.op, Collective) and instr.operands[0] in pending:
            producer = pending[instr.operands[0]]
            t = instr.results[0].type
            assert isinstance(t, TensorType)
            if _sums(t):  # still summed over another axis: only the placement changes
                pending[instr.results[0]] = producer
            else:
                env[instr.results[0]] = _evaluate(body, producer, t, env, instr)
            continue
        if any(v in pending for v in instr.operands):
            raise InterpretError(f"{instr.op.name} reads a partial sum that no collective "
                                 "completed", loc=instr.loc,
                                 hint="run the shard-propagation pass first")
        regions = [IRRegion([clone_block(b, dict(env)) for b in r.blocks])
                   for r in instr.regions]
        copy = Instr(instr.op, [env[v] for v in instr.operands], [], regions, instr.loc)
        copy.results = [Value(r.type, copy, r.hint) for r in instr.results]
        env.update(zip(instr.results, copy.results))
        body.append(copy)
    return Function(fn.name, body, list(fn.result_types), fn.kind, dict(fn.attrs), fn.loc)


__all__ = ["complete_partials", "relayout"]
