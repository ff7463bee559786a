"""Local slices sunk into the broadcasts they cut.

Shard propagation replicates the dims a broadcast stretches or adds and slices them
afterwards where a sharded value meets them (``graph.shard``: each device keeps its
piece; no communication). In the mesh simulator the broadcast is a view, but cut at
the shard, a per-device program would write the whole broadcast from one kernel only
to keep a piece of it. :func:`sink_shards` makes the broadcast itself sharded: a device
broadcasts its block of the operand straight to its piece of the result (the
broadcast's operand is replicated along the stretched dims, so every piece of them is
the same values), and the broadcast fuses into the kernel that reads it.
"""

from __future__ import annotations

from tessera.ir.core import Function, Instr, Value, replace_all_uses
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.dce import eliminate_dead
from tessera.ir.types import TensorType


def _stretched(broadcast: Instr, dim: int) -> bool:
    """Whether ``broadcast`` adds or stretches result ``dim``."""
    x, out = broadcast.operands[0].type, broadcast.results[0].type
    assert isinstance(x, TensorType) and isinstance(out, TensorType)
    lead = out.rank - x.rank
    return dim < lead or (x.shape[dim - lead] == 1 and out.shape[dim] != 1)


def _sinkable(shard: Instr) -> Instr | None:
    """The broadcast a ``graph.shard`` cuts only along dims it stretches, or None."""
    if not isinstance(shard.op, graph_ir.Shard):
        return None
    src = shard.operands[0].owner
    if not isinstance(src, Instr) or not isinstance(src.op, graph_ir.Broadcast):
        return None
    before, after = shard.operands[0].type, shard.results[0].type
    assert isinstance(before, TensorType) and isinstance(after, TensorType)
    assert before.sharding is not None and after.sharding is not None
    changed = [d for d, (a, b) in enumerate(zip(before.sharding.dims, after.sharding.dims))
               if a != b]
    return src if all(_stretched(src, d) for d in changed) else None


def sink_shards(fn: Function) -> Function:
    """``fn`` (placed) with every ``graph.shard`` of a broadcast along the dims it
    stretches replaced by a broadcast placed as the shard's result; in place."""
    body = fn.body
    for instr in list(body.instrs):
        src = _sinkable(instr)
        if src is None:
            continue
        new = Instr(src.op, list(src.operands), [], [], src.loc)
        new.results = [Value(instr.results[0].type, new, instr.results[0].hint)]
        new.parent = body
        body.instrs[body.instrs.index(instr)] = new
        replace_all_uses(body, instr.results[0], new.results[0])
    eliminate_dead(body)
    return fn


__all__ = ["sink_shards"]
