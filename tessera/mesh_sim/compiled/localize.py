"""One device's view of a placed Graph IR function: local types, and the segments
between collectives as unplaced graph functions on the device's blocks.

A value placed on a mesh is held by each device as the block its placement gives it
(``numpy.array_split`` pieces of the sharded dims, :func:`device_slices`); a partial
value as that block's summand or candidate. Devices whose blocks of every value have
the same shapes run the same kernels (:func:`device_groups`). An op on blocks is the
op with the attributes that name global sizes rewritten to the block's
(:data:`~..spmd.local.LOCALIZE`: reshape and broadcast shapes, whole-dim slice and
embed bounds), as the mesh simulator applies it; a sharded constant is cut to the
device's piece.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.sharding import device_slices
from tessera.errors import UnsupportedError
from tessera.ir.core import Block, Function, Instr, IRRegion, Op, Value, clone_block, walk
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import Dense, TensorType
from tessera.mesh_sim.spmd.local import LOCALIZE

Shape = tuple[int, ...]


def _slices(t: TensorType, mesh: Mesh, device: int) -> tuple[slice, ...]:
    assert t.sharding is not None
    return device_slices(t.sharding.dims, [int(n) for n in t.shape],  # type: ignore[arg-type]
                         mesh, device)


def local_type(t: TensorType, mesh: Mesh, device: int) -> TensorType:
    """The type of ``device``'s block of a value of placed type ``t``."""
    if t.sharding is None:
        return t
    return TensorType(tuple(s.stop - s.start for s in _slices(t, mesh, device)), t.element)


def _values(fn: Function) -> list[Value]:
    return list(fn.args) + [r for instr in walk(fn.body) for r in instr.results]


def device_groups(fn: Function, mesh: Mesh) -> list[tuple[int, ...]]:
    """The devices of ``mesh`` grouped by the shapes of their blocks of every value of
    ``fn``, each group in device order, groups in the order of their first device."""
    groups: dict[tuple[Shape, ...], list[int]] = {}
    values = [v for v in _values(fn) if isinstance(v.type, TensorType)]
    for d in range(mesh.size):
        key = tuple(tuple(local_type(v.type, mesh, d).shape)  # type: ignore[arg-type]
                    for v in values)
        groups.setdefault(key, []).append(d)  # type: ignore[arg-type]
    for shapes, devices in groups.items():
        for v, shape in zip(values, shapes):
            if 0 in shape and 0 not in v.type.shape:  # type: ignore[attr-defined]
                raise UnsupportedError(
                    f"device {devices[0]} holds an empty block {list(shape)} of a "
                    f"{v.type}: the scheduled program needs a piece on every device",
                    loc=v.owner.loc if isinstance(v.owner, Instr) else None,
                    hint="use backend='interp', or shard over fewer devices")
    return [tuple(ds) for ds in groups.values()]


def local_op(instr: Instr, mesh: Mesh, device: int) -> Op:
    """The op ``device`` applies to its blocks of ``instr``'s operands."""
    op = instr.op
    result = instr.results[0].type if instr.results else None
    if isinstance(op, graph_ir.Constant) and isinstance(result, TensorType) and \
            result.sharding is not None:
        return graph_ir.Constant(Dense(op.value.array[_slices(result, mesh, device)]),
                                 op.element)
    if type(op) not in LOCALIZE or not isinstance(result, TensorType):
        return op
    local = [tuple(local_type(v.type, mesh, device).shape)  # type: ignore[arg-type]
             for v in instr.operands]
    whole = [tuple(v.type.shape) for v in instr.operands]  # type: ignore[attr-defined]
    out = tuple(local_type(result, mesh, device).shape)
    return LOCALIZE[type(op)](op, local, whole, out)  # type: ignore[arg-type]


def local_function(name: str, instrs: Sequence[Instr], inputs: Sequence[Value],
                   outputs: Sequence[Value], mesh: Mesh, device: int) -> Function:
    """The graph function ``device`` runs for ``instrs`` (placed, in order): it takes
    its blocks of ``inputs`` and returns its blocks of ``outputs``."""
    body = Block()
    env: dict[Value, Value] = {}
    for v in inputs:
        assert isinstance(v.type, TensorType)
        env[v] = body.add_arg(local_type(v.type, mesh, device), v.hint)
    for instr in instrs:
        regions = [IRRegion([clone_block(b, dict(env)) for b in r.blocks])
                   for r in instr.regions]
        copy = Instr(local_op(instr, mesh, device), [env[v] for v in instr.operands], [],
                     regions, instr.loc)
        copy.results = [Value(local_type(r.type, mesh, device), copy, r.hint)  # type: ignore[arg-type]
                        for r in instr.results]
        env.update(zip(instr.results, copy.results))
        body.append(copy)
    loc = instrs[-1].loc
    body.append(Instr(graph_ir.Return(), [env[v] for v in outputs], [], [], loc))
    return Function(name, body, [env[v].type for v in outputs], "graph.func", {}, loc)


__all__ = ["device_groups", "local_function", "local_op", "local_type"]
