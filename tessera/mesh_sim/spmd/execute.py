"""Running a placed Graph IR function on a simulated mesh, SPMD-style.

``run_placed(fn, args, mode)`` walks the instructions in order. Collectives run on the
whole DistTensor (:mod:`.collect`); every other op runs blockwise on local shards
(:mod:`.local`), one block per distinct shard, devices in index order. Values are freed
after their last use. The results are DistTensors whose ``np.asarray`` is the global
value; in exact mode that value is bit for bit the value of the same program on one
device (docs/distributed.md says precisely when it is not).

``run_distributed`` is the entry of ``@ts.jit`` and ``ts.grad``: it puts every argument
on the one mesh (plain arrays replicated, shared), places the function if it is not
placed yet (the shard-propagation pass), and runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.sharding import ShardSpec
from tessera.dist.core.tensor import DistTensor
from tessera.errors import UNKNOWN_LOC, InterpretError, Loc, MeshError
from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.transforms.sharding.propagation import propagate_function
from tessera.ir.types import TensorType
from tessera.ir.verifier import verify_function
from tessera.mesh_sim.collectives import relayout
from tessera.mesh_sim.spmd.args import DistArg, mesh_pairs, one_mesh, sharding_of, to_dist
from tessera.mesh_sim.spmd.collect import COLLECTIVES, run_collective
from tessera.mesh_sim.spmd.local import run_local
from tessera.mesh_sim.spmd.pending import Pending
from tessera.progress import ProgressBar, progress


def _loc(instr: Instr) -> Loc | None:
    return None if instr.loc == UNKNOWN_LOC else instr.loc


def _last_uses(block: Block) -> dict[int, list[Value]]:
    last: dict[Value, int] = {}
    for k, instr in enumerate(block.instrs):
        for inner in walk(instr):
            for v in inner.operands:
                last[v] = k
    out: dict[int, list[Value]] = {}
    for v, k in last.items():
        out.setdefault(k, []).append(v)
    return out


def _run_block(block: Block, args: Sequence[Any], mesh: Mesh, mode: str,
               bar: ProgressBar | None = None) -> list[Any]:
    env: dict[Value, Any] = dict(zip(block.args, args))
    last = _last_uses(block)
    counter = 0
    for k, instr in enumerate(block.instrs):
        if bar is not None:
            bar.update(1)
        values = [env[v] for v in instr.operands]
        op = instr.op
        if op.terminator:
            return values
        result = instr.results[0].type if instr.results else None
        if isinstance(op, graph_ir.Custom):
            outs = _run_block(instr.regions[0].block, values, mesh, mode)
        elif type(op) in COLLECTIVES:
            assert isinstance(result, TensorType)
            outs = [run_collective(op, values[0], result)]
        else:
            assert isinstance(result, TensorType) and len(instr.results) == 1
            if any(isinstance(v, Pending) for v in values):
                raise InterpretError(f"{op.name} reads a partial sum that no collective "
                                     "completed", loc=_loc(instr),
                                     hint="run the shard-propagation pass first")
            outs = [run_local(op, values, [v.type for v in instr.operands], result, mesh,
                              mode, counter=counter, loc=_loc(instr))]
            counter += result.size
        env.update(zip(instr.results, outs))
        for v in last.get(k, ()):
            if v not in block.args:
                env.pop(v, None)
    raise InterpretError("a block ends without a terminator", hint="verify the function")


def run_placed(fn: Function, args: Sequence[DistTensor], mode: str = "exact"
               ) -> list[DistTensor]:
    """Run a placed function on DistTensors placed as its argument types say."""
    if not args:
        raise MeshError(f"@{fn.name} has no distributed argument to take a mesh from",
                        hint="pass at least one DistTensor")
    mesh = args[0].mesh
    for k, (a, t) in enumerate(zip(args, (p.type for p in fn.args))):
        if not isinstance(t, TensorType) or t.sharding != sharding_of(a) or \
                tuple(t.shape) != a.shape:
            raise MeshError(f"argument {k} of @{fn.name} is {a!r}, its type is {t}",
                            hint="pass arguments placed as the function was traced")
    if mesh_pairs(mesh) != (fn.args[0].type.sharding.mesh  # type: ignore[attr-defined]
                            if fn.args else mesh_pairs(mesh)):
        raise MeshError(f"@{fn.name} was placed on another mesh than {mesh!r}")
    with progress(f"mesh simulation @{fn.name}", len(fn.body.instrs), unit="op") as bar:
        outs = _run_block(fn.body, list(args), mesh, mode, bar)
    if any(isinstance(o, Pending) for o in outs):
        raise InterpretError(f"@{fn.name} returns a partial sum that no collective completed",
                             hint="run the shard-propagation pass first")
    return outs


def _placed(fn: Function) -> bool:
    types = [a.type for a in fn.args] + [r.type for i in walk(fn.body) for r in i.results]
    return all(isinstance(t, TensorType) and t.sharding is not None for t in types)


def run_distributed(fn: Function, inputs: Sequence[Any], mode: str) -> list[DistTensor]:
    """Run ``fn`` on a mesh: the entry point of ``@ts.jit`` and ``ts.grad``."""
    return run_placed(fn, place_arguments(fn, inputs), mode)


def place_arguments(fn: Function, inputs: Sequence[Any]) -> list[DistTensor]:
    """Every input as a DistTensor on the one mesh (plain arrays replicated, or laid
    out as ``fn`` expects), with ``fn`` placed for them if it is not placed yet."""
    mesh = one_mesh(inputs)
    assert mesh is not None
    args = [to_dist(x, mesh) for x in inputs]
    for k, (arg, a) in enumerate(zip(fn.args, args)):
        want = arg.type.sharding if isinstance(arg.type, TensorType) else None
        if want is None:
            arg.type = arg.type.placed(sharding_of(a))  # type: ignore[attr-defined]
        elif not isinstance(inputs[k], (DistArg, DistTensor)) and not want.partial:
            # a plain array (a cotangent, say) laid out as the function expects: views
            args[k] = relayout(a, ShardSpec.from_dim_axes(want.dims))
    if not _placed(fn):
        propagate_function(fn)
        verify_function(fn)
    return args


__all__ = ["place_arguments", "run_distributed", "run_placed"]
