"""``ts.*`` operators called on DistTensors outside ``@ts.jit``.

``Y = ts.gemm(X, W)`` with distributed operands builds a one-op function, places it
(the shard-propagation pass, so the collectives it needs are inserted as under
``jit``) and runs it on the operands' mesh. The result is a DistTensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.dist.core.tensor import DistTensor
from tessera.errors import Loc
from tessera.ir.core import Block, Builder, Function, IRRegion, Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.sharding.propagation import propagate_function
from tessera.ir.types import TensorType
from tessera.ir.verifier import verify_function
from tessera.mesh_sim.spmd.args import one_mesh, to_dist
from tessera.mesh_sim.spmd.execute import run_placed


def eager_function(op: Op, types: Sequence[TensorType], *, loc: Loc,
                   regions: Sequence[IRRegion] = (),
                   result_types: Sequence[Any] | None = None) -> Function:
    """The placed one-op function ``op(args...)`` for operands of ``types``."""
    block = Block()
    args = [block.add_arg(t, f"x{k}") for k, t in enumerate(types)]
    builder = Builder(block)
    plain = None if result_types is None else [t.unplaced() for t in result_types]
    results = builder.create(op, args, loc=loc, regions=regions, result_types=plain)
    builder.create(graph_ir.Return(), results, loc=loc)
    fn = Function(op.name.replace(".", "_"), block, [r.type for r in results], loc=loc)
    propagate_function(fn)
    verify_function(fn)
    return fn


def run_eager(op: Op, operands: Sequence[Any], *, loc: Loc, regions: Sequence[IRRegion] = (),
              result_types: Sequence[Any] | None = None) -> list[DistTensor]:
    """Apply ``op`` to operands of which at least one is distributed."""
    mesh = one_mesh(operands)
    assert mesh is not None
    fn = eager_function(op, [o.type for o in operands], loc=loc, regions=regions,
                        result_types=result_types)
    return run_placed(fn, [to_dist(o, mesh) for o in operands])


__all__ = ["eager_function", "run_eager"]
