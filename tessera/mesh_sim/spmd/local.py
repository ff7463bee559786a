"""One op on every distinct block of its result, through the Graph IR interpreter.

The result's placement decides which blocks exist: one per combination of coordinates
on the axes that shard it or hold summands of it; devices along the other axes hold
replicas and share the block (it is computed once, as the core shares replicated
arrays). A block is computed on the device that first holds it, from that device's
operand blocks, by the interpreter rule of a *localized* op: the op with the
attributes that name global sizes rewritten to the block's (``reshape`` and
``broadcast`` shapes, whole-dim ``slice`` and ``embed`` bounds).

Results partial over an axis (a matmul over a sharded contraction dim, a sum over a
sharded dim) are computed per device as summands in fast mode, as a GPU would; in
exact mode they are kept exact and unevaluated (:mod:`.pending`). A device whose
shard of a dim reduced by max or min is empty (more devices than elements) holds the
op's identity as its candidate (``reduce.identity``), which never wins the
combination. The blocks of a 2-D matmul that share an operand block are computed
together (:mod:`.matmul_blocks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.tensor import BlockKey, DistTensor
from tessera.errors import Loc
from tessera.interp.graph import run_op
from tessera.ir.core import Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.mesh_sim.blocks import flat_offset
from tessera.mesh_sim.reduce import identity
from tessera.mesh_sim.spmd.matmul_blocks import grouped_matmul
from tessera.numerics import accum_of, convert, storage_of

Shape = tuple[int, ...]
Localizer = Callable[[Any, Sequence[Shape], Sequence[Shape], Shape], Op]


def _reshape(
    op: graph_ir.Reshape, local: Sequence[Shape], whole: Sequence[Shape], out: Shape
) -> Op:
    return graph_ir.Reshape(out)


def _broadcast(op: graph_ir.Broadcast, local: Sequence[Shape], whole: Sequence[Shape],
               out: Shape) -> Op:
    return graph_ir.Broadcast(out)


def _slice(op: graph_ir.Slice, local: Sequence[Shape], whole: Sequence[Shape], out: Shape) -> Op:
    # A sharded dim is sliced whole (the placement rule sees to it): keep the block.
    cut = [(lo, hi, st) if n == m else (0, n, 1)
           for lo, hi, st, n, m in zip(op.starts, op.stops, op.steps, local[0], whole[0])]
    return graph_ir.Slice(*(tuple(c[i] for c in cut) for i in range(3)))


def _embed(op: graph_ir.Embed, local: Sequence[Shape], whole: Sequence[Shape], out: Shape) -> Op:
    place = [(lo, st) if n == m else (0, 1)
             for lo, st, n, m in zip(op.starts, op.steps, out, op.shape)]
    return graph_ir.Embed(out, tuple(p[0] for p in place), tuple(p[1] for p in place))


#: op class -> the op a device applies to its blocks (absent: the op itself)
LOCALIZE: dict[type, Localizer] = {graph_ir.Reshape: _reshape, graph_ir.Broadcast: _broadcast,
                                   graph_ir.Slice: _slice, graph_ir.Embed: _embed}


def _fast_mean(op: graph_ir.Mean, x: np.ndarray, t: TensorType, whole: Shape) -> np.ndarray:
    axes = op.reduced_axes(len(whole))
    acc = accum_of(t.element).np_dtype
    return np.sum(x.astype(acc), axis=axes, keepdims=op.keepdims) / math.prod(
        whole[a] for a in axes)


def _fast_mse(op: graph_ir.Mse, a: np.ndarray, b: np.ndarray, t: TensorType, whole: Shape
              ) -> np.ndarray:
    acc = accum_of(t.element).np_dtype
    d = a.astype(acc) - b.astype(acc)
    return np.sum(d * d) / max(math.prod(whole), 1)


def _no_candidate(op: graph_ir.Reduce, local: Shape, whole: Shape) -> bool:
    """True when a device's block of a max/min operand is empty along a reduced dim that
    is not empty globally: its shard of that dim is empty (more devices than
    elements), so it has no candidate, and contributes the op's identity instead."""
    axes = op.reduced_axes(len(whole)) if whole else ()
    return any(local[a] == 0 for a in axes) and all(whole[a] for a in axes)


def _block(op: Op, arrays: list[np.ndarray], in_types: Sequence[TensorType],
           result: TensorType, out: Shape, mode: str, partial: bool, counter: int,
           loc: Loc | None) -> np.ndarray:
    whole = [tuple(t.shape) for t in in_types]
    if partial and isinstance(op, graph_ir.Mean):  # a summand divides by the global count
        return convert(_fast_mean(op, arrays[0], in_types[0], whole[0]), result.element)
    if partial and isinstance(op, graph_ir.Mse):
        return convert(_fast_mse(op, *arrays, in_types[0], whole[0]), result.element)
    if isinstance(op, (graph_ir.Max, graph_ir.Min)) and _no_candidate(
        op, arrays[0].shape, whole[0]
    ):
        return np.full(out, identity(result.element, "max" if isinstance(op, graph_ir.Max)
                                     else "min"), storage_of(result.element).np_dtype)
    local = [a.shape for a in arrays]
    lop = LOCALIZE[type(op)](op, local, whole, out) if type(op) in LOCALIZE else op
    types = [TensorType(a.shape, t.element) for a, t in zip(arrays, in_types)]
    return run_op(lop, arrays, types, [TensorType(out, result.element)], mode=mode,
                  counter_offset=counter, loc=loc)[0]


def run_local(op: Op, operands: Sequence[DistTensor], in_types: Sequence[TensorType],
              result: TensorType, mesh: Mesh, mode: str, *, counter: int = 0,
              loc: Loc | None = None) -> Any:
    """``op`` applied blockwise: a DistTensor placed as ``result`` says (or, in exact
    mode, a :class:`~.pending.Pending` for a partial sum)."""
    s = result.sharding
    assert s is not None
    sums = [a for a, kind in s.partial if kind == "sum"]
    if sums and mode == "exact":
        from tessera.mesh_sim.spmd.pending import Pending

        return Pending(op, list(operands), list(in_types), result, mesh, loc)
    shape = tuple(int(n) for n in result.shape)
    shell = DistTensor(shape, result.element, mesh, s.dims, partial=s.partial_axes)
    blocks: dict[BlockKey, np.ndarray] = {}
    if isinstance(op, graph_ir.MatMul) and len(shape) == 2 and not s.partial:
        blocks = grouped_matmul(*operands, shell, lambda x, y, out: _block(
            op, [x, y], in_types, result, out, mode, False, counter, loc))
    for key in shell.block_keys():
        if key in blocks:
            continue
        device = mesh.index(key)
        arrays = [o.block(o.block_key(device)) for o in operands]
        region = shell.region(key)
        out = tuple(r.stop - r.start for r in region)
        blocks[key] = _block(op, arrays, in_types, result, out, mode, bool(sums),
                             counter + flat_offset(region, shape), loc)
    if len(blocks) == 1 and not s.partial:  # one block is the global value itself
        return DistTensor(shape, result.element, mesh, s.dims,
                          global_array=next(iter(blocks.values())))
    return DistTensor(shape, result.element, mesh, s.dims, partial=s.partial_axes,
                      source=blocks.__getitem__)


__all__ = ["LOCALIZE", "run_local"]
